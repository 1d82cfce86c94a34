"""Which ``ray.init("ray://...")`` failures raycompile joins again (orchestrator/connect.py): only
the head's Ray Client server process dying at its start (Ray issue #63202), in both forms Ray
reports it (texts as Ray 2.60 printed them in this project's CI), never a runtime_env or token
that the proxier's own steps refused, nor an address nobody answers: those fail the same way each
time and would only cost another 30 s.

The join loop runs against a stand-in for the ``ray`` module (named ``RayStandIn``): Ray's bug
cannot be made to happen at will (one join in three on this box, or none in twelve); the real
failure and the real ``ray.init`` are exercised by tests/integration/test_token_auth.py."""

from __future__ import annotations

import logging
import traceback

import pytest

from raycompile.orchestrator.connect import (
    CLIENT_ATTEMPTS,
    CLIENT_SERVER_FIX,
    Target,
    _client_server_died,
    _init_joining,
)
from raycompile.settings import Settings

DIED = "ConnectionAbortedError: Initialization failure from server:\nTraceback (most recent call last):\n"
RETURNED_FALSE = DIED + (
    '  File ".../ray/util/client/server/proxier.py", line 772, in Datapath\n    raise RuntimeError(\n'
    "RuntimeError: Starting Ray client server failed. See ray_client_server_23003.err for detailed logs.")
RAISED = DIED + (
    '  File ".../ray/util/client/server/proxier.py", line 765, in Datapath\n'
    "    if not self.proxy_manager.start_specific_server(\n"
    "psutil.NoSuchProcess: process no longer exists (pid=30274)")


def _server_traceback(error: Exception) -> str:
    """Ray's text for a failure raised inside ``start_specific_server``: a real traceback."""
    def start_specific_server() -> None:
        raise error

    try:
        start_specific_server()
    except Exception:  # noqa: BLE001 - formatted as the proxier formats it
        return "ConnectionAbortedError: Initialization failure from server:\n" + traceback.format_exc()
    raise AssertionError("unreachable")


@pytest.mark.parametrize("text", [RETURNED_FALSE, RAISED])
def test_a_dead_client_server_is_joined_again(text: str) -> None:
    assert _client_server_died(ConnectionAbortedError(text))


@pytest.mark.parametrize("text", [
    "ConnectionError: ray client connection timeout",
    _server_traceback(RuntimeError("Failed to create runtime_env for Ray client server, it is caused by: x")),
    _server_traceback(RuntimeError("AuthenticationError: Authentication token is missing or incorrect")),
    _server_traceback(TimeoutError("GetOrCreateRuntimeEnv request failed after 5 attempts.")),
])
def test_other_failures_are_not(text: str) -> None:
    assert not _client_server_died(RuntimeError(text))


class RayStandIn:
    """``ray.init`` failing with ``errors`` in turn, then succeeding (a stand-in: see above)."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def init(self, **_: object) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


TARGET = Target("ray://127.0.0.1:10001", "argument")


def test_a_dead_server_is_joined_again_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    ray = RayStandIn(ConnectionAbortedError(RETURNED_FALSE))
    with caplog.at_level(logging.WARNING, logger="raycompile.connect"):
        _init_joining(ray, TARGET, Settings.resolve())
    assert ray.calls == 2 and "#63202" in caplog.text and "joining again (2 of 3)" in caplog.text


def test_the_tries_are_bounded_and_the_last_error_is_raised() -> None:
    ray = RayStandIn(*[ConnectionAbortedError(RAISED)] * (CLIENT_ATTEMPTS + 1))
    with pytest.raises(ConnectionAbortedError, match="NoSuchProcess"):
        _init_joining(ray, TARGET, Settings.resolve())
    assert ray.calls == CLIENT_ATTEMPTS


def test_nothing_is_tried_again_once_closing_or_for_another_failure() -> None:
    ray = RayStandIn(ConnectionAbortedError(RETURNED_FALSE), None)  # type: ignore[arg-type]
    with pytest.raises(ConnectionAbortedError):
        _init_joining(ray, TARGET, Settings.resolve(), cancelled=lambda: True)
    assert ray.calls == 1
    ray = RayStandIn(ConnectionError("ray client connection timeout"))
    with pytest.raises(ConnectionError):
        _init_joining(ray, TARGET, Settings.resolve())
    assert ray.calls == 1


def test_the_fix_names_the_head_setting_and_the_other_way_in() -> None:
    assert "GRPC_ENABLE_FORK_SUPPORT=0 ray start --head" in CLIENT_SERVER_FIX
    assert "host:6379" in CLIENT_SERVER_FIX and "#63202" in CLIENT_SERVER_FIX
