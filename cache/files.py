"""Publishing files atomically: each file via a temp file and ``os.replace``, and a group's
manifest last, so a reader never sees a partial group (the failure mode of triton#11319)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_missing(files: Mapping[str, bytes]) -> int:
    """Write each file of ``files`` (path -> bytes) that is not there (atomically); returns how
    many were written. For files named by their content: one that is there is the same."""
    written = 0
    for path, data in files.items():
        if not os.path.exists(path):
            write_atomic(path, data)
            written += 1
    return written


def _is_manifest(path: str) -> bool:
    return os.path.basename(path).startswith("__grp__")


def publish(files: Mapping[str, bytes], is_manifest: Callable[[str], bool] = _is_manifest) -> int:
    """Write every file that is missing or differs; manifests (Triton's ``__grp__*.json``) last.

    Returns the number of bytes written.
    """
    written = 0
    for path in sorted(files, key=is_manifest):  # False sorts first: blobs, then manifests
        data = files[path]
        try:
            if os.path.getsize(path) == len(data):
                with open(path, "rb") as f:
                    if f.read() == data:
                        continue
        except OSError:
            pass
        write_atomic(path, data)
        written += len(data)
    return written
