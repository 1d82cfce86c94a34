"""The ``ray://head`` shared cache tier: a cache service actor pinned to the head node that keeps
entries on the head's disk, so the nodes of a cluster share with no extra infrastructure.

The service stores raw manifests and blobs; clients sign what they put and verify what they get
with their own cluster secret, so the service never needs the secret and never unpickles. It also
holds the cluster's single-flight leases (``cache.inflight.LeaseBoard``: one owner of a compile
for every node), on the head's clock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from ..cache.inflight import LeaseBoard, Leases
from ..cache.store import Entry, FileTier, Miss, TierUnavailable, manifest_for, should_drop, verify_entry
from ..errors import FarmUnavailableError
from . import raycalls

log = logging.getLogger("raycompile.cache")

SERVICE_NAME = "raycompile-cache"
FLIGHT_OPS = ("acquire", "renew", "finish", "set_index", "read", "announce", "waiters", "leave")


class CacheService:
    """A plain class (testable without Ray); ``RayHeadTier`` starts it as a detached actor."""

    def __init__(self, root: str, max_bytes: int | None = None) -> None:
        self.tier = FileTier(os.path.expanduser(root), secret=b"", name="shared", max_bytes=max_bytes)
        self.board = LeaseBoard()

    def flight(self, op: str, *args: Any) -> Any:
        """One ``LeaseBoard`` operation (acquire, renew, finish, set_index, read, announce,
        waiters, leave)."""
        if op not in FLIGHT_OPS:
            raise ValueError(f"unknown flight operation {op!r}")
        return getattr(self.board, op)(*args)

    def get_raw(self, key: str) -> tuple[bytes, dict[str, bytes | None]] | None:
        raw = self.tier.get_raw(key)
        if raw is not None:
            self.tier.touch(key)
        return raw

    def get_raw_many(self, keys: list[str]) -> list[tuple[bytes, dict[str, bytes | None]] | None]:
        """``get_raw`` of each key, in one call (an output module's kernels)."""
        return [self.get_raw(key) for key in keys]

    def put_raw(self, key: str, manifest: bytes, blobs: dict[str, bytes]) -> int:
        return self.tier.put_raw(key, manifest, blobs)

    def drop(self, key: str) -> None:
        self.tier.drop(key)

    def usage(self) -> dict[str, Any]:
        entries = self.tier.entries()
        return {"root": self.tier.root, "entries": len(entries), "bytes": sum(s for _, s, _ in entries)}

    def manifests_page(self, after: str, count: int) -> list[tuple[str, bytes]]:
        """(key, manifest bytes) of up to ``count`` entries whose keys sort after ``after``, in key
        order, unverified (``raycompile explain`` reads their key parts; nothing is unpickled)."""
        return list(self.tier.manifests(after, count))


class RayHeadTier:
    """Client of the head-node cache service. Any Ray failure is a ``Miss("unavailable")``: the
    caller compiles instead. The actor restarts if it dies (``max_restarts=-1``).

    What it raises (nothing of ``ray.exceptions``): the constructor, FarmUnavailableError when this
    process is not connected to Ray or Ray refuses the service actor; ``get`` nothing (a failure
    is a ``Miss("unavailable")``); ``put`` and ``usage``, TierUnavailable (cache/store.py, the
    tiers' own: not a RaycompileError) when the service cannot be reached."""

    name = "shared"

    def __init__(self, secret: bytes, root: str = "~/.cache/raycompile-head", namespace: str = "raycompile",
                 timeout_s: float = 30.0, actor: Any = None) -> None:
        """``actor``: the service, looked up already (``existing``); else started here, or the
        cluster's taken where one runs."""
        import ray

        self._ray, self.secret, self.timeout_s = ray, secret, timeout_s
        self._warned = False
        if actor is not None:
            self.actor = actor
            return
        with raycalls.calls(raycalls.address(), "starting the head-node cache service"):
            self.actor = ray.remote(CacheService).options(
                name=SERVICE_NAME, namespace=namespace, lifetime="detached", get_if_exists=True,
                num_cpus=0, resources={"node:__internal_head__": 0.001}, max_restarts=-1, max_task_retries=2,
            ).remote(root)

    @classmethod
    def existing(cls, secret: bytes, namespace: str = "raycompile", timeout_s: float = 30.0) -> RayHeadTier:
        """The service a session of this cluster started, looked up, never started: what
        ``raycompile cache explain --shared ray://head`` reads. Raises TierUnavailable where no
        session has used the tier on this cluster (or Ray cannot answer)."""
        import ray

        try:
            with raycalls.calls(raycalls.address(), "finding the head-node cache service"):
                actor = ray.get_actor(SERVICE_NAME, namespace=namespace)
        except ValueError:  # Ray's answer for a name it does not know
            raise TierUnavailable(f"no head-node cache service in namespace {namespace!r} of this Ray cluster: "
                                  "no session has used the ray://head tier here") from None
        except FarmUnavailableError as e:
            raise TierUnavailable(str(e)) from None
        return cls(secret, namespace=namespace, timeout_s=timeout_s, actor=actor)

    def _unavailable(self, e: BaseException) -> Miss:
        if raycalls.is_bug(e):  # the service's own code raised: said loudly, with its traceback
            log.error("raycompile: the head-node cache service raised (a bug: please report it); "
                      "compiling instead", exc_info=e)
            return Miss("unavailable", str(e))
        if not self._warned:
            log.warning("raycompile: the head-node cache service failed (%s); compiling instead", e)
            self._warned = True
        return Miss("unavailable", str(e))

    def _call(self, method: str, *args: Any) -> Any:
        """One call to the service, waited for. Raises one of ``_failures()``: FarmUnavailableError
        when this process is not connected (``.remote()`` would start a new local Ray, without
        the service), or what Ray raises (RayError: GetTimeoutError, RayActorError ...: the service
        is down or restarting; ConnectionError)."""
        raycalls.require("the head-node cache service")
        return self._ray.get(getattr(self.actor, method).remote(*args), timeout=self.timeout_s)

    @staticmethod
    def _failures() -> tuple[type[BaseException], ...]:
        return (FarmUnavailableError, *raycalls.failures())

    def get(self, key: str) -> Entry | Miss:
        try:
            raw = self._call("get_raw", key)
        except self._failures() as e:  # the service is down or restarting, or Ray is gone
            return self._unavailable(e)
        return self._verified(key, raw)

    def get_many(self, keys: list[str]) -> dict[str, Entry | Miss]:
        """Every key's entry in one call to the service (``Cache.prefetch``)."""
        try:
            raws = self._call("get_raw_many", list(keys))
        except self._failures() as e:
            miss = self._unavailable(e)
            return dict.fromkeys(keys, miss)
        return {key: self._verified(key, raw) for key, raw in zip(keys, raws)}

    def _verified(self, key: str, raw: tuple[bytes, dict[str, bytes | None]] | None) -> Entry | Miss:
        if raw is None:
            return Miss("absent")
        result = verify_entry(key, raw[0], raw[1], self.secret)
        if isinstance(result, Miss) and should_drop(result, self.name):
            try:  # fire and forget: a damaged entry left there is refused again, and dropped next time
                self.actor.drop.remote(key)
            except raycalls.failures() as e:
                log.debug("raycompile: dropping %s from the head-node cache service failed: %s", key, e)
        return result

    def put(self, entry: Entry) -> int:
        try:
            return self._call("put_raw", entry.key, manifest_for(entry, self.secret), entry.blobs)
        except self._failures() as e:
            self._unavailable(e)
            raise TierUnavailable(str(e)) from None

    def usage(self) -> dict[str, Any]:
        try:
            return self._call("usage")
        except self._failures() as e:
            raise TierUnavailable(str(e)) from None

    def ping(self) -> None:
        """Raises TierUnavailable when the service does not answer."""
        try:
            self._call("manifests_page", "", 0)
        except self._failures() as e:
            raise TierUnavailable(str(e)) from None

    def manifests(self, page: int = 500) -> Iterator[tuple[str, bytes]]:
        """(key, manifest bytes) of every entry, unverified, ``page`` entries a call; where the
        service stops answering, what was read so far (warned once), as the Redis tier does."""
        after = ""
        while True:
            try:
                got = self._call("manifests_page", after, page)
            except self._failures() as e:
                self._unavailable(e)
                return
            yield from got
            if len(got) < page:
                return
            after = got[-1][0]

    def drop(self, key: str) -> None:
        """Remove ``key``'s entry (a flight's frames in flight), not waited for."""
        try:
            self.actor.drop.remote(key)
        except raycalls.failures() as e:
            log.debug("raycompile: dropping %s from the head-node cache service failed: %s", key, e)

    def leases(self) -> Leases:
        """The service's single-flight leases (``cache/inflight.py``), one call each; what fails
        raises (the claim reads it as the owner gone, or claims on this node instead)."""
        return HeadLeases(self)


class HeadLeases:
    """``Leases`` of the head's service: each operation one call to it (bounded by the tier's
    time-out)."""

    def __init__(self, tier: RayHeadTier) -> None:
        self._tier = tier

    def _op(self, op: str, *args: Any) -> Any:
        return self._tier._call("flight", op, *args)

    def acquire(self, key: str, token: str, lease_s: float) -> bool:
        return bool(self._op("acquire", key, token, lease_s))

    def renew(self, key: str, token: str, lease_s: float) -> None:
        self._op("renew", key, token, lease_s)

    def finish(self, key: str, token: str, index: str) -> None:
        self._op("finish", key, token, index)

    def set_index(self, key: str, index: str) -> None:
        self._op("set_index", key, index)

    def read(self, key: str) -> tuple[str | None, bool]:
        index, held = self._op("read", key)
        return index, bool(held)

    def announce(self, key: str, waiter: str) -> None:
        self._op("announce", key, waiter)

    def waiters(self, key: str, fresh_s: float) -> int:
        return int(self._op("waiters", key, fresh_s))

    def leave(self, key: str, waiter: str) -> None:
        self._op("leave", key, waiter)
