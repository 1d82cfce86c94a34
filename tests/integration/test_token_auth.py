"""Clusters as Ray 2.60 starts them by default: `ray start --head` with token authentication on
(a token exists), joined as ``ray.init()`` joins them: with no address and with ``auto`` (the
cluster of Ray's current-cluster file, the token found by Ray's rules), and with ``host:port``
(Ray uses the token for an explicit address with RAY_AUTH_MODE=token). Jobs run on that cluster,
nothing falls back, and `raycompile status` answers. A refused token fails at once, with Ray's
reason and the fix. A cluster started with authentication off is joined too.

Each head has its own token (RAY_AUTH_TOKEN_PATH) and its own Ray temp dir, whose current-cluster
file names it; drivers and the CLI run as processes with Ray's defaults (RAY_AUTH_MODE unset),
never reading or writing the user's ~/.ray/auth_token."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import procs
import pytest
import torch
from raystart import RayHead, new_token, ray_head

from raycompile.models import examples

HERE = pathlib.Path(__file__).parent

pytestmark = pytest.mark.slow  # `ray start --head` clusters, and compiling driver processes


def defaults(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with Ray's defaults (RAY_AUTH_MODE unset: an earlier embedded
    Ray in this process sets it) and no RAY_ADDRESS, then ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS", "RAYCOMPILE_SECRET", "RAYCOMPILE_SHARED_CACHE")}
    return {**env, **extra}


class Machine:
    """A head on this machine and what processes beside it have in their environment: the head's
    Ray temp dir (so the head is "the cluster on this machine" for them) and the token `ray start`
    used; the rest is the test's environment when they start."""

    def __init__(self, head: RayHead, env: dict[str, str]) -> None:
        self.head, self.env = head, env

    def environ(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return defaults({**self.env, **(env or {})})

    def run(self, *args: str, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.environ(env))

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "raycompile", *args, env=env, timeout=120)

    def joins(self, address: str, tmp: pathlib.Path, env: dict[str, str] | None = None) -> Callable[[], Joined]:
        """`raycompile status --json` and tests/integration/cluster_driver.py (fallback=False: a
        refused join fails it, with an empty cache of its own) started now, side by side with
        other joins; what this returns waits for both."""
        # set up before the autouse per-test fixtures (tests/conftest.py): their settings, here
        env = {"RAYCOMPILE_COMPILE_JOBS": "cluster", "XDG_CONFIG_HOME": str(tmp / "config"),
               "RAYCOMPILE_HEAD_CACHE_DIR": str(tmp / "head"), **(env or {})}
        status = subprocess.Popen([sys.executable, "-m", "raycompile", "status", "--json",
                                   *(["--address", address] if address else [])], env=self.environ(env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tmp.mkdir(parents=True, exist_ok=True)
        driver = procs.start(HERE / "cluster_driver.py", [address, "", str(tmp / "out.pt")],
                             self.environ({"RAYCOMPILE_CACHE_DIR": str(tmp / "local"), **env}),
                             tmp / "out.pt", timeout=600)

        def joined() -> Joined:
            try:
                out, err = status.communicate(timeout=120)
            finally:
                if status.poll() is None:
                    status.kill()
            assert status.returncode == 0, out[-2000:] + err[-3000:]
            return Joined(json.loads(out), driver())

        return joined


@dataclass
class Joined:
    """One join's answers: `status --json`, and the driver's stats and output."""

    status: dict
    saved: dict


def machine(tmp: pathlib.Path, auth: str | None) -> Iterator[Machine]:
    """A head started with Ray's defaults and a token of its own (``auth`` None), or with
    RAY_AUTH_MODE=``auth``."""
    ray_tmpdir = tempfile.mkdtemp(prefix="ra", dir="/tmp")  # short: Ray's socket paths have a length limit
    token = new_token(str(tmp / "token" / "auth_token"))
    # GRPC_ENABLE_FORK_SUPPORT=0: the head-side fix docs/clusters-and-ranks.md gives for Ray's issue
    # #63202 (the proxier's Ray Client server process dying at its fork: one join in three here,
    # ~30 s each); it changes nothing of Ray's authentication
    start = {"RAY_AUTH_TOKEN_PATH": token, "RAYCOMPILE_CACHE_DIR": str(tmp / "worker-cache"),
             "GRPC_ENABLE_FORK_SUPPORT": "0", **({"RAY_AUTH_MODE": auth} if auth else {})}
    try:
        with ray_head(num_cpus=2, env={**defaults({}), **start}, dashboard=False, ray_tmpdir=ray_tmpdir) as head:
            yield Machine(head, {"RAY_TMPDIR": ray_tmpdir, "RAY_AUTH_TOKEN_PATH": token})
    finally:
        shutil.rmtree(ray_tmpdir, ignore_errors=True)


@pytest.fixture(scope="module")
def authenticated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from machine(tmp_path_factory.mktemp("token-cluster"), None)


@pytest.fixture(scope="module")
def open_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from machine(tmp_path_factory.mktemp("open-cluster"), "disabled")


TOKEN_WAYS = ("no address", "auto", "host:port", "ray://")


@pytest.fixture(scope="module")
def token_joins(authenticated: Machine, tmp_path_factory: pytest.TempPathFactory,
                request: pytest.FixtureRequest) -> dict[str, Callable[[], Joined]]:
    """Each way of joining the token cluster that this run tests (each test reads its own): all
    at once but Ray Client, which is joined when its test comes, last, after the others are done
    (its proxier starts a server process per client: not beside six processes importing torch on
    2 CPUs)."""
    m, tmp = authenticated, tmp_path_factory.mktemp("token-joins")
    tested = {item.callspec.params["how"] for item in request.session.items
              if getattr(item, "originalname", "") == "test_a_token_cluster_is_joined_as_ray_init_joins_it"}
    address = {"no address": "", "auto": "auto", "host:port": m.head.address, "ray://": m.head.client}

    def later(how: str, i: int) -> Callable[[], Joined]:
        def join() -> Joined:
            try:
                return m.joins(address[how], tmp / str(i), m.head.driver_env)()
            except AssertionError as e:  # the head's Ray Client logs first: CI shows a failure's start
                raise AssertionError(f"Ray Client's server logs:\n{client_logs(m)}\n\n{e}") from None

        return join

    return {how: later(how, i) if how == "ray://" else
            m.joins(address[how], tmp / str(i), m.head.driver_env if how == "host:port" else {})
            for i, how in enumerate(TOKEN_WAYS) if how in tested}


def client_logs(m: Machine) -> str:
    """The ends of the head's Ray Client server logs (the proxier's and each client's)."""
    logs = pathlib.Path(m.env["RAY_TMPDIR"], "ray", "session_latest", "logs")
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
                     for p in sorted(logs.glob("ray_client_server*")) if p.stat().st_size)


# "auto": extended (docs/testing.md): Ray resolves it as it resolves no address, from the
# cluster file of this machine
@pytest.mark.parametrize("how", [pytest.param(how, marks=pytest.mark.extended) if how == "auto" else how
                                 for how in TOKEN_WAYS])
def test_a_token_cluster_is_joined_as_ray_init_joins_it(authenticated: Machine, token_joins: dict, how: str) -> None:
    """No address and ``auto`` with Ray's defaults; ``host:port`` and Ray Client (``ray://``) with
    RAY_AUTH_MODE=token, as Ray asks for an explicit address. `status` answers, and a compile's
    jobs run on that cluster's node, with nothing falling back (the driver runs with fallback=False)."""
    m = authenticated
    joined = token_joins[how]()
    (node,) = joined.status["nodes"]
    assert node["alive"] and node["cpus"] == 2, joined.status
    assert joined.status["address"].endswith(m.head.address.rpartition(":")[2]), joined.status
    s = joined.saved["stats"]
    assert s["jobs"] > 0 and s["fallbacks"] == 0 and s["ray_unavailable"] == "", s
    assert set(s["nodes"]) == {node["node_id"]}, s["nodes"]  # every job ran on that cluster
    model, args = examples()["reduction_tail"]
    torch.testing.assert_close(joined.saved["out"], model(*args), rtol=1e-5, atol=1e-5)


def test_precompile_joins_the_token_cluster_with_no_address(authenticated: Machine, tmp_path: pathlib.Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\ntorch.compile(lambda x: (x.sin() * 2).sum(-1))(torch.randn(8, 16))\n")
    proc = authenticated.cli("precompile", str(script), env={"RAYCOMPILE_CACHE_DIR": str(tmp_path / "local")})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "raycompile summary" in proc.stdout and "jobs 0 " not in proc.stdout, proc.stdout[-2000:]
    assert "fallbacks 0" in proc.stdout and "Compiling locally" not in proc.stderr, proc.stdout + proc.stderr


def test_a_refused_token_fails_at_once_with_rays_reason_and_the_fix(authenticated: Machine) -> None:
    m = authenticated
    assert m.head.token_auth  # Ray turned it on: a token exists and RAY_AUTH_MODE is unset
    # an explicit address without RAY_AUTH_MODE=token: Ray does not send the token there
    proc = m.cli("status", "--address", m.head.address)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot reach Ray at {m.head.address}: Ray refused this process" in proc.stderr, proc.stderr
    assert "InvalidAuthToken" in proc.stderr and "set RAY_AUTH_MODE=token" in proc.stderr, proc.stderr
    # the cluster of this machine, with another token than the head's
    proc = m.cli("status", env={"RAY_AUTH_TOKEN": "0" * 64})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Authentication token is missing or incorrect" in proc.stderr, proc.stderr
    assert "Give this process the cluster's token" in proc.stderr and "ray get-auth-token" in proc.stderr
    # enable() refuses alike (fallback=False), not after Ray's 20 s of retries
    code = ("import raycompile\n"
            "raycompile.enable(address='auto', fallback=False)\n"
            "try:\n"
            "    raycompile.ready()\n"
            "except raycompile.FarmUnavailableError as e:\n"
            "    print('REFUSED', e)\n"
            "raycompile.disable()\n")
    proc = m.run("-c", code, env={"RAY_AUTH_TOKEN": "0" * 64})
    assert proc.returncode == 0 and "REFUSED cannot reach Ray at" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "Authentication token is missing or incorrect" in proc.stdout, proc.stdout


OPEN_WAYS = ("no address", "host:port")


@pytest.fixture(scope="module")
def open_joins(open_cluster: Machine, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Callable[[], Joined]]:
    tmp = tmp_path_factory.mktemp("open-joins")
    return {how: open_cluster.joins(open_cluster.head.address if how == "host:port" else "", tmp / str(i))
            for i, how in enumerate(OPEN_WAYS)}


@pytest.mark.extended  # left out of CI's run (docs/testing.md): CI joins token clusters, the default
@pytest.mark.parametrize("how", OPEN_WAYS)
def test_a_cluster_without_token_authentication_is_joined_too(open_cluster: Machine, open_joins: dict,
                                                               how: str) -> None:
    """Started with RAY_AUTH_MODE=disabled; drivers with Ray's defaults (a token exists: with no
    address Ray turns token mode on in the driver, which such a cluster accepts)."""
    assert not open_cluster.head.token_auth and open_cluster.head.driver_env == {}
    joined = open_joins[how]()
    (node,) = joined.status["nodes"]
    s = joined.saved["stats"]
    assert s["jobs"] > 0 and s["fallbacks"] == 0 and set(s["nodes"]) == {node["node_id"]}, s
