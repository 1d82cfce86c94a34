"""The ``ray://head`` shared cache tier: a cache service actor pinned to the head node that keeps
entries on the head's disk, so the nodes of a cluster share with no extra infrastructure.

The service stores raw manifests and blobs; clients sign what they put and verify what they get
with their own cluster secret, so the service never needs the secret and never unpickles.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..cache.store import Entry, FileTier, Miss, TierUnavailable, manifest_for, should_drop, verify_entry

log = logging.getLogger("raycompile.cache")

SERVICE_NAME = "raycompile-cache"


class CacheService:
    """A plain class (testable without Ray); ``RayHeadTier`` starts it as a detached actor."""

    def __init__(self, root: str, max_bytes: int | None = None) -> None:
        self.tier = FileTier(os.path.expanduser(root), secret=b"", name="shared", max_bytes=max_bytes)

    def get_raw(self, key: str) -> tuple[bytes, dict[str, bytes | None]] | None:
        raw = self.tier.get_raw(key)
        if raw is not None:
            self.tier.touch(key)
        return raw

    def put_raw(self, key: str, manifest: bytes, blobs: dict[str, bytes]) -> int:
        return self.tier.put_raw(key, manifest, blobs)

    def drop(self, key: str) -> None:
        self.tier.drop(key)

    def usage(self) -> dict[str, Any]:
        entries = self.tier.entries()
        return {"root": self.tier.root, "entries": len(entries), "bytes": sum(s for _, s, _ in entries)}


class RayHeadTier:
    """Client of the head-node cache service. Any Ray failure is a ``Miss("unavailable")``: the
    caller compiles instead. The actor restarts if it dies (``max_restarts=-1``)."""

    name = "shared"

    def __init__(self, secret: bytes, root: str = "~/.cache/raycompile-head", namespace: str = "raycompile",
                 timeout_s: float = 30.0) -> None:
        import ray

        self._ray, self.secret, self.timeout_s = ray, secret, timeout_s
        self._warned = False
        self.actor = ray.remote(CacheService).options(
            name=SERVICE_NAME, namespace=namespace, lifetime="detached", get_if_exists=True,
            num_cpus=0, resources={"node:__internal_head__": 0.001}, max_restarts=-1, max_task_retries=2,
        ).remote(root)

    def _unavailable(self, e: Exception) -> Miss:
        if not self._warned:
            log.warning("raycompile: the head-node cache service failed (%s); compiling instead", e)
            self._warned = True
        return Miss("unavailable", str(e))

    def get(self, key: str) -> Entry | Miss:
        try:
            raw = self._ray.get(self.actor.get_raw.remote(key), timeout=self.timeout_s)
        except Exception as e:  # RayError, GetTimeoutError: the service is down or restarting
            return self._unavailable(e)
        if raw is None:
            return Miss("absent")
        result = verify_entry(key, raw[0], raw[1], self.secret)
        if isinstance(result, Miss) and should_drop(result, self.name):
            self.actor.drop.remote(key)
        return result

    def put(self, entry: Entry) -> int:
        try:
            return self._ray.get(self.actor.put_raw.remote(entry.key, manifest_for(entry, self.secret),
                                                           entry.blobs), timeout=self.timeout_s)
        except Exception as e:
            self._unavailable(e)
            raise TierUnavailable(str(e)) from None

    def usage(self) -> dict[str, Any]:
        return self._ray.get(self.actor.usage.remote(), timeout=self.timeout_s)
