"""Chaos benchmark of the single flight (issue 32): rounds in which N ranks compile the same
training step at once, on a real `ray start --head` cluster of this machine, while one fault is
injected into the flight; every rank's loss and gradients are checked bitwise against stock
Inductor, and every entry the shared tier ever held is checked at the end.

    python benchmarks/chaos_flights.py [--rounds 6] [--ranks 3] [--seed 1] [--label cpu2]

Each round, N rank processes (benchmarks/flights_rank.py: empty Inductor caches of their own,
joined with no address to the cluster this script started, as ray.init() joins the machine's
cluster, kernel compiles sent to the cluster: RAYCOMPILE_COMPILE_JOBS=cluster) compile a model of a
width no other round uses, under a cache-key tag of the round's own (TORCH_COMPILE_CACHE_KEY_TAG:
the function's frames key leaves shapes to Dynamo's guards, so without it a round would load the
entry of an earlier round sharing its tier, miss its guards and trace in every rank, with no flight),
so each round is a cold compile; the ranks share one node cache dir and either the ``ray://head``
tier (claims: leases held by the head's cache service) or no shared tier (claims: flocks in the
node cache dir). One fault per round:

  kill-owner          SIGKILL the rank that owns the flight while it compiles. The owner is the rank
                      whose own raycompile.stats() says role "owner" (flights_rank.py's watcher
                      thread writes it to the rank's phase file the moment the flight is claimed);
                      for node claims it is cross-checked against the process holding the flight's
                      .lock file open (as tests/integration/test_single_flight.py's ``_holder``).
  kill-coordinator    SIGKILL the worker process of the ``raycompile-coordinator`` actor (the
                      child of this cluster's raylet titled ``ray::Coordinator``); it restarts.
  kill-cache-service  SIGKILL the worker of the ``raycompile-cache`` actor (``ray::CacheService``),
                      which holds the flight's leases: it restarts with none.
  restart-gcs         SIGKILL the head's gcs_server. Ray 2.60 without Redis-backed GCS fault
                      tolerance does not recover: `ray start --block` kills the rest of the cluster
                      within a second. The ranks must still finish, right, by compiling locally
                      (fallback is on by default); a fresh cluster is started for the next round.
  none                a clean round.

Every fault but ``none`` is injected once the flight's roles are known (every rank claimed, or
``--claim-wait`` seconds) and a kernel compile job of the owner runs on the cluster (a worker
titled ``ray::_execute``; or ``--job-wait`` seconds passed), after a seeded jitter; it "landed" if
its target existed and was killed while the owner had not finished its step. The faults cycle
through seeded permutations of (kill-owner ray://head, kill-owner node, kill-coordinator,
kill-cache-service ray://head, restart-gcs, none), so six rounds have each once (odd cycles flip
the tier of kill-coordinator, restart-gcs and none); ``--draw random`` draws each at random.

Every wait has a time-out: a rank still running ``--rank-timeout`` seconds after its round began is
a hang (its process group is killed). Prints a row per round and the totals; writes
benchmarks/results/chaos_flights_<label>.json. Exit status 1 if a rank's result is wrong or
missing (a rank not killed on purpose that crashed), an entry was lost, or a rank hung.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))  # the fault injectors and clusters the tests use

from faults import executing_workers, raylet_of, sound_entries  # noqa: E402
from raystart import new_token, ray_head  # noqa: E402

RANK = HERE / "flights_rank.py"
LABEL = "__main__.Block.forward"
HEAD, NODE = "ray://head", "none"
FAULTS = ("kill-owner", "kill-coordinator", "kill-cache-service", "restart-gcs", "none")
# one cycle: every fault once, the owner killed under both kinds of claims
CYCLE = (("kill-owner", HEAD), ("kill-owner", NODE), ("kill-coordinator", HEAD), ("kill-cache-service", HEAD),
         ("restart-gcs", HEAD), ("none", NODE))
SECRET = "chaos-flights"


def shape(r: int) -> tuple[int, int]:
    """Round ``r``'s (width, batch): no other round's, so its compile is cold."""
    return 40 + 8 * r, 6 + r


def schedule(rounds: int, rng: random.Random, draw: str) -> list[tuple[str, str]]:
    if draw == "random":
        out = []
        for _ in range(rounds):
            fault = rng.choice(FAULTS)
            out.append((fault, HEAD if fault == "kill-cache-service" else rng.choice((HEAD, NODE))))
        return out
    out, cycle = [], 0
    while len(out) < rounds:
        pairs = list(CYCLE)
        rng.shuffle(pairs)
        flip = {HEAD: NODE, NODE: HEAD}
        out += [(f, flip[t] if cycle % 2 and f in ("kill-coordinator", "restart-gcs", "none") else t)
                for f, t in pairs]
        cycle += 1
    return out[:rounds]


# -- processes, found through /proc ------------------------------------------------------------------


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_after_grace(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM ``pids`` (processes of this script's own clusters or ranks), SIGKILL what is left
    after ``grace`` seconds (gcs_server ignores SIGTERM)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


class Cluster:
    """A `ray start --head` cluster (tests/integration/raystart.py's ``ray_head``: its own ports and
    temp dir, the current cluster of processes whose RAY_TMPDIR is ``ray_tmpdir``), startable
    again after it died."""

    def __init__(self, ray_tmpdir: str, logs: pathlib.Path) -> None:
        self.ray_tmpdir, self.logs = ray_tmpdir, logs
        self.generation = 0
        self.port = 0
        self._stack: contextlib.ExitStack | None = None

    def start(self) -> None:
        stack = contextlib.ExitStack()
        head = stack.enter_context(ray_head(num_cpus=2, dashboard=False, ray_tmpdir=self.ray_tmpdir))
        self._stack, self.port = stack, int(head.address.rsplit(":", 1)[1])
        self.generation += 1

    def _component(self, name: bytes) -> int | None:
        """The pid of this cluster's ``name`` process (its binary's name; its arguments name the
        cluster's temp dir, which no other cluster shares)."""
        mine = os.path.join(self.ray_tmpdir, "ray", "").encode()
        for pid in _pids():
            line = _cmdline(pid)
            if line.split(b"\0")[0].endswith(b"/" + name) and mine in line and _alive(pid):
                return pid
        return None

    def gcs(self) -> int | None:
        return self._component(b"gcs_server")

    def raylet(self) -> int | None:
        return self._component(b"raylet")

    def alive(self) -> bool:
        return self._stack is not None and self.gcs() is not None and self.raylet() is not None

    def actor(self, cls: str) -> int | None:
        """The pid of this cluster's worker running actor class ``cls`` (its title: ray::CLS)."""
        raylet = self.raylet()
        if raylet is None:
            return None
        for pid in _pids():
            line = _cmdline(pid)
            if (line.startswith(f"ray::{cls}\0".encode()) or line.startswith(f"ray::{cls}.".encode())
                    or line.startswith(f"ray::{cls} ".encode())):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    if raylet_of(pid) == raylet and _alive(pid):
                        return pid
        return None

    def stop(self) -> None:
        if self._stack is None:
            return
        temp = os.path.join(self.ray_tmpdir, "ray")
        own = [p for p in _pids() if os.path.join(temp, "").encode() in _cmdline(p)]  # this cluster's processes
        with contextlib.suppress(OSError):  # what `ray start` said (a dead cluster's last words)
            shutil.copy(os.path.join(temp, "ray-start.log"), self.logs / f"cluster{self.generation}-ray-start.log")
        with contextlib.suppress(OSError):
            shutil.copytree(os.path.join(temp, "session_latest", "logs"), self.logs / f"cluster{self.generation}-logs",
                            ignore=shutil.ignore_patterns("*.err", "events"))
        stack, self._stack = self._stack, None
        stack.close()  # SIGTERM to `ray start --block`, which stops what it started
        kill_after_grace([p for p in own if _alive(p)])  # anything it left behind


