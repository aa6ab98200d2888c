#!/usr/bin/env bash
# Build the sdist, check that it holds what a build needs and nothing else,
# then build the Linux wheel from it with scripts/build_wheel.sh (repaired by
# auditwheel, smoke-tested in a virtualenv holding only NumPy, from a folder
# outside the source tree), as cibuildwheel builds its wheels from the sdist.
# One compile checks both.  Exits non-zero on failure.
#
#   scripts/check_sdist.sh                  # python3
#   PYTHON=python3.12 scripts/check_sdist.sh
#
# The sdist and the wheel are left in dist/, the repaired wheel in
# wheelhouse/.  Needs PyPI (or a mirror) for `build` and the
# build requirements, and a C compiler.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fastnorm-sdist.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

step() { printf '\n=== %s\n' "$*"; }
fail() { printf '\ncheck_sdist.sh: FAILED: %s\n' "$*" >&2; exit 1; }
start=$SECONDS

step "build the sdist (python -m build --sdist)"
"$PYTHON" -m venv "$WORK/build-env"
"$WORK/build-env/bin/python" -m pip install -q build
"$WORK/build-env/bin/python" -m build --sdist --outdir "$WORK/sdist" "$ROOT" >"$WORK/build.log" 2>&1 \
    || { cat "$WORK/build.log"; fail "python -m build --sdist"; }
shopt -s nullglob
sdists=("$WORK"/sdist/numpy_fastnorm-*.tar.gz)
[ ${#sdists[@]} -eq 1 ] || fail "expected one sdist, got: ${sdists[*]:-none}"
sdist=${sdists[0]}
mkdir -p "$ROOT/dist"
cp "$sdist" "$ROOT/dist/"
echo "built $(basename "$sdist")"

step "contents"
"$WORK/build-env/bin/python" - "$sdist" "$ROOT" <<'EOF'
import os, re, sys, tarfile
names = sorted(m.name.split("/", 1)[1] for m in tarfile.open(sys.argv[1]).getmembers()
               if m.isfile())
for n in names:
    print("  " + n)
required = ["pyproject.toml", "CMakeLists.txt", "README.md", "PKG-INFO",
            "fastnorm/__init__.py", "fastnorm/_version.py"]
# every kernel source the build compiles or includes
required += sorted("src/" + f for f in os.listdir(os.path.join(sys.argv[2], "src"))
                   if f.endswith((".pyx", ".pxd", ".pxi", ".h")))
forbidden = [
    (r"^(build|dist|wheelhouse|\.asv|\.venv[^/]*|\.ci|\.git|\.hypothesis|\.pytest_cache)/", "build output, caches or CI files"),
    (r"\.(c|so|pyd|o|whl|html)$", "generated or compiled files"),
    (r"(^|/)__pycache__/", "bytecode"),
]
bad = [f"missing: {r}" for r in required if r not in names]
for n in names:
    for pattern, why in forbidden:
        if re.search(pattern, n):
            bad.append(f"{n} ({why})")
print(f"{len(names)} files")
if bad:
    print("FAIL:\n  " + "\n  ".join(bad))
    sys.exit(1)
EOF

if [ "$(uname -s)" = Linux ]; then
    step "build, repair and test the wheel from the sdist (scripts/build_wheel.sh)"
    PYTHON="$PYTHON" bash "$ROOT/scripts/build_wheel.sh" "$sdist" || fail "the wheel built from the sdist"
else
    # build_wheel.sh repairs with auditwheel, which is Linux's alone
    step "install the sdist into a fresh virtualenv (builds it) and run the smoke test"
    "$PYTHON" -m venv "$WORK/test-env"
    (cd "$WORK" && "$WORK/test-env/bin/python" -m pip install -q "$sdist") || fail "pip install of the sdist"
    (cd "$WORK" && "$WORK/test-env/bin/python" -I "$ROOT/scripts/smoke_test.py") || fail "smoke test of the sdist build"
fi

step "done in $((SECONDS - start)) s: dist/$(basename "$sdist")"
