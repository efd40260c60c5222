#!/usr/bin/env bash
# The build bench/gpu_check.sh and bench/gpu_transfer.sh share, for a machine
# with the CUDA toolkit and without MLIR (a lent GPU machine; this one too,
# for a dry run): configures once and builds, in $LOADPLAN_GPU_BUILD_DIR
# (default build-gpu),
#
#   - Gloo, static, from the sources in .gpu/gloo (in <build>/gloo),
#   - the runtime with the CUDA executor, the Gloo transport and, where
#     nccl.h is found, the NCCL transport, for the CUDA architectures
#     $LOADPLAN_CUDA_ARCHS (default "80;90"),
#   - its tests, with GoogleTest built from .gpu/googletest (the same
#     sources everywhere, system GoogleTest or not), and bench/apply_cuda,
#   - loadplan._native without the compiler (LOADPLAN_BUILD_COMPILER=OFF),
#     installed with the Python package into <build>/site: the Python parts
#     run with PYTHONPATH=<build>/site and read plans made elsewhere.
#
# bench/gpu_prepare.sh, run first where the compiler is, fills .gpu/ (the
# GoogleTest and Gloo sources and the plans); a device run carries it. The
# Python is bench/gpu_common.sh's; it needs nanobind. A Python module that
# fails to build is reported and leaves no <build>/site (the Python parts
# then skip); the runtime, its tests or apply_cuda failing to build is an
# error. Logs: configure.log and build.log in <build>/runtime and <build>/py.
set -euo pipefail
source "$(dirname "$0")/gpu_common.sh"
archs="${LOADPLAN_CUDA_ARCHS:-80;90}"
nvcc="${CMAKE_CUDA_COMPILER:-/usr/local/cuda/bin/nvcc}"
jobs="${LOADPLAN_GPU_JOBS:-$(nproc)}"
say() { echo "gpu_build: $*"; }

[ -x "$nvcc" ] || { say "no nvcc at $nvcc (set CMAKE_CUDA_COMPILER)" >&2; exit 1; }
for f in .gpu/googletest/CMakeLists.txt .gpu/gloo/CMakeLists.txt; do
  [ -f "$f" ] || { say "no $f: run bench/gpu_prepare.sh where the compiler is" >&2; exit 1; }
done

# nccl.h and libnccl.so.2: the toolkit's or the system's, else those of the
# nvidia-nccl wheel that torch depends on.
toolkit="$(dirname "$nvcc")/.."
nccl=()
if wheel=$("$python" -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null); then
  [ -f "$toolkit/include/nccl.h" ] || [ -f /usr/include/nccl.h ] ||
    nccl+=(-DLOADPLAN_NCCL_INCLUDE_DIR="$wheel/include")
  compgen -G "$toolkit/lib*/libnccl.so.2" >/dev/null ||
    compgen -G "/usr/lib/*/libnccl.so.2" >/dev/null ||
    nccl+=(-DLOADPLAN_NCCL_SHARED="$wheel/lib/libnccl.so.2")
fi

# Gloo from the carried sources, not the system's: the GPU machine has none,
# and a dry run here builds what it builds.
source scripts/gloo.sh
gloo_build .gpu/gloo "$build/gloo" || { say "Gloo did not build" >&2; exit 1; }
gloo=(-DLOADPLAN_RUNTIME_GLOO=ON -DLOADPLAN_GLOO_INCLUDE_DIR="$PWD/$build/gloo/install/include"
      -DLOADPLAN_GLOO_LIBRARY="$PWD/$build/gloo/install/lib/libgloo.a")

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cuda=(-DCMAKE_BUILD_TYPE=Release -DLOADPLAN_RUNTIME_CUDA=ON -DLOADPLAN_RUNTIME_NCCL=AUTO
      -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs" "${nccl[@]}" "${gloo[@]}")
# configure DIR SOURCE ARGS...: once; its log in DIR/configure.log.
configure() {
  local dir=$1 source=$2
  shift 2
  mkdir -p "$dir"
  [ -f "$dir/CMakeCache.txt" ] && return 0
  cmake -S "$source" -B "$dir" "${generator[@]}" "${cuda[@]}" "$@" >"$dir/configure.log" 2>&1 ||
    { rm -f "$dir/CMakeCache.txt"; tail -n 30 "$dir/configure.log"; return 1; }
}
start=$SECONDS

# The runtime, its tests and apply_cuda: runtime/ as its own project.
say "configuring and building $build/runtime (CUDA architectures $archs, $jobs jobs)"
configure "$build/runtime" runtime -DLOADPLAN_GTEST_SOURCE_DIR="$PWD/.gpu/googletest" ||
  { say "configuring the runtime failed" >&2; exit 1; }
grep "loadplan runtime:" "$build/runtime/configure.log" | sed 's/^-- /gpu_build: /'
echo "=== $(date -u +%FT%TZ)" >>"$build/runtime/build.log"
cmake --build "$build/runtime" -j "$jobs" >>"$build/runtime/build.log" 2>&1 ||
  { tail -n 40 "$build/runtime/build.log"; say "the runtime did not build" >&2; exit 1; }
for f in tests/loadplan_runtime_cuda_tests bench/apply_cuda; do
  [ -x "$build/runtime/$f" ] || { say "no $build/runtime/$f" >&2; exit 1; }
done

# loadplan._native, runtime only, in a build of its own: a Python without
# headers or nanobind costs the Python parts, not the rest.
say "configuring and building loadplan._native in $build/py (Python $python)"
rm -rf "$site"
if configure "$build/py" . -DLOADPLAN_BUILD_COMPILER=OFF -DLOADPLAN_BUILD_PYTHON=ON \
     -DPython_EXECUTABLE="$python" -DLOADPLAN_RUNTIME_TESTS=OFF -DLOADPLAN_RUNTIME_BENCH=OFF &&
   echo "=== $(date -u +%FT%TZ)" >>"$build/py/build.log" &&
   cmake --build "$build/py" -j "$jobs" --target _native >>"$build/py/build.log" 2>&1; then
  mkdir -p "$site"
  cp -r python/loadplan "$site/"
  rm -f "$site/loadplan/"_native*.so
  cp "$(find "$build/py" -name '_native*.so' -print -quit)" "$site/loadplan/"
  say "loadplan._native (runtime only) installed in $build/site"
else
  tail -n 20 "$build/py/build.log" 2>/dev/null || true
  say "loadplan._native did not build: the Python parts will skip"
fi
say "built in $((SECONDS - start)) s"
