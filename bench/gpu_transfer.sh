#!/usr/bin/env bash
# One-shot GPU check of the transfers, for a machine with NVIDIA GPUs:
# configures and builds runtime/ with the CUDA executor and the NCCL
# transport, runs the NCCL transfer tests (the one-GPU test must run, not
# skip; with two GPUs or more, one sender and TP receivers run one per GPU),
# then every runtime test, then, where the repository's .venv has a CUDA
# torch and there are at least 3 GPUs, bench/transfer over NCCL: a TP=S
# trainer to a TP=R engine, one GPU per rank (S=2, R=4 with 6 GPUs; S=1,
# R=2 with 3). Arguments go to bench/transfer (e.g. --layers=24).
#
# Needs cmake >= 3.20, a C++17 compiler, GoogleTest (libgtest-dev), the CUDA
# toolkit with nccl.h (nvcc at $CMAKE_CUDA_COMPILER, default
# /usr/local/cuda/bin/nvcc) and libnccl.so.2 at run time. Build directory:
# $LOADPLAN_GPU_BUILD_DIR (default build-gpu-transfer).
set -euo pipefail
cd "$(dirname "$0")/.."

build="${LOADPLAN_GPU_BUILD_DIR:-build-gpu-transfer}"
nvcc="${CMAKE_CUDA_COMPILER:-/usr/local/cuda/bin/nvcc}"
if [ ! -x "$nvcc" ]; then
  echo "gpu_transfer: no nvcc at $nvcc (set CMAKE_CUDA_COMPILER)" >&2
  exit 1
fi
gpus=0
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== configure and build ($build)"
mkdir -p "$build"
cmake -S runtime -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLOADPLAN_RUNTIME_CUDA=ON -DLOADPLAN_RUNTIME_NCCL=ON \
  -DLOADPLAN_RUNTIME_BENCH=OFF -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DCMAKE_CUDA_ARCHITECTURES="80;90" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
grep -q "NCCL transport ON" "$build/configure.log" ||
  { echo "gpu_transfer: the NCCL transport is not configured" >&2; exit 1; }
if [ ! -f "$build/tests/CTestTestfile.cmake" ]; then
  echo "gpu_transfer: GoogleTest not found; install libgtest-dev" >&2
  exit 1
fi
cmake --build "$build" -j "$(nproc)"

echo "== NCCL transfer tests"
log="$build/nccl-tests.log"
"$build/tests/loadplan_runtime_cuda_tests" --gtest_filter='NcclTransfer.*' | tee "$log"
if grep -q "SKIPPED \] NcclTransfer.OneRankSendsToItselfForEveryEngine" "$log"; then
  echo "gpu_transfer: the NCCL test skipped (NCCL did not load or no GPU)" >&2
  exit 1
fi

echo "== all runtime tests"
ctest --test-dir "$build" --output-on-failure -j 4

echo "== bench/transfer over NCCL"
if [ "$gpus" -lt 3 ]; then
  echo "gpu_transfer: $gpus GPUs; the benchmark needs one per rank (3 or more)"
  exit 0
fi
if ! .venv/bin/python -c "import torch, loadplan; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "gpu_transfer: .venv has no CUDA torch or no loadplan (run scripts/setup); skipping"
  exit 0
fi
if [ "$gpus" -ge 6 ]; then
  bench/transfer --backend nccl --senders 2 --receivers 4 "$@"
else
  bench/transfer --backend nccl --senders 1 --receivers 2 "$@"
fi
