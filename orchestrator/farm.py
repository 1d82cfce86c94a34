"""The farm: compile jobs as Ray tasks, with in-flight dedupe, time-outs and a version check.

Jobs go out as tasks that ask for one CPU and never a GPU, spread over the nodes, so
CPU-only nodes cross-compile. One dispatcher thread waits on every task in flight and resolves
each job's ``concurrent.futures.Future`` with a ``Built`` or ``Failed`` value; it never raises
into Inductor's threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from .. import kernels
from ..errors import FarmUnavailableError, VersionMismatchError
from ..kernels import Failed, Job, Result, Versions
from ..settings import Settings
from .connect import connect
from .progress import Progress
from .stats import Stats

log = logging.getLogger("raycompile.farm")

# Custom resources a cluster may offer (cluster.yaml): compile slots a node lends to the farm, and
# GPU nodes for `raycompile precompile` variants. Asked for only when the cluster has them.
COMPILE_RESOURCE = "raycompile_compile"
GPU_RESOURCE = "raycompile_gpu"


def compile_resources(offered: dict[str, float]) -> dict[str, float]:
    """What a compile job asks for beyond one CPU: a compile slot, where the cluster has any."""
    return {COMPILE_RESOURCE: 1} if offered.get(COMPILE_RESOURCE, 0) >= 1 else {}


def _execute(job: Job) -> Result:
    """Runs on a Ray worker: the job, stamped with where it ran."""
    import ray

    started = time.time()
    result = kernels.run_job(job)
    return replace(result, node_id=ray.get_runtime_context().get_node_id(), pid=os.getpid(), started=started)


def _probe_versions() -> dict[str, Any]:
    """Runs once on each node at ``enable()``: its installed torch and triton, read without
    importing them, so first contact costs a worker's start, not an ``import torch``."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "versions": Versions.installed()}


def _probe() -> dict[str, Any]:
    """Runs on each node for ``raycompile status``: what toolchain (as imported) and GPUs it has."""
    import torch

    return {**_probe_versions(), "versions": Versions.here(),
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}


def _warm() -> int:
    """Runs once per worker slot at start-up: pay the imports before the first real job does."""
    import torch._inductor.codecache  # noqa: F401
    import torch._inductor.runtime.triton_heuristics  # noqa: F401

    try:
        import triton.compiler  # noqa: F401
    except ImportError:
        pass
    time.sleep(0.1)  # hold the CPU so the next warm task needs another worker
    return os.getpid()


@dataclass
class _Pending:
    job: Job
    future: Future[Result]
    deadline: float
    crashes: int = 0  # re-runs after a worker or node died under the job
    timeouts: int = 0  # re-runs after a time-out (at most one)


