"""The session's Ray side, brought up in the background so that ``enable()`` returns at once.

Two stages, each published as soon as it is done:
1. connected: Ray joined (or an embedded one started), the shared tier's secret known (the
   cluster's, orchestrator/secret.py, when this process joins a cluster) and the shared tier made
   (``shared``, a future the cache's ``DeferredTier`` waits on: cache lookups wait for this stage
   only, never for the next);
2. ready: every node probed (torch/triton versions), the farm dispatching, the cluster-wide dedupe
   coordinator found (``wait_farm()`` waits for this stage: the first cache MISS does).

Every wait has a time-out. If Ray cannot be reached, or fails during the start, ``wait_farm()``
answers None (compile locally, counted as fallbacks) when ``fallback`` is on, and raises
FarmUnavailableError otherwise; any other failure of the start (a node with another torch or
triton: VersionMismatchError) is raised by ``wait_farm()``. No ``ray.exceptions`` class leaves
this module: Ray's failures become FarmUnavailableError where they arise (orchestrator/raycalls.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..cache.store import Tier
from ..cache.tiered import shared_tier
from ..errors import FarmUnavailableError, RaycompileError
from ..kernels.toolchain import Toolchain
from ..observe.progress import Progress
from ..observe.stats import Stats
from ..settings import Settings
from . import raycalls
from .connect import CLIENT_ATTEMPTS, CLIENT_REPORT_S, EMBEDDED, Joined, Target, connect

if TYPE_CHECKING:  # both import Ray: loaded at the start, in the background
    from .coordinator import ClusterDedupe
    from .farm import Farm

log = logging.getLogger("raycompile.startup")


def warn_fallback(stats: Stats, error: FarmUnavailableError) -> None:
    """The one warning a session gives when it compiles without Ray, and the reason kept for
    ``report()`` (``stats()['ray_unavailable']``). The compiles that then fall back say nothing
    more (wrapper/hooks.py)."""
    stats.set(ray_unavailable=f"cannot reach Ray at {error.address}: {error.reason}")
    log.warning("raycompile: %s\nCompiling locally with stock Inductor; each local compile is counted in "
                "raycompile.stats()['fallbacks'].", error)


class Startup:
    """Starts at ``begin()``: at the first thing that needs Ray (a compile that misses the cache,
    GPU timings, a ``ray://head`` tier, ``ready()``), never for a process whose compiles all hit,
    so such a process imports no Ray and its main thread shares nothing with a start. ``close()``
    tears down what it brought up (and waits, bounded, for a start still in progress).
    ``user_key`` signs a shared tier when no cluster holds a secret."""

    def __init__(self, settings: Settings, stats: Stats, progress: Progress | None, user_key: bytes,
                 target: Target | None = None, *, toolchain: Toolchain) -> None:
        self.settings, self.stats, self.progress = settings, stats, progress
        self.toolchain = toolchain  # what jobs call in Inductor (the session passes the adapter's)
        self._user_key, self._target = user_key, target
        self.shared: Future[Tier | None] = Future()
        self.shared_url = settings.shared_cache
        self.joined: Joined | None = None
        self.farm: Farm | None = None
        self.dedupe: ClusterDedupe | None = None
        self.error: BaseException | None = None
        self.seconds: dict[str, float] = {}  # stage -> seconds from the start (what report() shows)
        # the session's cluster probe (orchestrator/secret.py ClusterProbe.future): nodes alive
        self.probe: Future[dict[str, Any]] | None = None
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        self._gpu_pool: Any = None
        self._warned = False
        self._t0 = time.monotonic()  # seconds are counted from enable(), begun or not
        self._thread = threading.Thread(target=self._run, name="raycompile-start", daemon=True)

    def begin(self) -> None:
        """Start bringing Ray up in the background, once; returns at once."""
        with self._lock:
            if self._thread.ident is not None or self._closed:
                return
            self.seconds["begun"] = time.monotonic() - self._t0
            self.stats.set(ray_start_seconds=dict(self.seconds))
            self._thread.start()

    @property
    def begun(self) -> bool:
        return self._thread.ident is not None

    # -- the background start ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._start()
        except BaseException as e:  # noqa: BLE001 - reported by wait_farm() and ready(), never lost
            self.error = e
            if not self.shared.done():  # without Ray: file:// and redis:// still work, with this user's key
                url = "none" if self.shared_url in ("auto", "ray://head") else self.shared_url
                self.shared_url = url
                self.shared.set_result(self._make_shared(url, self.settings.secret_bytes or self._user_key))
            self._warn_fallback(e)
            self._closing.set()  # nothing to keep Ray up for
        finally:
            self._ready.set()
        # An embedded Ray's processes die with the THREAD that started them (ray.init sets
        # prctl(PR_SET_PDEATHSIG) on them: ray/_private/services.py), so this thread lives as
        # long as the session, and ends Ray itself.
        self._closing.wait()
        with self._lock:
            joined, self.joined = self.joined, None
        if joined is not None:
            self._shutdown(joined)

    def _start(self) -> None:
        settings = self.settings
        joined = connect(settings, self._target, self._closing.is_set)
        if not self._keep(joined=joined):
            return
        self.seconds["connected"] = time.monotonic() - self._t0
        self.stats.set(ray_start_seconds=dict(self.seconds))
        url = settings.shared_cache
        if url == "auto":  # a tier every node reads, where there are several nodes
            url = "ray://head" if self._alive_nodes() > 1 else "none"
        self.shared_url = url
        self.shared.set_result(self._make_shared(url, self._shared_secret(joined)))
        from .farm import Farm

        farm = Farm(settings, self.stats, self.progress, toolchain=self.toolchain)
        if not self._keep(farm=farm):
            return
        self.seconds["ready"] = time.monotonic() - self._t0
        self.stats.set(ray_start_seconds=dict(self.seconds))
        if settings.cluster_dedupe and joined.target.joins:
            # drivers of one cluster that miss on the same key wait for one compile; with no
            # shared tier they share entries through this node's local tier (the same cache dir)
            from .coordinator import ClusterDedupe

            local = os.path.abspath(os.path.expanduser(settings.cache_dir))
            scope = url if url not in ("", "none") else f"node:{self._node_id()}:{local}"
            self._keep(dedupe=ClusterDedupe.start(settings, self.stats, scope=scope))

    def _keep(self, **parts: Any) -> bool:
        """Publish ``parts`` unless the session closed meanwhile (then close them: nobody will;
        a connection is published either way, for this thread to end)."""
        with self._lock:
            if "joined" in parts:
                self.joined = parts["joined"]
            if not self._closed:
                for name, value in parts.items():
                    setattr(self, name, value)
                return True
        for name, value in parts.items():
            if name != "joined" and value is not None:
                value.close()
        return False

    def _shared_secret(self, joined: Joined) -> bytes:
        if self.settings.secret_bytes:
            return self.settings.secret_bytes
        if joined.embedded:  # a Ray private to this process: nobody else to agree with
            return self._user_key
        from .secret import cluster_secret

        return cluster_secret(self._user_key)

    def _make_shared(self, url: str, secret: bytes) -> Tier | None:
        if url == "ray://head":
            from .cache_service import RayHeadTier

            return RayHeadTier(secret, root=self.settings.head_cache_dir, namespace=self.settings.namespace,
                               timeout_s=self.settings.connect_timeout_s)
        return shared_tier(url, secret)

    @staticmethod
    def _alive_nodes() -> int:
        import ray

        with raycalls.calls(raycalls.address(), "listing the cluster's nodes"):
            return sum(1 for n in ray.nodes() if n.get("Alive"))

    @staticmethod
    def _node_id() -> str:
        import ray

        with raycalls.calls(raycalls.address(), "asking Ray for this node's id"):
            return ray.get_runtime_context().get_node_id()

    def _warn_fallback(self, e: BaseException) -> None:
        if isinstance(e, FarmUnavailableError) and self.settings.fallback and not self._warned:
            self._warned = True
            warn_fallback(self.stats, e)

    # -- what the session asks -----------------------------------------------------------------

    @property
    def joins(self) -> bool:
        """Whether this session joins a cluster others can join (else its Ray would be a new
        embedded one, private to this process)."""
        return self._target is not None and self._target.joins

    @property
    def wait_s(self) -> float:
        """How long a compile waits for the start: reaching Ray, then the first-contact probe; for
        a Ray Client address, also the joins tried again when the head's server for this client
        died (``connect.CLIENT_ATTEMPTS``, each reported by Ray after ``CLIENT_REPORT_S``)."""
        wait = 2 * self.settings.connect_timeout_s
        address = self._target.address if self._target is not None else None
        if address is not None and address.startswith("ray://"):
            wait += (CLIENT_ATTEMPTS - 1) * CLIENT_REPORT_S
        return wait

    def wait_farm(self, timeout: float | None = None) -> Farm | None:
        """The farm once the start is done (waiting at most ``timeout``, default ``wait_s``); None
        when Ray is unreachable and ``fallback`` is on (compile locally).

        Raises FarmUnavailableError when Ray is unreachable, failed during the start, or is still
        starting after the wait, and ``fallback`` is off; VersionMismatchError when a node runs
        another torch or triton (and, for a bug in the start, what it raised)."""
        self.begin()
        if not self._ready.wait(self.wait_s if timeout is None else timeout):
            error = FarmUnavailableError(self._where(), f"Ray did not come up within {self.wait_s:.0f} s "
                                                        "(raise RAYCOMPILE_CONNECT_TIMEOUT_S if it starts slowly)")
            if not self.settings.fallback:
                raise error
            self._warn_fallback(error)
            return None
        if self.error is not None:
            if isinstance(self.error, FarmUnavailableError) and self.settings.fallback:
                return None
            raise self.error
        farm = self.farm
        return farm if farm is not None and farm.alive else None

    def _may_be_alone(self) -> bool:
        # not "this process": already connected, asking that Ray costs nothing more
        return self.joins and self._target is not None and self.probe is not None \
            and self._target.source != "this process"

    @property
    def alone_here(self) -> bool:
        """Whether the cluster joined is this machine alone: one node alive when the session's
        probe asked (False until it answers), and that node this machine (the cluster of its
        current-cluster file, started here; or one named by an address whose node has one of this
        machine's IP addresses). Its other drivers are this node's processes (a job's ranks),
        which share this node's cache dir: its tiers, its single flights."""
        if not self._may_be_alone() or not self.probe.done():  # type: ignore[union-attr]
            return False
        got = self.probe.result()  # type: ignore[union-attr]
        here = self._target.source == "current-cluster file" or got.get("here")  # type: ignore[union-attr]
        return "secret" in got and got.get("nodes") == 1 and bool(here)

    @property
    def probe_pending(self) -> bool:
        """Whether ``alone_here`` waits for the probe's answer."""
        return self._may_be_alone() and not self.probe.done()  # type: ignore[union-attr]

    def compiles_here(self, farm: Farm | None = None, wait: bool = False) -> bool:
        """Whether a compile runs in this node's own Inductor workers rather than on Ray
        (``compile_jobs``). Without ``farm``: True only where no Ray is needed at all (``local``;
        ``auto`` in a Ray private to this process, or in a cluster that is this machine alone: no
        other node's CPUs, and the node's other drivers share its cache dir); ``wait``: for the
        probe's answer, where that decides (at most its time-out), else answered at once. With the
        farm: ``auto`` is local when the cluster has no CPUs beyond this node's."""
        mode = self.settings.compile_jobs
        if mode != "auto":
            return mode == "local"
        if farm is None:
            if self._target is None:
                return False
            if wait and self.probe_pending:
                with contextlib.suppress(Exception):  # unanswered: not known to be alone
                    self.probe.result(timeout=self.settings.connect_timeout_s)  # type: ignore[union-attr]
            return not self._target.joins or self.alone_here
        return not farm.remote_cpus

    def _where(self) -> str:
        target = self.joined.target if self.joined else self._target
        return (target.address if target else self.settings.address) or EMBEDDED

    def ready(self, timeout: float | None = None) -> dict[str, Any]:
        """Wait for the start; what it brought up (address, nodes, workers, shared tier, seconds).
        Raises as ``wait_farm`` does."""
        farm = self.wait_farm(timeout)
        return {"address": self._where(), "embedded": bool(self.joined and self.joined.embedded),
                "nodes": len(farm.nodes) if farm else 0, "workers": farm.workers() if farm else 0,
                "shared_cache": self.shared_url, "fallback": farm is None, "seconds": dict(self.seconds)}

    def gpu_pool(self, timeout: float | None = None) -> Any:
        """The session's GPU actors (``orchestrator.gpu_pool.GPUPool``, made once the farm is up,
        its actors started lazily), or None without Ray."""
        self.begin()
        try:
            farm = self.wait_farm(timeout)
        except RaycompileError:  # FarmUnavailableError, VersionMismatchError: the compile needing the farm reports it
            return None
        if farm is None:
            return None
        with self._lock:
            if self._gpu_pool is None and not self._closed:
                from ..kernels.benchmark import GPUTiming
                from .gpu_pool import GPUPool

                self._gpu_pool = GPUPool(self.stats, GPUTiming(self.toolchain),
                                         job_timeout_s=self.settings.job_timeout_s,
                                         profile=self.settings.profile_gpu_workers)
            return self._gpu_pool

    def started_gpu_pool(self) -> Any:
        """The GPU pool if it exists already (never waits, never makes one)."""
        return self._gpu_pool

    def node_names(self) -> dict[str, str]:
        farm = self.farm if self._ready.is_set() else None
        return {n: info["hostname"] for n, info in farm.nodes.items()} if farm is not None else {}

    def close(self) -> None:
        """Close what the start brought up, in reverse order; Ray last, if this session started it
        (on the start's own thread: see ``_run``). Waits, bounded, for a start in progress."""
        with self._lock:
            self._closed = True
            pool, self._gpu_pool = self._gpu_pool, None
            parts = [self.dedupe, pool, self.farm]
        for part in parts:
            if part is not None:
                part.close()
        self._closing.set()
        if not self.begun:
            return
        self._thread.join(timeout=self.settings.connect_timeout_s)
        if self._thread.is_alive():  # stuck inside ray.init: it closes what it makes when it returns
            log.warning("raycompile: Ray is still connecting after %.0f s; leaving it to finish in the background",
                        self.settings.connect_timeout_s)

    @staticmethod
    def _shutdown(joined: Joined) -> None:
        if joined.owns:
            import ray

            if ray.is_initialized():
                ray.shutdown()
