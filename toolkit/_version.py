"""The package version, importable from every layer without importing the package root."""

__version__ = "0.1.0"
