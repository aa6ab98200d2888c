"""The [project] table of pyproject.toml, for the scripts that install what
it names (oldest_numpy.py, extras.py).  Python 3.10 needs `tomli`."""
import pathlib

try:
    import tomllib
except ImportError:
    import tomli as tomllib

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"


def project():
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)["project"]
