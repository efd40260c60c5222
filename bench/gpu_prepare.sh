#!/usr/bin/env bash
# Run where the compiler is (after scripts/setup) before a GPU run: fills
# .gpu/ (git ignores it; a device run carries it) with what the GPU scripts
# need and a GPU machine cannot make:
#
#   .gpu/googletest  GoogleTest's sources ($LOADPLAN_GTEST_SOURCES, default
#                    Debian's /usr/src/googletest), from which
#                    bench/gpu_build.sh builds the runtime tests;
#   .gpu/gloo        Gloo's sources (scripts/gloo.sh: those scripts/wheel
#                    builds), from which bench/gpu_build.sh builds the
#                    Gloo transport (the colocated CUDA IPC tests move
#                    their tables over it; the machine has no libgloo);
#   .gpu/plans       the plans the Python parts read there, where
#                    loadplan._native has no compiler: the CUDA tests'
#                    (python/tests/test_cuda.py), bench/apply_cuda.py's and
#                    bench/transfer's receivers' (TP=2 and TP=4 engines,
#                    and --many-names'),
#                    each made by the same plan_or_load call that reads it.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "gpu_prepare: $*"; }
[ -x .venv/bin/python ] || { say "no .venv: run scripts/setup first" >&2; exit 1; }
.venv/bin/python -c "import loadplan._native as n; assert n.HAS_COMPILER" ||
  { say "this loadplan._native has no compiler" >&2; exit 1; }
sources="${LOADPLAN_GTEST_SOURCES:-/usr/src/googletest}"
[ -f "$sources/CMakeLists.txt" ] ||
  { say "no GoogleTest sources at $sources (Debian: apt-get install googletest)" >&2; exit 1; }

rm -rf .gpu/googletest .gpu/gloo .gpu/plans
mkdir -p .gpu/plans
cp -r "$sources" .gpu/googletest
. scripts/gloo.sh
gloo_sources .gpu/gloo .venv/bin/python "${LOADPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loadplan}"
LOADPLAN_PLANS="$PWD/.gpu/plans" .venv/bin/python -m pytest -q -p no:cacheprovider \
  python/tests/test_cuda.py -k plans_are_made
.venv/bin/python bench/apply_cuda.py --plan-only --plans .gpu/plans
bench/transfer --plan-only --plans .gpu/plans --receivers 2
bench/transfer --plan-only --plans .gpu/plans --receivers 4
bench/transfer --plan-only --plans .gpu/plans --many-names
say ".gpu holds $(du -sh .gpu | cut -f1): $(ls .gpu/plans | wc -l) plans, GoogleTest and Gloo"
