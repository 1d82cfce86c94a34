"""Whole compiled modules in raycompile's cache: Inductor's FX-graph and AOTAutograd caches use
our tiers as their remote backend, so a new process on another node loads the compiled module
(its kernels then come from the kernel cache) instead of lowering the graph again."""

from __future__ import annotations

from typing import Any

from ..cache import Cache, Entry
from ..cache.keys import module_key
from . import compat


def make_backend(cache: Cache, kind: str) -> Any:
    """A ``RemoteCacheBackend`` over ``cache``; values are Inductor's serialized entries (bytes),
    stored signed and verified like every other entry before Inductor unpickles them."""

    class FarmModuleCacheBackend(compat.remote_cache_backend_base()):  # type: ignore[misc]
        def _get(self, key: str) -> bytes | None:
            entry = cache.get(module_key(kind, key))
            return entry.blobs.get("value") if entry is not None else None

        def _put(self, key: str, data: bytes) -> None:
            cache.put(Entry(module_key(kind, key), {"value": data}, {"label": f"{kind} module"}))

    return FarmModuleCacheBackend()

