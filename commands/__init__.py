"""The service layer (commands, reads, the CLI and HTTP entry points): docs/architecture.md."""

#: the package's version (pyproject.toml reads it from here)
__version__ = "0.1.0"
