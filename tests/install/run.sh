#!/usr/bin/env bash
# ctest install_consumer: `cmake --install` into a temp prefix, then an out-of-tree program built
# with find_package(tensord) (shared and static) and with pkg-config, each run on the embedded
# engine and against the installed `tensord serve`; and the installed Python package imported
# by /usr/bin/python3 from the prefix; examples/ built out of the tree against the prefix.
# usage: run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
TMP=$(mktemp -d /tmp/tensord-install.XXXXXX)
BROKER_PID=
cleanup() { [ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
PREFIX=$TMP/prefix

cmake --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log"
test -f "$PREFIX/include/tensord/onnx.h"
test -f "$PREFIX/lib/cmake/tensord/tensordConfig.cmake"
test -f "$PREFIX/lib/pkgconfig/tensord.pc"
test -f "$PREFIX/lib/libtensord.a"
# bench --vs's peer scripts, found by the installed tensord from its own location.
test -f "$PREFIX/share/tensord/peers/torch.py" && test -f "$PREFIX/share/tensord/peers/onnxruntime.js"
SONAME=$(objdump -p "$PREFIX/lib/libtensord.so" | awk '/SONAME/ {print $2}')
[ "$SONAME" = "libtensord.so.0" ] || { echo "bad SONAME: $SONAME"; exit 1; }

/usr/bin/python3 - "$TMP/add.onnx" <<'PY'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
g = helper.make_graph([helper.make_node("Add", ["X", "X"], ["Y"])], "add", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
PY

# 1. CMake: find_package(tensord)
cmake -S "$SRC/tests/install" -B "$TMP/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_BUILD_RULE_MESSAGES=OFF >"$TMP/cmake.log" 2>&1 || { cat "$TMP/cmake.log"; exit 1; }
cmake --build "$TMP/cmake-build" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; exit 1; }
# 2. pkg-config
PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --exists tensord
c++ -o "$TMP/consumer_pc" "$SRC/tests/install/main.cpp" \
  $(PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig" pkg-config --cflags --libs tensord) \
  -Wl,-rpath,"$PREFIX/lib"
# Not `ldd | grep -q` under pipefail: grep quits at the first match and ldd, still writing,
# dies of SIGPIPE, which fails the pipeline although the line was there.
LDD=$(ldd "$TMP/consumer_pc")
grep -q "libtensord.so.0 => $PREFIX/lib" <<<"$LDD" || { echo "$LDD"; exit 1; }

# A broker from the installed tree.
SOCK=$TMP/broker.sock
TENSORD_CPU_DEVICES=2 "$PREFIX/bin/tensord" serve --listen "unix:$SOCK" >"$TMP/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 600); do grep -q "tensord serving on" "$TMP/broker.log" && break; sleep 0.1; done
grep -q "tensord serving on" "$TMP/broker.log" || { cat "$TMP/broker.log"; exit 1; }

for exe in "$TMP/cmake-build/consumer" "$TMP/cmake-build/consumer_static" "$TMP/consumer_pc"; do
  env -u TENSORD_ADDRESS "$exe" "$TMP/add.onnx"
  TENSORD_ADDRESS="unix:$SOCK" "$exe" "$TMP/add.onnx"
done

# 3. The Python package from the prefix (what `sudo cmake --install build` puts on the path
# of Debian's /usr/bin/python3 under /usr/local).
PYDIR=$(ls -d "$PREFIX"/lib/python3*/dist-packages)
cd "$TMP"
PYTHONPATH="$PYDIR" /usr/bin/python3 - "$PREFIX" "unix:$SOCK" <<'PY'
import sys, numpy as np, tensord as td
assert td.__file__.startswith(sys.argv[1]), td.__file__
for c in (td.Client(), td.connect(sys.argv[2])):
    x = td.asarray(np.arange(6.0).reshape(2, 3), client=c)
    assert (td.exp(x) @ x.T).shape == (2, 2)
    np.testing.assert_allclose((x * 2).sum(axis=1).numpy(), [6.0, 24.0])
print("python ok")
PY
# 4. The examples build out of the tree against the prefix (public headers only) and still
# match NumPy.
cmake -S "$SRC/examples" -B "$TMP/examples-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  >"$TMP/examples.log" 2>&1 || { cat "$TMP/examples.log"; exit 1; }
cmake --build "$TMP/examples-build" >>"$TMP/examples.log" 2>&1 || { cat "$TMP/examples.log"; exit 1; }
env -u TENSORD_ADDRESS /usr/bin/python3 "$SRC/tests/e2e/test_mlp_example.py" "$TMP/examples-build/mlp"
# 5. `bench --vs onnxruntime` from the prefix: without the npm package there, the peer says what
# to install where (not the checkout's `cd bench && npm ci`); with NODE_PATH it finds one.
ort_peer() {
  env -u TENSORD_ADDRESS "$@" "$PREFIX/bin/tensord" bench --model "$TMP/add.onnx" -n 2 \
    --warmup 0 --json --vs onnxruntime | /usr/bin/python3 -c \
    'import json, sys; p = json.load(sys.stdin)["peers"]["onnxruntime"]; print(p.get("reason", "available"))'
}
if command -v node >/dev/null; then
  WHY=$(ort_peer NODE_PATH=)
  grep -qF "npm install --prefix $PREFIX/share/tensord onnxruntime-node" <<<"$WHY" || { echo "$WHY"; exit 1; }
  if [ -d "$SRC/bench/node_modules/onnxruntime-node" ]; then
    WHY=$(ort_peer NODE_PATH="$SRC/bench/node_modules")
    [ "$WHY" = available ] || { echo "$WHY"; exit 1; }
  fi
fi
echo "install_consumer: all ok"
