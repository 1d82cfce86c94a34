"""Which ``ray.init("ray://...")`` failures raycompile joins again (orchestrator/connect.py): only
the head's Ray Client server process dying at its start (Ray issue #63202), in both forms Ray
reports it (texts as Ray 2.60 printed them in this project's CI), never a refused token or an
address nobody answers, which would only cost another 30 s."""

from __future__ import annotations

import pytest

from raycompile.orchestrator.connect import CLIENT_SERVER_FIX, _client_server_died

DIED = "ConnectionAbortedError: Initialization failure from server:\nTraceback (most recent call last):\n"
RETURNED_FALSE = DIED + (
    '  File ".../ray/util/client/server/proxier.py", line 772, in Datapath\n    raise RuntimeError(\n'
    "RuntimeError: Starting Ray client server failed. See ray_client_server_23003.err for detailed logs.")
RAISED = DIED + (
    '  File ".../ray/util/client/server/proxier.py", line 765, in Datapath\n'
    "    if not self.proxy_manager.start_specific_server(\n"
    "psutil.NoSuchProcess: process no longer exists (pid=30274)")


@pytest.mark.parametrize("text", [RETURNED_FALSE, RAISED])
def test_a_dead_client_server_is_joined_again(text: str) -> None:
    assert _client_server_died(ConnectionAbortedError(text))


@pytest.mark.parametrize("text", [
    "ConnectionError: ray client connection timeout",
    "Initialization failure from server:\nRuntimeError: Failed to create runtime_env for Ray client server",
    "AuthenticationError: Authentication token is missing or incorrect",
])
def test_other_failures_are_not(text: str) -> None:
    assert not _client_server_died(RuntimeError(text))


def test_the_fix_names_the_head_setting_and_the_other_way_in() -> None:
    assert "GRPC_ENABLE_FORK_SUPPORT=0 ray start --head" in CLIENT_SERVER_FIX
    assert "host:6379" in CLIENT_SERVER_FIX and "#63202" in CLIENT_SERVER_FIX
