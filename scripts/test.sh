#!/usr/bin/env bash
# README command 2: set up, build, and run every test tier from one build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage prints how long it took (CI's log shows where its time went).
bash scripts/setup.sh
echo "== test.sh: setup done at ${SECONDS} s"
bash scripts/build.sh
echo "== test.sh: build done at ${SECONDS} s"
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
echo "== test.sh: release tests done at ${SECONDS} s"
# The sanitizer and fuzzing tier (build-asan, build-tsan; see the script). TENSORD_SANITIZE_TIER=0
# skips it (a quick local run).
if [ "${TENSORD_SANITIZE_TIER:-1}" != 0 ]; then
  bash scripts/sanitize.sh
  echo "== test.sh: sanitizer tier done at ${SECONDS} s"
fi
