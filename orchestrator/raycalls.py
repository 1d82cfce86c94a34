"""Ray's failures at the orchestrator's edge: what Ray raises when a call fails for a reason of
the cluster's (not of the code the call runs), and the project's exception callers see instead.

The public methods of the orchestrator that talk to Ray turn those failures into
FarmUnavailableError (``calls``), so callers in wrapper/ and raycompile/ catch RaycompileError,
never a ``ray.exceptions`` class. Before a call they also check that this process is still
connected (``require``): Ray's ``get``, ``wait``, ``put``, ``kill``, ``cancel`` and every
``.remote()`` start a NEW local Ray when none is connected (``ray/_private/auto_init_hook.py``),
which after a ``ray.shutdown()`` would quietly compile and benchmark on a fresh private Ray
instead of failing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..errors import FarmUnavailableError

NOT_CONNECTED = ("this process is no longer connected to it (ray.shutdown() ran, or the raycompile session "
                 "that joined it was closed); call raycompile.enable() to join a cluster again")


def failures() -> tuple[type[BaseException], ...]:
    """What Ray raises when the cluster, or this process's connection to it, fails under a call:
    ``RayError`` (RaySystemError: not connected, or the GCS does not answer; GetTimeoutError;
    RayActorError; ObjectLostError; RpcError; ObjectStoreFullError ...), and ``ConnectionError``
    (a Ray Client (``ray://``) driver whose connection to the server broke)."""
    import ray.exceptions

    return (ray.exceptions.RayError, ConnectionError)


def is_bug(error: BaseException) -> bool:
    """Whether ``error`` is the code a Ray task or actor method ran raising (``RayTaskError``):
    a failure of raycompile's own remote code, not of the cluster, so never turned into "the
    cluster is unavailable"."""
    import ray.exceptions

    return isinstance(error, ray.exceptions.RayTaskError)


def connected() -> bool:
    import ray

    return bool(ray.is_initialized())


def address() -> str:
    """The address of the cluster this process is connected to, for messages."""
    import ray

    if not ray.is_initialized():
        return "the Ray cluster"
    try:
        return str(ray.get_runtime_context().gcs_address)
    except failures():
        return "the Ray cluster"


def require(where: str) -> None:
    """Raise FarmUnavailableError unless this process is connected to Ray."""
    if not connected():
        raise FarmUnavailableError(where, NOT_CONNECTED)


def reason(doing: str, error: BaseException) -> str:
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
    return f"{doing} failed ({type(error).__name__}{': ' + first if first else ''})"


@contextlib.contextmanager
def calls(where: str, doing: str) -> Iterator[None]:
    """Around calls to Ray made for one public method: FarmUnavailableError(``where``, ...) when
    this process is not connected, or when Ray fails under them (``failures()``), chained."""
    require(where)
    try:
        yield
    except failures() as e:
        if is_bug(e):
            raise  # our remote code's own error, with its remote traceback: a bug to see, not to hide
        raise FarmUnavailableError(where, reason(doing, e)) from e
