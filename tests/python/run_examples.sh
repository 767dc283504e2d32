#!/usr/bin/env bash
# ctest python_examples: every example in examples/python/ runs and checks its own results.
# usage: run_examples.sh PYTHON EXAMPLES_DIR
set -euo pipefail
for f in numpy_to_device two_models dlpack_torch; do
  echo "== $f"
  "$1" "$2/$f.py"
done
