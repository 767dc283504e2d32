#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU and no package registry (issue 12).
#
#   scripts/gpu-check.sh pack            # here (Debian, the build machine): build + bundle
#   scripts/gpu-check.sh run LOGDIR      # there (the GPU machine): unpack the bundle and check
#   scripts/gpu-check.sh LOGDIR          # both in turn (a dry run on a machine without a GPU)
#
# pack: builds tensord and cuda_tests (TENSORD_CUDA=ON: CUDA headers only, no CUDA library is
# linked) and writes build/gpu-bundle.tar.gz (at most 64 MiB; override with GPU_BUNDLE): bin/
# (tensord, cuda_tests), lib/ (every shared library they need but the CUDA ones: gRPC,
# protobuf, oneDNN, OpenSSL, libstdc++, glibc and its loader), the ONNX node tests, the bench
# peers and scripts/gpu_check_torch.py.
#
# run: uses the CUDA libraries present on the GPU machine — libcuda.so.1 from the driver; NVRTC,
# cuBLAS and cuDNN 9 (libcudnn.so.9: Conv and pooling; without it they run as generated kernels)
# from the CUDA installation (ldconfig, LD_LIBRARY_PATH, /usr/local/cuda/lib64) or
# from PyTorch's nvidia wheels (their lib folders are put into TENSORD_CUDA_LIB_DIR; see
# src/backends/cuda/cuda_api.h for the full search order). In at most 6 minutes it runs:
# `tensord devices`; the ONNX node tests on cuda:0 (and cpu:0 to compare: their LSTM/RNN cases
# run on cudnnRNNForward, their float16 cases as generated float16 kernels); the copy tests,
# GB/s and the GPU kernel tests (cuda_tests: float16/bfloat16 chains, reductions, Softmax and
# LayerNormalization, cuDNN's RNN/LSTM/GRU and cuBLASLt's bias/ReLU/GELU epilogues against
# cpu:0, printing the counts of cudnnRNNForward calls and of cuBLASLt fused calls and fallbacks); `tensord bench` of mobilenet_v2 and resnet50 at batch 1 and 64 on cuda:0
# (CUDA graphs on, as by default; mobilenet_v2 at batch 1 once more with TENSORD_CUDA_GRAPHS=0)
# with PyTorch eager fp32 on the same GPU side by side (gpu_check_torch.py: torchvision models,
# random weights, and PyTorch's own copy GB/s); a broker run with a same-host client using CUDA
# IPC (`tensord serve` on a unix socket, and cuda_tests' CudaIpc.* as its client: GPU buffers
# handed over by IPC handle, computed on, read back into a GPU buffer, with GB/s). It prints one
# summary and writes every log into LOGDIR. Each step has its own time limit
# (15+95+40+4x32+15+20+45 s: 6 minutes at worst). A step
# that cannot run says why in the summary; the script exits 0 unless it could not start at all.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUNDLE=${GPU_BUNDLE:-$ROOT/build/gpu-bundle.tar.gz}
LIMIT_BYTES=$((64 << 20))

