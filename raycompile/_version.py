"""The package version: one place, below every layer (the output module records it)."""

__version__ = "0.1.0"
