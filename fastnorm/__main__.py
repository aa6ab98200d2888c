"""``python -m fastnorm``: how fastnorm was built, and how fast it runs here.

See ``python -m fastnorm --help``; the work is in ``fastnorm._bench``.
"""
from ._bench import main

if __name__ == "__main__":
    raise SystemExit(main())
