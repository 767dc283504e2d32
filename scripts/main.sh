#!/usr/bin/env bash
# README command 1: set up, build, and run the main job on the embedded engine: plaidbench's
# benchmark of MobileNetV2 (1024 examples, batch 1), ending with a Correctness: PASS line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
"$BUILD_DIR/tensord" devices
"$BUILD_DIR/tensord" bench mobilenet_v2