pack() {
  local build=${BUILD_DIR:-build}
  if [ ! -f "$build/build.ninja" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTENSORD_CUDA=ON \
      -DPython3_EXECUTABLE=/usr/bin/python3 || return 1
  fi
  grep -q '^TENSORD_CUDA:BOOL=ON' "$build/CMakeCache.txt" || {
    echo "gpu-check: $build was configured without TENSORD_CUDA (cmake -DTENSORD_CUDA=ON $build)" >&2
    return 1
  }
  cmake --build "$build" -j"$(nproc)" --target tensord_cli cuda_tests || return 1
  local stage
  stage=$(mktemp -d /tmp/tensord-gpu-bundle.XXXXXX)
  mkdir -p "$stage/bin" "$stage/lib" "$stage/peers" "$stage/onnx-node-tests"
  cp "$build/tensord" "$build/tests/cuda_tests" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/"* 2>/dev/null || true
  # Every shared library but the CUDA ones (none are linked; listed for safety) and the vDSO.
  for f in "$stage/bin/"*; do
    ldd "$f" | awk '/=>/ {print $3} /ld-linux/ {print $1}'
  done | sort -u | grep '^/' | grep -v -E 'lib(cuda|cudart|cublas|cublasLt|nvrtc|cudnn)\.' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  strip --strip-unneeded "$stage/lib/"*.so* 2>/dev/null || true
  cp bench/peers/* "$stage/peers/"
  cp scripts/gpu_check_torch.py "$stage/"
  local tests=${TENSORD_ONNX_TESTS:-$ROOT/../shared/onnx-node-tests}
  [ -d "$tests/node" ] || tests=$build/onnx-node-tests
  if [ -d "$tests/node" ]; then cp -r "$tests/node" "$stage/onnx-node-tests/"; fi
  mkdir -p "$(dirname "$BUNDLE")"
  tar -C "$stage" -czf "$BUNDLE" . || return 1
  rm -rf "$stage"
  local size
  size=$(stat -c %s "$BUNDLE")
  echo "gpu-check: bundle $BUNDLE: $((size >> 20)) MiB (limit 64 MiB)"
  if [ "$size" -gt "$LIMIT_BYTES" ]; then
    echo "gpu-check: the bundle is over 64 MiB" >&2
    return 1
  fi
}

# timeout SECONDS NAME CMD...: runs CMD with its output in $LOG/NAME.log; returns its status.
step() {
  local secs=$1 name=$2
  shift 2
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$LOG/$name.log" 2>"$LOG/$name.err"
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - t0))" >>"$LOG/steps.txt"
  return $rc
}

run() {
  LOG=$(mkdir -p "$1" && cd "$1" && pwd) || return 1
  : >"$LOG/steps.txt"
  [ -f "$BUNDLE" ] || { echo "gpu-check: no bundle at $BUNDLE (run: scripts/gpu-check.sh pack)" >&2; return 1; }
  local B
  B=$(mktemp -d /tmp/tensord-gpu.XXXXXX)
  tar -C "$B" -xzf "$BUNDLE" || return 1
  # The bundle's libraries; its own loader (and glibc) only when the machine's cannot run tensord.
  export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local ldso
  ldso=$(ls "$B"/lib/ld-linux-x86-64.so.* 2>/dev/null | head -1)
  mkdir -p "$B/nativelib"
  for l in "$B"/lib/*; do
    case $(basename "$l") in libc.so.*|libm.so.*|ld-linux*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
      *) ln -s "$l" "$B/nativelib/";; esac
  done
  TENSORD=("$B/bin/tensord")
  CUDA_TESTS=("$B/bin/cuda_tests")
  if LD_LIBRARY_PATH="$B/nativelib" "$B/bin/tensord" --version >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$B/nativelib${LD_LIBRARY_PATH#$B/lib}"
  elif [ -n "$ldso" ]; then  # an older glibc here: the bundle's loader and glibc
    TENSORD=("$ldso" --library-path "$B/lib:${LD_LIBRARY_PATH#$B/lib:}" "$B/bin/tensord")
    CUDA_TESTS=("$ldso" --library-path "$B/lib:${LD_LIBRARY_PATH#$B/lib:}" "$B/bin/cuda_tests")
  fi
  # NVRTC and cuBLAS from PyTorch's wheels when the machine has no CUDA installation of its own.
  # The Python that has PyTorch (for its wheels' libraries and the side-by-side figures).
  py=python3
  for p in python3 /usr/bin/python3 /usr/local/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null; then py=$p; break; fi
  done
  local wheel_dirs
  wheel_dirs=$("$py" - <<'PY' 2>/dev/null
import glob, os
try:
    import nvidia
    roots = list(getattr(nvidia, "__path__", []))
except Exception:
    roots = []
print(":".join(sorted(d for r in roots for d in glob.glob(os.path.join(r, "*", "lib")))))
PY
)
  [ -n "$wheel_dirs" ] && export TENSORD_CUDA_LIB_DIR="${TENSORD_CUDA_LIB_DIR:+$TENSORD_CUDA_LIB_DIR:}$wheel_dirs"
  export TENSORD_KERNEL_CACHE="$B/kernel-cache" TENSORD_BENCH_PEERS="$B/peers" TENSORD_OPENCL=0
  {
    echo "host: $(hostname) $(uname -r)"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -8
    else
      echo "nvidia-smi: not installed"
    fi
    echo "TENSORD_CUDA_LIB_DIR=${TENSORD_CUDA_LIB_DIR:-}"
    echo "tensord: ${TENSORD[*]}"
  } >"$LOG/environment.txt"

  local t_start=$SECONDS
  # 1. devices (why there are none, on stderr).
  step 15 devices "${TENSORD[@]}" devices
  local has_gpu=0
  grep -q '^cuda:0 ' "$LOG/devices.log" && has_gpu=1
  # 2. conformance: the node tests on cuda:0 and, at the same time, cpu:0 (the reference).
  if [ $has_gpu = 1 ] && [ -d "$B/onnx-node-tests/node" ]; then
    step 95 conformance_cpu "${TENSORD[@]}" onnx-test "$B/onnx-node-tests/node" --device cpu:0 --json &
    local cpu_pid=$!
    step 95 conformance_cuda "${TENSORD[@]}" onnx-test "$B/onnx-node-tests/node" --device cuda:0 --json
    wait $cpu_pid
  fi
  # 3. copy tests, GPU kernel tests and GB/s; the NVRTC compile tests too.
  # (the NVRTC test of every node-test kernel is left to CI: the conformance run compiles them here)
  step 40 cuda_tests "${CUDA_TESTS[@]}" --gtest_color=no --gtest_filter="-CudaNvrtc.EveryKernel*:CudaIpc.ABroker*"
  # 3b. a broker on this host, and a client handing it GPU buffers by CUDA IPC (its GB/s).
  if [ $has_gpu = 1 ]; then
    local sock="$B/ipc-broker.sock"
    "${TENSORD[@]}" serve --listen "unix:$sock" >"$LOG/ipc_broker.log" 2>"$LOG/ipc_broker.err" &
    local broker_pid=$! i
    for i in $(seq 50); do grep -q "tensord serving on" "$LOG/ipc_broker.log" 2>/dev/null && break; sleep 0.2; done
    TENSORD_IPC_BROKER="unix:$sock" step 20 cuda_ipc "${CUDA_TESTS[@]}" --gtest_color=no \
      --gtest_filter="CudaIpc.*"
    kill "$broker_pid" 2>/dev/null; wait "$broker_pid" 2>/dev/null
  fi
  # 4. bench on cuda:0, and PyTorch on the same GPU.
  if [ $has_gpu = 1 ]; then
    for net in mobilenet_v2 resnet50; do
      for b in 1 64; do
        local n=$((b == 1 ? 100 : 128))
        step 32 "bench_${net}_b$b" "${TENSORD[@]}" bench "$net" --device cuda:0 --batch-size $b \
          --examples $n --warmup $((b == 1 ? 10 : 64)) --json
      done
    done
    TENSORD_CUDA_GRAPHS=0 step 15 bench_mobilenet_v2_b1_nographs "${TENSORD[@]}" bench mobilenet_v2 \
      --device cuda:0 --batch-size 1 --examples 100 --warmup 10 --json
  fi
  step 45 torch "$py" "$B/gpu_check_torch.py" --batches 1,64 --seconds 4
  echo "total seconds=$((SECONDS - t_start))" >>"$LOG/steps.txt"
  summary "$LOG" | tee "$LOG/summary.txt"
  rm -rf "$B"
}

summary() {
  "${py:-python3}" - "$1" <<'PY'
import json, os, re, sys
log = sys.argv[1]
def read(name):
    try:
        return open(os.path.join(log, name), errors="replace").read()
    except OSError:
        return ""
def js(name):
    t = read(name)
    try:
        return json.loads(t[t.index("{"):]) if "{" in t else None
    except ValueError:
        return None
print("== tensord gpu-check ==")
env = read("environment.txt").splitlines()
print("\n".join("  " + l for l in env[:3]))
dev = read("devices.log").strip()
print("devices:\n" + "\n".join("  " + l for l in dev.splitlines()) if dev else "devices: none")
err = read("devices.err").strip()
if err:
    print("  (stderr) " + err.replace("\n", "\n  (stderr) "))
if not any(l.startswith("cuda:0 ") for l in dev.splitlines()):
    print("  no cuda:0 here: conformance and bench on the GPU were not run")
for d in ("cuda", "cpu"):
    c = js(f"conformance_{d}.log")
    if c:
        print(f"conformance {c['device']}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped ({c['seconds']:.0f} s)")
    elif os.path.exists(os.path.join(log, f"conformance_{d}.log")):
        print(f"conformance {d}:0: did not finish (see conformance_{d}.err)")
cuda = js("conformance_cuda.log"); cpu = js("conformance_cpu.log")
if cuda and cpu:
    cpu_pass = {t["name"] for t in cpu["tests"] if t.get("verdict") == "passed"}
    worse = [t["name"] for t in cuda["tests"] if t.get("verdict") != "passed" and t["name"] in cpu_pass]
    print(f"  passed on cpu:0 but not on cuda:0: {len(worse)}" + (": " + ", ".join(worse[:20]) if worse else ""))
t = read("cuda_tests.log")
m = re.findall(r"\[  (PASSED|FAILED)  \] (\d+) test", t)
skipped = re.findall(r"\[  SKIPPED \] (\d+) test", t)
print("cuda_tests: " + (", ".join(f"{n} {w.lower()}" for w, n in m) + (f", {skipped[0]} skipped" if skipped else "") if m else "did not finish"))
for l in t.splitlines():
    if l.startswith("[ cuda ]") or l.startswith("[  FAILED  ] Cuda"):
        print("  " + l)
torch = js("torch.log") or {}
tn = torch.get("nets", {})
print("bench (ms per example, tensord cuda:0 | PyTorch eager fp32):")
for net in ("mobilenet_v2", "resnet50"):
    for b in (1, 64):
        r = js(f"bench_{net}_b{b}.log")
        ours = f"{r['per_example_s'] * 1e3:.3f}" if r and "per_example_s" in r else "n/a"
        theirs = next((f"{x['ms_per_example']:.3f}" for x in tn.get(net, []) if x["batch"] == b), "n/a")
        print(f"  {net:13s} b{b:<3d} {ours:>9s} | {theirs:>9s}")
r = js("bench_mobilenet_v2_b1_nographs.log")
if r and "per_example_s" in r:
    print(f"  mobilenet_v2  b1 without CUDA graphs (TENSORD_CUDA_GRAPHS=0): {r['per_example_s'] * 1e3:.3f}")
if torch.get("copies"):
    print("PyTorch copies (GB/s): " + ", ".join(f"{k[:-4]} {v:.1f}" for k, v in torch["copies"].items()))
elif torch:
    print("PyTorch: " + torch.get("reason", "no figures"))
t = read("cuda_ipc.log")
if not t:
    print("broker with a same-host client over CUDA IPC: not run (no cuda:0)")
else:
    m = re.findall(r"\[  (PASSED|FAILED)  \] (\d+) test", t)
    skipped = re.findall(r"\[  SKIPPED \] (\d+) test", t)
    print("broker with a same-host client over CUDA IPC (CudaIpc.*): " + (", ".join(f"{n} {w.lower()}" for w, n in m) + (f", {skipped[0]} skipped" if skipped else "") if m else "did not finish"))
    for l in t.splitlines():
        if l.startswith("[ cuda ]") or l.startswith("[  FAILED  ] CudaIpc"):
            print("  " + l)
print("steps: " + "; ".join(read("steps.txt").split("\n")).strip("; "))
PY
}

case ${1:-} in
  pack) pack ;;
  run) [ $# -eq 2 ] || { sed -n 2,6p "$0"; exit 2; }; run "$2" ;;
  ""|-h|--help) sed -n 2,24p "$0"; exit 2 ;;
  *) { [ -f "$BUNDLE" ] && [ -z "${GPU_CHECK_REPACK:-}" ] || pack; } && run "$1" ;;
esac
