"""Fault injection on a real Ray cluster on one machine (``ray.cluster_utils.Cluster``): kill the
worker running a compile job, wait until a job runs on a given node, damage a cache entry.

Used by tests/integration/test_reliability.py and benchmarks/chaos.py. Processes are found through
/proc: a Ray worker running a farm job is titled ``ray::_execute`` and is a child of its node's
raylet, so a cluster's own workers are told apart from any other Ray on the machine.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import threading
import time
from typing import Any


def raylet_pids(cluster: Any, include_head: bool = True) -> dict[int, Any]:
    """raylet pid -> node, for the nodes of a ``cluster_utils.Cluster``."""
    nodes = list(cluster.worker_nodes) + ([cluster.head_node] if include_head else [])
    return {n.all_processes["raylet"][0].process.pid: n for n in nodes}


def raylet_of(pid: int) -> int:
    """The pid of a worker's raylet (its parent)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def executing_workers(raylets: set[int] | dict[int, Any]) -> list[int]:
    """Pids of workers of these raylets that are running a farm job right now."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if not f.read().startswith(b"ray::_execute"):
                    continue
            if raylet_of(int(d)) in raylets:
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return out


def wait_for_job(raylets: set[int] | dict[int, Any], timeout: float, stop: threading.Event | None = None) -> int | None:
    """The pid of a worker of these raylets running a farm job, once there is one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        pids = executing_workers(raylets)
        if pids:
            return pids[0]
        time.sleep(0.01)
    return None


def freeze_on_job(pid: int, raylets: set[int] | dict[int, Any]) -> bool:
    """SIGSTOP a worker seen on a farm job and keep it stopped only if it is still on that job.

    A worker resets its title before it replies to the job's owner, and it replies straight to
    the owner, not through its raylet. So a worker stopped while its title still names the job
    has not handed the result over: killing it (or its node) afterwards is sure to lose the job.
    Returns False (the worker resumed) when the job was over already."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    if pid in executing_workers(raylets):
        return True
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    return False


class WorkerKiller(threading.Thread):
    """SIGKILLs up to ``count`` workers of ``raylets``, each while it runs a farm job (``delay``
    seconds after it started one, so the kill lands mid-compile). ``killed`` lists the pids."""

    def __init__(self, raylets: set[int] | dict[int, Any], count: int = 1, delay: float = 0.2,
                 timeout: float = 300) -> None:
        super().__init__(daemon=True)
        self.raylets, self.count, self.delay, self.timeout = set(raylets), count, delay, timeout
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while len(self.killed) < self.count and time.monotonic() < deadline and not self.stop.is_set():
            pid = wait_for_job(self.raylets, deadline - time.monotonic(), self.stop)
            if pid is None:
                return
            time.sleep(self.delay)
            if freeze_on_job(pid, self.raylets):  # still on the job, and now sure to lose it
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)

    def __enter__(self) -> WorkerKiller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(timeout=10)


def damage_entry(root: str | os.PathLike[str], rng: random.Random) -> str | None:
    """Damage one entry of the file tier at ``root`` (truncate, flip a byte, delete a blob or the
    manifest); return how, or None if the tier is empty."""
    entries = sorted(p for p in pathlib.Path(root, "entries").glob("*/*")
                     if p.is_dir() and ".tmp-" not in p.name and ".trash-" not in p.name)
    if not entries:
        return None
    entry = rng.choice(entries)
    files = sorted(entry.iterdir())
    if not files:
        return None
    target = rng.choice(files)
    how = rng.choice(("truncate", "flip", "delete"))
    if how == "delete":
        target.unlink()
    elif how == "truncate":
        target.write_bytes(target.read_bytes()[: max(0, target.stat().st_size // 2)])
    else:
        data = bytearray(target.read_bytes())
        if not data:
            target.unlink()
            return f"delete {entry.name[:12]}/{target.name}"
        data[rng.randrange(len(data))] ^= 0xFF
        target.write_bytes(bytes(data))
    return f"{how} {entry.name[:12]}/{target.name}"


def sound_entries(root: str | os.PathLike[str], secret: bytes) -> tuple[set[str], set[str]]:
    """(keys of sound entries, keys of bad ones) in the file tier at ``root``, read-only."""
    from raycompile.cache.store import Entry, FileTier, verify_entry

    tier = FileTier(str(root), secret, "check")
    good, bad = set(), set()
    for _, _, key in tier.entries():
        raw = tier.get_raw(key)
        ok = raw is not None and isinstance(verify_entry(key, raw[0], raw[1], secret), Entry)
        (good if ok else bad).add(key)
    return good, bad
