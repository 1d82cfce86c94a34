"""What a session needs of a Ray cluster before any compile misses, asked by a short-lived process
of its own so the driver's main thread loses nothing: the cluster's secret (the key of its shared
tier's entries; put if absent, as ``secret.cluster_secret`` does) and how many nodes are alive
(``shared_cache="auto"``: a tier every node reads only where there are several). It talks to the
GCS with Ray's own client, as a driver's first call does, with ``ray.init``'s token rules; it
never joins as a driver, starts no worker and holds no connection.

Run as a script (its own file, so importing it loads no raycompile, torch or Ray in the driver):
a JSON request on stdin ({"address", "found", "default_secret" (hex), "kv_key", "kv_namespace"}),
one JSON answer on stdout ({"secret": hex, "nodes": n, "here": whether every alive node is this
machine} or {"error": text}). ``ClusterProbe``
(``orchestrator/secret.py``) starts it and reads it.
"""

from __future__ import annotations

import contextlib
import json
import sys


def probe(request: dict) -> dict:
    try:
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available

        if request.get("found"):  # the cluster of Ray's current-cluster file: ray.init(address="auto")'s rule
            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    except ImportError:  # a Ray without token authentication
        pass
    from ray._raylet import GcsClient

    client = GcsClient(address=request["address"])
    key, namespace = request["kv_key"].encode(), request["kv_namespace"].encode()
    client.internal_kv_put(key, bytes.fromhex(request["default_secret"]), False, namespace)
    secret = client.internal_kv_get(key, namespace)
    if not secret:
        return {"error": "Ray's key-value store returned no cluster secret (is the GCS healthy? `ray status`)"}
    alive = [info for info in client.get_all_node_info().values() if info.state == 0]  # ALIVE
    mine = _addresses()
    here = bool(alive) and all(info.node_manager_address in mine for info in alive)
    return {"secret": bytes(secret).hex(), "nodes": len(alive), "here": here}


def _addresses() -> set[str]:
    """This machine's IP addresses (every interface's, loopback included), as a node's
    ``node_manager_address`` names it: psutil's (which Ray carries), else the host name's."""
    import socket

    found = {"127.0.0.1", "::1"}
    try:
        import psutil  # Ray's own dependency (ray/thirdparty_files), on the path once ray is imported

        found |= {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    except Exception:  # noqa: BLE001 - no psutil: the host name's addresses only
        with contextlib.suppress(OSError):
            found |= set(socket.gethostbyname_ex(socket.gethostname())[2])
    return found


def main() -> int:
    request = json.loads(sys.stdin.read())
    try:
        answer = probe(request)
    except BaseException as e:  # noqa: BLE001 - the driver gets the reason and starts Ray itself
        answer = {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
