"""The farm: compile jobs as Ray tasks, with in-flight dedupe, time-outs and a version check.

Jobs go out as tasks that ask for one CPU and never a GPU, spread over the nodes, so
CPU-only nodes cross-compile. One dispatcher thread waits on every task in flight, detects
time-outs and hands each task that is done to a small pool of result threads
("raycompile-results"), which fetch its result (``ray.get``: deserializing a result of MBs), decide
on a retry, count it and resolve the job's ``concurrent.futures.Future`` with a ``Built`` or
``Failed`` value (running the callers' callbacks), so one slow result or callback never holds up
the others. Nothing raises into Inductor's threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..errors import FarmUnavailableError, VersionMismatchError
from ..kernels import Failed, Job, Result, Toolchain, Versions
from ..observe.progress import Progress
from ..observe.quiet import QUIET, GatedThreadPool
from ..observe.stats import Stats
from ..settings import Settings
from . import raycalls
from .connect import connect
from .remote import COMPILE_RESOURCE, _execute, _probe_versions, _warm, compile_resources

log = logging.getLogger("raycompile.farm")

RESULT_THREADS = 4  # result threads: fetch, count and hand over the results of finished jobs
RESULT_THREAD_NAME = "raycompile-results"
CLOSE_WAIT_S = 10.0  # close(): how long it waits for the dispatcher and the result threads


@dataclass
class _Pending:
    job: Job
    future: Future[Result]
    deadline: float
    crashes: int = 0  # re-runs after a worker or node died under the job
    timeouts: int = 0  # re-runs after a time-out (at most one)
    finished: bool = False  # its future is resolved (or being resolved): never twice


class Farm:
    """A connection to a Ray cluster that compiles jobs. Create with ``Farm(settings,
    toolchain=...)`` (what jobs call in Inductor: ``wrapper.compat.TOOLCHAIN``); close it.

    What its public methods raise (nothing of ``ray.exceptions``): the constructor raises
    FarmUnavailableError when Ray cannot be reached or started, or fails during the first contact,
    and VersionMismatchError when a node runs another torch or triton than this driver; ``warm``
    and ``wait_warm`` raise FarmUnavailableError when Ray is not connected or fails; ``submit``,
    ``workers`` and ``close`` never raise (a job's failure, Ray's included, is its ``Failed``).
    """

    def __init__(self, settings: Settings, stats: Stats | None = None, progress: Progress | None = None, *,
                 toolchain: Toolchain) -> None:
        import ray

        self.settings = settings
        self.toolchain = toolchain
        self.stats = stats or Stats()
        self.progress = progress
        self.versions = Versions.here()
        self._ray = ray
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[Any, _Pending] = {}  # ref -> its job, while the dispatcher waits on it
        self._handed: dict[int, _Pending] = {}  # token -> job handed to a result thread, until it is done
        self._tokens = 0
        self._inflight: dict[str, Future[Result]] = {}
        self._closed = False
        self._owns_ray = False
        self.alive = False
        self._where = settings.address or "the embedded local Ray"  # for messages
        self._warm_refs: list[Any] = []
        self._results = GatedThreadPool(RESULT_THREADS, thread_name_prefix=RESULT_THREAD_NAME)
        self._connect()
        self._where = raycalls.address()
        try:
            with raycalls.calls(self._where, "the first contact with the cluster"):
                self.nodes = self._check_nodes()
                # Retries are the farm's, not Ray's (max_retries=0): a job whose worker or node died is
                # sent again (``retries`` times) and counted in stats()["retried"], so users see it.
                self._resources = compile_resources(ray.cluster_resources())
                self.remote_cpus = self._remote_cpus()
                self._remote = ray.remote(_execute).options(
                    num_cpus=1, num_gpus=0, scheduling_strategy="SPREAD", max_retries=0, retry_exceptions=False,
                    resources=self._resources,
                )
        except BaseException:  # noqa: BLE001 - re-raised: only Ray, if this farm started it, is shut down first
            self.close()
            raise
        self.alive = True
        self._thread = threading.Thread(target=self._dispatch, name="raycompile-dispatch", daemon=True)
        self._thread.start()

    # -- connection --------------------------------------------------------------------------

    def _connect(self) -> None:
        self._owns_ray = connect(self.settings).owns

    def _check_nodes(self) -> dict[str, dict[str, Any]]:
        """First contact: probe each alive node; refuse one with another torch or triton."""
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        probe = ray.remote(_probe_versions)
        refs = [
            probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
            for n in alive
        ]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=self.settings.connect_timeout_s)
        if late:
            raise FarmUnavailableError(
                self._where,
                f"{len(late)} node(s) did not answer a probe within {self.settings.connect_timeout_s:.0f} s "
                "(raise RAYCOMPILE_CONNECT_TIMEOUT_S if workers start slowly)",
            )
        infos = []
        for node, ref in zip(alive, refs):
            try:
                infos.append(ray.get(ref, timeout=self.settings.connect_timeout_s))
            except ray.exceptions.RayError as e:  # the node died since ray.nodes() listed it
                log.warning("raycompile: node %s left the cluster during the first-contact probe (%s); "
                            "going on without it", node[:12], type(e).__name__)
        if not infos:
            raise FarmUnavailableError(self._where, "no node answered the first-contact probe")
        installed = Versions.installed()  # compared like with like: package metadata on both sides
        for info in infos:
            if info["versions"] != installed:
                v, d = info["versions"], installed
                raise VersionMismatchError(
                    f"{info['hostname']} ({info['node_id'][:12]})",
                    f"torch {d.torch} / triton {d.triton}",
                    f"torch {v.torch} / triton {v.triton}",
                )
        return {info["node_id"]: info for info in infos}

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, job: Job) -> Future[Result]:
        """Send ``job`` to the cluster, or join the identical job already in flight.

        The future resolves to ``Built`` or ``Failed`` (a ``Failed`` of kind "infrastructure"
        means Ray itself failed, and the caller should compile locally), on one of the farm's
        result threads, where its callbacks run. It never raises.
        """
        key = job.key
        if not self._warm_refs:
            try:
                self.warm()
            except FarmUnavailableError as e:  # Ray is gone: the job fails as infrastructure below
                self._mark_dead(e)
        with self._lock:
            if key in self._inflight:
                self.stats.add(deduped=1)
                return self._inflight[key]
            future: Future[Result] = Future()
            if not self.alive:
                future.set_result(Failed(key, job.label, "the Ray cluster is gone", kind="infrastructure"))
                return future
            self._inflight[key] = future
        if self._send(_Pending(job, future, 0.0)):
            self.stats.add(jobs=1)
            if self.progress is not None:
                self.progress.submitted()
        return future

    def _send(self, p: _Pending) -> bool:
        """Start (or restart) ``p``'s task; False (and ``p`` finished) if it was not sent: Ray
        refused it (the farm is dead from now on), Ray cannot take this job, or the farm closed."""
        if self._closed:
            self._finish(p, self._closed_result(p), count=False)
            return False
        try:
            raycalls.require(self._where)  # .remote() would start a new local Ray
            ref = self._remote.remote(p.job, self.toolchain)
        except (FarmUnavailableError, *raycalls.failures()) as e:  # Ray died between jobs
            self._mark_dead(e)
            self._finish(p, Failed(p.job.key, p.job.label, f"Ray refused the job: {e}", kind="infrastructure"))
            return False
        except Exception as e:  # noqa: BLE001 - Ray cannot take this one job (it does not pickle: a bug, logged
            # with its traceback): it fails alone, as infrastructure (compiled locally); the farm goes on
            log.exception("raycompile: %s cannot be sent to Ray", p.job.label)
            self._finish(p, Failed(p.job.key, p.job.label, f"cannot send the job to Ray: {type(e).__name__}: {e}",
                                   kind="infrastructure"))
            return False
        p.deadline = time.monotonic() + self.settings.job_timeout_s
        with self._lock:
            if not self._closed:
                self._pending[ref] = p
                self._wake.notify_all()
                return True
        self._cancel(ref)  # closed meanwhile: the dispatcher waits on nothing any more
        self._finish(p, self._closed_result(p), count=False)
        return False

    def _retry(self, p: _Pending, why: str) -> None:
        log.warning("raycompile: %s: %s; sending it again", p.job.label, why)
        self.stats.add(retried=1)
        self._send(p)

    def _finish(self, p: _Pending, result: Result, count: bool = True) -> None:
        """Resolve ``p``'s future with ``result`` (once: a later call does nothing), counted in the
        stats and the progress bar unless ``count`` is False (a job cut short by ``close``)."""
        with self._lock:
            if p.finished:
                return
            p.finished = True
            self._inflight.pop(p.job.key, None)
        try:
            if count:
                self.stats.ran(result)
                if self.progress is not None:
                    self.progress.finished(result)
        finally:
            p.future.set_result(result)

    @staticmethod
    def _closed_result(p: _Pending) -> Failed:
        return Failed(p.job.key, p.job.label, "the farm was closed", kind="infrastructure")

    def _mark_dead(self, error: BaseException) -> None:
        if self.alive:
            log.warning("raycompile: the Ray cluster failed (%s); compiling locally from now on", error)
            self.stats.set(ray_unavailable=f"the Ray cluster failed ({error})")
        self.alive = False

    # -- the dispatcher and the result threads -----------------------------------------------

    def _dispatch(self) -> None:
        """The dispatcher thread: waits on every task in flight and hands the finished and the
        timed-out ones to the result threads; at ``close``, resolves what it still waits on."""
        try:
            self._dispatch_loop()
        except Exception as e:  # noqa: BLE001 - a bug here would leave every job waiting forever: logged with
            # its traceback, the farm turns dead and the jobs it waits on fail as infrastructure (compiled locally)
            log.exception("raycompile: the farm's dispatcher failed")
            self._mark_dead(e)
            with self._lock:
                dead, self._pending = list(self._pending.values()), {}
            for p in dead:
                self._finish(p, Failed(p.job.key, p.job.label, f"the farm's dispatcher failed: {type(e).__name__}: {e}",
                                       kind="infrastructure"))

    def _dispatch_loop(self) -> None:
        ray = self._ray
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait(timeout=1.0)
                if self._closed:
                    pending = list(self._pending.values())
                    self._pending.clear()
                    break
                refs = list(self._pending)
            QUIET.checkpoint()  # none of this while this process times a kernel on its GPU
            try:
                raycalls.require(self._where)  # ray.wait would start a new local Ray
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05, fetch_local=True)
            except (FarmUnavailableError, *raycalls.failures()) as e:  # the cluster itself went away
                self._mark_dead(e)
                with self._lock:
                    dead, self._pending = list(self._pending.values()), {}
                for p in dead:
                    self._hand(p, self._finish, p, Failed(p.job.key, p.job.label, str(e), kind="infrastructure"))
                continue
            now = time.monotonic()
            with self._lock:
                done = [(ref, self._pending.pop(ref)) for ref in ready]
                expired = [(r, p) for r, p in self._pending.items() if p.deadline < now]
                for r, _ in expired:
                    del self._pending[r]
            for ref, p in done:
                self._hand(p, self._complete, ref, p)
            for ref, p in expired:
                self._hand(p, self._expired, ref, p)
        for p in pending:
            self._finish(p, self._closed_result(p), count=False)

    def _hand(self, p: _Pending, work: Callable[..., None], *args: Any) -> None:
        """Run ``work(*args)``, which resolves or re-sends ``p``, on a result thread."""
        with self._lock:
            token = self._tokens = self._tokens + 1
            self._handed[token] = p
        try:
            self._results.submit(self._run_handed, token, p, work, *args)
        except RuntimeError:  # close() shut the result threads down (after waiting for this thread, in vain)
            self._handed_done(token)
            self._finish(p, self._closed_result(p), count=False)

    def _run_handed(self, token: int, p: _Pending, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except Exception as e:  # noqa: BLE001 - a bug here must not leave the job's future unresolved: logged
            # with its traceback, the job fails as infrastructure (compiled locally)
            log.exception("raycompile: handling the result of %s failed", p.job.label)
            self._finish(p, Failed(p.job.key, p.job.label, f"raycompile failed handling its result: "
                                                           f"{type(e).__name__}: {e}", kind="infrastructure"))
        finally:
            self._handed_done(token)

    def _handed_done(self, token: int) -> None:
        with self._lock:
            self._handed.pop(token, None)
            self._wake.notify_all()

    def _complete(self, ref: Any, p: _Pending) -> None:
        """On a result thread: ``p``'s task ``ref`` is done: its result, or a retry where its worker
        or node died."""
        result = self._collect(ref, p.job)
        if (isinstance(result, Failed) and result.kind == "infrastructure" and self.alive
                and p.crashes < self.settings.retries):
            p.crashes += 1
            self._retry(p, f"its worker or node was lost ({result.message.splitlines()[0][:200]})")
            return
        if isinstance(result, Failed) and result.kind == "timeout" and self.alive:
            # its compiler outlived job_timeout_s in the worker, before this side's own deadline
            # (a loaded machine): the same time-out, handled the same way
            self._timed_out(p)
            return
        self._finish(p, result)

    def _expired(self, ref: Any, p: _Pending) -> None:
        """On a result thread: ``p``'s task ``ref`` outlived ``job_timeout_s``: cancelled, then sent
        once more, or failed."""
        self._cancel(ref)
        self._timed_out(p)

    def _timed_out(self, p: _Pending) -> None:
        """``p`` outlived ``job_timeout_s`` (here, or its compiler in the worker): sent once more,
        or failed."""
        if p.timeouts == 0:  # a stuck worker is more likely than a kernel that needs 2x
            p.timeouts += 1
            self._retry(p, f"no result within {self.settings.job_timeout_s:.0f} s")
            return
        msg = (f"no result within {self.settings.job_timeout_s:.0f} s, twice; raise "
               "RAYCOMPILE_JOB_TIMEOUT_S if kernels this large are expected")
        self._finish(p, Failed(p.job.key, p.job.label, msg, kind="timeout"))

    def _cancel(self, ref: Any) -> None:
        if not raycalls.connected():  # ray.cancel would start a new local Ray; the task went with the old one
            return
        try:
            self._ray.cancel(ref, force=True)
        except raycalls.failures():  # its worker, node or the cluster is gone
            pass

    def _collect(self, ref: Any, job: Job) -> Result:
        ray = self._ray
        if not raycalls.connected():  # ray.get would start a new local Ray
            return Failed(job.key, job.label, f"Ray is gone: {raycalls.NOT_CONNECTED}", kind="infrastructure")
        try:
            return ray.get(ref, timeout=self.settings.connect_timeout_s)
        except ray.exceptions.RayTaskError as e:
            return Failed(job.key, job.label, str(e))
        except (ray.exceptions.RayError, ConnectionError, TimeoutError) as e:
            # worker or node died past its retries, object lost, or the cluster is gone
            return Failed(job.key, job.label, f"{type(e).__name__}: {e}", kind="infrastructure")

    # -- workers -----------------------------------------------------------------------------

    def warm(self) -> None:
        """Start one worker per CPU, in the background: a worker's first job would otherwise pay
        for importing torch and Inductor (seconds) inside the compile. Done at the first job, not at
        start-up, so a process whose kernels all come from the cache spends no CPU on workers.
        Raises FarmUnavailableError when Ray is not connected or fails."""
        with self._lock:
            if self._warm_refs or not self.alive:
                return
            with raycalls.calls(self._where, "starting the compile workers"):
                self._warm_refs = [
                    self._ray.remote(_warm).options(num_cpus=1, scheduling_strategy="SPREAD",
                                                    resources=self._resources).remote(self.toolchain)
                    for _ in range(max(1, min(self.workers(), 256)))
                ]

    def wait_warm(self, timeout: float | None = None) -> int:
        """Warm every worker slot (``warm``) and wait for it; return the workers warmed (one whose
        warm-up failed is not). Raises FarmUnavailableError when Ray is not connected or fails."""
        raycalls.require(self._where)
        self.warm()
        refs = list(self._warm_refs)
        if not refs:  # a farm already dead or closed
            return 0
        ray = self._ray
        with raycalls.calls(self._where, "waiting for the compile workers to start"):
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout or self.settings.connect_timeout_s)
            pids = set()
            for ref in ready:
                try:
                    pids.add(ray.get(ref))
                except (ray.exceptions.RayTaskError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.NodeDiedError) as e:  # not warm: its first job pays for the imports
                    log.warning("raycompile: warming a compile worker failed (%s)", type(e).__name__)
            return len(pids)

    def _remote_cpus(self) -> float:
        """CPUs the cluster has on nodes other than this driver's: what the farm adds to this node's
        own compile workers (0 on a one-node cluster, where Inductor's pool is as fast and cheaper)."""
        here = self._ray.get_runtime_context().get_node_id()
        return sum(float(n.get("Resources", {}).get("CPU", 0)) for n in self._ray.nodes()
                   if n.get("Alive") and n.get("NodeID") != here)

    def workers(self) -> int:
        """CPUs the cluster offers compile jobs (its compile slots, where it has any); 0 when Ray
        is not connected or fails."""
        try:
            offered = self._ray.cluster_resources()
            slots = offered.get(COMPILE_RESOURCE, 0) if compile_resources(offered) else float("inf")
            return int(min(offered.get("CPU", 0), slots))
        except raycalls.failures():  # RaySystemError when not connected: cluster_resources never starts Ray
            return 0

    def close(self) -> None:
        """Stop dispatching; wait (bounded: ``CLOSE_WAIT_S``) for the results being handed over;
        resolve every job still in flight as ``Failed`` ("the farm was closed", kind
        "infrastructure"); shut Ray down if this farm started or connected it. Never raises."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if not threading.current_thread().name.startswith(RESULT_THREAD_NAME):  # from a callback: not on itself
            with self._lock:
                self._wake.wait_for(lambda: not self._handed, timeout=max(0.0, deadline - time.monotonic()))
        self._results.shutdown(wait=False, cancel_futures=True)
        with self._lock:  # cancelled before they ran, or still running (then their own _finish does nothing)
            left = list(self._handed.values())
        for p in left:
            self._finish(p, self._closed_result(p), count=False)
        if self.progress is not None:
            self.progress.close()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self.alive = False

    def __enter__(self) -> Farm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
