"""The package version, in a module of its own so that the store and the CLI can read it without
importing the top-level package (the one place to change it; pyproject.toml reads it from here)."""

__version__ = "0.1.0"