# -- a round -------------------------------------------------------------------------------------


@dataclass
class Rank:
    index: int
    dir: pathlib.Path
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    hung: bool = False
    killed: bool = False  # by the fault, on purpose

    def phase(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        try:
            text = (self.dir / "phase").read_text()
        except OSError:
            return out
        for line in text.splitlines():
            word, *rest = line.split()
            out[word] = rest
        return out

    def role(self) -> str | None:
        got = self.phase().get("role")
        return got[0] if got else None


def start_rank(i: int, where: pathlib.Path, env: dict[str, str], shared: str, node_cache: pathlib.Path,
               width: int, batch: int, tag: str) -> Rank:
    where.mkdir(parents=True)
    renv = {**env, "TORCHINDUCTOR_CACHE_DIR": str(where / "inductor"), "TRITON_CACHE_DIR": str(where / "triton"),
            "TORCH_COMPILE_CACHE_KEY_TAG": tag}
    with open(where / "stdout", "wb") as out, open(where / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, str(RANK), "rank", shared, str(node_cache), str(where),
                                 str(width), str(batch)], env=renv, stdout=out, stderr=err, start_new_session=True)
    return Rank(i, where, proc)


def lock_holder(pids: list[int], lock_dir: pathlib.Path) -> int | None:
    """The rank holding a node flight's lock (the owner keeps its .lock file open; waiters do not)."""
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(str(lock_dir)) and target.endswith(".lock"):
                    return pid
        except OSError:
            continue
    return None


