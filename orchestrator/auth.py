"""Ray's token authentication, applied as ``ray.init`` applies it, and Ray's own answer to a first
call before ``ray.init`` is asked to join (so a refused token fails at once, with Ray's reason).

Ray 2.60 (``ray/_private/worker.py``, ``init``): a ``ray.init()`` that starts a Ray writes
``~/.ray/auth_token`` and turns token authentication on; from then on ``ray start --head`` starts
clusters that want that token. Joining one:
- address left out or ``auto`` (the cluster of Ray's current-cluster file): with RAY_AUTH_MODE
  unset and a token found (RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names, or
  ``~/.ray/auth_token``), ``ray.init`` turns token mode on for this process, and joins;
- an explicit address (an argument or RAY_ADDRESS): token mode only with RAY_AUTH_MODE=token.
raycompile resolves an address itself (orchestrator/connect.py), so it takes the same step here
(``join_mode``) rather than letting a resolved file's address pass as an explicit one. Ray only
logs why it was refused (gcs_client.cc) and raises "Failed to connect" after about 20 s of retries;
``refusal`` asks once, with Ray's own GCS client, and answers with Ray's AuthenticationError text.

The only place that touches Ray's private auth API, checked on Ray 2.60. A Ray without token
authentication (before 2.5x) has none of it: then every check here passes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

TOKEN_FIX_EXPLICIT = (
    "This cluster wants Ray's token authentication, which Ray uses for an explicit address only with "
    "RAY_AUTH_MODE=token: set RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token, in the file "
    "RAY_AUTH_TOKEN_PATH names, or in RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it); on the "
    "head node itself, leave out the address (or pass `auto`) to join it as ray.init() does.")
TOKEN_FIX = (
    "Give this process the cluster's token: copy the head node's ~/.ray/auth_token (`ray get-auth-token` there "
    "prints it) to ~/.ray/auth_token here, or point RAY_AUTH_TOKEN_PATH at a file holding it, or set "
    "RAY_AUTH_TOKEN.")

CLIENT_FIX = (
    "Check that the head's Ray Client port (10001 by default) answers from here. A cluster with Ray's token "
    "authentication (on by default once a token exists) takes Ray Client connections only with RAY_AUTH_MODE=token "
    "and its token here (~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN; `ray get-auth-token` on the head "
    "node prints it).")


@dataclass(frozen=True)
class Refusal:
    """Why Ray refused (its own words) and what to do."""

    reason: str
    fix: str


def token_mode() -> bool:
    """Whether this process uses token authentication now (RAY_AUTH_MODE as Ray read it)."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled
    except ImportError:  # a Ray without token authentication
        return False
    return bool(is_token_auth_enabled())


def join_mode(found_by_ray_rules: bool) -> Refusal | None:
    """Take ``ray.init``'s authentication step for joining a cluster: with ``found_by_ray_rules``
    (no address given, or ``auto``, and no RAY_ADDRESS) token mode goes on when a token exists and
    RAY_AUTH_MODE is unset. Then, in token mode, a token must exist: else the refusal Ray would
    raise (``ray.init`` raises it too, and Ray's GCS client aborts the process without one)."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            ensure_token_if_auth_enabled,
            maybe_enable_token_auth_if_token_available,
        )
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    if found_by_ray_rules:
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    try:
        ensure_token_if_auth_enabled(None, create_token_if_missing=False)
    except AuthenticationError as e:
        return Refusal(str(e), TOKEN_FIX)
    return None


def refusal(address: str, timeout: float, explicit: bool) -> Refusal | str | None:
    """Ask the GCS at ``address`` (host:port) for its cluster id, with this process's token
    settings, as ``ray.init`` first does: None when it answers; a Refusal when it refuses the
    token (Ray's AuthenticationError text, and the fix: ``explicit`` says the address was given,
    where Ray wants RAY_AUTH_MODE=token); else why it did not answer (text).
    Waits at most ``timeout``: Ray's client waits 40 s on a port where no GCS answers."""
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:
        return None
    answer: list[BaseException | None] = []

    def ask() -> None:
        try:
            GcsClient(address=address)  # fetches the cluster id: one call, answered at once by a GCS
            answer.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below, whatever Ray raised
            answer.append(e)

    # a thread of its own: Ray's client cannot be given a shorter time-out; left to finish alone
    thread = threading.Thread(target=ask, name="raycompile-gcs-check", daemon=True)
    thread.start()
    thread.join(timeout)
    if not answer:
        return (f"something listens there, but no Ray GCS answered within {timeout:.0f} s (is it the GCS port "
                "of the head node, 6379 by default? raise RAYCOMPILE_CONNECT_TIMEOUT_S if the head is starting)")
    error = answer[0]
    if error is None:
        return None
    if isinstance(error, AuthenticationError):
        return Refusal(str(error), TOKEN_FIX_EXPLICIT if explicit and not token_mode() else TOKEN_FIX)
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
    return f"Ray's GCS client failed ({type(error).__name__}: {first})"
