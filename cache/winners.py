"""Autotune winners: the fastest config of a Triton kernel, filed under the kernel's cache key.

The farm's GPU actors find a winner once per cluster (``wrapper/gpu_autotune.py``); every process that
loads the kernel later is handed it (``wrapper/runtime.py``'s ``winners``) and benchmarks nothing.
Entries live in the same signed tiers as kernels (local, then shared), as JSON, never pickled.

``put_winner(cache, key, config)`` / ``get_winner(cache, key)`` are the functions to call from
elsewhere (e.g. a bridge from Inductor's own autotune cache); ``WinnerStore`` adds a memo.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

from .store import Entry, get_json

Winner = dict[str, Any]  # a Triton config: its kwargs, plus "num_warps" and "num_stages"


def winner_key(kernel_key: str) -> str:
    """The cache key of the winner of the kernel with cache key ``kernel_key``."""
    return hashlib.sha256(f"autotune-winner:{kernel_key}".encode()).hexdigest()


def get_winner(cache: Any, kernel_key: str) -> Winner | None:
    """The stored winner of ``kernel_key`` (local tier, then shared; a shared hit is copied to
    the local tier), or None. Not counted in the cache's hit/miss stats: those count kernels."""
    winner = get_json(cache, winner_key(kernel_key), "winner.json")
    return winner if isinstance(winner, dict) else None


def put_winner(cache: Any, kernel_key: str, config: Winner, meta: dict[str, Any] | None = None) -> None:
    """File ``config`` as the winner of ``kernel_key`` in every tier (an unwritable tier is
    counted in the cache's ``put_errors`` and skipped)."""
    entry = Entry(winner_key(kernel_key), {"winner.json": json.dumps(config, sort_keys=True).encode()},
                  {"kernel_key": kernel_key, **(meta or {})})
    cache.put(entry)


class WinnerStore:
    """Winners by kernel cache key: a memo in front of the cache tiers (``cache`` may be None:
    then winners live for this process only). ``submit(fn, *args)``: where the writes to the tiers
    run (an executor's submit: a winner is found at a kernel's first run, on the step's critical
    path, which must not wait on a shared tier); default: here."""

    def __init__(self, cache: Any | None, submit: Any = None) -> None:
        self.cache = cache
        self._submit = submit
        self._memo: dict[str, Winner] = {}
        self._lock = threading.Lock()

    def get(self, kernel_key: str) -> Winner | None:
        with self._lock:
            if kernel_key in self._memo:
                return dict(self._memo[kernel_key])
        winner = get_winner(self.cache, kernel_key) if self.cache is not None else None
        if winner is not None:
            with self._lock:
                self._memo[kernel_key] = winner
        return dict(winner) if winner is not None else None

    def put(self, kernel_key: str, config: Winner, meta: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._memo[kernel_key] = dict(config)
        if self.cache is None:
            return
        if self._submit is not None:
            try:
                self._submit(put_winner, self.cache, kernel_key, dict(config), meta)
                return
            except RuntimeError:  # the executor is shut down (the session is closing): write here
                pass
        put_winner(self.cache, kernel_key, config, meta)
