#!/usr/bin/env bash
# Build the kernels with AddressSanitizer and UndefinedBehaviorSanitizer
# (gcc's) and run the whole test suite under them.  Exits non-zero when a test
# fails or when either sanitizer reports anything, in the test process or in
# any interpreter a test starts.
#
#   scripts/sanitize.sh                       # the whole suite
#   scripts/sanitize.sh tests/test_fuzz.py    # arguments go to pytest
#   PYTHON=python3.12 scripts/sanitize.sh
#
# The build goes to build/asan, into a virtualenv of its own (.venv-asan;
# FASTNORM_ASAN_VENV overrides), so an ordinary or editable install is left
# alone.  The extension is not stripped, so reports name source lines.
# Python itself is not instrumented: the ASan runtime is preloaded into it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
# gcc's runtimes (libasan, libubsan) come with gcc.  clang would need
# -shared-libasan and Debian's libclang-rt-14-dev; it is not what runs here.
CC=gcc
VENV=${FASTNORM_ASAN_VENV:-$ROOT/.venv-asan}
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS

step() { printf '\n=== %s\n' "$*"; }
fail() { printf '\nsanitize.sh: FAILED: %s\n' "$*" >&2; exit 1; }

# -fno-sanitize-recover: undefined behaviour stops the process at once, like
# an ASan report, instead of printing and carrying on.  -g1: line tables,
# which is what reports name; full -g costs the build half as much again.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1"

# The levels this CPU runs (baseline is always built), at -O1: the checks
# need the code paths, not their speed, and the build takes a third as long.
LEVELS=$(scripts/cpu_levels.sh)

step "build with $SAN (-O1; levels: baseline;$LEVELS) into build/asan ($VENV)"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
LOG="$VENV/build.log"
{
    "$VENV/bin/pip" install scikit-build-core cython numpy ninja "tomli; python_version < '3.11'"
    # What the tests need, as pyproject.toml's extras name it.
    "$VENV/bin/pip" install $("$VENV/bin/python" scripts/extras.py test dask)
    "$VENV/bin/pip" install --no-build-isolation --no-deps --force-reinstall . \
        -C build-dir=build/asan -C install.strip=false \
        -C cmake.define.CMAKE_C_COMPILER="$CC" \
        -C cmake.define.CMAKE_C_FLAGS="$SAN" \
        -C cmake.define.FASTNORM_OPT=-O1 -C cmake.define.FASTNORM_LEVELS="$LEVELS" \
        -C cmake.define.CMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" \
        -C cmake.define.CMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
} >"$LOG" 2>&1 || { tail -40 "$LOG"; fail "build (log: $LOG)"; }
# Every module of every SIMD level must carry the instrumentation.  (Not
# found by importing fastnorm: an instrumented module refuses to load in a
# process that has not preloaded the ASan runtime.)
site=$("$VENV/bin/python" -I -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
modules=("$site"/fastnorm/_*.so)
[ -e "${modules[0]}" ] || fail "no compiled modules in $site/fastnorm"
# (grep reads all of nm's output: with -q it would stop at the first match,
# nm would die of SIGPIPE, and pipefail would call that a failure.)
for so in "${modules[@]}"; do
    nm -D "$so" | grep __asan_report >/dev/null || fail "$so is not built with ASan"
done
echo "${#modules[@]} instrumented modules in $site/fastnorm"

# The ASan runtime must be the first library the process loads; Python is
# not built with it, so it is preloaded.
ASAN_LIB=$("$CC" -print-file-name=libasan.so)
[ -f "$ASAN_LIB" ] || fail "no ASan runtime at $ASAN_LIB"

REPORTS=$(mktemp -d "${TMPDIR:-/tmp}/fastnorm-sanitize.XXXXXX")
# detect_leaks=0: CPython keeps objects alive at exit by design.  Reports
# also go to files (one per process), so that one in a child interpreter
# whose exit status a test ignores still fails this script.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$REPORTS/asan"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPORTS/ubsan"

step "pytest under ASan+UBSan (reports: $REPORTS)"
status=0
# From tests/'s parent with the pytest script (not python -m pytest), so the
# source folder fastnorm/ is not on sys.path ahead of the installed package.
# The packaging tests build wheels and sdists with their own compilers: no
# sanitizer business, and CI is unset so they are skipped.
env -u CI -u FASTNORM_PACKAGING LD_PRELOAD="$ASAN_LIB" \
    "$VENV/bin/pytest" -q -p no:cacheprovider "${@:-tests}" || status=$?

shopt -s nullglob
# A report is an error or a summary.  "failed to allocate" warnings are not:
# they come from the tests that ask for impossible outputs and expect a
# MemoryError (allocator_may_return_null=1 turns ASan's abort into one).
found=()
for f in "$REPORTS"/asan* "$REPORTS"/ubsan*; do
    if grep -q -E 'ERROR: AddressSanitizer|runtime error:|SUMMARY:' "$f"; then
        found+=("$f")
    else
        echo "(not a report: $(grep -c 'failed to allocate' "$f") allocation warning(s) in $f)"
    fi
done
if [ ${#found[@]} -gt 0 ]; then
    for f in "${found[@]}"; do printf '\n--- %s\n' "$f"; head -60 "$f"; done
    fail "${#found[@]} sanitizer report(s) (kept in $REPORTS)"
fi
rm -rf "$REPORTS"
[ $status -eq 0 ] || fail "pytest exited with status $status"
printf '\nsanitize.sh: clean (%d s)\n' $((SECONDS - start))