class Injector(threading.Thread):
    """Injects ``fault`` into a round once the flight is under way; ``landed``, ``note``."""

    def __init__(self, fault: str, tier: str, ranks: list[Rank], cluster: Cluster, node_cache: pathlib.Path,
                 rng: random.Random, claim_wait: float, job_wait: float) -> None:
        super().__init__(daemon=True)
        self.fault, self.tier, self.ranks, self.cluster, self.node_cache = fault, tier, ranks, cluster, node_cache
        self.jitter = rng.uniform(0.0, 1.0)
        self.claim_wait, self.job_wait = claim_wait, job_wait
        self.landed = fault == "none"
        self.note = ""
        self.owner: Rank | None = None
        self.cluster_died = False
        self.actor_back: bool | None = None
        self.stop = threading.Event()

    def _running(self) -> list[Rank]:
        return [r for r in self.ranks if r.proc.poll() is None]

    def _owner(self) -> Rank | None:
        return next((r for r in self.ranks if r.role() == "owner"), None)

    def run(self) -> None:
        if self.fault == "none":
            return
        try:
            self._inject()
        except Exception as e:  # noqa: BLE001 - said in the round's note, never the benchmark's crash
            self.note = f"injector failed: {type(e).__name__}: {e}"

    def _inject(self) -> None:
        # 1. the flight is claimed: every rank has a role (or claim_wait passed with an owner)
        deadline = time.monotonic() + self.claim_wait
        while not self.stop.is_set():
            roles = [r.role() for r in self.ranks]
            if all(roles) or (time.monotonic() > deadline and "owner" in roles):
                break
            if not self._running() or time.monotonic() > deadline + 120:
                self.note = f"no flight was claimed (roles {roles})"
                return
            time.sleep(0.05)
        owner = self.owner = self._owner()
        # 2. the owner compiles: a kernel job runs on this cluster (or job_wait passed)
        raylet = self.cluster.raylet()
        deadline = time.monotonic() + self.job_wait
        job = None
        while not self.stop.is_set() and time.monotonic() < deadline and raylet is not None:
            jobs = executing_workers({raylet})
            if jobs:
                job = jobs[0]
                break
            time.sleep(0.01)
        time.sleep(self.jitter)
        during = f"{'a kernel job running (worker ' + str(job) + ')' if job else 'no kernel job seen'}, " \
                 f"+{self.jitter:.2f} s"
        compiling = owner is not None and owner.proc.poll() is None and "stepped" not in owner.phase()
        if self.fault == "kill-owner":
            if owner is None:
                self.note = "no owner found"
                return
            check = ""
            if self.tier == NODE:
                holder = lock_holder([r.proc.pid for r in self.ranks], self.node_cache / "flights")
                check = f"; .lock held by {'the same' if holder == owner.proc.pid else holder}"
            if not compiling:
                self.note = f"owner r{owner.index} had finished its step{check}"
                return
            os.kill(owner.proc.pid, signal.SIGKILL)
            owner.killed, self.landed = True, True
            self.note = f"SIGKILL owner r{owner.index} pid {owner.proc.pid} ({during}){check}"
        elif self.fault in ("kill-coordinator", "kill-cache-service"):
            cls = "Coordinator" if self.fault == "kill-coordinator" else "CacheService"
            pid = self.cluster.actor(cls)
            if pid is None:
                self.note = f"no ray::{cls} worker found"
                return
            os.kill(pid, signal.SIGKILL)
            self.landed = compiling
            self.note = f"SIGKILL ray::{cls} pid {pid} ({during})" + ("" if compiling else "; the owner was done")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not self.stop.is_set():
                back = self.cluster.actor(cls)
                if back is not None and back != pid:
                    self.actor_back = True
                    self.note += f"; restarted as pid {back}"
                    break
                time.sleep(0.2)
            else:
                self.actor_back = False
        elif self.fault == "restart-gcs":
            pid = self.cluster.gcs()
            if pid is None:
                self.note = "no gcs_server found"
                return
            os.kill(pid, signal.SIGKILL)
            self.landed = compiling
            self.note = f"SIGKILL gcs_server pid {pid} ({during})" + ("" if compiling else "; the owner was done")
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.cluster.raylet() is not None:
                time.sleep(0.2)
            self.cluster_died = self.cluster.raylet() is None
            self.note += "; the cluster died" if self.cluster_died else "; the raylet lives on"


