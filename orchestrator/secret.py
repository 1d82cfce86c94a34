"""The cluster's secret: the key that signs shared-tier entries when drivers join one Ray cluster
and no ``RAYCOMPILE_SECRET`` is set, so the drivers of a cluster agree with zero configuration.

It lives in Ray's internal key-value store (the GCS), which every driver and worker of the
cluster can read and nothing outside it can (Ray's token authentication, on by default since
Ray 2.5x, guards the GCS). The first driver to ask stores one, atomically (put without
overwrite, then read back what won); every other driver reads that one. What it stores is a key
derived from its user's key (``cache.signing.derive``), so a cluster restarted by the same user
gets the same secret again, and a persistent shared tier (file://, redis://) stays valid across
restarts, while the user's own key is never revealed.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..cache.signing import derive
from ..errors import FarmUnavailableError
from ..settings import Settings
from . import raycalls

KV_KEY = b"raycompile/cluster-secret/v1"
KV_NAMESPACE = "raycompile"


def cluster_secret(user_key: bytes) -> bytes:
    """The secret of the cluster this process is connected to (creating it from ``user_key`` when
    the cluster has none yet). Raises FarmUnavailableError when this process is not connected, when
    Ray's key-value store fails, or when it answers with nothing."""
    from ray.experimental import internal_kv

    where = raycalls.address()
    with raycalls.calls(where, "reading the cluster's secret from Ray's key-value store"):
        internal_kv._internal_kv_put(KV_KEY, derive(user_key, "cluster-secret"), overwrite=False,
                                     namespace=KV_NAMESPACE)
        value = internal_kv._internal_kv_get(KV_KEY, namespace=KV_NAMESPACE)
    if not value:
        raise FarmUnavailableError(where, "Ray's key-value store returned no cluster secret (is the GCS "
                                          "healthy? `ray status` on the head node)")
    return bytes(value)


def running_cluster_secret(settings: Settings, user_key: bytes) -> bytes | None:
    """The secret of the Ray cluster running on this machine (``settings.address`` rules), None
    without one. Joins the cluster to read it, and leaves again."""
    import ray

    from .connect import connect, resolve

    try:
        target = resolve(settings)
    except FarmUnavailableError:
        return None
    if not target.joins:
        return None
    joined = connect(settings, target)
    try:
        return cluster_secret(user_key)
    finally:
        if joined.owns:
            ray.shutdown()


class ClusterProbe:
    """The cluster's secret and its count of alive nodes, asked by a process of its own
    (``orchestrator/cluster_probe.py``) that starts at once: a session whose lookups all hit a
    ``file://`` or ``redis://`` tier signed with the cluster's secret then never starts Ray, and
    its main thread spends nothing on it (no import of Ray, no driver connection). ``future``
    resolves to the answer ({"secret": bytes, "nodes": n, "here": bool}, or {"error": text}), within
    ``timeout_s``; ``submit`` runs the wait (the session's I/O threads)."""

    def __init__(self, address: str, found: bool, user_key: bytes, timeout_s: float,
                 submit: Callable[..., Future[dict[str, Any]]]) -> None:
        import json
        import subprocess
        import sys

        default = derive(user_key, "cluster-secret").hex()
        request = json.dumps({"address": address, "found": found, "default_secret": default,
                              "kv_key": KV_KEY.decode(), "kv_namespace": KV_NAMESPACE}).encode()
        script = str(pathlib.Path(__file__).with_name("cluster_probe.py"))
        self._proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL)

        def answer() -> dict[str, Any]:
            from .connect import answers

            why = answers(address, timeout_s) if address else None
            if why is not None:  # refused at once: Ray's client would retry until its time-out
                self.close()
                return {"error": f"the cluster's GCS at {address}: {why}"}
            try:
                out, _ = self._proc.communicate(request, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.communicate()
                return {"error": f"the cluster's GCS at {address} did not answer within {timeout_s:.0f} s"}
            try:
                got = json.loads(out.decode() or "{}")
            except ValueError:
                got = {}
            if "secret" in got:
                return {"secret": bytes.fromhex(got["secret"]), "nodes": int(got.get("nodes", 0)),
                        "here": bool(got.get("here"))}
            return {"error": got.get("error") or f"the probe exited {self._proc.returncode} with no answer"}

        self.future = submit(answer)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
