__version__ = "0.2.0.dev0"
# Between releases, the next release's version with .dev0 (RELEASING.md).