def tier_keys(root: pathlib.Path) -> set[str]:
    """The keys of the file tier at ``root`` now (a listing, racing nothing: errors skipped)."""
    out: set[str] = set()
    base = root / "entries"
    with contextlib.suppress(OSError):
        for shard in os.listdir(base):
            with contextlib.suppress(OSError):
                out.update(k for k in os.listdir(base / shard) if ".tmp-" not in k and ".trash-" not in k
                           and (base / shard / k / "manifest.json").exists())
    return out


def _log_lines(rank: Rank, limit: int = 12) -> list[str]:
    """The rank's notable log lines: raycompile's warnings and give-ups, errors, a traceback's tail."""
    try:
        text = (rank.dir / "stderr").read_text(errors="replace")
    except OSError:
        return []
    lines = [ln for ln in text.splitlines() if "Failed to push error to driver" not in ln]  # Ray's, every second
    keep = [ln for ln in lines if re.search(r"raycompile\S* (WARNING|INFO|ERROR)|Error|FATAL|Traceback|\bF\d{4} "
                                            r"|will terminate|Failed to connect to GCS", ln)]
    if "Traceback" in text:
        keep += lines[-8:]
    out = []
    for ln in keep:
        if ln not in out:
            out.append(ln[:400])
    return out[-limit:]


