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
