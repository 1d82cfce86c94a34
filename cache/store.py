"""Cache tiers behind one interface: ``get(key) -> Entry | Miss`` and ``put(entry) -> bytes``.

An entry is a set of named blobs plus a manifest (each blob's sha256 and size, and an HMAC-SHA256
signature over the manifest). Every read checks the signature before anything is used and the
sha256 of every blob; a corrupt, truncated or missing part is a ``Miss("corrupt")`` and the entry
is dropped so that the next write repairs it; a bad or missing signature is ``Miss("refused")``.

``FileTier`` serves the local tier and ``file://`` shared directories: each entry is a directory,
written under a temporary name (blobs first, manifest last) and renamed into place, so a reader
never sees a partial entry. ``RedisTier`` writes an entry as one hash in one transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .files import write_atomic
from .signing import sign, verify

log = logging.getLogger("raycompile.cache")


@dataclass(frozen=True)
class Entry:
    key: str
    blobs: dict[str, bytes]  # name -> bytes
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.blobs.values())


@dataclass(frozen=True)
class Miss:
    reason: str  # "absent" | "corrupt" | "refused" | "unavailable"
    detail: str = ""


def manifest_for(entry: Entry, secret: bytes) -> bytes:
    body = {"key": entry.key, "meta": entry.meta,
            "blobs": {n: {"sha256": hashlib.sha256(b).hexdigest(), "size": len(b)} for n, b in entry.blobs.items()}}
    text = json.dumps(body, sort_keys=True)
    return json.dumps({"body": body, "sig": sign(secret, text.encode())}, sort_keys=True).encode()


def verify_entry(key: str, manifest: bytes, blobs: dict[str, bytes | None], secret: bytes) -> Entry | Miss:
    """Verify a manifest's signature, then every blob's size and sha256."""
    try:
        doc = json.loads(manifest)
        body = doc["body"]
    except (ValueError, KeyError, TypeError) as e:
        return Miss("corrupt", f"unreadable manifest ({e})")
    if not verify(secret, json.dumps(body, sort_keys=True).encode(), doc.get("sig")):
        return Miss("refused", "bad or missing signature")
    if body.get("key") != key:
        return Miss("corrupt", "manifest names another key")
    out: dict[str, bytes] = {}
    for name, info in body["blobs"].items():
        data = blobs.get(name)
        if data is None:
            return Miss("corrupt", f"blob {name} missing")
        if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
            return Miss("corrupt", f"blob {name} fails its sha256")
        out[name] = data
    return Entry(key, out, body.get("meta", {}))


def should_drop(miss: Miss, tier: str) -> bool:
    """Whether a reader drops the entry it could not use, so that the next write repairs it: a
    corrupt one, yes; one refused for its signature only in the local tier (this user's own). In
    a shared tier a refused entry may be another cluster's, signed with its secret: dropping it
    would have two clusters with different secrets delete each other's entries, so it stays (and
    this process compiles that kernel itself, warned)."""
    return miss.reason == "corrupt" or tier == "local"


class TierUnavailable(Exception):
    """A put that could not reach its tier (a Redis or head service that is down): the caller
    counts it in ``shared_unavailable`` and goes on; the entry stays in the other tier."""


class Tier(Protocol):
    name: str

    def get(self, key: str) -> Entry | Miss: ...

    def put(self, entry: Entry) -> int: ...


def get_many(tier: Tier, keys: list[str]) -> dict[str, Entry | Miss]:
    """Every key's lookup in ``tier``: in one round trip where the tier can batch (``get_many``),
    else one ``get`` each."""
    batched = getattr(tier, "get_many", None)
    if batched is not None:
        return dict(batched(keys))
    return {key: tier.get(key) for key in keys}


def get_json(cache: Any, key: str, blob: str) -> Any:
    """The JSON in blob ``blob`` of the entry under ``key``: the local tier's, else the shared
    tier's (a shared hit copied to the local tier: in the background where ``cache`` has a
    ``copy_to_local``, as a winner read while a module loads must not wait for that write), or
    None. For small records filed beside the kernels (autotune winners, max-autotune decisions);
    not counted in the cache's hit/miss stats, which count kernels. An entry without that blob, or
    not JSON, is passed over."""
    tiers = [t for t in (getattr(cache, "local", None), getattr(cache, "shared", None)) if t is not None]
    for tier in tiers:
        entry = tier.get(key)
        if not isinstance(entry, Entry):
            continue
        try:
            value = json.loads(entry.blobs[blob])
        except (KeyError, ValueError):
            continue
        if tier is not tiers[0]:
            copy = getattr(cache, "copy_to_local", None)  # the Cache's: on an I/O thread, off the caller's
            if copy is not None:
                copy(entry)
            else:
                tiers[0].put(entry)
        return value
    return None


def _blob_file(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:32]


class FileTier:
    """A directory of entries: ``ROOT/entries/KEY[:2]/KEY/{manifest.json, blobs}``, with an optional
    size cap enforced by LRU eviction (a hit refreshes the entry's time)."""

    def __init__(self, root: str, secret: bytes, name: str = "local", max_bytes: int | None = None) -> None:
        self.root, self.secret, self.name, self.max_bytes = os.path.abspath(root), secret, name, max_bytes
        self.evictions = 0
        self._lock = threading.Lock()
        self._size: int | None = None  # estimated bytes in the tier; None until first scanned

    def _dir(self, key: str) -> str:
        return os.path.join(self.root, "entries", key[:2], key)

    def has(self, key: str) -> bool:
        """Whether an entry is stored under ``key`` (not verified: ``get`` does that)."""
        return os.path.exists(os.path.join(self._dir(key), "manifest.json"))

    def get_raw(self, key: str) -> tuple[bytes, dict[str, bytes | None]] | None:
        """The stored manifest and blobs, unverified (None when absent); for a service that
        stores for clients who verify with their own secret."""
        d = self._dir(key)
        try:
            with open(os.path.join(d, "manifest.json"), "rb") as f:
                manifest = f.read()
        except OSError:
            return None
        try:
            names = json.loads(manifest)["body"]["blobs"]
        except (ValueError, KeyError, TypeError):
            names = {}
        blobs: dict[str, bytes | None] = {}
        for name in names:
            try:
                with open(os.path.join(d, _blob_file(name)), "rb") as f:
                    blobs[name] = f.read()
            except OSError:
                blobs[name] = None
        return manifest, blobs

    def get(self, key: str) -> Entry | Miss:
        raw = self.get_raw(key)
        if raw is None:
            d = self._dir(key)
            # a published entry appears whole (one rename), so a directory without a manifest is
            # damaged; check again, after the isdir, in case it was published since get_raw looked
            if os.path.isdir(d) and not os.path.exists(os.path.join(d, "manifest.json")):
                self.drop(key)
                return Miss("corrupt", "the entry has no manifest")
            return Miss("absent")
        result = verify_entry(key, raw[0], raw[1], self.secret)
        if isinstance(result, Miss):
            if should_drop(result, self.name):
                self.drop(key)
        else:
            self.touch(key)
        return result

    def touch(self, key: str) -> None:
        now = time.time()
        try:
            os.utime(os.path.join(self._dir(key), "manifest.json"), (now, now))  # LRU
        except OSError:
            pass

    def drop(self, key: str) -> None:
        self._drop(self._dir(key))

    def _drop(self, d: str) -> None:
        trash = f"{d}.trash-{os.getpid()}-{threading.get_ident()}"
        try:
            os.rename(d, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def put(self, entry: Entry) -> int:
        if isinstance(self.get(entry.key), Entry):  # already there and sound
            return 0
        return self.put_raw(entry.key, manifest_for(entry, self.secret), entry.blobs)

    def put_raw(self, key: str, manifest: bytes, blobs: dict[str, bytes]) -> int:
        """Publish an entry: blobs, then the manifest, in a temp dir renamed into place."""
        d = self._dir(key)
        parent = os.path.dirname(d)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{key[:16]}.tmp-", dir=parent)
        size = sum(len(b) for b in blobs.values())
        try:
            for name, data in blobs.items():
                write_atomic(os.path.join(tmp, _blob_file(name)), data)
            write_atomic(os.path.join(tmp, "manifest.json"), manifest)  # last
            try:
                # never replaces a published entry (a reader may be reading it): a bad one was
                # already dropped by the get() that found it, so this publishes the repair
                os.rename(tmp, d)
            except OSError:
                if os.path.exists(os.path.join(d, "manifest.json")):
                    return 0  # another writer published the same key first: theirs stands
                self._drop(d)  # a damaged entry without its manifest (never a publish in progress)
                try:
                    os.rename(tmp, d)
                except OSError:
                    return 0
            tmp = ""
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        self._account(size)
        return size

    # -- size cap ------------------------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, str]]:
        """(last use, bytes, key) of every entry."""
        out = []
        base = os.path.join(self.root, "entries")
        for shard in os.listdir(base) if os.path.isdir(base) else []:
            sd = os.path.join(base, shard)
            for key in os.listdir(sd):
                d = os.path.join(sd, key)
                if ".tmp-" in key or ".trash-" in key:
                    continue
                try:
                    mtime = os.stat(os.path.join(d, "manifest.json")).st_mtime
                    size = sum(e.stat().st_size for e in os.scandir(d))
                except OSError:
                    continue
                out.append((mtime, size, key))
        return out

    def manifests(self, after: str | None = None, count: int | None = None) -> Iterator[tuple[str, bytes]]:
        """(key, manifest bytes) of every entry, unverified (``raycompile explain`` reads their
        key parts; nothing is unpickled). With ``after`` or ``count``, a page: the first ``count``
        entries whose keys sort after ``after``, in key order."""
        keys = [key for _, _, key in self.entries()]
        if after is not None or count is not None:
            keys = sorted(key for key in keys if key > (after or ""))[:count]
        for key in keys:
            try:
                with open(os.path.join(self._dir(key), "manifest.json"), "rb") as f:
                    yield key, f.read()
            except OSError:
                continue

    def _account(self, added: int) -> None:
        if self.max_bytes is None:
            return
        with self._lock:
            if self._size is None:
                self._size = sum(s for _, s, _ in self.entries())
            else:
                self._size += added
            if self._size > self.max_bytes:
                self.prune(self.max_bytes)

    def prune(self, max_bytes: int) -> int:
        """Evict least recently used entries until the tier holds at most ``max_bytes``."""
        entries = sorted(self.entries())
        total = sum(s for _, s, _ in entries)
        evicted = 0
        for _, size, key in entries:
            if total <= max_bytes:
                break
            self._drop(self._dir(key))
            total -= size
            evicted += 1
        self.evictions += evicted
        self._size = total
        return evicted


class RedisTier:
    """Entries in Redis (the server Inductor's remote caches use), one hash per entry, written in
    one transaction. An unreachable server is a ``Miss("unavailable")``, never an exception."""

    def __init__(self, url: str, secret: bytes, timeout_s: float = 2.0) -> None:
        import redis

        self.name, self.url, self.secret = "shared", url, secret
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._warned = False

    def _unavailable(self, e: Exception) -> Miss:
        if not self._warned:
            log.warning("raycompile: Redis at %s is unreachable (%s); compiling and caching locally", self.url, e)
            self._warned = True
        return Miss("unavailable", str(e))

    def ping(self) -> None:
        """Raises TierUnavailable unless the server answers (for a command that must tell an
        unreachable server from an empty tier)."""
        import redis

        try:
            self._client.ping()
        except redis.RedisError as e:
            raise TierUnavailable(f"Redis at {self.url} does not answer ({e})") from e

    def get(self, key: str) -> Entry | Miss:
        return self.get_many([key])[key]

    def get_many(self, keys: list[str]) -> dict[str, Entry | Miss]:
        """Every key's entry in one round trip (a pipeline of HGETALLs): what one output module's
        kernels cost a warm node, instead of one round trip each."""
        import redis

        try:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(f"raycompile:entry:{key}")
            replies = pipe.execute()
        except redis.RedisError as e:
            miss = self._unavailable(e)
            return dict.fromkeys(keys, miss)
        return {key: self._entry(key, fields) for key, fields in zip(keys, replies)}

    def _entry(self, key: str, fields: dict[bytes, bytes]) -> Entry | Miss:
        import redis

        if not fields:
            return Miss("absent")
        manifest = fields.pop(b"__manifest__", b"")
        blobs = {k.decode(): v for k, v in fields.items()}
        result = verify_entry(key, manifest, blobs, self.secret)
        if isinstance(result, Miss) and should_drop(result, self.name):
            try:
                self._client.delete(f"raycompile:entry:{key}")
            except redis.RedisError:
                pass
        return result

    def manifests(self) -> Iterator[tuple[str, bytes]]:
        """(key, manifest bytes) of every entry, unverified; nothing when the server is unreachable."""
        import redis

        prefix = "raycompile:entry:"
        try:
            for name in self._client.scan_iter(match=f"{prefix}*", count=1000):
                manifest = self._client.hget(name, "__manifest__")
                if manifest:
                    yield name.decode()[len(prefix):], manifest
        except redis.RedisError as e:
            self._unavailable(e)

    def drop(self, key: str) -> None:
        """Remove ``key``'s entry (a flight's blobs in flight, once newer ones are published)."""
        import redis

        try:
            self._client.delete(f"raycompile:entry:{key}")
        except redis.RedisError as e:
            log.debug("raycompile: Redis could not drop %s (%s)", key, e)

    def put(self, entry: Entry) -> int:
        import redis

        mapping: dict[str, bytes] = dict(entry.blobs)
        mapping["__manifest__"] = manifest_for(entry, self.secret)
        try:
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(f"raycompile:entry:{entry.key}")
            pipe.hset(f"raycompile:entry:{entry.key}", mapping=mapping)
            pipe.execute()
        except redis.RedisError as e:
            self._unavailable(e)
            raise TierUnavailable(str(e)) from None
        return entry.size