def exit_reason(rank: Rank) -> str:
    """Why a rank ended without a result, in a few words."""
    try:
        text = (rank.dir / "stderr").read_text(errors="replace")
    except OSError:
        text = ""
    if rank.hung:
        return "still running after the round's time-out: killed"
    if "Failed to connect to GCS within" in text:
        return "Ray's core worker ended the process: no GCS for 60 s (rpc_client.h)"
    if "Traceback" in text:
        last = [ln for ln in text.splitlines() if ln.strip()][-1]
        return f"raised: {last[:200]}"
    code = rank.proc.returncode
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def run_round(r: int, fault: str, tier: str, n: int, work: pathlib.Path, env: dict[str, str], cluster: Cluster,
              stock: dict[str, Any], rng: random.Random, a: argparse.Namespace, head_dir: pathlib.Path,
              ever: set[str]) -> dict[str, Any]:
    import torch

    width, batch = shape(r)
    rdir = work / f"round{r}"
    node_cache = rdir / "node-cache"
    t0 = time.monotonic()
    # the round's own cache-key tag: a new width alone keeps the function's frames key (shapes are
    # the guards' business: a later round would load an earlier round's entry, miss its guards and
    # trace in every rank, with no flight), and this round must be a cold compile
    tag = "" if a.shared_key else f"chaos-flights-round{r}"
    ranks = [start_rank(i, rdir / f"rank{i}", env, tier, node_cache, width, batch, tag) for i in range(n)]
    injector = Injector(fault, tier, ranks, cluster, node_cache, rng, a.claim_wait, a.job_wait)
    injector.start()
    deadline = t0 + a.rank_timeout
    while any(rk.proc.poll() is None for rk in ranks) and time.monotonic() < deadline:
        ever.update(k for k in tier_keys(head_dir) if ".inflight." not in k)  # what the tier holds, even briefly
        for rk in ranks:
            if rk.ended is None and rk.proc.poll() is not None:
                rk.ended = time.monotonic()
        time.sleep(0.25)
    for rk in ranks:
        if rk.proc.poll() is None:  # past the time-out: a hang
            rk.hung = True
            with contextlib.suppress(OSError):
                os.killpg(rk.proc.pid, signal.SIGKILL)
            rk.proc.wait(timeout=30)
        if rk.ended is None:
            rk.ended = time.monotonic()
    injector.stop.set()
    injector.join(timeout=90)
    for rk in ranks:  # what a killed owner left behind (its compile workers, if it had any)
        with contextlib.suppress(OSError):
            os.killpg(rk.proc.pid, signal.SIGKILL)
    seconds = time.monotonic() - t0
    ever.update(k for k in tier_keys(head_dir) if ".inflight." not in k)

    want = stock[f"{width}:{batch}"]
    rows = []
    for rk in ranks:
        row: dict[str, Any] = {"rank": rk.index, "pid": rk.proc.pid, "exit": rk.proc.returncode,
                               "seconds": round(rk.ended - rk.started, 1), "role_seen": rk.role()}
        out = rk.dir / "out.pt"
        if rk.hung:
            row["result"] = "hung"
        elif rk.killed:
            row["result"] = "killed"
        elif rk.proc.returncode != 0 or not out.exists():
            row["result"] = "crashed"
        else:
            got = torch.load(out, weights_only=False)
            s = got["stats"]
            fn = s["dynamo_functions"].get(LABEL, {})
            ok = got["result"].keys() == want.keys() and all(torch.equal(got["result"][k], want[k]) for k in want)
            row.update(result="right" if ok else "WRONG", role=fn.get("role", "-"), flight=fn.get("flight", "-"),
                       traced=s["dynamo_frames_traced"], torch_traced=got["torch_traced"],
                       served=s["dynamo_frames_served"], loaded=s["dynamo_frames_loaded"],
                       gave_up=s["dynamo_flight_gave_up"], flight_wait_s=s["dynamo_flight_wait_seconds"],
                       jobs=s["jobs"], jobs_local=s["jobs_local"], fallbacks=s["fallbacks"], retried=s["retried"],
                       dedupe_cluster=s["dedupe_cluster"], coordinator_unavailable=s["coordinator_unavailable"],
                       shared_unavailable=s["shared_unavailable"], shared_hits=s["shared_hits"],
                       local_hits=s["local_hits"], published=s["dynamo_published"])
        if row["result"] not in ("right", "killed"):
            row["log"] = _log_lines(rk, 30)
            row["exit_reason"] = exit_reason(rk)
        else:
            row["log"] = _log_lines(rk)
        rows.append(row)
    owner = injector.owner or next((rk for rk in ranks if rk.role() == "owner"), None)
    return {"round": r, "tier": tier, "fault": fault, "width": width, "batch": batch,
            "landed": injector.landed, "note": injector.note,
            "owner": owner.index if owner is not None else None,
            "cluster_died": injector.cluster_died, "actor_restarted": injector.actor_back,
            "seconds": round(seconds, 1), "ranks": rows, "anomalies": anomalies(fault, tier, rows)}


