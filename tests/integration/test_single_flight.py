"""One compile per job (issue 31): three ranks (processes with empty Inductor caches of their own,
joined with no address to the machine's `ray start` cluster, Ray's defaults) compile the same
training step at once (a CPU model with a graph break: two frames; the first test's step sleeps at
the break, longer than the owner waits before writing its entry). One traces and compiles it;
the others trace nothing (torch's own counters: no frame converted, no graph) and run the frames
the owner compiled, served as it compiled them. Every rank's loss and gradients are bitwise those
of stock Inductor.

- Across nodes: two ranks of node A (one cache dir) and one of node B (another), sharing the
  cluster's ``ray://head`` tier (the default shared tier of a multi-node cluster): the claims are
  leases held by the head's cache service, so the job has one owner, whichever node it is on.
  (Claims in Redis and in a shared directory: tests/unit/test_flight_claims.py.)
- On one node with no shared tier: the claims are in the node's cache dir. When the owner is
  killed while it compiles, the waiters compile the step themselves, counted, and nothing hangs.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from raystart import ray_head, short_tmpdir

pytestmark = pytest.mark.slow  # four compiling subprocesses, twice

DRIVER = pathlib.Path(__file__).with_name("frames_driver.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with short_tmpdir() as tmpdir, ray_head(num_cpus=2, dashboard=False, ray_tmpdir=tmpdir):
        yield tmpdir


def start(ray_tmpdir: str, node_cache: pathlib.Path, where: pathlib.Path, stock: bool = False,
          shared: str = "none", rank: int = 0, pause_s: float = 0.0, unsaveable: bool = False) -> subprocess.Popen[str]:
    """A rank: a new process with Inductor caches of its own, the node's raycompile cache dir and
    the ``shared`` tier, and torchrun's ``RANK`` and ``LOCAL_RANK`` (an entry is shared by ranks; no ``WORLD_SIZE``: a
    job of several).
    ``pause_s``: the step sleeps that long between its two frames; ``unsaveable``: after its break
    the step calls a function whose frame torch cannot save (frames_driver.py)."""
    where.mkdir(parents=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton"),
           "RAY_TMPDIR": ray_tmpdir, "RANK": str(rank), "LOCAL_RANK": str(rank), "FRAMES_DRIVER_PAUSE_S": str(pause_s),
           "FRAMES_DRIVER_UNSAVEABLE": "1" if unsaveable else "0"}
    env.pop("WORLD_SIZE", None)  # a rank of a job of several (WORLD_SIZE=1 would lower its backward lazily)
    for name in ("RAYCOMPILE_SECRET", "RAY_ADDRESS", "RAY_AUTH_MODE"):
        env.pop(name, None)
    args = ["", shared, str(node_cache), str(where / "out.pt"), "8"] + (["stock"] if stock else [])
    return subprocess.Popen([sys.executable, str(DRIVER), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], where: pathlib.Path) -> dict[str, Any]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-3000:] + err[-6000:]
    return torch.load(where / "out.pt", weights_only=False)


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.extended  # left out of CI's run (docs/testing.md): one node's ranks in test_graph_flights.py
def test_three_ranks_of_two_nodes_compile_once(cluster: str, tmp_path: pathlib.Path) -> None:
    """The step's first frame runs longer than the owner waits before it writes an entry
    (``frames.PUBLISH_DELAY_S``), as a first run that tunes kernels does: the entry, which ends
    the flight, must still hold the frames after the break, or the waiters trace them. After the
    break comes a frame the owner cannot save: each waiter traces that one, as stock does, and is
    served the frames after it (a transformers model's output class makes one such frame)."""
    from raycompile.wrapper.frames import PUBLISH_DELAY_S

    pause = PUBLISH_DELAY_S + 2
    nodes = [tmp_path / "node-a-cache", tmp_path / "node-a-cache", tmp_path / "node-b-cache"]
    ranks = [start(cluster, node, tmp_path / f"rank{i}", shared="ray://head", rank=i, pause_s=pause, unsaveable=True)
             for i, node in enumerate(nodes)]
    results = [finish(p, tmp_path / f"rank{i}") for i, p in enumerate(ranks)]
    stock = finish(start(cluster, tmp_path / "other-node", tmp_path / "stock", stock=True, pause_s=pause,
                         unsaveable=True), tmp_path / "stock")

    rows = [r["stats"]["dynamo_functions"]["__main__.Block.forward"] for r in results]
    assert sorted(row.get("role", "") for row in rows) == ["owner", "waiter", "waiter"], rows
    assert all(row.get("flight") == "cluster" for row in rows), rows  # claimed on the head, not per node
    for r in results:
        s = r["stats"]
        role = s["dynamo_functions"]["__main__.Block.forward"]["role"]
        if role == "owner":  # 5 frames, 3 graphs (torch's counter): the forward's two, the unsaveable one's
            assert s["dynamo_frames_traced"] == 5 and r["torch_traced"] == 3 and s["dynamo_frames_served"] == 0, s
            assert s["dynamo_unsaveable"] == 1, s
            # it published its frames in flight for the waiters, and says what that took
            assert s["dynamo_flight_published"] >= 1 and s["dynamo_flight_publish_seconds"] > 0, s
        else:  # only the unsaveable frame traced (torch's own counter: its graph); the trivial
            # frame after its break skipped, as the owner's was; the others run as the owner
            # compiled them, the last included (the wait goes on after the frame traced here)
            frames = {k: v for k, v in s.items() if k.startswith(("dynamo", "jobs"))}
            assert r["torch_traced"] == 1 and s["dynamo_frames_traced"] == s["dynamo_flight_traced"] == 1, frames
            assert s["dynamo_frames_served"] >= 2 and s["dynamo_flight_gave_up"] == 0, frames
            # the owner's entry holds what it was served; the frame it traced cannot be saved:
            # nothing of its own to write (each waiter used to write the same entry again)
            assert s["dynamo_published"] == 0 and s["dynamo_flight_published"] == 0, frames
        assert equal(r["result"], stock["stock"])  # bitwise stock Inductor's loss and gradients


def _holder(pids: list[int], lock_dir: pathlib.Path) -> int | None:
    """The rank holding a flight's lock (the owner keeps the lock file open; waiters do not)."""
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(str(lock_dir)) and target.endswith(".lock"):
                    return pid
        except OSError:
            continue
    return None


def test_waiters_compile_themselves_when_the_owner_dies(cluster: str, tmp_path: pathlib.Path) -> None:
    node = tmp_path / "node-cache"
    ranks = [start(cluster, node, tmp_path / f"rank{i}", rank=i) for i in range(3)]
    lock_dir = node / "flights"
    deadline = time.monotonic() + 600
    owner = None
    # polled: other processes' files; the owner is killed once it holds the lock and both others wait
    while owner is None or len({p.name.rsplit(".", 1)[1] for p in lock_dir.glob("*.waiting.*")}) < 2:
        assert time.monotonic() < deadline and all(p.poll() is None for p in ranks), "no flight began"
        owner = owner or _holder([p.pid for p in ranks], lock_dir)
        time.sleep(0.1)
    os.kill(owner, signal.SIGKILL)
    stock = finish(start(cluster, tmp_path / "other-node", tmp_path / "stock", stock=True), tmp_path / "stock")
    for i, p in enumerate(ranks):
        if p.pid == owner:
            p.communicate(timeout=60)
            assert p.returncode == -signal.SIGKILL
            continue
        r = finish(p, tmp_path / f"rank{i}")
        s = r["stats"]
        assert s["dynamo_functions"]["__main__.Block.forward"]["flight"] == "node", s["dynamo_functions"]
        assert s["dynamo_flight_gave_up"] >= 1 and s["dynamo_frames_traced"] >= 1, s  # compiled itself, counted
        assert equal(r["result"], stock["stock"])
