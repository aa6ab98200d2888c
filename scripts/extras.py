"""Print the requirements of extras of pyproject.toml, one per line, for an
environment that installs fastnorm itself another way (sanitize.sh):

    pip install $(python scripts/extras.py test dask)
"""
import sys

from project_table import project

if __name__ == "__main__":
    extras = project()["optional-dependencies"]
    unknown = [name for name in sys.argv[1:] if name not in extras]
    if unknown:
        sys.exit(f"no such extra: {', '.join(unknown)} (known: {', '.join(extras)})")
    for name in sys.argv[1:]:
        print("\n".join(extras[name]))