class Farm:
    """A connection to a Ray cluster that compiles jobs. Create with ``Farm(settings)``; close it.

    Raises FarmUnavailableError when Ray cannot be reached or started, and VersionMismatchError
    when a node runs another torch or triton than this driver.
    """

    def __init__(self, settings: Settings, stats: Stats | None = None, progress: Progress | None = None) -> None:
        import ray

        self.settings = settings
        self.stats = stats or Stats()
        self.progress = progress
        self.versions = Versions.here()
        self._ray = ray
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[Any, _Pending] = {}
        self._inflight: dict[str, Future[Result]] = {}
        self._closed = False
        self._owns_ray = False
        self.alive = False
        self._connect()
        try:
            self.nodes = self._check_nodes()
        except BaseException:
            self.close()
            raise
        # Retries are the farm's, not Ray's (max_retries=0): a job whose worker or node died is
        # sent again (``retries`` times) and counted in stats()["retried"], so users see it.
        self._resources = compile_resources(ray.cluster_resources())
        self.remote_cpus = self._remote_cpus()
        self._remote = ray.remote(_execute).options(
            num_cpus=1, num_gpus=0, scheduling_strategy="SPREAD", max_retries=0, retry_exceptions=False,
            resources=self._resources,
        )
        self._warm_refs: list[Any] = []
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
                self.settings.address or "the embedded local Ray",
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
            raise FarmUnavailableError(self.settings.address or "the embedded local Ray",
                                       "no node answered the first-contact probe")
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
        means Ray itself failed, and the caller should compile locally). It never raises.
        """
        key = job.key
        if not self._warm_refs:
            self.warm()
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
        """Start (or restart) ``p``'s task; False (and ``p`` finished) if Ray refused it."""
        try:
            ref = self._remote.remote(p.job)
        except Exception as e:  # Ray died between jobs
            self._mark_dead(e)
            self._finish(p.job.key, p.future,
                         Failed(p.job.key, p.job.label, f"Ray refused the job: {e}", kind="infrastructure"))
            return False
        p.deadline = time.monotonic() + self.settings.job_timeout_s
        with self._lock:
            self._pending[ref] = p
            self._wake.notify()
        return True

    def _retry(self, p: _Pending, why: str) -> None:
        log.warning("raycompile: %s: %s; sending it again", p.job.label, why)
        self.stats.add(retried=1)
        self._send(p)

    def _finish(self, key: str, future: Future[Result], result: Result) -> None:
        with self._lock:
            self._inflight.pop(key, None)
        self.stats.ran(result)
        if self.progress is not None:
            self.progress.finished(result)
        future.set_result(result)

    def _mark_dead(self, error: BaseException) -> None:
        if self.alive:
            log.warning("raycompile: the Ray cluster failed (%s); compiling locally from now on", error)
        self.alive = False

    def _dispatch(self) -> None:
        ray = self._ray
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait(timeout=1.0)
                if self._closed:
                    pending = dict(self._pending)
                    self._pending.clear()
                    break
                refs = list(self._pending)
            try:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.05, fetch_local=True)
            except Exception as e:  # the cluster itself went away
                self._mark_dead(e)
                ready = []
                with self._lock:
                    dead, self._pending = dict(self._pending), {}
                for p in dead.values():
                    self._finish(p.job.key, p.future,
                                 Failed(p.job.key, p.job.label, str(e), kind="infrastructure"))
                continue
            for ref in ready:
                with self._lock:
                    p = self._pending.pop(ref)
                result = self._collect(ref, p.job)
                if (isinstance(result, Failed) and result.kind == "infrastructure" and self.alive
                        and p.crashes < self.settings.retries):
                    p.crashes += 1
                    self._retry(p, f"its worker or node was lost ({result.message.splitlines()[0][:200]})")
                    continue
                self._finish(p.job.key, p.future, result)
            now = time.monotonic()
            with self._lock:
                expired = [(r, p) for r, p in self._pending.items() if p.deadline < now]
                for r, _ in expired:
                    del self._pending[r]
            for ref, p in expired:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
                if p.timeouts == 0:  # a stuck worker is more likely than a kernel that needs 2x
                    p.timeouts += 1
                    self._retry(p, f"no result within {self.settings.job_timeout_s:.0f} s")
                    continue
                msg = (f"no result within {self.settings.job_timeout_s:.0f} s, twice; raise "
                       "RAYCOMPILE_JOB_TIMEOUT_S if kernels this large are expected")
                self._finish(p.job.key, p.future, Failed(p.job.key, p.job.label, msg, kind="timeout"))
        for p in pending.values():
            p.future.set_result(Failed(p.job.key, p.job.label, "the farm was closed", kind="infrastructure"))

    def _collect(self, ref: Any, job: Job) -> Result:
        ray = self._ray
        try:
            return ray.get(ref, timeout=self.settings.connect_timeout_s)
        except ray.exceptions.RayTaskError as e:
            return Failed(job.key, job.label, str(e))
        except (ray.exceptions.RayError, ConnectionError, TimeoutError) as e:
            # worker or node died past its retries, object lost, or the cluster is gone
            return Failed(job.key, job.label, f"{type(e).__name__}: {e}", kind="infrastructure")

    def warm(self) -> None:
        """Start one worker per CPU, in the background: a worker's first job would otherwise pay
        for importing torch and Inductor (seconds) inside the compile. Done at the first job, not at
        start-up, so a process whose kernels all come from the cache spends no CPU on workers."""
        with self._lock:
            if self._warm_refs:
                return
            self._warm_refs = [
                self._ray.remote(_warm).options(num_cpus=1, scheduling_strategy="SPREAD",
                                                resources=self._resources).remote()
                for _ in range(max(1, min(self.workers(), 256)))
            ]

    def wait_warm(self, timeout: float | None = None) -> int:
        """Warm every worker slot (``warm``) and wait for it; return the workers warmed."""
        self.warm()
        ready, _ = self._ray.wait(self._warm_refs, num_returns=len(self._warm_refs),
                                  timeout=timeout or self.settings.connect_timeout_s)
        return len(set(self._ray.get(ready)))

    def _remote_cpus(self) -> float:
        """CPUs the cluster has on nodes other than this driver's: what the farm adds to this node's
        own compile workers (0 on a one-node cluster, where Inductor's pool is as fast and cheaper)."""
        here = self._ray.get_runtime_context().get_node_id()
        return sum(float(n.get("Resources", {}).get("CPU", 0)) for n in self._ray.nodes()
                   if n.get("Alive") and n.get("NodeID") != here)

    def workers(self) -> int:
        """CPUs the cluster offers compile jobs (its compile slots, where it has any)."""
        try:
            offered = self._ray.cluster_resources()
            slots = offered.get(COMPILE_RESOURCE, 0) if compile_resources(offered) else float("inf")
            return int(min(offered.get("CPU", 0), slots))
        except Exception:
            return 0

    def close(self) -> None:
        """Stop dispatching; shut Ray down if this farm started or connected it."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(timeout=10)
        if self.progress is not None:
            self.progress.close()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self.alive = False

    def __enter__(self) -> Farm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
