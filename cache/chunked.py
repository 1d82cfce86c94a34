"""zlib in chunks, compressed and decompressed on several threads at once.

A compiled-frames entry of a GPU model is tens of MB once decompressed (its output modules carry
every kernel's Triton artifacts): 29 MB for the Mixtral-style step, whose single zlib stream took
0.16 s to decompress on the main thread of a warm process, inside its first call, on an H200 host.
zlib releases the GIL while it works, so chunks compressed apart decompress in parallel.

Format: ``MAGIC``, the number of chunks, each chunk's compressed size (big-endian u32s), then the
chunks, each a zlib stream of at most ``CHUNK`` bytes. ``decompress`` also reads a plain zlib
stream (what raycompile wrote before this format), so entries already in a tier still load.
"""

from __future__ import annotations

import concurrent.futures
import os
import struct
import threading
import zlib

MAGIC = b"raycompile-zchunks-1\n"
CHUNK = 4 << 20  # bytes of input per chunk
LEVEL = 1  # zlib's fastest: decompression speed does not depend on it, and compression is 4-5x at it
_COUNT = struct.Struct(">I")

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_pid = 0  # the process that made it: a forked child has none of its threads, and makes its own
_pool_lock = threading.Lock()


def _threads() -> concurrent.futures.ThreadPoolExecutor:
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(1, min(8, os.cpu_count() or 1)), thread_name_prefix="raycompile-zlib")
            _pool_pid = os.getpid()
        return _pool


def _forked() -> None:  # the child: the parent's lock may have been held at the fork, its threads are gone
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _map(fn, parts: list) -> list:  # type: ignore[no-untyped-def]
    if len(parts) > 1:
        try:
            return list(_threads().map(fn, parts))
        except RuntimeError:  # at interpreter exit (thread pools are shut down before atexit runs)
            pass
    return [fn(p) for p in parts]


def compress(data: bytes) -> bytes:
    """``data`` as chunks of zlib (``decompress`` gives it back)."""
    view = memoryview(data)
    parts = _map(lambda b: zlib.compress(b, LEVEL), [view[i:i + CHUNK] for i in range(0, len(data), CHUNK)])
    return b"".join([MAGIC, _COUNT.pack(len(parts)), *(_COUNT.pack(len(p)) for p in parts), *parts])


def decompress(blob: bytes) -> bytes:
    """What ``compress`` was given; a plain zlib stream is decompressed as one. Raises ``zlib.error``
    or ``ValueError`` for bytes that are neither."""
    if not blob.startswith(MAGIC):
        return zlib.decompress(blob)
    view = memoryview(blob)
    at = len(MAGIC)
    if len(blob) < at + _COUNT.size:
        raise ValueError("chunked zlib: truncated before its chunk count")
    (count,) = _COUNT.unpack_from(blob, at)
    at += _COUNT.size
    if at + count * _COUNT.size > len(blob):
        raise ValueError(f"chunked zlib: {count} chunks named, the bytes end before their sizes")
    sizes = [_COUNT.unpack_from(blob, at + i * _COUNT.size)[0] for i in range(count)]
    at += count * _COUNT.size
    if at + sum(sizes) != len(blob):
        raise ValueError(f"chunked zlib: chunks of {sum(sizes)} bytes named, {len(blob) - at} there")
    parts = []
    for size in sizes:
        parts.append(view[at:at + size])
        at += size
    return b"".join(_map(zlib.decompress, parts))