def anomalies(fault: str, tier: str, rows: list[dict[str, Any]]) -> list[str]:
    """What the single flight did other than it should (not wrong results: those are counted apart)."""
    out = []
    done = [r for r in rows if r["result"] == "right"]
    where = "cluster" if tier == HEAD else "node"
    for r in done:
        if r["role"] == "-":
            out.append(f"r{r['rank']} claimed no flight (frames loaded {r['loaded']}, traced {r['traced']})")
    if fault == "none" and len(done) == len(rows):
        roles = sorted(r["role"] for r in done)
        if roles != ["owner"] + ["waiter"] * (len(rows) - 1):
            out.append(f"roles {roles} in a clean round")
        if any(r["flight"] != where for r in done):
            out.append(f"claims {[r['flight'] for r in done]}, expected {where}")
        if any(r["role"] == "waiter" and (r["torch_traced"] or r["gave_up"]) for r in done):
            out.append("a waiter traced in a clean round")
    if fault != "none" and tier == HEAD and any(r["flight"] not in (where, "-") for r in done):
        out.append(f"claims {[r['flight'] for r in done]}, expected {where}")
    return out


def cell(rows: list[dict[str, Any]], key: str) -> str:
    return "/".join("†" if r["result"] == "killed" else "?" if key not in r else str(r[key]) for r in rows)


def row_text(rd: dict[str, Any]) -> str:
    rows = rd["ranks"]
    owner = "-" if rd["owner"] is None else f"r{rd['owner']}"
    waiters = ",".join(f"r{r['rank']}" for r in rows if r.get("role_seen") == "waiter") or "-"
    results = "/".join(r["result"] for r in rows)
    landed = "-" if rd["fault"] == "none" else ("landed" if rd["landed"] else "missed")
    return (f"| {rd['round']} | {'ray://head' if rd['tier'] == HEAD else 'node'} | {rd['fault']} | {landed} "
            f"| {owner} | {waiters} | {cell(rows, 'traced')} | {cell(rows, 'gave_up')} | {cell(rows, 'served')} "
            f"| {results} | {rd['seconds']:.0f} |")


HEADER = ("| round | claims | fault | landed | owner | waiters | frames traced | gave up | frames served "
          "| results | seconds |\n|---|---|---|---|---|---|---|---|---|---|---|")


