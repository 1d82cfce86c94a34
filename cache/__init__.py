"""The cache component. Today: atomic publishing of the artifacts that jobs bring back.
The two-tier content-addressed store (local + shared) is issue #3."""

from .files import publish, write_atomic

__all__ = ["publish", "write_atomic"]
