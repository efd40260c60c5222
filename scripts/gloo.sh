# Sourced by scripts/wheel, bench/gpu_prepare.sh and bench/gpu_build.sh: Gloo
# built from source, static and position-independent, without Redis,
# ibverbs or libuv, for builds that cannot use the system's libgloo-dev (a
# wheel, which must not need it; a lent GPU machine, which has none and
# cannot install it). The sources are those Horovod's source distribution
# on PyPI carries, pinned by hash. Not a script of its own.

gloo_horovod=horovod-0.28.1
gloo_horovod_sha256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0

# gloo_sources DEST PYTHON CACHE: Gloo's source tree into DEST (replaced),
# from Horovod's sdist in CACHE, downloaded there with PYTHON's pip first
# when it is missing or its hash differs.
gloo_sources() {
  local dest=$1 python=$2 cache=$3 sdist tmp
  sdist="$cache/$gloo_horovod.tar.gz"
  if ! echo "$gloo_horovod_sha256  $sdist" | sha256sum -c --quiet 2>/dev/null; then
    echo "gloo: fetching $gloo_horovod's source distribution (for its Gloo sources)"
    tmp=$(mktemp -d)
    "$python" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "${gloo_horovod/-/==}"
    mv "$tmp/$gloo_horovod.tar.gz" "$sdist"
    rm -rf "$tmp"
    echo "$gloo_horovod_sha256  $sdist" | sha256sum -c --quiet
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  tar -xzf "$sdist" -C "$dest" --strip-components=3 "$gloo_horovod/third_party/gloo"
}

# gloo_build SOURCES DIR: builds and installs Gloo from SOURCES in DIR
# (DIR/build, installed in DIR/install: include/ and lib/libgloo.a; logs
# DIR/configure.log and DIR/build.log), unless DIR/install already holds it.
# Its symbols are hidden, so that a module linking it exports none of them.
gloo_build() {
  local src=$1 dir=$2 generator=()
  [ -f "$dir/install/lib/libgloo.a" ] && return 0
  command -v ninja >/dev/null && generator=(-G Ninja)
  rm -rf "$dir" && mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo "gloo: building Gloo (static) in $dir"
  # Gloo asks for CMake 2.8.12; CMake 4 refuses that unless a minimum
  # policy version is given (older CMakes ignore the variable).
  cmake -S "$src" -B "$dir/build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
    -DCMAKE_CXX_VISIBILITY_PRESET=hidden -DCMAKE_POLICY_DEFAULT_CMP0063=NEW -DBUILD_SHARED_LIBS=OFF \
    -DUSE_REDIS=OFF -DUSE_IBVERBS=OFF -DUSE_LIBUV=OFF -DUSE_NCCL=OFF \
    -DCMAKE_INSTALL_PREFIX="$dir/install" >"$dir/configure.log" 2>&1 &&
    cmake --build "$dir/build" --target install >"$dir/build.log" 2>&1 || {
      tail -n 30 "$dir/configure.log" "$dir/build.log" 2>/dev/null
      rm -rf "$dir/install"
      echo "gloo: the build failed (logs in $dir)" >&2
      return 1
    }
}
