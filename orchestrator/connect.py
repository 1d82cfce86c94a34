"""Joining Ray: which cluster an address means, and a connection that fails within a time-out.

The address rules are Ray's own (``ray.init``):
- none given: ``RAY_ADDRESS``, else the cluster started on this machine (Ray's current-cluster
  file, ``$RAY_TMPDIR/ray/ray_current_cluster``), else a new embedded local Ray;
- ``auto``: the same, but with nothing running it is an error instead of an embedded Ray;
- ``host:port`` / ``ray://host:port``: that cluster.

Ray retries an address nobody answers for minutes (a crashed cluster leaves its current-cluster
file behind). Here every address is first checked with a TCP connect: an address from the file
that does not answer is ignored when none was asked for (an embedded Ray starts) and an error for
``auto``, so a bad address fails within ``connect_timeout_s``, the same way for ``enable()``,
``demo``, ``status`` and ``precompile``.

Token authentication (on by default since Ray 2.5x) follows ``ray.init`` too (orchestrator/auth.py):
a cluster found by Ray's rules (the current-cluster file) is joined as ``ray.init(address="auto")``
joins it, with the token Ray finds, never as an explicit address (for which Ray does not look for
one); an explicit address uses the token only with RAY_AUTH_MODE=token, as in Ray. Before
``ray.init``, the GCS is asked once (Ray's own client), so a refused token fails at once, with
Ray's reason and the fix, not after Ray's 20 s of retries with "Failed to connect".
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import FarmUnavailableError
from ..settings import Settings

log = logging.getLogger("raycompile.connect")

EMBEDDED = "an embedded local Ray"


@dataclass(frozen=True)
class Target:
    """Where ``connect`` goes: ``address`` (None: start an embedded local Ray) and where it came
    from, for messages."""

    address: str | None
    source: str  # "argument" | "RAY_ADDRESS" | "current-cluster file" | "this process" | "embedded"

    @property
    def joins(self) -> bool:
        """Whether this joins a cluster others can join too (not a new embedded Ray)."""
        return self.address is not None


@dataclass(frozen=True)
class Joined:
    """A connection made by ``connect``: whether this call started Ray (so closing it is ours)
    and whether that Ray is a new embedded one, private to this process."""

    target: Target
    owns: bool

    @property
    def embedded(self) -> bool:
        return self.target.address is None


def current_cluster_file() -> str:
    """Ray's current-cluster file: where `ray start` records the cluster it started on this
    machine (``ray._common.utils.get_ray_address_file``, computed without importing Ray)."""
    root = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return os.path.join(root or "/tmp", "ray", "ray_current_cluster")


def _read_current_cluster() -> str | None:
    try:
        with open(current_cluster_file()) as f:
            return f.read().strip() or None
    except OSError:
        return None


def answers(address: str, timeout: float) -> str | None:
    """None when something accepts a TCP connection at ``address`` (host:port, ray://host:port),
    else why not."""
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return "expected host:port, ray://host:port or auto"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, 10.0)):
            return None
    except OSError as e:
        return f"nothing answers there ({e})"


def resolve(settings: Settings, check_remote: bool = True) -> Target:
    """The cluster ``settings.address`` means (module docstring). Reads only local state and
    TCP-checks the address it finds; an explicit address is checked too unless ``check_remote``
    is False (then the caller checks it, off the critical path).

    Raises FarmUnavailableError for an explicit address nobody answers, for ``auto`` with no
    cluster running on this machine, and for ``auto`` with a stale current-cluster file."""
    address = settings.address
    ray = sys.modules.get("ray")  # never imported here just to ask: that costs a second
    if ray is not None and ray.is_initialized():
        return Target(ray.get_runtime_context().gcs_address, "this process")
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
    if address and address != "auto":
        if check_remote and (why := answers(address, settings.connect_timeout_s)):
            raise FarmUnavailableError(address, why)
        return Target(address, "argument")
    found = _read_current_cluster()
    if found is not None:
        why = answers(found, settings.connect_timeout_s)
        if why is None:
            return Target(found, "current-cluster file")
        if address == "auto":
            raise FarmUnavailableError("auto", f"Ray's current-cluster file {current_cluster_file()} names {found}, "
                                               f"where {why}: that cluster crashed or was stopped")
        log.info("raycompile: ignoring Ray's stale current-cluster file %s (%s: %s); starting an embedded Ray",
                 current_cluster_file(), found, why)
    elif address == "auto":
        raise FarmUnavailableError("auto", "no Ray cluster is running on this machine (no RAY_ADDRESS, no "
                                           f"current-cluster file at {current_cluster_file()})")
    return Target(None, "embedded")


class _DropNoise(logging.Filter):
    """Ray's notes that say nothing to a raycompile user: token authentication turned on for this
    process (for a Ray raycompile started, or a cluster joined as ray.init() joins it: the user
    set up neither switch), and no SIGTERM handler for a connection made off the main thread."""

    NOISE = ("Token authentication is enabled for this Ray cluster", "SIGTERM handler is not set")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in record.getMessage() for n in self.NOISE)


_NOISE = _DropNoise()


def _quiet_ray() -> None:
    for name in ("ray._private.worker", "ray._private.authentication.authentication_token_setup"):
        logger = logging.getLogger(name)
        if _NOISE not in logger.filters:
            logger.addFilter(_NOISE)


def connect(settings: Settings, target: Target | None = None,
            cancelled: Callable[[], bool] = lambda: False) -> Joined:
    """Join the cluster ``target`` names (``resolve(settings)`` when None), or start an embedded
    local Ray. Returns what was joined; ``owns`` says this call started the connection (so the
    caller shuts Ray down). A process already connected keeps its connection.

    Raises FarmUnavailableError when the address does not answer, when Ray refuses this process's
    token (Ray's reason, and the fix), or when this process is connected to another cluster than
    the one ``settings.address`` names."""
    import ray

    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        address = settings.address
        # Ray names a cluster by its node's IP (127.0.0.1 becomes 192.0.2.2): compare the ports
        if address and address != "auto" and not address.startswith("ray://") and \
                address.rpartition(":")[2] != current.rpartition(":")[2]:
            raise FarmUnavailableError(address, f"this process is already connected to Ray at {current}; "
                                                "call ray.shutdown() first")
        return Joined(Target(current, "this process"), owns=False)
    target = target or resolve(settings)
    if target.address is not None and target.source == "argument" and (
            why := answers(target.address, settings.connect_timeout_s)):
        raise FarmUnavailableError(target.address, why)
    _quiet_ray()
    if target.address is not None and not target.address.startswith("ray://"):  # Ray Client checks its own
        _check_gcs(target, settings.connect_timeout_s)
    try:
        if target.address is not None:
            _init_joining(ray, target, settings, cancelled)
        else:
            ray.init(address="local", num_cpus=settings.num_cpus, namespace=settings.namespace,
                     include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as e:  # noqa: BLE001 - chained, not hidden: ray.init fails with ConnectionError, TimeoutError,
        # RuntimeError, ValueError or a RayError alike when it cannot reach or start Ray; each is this one error
        fix = None
        if _client_server_died(e):
            fix = CLIENT_SERVER_FIX
        elif target.address is not None and target.address.startswith("ray://"):
            from . import auth

            fix = None if auth.token_mode() else auth.CLIENT_FIX  # Ray Client only says "connection timeout"
        raise FarmUnavailableError(target.address or EMBEDDED, _ray_reason(e), fix) from e
    return Joined(target, owns=True)


CLIENT_ATTEMPTS = 3  # Ray Client joins, when the head could not start the client's server (below)
CLIENT_REPORT_S = 30.0  # how long Ray Client takes to report that dead server (its channel's time-out)
CLIENT_SERVER_FIX = (
    "The head's Ray Client proxier started this client's server process and it died at once: Ray's "
    "issue #63202 (the proxier forks while its gRPC threads run; on a 2-CPU machine one join in three "
    "failed). Start the head with GRPC_ENABLE_FORK_SUPPORT=0 in its environment "
    "(`GRPC_ENABLE_FORK_SUPPORT=0 ray start --head ...`), or join by the GCS address (host:6379) "
    "instead of ray://. If every join fails so, the head's ray_client_server_<port>.err says why.")
_DIED = ("Starting Ray client server failed",  # the server process exited before it ran
         "NoSuchProcess", "ZombieProcess")  # ... while the proxier looked at it (psutil's errors)
_NOT_DIED = ("runtime_env", "Authentication", "authentication")  # failures in the proxier's own steps


def _client_server_died(error: BaseException) -> bool:
    """Whether ``ray.init(ray://...)`` failed because the head's proxier could not start this
    client's own server process (Ray's "Initialization failure from server" with the process
    gone), not because of a step that fails the same way every time (a runtime_env, a token)."""
    text = str(error)
    return ("Initialization failure from server" in text and any(d in text for d in _DIED)
            and not any(n in text for n in _NOT_DIED))


def _init_joining(ray: Any, target: Target, settings: Settings,
                  cancelled: Callable[[], bool] = lambda: False) -> None:
    """``ray.init`` for a cluster. A Ray Client join whose server process died on the head (Ray's
    bug, ``CLIENT_SERVER_FIX``) is tried again, ``CLIENT_ATTEMPTS`` times in all, unless the
    session is closing (``cancelled``); Ray reports each dead server after ``CLIENT_REPORT_S``,
    which the start's wait allows for (``Startup.wait_s``)."""
    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(address=_init_address(target), namespace=settings.namespace, log_to_driver=False,
                     logging_level=logging.WARNING)
            return
        except Exception as e:  # noqa: BLE001 - only Ray's dead-server failure is tried again
            if attempt == CLIENT_ATTEMPTS or cancelled() or not _client_server_died(e):
                raise
            log.warning("raycompile: Ray Client's server for this process died on the head at %s "
                        "(Ray issue #63202); joining again (%d of %d). %s", target.address, attempt + 1,
                        CLIENT_ATTEMPTS, CLIENT_SERVER_FIX)


def _init_address(target: Target) -> str:
    """What ``ray.init`` is given: ``auto`` for the cluster Ray's rules found (then Ray applies
    its own rules, the token's included, to the same file), else the address itself."""
    return "auto" if target.source == "current-cluster file" else str(target.address)


def _check_gcs(target: Target, timeout: float) -> None:
    """Ray's authentication step for ``target``, then one question to its GCS (orchestrator/auth.py).
    Raises FarmUnavailableError with Ray's reason when Ray refuses, or no GCS answers."""
    from . import auth

    address = str(target.address)
    found = target.source == "current-cluster file"
    refused = auth.join_mode(found_by_ray_rules=found)
    if refused is None:
        answer = auth.refusal(address, timeout, explicit=not found)
        if isinstance(answer, str):
            raise FarmUnavailableError(address, answer)
        refused = answer
    if refused is not None:
        raise FarmUnavailableError(address, f"Ray refused this process: {refused.reason}", refused.fix)


def _ray_reason(error: BaseException) -> str:
    """``ray.init``'s failure with Ray's reason: its own message says only "Failed to connect to
    Ray cluster at ..."; the cause it chains holds the last error of its retries (a traceback
    whose last line names it)."""
    parts = [f"{type(error).__name__}: {str(error).strip()[:300]}"]
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
        parts.append(lines[-1][:300])
    return "; ".join(parts)
