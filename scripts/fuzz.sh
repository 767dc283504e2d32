#!/usr/bin/env bash
# Fuzzes the ONNX importer with libFuzzer (clang + ASan/UBSan) for SECONDS (default 600).
# New interesting inputs go to build-fuzz/corpus; crashers are written as build-fuzz/crash-*:
# copy them into tests/fuzz/corpus/ so every normal build replays them (fuzz_corpus_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
bash scripts/setup.sh
if ! dpkg-query -W -f='${Status}' clang libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed"; then
  apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev
fi
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTENSORD_FUZZ=ON -DPython3_EXECUTABLE=/usr/bin/python3
fi
cmake --build build-fuzz --target fuzz_onnx_import
mkdir -p build-fuzz/corpus
build-fuzz/tests/fuzz_onnx_import build-fuzz/corpus tests/fuzz/corpus \
  -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=4096 -max_len=65536 \
  -artifact_prefix=build-fuzz/
