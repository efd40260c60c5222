# Sourced by scripts/wheel and scripts/wheel-check (from the repository's
# root, with $cache set): the CPython versions other than scripts/setup's
# that a wheel is built for and tried with, and their environments.
#
# LOADPLAN_WHEEL_PYTHONS: those versions, space-separated (default 3.12,
# the Python of vLLM's own container images; empty: none). A version is
# built where its interpreter is found, as `pythonX.Y` on PATH or in
# pyenv's versions, and reported as not built otherwise.
wheel_pythons="${LOADPLAN_WHEEL_PYTHONS-3.12}"

# find_python X.Y: prints the path of an interpreter of CPython X.Y, or
# fails.
find_python() {
  local version=$1 candidate root
  root=$(pyenv root 2>/dev/null || true)
  for candidate in "$(command -v "python$version" 2>/dev/null || true)" \
                   ${root:+"$root"/versions/"$version".*/bin/python"$version"}; do
    [ -n "$candidate" ] && [ -x "$candidate" ] || continue
    # pyenv's shims exist for versions that are not selected, and fail.
    if "$candidate" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$version'" \
         2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

# The site-packages folder of the environment scripts/setup keeps, which
# holds torch's nvidia-* packages (CUDA's libraries and NCCL).
deps_site() {
  local pth
  pth=$(purelib .venv/bin/python)/loadplan-env.pth
  sed -n "s/.*addsitedir('\(.*\)').*/\1/p" "$pth"
}

# python_env PYTHON: prints the path of PYTHON's environment for building
# and trying a wheel (python/requirements-wheel-python.txt, --no-deps, with
# the nvidia-* packages of scripts/setup's environment linked in), made
# once per hash of that file, of the interpreter and of that environment.
python_env() {
  local python=$1 key env deps site
  deps=$(deps_site)
  [ -d "$deps/nvidia" ] || { echo "wheel: no nvidia packages in '$deps'" >&2; return 1; }
  key=$( { cat python/requirements-wheel-python.txt; "$python" -c "import sys; print(sys.version)";
           echo "$deps"; } | sha256sum | cut -c1-16)
  env="$cache/wheel-python-$key"
  (
    flock 9
    if [ ! -f "$env/.complete" ]; then
      echo "wheel: installing python/requirements-wheel-python.txt for $("$python" -V) into $env" >&2
      rm -rf "$env"
      "$python" -m venv "$env"
      "$env/bin/python" -m pip install -q --no-deps -r python/requirements-wheel-python.txt >&2
      site=$(purelib "$env/bin/python")
      ln -s "$deps/nvidia" "$site/nvidia"
      "$env/bin/python" -c "import torch" >&2
      touch "$env/.complete"
    fi
  ) 9>"$env.lock" || return 1
  echo "$env"
}

# purelib PYTHON: the site-packages folder of PYTHON's environment.
purelib() {
  "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
}

# python_tag PYTHON: cpXY.
python_tag() {
  "$1" -c "import sys; print('cp%d%d' % sys.version_info[:2])"
}
