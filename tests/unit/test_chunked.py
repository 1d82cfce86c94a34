"""cache/chunked.py: compiled-frames entries as chunks of zlib, decompressed on several threads."""

from __future__ import annotations

import os
import struct
import threading
import zlib

import pytest

from raycompile.cache import chunked


def _data(size: int) -> bytes:
    # compressible like a pickled entry (text and repeats), with random bytes in it (cubins)
    block = b"def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n" * 40
    out = bytearray()
    while len(out) < size:
        out += block + os.urandom(512)
    return bytes(out[:size])


@pytest.mark.parametrize("size", [0, 1, chunked.CHUNK - 1, chunked.CHUNK, 3 * chunked.CHUNK + 12345])
def test_what_is_compressed_comes_back_whole(size: int) -> None:
    data = _data(size)
    blob = chunked.compress(data)
    assert blob.startswith(chunked.MAGIC)
    (count,) = struct.unpack_from(">I", blob, len(chunked.MAGIC))
    assert count == -(-size // chunked.CHUNK)  # one chunk per CHUNK bytes begun
    assert chunked.decompress(blob) == data
    if size > chunked.CHUNK:
        assert len(blob) < size  # still compressed


def test_a_plain_zlib_stream_written_before_this_format_still_loads() -> None:
    data = _data(2 * chunked.CHUNK)
    assert chunked.decompress(zlib.compress(data, 1)) == data


def test_the_chunks_decompress_on_several_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the format: more than one thread inflates a big entry's chunks."""
    seen: set[int] = set()
    real = zlib.decompress

    def counting(b: bytes) -> bytes:
        seen.add(threading.get_ident())
        return real(b)

    data = _data(6 * chunked.CHUNK)
    blob = chunked.compress(data)
    monkeypatch.setattr(chunked.zlib, "decompress", counting)  # looked up at call time
    assert chunked.decompress(blob) == data
    if (os.cpu_count() or 1) > 1:
        assert len(seen) > 1, "every chunk was inflated on one thread"


@pytest.mark.parametrize("cut", ["count", "sizes", "chunks", "flipped"])
def test_damaged_bytes_raise_instead_of_loading_something_else(cut: str) -> None:
    blob = bytearray(chunked.compress(_data(2 * chunked.CHUNK + 7)))
    at = len(chunked.MAGIC)
    if cut == "count":
        bad = bytes(blob[:at + 2])
    elif cut == "sizes":
        bad = bytes(blob[:at + 4]) + b"\0\0"
    elif cut == "chunks":
        bad = bytes(blob[:-10])
    else:  # a byte of the first chunk's stream changed (the tier's sha256 would refuse it first)
        blob[at + 4 + 3 * 4 + 40] ^= 0xFF
        bad = bytes(blob)
    with pytest.raises((ValueError, zlib.error)):
        chunked.decompress(bad)


def test_a_forked_child_decompresses_with_threads_of_its_own() -> None:
    """A process forked after the threads started has none of them: it makes its own instead of
    queueing chunks no thread will take (nothing hangs)."""
    import multiprocessing

    data = _data(3 * chunked.CHUNK)
    blob = chunked.compress(data)
    assert chunked.decompress(blob) == data  # the parent's threads exist now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        result = pool.apply_async(_child_decompress, (blob,))
        assert result.get(timeout=60) == len(data)


def _child_decompress(blob: bytes) -> int:
    return len(chunked.decompress(blob))


def test_an_entry_written_at_interpreter_exit_is_still_compressed_and_read() -> None:
    """A script that exits without ``disable()`` writes its frames from an ``atexit`` hook, after
    Python shut its thread pools down: the chunks are then compressed on the calling thread."""
    import subprocess
    import sys

    script = (
        "import atexit, os\n"
        "from raycompile.cache import chunked\n"
        "def last():\n"
        "    data = os.urandom(1 << 20) * 10\n"
        "    chunked.decompress(chunked.compress(b'warm-up'))\n"
        "    assert chunked.decompress(chunked.compress(data)) == data\n"
        "    print('written at exit', flush=True)\n"
        "atexit.register(last)\n"
        "data = os.urandom(1 << 20) * 10\n"
        "assert chunked.decompress(chunked.compress(data)) == data  # the threads start here\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "written at exit" in done.stdout, done.stderr
