#!/usr/bin/env bash
# README command 2: set up, build, and run every test tier from one build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
# The sanitizer and fuzzing tier (build-asan, build-tsan; see the script). TENSORD_SANITIZE_TIER=0
# skips it (a quick local run).
if [ "${TENSORD_SANITIZE_TIER:-1}" != 0 ]; then
  bash scripts/sanitize.sh
fi