def run(a: argparse.Namespace, work: pathlib.Path) -> dict[str, Any]:
    import torch

    rng = random.Random(a.seed)
    plan = schedule(a.rounds, rng, a.draw) if not a.faults else \
        [(f.split("@")[0], f.split("@")[1] if "@" in f else HEAD) for f in a.faults.split(",")][: a.rounds]
    head_dir = work / "head"
    logs = work / "logs"
    logs.mkdir()
    ray_tmpdir = tempfile.mkdtemp(prefix="cf", dir="/tmp")  # short: Ray's socket paths have a length limit
    # Ray's token authentication stays on, with a token of our own (as tests/conftest.py)
    os.environ["RAY_AUTH_TOKEN_PATH"] = new_token(str(work / "auth_token"))
    os.environ.pop("RAY_AUTH_MODE", None)
    env = {**os.environ, "RAY_TMPDIR": ray_tmpdir, "RAYCOMPILE_SECRET": SECRET,
           "RAYCOMPILE_HEAD_CACHE_DIR": str(head_dir), "RAYCOMPILE_COMPILE_JOBS": a.compile_jobs,
           "RAYCOMPILE_JOB_TIMEOUT_S": str(a.job_timeout), "XDG_CONFIG_HOME": str(work / "config"),
           "RAYCOMPILE_CACHE_DIR": str(work / "unused-cache"), "RAY_DEDUP_LOGS": "0", "RAY_COLOR_PREFIX": "0"}
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAYCOMPILE_SHARED_CACHE", "RAYCOMPILE_ADDRESS"):
        env.pop(name, None)

    shapes = [f"{w}:{b}" for w, b in (shape(r) for r in range(len(plan)))]
    print(f"stock Inductor: {len(shapes)} steps, while the cluster starts ...", flush=True)
    stock_env = {**env, "TORCHINDUCTOR_CACHE_DIR": str(work / "stock" / "inductor"),
                 "TRITON_CACHE_DIR": str(work / "stock" / "triton")}
    with open(logs / "stock.log", "wb") as f:
        stock_proc = subprocess.Popen([sys.executable, str(RANK), "stock", str(work / "stock.pt"), *shapes],
                                      env=stock_env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = Cluster(ray_tmpdir, logs)
    log: list[dict[str, Any]] = []
    ever: set[str] = set()
    try:
        cluster.start()
        try:
            stock_proc.wait(timeout=a.rank_timeout * 2)
        except subprocess.TimeoutExpired:
            os.killpg(stock_proc.pid, signal.SIGKILL)
            raise RuntimeError("the stock run hung") from None
        if stock_proc.returncode != 0:
            raise RuntimeError(f"the stock run failed: {(logs / 'stock.log').read_text()[-3000:]}")
        stock = torch.load(work / "stock.pt", weights_only=False)
        print(f"stock cold compiles: {stock['seconds']}", flush=True)
        print(HEADER, flush=True)
        for r, (fault, tier) in enumerate(plan):
            if not cluster.alive():
                cluster.stop()
                cluster.start()
            rd = run_round(r, fault, tier, a.ranks, work, env, cluster, stock, rng, a, head_dir, ever)
            rd["cluster"] = cluster.generation
            log.append(rd)
            print(row_text(rd), flush=True)
            print(f"      {rd['note'] or 'no fault'}", flush=True)
            for x in rd["anomalies"]:
                print(f"      anomaly: {x}", flush=True)
            for row in rd["ranks"]:
                if row["result"] not in ("right", "killed"):
                    print(f"      r{row['rank']} {row['result']} (exit {row['exit']}: {row['exit_reason']}):",
                          flush=True)
                    for ln in row["log"]:
                        print(f"        {ln}", flush=True)
            if rd["cluster_died"] or not cluster.alive():
                cluster.stop()
                cluster.start()
    finally:
        if stock_proc.poll() is None:
            os.killpg(stock_proc.pid, signal.SIGKILL)
        cluster.stop()
        shutil.rmtree(ray_tmpdir, ignore_errors=True)

    good, bad = sound_entries(head_dir, SECRET.encode())
    good = {k for k in good if ".inflight." not in k}
    bad_final = sorted(k for k in bad if ".inflight." not in k)
    lost = sorted(ever - good)
    node_bad = 0
    for r in range(len(plan)):
        node = work / f"round{r}" / "node-cache"
        if node.is_dir():
            node_bad += len([k for k in sound_entries(node, SECRET.encode())[1] if ".inflight." not in k])
    all_rows = [row for rd in log for row in rd["ranks"]]
    faults: dict[str, dict[str, int]] = {}
    for rd in log:
        f = faults.setdefault(rd["fault"], {"rounds": 0, "landed": 0})
        f["rounds"] += 1
        f["landed"] += int(rd["landed"])
    return {
        "rounds": len(plan), "ranks": a.ranks, "seed": a.seed, "draw": a.draw, "compile_jobs": a.compile_jobs,
        "job_timeout_s": a.job_timeout, "rank_timeout_s": a.rank_timeout, "faults": faults,
        "wrong_results": sum(r["result"] == "WRONG" for r in all_rows),
        "crashed": sum(r["result"] == "crashed" for r in all_rows),
        "hangs": sum(r["result"] == "hung" for r in all_rows),
        "right_results": sum(r["result"] == "right" for r in all_rows),
        "owners_killed": sum(r["result"] == "killed" for r in all_rows),
        "gave_up": sum(r.get("gave_up", 0) for r in all_rows),
        "entries_ever": len(ever), "entries_lost": len(lost), "lost": lost[:20],
        "bad_entries_at_end": len(bad_final), "bad_node_entries_at_end": node_bad,
        "clusters_started": cluster.generation,
        "anomalies": sum(len(rd["anomalies"]) for rd in log),
        "stock_seconds": stock["seconds"], "log": log,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--ranks", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--draw", choices=("cycle", "random"), default="cycle",
                   help="cycle: seeded permutations of every fault (six rounds: each once); random: drawn per round")
    p.add_argument("--faults", default="", help="the rounds' faults instead, e.g. kill-owner@none,restart-gcs@ray://head")
    p.add_argument("--compile-jobs", default="cluster", help="RAYCOMPILE_COMPILE_JOBS of the ranks")
    p.add_argument("--job-timeout", type=float, default=90.0,
                   help="RAYCOMPILE_JOB_TIMEOUT_S of the ranks: a compile job's, and a waiter's wait for the owner")
    p.add_argument("--rank-timeout", type=float, default=300.0, help="a rank running longer than this is hung")
    p.add_argument("--claim-wait", type=float, default=60.0, help="longest wait for every rank to claim")
    p.add_argument("--job-wait", type=float, default=20.0, help="longest wait for a kernel job of the owner")
    p.add_argument("--shared-key", action="store_true",
                   help="no cache-key tag per round: a round loads an earlier round's entry of its tier, misses "
                        "its guards and traces in every rank (no flight; flagged as an anomaly)")
    p.add_argument("--label", default="cpu2")
    p.add_argument("--keep", action="store_true",
                   help="keep the work dir (rank logs, Ray's logs) even when all is well")
    a = p.parse_args()
    if a.rounds < 1 or a.ranks < 2:
        p.error("need --rounds >= 1 and --ranks >= 2")
    if a.faults:
        bad = [f for f in a.faults.split(",") if f.split("@")[0] not in FAULTS]
        if bad:
            p.error(f"unknown faults {bad}")
    work = pathlib.Path(tempfile.mkdtemp(prefix="raycompile-chaos-flights-"))
    t = time.monotonic()
    r = run(a, work)
    r["seconds"] = round(time.monotonic() - t, 1)
    r["command"] = " ".join(["python", "benchmarks/chaos_flights.py", *sys.argv[1:]])
    print()
    print(HEADER)
    for rd in r["log"]:
        print(row_text(rd))
    print()
    injected = ", ".join(f"{k} {v['landed']}/{v['rounds']}" for k, v in sorted(r["faults"].items()))
    print("| rounds | faults landed | ranks right | owners killed | gave up | wrong results | crashed | hangs "
          "| entries lost | clusters | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| {r['rounds']} | {injected} | {r['right_results']} | {r['owners_killed']} | {r['gave_up']} "
          f"| **{r['wrong_results']}** | **{r['crashed']}** | **{r['hangs']}** "
          f"| **{r['entries_lost']}** of {r['entries_ever']} | {r['clusters_started']} | {r['seconds']:.0f} |")
    failed = bool(r["wrong_results"] or r["crashed"] or r["hangs"] or r["entries_lost"] or r["bad_entries_at_end"]
                  or r["bad_node_entries_at_end"])
    out = HERE / "results" / f"chaos_flights_{a.label or 'run'}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(r, indent=1, default=str))
    print(f"wrote {out}")
    if failed or a.keep:
        print(f"work dir kept: {work} (rank logs in round*/rank*/stderr, Ray's in logs/)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
