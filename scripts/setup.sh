#!/usr/bin/env bash
# Installs every Debian package tensord needs to build and test. Idempotent, non-interactive,
# must run as root (or with sudo available). Runs `apt-get update` only when a package is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries
  libfmt-dev libspdlog-dev libcli11-dev libtomlplusplus-dev nlohmann-json3-dev libprotobuf-dev protobuf-compiler libonnx-dev
  libgrpc++-dev protobuf-compiler-grpc libdnnl-dev
  # examples/train_digits.cpp reads the digits CSV (gzip)
  zlib1g-dev
  # `tensord serve --http` (status page, /metrics): cpp-httplib, built with OpenSSL (HTTPS)
  libcpp-httplib-dev libssl-dev
  # tests
  libgtest-dev libgmock-dev python3 python3-numpy python3-torch python3-torchvision python3-onnx
  # the Python package (python/) and its tests
  pybind11-dev python3-pytest python3-sklearn
  # TLS tests: a throwaway CA and certificates (tests/rpc/test_security_auth.cpp)
  openssl
  # the status page test: loads / in headless Chromium and keeps a screenshot
  # (tests/rpc/test_http_status.cpp; fonts so that the screenshot has text)
  chromium fonts-dejavu-core
  # benchmarks: Google Benchmark (bench/micro.cpp), GNU time (peak RSS in bench/compare.py),
  # OpenBLAS (its OpenMP build: the runtime PyTorch uses too): the BLAS of PyTorch's and NumPy's
  # matrix products (bench/train.py's peer; with Debian's reference libblas3 alone PyTorch's mm
  # runs at about 2 GFLOP/s)
  libbenchmark-dev time libopenblas0-openmp
  # sanitizer and fuzz tier (scripts/sanitize.sh): clang with its sanitizer and libFuzzer
  # runtimes (libclang-rt-14-dev), and clang's OpenMP (libomp-14-dev) for the cpu backend
  clang libclang-rt-14-dev libomp-14-dev
  # the OpenCL backend (src/backends/opencl): headers, the ICD loader, PoCL (the CPU device the
  # tests and CI run on), clinfo, CLBlast (GEMM)
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo libclblast-dev
  # the linalg ops (src/backends/cpu/kernels/linalg.cpp): LAPACKE over the system LAPACK;
  # CBLAS (libblas-dev, over OpenBLAS above) for float64 MatMul/Gemm (kernels/fast_dgemm.cpp)
  liblapacke-dev libblas-dev
  # the cluster (src/cluster, `mpirun ... tensord serve --cluster`): OpenMPI
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The Node.js client's tests: nodejs and npm, unless both are on PATH already (NodeSource's
# nodejs bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  for p in nodejs npm; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
fi

# Its npm dependencies, from clients/node/package-lock.json (again only when the lock changed).
# A failure is a warning: the node_client test then skips and says why.
npm_deps() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/clients/node"
  [ -f "$dir/package-lock.json" ] || return 0
  if [ ! -f "$dir/node_modules/.package-lock.json" ] ||
     [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "setup: npm ci in clients/node"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) ||
      echo "setup: warning: npm ci failed in clients/node; the node_client test will skip"
  fi
}

# The ONNX Runtime peer of `tensord bench --vs` and bench/compare.py (bench/package-lock.json).
# onnxruntime-node ships its CPU binaries; ONNXRUNTIME_NODE_INSTALL=skip stops its install script
# from downloading anything else. A failure is a warning: the peer then reports itself unavailable.
bench_npm_deps() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bench"
  [ -f "$dir/package-lock.json" ] || return 0
  if [ ! -f "$dir/node_modules/.package-lock.json" ] ||
     [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "setup: npm ci in bench"
    (cd "$dir" && ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error) ||
      echo "setup: warning: npm ci failed in bench; the onnxruntime peer will say it is unavailable"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  npm_deps
  bench_npm_deps
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
npm_deps
bench_npm_deps
