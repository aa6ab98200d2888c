"""The type stub (fastnorm/__init__.pyi) against mypy --strict and against
what the functions return.

tests/typing/ holds typed programs that call every public function and
assert_type each result: mypy --strict must accept them as they are, with
fastnorm found as installed (its py.typed and stub), and running them
checks each result's class and dtype against the same types.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastnorm

PROGRAMS = Path(__file__).parent / "typing"
USES_NUMPY = PROGRAMS / "uses_numpy.py"
USES_DASK = PROGRAMS / "uses_dask.py"
NO_DASK = "Dask is not installed: the typed program for Dask arrays is not checked"


def _has_dask():
    try:
        return importlib.util.find_spec("dask") is not None
    except (ImportError, ValueError):
        return False


def _run(args, cwd, timeout=600):
    # From a folder of their own, so that neither the source tree nor a
    # project configuration file takes part: fastnorm is the installed one.
    env = {k: v for k, v in os.environ.items() if k != "MYPYPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _mypy(files, cwd, cache):
    return _run(["-m", "mypy", "--strict", "--cache-dir", str(cache), *map(str, files)], cwd)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("typing")


@pytest.fixture(scope="module")
def mypy_report(workdir):
    """One mypy run over both programs (the Dask one where Dask is
    installed): most of its time is reading NumPy's and Dask's stubs."""
    files = [USES_NUMPY] + ([USES_DASK] if _has_dask() else [])
    report = _mypy(files, workdir, workdir / "cache")
    # 1 is "errors found", each on a line of its own; anything else is mypy failing.
    assert report.returncode == 0 or (report.returncode == 1 and _errors(report)), (
        f"mypy did not run:\n{report.stdout}{report.stderr}")
    return report


def _errors(report, program=None):
    """mypy's error lines, those about `program` alone when given."""
    lines = [ln for ln in report.stdout.splitlines() if ": error:" in ln]
    if program is None:
        return lines
    return [ln for ln in lines if ln.startswith(f"{program}:")]


def test_numpy_program_type_checks(mypy_report):
    errors = _errors(mypy_report, USES_NUMPY)
    elsewhere = [ln for ln in _errors(mypy_report) if not ln.startswith(f"{USES_DASK}:")]
    assert not errors and not elsewhere, mypy_report.stdout + mypy_report.stderr


def test_dask_program_type_checks(mypy_report):
    pytest.importorskip("dask.array", reason=NO_DASK)
    assert not _errors(mypy_report, USES_DASK), mypy_report.stdout + mypy_report.stderr


def test_stub_itself_passes_mypy_strict(workdir):
    # Errors inside an installed package's stub are not shown to its users
    # (nor in the runs above): a copy checked as a program of its own.
    copy = workdir / "stub" / "fastnorm"
    copy.mkdir(parents=True)
    shutil.copy(Path(fastnorm.__file__).with_suffix(".pyi"), copy / "__init__.pyi")
    report = _mypy([copy / "__init__.pyi"], copy.parent, workdir / "cache")
    assert report.returncode == 0, report.stdout + report.stderr


@pytest.mark.parametrize("program", [USES_NUMPY, USES_DASK], ids=lambda p: p.stem)
def test_program_runs_with_the_types_it_asserts(program, workdir):
    if program is USES_DASK:
        pytest.importorskip("dask.array", reason=NO_DASK)
    if sys.version_info < (3, 11):
        pytest.importorskip("typing_extensions", reason="assert_type before Python 3.11")
    result = _run([str(program)], workdir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every result as typed" in result.stdout, result.stdout
