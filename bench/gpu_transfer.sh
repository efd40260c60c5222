#!/usr/bin/env bash
# The transfers over NCCL on GPUs, in one go: builds (bench/gpu_build.sh),
# then
#
#   1. the colocated transfer tests through CUDA IPC: a sender and a
#      receiver process on GPU 0 (as a colocated trainer and engine share
#      one), Gloo between them for the tables and agreements, which must
#      run, not skip, where there is a GPU;
#   2. the NCCL transfer tests: on one GPU one rank sends to itself through
#      the same code (NCCL refuses two ranks on one device), which must run,
#      not skip; with two GPUs or more, one sender and TP receivers, one GPU
#      each;
#   3. with two GPUs or more, bench/transfer over NCCL, one GPU per rank,
#      with the runtime-only loadplan._native and the receivers' plans from
#      .gpu/plans: bytes moved against bytes needed, and each engine's time
#      against full broadcast. 2 GPUs: a TP=1 trainer to rank 0 of a TP=2
#      engine; 3 to 5: TP=1 to TP=2; 6 or more: TP=2 to TP=4;
#   4. with four GPUs or more, bench/transfer --many-names over NCCL: an
#      update's time over its link probe, Llama and a MoE of 20,000 names.
#
# Log in $LOADPLAN_GPU_LOGS (bench/gpu_common.sh): nccl.log. Arguments after
# --dry-run go to bench/transfer (e.g. --layers=24). --dry-run (first): a
# machine without a GPU builds the same and runs the test binary, whose GPU
# tests skip, each skipped part said in one line. Run bench/gpu_prepare.sh
# first where the compiler is. Exits non-zero if anything failed.
set -uo pipefail
dry_run=0
[ "${1:-}" = "--dry-run" ] && { dry_run=1; shift; }
source "$(dirname "$0")/gpu_common.sh"
gpu_start gpu_transfer

echo "== colocated transfer tests (CUDA IPC)"
grep -q "Gloo transport ON" "$bin/configure.log" ||
  failed "the runtime was built without the Gloo transport (the CUDA IPC tests need it)"
timeout "$(limit 120)" "$bin/tests/loadplan_runtime_cuda_tests" \
  --gtest_filter='CudaColocated.*' 2>&1 | tee "$logs/nccl.log" || failed "the CUDA IPC tests"
if grep -q "SKIPPED \] CudaColocated" "$logs/nccl.log"; then
  if [ "$gpus" -gt 0 ]; then failed "the CUDA IPC tests skipped on a GPU"
  else say "skipped: the CUDA IPC tests that need a GPU (no GPU)"; fi
fi

echo "== NCCL transfer tests"
if ! grep -q "NCCL transport ON" "$bin/configure.log"; then
  failed "the runtime was built without the NCCL transport (no nccl.h found)"
  exit "$status"
fi
timeout "$(limit 180)" "$bin/tests/loadplan_runtime_cuda_tests" \
  --gtest_filter='NcclTransfer.*' 2>&1 | tee -a "$logs/nccl.log" || failed "the NCCL tests"
if grep -q "SKIPPED \] NcclTransfer.OneRankSendsToItselfForEveryEngine" "$logs/nccl.log"; then
  if [ "$gpus" -gt 0 ]; then failed "the one-GPU NCCL test skipped (NCCL did not load?)"
  else say "skipped: the NCCL tests that need a GPU (no GPU)"; fi
fi

echo "== bench/transfer over NCCL"
if [ "$gpus" -lt 2 ]; then
  say "skipped: bench/transfer over NCCL needs two GPUs, one per rank (NCCL refuses two" \
      "ranks on one device); this machine has $gpus"
  exit "$status"
fi
if [ ! -d "$site" ]; then
  say "skipped: bench/transfer (loadplan._native did not build)"
  exit "$status"
fi
if [ "$gpus" -ge 6 ]; then ranks=(--senders 2 --receivers 4)
elif [ "$gpus" -ge 3 ]; then ranks=(--senders 1 --receivers 2)
else ranks=(--senders 1 --receivers 1 --engine-tp 2); fi
timeout "$(limit 300)" "${py[@]}" bench/transfer --backend nccl --plans .gpu/plans \
  "${ranks[@]}" "$@" 2>&1 | tee -a "$logs/nccl.log" || failed "bench/transfer over NCCL"

echo "== bench/transfer --many-names over NCCL"
if [ "$gpus" -lt 4 ]; then
  say "skipped: bench/transfer --many-names over NCCL needs four GPUs (two senders, two" \
      "receivers, one GPU each); this machine has $gpus"
  exit "$status"
fi
timeout "$(limit 300)" "${py[@]}" bench/transfer --backend nccl --plans .gpu/plans \
  --many-names 2>&1 | tee -a "$logs/nccl.log" || failed "bench/transfer --many-names over NCCL"
exit "$status"
