# Sourced by bench/gpu_*.sh: where the GPU build lives, which Python runs the
# Python parts, and how many GPUs there are. Not a script of its own.
#
# $LOADPLAN_GPU_BUILD_DIR (default build-gpu): the build; <build>/site holds
# the Python package with its runtime-only native module. $LOADPLAN_GPU_LOGS
# (default <build>/logs): the logs. $LOADPLAN_GPU_PYTHON:
# the interpreter (it needs torch, pytest and, to build, nanobind); by
# default python3, except on a machine where scripts/setup installed
# loadplan editable into .venv, whose import hook would shadow <build>/site:
# there the environment .venv sees (the same torch, no loadplan).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="${LOADPLAN_GPU_BUILD_DIR:-build-gpu}"
site="$PWD/$build/site"
python="${LOADPLAN_GPU_PYTHON:-}"
if [ -z "$python" ]; then
  python=$(command -v python3 || true)
  if pth=$(cat .venv/lib/python3*/site-packages/loadplan-env.pth 2>/dev/null); then
    deps=${pth#*addsitedir(\'}
    python="${deps%%/lib/python*}/bin/python"
  fi
fi
gpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU')
fi
# Where the scripts' logs go (bench/gpu_all.sh points it at its folder).
logs="${LOADPLAN_GPU_LOGS:-$build/logs}"
mkdir -p "$logs"
# The Python parts run as "${py[@]}" ARGS: the package in <build>/site,
# plans from .gpu/plans.
py=(env PYTHONPATH="$site" LOADPLAN_PLANS="$PWD/.gpu/plans" PYTHONUNBUFFERED=1 "$python")
# limit CAP: the seconds a step may take, CAP or what is left before
# $LOADPLAN_GPU_END (seconds since the epoch, set by bench/gpu_all.sh) if
# less, so that a run ends with its summary inside the device's limit.
limit() {
  local cap=$1 left
  if [ -n "${LOADPLAN_GPU_END:-}" ]; then
    left=$((LOADPLAN_GPU_END - $(date +%s)))
    [ "$left" -lt "$cap" ] && cap=$left
  fi
  echo $((cap < 1 ? 1 : cap))
}

# gpu_start SCRIPT: how bench/gpu_check.sh and bench/gpu_transfer.sh begin.
# A machine without a GPU is an error, except in a dry run (dry_run=1, from
# --dry-run), which builds, runs what needs no GPU and says what it skips.
# Then the shared build; `failed` notes a failure and goes on.
gpu_start() {
  me=$1
  status=0
  bin="$build/runtime"
  if [ "$gpus" -eq 0 ]; then
    if [ "${dry_run:-0}" != 1 ]; then
      say "no GPU (nvidia-smi finds none); --dry-run builds and runs what needs none" >&2
      exit 1
    fi
    say "no GPU here (nvidia-smi finds none): a dry run"
  else
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  fi
  timeout "$(limit 420)" bench/gpu_build.sh || { say "the build failed"; exit 1; }
}
say() { echo "$me: $*"; }
failed() {
  say "FAILED: $*"
  status=1
}
