"""Print the pin of the oldest NumPy that pyproject.toml allows on this Python.

    python scripts/oldest_numpy.py          # e.g. numpy==1.25.0

Reads the `numpy>=X` lines of `[project] dependencies` whose environment
markers hold for the running interpreter (NumPy publishes wheels for a Python
only from some version on, so the floor differs per Python).  Needs
`packaging` (and `tomli` on Python 3.10); exits 1 when no such line exists.
"""
import sys

from packaging.requirements import Requirement

from project_table import PYPROJECT, project


def oldest(dependencies):
    floors = []
    for line in dependencies:
        req = Requirement(line)
        if req.name != "numpy" or (req.marker and not req.marker.evaluate()):
            continue
        floors += [s.version for s in req.specifier if s.operator == ">="]
    return floors


if __name__ == "__main__":
    floors = oldest(project()["dependencies"])
    if len(floors) != 1:
        sys.exit(f"expected one numpy>= floor for Python {sys.version.split()[0]} "
                 f"in {PYPROJECT}, found {floors}")
    version = floors[0] + ".0" * (2 - floors[0].count("."))
    print(f"numpy=={version}")
