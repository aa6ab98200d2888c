"""The release record: benchmarks/release-hashes.txt, CHANGELOG.md and the
version agree, and benchmarks/releases.py reads asv's results into plots.

Needs the repository (git history, benchmarks/): an sdist has neither, and
these tests skip there, saying so.
"""
import itertools
import json
import os
import re
import subprocess
import sys

import pytest
from packaging.version import Version

import fastnorm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HASHFILE = os.path.join(ROOT, "benchmarks", "release-hashes.txt")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(HASHFILE) and os.path.isdir(os.path.join(ROOT, ".git"))),
    reason="needs a clone of the repository (benchmarks/ and git history)")


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _recorded():
    with open(HASHFILE) as f:
        return [line.strip() for line in f if line.strip()]


def _changelog():
    """[(version, commit or None)] of CHANGELOG.md's release headings, newest
    first, and the version of its Unreleased heading (or None)."""
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        text = f.read()
    unreleased = re.search(r"^## Unreleased \((\S+)\)$", text, re.M)
    entries = []
    for m in re.finditer(r"^## (\d+\.\d+\.\d+) — \d{4}-\d{2}-\d{2}\n(.*?)(?=^## |\Z)",
                         text, re.M | re.S):
        commit = re.search(r"Commit `([0-9a-f]{40})`", m.group(2))
        entries.append((m.group(1), commit and commit.group(1)))
    return entries, unreleased and unreleased.group(1)


def _version_at(commit):
    p = _git("show", f"{commit}:fastnorm/_version.py")
    assert p.returncode == 0, p.stderr
    return re.search(r'__version__ = "([^"]+)"', p.stdout).group(1)


def test_each_recorded_release_is_a_commit_of_this_repository():
    recorded = _recorded()
    assert recorded, "no release recorded"
    for commit in recorded:
        assert re.fullmatch(r"[0-9a-f]{40}", commit), f"not a full hash: {commit!r}"
        assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, commit
    assert len(set(recorded)) == len(recorded)


def test_changelog_names_each_release_with_its_commit_and_version():
    entries, _ = _changelog()
    recorded = _recorded()
    assert [commit for _, commit in reversed(entries)] == recorded
    for version, commit in entries:
        assert _version_at(commit) == version, f"{commit} is not version {version}"
    versions = [Version(v) for v, _ in reversed(entries)]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_the_tree_is_newer_than_the_last_release():
    entries, unreleased = _changelog()
    last = Version(entries[0][0])
    here = Version(fastnorm.__version__)
    if _git("rev-parse", "HEAD").stdout.strip() == entries[0][1]:
        assert here == last
        return
    assert here > last
    # The work since the last release is listed under the version it becomes.
    assert unreleased == here.base_version


# --------------------------------------------------------------------------
# benchmarks/releases.py on asv result files written here

def _releases_module():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    try:
        import releases
    finally:
        sys.path.pop(0)
    return releases


def _asv_results(directory, commit, seconds):
    """One asv result file (asv 0.6's layout) with the benchmarks the plots
    read, every time `seconds`, except float16 left unmeasured (None)."""
    columns = ["result", "params", "version", "started_at", "duration"]
    dtypes, sizes = ["'float32'", "'float64'", "'float16'"], ["'small'", "'large'"]

    def row(params):
        n = 1
        for axis in params:
            n *= len(axis)
        values = [None if "float16" in "".join(c) else seconds
                  for c in itertools.product(*params)]
        assert len(values) == n
        return [values, params, "v", 0, 0]

    results = {"bench_fastnorm.Copy.time_copyto": row([dtypes, sizes])}
    rel = _releases_module()
    for _, stem, layout in rel.CASES:
        method = "time_" + re.sub(r"(?<!^)([A-Z])", r"_\1", stem).lower()
        layouts = [f"'{layout}'", "'other'"]
        results[f"bench_fastnorm.{stem}.{method}"] = row([layouts, dtypes, sizes, ["'1'", "'all'"]])
        results[f"bench_fastnorm.{stem}NumPy.{method}"] = row([layouts, dtypes, sizes])
    machine = os.path.join(directory, "machine")
    os.makedirs(machine, exist_ok=True)
    with open(os.path.join(machine, f"{commit[:8]}-virtualenv-py.json"), "w") as f:
        json.dump({"commit_hash": commit, "result_columns": columns, "results": results}, f)


def test_load_reads_each_parameter_combination(tmp_path):
    rel = _releases_module()
    commit = _recorded()[0]
    _asv_results(tmp_path, commit, 0.004)
    values = rel.load(str(tmp_path), commit)
    for _, stem, layout in rel.CASES:
        for kind in ("1", "all", "numpy"):
            assert rel.series(values, stem, layout, "float32", kind) == 0.004
            assert rel.series(values, stem, layout, "float16", kind) is None
    assert rel.series(values, "LayerNorm", "rows", "float64", "copy") == 0.004
    assert rel.load(str(tmp_path), "0" * 40) == {}


def test_plot_draws_one_png_per_dtype_from_the_first_release_alone(tmp_path):
    results, out = tmp_path / "results", tmp_path / "images"
    _asv_results(results, _recorded()[0], 0.002)
    # The command itself, in a child process without a preloaded sanitizer
    # runtime (scripts/sanitize.sh): matplotlib's C++ exceptions abort
    # under one, and matplotlib is not what that run checks.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "releases.py"), "plot",
                        "--results", str(results), "--outdir", str(out)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for dtype in ("float32", "float64"):
        with open(out / f"releases-{dtype}.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_says_which_release_has_no_results(tmp_path):
    rel = _releases_module()
    with pytest.raises(SystemExit, match="no asv results"):
        rel.main(["plot", "--results", str(tmp_path), "--outdir", str(tmp_path)])


def test_compare_takes_the_last_two_releases_or_the_first_alone():
    rel = _releases_module()
    a, b, c, newer = "a" * 40, "b" * 40, "c" * 40, "d" * 40
    _, args = rel.comparison([("0.1.0", a), ("0.2.0", b), ("0.3.0", c)], newer)
    assert args == ["compare", b, c]
    _, args = rel.comparison([("0.1.0", a)], newer)
    assert args == ["compare", a, newer]
    message, args = rel.comparison([("0.1.0", a)], None)
    assert args == ["show", a] and "one release" in message
    with pytest.raises(SystemExit, match="no release"):
        rel.comparison([], newer)


def test_compare_finds_the_newest_benchmarked_commit_since_the_release(tmp_path):
    rel = _releases_module()
    release = _recorded()[-1]
    assert rel.newest_benchmarked(str(tmp_path), release) is None
    since = _git("rev-list", f"{release}..HEAD").stdout.split()
    if not since:
        pytest.skip("HEAD is the release commit")
    _asv_results(tmp_path, since[-1], 0.001)
    assert rel.newest_benchmarked(str(tmp_path), release) == since[-1]
    _asv_results(tmp_path, since[0], 0.001)
    assert rel.newest_benchmarked(str(tmp_path), release) == since[0]


def test_releases_reads_each_version_at_its_commit():
    rel = _releases_module()
    entries, _ = _changelog()
    assert rel.releases() == [(v, c) for v, c in reversed(entries)]
