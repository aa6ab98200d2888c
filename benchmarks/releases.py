"""Releases in asv: compare the last two, and plot time per release.

Run from the repository root, after the releases are benchmarked::

    asv run --skip-existing-commits HASHFILE:benchmarks/release-hashes.txt
    python benchmarks/releases.py compare         # the last two releases
    python benchmarks/releases.py plot            # docs/images/releases-*.png
    python benchmarks/releases.py plot --also HEAD   # and the current commit

``compare`` runs ``asv compare`` on the last two lines of
``benchmarks/release-hashes.txt``; with one release recorded it compares that
release with the newest commit of the branch benchmarked since, and without
one shows the release's own results (``asv show``).  Arguments after ``--``
go to asv compare (``--machine NAME``, ``--factor 1.1``, ``--split``).

``plot`` reads asv's result files (``.asv/results/MACHINE/*.json``) and
draws, for each dtype, one panel per main case: the time per call of
fastnorm with one thread and with all, of the NumPy code a user would write,
and of ``np.copyto`` of the same bytes, per release, on a log scale.  asv's
own HTML site needs scripts from the internet; these PNGs do not.  Needs
matplotlib (``pip install '.[bench]'``).
"""
import argparse
import glob
import itertools
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HASHFILE = os.path.join(HERE, "release-hashes.txt")

# (title, asv class stem, layout): the cases of the plots, large arrays.
CASES = (
    ("layer_norm, rows", "LayerNorm", "rows"),
    ("rms_norm, rows", "RmsNorm", "rows"),
    ("batch_norm training, NCHW", "BatchNorm", "NCHW"),
    ("mean_var over axis 0", "MeanVar", "columns"),
    ("layer_norm_backward, rows", "LayerNormBackward", "rows"),
)
SERIES = (("fastnorm, 1 thread", "1"), ("fastnorm, all threads", "all"),
          ("NumPy", "numpy"), ("np.copyto", "copy"))


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def releases(path=HASHFILE):
    """[(version, full hash)] oldest first, the version read at each commit."""
    out = []
    with open(path) as f:
        for line in f:
            commit = line.strip()
            if commit:
                text = git("show", f"{commit}:fastnorm/_version.py")
                out.append((text.split('"')[1], commit))
    return out


def results_dir():
    with open(os.path.join(ROOT, "asv.conf.json")) as f:
        text = "\n".join(line for line in f if not line.lstrip().startswith("//"))
    return os.path.join(ROOT, json.loads(text).get("results_dir", ".asv/results"))


def load(directory, commit, machine=None):
    """{(benchmark name, params tuple): seconds} of one commit's results
    (every environment; the first result found wins)."""
    values = {}
    pattern = os.path.join(directory, machine or "*", f"{commit[:8]}-*.json")
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            data = json.load(f)
        if not data.get("commit_hash", "").startswith(commit):
            continue
        columns = data["result_columns"]
        for name, row in data["results"].items():
            row = dict(zip(columns, row))
            params = [[json_value(p) for p in axis] for axis in row.get("params") or []]
            result = row["result"] if params else [row["result"]]
            for combo, value in zip(itertools.product(*params), result or []):
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    values.setdefault((name, combo), value)
    return values


