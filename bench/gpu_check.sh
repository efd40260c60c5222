#!/usr/bin/env bash
# The CUDA executor on a GPU, in one go: builds (bench/gpu_build.sh), then
#
#   1. the CUDA tests, which must run, not skip,
#   2. bench/apply_cuda: Llama-3-8B at TP=2 and an MoE update of about
#      25,000 names against device-to-device memcpy, launches per update,
#   3. the Python CUDA tests (python/tests/test_cuda.py) with the runtime-only
#      loadplan._native and the plans in .gpu/plans,
#   4. the kernel references (python/tests/test_kernel_refs_cuda.py) against
#      vLLM's, DeepGEMM's and FlashInfer's kernels, where those packages are
#      (the lent machines have none: they skip),
#   5. bench/apply_cuda.py: load_planned against load_weights on CUDA,
#   6. every runtime test (ctest), the measurements done.
#
# Logs in $LOADPLAN_GPU_LOGS (bench/gpu_common.sh): tests.log,
# kernel_refs.log, apply_cuda.log, apply_cuda_py.log. Arguments after
# --dry-run go to bench/apply_cuda (e.g. --layers=8). --dry-run (first): a
# machine without a GPU builds the same and runs what needs none (the CPU
# tests, the test binaries whose GPU tests skip, the Python plans test,
# apply_cuda.py on the CPU), each skipped part said in one line. Run bench/gpu_prepare.sh
# first where the compiler is. Exits non-zero if anything failed.
set -uo pipefail
dry_run=0
[ "${1:-}" = "--dry-run" ] && { dry_run=1; shift; }
source "$(dirname "$0")/gpu_common.sh"
gpu_start gpu_check

echo "== CUDA tests"
timeout "$(limit 240)" "$bin/tests/loadplan_runtime_cuda_tests" --gtest_brief=1 \
  --gtest_filter='Cuda.*' 2>&1 | tee "$logs/tests.log" || failed "CUDA tests"
if grep -q "SKIPPED" "$logs/tests.log"; then
  if [ "$gpus" -gt 0 ]; then failed "the CUDA tests skipped on a machine with a GPU"
  else say "skipped: the CUDA tests that need a GPU (no GPU)"; fi
fi

echo "== bench/apply_cuda"
timeout "$(limit 300)" "$bin/bench/apply_cuda" "$@" 2>&1 | tee "$logs/apply_cuda.log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 2 ] && [ "$gpus" = 0 ]; then say "skipped: bench/apply_cuda (no GPU)"
elif [ "$rc" != 0 ]; then failed "bench/apply_cuda exited with $rc"; fi

if [ -d "$site" ]; then
  echo "== Python CUDA tests"
  timeout "$(limit 300)" "${py[@]}" -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_cuda.py 2>&1 | tee -a "$logs/tests.log" || failed "the Python CUDA tests"
  if grep -q "SKIPPED.*needs a CUDA device" "$logs/tests.log"; then
    if [ "$gpus" -gt 0 ]; then failed "the Python CUDA tests skipped on a machine with a GPU"
    else say "skipped: the Python tests that need a GPU (no GPU)"; fi
  fi

  echo "== kernel references against the kernels"
  # vLLM's Marlin repack, DeepGEMM's scale layout and GEMM, FlashInfer's
  # scale swizzle: each skips, saying why, where its package is not here.
  timeout "$(limit 240)" "${py[@]}" -m pytest -q -rs -p no:cacheprovider \
    python/tests/test_kernel_refs_cuda.py 2>&1 | tee "$logs/kernel_refs.log" ||
    failed "the kernel references differ from the kernels"
  cat "$logs/kernel_refs.log" >>"$logs/tests.log"
  if ! grep -qE "[0-9]+ passed" "$logs/kernel_refs.log"; then
    say "skipped: the kernel references against the kernels (no GPU, or none of vLLM's" \
        "CUDA ops, DeepGEMM and FlashInfer here)"
  fi

  echo "== bench/apply_cuda.py"
  if [ "$gpus" -gt 0 ]; then
    timeout "$(limit 360)" "${py[@]}" bench/apply_cuda.py 2>&1 |
      tee "$logs/apply_cuda_py.log" || failed "bench/apply_cuda.py"
  else
    say "skipped: bench/apply_cuda.py on CUDA (no GPU); its tiny model on the CPU instead:"
    "${py[@]}" bench/apply_cuda.py --device cpu --models llama-tiny --repeat 3 2>&1 |
      tee "$logs/apply_cuda_py.log" || failed "bench/apply_cuda.py on the CPU"
  fi
else
  say "skipped: the Python CUDA tests and bench/apply_cuda.py (loadplan._native did not build)"
fi

echo "== all runtime tests (ctest)"
timeout "$(limit 300)" ctest --test-dir "$bin" --output-on-failure -j "$(nproc)" \
  --timeout 240 >>"$logs/tests.log" 2>&1 || failed "ctest (see tests.log)"
grep -E "tests passed|tests failed" "$logs/tests.log" | tail -n 1

exit "$status"
