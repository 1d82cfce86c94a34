"""The two-tier cache: local first, then shared; a shared hit is copied to the local tier, and a
new entry is written to both. Every outcome is counted in the stats the caller passes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import SettingsError
from .signing import load_secret
from .store import Entry, FileTier, Miss, RedisTier, Tier, TierUnavailable


class Cache:
    def __init__(self, local: FileTier | None, shared: Tier | None, stats: Any) -> None:
        self.local, self.shared, self.stats = local, shared, stats

    @classmethod
    def from_settings(cls, cache_dir: str, shared_url: str, max_bytes: int, stats: Any,
                      ray_tier: Callable[[bytes], Tier] | None = None) -> Cache:
        """Build the tiers. ``shared_url``: none | file:///path | redis://host:port/db | ray://head
        (``ray_tier(secret)`` makes that one; the orchestrator owns everything that talks to Ray).

        Raises SettingsError for an unknown scheme."""
        check_shared_url(shared_url)
        root = os.path.abspath(os.path.expanduser(cache_dir))
        secret = load_secret(os.path.join(root, "secret.key"))
        local = FileTier(root, secret, "local", max_bytes)
        if shared_url == "ray://head":
            return cls(local, ray_tier(secret) if ray_tier is not None else None, stats)
        return cls(local, shared_tier(shared_url, secret), stats)

    def get(self, key: str) -> Entry | None:
        for tier in (self.local, self.shared):
            if tier is None:
                continue
            result = tier.get(key)
            if isinstance(result, Entry):
                self.stats.add(bytes_read=result.size, **{f"{tier.name}_hits": 1})
                if tier is self.shared and self.local is not None:
                    self.stats.add(bytes_written=self.local.put(result))
                return result
            self._count(result)
        self.stats.add(misses=1)
        return None

    def _count(self, miss: Miss) -> None:
        if miss.reason in ("corrupt", "refused"):
            self.stats.add(**{miss.reason: 1})
        elif miss.reason == "unavailable":
            self.stats.add(shared_unavailable=1)

    def put(self, entry: Entry) -> None:
        written = 0
        for tier in (self.local, self.shared):
            if tier is not None:
                try:
                    written += tier.put(entry)
                except TierUnavailable:  # already warned once by the tier
                    self.stats.add(shared_unavailable=1)
                except OSError as e:  # read-only or full disk: warn via stats, keep going
                    self.stats.add(put_errors=1)
                    import logging

                    logging.getLogger("raycompile.cache").warning(
                        "raycompile: could not write cache entry to the %s tier (%s)", tier.name, e)
        evictions = self.local.evictions if self.local is not None else 0
        self.stats.add(bytes_written=written)
        self.stats.set(evictions=evictions)


def check_shared_url(url: str) -> None:
    """Raise SettingsError unless ``url`` names a shared tier raycompile has."""
    if url in ("", "none", "auto", "ray://head") or url.startswith(("file:///", "redis://", "rediss://")):
        return
    raise SettingsError(f"shared cache {url!r}: expected auto, none, ray://head, file:///path or "
                        "redis://host:port/db")


def shared_tier(url: str, secret: bytes) -> Tier | None:
    if url.startswith("file://"):
        return FileTier(url.removeprefix("file://"), secret, "shared")
    if url.startswith(("redis://", "rediss://")):
        return RedisTier(url, secret)
    return None