def json_value(text):
    """asv stores parameter values as their repr: "'rows'" -> rows."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text


def series(values, stem, layout, dtype, kind):
    """One point of a panel: seconds per call, or None when not measured."""
    method = "time_" + "".join("_" + c.lower() if c.isupper() else c for c in stem)[1:]
    if kind == "copy":
        return values.get(("bench_fastnorm.Copy.time_copyto", (dtype, "large")))
    if kind == "numpy":
        return values.get((f"bench_fastnorm.{stem}NumPy.{method}", (layout, dtype, "large")))
    return values.get((f"bench_fastnorm.{stem}.{method}", (layout, dtype, "large", kind)))


def plot(points, dtype, path):
    """points: [(label, values)] in release order; one PNG for dtype."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    labels = [label for label, _ in points]
    fig, axes = plt.subplots(1, len(CASES), figsize=(3.4 * len(CASES), 3.6), sharey=False)
    for ax, (title, stem, layout) in zip(axes, CASES):
        for name, kind in SERIES:
            ys = [series(values, stem, layout, dtype, kind) for _, values in points]
            ms = [y * 1e3 if y is not None else float("nan") for y in ys]
            ax.plot(range(len(labels)), ms, marker="o", label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"ms per call, {dtype}, 4 Mi values")
    axes[-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def comparison(rel, newest):
    """(message, asv arguments) of `compare`: the last two releases; with one,
    that release against `newest` (the newest benchmarked commit of the
    branch, or None), else the release's own results."""
    if not rel:
        raise SystemExit(f"no release recorded in {HASHFILE}")
    if len(rel) >= 2:
        (old_v, old), (new_v, new) = rel[-2:]
        return f"asv compare: {old_v} ({old[:8]}) -> {new_v} ({new[:8]})", ["compare", old, new]
    version, commit = rel[0]
    if newest is not None and newest != commit:
        return (f"one release recorded: {version} ({commit[:8]}) -> {newest[:8]}, the newest "
                "commit benchmarked since", ["compare", commit, newest])
    return (f"one release recorded, {version} ({commit[:8]}), and nothing newer "
            "benchmarked to compare it with: its results", ["show", commit])


def newest_benchmarked(directory, since):
    """The newest commit of the current branch after `since` with results."""
    prefixes = {os.path.basename(p)[:8] for p in glob.glob(os.path.join(directory, "*", "*-*.json"))}
    for commit in git("rev-list", f"{since}..HEAD").split():
        if commit[:8] in prefixes and load(directory, commit):
            return commit
    return None


def cmd_compare(args):
    rel = releases(args.hashfile)
    newest = newest_benchmarked(args.results or results_dir(), rel[-1][1]) if rel else None
    message, asv_args = comparison(rel, newest)
    print(message, flush=True)
    extra = args.asv if asv_args[0] == "compare" else []
    return subprocess.call([sys.executable, "-m", "asv", *asv_args, *extra], cwd=ROOT)


def cmd_plot(args):
    directory = args.results or results_dir()
    points = []
    for version, commit in releases(args.hashfile):
        points.append((version, load(directory, commit, args.machine)))
    for name in args.also:
        commit = git("rev-parse", name)
        label = commit[:7] if commit.startswith(name) else f"{name} ({commit[:7]})"
        points.append((label, load(directory, commit, args.machine)))
    missing = [label for label, values in points if not values]
    if missing:
        sys.exit(f"no asv results in {directory} for: {', '.join(missing)} "
                 "(asv run --skip-existing-commits HASHFILE:benchmarks/release-hashes.txt)")
    os.makedirs(args.outdir, exist_ok=True)
    for dtype in args.dtypes:
        path = os.path.join(args.outdir, f"releases-{dtype}.png")
        plot(points, dtype, path)
        print(path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hashfile", default=HASHFILE)
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("compare", help="asv compare of the last two releases")
    compare.add_argument("--results", help="asv results folder (default: asv.conf.json's)")
    compare.add_argument("asv", nargs="*", help="arguments for asv, after --")
    compare.set_defaults(run=cmd_compare)
    draw = sub.add_parser("plot", help="PNG plots of time per release")
    draw.add_argument("--also", action="append", default=[], metavar="COMMIT",
                      help="a commit to draw after the releases (e.g. HEAD)")
    draw.add_argument("--machine", help="asv machine name (default: any)")
    draw.add_argument("--results", help="asv results folder (default: asv.conf.json's)")
    draw.add_argument("--outdir", default=os.path.join(ROOT, "docs", "images"))
    draw.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    draw.set_defaults(run=cmd_plot)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
