"""Packaging and benchmark tooling: the files releases and asv depend on.

Fast checks run everywhere.  The release build (scripts/check_sdist.sh: the
sdist, then the manylinux wheel built from it by scripts/build_wheel.sh, two
minutes or so) is marked slow and runs when ``CI`` is set (``.ci/run`` sets
it), or with ``FASTNORM_PACKAGING=1``.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import fastnorm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(ROOT, "scripts")

building = pytest.mark.skipif(
    not (os.environ.get("CI") or os.environ.get("FASTNORM_PACKAGING")),
    reason="builds wheels/sdists (minutes): runs when CI or FASTNORM_PACKAGING is set")


def _env():
    # the scripts build for the Python that runs the tests
    return dict(os.environ, PYTHON=sys.executable)


def _run(args, timeout, cwd=HERE):
    # From the tests folder, never the repository root, where the source
    # folder fastnorm/ would shadow the installed package.
    return subprocess.run(args, capture_output=True, text=True, env=_env(), cwd=cwd,
                          timeout=timeout)


def _need(path):
    full = os.path.join(ROOT, path)
    if not os.path.exists(full):
        pytest.skip(f"{path} is not here (an sdist leaves it out)")
    return full


def _tail(p, n=4000):
    return (p.stdout + p.stderr)[-n:]


# ------------------------------------------------------------------ fast

def test_smoke_test_passes_on_the_installed_package():
    args = [sys.executable, "-I", _need("scripts/smoke_test.py")]
    if fastnorm._config.config()["openmp"]:
        args.append("--require-openmp")
    p = _run(args, timeout=300)
    assert p.returncode == 0, _tail(p)
    assert "smoke test passed" in p.stdout


def test_benchmark_table_runs_and_agrees_with_numpy():
    p = _run([sys.executable, "-I", _need("scripts/check_benchmarks.py")], timeout=600)
    assert p.returncode == 0, _tail(p)


def test_benchmarks_cover_every_public_function():
    sys.path.insert(0, os.path.dirname(_need("benchmarks/_cases.py")))
    try:
        import _cases
    finally:
        sys.path.pop(0)
    # (explain describes a call without running it: nothing to time)
    config = {"get_num_threads", "set_num_threads", "show_config", "explain", "__version__"}
    benchmarked = {op.name for op in _cases.OPS}
    missing = set(fastnorm.__all__) - config - benchmarked
    assert not missing, f"public functions without an entry in benchmarks/_cases.py: {missing}"


def test_the_full_comparison_is_not_in_the_package():
    # It lives in benchmarks/ (python benchmarks/compare.py); the wheel ships
    # the fastnorm folder, python -m fastnorm's short benchmark included.
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"] == ["fastnorm"]
    package = os.path.join(ROOT, "fastnorm")
    assert os.path.isfile(os.path.join(package, "_bench.py"))
    left = [os.path.join(d, f) for d, _, files in os.walk(os.path.join(package, "_compare"))
            for f in files if f.endswith(".py")]
    assert not left, left


def _wheel_names(p):
    """The files in the manylinux wheel that build_wheel.sh reports."""
    import zipfile
    path = re.search(r"manylinux wheel: (\S+\.whl)", p.stdout).group(1)
    return zipfile.ZipFile(path).namelist()


def _asv_conf():
    text = open(_need("asv.conf.json")).read()
    # asv reads the file as JSON5; whole-line // comments are all it uses
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def test_asv_conf_builds_offline_with_scikit_build_core():
    conf = _asv_conf()
    assert conf["repo"] == "."
    (build,) = conf["build_command"]
    # asv's default build command writes numpy's wheel next to fastnorm's
    # ("Found multiple wheels"): --no-deps; and the matrix's tools are used
    assert "--no-deps" in build and "--no-build-isolation" in build
    reqs = conf["matrix"]["req"]
    for name in ("numpy", "scikit-build-core", "cython", "ninja"):
        assert name in reqs
    for key in ("env_dir", "results_dir", "html_dir"):
        assert conf[key].startswith(".asv/")
    ignored = open(os.path.join(ROOT, ".gitignore")).read().split()
    assert ".asv/" in ignored
    assert os.path.isdir(os.path.join(ROOT, conf["benchmark_dir"]))


def test_release_hashes_are_commits():
    path = _need("benchmarks/release-hashes.txt")
    lines = [ln.strip() for ln in open(path) if ln.strip()]
    for ln in lines:
        # asv reads every non-empty line as a commit name: no comments
        assert re.fullmatch(r"[0-9a-f]{40}", ln), f"not a full commit hash: {ln!r}"
    if lines and shutil.which("git") and os.path.isdir(os.path.join(ROOT, ".git")):
        for ln in lines:
            p = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", ln + "^{commit}"],
                               capture_output=True)
            assert p.returncode == 0, f"{ln} is not a commit of this repository"


def test_ci_script_stops_at_a_failing_step():
    # Under `set -e`, a command that fails before the last `&&` of a list
    # does not stop a script: a failing test run would go unnoticed.  Every
    # chained line of .ci/run runs in a subshell, whose status counts.
    lines = open(_need(".ci/run")).read().splitlines()
    assert "set -euo pipefail" in lines
    chained = [ln for ln in lines if "&&" in ln and not ln.lstrip().startswith("#")]
    assert chained, "the README's test command is a chain of steps"
    for ln in chained:
        assert ln.lstrip().startswith("(") and ln.rstrip().endswith(")"), ln
    p = subprocess.run(["bash", "-c", "set -euo pipefail; (false && true); echo reached"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "reached" not in p.stdout


def test_cibuildwheel_config():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        cfg = tomllib.load(f)["tool"]["cibuildwheel"]
    for platform in ("linux", "macos", "windows"):
        assert platform in cfg
    commands = [cfg["test-command"]] + [cfg[p].get("test-command", "") for p in cfg
                                        if isinstance(cfg[p], dict)]
    for command in filter(None, commands):
        script = re.search(r"\{project\}/(\S+\.py)", command).group(1)
        assert os.path.isfile(os.path.join(ROOT, script)), command
    assert "--vendored-libgomp" in cfg["linux"]["test-command"]


# ------------------------------------------------------------------ slow

@pytest.fixture(scope="module")
def release_build():
    """scripts/check_sdist.sh, run once: the sdist, then the wheel built from it."""
    return _run(["bash", _need("scripts/check_sdist.sh")], timeout=1800)


@building
@pytest.mark.slow
def test_sdist_has_what_a_build_needs_and_nothing_else(release_build):
    p = release_build
    assert p.returncode == 0, _tail(p)
    assert "built numpy_fastnorm-" in p.stdout
    # the listing of its contents: no full comparison (benchmarks/ is excluded)
    assert not re.search(r"^\s+(fastnorm/_compare|benchmarks)/", p.stdout, re.M), _tail(p)


@building
@pytest.mark.slow
def test_the_wheel_built_from_the_sdist_is_manylinux_and_works_alone(release_build):
    if not sys.platform.startswith("linux"):
        pytest.skip("scripts/build_wheel.sh builds Linux wheels")
    p = release_build
    assert p.returncode == 0, _tail(p)
    assert re.search(r"build the wheel from \S+numpy_fastnorm-\S+\.tar\.gz", p.stdout), _tail(p)
    assert "smoke test passed" in p.stdout
    assert re.search(r"manylinux wheel: \S+manylinux_\d+_\d+_\w+\.whl", p.stdout), _tail(p)
    names = _wheel_names(p)
    assert "fastnorm/_bench.py" in names and "fastnorm/__main__.py" in names
    # the full comparison is benchmarks/compare.py, not part of the wheel
    assert not [n for n in names if n.startswith(("fastnorm/_compare", "benchmarks/"))]
