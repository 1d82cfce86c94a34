"""The two-tier cache: local first, then shared; a shared hit is copied to the local tier, and a
new entry is written to both. Every outcome is counted in the stats the caller passes.

A shared tier that needs the session's Ray connection (``ray://head``, or any tier signed with
the cluster's secret) is a ``DeferredTier``: its lookups wait for the connection, bounded, and a
process whose lookups all hit the local tier never waits at all."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..errors import SettingsError
from ..observe.stats import Stats
from .signing import load_secret
from .store import Entry, FileTier, Miss, RedisTier, Tier, TierUnavailable, get_many

log = logging.getLogger("raycompile.cache")

# A refusal is reported once, this long after the first, so the warning can give the count of a
# whole module's lookups rather than one.
REFUSED_WARNING_DELAY_S = 2.0
# A lookup waits at most this long for the batched shared lookup (``prefetch``) its key is in;
# each tier bounds its own round trip too (Redis: 2 s; the head service: its time-out).
PREFETCH_WAIT_S = 60.0
# A batch's answers are used this long after they arrived, then dropped: a module loaded during a
# cold compile asks for kernels still compiling, whose answers (misses) nobody takes.
PREFETCH_TTL_S = 30.0


class Cache:
    """``submit(fn, *args)``: where a shared hit is copied into the local tier (an executor's
    submit, so a warm node's lookups do not wait for those writes); default: at once."""

    def __init__(self, local: FileTier | None, shared: Tier | None, stats: Stats,
                 submit: Callable[..., Any] | None = None) -> None:
        self.local, self.shared, self.stats = local, shared, stats
        self._submit = submit
        self._refused = 0
        self._warning: threading.Timer | None = None
        self._lock = threading.Lock()
        # key -> the batched shared lookup it is in (``prefetch``): (when it arrived, the answers)
        self._prefetch: dict[str, Future[tuple[float, dict[str, Entry | Miss]]]] = {}

    @classmethod
    def from_settings(cls, cache_dir: str, shared_url: str, max_bytes: int | None, stats: Stats,
                      ray_tier: Callable[[bytes], Tier] | None = None, secret: bytes | None = None) -> Cache:
        """Build the tiers, both signed with ``secret`` (default: this user's key).
        ``shared_url``: none | file:///path | redis://host:port/db | ray://head (``ray_tier(secret)``
        makes that one; the orchestrator owns everything that talks to Ray).

        Raises SettingsError for an unknown scheme."""
        check_shared_url(shared_url)
        secret = secret if secret is not None else load_secret()
        local = local_tier(cache_dir, secret, max_bytes)
        if shared_url == "ray://head":
            return cls(local, ray_tier(secret) if ray_tier is not None else None, stats)
        return cls(local, shared_tier(shared_url, secret), stats)

    def prefetch(self, keys: list[str]) -> int:
        """Look up in the shared tier, in ONE batched round trip, every key of ``keys`` the local
        tier lacks (an output module's kernels, as it loads), in the background; a ``get`` of one of
        them then waits for that answer instead of a round trip of its own. Returns how many keys
        went into the batch (0: no shared tier, or all local)."""
        shared = self.shared
        # only a tier that batches (Redis, the head service, a deferred one over them): a file tier's
        # lookups are as fast one by one, in parallel on the I/O threads
        if shared is None or not keys or self._submit is None or not hasattr(shared, "get_many"):
            return 0
        wanted = [k for k in dict.fromkeys(keys) if not (self.local is not None and self.local.has(k))]
        now = time.monotonic()
        with self._lock:
            for k, f in list(self._prefetch.items()):  # answers nobody took in time
                if f.done() and (f.exception() is not None or now - f.result()[0] > PREFETCH_TTL_S):
                    del self._prefetch[k]
            wanted = [k for k in wanted if k not in self._prefetch]
            if not wanted:
                return 0
            future: Future[tuple[float, dict[str, Entry | Miss]]] = Future()
            for k in wanted:
                self._prefetch[k] = future

        def fetch() -> None:
            try:
                answers = get_many(shared, wanted)
            except BaseException as e:  # noqa: BLE001 - handed to each waiting get, which looks up alone
                future.set_exception(e)
            else:
                future.set_result((time.monotonic(), answers))

        # A thread of its own, not the executor: the gets that wait for this batch run on the
        # executor's threads (a kernel's lookup), and a batch queued behind them was waited for
        # until PREFETCH_WAIT_S by every one of them (a cold Mixtral step's backward module: 60 s
        # on an H200, its kernels' lookups queued from codegen ahead of the module's batch).
        try:
            threading.Thread(target=fetch, name="raycompile-batch", daemon=True).start()
        except RuntimeError as e:  # the interpreter is exiting: each get looks up alone
            with self._lock:
                for k in wanted:
                    self._prefetch.pop(k, None)
            future.set_exception(e)
            return 0
        self.stats.add(shared_batches=1)
        return len(wanted)

    def _prefetched(self, key: str) -> Entry | Miss | None:
        """The batched answer for ``key`` (waited for), or None when the caller looks up by itself:
        the key is in no batch, its answer is older than ``PREFETCH_TTL_S``, the batch failed, or
        the tier was unavailable for the batch (one lookup may still get through)."""
        with self._lock:
            future = self._prefetch.pop(key, None)
        if future is None:
            return None
        try:
            arrived, answers = future.result(timeout=PREFETCH_WAIT_S)
            answer = answers.get(key)
            if time.monotonic() - arrived > PREFETCH_TTL_S or (isinstance(answer, Miss)
                                                                and answer.reason == "unavailable"):
                return None
            return answer
        except FutureTimeout:
            log.debug("raycompile: the batched shared lookup took over %.0f s; looking up %s alone",
                      PREFETCH_WAIT_S, key[:12])
        except Exception as e:  # noqa: BLE001 - whatever the batch raised: the caller looks up alone
            log.debug("raycompile: the batched shared lookup failed (%s: %s)", type(e).__name__, e)
        return None

    def get(self, key: str) -> Entry | None:
        for tier in (self.local, self.shared):
            if tier is None:
                continue
            result = (self._prefetched(key) if tier is self.shared else None) or tier.get(key)
            if isinstance(result, Entry):
                self.stats.add(bytes_read=result.size, **{f"{tier.name}_hits": 1})
                if tier is self.shared and self.local is not None:
                    self.copy_to_local(result)
                return result
            self._count(result, tier)
        self.stats.add(misses=1)
        return None

    def lookup_many(self, keys: list[str]) -> dict[str, Entry | Miss]:
        """Every key's entry: the local tier's, else the shared tier's (the keys the local tier
        lacks in ONE batched round trip; a hit is copied to the local tier). Not counted as kernel
        lookups (``local_hits``/``misses``); corrupt and refused entries are (``corrupt``,
        ``refused``). For entries looked up together, such as the generations of one entry."""
        out: dict[str, Entry | Miss] = {}
        for key in keys:
            out[key] = self.local.get(key) if self.local is not None else Miss("absent")
        wanted = [k for k, v in out.items() if not isinstance(v, Entry)]
        for key in wanted:
            if out[key].reason != "absent":  # type: ignore[union-attr]
                self._count(out[key], self.local)  # type: ignore[arg-type]
        if self.shared is not None and wanted:
            for key, got in get_many(self.shared, wanted).items():
                if isinstance(got, Entry):
                    out[key] = got
                    if self.local is not None:
                        self.copy_to_local(got)
                else:
                    self._count(got, self.shared)
                    if got.reason != "absent":
                        out[key] = got
        self.stats.add(bytes_read=sum(v.size for v in out.values() if isinstance(v, Entry)))
        return out

    def copy_to_local(self, entry: Entry) -> None:
        """Copy a shared hit into the local tier, on ``submit``'s thread where there is one."""

        def copy() -> None:
            try:
                self.stats.add(bytes_written=self.local.put(entry))  # type: ignore[union-attr]
            except OSError as e:  # a full or read-only local dir: the next process fetches it again
                self.stats.add(put_errors=1)
                log.warning("raycompile: could not copy a shared entry to the local tier (%s)", e)

        if self._submit is not None:
            try:
                self._submit(copy)
                return
            except RuntimeError:  # the executor is shut down (the session is closing)
                pass
        copy()

    def _count(self, miss: Miss, tier: Any) -> None:
        if miss.reason in ("corrupt", "refused"):
            self.stats.add(**{miss.reason: 1})
        elif miss.reason == "unavailable":
            self.stats.add(shared_unavailable=1)
        if miss.reason == "refused":
            self._refused_one(getattr(tier, "name", "?"))

    def _refused_one(self, tier: str) -> None:
        with self._lock:
            self._refused += 1
            if self._warning is not None or self._refused > 1:
                return
            self._warning = threading.Timer(REFUSED_WARNING_DELAY_S, self.warn_refused, (tier,))
            self._warning.daemon = True
            self._warning.start()

    def warn_refused(self, tier: str = "shared") -> None:
        """The one warning about entries signed with another secret (their count so far, and the
        fix); later refusals are only counted (``stats()['refused']``)."""
        with self._lock:
            count, self._refused = self._refused, -(10**9)  # never again
        if count <= 0:
            return
        log.warning(
            "raycompile: %d cache entr%s in the %s tier %s signed with another secret and refused (never "
            "loaded; compiled again here, counted in stats()['refused']). Processes that share a tier must "
            "share the secret: join the same Ray cluster (it holds one), or set the same RAYCOMPILE_SECRET "
            "on every node. `raycompile cache verify` lists such entries.",
            count, "y" if count == 1 else "ies", tier, "was" if count == 1 else "were")

    def close(self) -> None:
        """Report refusals not yet reported."""
        with self._lock:
            timer, self._warning = self._warning, None
        if timer is not None:
            timer.cancel()
            self.warn_refused(getattr(self.shared, "name", "shared"))

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
                    log.warning("raycompile: could not write cache entry to the %s tier (%s)", tier.name, e)
        evictions = self.local.evictions if self.local is not None else 0
        self.stats.add(bytes_written=written)
        self.stats.set(evictions=evictions)


class DeferredTier:
    """A shared tier made once the session's Ray connection is up (``future`` resolves to the
    tier, or None for no shared tier). A lookup waits for it at most ``timeout_s``; after one
    lookup gave up, later ones do not wait (a miss, counted ``shared_unavailable``) until it
    arrives."""

    name = "shared"

    def __init__(self, future: Future[Tier | None], timeout_s: float,
                 waited: Callable[[float], None] | None = None) -> None:
        self._future, self.timeout_s = future, timeout_s
        self._waited = waited  # told the seconds of each lookup that waited for the tier
        self._gave_up = False

    def tier(self, wait: bool = True) -> Tier | None | Miss:
        """The tier, None (there is none), or ``Miss("unavailable")`` (not there in time)."""
        if self._future.done() or (wait and not self._gave_up):
            try:
                t0 = time.monotonic()
                tier = self._future.result(timeout=self.timeout_s)
                waited = time.monotonic() - t0
                if waited > 0.01 and self._waited is not None:
                    self._waited(waited)
                if waited > 0.05:
                    log.debug("raycompile: a shared-tier lookup waited %.2f s for Ray", waited)
                return tier
            except FutureTimeout:
                if self._waited is not None:
                    self._waited(self.timeout_s)
                if not self._gave_up:
                    log.warning("raycompile: the shared cache tier was not ready within %.0f s (Ray is still "
                                "connecting); looking up locally until it is", self.timeout_s)
                self._gave_up = True
            except Exception as e:  # the session's start failed: it warned already
                log.debug("raycompile: no shared tier (%s)", e)
                return None
        return Miss("unavailable", "the Ray connection is not up yet")

    def get(self, key: str) -> Entry | Miss:
        tier = self.tier()
        if isinstance(tier, Miss):
            return tier
        return tier.get(key) if tier is not None else Miss("absent")

    def get_many(self, keys: list[str]) -> dict[str, Entry | Miss]:
        tier = self.tier()
        if isinstance(tier, Miss):
            return dict.fromkeys(keys, tier)
        return get_many(tier, keys) if tier is not None else dict.fromkeys(keys, Miss("absent"))

    def put(self, entry: Entry) -> int:
        tier = self.tier()
        if isinstance(tier, Miss):
            raise TierUnavailable(tier.detail)
        return tier.put(entry) if tier is not None else 0


def check_shared_url(url: str) -> None:
    """Raise SettingsError unless ``url`` names a shared tier raycompile has."""
    if url in ("", "none", "auto", "ray://head") or url.startswith(("file:///", "redis://", "rediss://")):
        return
    raise SettingsError(f"shared cache {url!r}: expected auto, none, ray://head, file:///path or "
                        "redis://host:port/db")


def local_tier(cache_dir: str, secret: bytes, max_bytes: int | None) -> FileTier:
    return FileTier(os.path.abspath(os.path.expanduser(cache_dir)), secret, "local", max_bytes)


def shared_tier(url: str, secret: bytes) -> Tier | None:
    if url.startswith("file://"):
        return FileTier(url.removeprefix("file://"), secret, "shared")
    if url.startswith(("redis://", "rediss://")):
        return RedisTier(url, secret)
    return None
