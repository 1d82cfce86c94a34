"""One raycompile session: what ``enable()`` builds and ``disable()`` closes, wiring the layers
(cache <- kernels <- {wrapper, orchestrator} <- here).

``enable()`` returns at once (no network, no Inductor import):
- the cache is made (the local tier, and a shared tier that needs no Ray; one that does waits
  for Ray inside its lookups: ``cache.tiered.DeferredTier``);
- Ray is brought up in the background (``orchestrator.startup.Startup``): joined or started,
  nodes probed, the farm dispatching; the first cache MISS waits for it, with its time-outs;
- a gate on torch.compile's Inductor backend installs the Inductor hooks at the first compile
  (``install``), where stock Inductor pays for importing Inductor too.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .cache import Cache
from .cache.signing import load_secret
from .cache.store import Miss
from .cache.tiered import DeferredTier, check_shared_url, local_tier, shared_tier
from .cache.usage import Usage
from .errors import FarmUnavailableError, RaycompileError
from .observe.progress import Progress
from .observe.progress import wanted as progress_wanted
from .observe.quiet import GatedThreadPool
from .observe.stats import JobRecord, Stats
from .orchestrator.connect import Target, resolve
from .orchestrator.metrics import MetricsExporter
from .orchestrator.startup import Startup, warn_fallback
from .settings import DEFAULT_CACHE_MAX_BYTES, Settings

# a whole-graph compile task's body: (pickled graph, the worker's settings) -> (pickled output, info)
GraphTask = Callable[[bytes, dict[str, Any]], tuple[bytes, dict[str, Any]]]

log = logging.getLogger("raycompile")

# The session ``enable()`` made (``current``), and the one before, kept after ``disable()`` so that
# ``stats()`` and ``report()`` still answer (``last``): the only module state of the facade.
_lock = threading.Lock()
_current: Session | None = None
_last: Session | None = None

IO_THREADS = 8  # cache lookups, result unpacking and tier writes (never on Inductor's thread)


class Session:
    """Create with settings; ``close()`` restores stock Inductor and ends what it started. Also a
    context manager. Raises SettingsError for a shared tier it does not know, and
    FarmUnavailableError for ``address="auto"`` with no cluster on this machine and ``fallback``
    off (the only checks made before returning: local, instant)."""

    def __init__(self, settings: Settings, graph_task: GraphTask | None = None) -> None:
        check_shared_url(settings.shared_cache)  # a bad setting fails here, with nothing started
        self.settings = settings
        self.stats = Stats()
        wanted = progress_wanted(settings.progress)
        self.progress = Progress(force_terminal=settings.progress is True) if wanted else None
        self.user_key = load_secret()
        self.io = GatedThreadPool(IO_THREADS, thread_name_prefix="raycompile-io")
        target: Target | None = None
        unreachable: FarmUnavailableError | None = None
        try:
            target = resolve(settings, check_remote=False)
        except FarmUnavailableError as e:
            if not settings.fallback:
                raise
            unreachable = e
            warn_fallback(self.stats, e)
        from .wrapper.compat.toolchain import TOOLCHAIN  # light: its families import Inductor lazily

        self.startup = (Startup(settings, self.stats, self.progress, self.user_key, target, toolchain=TOOLCHAIN)
                        if unreachable is None else None)
        self.metrics = (MetricsExporter.for_startup(self.stats, self.startup)
                        if self.startup is not None and settings.metrics else None)
        self.probe: Any = None  # orchestrator.secret.ClusterProbe, where the shared tier needs one
        self.cache_root = os.path.abspath(os.path.expanduser(settings.cache_dir))
        self.usage = Usage(self.cache_root)
        self.cache = Cache(local_tier(self.cache_root, settings.secret_bytes or self.user_key, self._cap()),
                           self._shared(target), self.stats, submit=self.io.submit)
        self.hooks: Any = None  # wrapper.hooks.Hooks, at the first Inductor compile
        self.winners: Any = None  # wrapper.runtime.Winners: the autotune winners output modules stitch in
        self._unbind: Any = None
        self._final_report: str | None = None
        self._torch_counted: dict[str, int] | None = None  # torch's cache counters at the first compile
        self._torch_final: dict[str, int] | None = None  # and what they added until close
        self.autotune: Any = None  # raycompile.autotune_session.AutotuneSession, likewise
        self._install_lock = threading.Lock()
        self._tuning_installed = False
        self._closed = False
        from .wrapper import compat

        self._gate = compat.inductor_entry_gated(self._compiling)
        self._gate.__enter__()
        self.frames: Any = None  # wrapper.frames.FrameCache: Dynamo precompile entries in the tiers
        self.graphs: Any = None  # wrapper.graph_compiles.GraphCompiles: whole graphs compiled by Ray tasks
        self._graph_tasks: Any = None
        # graph_task: the body of a whole-graph compile task (``raycompile/graph_worker.py``, handed
        # over by ``enable()``: that module starts the worker's own session, so this one never imports it)
        if settings.graph_compiles != "local" and self.startup is not None and graph_task is not None:
            self._start_graph_tasks(graph_task)
        if settings.dynamo_cache_on:
            self._install_frames()
        if compat.inductor_loaded():  # then installing costs milliseconds: do it now, for every path in
            self._install_hooks()

    def _install_frames(self) -> None:
        """Compiled frames from the tiers at ``torch.compile(model)`` (``wrapper/frames.py``),
        installed at the first torch.compile (where stock imports Dynamo). A hit installs the
        Inductor hooks before its output modules load, so their kernels come from this cache."""
        from .cache.inflight import Claims, InFlight
        from .cache.keys import OUTPUT_MODULE_TAG
        from .wrapper.frames import FrameCache

        def on_miss(options: dict[str, Any]) -> None:  # a function will be traced and compiled
            # the compile's Inductor config, as text (the frames key's form: "True", not True)
            config = options.get("compiler_config") or {}
            if self._ray_needed(any(str(config.get(k)) == "True" for k in ("max_autotune", "max_autotune_gemm"))):
                self.startup.begin()  # type: ignore[union-attr]

        # single flight among the processes sharing the shared tier (file:// or Redis: every node of
        # the job), else among those sharing this node's cache dir (a node's ranks)
        inflight = Claims(InFlight(os.path.join(self.cache_root, "flights"), self.cache.local),
                          self._shared_now) if self.cache.local else None
        self.frames = FrameCache(self.cache, self.stats, functools.partial(self.install, codegen=False),
                                 OUTPUT_MODULE_TAG, on_miss=on_miss,
                                 inflight=inflight, flight_wait_s=self.settings.job_timeout_s)
        self.frames.install_at_compile()

    def _shared_now(self) -> Any:
        """The shared tier if it is known now (a lookup waited for it already), else None."""
        shared = self.cache.shared
        if isinstance(shared, DeferredTier):
            shared = shared.tier(wait=False)
        return None if isinstance(shared, Miss) else shared

    def _cap(self) -> int | None:
        """The local tier's cap: the setting, else the lasting one (`raycompile cache
        set-max-size`), else the default; None for no cap (0)."""
        cap = self.settings.cache_max_bytes
        if cap is None:
            cap = self.usage.max_bytes()
        if cap is None:
            cap = DEFAULT_CACHE_MAX_BYTES
        return cap or None

    def _shared(self, target: Target | None) -> Any:
        """The shared tier now when it needs no Ray (no cluster to join, or RAYCOMPILE_SECRET
        set for a file:// or redis:// tier); one whose secret (and, for ``auto``, the cluster's
        size) a probe process asks the cluster for, so hits never wait on a Ray start
        (``orchestrator.secret.ClusterProbe``); else one that waits for the start (``ray://head``,
        Ray Client addresses), begun now."""
        url, secret = self.settings.shared_cache, self.settings.secret_bytes
        if url in ("", "none") or (url == "auto" and (target is None or not target.joins)):
            return None  # auto without a cluster: this process is the only one
        if url.startswith(("file://", "redis://", "rediss://")) and (secret or target is None or not target.joins):
            return shared_tier(url, secret or self.user_key)
        assert self.startup is not None and target is not None
        stats, startup = self.stats, self.startup
        waited = lambda s: stats.add(ray_wait_seconds=s)  # noqa: E731 - one line, named for what it counts
        if url == "ray://head" or secret or not target.address or target.address.startswith("ray://"):
            startup.begin()  # a tier served by a Ray actor: a driver connection, begun at once
            return DeferredTier(startup.shared, startup.wait_s, waited)
        from .orchestrator.secret import ClusterProbe

        self.probe = ClusterProbe(target.address, target.source == "current-cluster file", self.user_key,
                                  self.settings.connect_timeout_s, self.io.submit)
        startup.probe = self.probe.future  # whether the cluster is this machine alone (Startup.alone_here)
        tier: concurrent.futures.Future[Any] = concurrent.futures.Future()
        settled = threading.Lock()
        probed: list[bool] = []  # [True] once the probe's answer (not Ray's start) made the tier

        def waited_for(s: float) -> None:
            """A lookup waited ``s`` for the tier: for the probe's answer (it made the tier, or it was
            still pending with Ray's start not begun), else for Ray's start."""
            with settled:
                by_probe = bool(probed) or (not tier.done() and not startup.begun)
            stats.add(**{"probe_wait_seconds" if by_probe else "ray_wait_seconds": s})

        def settle(f: concurrent.futures.Future[Any] | None, value: Any = None, by_probe: bool = False) -> None:
            """The tier: ``f``'s outcome, or ``value`` without one; the first settles it
            (``by_probe``: the probe's answer)."""
            with settled:
                if tier.done():
                    return
                if by_probe:
                    probed.append(True)
                if f is not None and f.exception() is not None:
                    tier.set_exception(f.exception())  # type: ignore[arg-type]
                else:
                    tier.set_result(f.result() if f is not None else value)

        def answered(done: concurrent.futures.Future[dict[str, Any]]) -> None:
            got = done.result()
            if "secret" in got and not (url == "auto" and got["nodes"] > 1):
                settle(None, shared_tier(url, got["secret"]) if url != "auto" else None, by_probe=True)
                return
            # several nodes (auto: the head's tier), or the probe failed (Ray's start reports why)
            log.debug("raycompile: the shared tier waits for Ray (%s)", got.get("error", f"{got.get('nodes')} nodes"))
            startup.begin()
            startup.shared.add_done_callback(settle)

        def start_failed(f: concurrent.futures.Future[Any]) -> None:
            if startup.error is not None:  # Ray is not reachable: the probe cannot answer better (it
                settle(f)  # would wait out its own time-out); the start's fallback tier, at once

        self.probe.future.add_done_callback(answered)
        startup.shared.add_done_callback(start_failed)
        return DeferredTier(tier, startup.wait_s, waited_for)

    # -- the Inductor side, at the first compile ------------------------------------------------

    def _ray_needed(self, max_autotune: bool) -> bool:
        """Whether a cold compile will need Ray (so its start is begun now, to overlap the trace):
        joining a cluster (its nodes' CPUs, its other drivers, its tiers), ``compile_jobs="cluster"``
        or whole graphs on the cluster; in a Ray that would be new and private to this process, or
        in a cluster that is this machine alone (``Startup.alone_here``: a job's ranks on one node,
        whose tiers and single flights are the node's cache dir), only GPU actors' timings
        (max-autotune, or ``autotune_configs="actors"``, with a GPU here). Else its kernels compile
        in this node's Inductor workers and a Ray start would only take CPU and the GIL from the
        compile (a joined one also starts the cluster's workers): it is begun later only if
        something asks for it."""
        s = self.settings
        if self.startup is None:
            return False
        joins = self.startup.joins and not (self.startup.alone_here or self.startup.probe_pending)
        if joins or s.compile_jobs == "cluster" or s.graph_compiles != "local":
            return True
        if not (s.autotune and (max_autotune or s.autotune_configs == "actors")):
            return False
        import torch

        return torch.cuda.is_available()

    def _compiling(self, max_autotune: bool = False) -> None:
        """A graph compile starts (Inductor's backend was called: a cold compile): Ray is begun
        where the compile will need it (``_ray_needed``), to be up by the first kernel that misses
        the cache, and the hooks installed."""
        from .wrapper import compat

        compat.inductor_compiling()  # compiled frames' patch of Inductor (compile_fx is imported now anyway)
        tuning = max_autotune or compat.max_autotune_on()
        if self._ray_needed(tuning):
            self.startup.begin()  # type: ignore[union-attr]
        elif self.startup is not None and self.startup.probe_pending and self.startup.probe is not None:
            # whether the cluster is this machine alone is not known yet: begun once it is not
            self.startup.probe.add_done_callback(lambda _: self.startup.begin() if self._ray_needed(tuning) else None)
        self.install()
        if self.hooks is not None:
            self.hooks.router.start_compiling()

    def install(self, codegen: bool = True) -> None:
        """Install the Inductor hooks and the autotuning hooks (once; the gate calls this at every
        compile's start, where asking CUDA for this process's GPU costs nothing more).
        ``codegen=False`` (an entry of compiled frames about to load): all but the output module's
        codegen, which the first graph compile installs (``Hooks.install_codegen``)."""
        if not (self._tuning_installed or self._closed):
            if self._torch_counted is None:
                from .wrapper import compat

                self._torch_counted = compat.precompile.torch_cache_counters()
            self._install_hooks(codegen)
            with self._install_lock:
                if not (self._tuning_installed or self._closed):
                    from .autotune_session import AutotuneSession

                    if self.startup is not None:
                        self.autotune = AutotuneSession.for_session(
                            self.stats, self.cache, self.settings, self.startup, submit=self.io.submit,
                            registry=self.winners, compile_seams=codegen)
                    if self.autotune is not None:
                        self.hooks.router.on_triton_job = self.autotune.prestart
                    if self._graph_tasks is not None:
                        self._install_graphs()
                    self._tuning_installed = True
        if codegen:  # (also where another thread's load installed the rest first)
            self._install_codegen()
        if self.graphs is not None:
            self.graphs.prepare_thread()  # torch's config overrides are per thread

    def _start_graph_tasks(self, compile_graph: GraphTask) -> None:
        """The Ray tasks of whole-graph compiles (``orchestrator/graph_tasks.py``), made at
        ``enable()``, and their workers warmed in the background as soon as the farm is up: each
        joins its farm session, imports Inductor and starts CUDA (seconds to tens of seconds in a
        new process), while the script builds its model and Dynamo traces, not while the first
        graph waits. The workers' sessions join this cluster with this session's cache settings."""
        from .orchestrator.graph_tasks import GraphTasks

        s = self.settings
        tasks = GraphTasks(self.stats, compile_graph, s.for_worker(), s.graph_timeout_s)
        startup = self.startup
        assert startup is not None
        self._graph_tasks = tasks

        def warm() -> None:
            try:
                if startup.wait_farm() is not None:
                    tasks.warm()
            except RaycompileError as e:  # the graphs then find out themselves, and compile here
                log.debug("raycompile: graph workers not warmed: %s", e)

        self.io.submit(warm)

    def _install_graphs(self) -> None:
        """Whole-graph compiles as Ray tasks (``wrapper/graph_compiles.py``), at the first compile."""
        from .wrapper.graph_compiles import GraphCompiles

        s, tasks, startup = self.settings, self._graph_tasks, self.startup
        assert tasks is not None and startup is not None

        def send(payload: bytes, device: str) -> Any:
            if startup.wait_farm() is None:  # Ray unreachable, fallback on: the graph is compiled here
                raise FarmUnavailableError(s.address or "the Ray cluster", "Ray is unreachable")
            return tasks.send(payload, device)

        graphs = GraphCompiles(self.stats, send, s.graph_timeout_s, forward=s.graph_compiles == "cluster")
        graphs.install()
        self.graphs = graphs

    def _kernels_loaded(self, kernels: tuple[Any, ...]) -> None:
        hooks = self.hooks
        if hooks is not None:
            hooks.kernels_loaded(kernels)

    def _kernel_built(self, task: Any, inductor_dir: str) -> None:
        """A C++ kernel Inductor loaded built from its cache dir: the Router writes its entry."""
        hooks = self.hooks
        if hooks is not None:
            hooks.router.built_already(task, inductor_dir)

    def _install_codegen(self) -> None:
        """What a graph's compile needs beyond what loading compiled frames installed (the output
        module's codegen, max-autotune's seams): installed at the first compile, once."""
        with self._install_lock:
            if self._closed:
                return
            if self.hooks is not None:
                self.hooks.install_codegen()
            if self.autotune is not None:
                self.autotune.install_compile()

    def _install_hooks(self, codegen: bool = True) -> None:
        """The Inductor hooks alone: where compiles go, the output module (with ``codegen``), the
        module cache."""
        with self._install_lock:
            if self._closed:
                return
            if self.hooks is not None:
                if codegen:
                    self.hooks.install_codegen()
                return
            from .wrapper import compat, runtime
            from .wrapper.hooks import Hooks, Router

            self.winners = runtime.Winners()
            settings = self.settings
            self._unbind = runtime.bind(runtime.Binding(self.winners, settings.progress,
                                                        lambda: progress_wanted(settings.progress),
                                                        prefetch=self.cache.prefetch,
                                                        loaded=self._kernels_loaded, built=self._kernel_built))
            process_pool, submit = compat.stock_pools()
            flights = None
            if self.cache.local is not None:  # whole graphs single-flighted among this node's processes
                from .cache.inflight import InFlight
                from .wrapper.module_cache import ModuleFlights

                try:
                    flights = ModuleFlights(InFlight(os.path.join(self.cache_root, "flights"), self.cache.local),
                                            self.cache, self.stats, settings.job_timeout_s)
                except OSError as e:  # no flights dir here (a read-only cache dir): every graph lowered, as stock
                    log.warning("raycompile: whole graphs are not single-flighted (%s)", e)
            hooks = Hooks(Router(self.startup, self.stats, process_pool, submit, self.cache, io=self.io,
                                 job_timeout_s=settings.job_timeout_s, spread_configs=settings.spread_configs,
                                 worker_nice=settings.worker_nice),
                          module_flights=flights, coordesc_next_sweeps=settings.coordesc_next_sweeps)
            try:
                hooks.install(codegen)  # undoes what it did when it raises
            except BaseException:
                self._unbind()
                self._unbind = None
                raise
            self.hooks = hooks

    # -- what the facade asks -------------------------------------------------------------------

    def ready(self, timeout: float | None = None) -> dict[str, Any]:
        """Install the hooks and wait for Ray (see ``raycompile.ready``)."""
        self.install()
        if self.startup is None:
            return {"address": self.settings.address or "auto", "embedded": False, "nodes": 0, "workers": 0,
                    "shared_cache": "none", "fallback": True, "seconds": {}}
        return self.startup.ready(timeout)

    @property
    def farm(self) -> Any:
        """The farm if it is up now (never waits)."""
        return self.startup.farm if self.startup is not None else None

    def node_names(self) -> dict[str, str]:
        return self.startup.node_names() if self.startup is not None else {}

    def snapshot(self) -> dict[str, Any]:
        """The session's counters (``raycompile.stats()``), with torch's own FX-graph and
        AOTAutograd cache hits and misses since the session's first compile (``torch_*``: what
        Inductor's caches answered before raycompile's tiers were asked, on a node that compiled
        before)."""
        snap = self.stats.snapshot()
        snap.update(self._torch_final if self._torch_final is not None else self._torch_since())
        return snap

    def _torch_since(self) -> dict[str, int]:
        base = self._torch_counted
        if base is None:
            return {}
        from .wrapper import compat

        now = compat.precompile.torch_cache_counters()
        return {name: max(0, now[name] - base[name]) for name in now}  # torch's counters may be cleared

    def report(self) -> str:
        """The session's summary (``raycompile.report()``); after ``close``, as it was then."""
        if self._final_report is not None:
            return self._final_report
        from .observe.report import summary

        return summary(self.snapshot(), self.stats.job_records(), self.node_names())

    def misses(self) -> list[tuple[str, str, dict[str, str] | None]]:
        """(label, key, the key's parts) of each lookup of this session that missed every tier."""
        from .cache.keys import parts_of

        return [(label, key, parts_of(key)) for label, key in list(self.stats.missed_keys)]

    def explain(self) -> list[Any]:
        """Each miss of this session set against the shared tier's entries (the local tier's
        where there is no shared tier): ``cache.explain.Explained``, with the part of the key that
        differs from the nearest entry. Reads every manifest of that tier: seconds for a large one."""
        from .cache import explain

        tier = self._shared_now()
        if tier is None or not hasattr(tier, "manifests"):
            tier = self.cache.local
        if tier is None:
            return []
        name = f"the {tier.name} tier's secret"
        stored = explain.read(tier.manifests(), {name: tier.secret})
        return explain.explain(self.misses(), stored, name)

    def _keep_misses(self) -> None:
        """This session's misses, for `raycompile cache explain` in another process."""
        from .cache.explain import MISSES_FILE
        from .cache.files import write_atomic

        rows = [{"label": label, "key": key, "parts": parts} for label, key, parts in self.misses()]
        try:
            write_atomic(os.path.join(self.cache_root, MISSES_FILE), json.dumps(rows).encode())
        except OSError as e:
            log.debug("raycompile: this session's misses not kept (%s)", e)

    def close(self) -> None:
        if self._closed:
            return
        with self._install_lock:
            self._closed = True
        self._torch_final = self._torch_since()
        self._gate.__exit__(None, None, None)
        # last installed, first restored: the graph route (installed at the first compile) and
        # compiled frames (at the first torch.compile, before it) both set AOTAutograd's
        # force_non_lazy_backward_lowering, each restoring what it found
        if self.graphs is not None:
            self.graphs.close()
        if self.frames is not None:  # writes what is left while the hooks and tiers are up
            self.frames.close()
        if self._graph_tasks is not None:
            self._graph_tasks.close()
        if self._unbind is not None:
            self._unbind()
        if self.hooks is not None:
            self.hooks.uninstall()
        if self.autotune is not None:
            self.autotune.close()
        # lookups and winner writes in flight finish (each bounded by its tier's time-out)
        self.io.shutdown(wait=True, cancel_futures=False)
        if self.probe is not None:
            self.probe.close()
        self.cache.close()
        if self.metrics is not None:  # the last push, while Ray is still up
            self.metrics.close()
        if self.startup is not None:
            self.startup.close()
        self.usage.record(self.stats.snapshot())  # `raycompile cache stats` adds up every session
        self._keep_misses()
        if self.settings.trace:
            write_trace(self.settings.trace, self.stats.job_records(), self.node_names())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        stop(self)


def start(settings: Settings, graph_task: GraphTask | None = None) -> Session:
    """Close the current session, if any, and make a new one the current one (``graph_task``: the
    body of its whole-graph compile tasks, where ``graph_compiles`` sends graphs to the cluster)."""
    global _current
    with _lock:
        if _current is not None:
            _close(_current)
            _current = None  # a new session that fails to start leaves none current
        _current = Session(settings, graph_task)
        return _current


def stop(session: Session | None = None) -> None:
    """Close ``session`` (default: the current one); it stays ``last()`` for stats and report."""
    global _current
    with _lock:
        target = session if session is not None else _current
        if target is None:
            return
        if target is _current:
            _current = None
        _close(target)


def _close(session: Session) -> None:
    global _last
    if session._closed:
        _last = session
        return
    names = session.node_names()  # they need the session's Ray: asked before closing
    session.close()
    # the summary as it ends: closing can add jobs (the backwards no backward ran, lowered so that
    # the compiled frames are complete), which the trace written at close has too
    from .observe.report import summary

    session._final_report = summary(session.snapshot(), session.stats.job_records(), names)
    _last = session


def current() -> Session | None:
    return _current


def last() -> Session | None:
    """The current session, else the one closed last, else None."""
    return _current or _last


def write_trace(path: str, records: list[JobRecord], node_names: Mapping[str, str] | None = None) -> None:
    """Write the jobs' Chrome/Perfetto trace atomically (open it in chrome://tracing or ui.perfetto.dev)."""
    from .cache.files import write_atomic
    from .observe.report import chrome_trace

    write_atomic(os.path.abspath(path), json.dumps(chrome_trace(records, node_names)).encode())
