#!/usr/bin/env bash
# Run the test suite against the oldest NumPy that pyproject.toml allows on
# this Python (scripts/oldest_numpy.py reads it), in a virtualenv of its own
# (.venv-oldest; FASTNORM_OLDEST_VENV overrides).  fastnorm is built the way
# pip builds it for a user (against NumPy 2, in isolation) and then runs on
# the old NumPy.  Without Dask: tests/test_dask.py skips, saying why.
#
#   scripts/test_oldest_numpy.sh                  # the whole suite, on every core
#   scripts/test_oldest_numpy.sh tests/test_where.py   # arguments go to pytest
#
# The slow tests (the wheel and sdist builds, the 4 GiB arrays) do not depend
# on NumPy's version and run in the main suite only: CI is unset here.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
VENV=${FASTNORM_OLDEST_VENV:-$ROOT/.venv-oldest}
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q packaging "tomli; python_version < '3.11'"
pin=$("$VENV/bin/python" scripts/oldest_numpy.py)
echo "=== the test suite against $pin ($VENV)"
# Its own build folder, so an editable or release build is left alone; the
# SIMD levels this CPU runs only (the others could not be tested here), at
# -O1: what this run checks is the binary interface with the old NumPy, not
# speed, and the build takes a third as long.
"$VENV/bin/pip" install -q "$pin" '.[test]' -C build-dir=build/oldest-numpy \
    -C cmake.define.FASTNORM_LEVELS="$(scripts/cpu_levels.sh)" \
    -C cmake.define.FASTNORM_OPT=-O1
"$VENV/bin/python" -c 'import numpy; print("numpy", numpy.__version__)'
[ $# -gt 0 ] || set -- -n auto --dist loadscope tests
env -u CI -u FASTNORM_PACKAGING -u FASTNORM_LARGE "$VENV/bin/pytest" "$@"
