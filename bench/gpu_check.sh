#!/usr/bin/env bash
# One-shot GPU check of the runtime, for a machine with an NVIDIA GPU:
# configures and builds runtime/ with the CUDA executor (sm_80 and sm_90),
# runs the CUDA tests (which must run, not skip), then every runtime test,
# then the GPU benchmark (device-to-device memcpy vs executor apply) and
# prints its results. Arguments go to the benchmark (e.g. --layers=8).
#
# Needs cmake >= 3.20, a C++17 compiler, GoogleTest (libgtest-dev) and the
# CUDA toolkit (nvcc at $CMAKE_CUDA_COMPILER, default /usr/local/cuda/bin/nvcc).
# Build directory: $LOADPLAN_GPU_BUILD_DIR (default build-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."

build="${LOADPLAN_GPU_BUILD_DIR:-build-gpu}"
nvcc="${CMAKE_CUDA_COMPILER:-/usr/local/cuda/bin/nvcc}"
if [ ! -x "$nvcc" ]; then
  echo "gpu_check: no nvcc at $nvcc (set CMAKE_CUDA_COMPILER)" >&2
  exit 1
fi
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configure and build ($build)"
mkdir -p "$build"
cmake -S runtime -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLOADPLAN_RUNTIME_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES="80;90" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -q "CUDA executor ON" "$build/configure.log" ||
  { echo "gpu_check: the CUDA executor is not configured" >&2; exit 1; }
if [ ! -f "$build/tests/CTestTestfile.cmake" ]; then
  echo "gpu_check: GoogleTest not found; install libgtest-dev" >&2
  exit 1
fi
cmake --build "$build" -j "$(nproc)"

echo "== CUDA tests"
log="$build/cuda-tests.log"
"$build/tests/loadplan_runtime_cuda_tests" --gtest_brief=1 2>&1 | tee "$log"
if grep -q "SKIPPED" "$log"; then
  echo "gpu_check: CUDA tests skipped: the process sees no GPU" >&2
  exit 1
fi

echo "== all runtime tests"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" | tail -n 3

echo "== GPU benchmark"
"$build/bench/apply_cuda" "$@"
