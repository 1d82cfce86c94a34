"""GPU actors for benchmarks: one per GPU on every GPU node, grouped by GPU model and arch.

A benchmark is valid only on the GPU model its kernel targets, so jobs go to the actors of one
group (``GPUPool.run(work, group)``), each actor timing one candidate at a time (two at once on one
GPU would disturb each other), the next candidate going to whichever actor is free. Actors start
lazily, never at ``enable()``: in the background at the session's first GPU kernel compile
(``GPUPool.prestart``, so they are up while the farm compiles the first candidates), else at the
first benchmark (``GPUPool.start``), and are reused for the session. Each actor does its one-time
set-up (CUDA, Inductor's benchmark imports, Triton's driver) while it starts, not inside its first
candidate's timing job.

Sharing the driver's GPU: the driver times candidates too (Inductor's ATen choices, the
confirmation of the actors' fastest), and an actor on the same GPU must not time one at that
moment, or both timings are disturbed. ``hold(uuid)`` keeps the actors on that GPU (found by the
device UUID each reports) out of the rotation, after their current job, until it exits.

Where an actor's time goes: with ``profile`` (the ``profile_gpu_workers`` setting,
``RAYCOMPILE_PROFILE_GPU_WORKERS=1``) each actor runs its jobs under cProfile, and
``GPUPool.profile_reports()`` returns each one's report (a diagnosis: it slows the actors' Python).

Faults: a candidate that crashes its GPU (an illegal address leaves the CUDA context unusable)
makes its actor process exit (``GPUWorker``); Ray restarts the actor (``max_restarts``), the
candidate is marked failed (``inf``) and the other candidates go on. An actor that dies twice in a
row (its node is gone) is dropped from its group. When Ray itself fails under a call (this process
is no longer connected, the cluster is gone), the call raises FarmUnavailableError, never one of
``ray.exceptions`` (orchestrator/raycalls.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FarmUnavailableError, NoGPUError
from ..kernels.benchmark import INF, BenchJob, Payload, Timing
from ..observe.stats import Stats
from . import raycalls
from .gpu_worker import GPUWorker, Measure

log = logging.getLogger("raycompile.gpu_pool")

@dataclass
class _Actor:
    handle: Any
    gpu: str
    node_id: str
    group: str
    uuid: str = ""
    ping: Any = None  # after a death: an ``info`` call that answers once Ray has restarted the actor
    died_at: float = 0.0


class GPUPool:
    """The cluster's GPU actors. Create with the session's stats; ``close()`` ends the actors.

    What its public methods raise (nothing of ``ray.exceptions``):
    ``cluster_gpus``, ``start``, ``groups``, ``profile_reports``: FarmUnavailableError when this
    process is not connected to Ray or Ray fails under the call; ``run`` (and ``runner``'s
    function): that, and NoGPUError when the cluster has no GPU of the group; ``prestart``,
    ``hold``, ``hold_here``, ``started``, ``close``: nothing (``prestart`` logs a failed start).
    A candidate that fails, crashes its GPU or times out is a Timing of ``inf``, not an error.
    """

    def __init__(self, stats: Stats | None, measure: Measure, job_timeout_s: float = 600.0,
                 start_timeout_s: float = 120.0, profile: bool = False) -> None:
        import ray

        self._ray = ray
        self.stats = stats or Stats()
        self._measure = measure
        self.job_timeout_s = job_timeout_s
        self.start_timeout_s = start_timeout_s
        self.profile = profile
        self._actors: list[_Actor] | None = None
        self._lock = threading.Lock()  # actors are handed out under it (never held while they start)
        self._starting = threading.Lock()  # one start at a time
        self._busy: set[int] = set()  # ids of actors timing a job (runs may overlap: threads)
        # GPU uuid -> thread ident -> its holds (hold): a GPU in here has actors that take no job
        self._held: dict[str, dict[int, int]] = {}
        self._here: str | None = None  # this process's GPU uuid ("" without one), found once
        self._free = threading.Condition(self._lock)
        self._prestart: threading.Thread | None = None
        self._where = raycalls.address()  # the cluster, for messages

    @staticmethod
    def cluster_gpus() -> dict[str, int]:
        """node id -> GPUs Ray offers there (alive nodes only). Raises FarmUnavailableError when
        Ray is not connected or fails."""
        import ray

        with raycalls.calls(raycalls.address(), "listing the cluster's GPU nodes"):
            return {n["NodeID"]: int(n.get("Resources", {}).get("GPU", 0)) for n in ray.nodes()
                    if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) >= 1}

    def start(self) -> dict[str, list[str]]:
        """Start one actor per GPU on every GPU node (once); return group -> GPU ids. An actor that
        does not come up within ``start_timeout_s`` (its GPU is held by someone else) is left out.
        Raises FarmUnavailableError when Ray is not connected or fails (then a later call tries
        again)."""
        with self._starting:  # not self._lock: a timing in this process holds its GPU meanwhile
            if self._actors is not None:
                return self._groups()
            with raycalls.calls(self._where, "starting the GPU workers"):
                actors = self._start_actors()
            with self._lock:
                closed = self._actors is not None  # close() ran meanwhile: these are not wanted
                if not closed:
                    self._actors = actors
            if closed:
                for a in actors:
                    with contextlib.suppress(*raycalls.failures()):
                        self._ray.kill(a.handle)
            return self._groups()

    def _start_actors(self) -> list[_Actor]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        remote = ray.remote(GPUWorker)
        handles = []
        for node, count in sorted(self.cluster_gpus().items()):
            for _ in range(count):
                handles.append(remote.options(
                    num_gpus=1, num_cpus=0, max_restarts=-1, max_task_retries=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                ).remote(self._measure, self.profile))
        refs = [h.info.remote() for h in handles]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.start_timeout_s)
        actors = []
        for handle, ref in zip(handles, refs):
            if ref not in ready:
                log.warning("raycompile: a GPU worker did not start within %.0f s; leaving it out",
                            self.start_timeout_s)
                ray.kill(handle)
                continue
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as e:  # its set-up raised (RayTaskError), or its process died
                log.warning("raycompile: a GPU worker failed to start (%s); leaving it out", e)
                continue
            actors.append(_Actor(handle, info["gpu"], info["node_id"], info["group"], info.get("uuid", "")))
        return actors

    @property
    def started(self) -> bool:
        """Whether the actors were started (or the pool closed); never waits for a start in
        progress (False meanwhile: actors still starting take no job)."""
        return self._actors is not None

    def prestart(self) -> None:
        """Start the actors in the background, once; returns at once. ``start``/``run`` wait for a
        start in progress (one start at a time), so nothing starts twice; ``hold`` and ``started``
        never wait for it."""
        with self._lock:
            if self._actors is not None or self._prestart is not None:
                return
            self._prestart = threading.Thread(target=self._start_quietly, name="raycompile-gpu-start", daemon=True)
            self._prestart.start()

    def _start_quietly(self) -> None:
        try:
            self.start()
        except FarmUnavailableError as e:  # the first benchmark tries again and reports it
            log.warning("raycompile: starting the GPU workers in the background failed (%s: %s)", type(e).__name__, e)

    def _groups(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for a in self._actors or []:
            groups.setdefault(a.group, []).append(a.gpu)
        return groups

    def groups(self) -> dict[str, list[str]]:
        """GPU group ("NVIDIA H200 (sm_90)") -> the GPU ids of its actors (starts them)."""
        return self.start()

    def run(self, work: Sequence[tuple[BenchJob, Payload]], group: str, wall: bool = True) -> list[Timing]:
        """Time every (job, payload) on the actors of ``group``; return one Timing per job, in
        order (``inf`` for a candidate that failed, crashed its GPU or timed out). ``wall``: count
        the call's time in ``benchmark_wall_seconds`` (the compile waiting on the actors); a run
        in the background (``FarmTuningPool.prefetch``) leaves that to whoever waits on it.

        Raises NoGPUError when the cluster has no GPU of ``group``, and FarmUnavailableError when
        this process is not connected to Ray or Ray fails under the call."""
        t0 = time.monotonic()
        try:
            with raycalls.calls(self._where, f"timing {len(work)} candidate(s) on the GPU workers of {group}"):
                return self._run(work, group)
        finally:
            if wall:
                self.stats.add(benchmark_wall_seconds=time.monotonic() - t0)

    def _run(self, work: Sequence[tuple[BenchJob, Payload]], group: str) -> list[Timing]:
        self.start()
        with self._lock:
            members = [a for a in self._actors or [] if a.group == group]
        if not members:
            raise NoGPUError(group, sorted(self._groups()))
        if not work:
            return []
        ray = self._ray
        payload_refs: dict[str, Any] = {}
        for _, payload in work:  # each kernel travels once (Ray keeps it in each node's object store)
            if payload.kernel_id not in payload_refs:
                payload_refs[payload.kernel_id] = ray.put(payload)
        results: list[Timing | None] = [None] * len(work)
        queue = list(range(len(work)))
        inflight: dict[Any, tuple[int, _Actor, float]] = {}
        try:
            self._dispatch(work, group, members, payload_refs, results, queue, inflight)
        finally:  # Ray failed under the run: the actors it had taken go back (their jobs' results are dropped)
            for _, actor, _ in inflight.values():
                self._give(actor)
        out = [t if t is not None else Timing(work[i][0].index, INF, "not run") for i, t in enumerate(results)]
        self._count(work, out)
        return out

    def _dispatch(self, work: Sequence[tuple[BenchJob, Payload]], group: str, members: list[_Actor],
                  payload_refs: dict[str, Any], results: list[Timing | None], queue: list[int],
                  inflight: dict[Any, tuple[int, _Actor, float]]) -> None:
        """Send the jobs of ``queue`` to free actors of ``members`` and collect them into ``results``,
        until none is queued or in flight (``inflight``: what is out, for ``_run`` to give back)."""
        ray = self._ray
        while queue or inflight:
            while queue:
                actor = self._take(members, block=not inflight)
                if actor is None:
                    break
                i = queue.pop(0)
                job, payload = work[i]
                try:
                    ref = actor.handle.bench.remote(job, payload_refs[payload.kernel_id], actor.gpu, actor.node_id)
                except BaseException:  # noqa: BLE001 - re-raised: only the actor taken is given back first
                    self._give(actor)
                    raise
                inflight[ref] = (i, actor, time.monotonic() + self.job_timeout_s)
            if not inflight:
                if queue and not self._alive(members):
                    for i in queue:  # every actor of the group is gone
                        results[i] = Timing(work[i][0].index, INF, f"no GPU worker of {group} is left")
                    queue = []
                elif queue and self._held_by_me(members):  # none frees while this thread times here
                    for i in queue:  # (a kernel's first run inside a timing of its own): its caller times them
                        results[i] = Timing(work[i][0].index, INF, "every GPU worker of the group is on the GPU "
                                            "this thread is timing on")
                    queue = []
                continue
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            for ref in ready:
                i, actor, _ = inflight.pop(ref)
                results[i] = self._collect(ref, work[i][0], actor)
                self._give(actor)
            now = time.monotonic()
            for ref, (i, actor, deadline) in list(inflight.items()):
                if deadline < now:  # a hung candidate: restart its actor, mark it failed
                    del inflight[ref]
                    ray.kill(actor.handle, no_restart=False)
                    self._restarting(actor)
                    results[i] = Timing(work[i][0].index, INF, f"no result within {self.job_timeout_s:.0f} s",
                                        seconds=self.job_timeout_s, gpu=actor.gpu, node_id=actor.node_id)
                    self._give(actor)

    def runner(self, group: str, wall: bool = True) -> Callable[[Sequence[tuple[BenchJob, Payload]]], list[Timing]]:
        """``run`` bound to ``group``: what the Inductor hooks call."""
        return lambda work: self.run(work, group, wall)

    @contextlib.contextmanager
    def hold(self, uuid: str, timeout_s: float | None = None) -> Iterator[None]:
        """While inside, the actors on the GPU with device UUID ``uuid`` take no job; on entry,
        wait (at most ``timeout_s``, default ``job_timeout_s``) for the one they are timing.
        Re-entrant; a no-op for "" or before the actors started."""
        if not uuid:
            yield
            return
        limit = self.job_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        me = threading.get_ident()
        with self._lock:
            holds = self._held.setdefault(uuid, {})
            holds[me] = holds.get(me, 0) + 1
            while any(a.uuid == uuid and id(a) in self._busy for a in self._actors or []):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("raycompile: the GPU worker on this process's GPU is still busy after %.0f s; "
                                "timing here anyway", limit)
                    break
                self._free.wait(timeout=min(left, 0.5))
        try:
            yield
        finally:
            with self._lock:
                holds = self._held[uuid]
                holds[me] -= 1
                if not holds[me]:
                    del holds[me]
                if not holds:
                    del self._held[uuid]
                self._free.notify_all()

    def hold_here(self) -> contextlib.AbstractContextManager[None]:
        """``hold`` of this process's own GPU (the current CUDA device): for the driver's timings."""
        if self._here is None:
            import torch

            from ..kernels.benchmark import local_gpu

            try:
                gpu = local_gpu()
            except (RuntimeError, torch.cuda.DeferredCudaCallError):  # CUDA unusable here: nothing to share
                gpu = None
            self._here = gpu.uuid if gpu is not None else ""
        return self.hold(self._here)

    # -- actors ------------------------------------------------------------------------------

    def _alive(self, members: list[_Actor]) -> list[_Actor]:
        with self._lock:
            return [a for a in members if a in (self._actors or [])]

    def _held_by_me(self, members: list[_Actor]) -> bool:
        """Whether every live actor of ``members`` is on a GPU that this thread holds (``hold``)."""
        me = threading.get_ident()
        with self._lock:
            alive = [a for a in members if a in (self._actors or [])]
            return bool(alive) and all(self._held.get(a.uuid, {}).get(me) for a in alive)

    def _take(self, members: list[_Actor], block: bool) -> _Actor | None:
        while True:
            with self._lock:
                alive = [a for a in members if a in (self._actors or [])]
                idle = [a for a in alive if id(a) not in self._busy and a.uuid not in self._held]
            for a in idle:
                if self._healthy(a):
                    with self._lock:
                        if id(a) not in self._busy and a.uuid not in self._held:  # held meanwhile: skip
                            self._busy.add(id(a))
                            return a
            if not block or not alive or self._held_by_me(members):
                return None
            with self._lock:
                self._free.wait(timeout=0.2)

    def _give(self, actor: _Actor) -> None:
        with self._lock:
            self._busy.discard(id(actor))
            self._free.notify_all()

    def _restarting(self, actor: _Actor) -> None:
        actor.ping, actor.died_at = actor.handle.info.remote(), time.monotonic()

    def _healthy(self, actor: _Actor) -> bool:
        """Whether ``actor`` can take a job: True unless it died and Ray has not restarted it yet.
        One that stays down for ``start_timeout_s`` (its node is gone) is left out."""
        if actor.ping is None:
            return True
        ray = self._ray
        ready, _ = ray.wait([actor.ping], timeout=0)
        if ready:
            try:
                ray.get(actor.ping)
                actor.ping = None
                return True
            except ray.exceptions.ActorUnavailableError:  # still restarting
                actor.ping = actor.handle.info.remote()
                return False
            except ray.exceptions.RayError as e:  # died for good (ActorDiedError), or its set-up raised
                log.warning("raycompile: GPU worker %s is gone (%s); leaving it out", actor.gpu, type(e).__name__)
                self._drop(actor)
                return False
        if time.monotonic() - actor.died_at > self.start_timeout_s:
            log.warning("raycompile: GPU worker %s did not come back within %.0f s; leaving it out", actor.gpu,
                        self.start_timeout_s)
            self._drop(actor)
        return False

    def _drop(self, actor: _Actor) -> None:
        with self._lock:
            if self._actors is not None and actor in self._actors:
                self._actors.remove(actor)
            self._free.notify_all()

    def _collect(self, ref: Any, job: BenchJob, actor: _Actor) -> Timing:
        ray = self._ray
        try:
            timing: Timing = ray.get(ref)
            return timing
        except ray.exceptions.RayTaskError as e:
            return Timing(job.index, INF, str(e), gpu=actor.gpu, node_id=actor.node_id)
        except ray.exceptions.RayError as e:  # the actor process died under this candidate
            self.stats.add(gpu_restarts=1)
            self._restarting(actor)
            log.warning("raycompile: %s took down GPU worker %s; marked failed, the worker restarts (%s)",
                        job.name, actor.gpu, type(e).__name__)
            return Timing(job.index, INF, f"the GPU worker died ({type(e).__name__}): the candidate crashed its GPU",
                          gpu=actor.gpu, node_id=actor.node_id)

    def _count(self, work: Sequence[tuple[BenchJob, Payload]], timings: list[Timing]) -> None:
        for (job, _), t in zip(work, timings):
            if t.gpu:  # it reached a GPU worker
                self.stats.benchmarked(t.gpu, t.seconds, failed=t.ms == INF, label=f"benchmark {job.name}",
                                       node_id=t.node_id, pid=t.pid, started=t.started)

    def profile_reports(self, timeout_s: float = 60.0) -> dict[str, str]:
        """GPU id -> its actor's cProfile report (``profile``; else ""; what went wrong for an actor
        that died). Raises FarmUnavailableError when Ray is not connected or fails."""
        with self._lock:
            actors = list(self._actors or [])
        ray = self._ray
        with raycalls.calls(self._where, "collecting the GPU workers' profiles"):
            refs = [a.handle.profile_report.remote() for a in actors]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            out: dict[str, str] = {}
            for a, r in zip(actors, refs):
                if r in ready:
                    try:
                        out[a.gpu] = ray.get(r)
                    except ray.exceptions.RayActorError as e:  # that actor died: the others still report
                        out[a.gpu] = f"(no report: the GPU worker died: {type(e).__name__})"
            return out

    def close(self) -> None:
        """End the actors (nothing to do when Ray is gone: they went with it). Never raises."""
        with self._lock:
            actors, self._actors = self._actors or [], []
        if not raycalls.connected():  # ray.kill would start a new Ray to kill nothing
            return
        for a in actors:
            try:
                self._ray.kill(a.handle)
            except raycalls.failures():  # Ray gone meanwhile
                break

    def __enter__(self) -> GPUPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
