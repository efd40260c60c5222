#!/usr/bin/env bash
# The one GPU run: bench/gpu_transfer.sh, then bench/gpu_check.sh (one shared
# build; the transfers first, as their steps are short on one GPU and
# gpu_check's last step, ctest, may take what time is left), every line of
# output also in OUT/gpu.txt, their logs in OUT (build.log, tests.log,
# kernel_refs.log, apply_cuda.log, apply_cuda_py.log, nccl.log: seven files
# in all), ending with the line
#
#   gpu: device=NAME apply_vs_d2d=A launches=N moe_time_over_memcpy=B load_weights_over_load_planned=C
#
# A: device-to-device memcpy's time over the CUDA executor's for the
# Llama-3-8B TP=2 update from device tensors (target >= 0.85); N: kernel
# launches plus copies the runtime enqueued per update (target <= 4); B: the
# MoE update's time (about 25,000 names) over memcpy's of its bytes (target
# <= 2); C: load_weights' time over load_planned's on CUDA tensors; each
# "skipped" where it was not measured. bench/results/README.md says how to
# run it on a lent GPU machine.
#
#   bench/gpu_all.sh OUT             on a machine with a GPU
#   bench/gpu_all.sh OUT --dry-run   anywhere else: everything but the GPU
#
# It ends within $LOADPLAN_GPU_SECONDS (default 330): a step that would run
# past that is cut short and counts as failed.
set -uo pipefail
out="${1:?usage: bench/gpu_all.sh OUT [--dry-run]}"
mode=()
[ "${2:-}" = "--dry-run" ] && mode=(--dry-run)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export LOADPLAN_GPU_LOGS="$out"
# Every step ends by then, leaving time for the summary.
export LOADPLAN_GPU_END=$(($(date +%s) + ${LOADPLAN_GPU_SECONDS:-330} - 10))
: >"$out/gpu.txt"
start=$SECONDS
status=0
for script in bench/gpu_transfer.sh bench/gpu_check.sh; do
  echo "=== $script ${mode[*]}" | tee -a "$out/gpu.txt"
  "$script" "${mode[@]}" 2>&1 | tee -a "$out/gpu.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
build="${LOADPLAN_GPU_BUILD_DIR:-build-gpu}"
cat "$build"/gloo/{configure,build}.log "$build"/runtime/{configure,build}.log \
  "$build"/py/{configure,build}.log \
  >"$out/build.log" 2>/dev/null

# key=value of the last line of LOG that has KEY, or "skipped".
value() {
  local v
  v=$(grep -oE "(^| )$2=[^ ]+" "$out/$1" 2>/dev/null | tail -n 1 | cut -d= -f2)
  echo "${v:-skipped}"
}
device=none
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr ' ' '_')
fi
[ "$status" = 0 ] || echo "gpu_all: something failed: see the FAILED lines above" | tee -a "$out/gpu.txt"
echo "gpu_all: $((SECONDS - start)) s" | tee -a "$out/gpu.txt"
echo "gpu: device=$device apply_vs_d2d=$(value apply_cuda.log gpu_ratio_vs_memcpy)" \
     "launches=$(value apply_cuda.log launches_per_update)" \
     "moe_time_over_memcpy=$(value apply_cuda.log moe_time_over_memcpy)" \
     "load_weights_over_load_planned=$(value apply_cuda_py.log load_weights_over_load_planned)" |
  tee -a "$out/gpu.txt"
exit "$status"
