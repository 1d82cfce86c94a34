"""HMAC-SHA256 signatures for entries that get unpickled, and the keys that sign them.

Which key signs what (chosen by the session, raycompile/session.py):
- ``RAYCOMPILE_SECRET`` (the ``secret`` setting), when set, signs every tier;
- else the local tier is signed with this user's key: ``user_key_file()``, created with mode
  0600 on first use under the user's config dir (not the cache dir), so every process of one
  user on one machine, or on machines that share a home, agrees;
- else a shared tier is signed with the cluster's key when the process joins a Ray cluster (held
  by the cluster: orchestrator/secret.py), and with this user's key otherwise.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets

log = logging.getLogger("raycompile.cache")


def user_key_file() -> str:
    """This user's key file: ``$XDG_CONFIG_HOME/raycompile/secret.key`` (``~/.config`` by default)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "raycompile", "secret.key")


def load_secret(key_file: str | None = None) -> bytes:
    """The key in ``key_file`` (default: ``user_key_file()``), created with mode 0600 if missing.

    Two processes creating it at once agree (the first writer wins, atomically). A key file
    others can read is used, with a warning: anyone who reads it can sign entries."""
    path = key_file or user_key_file()
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    key = secrets.token_hex(32).encode()
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    try:
        os.link(tmp, path)  # fails if another process published its key first: theirs stands
    except FileExistsError:
        pass
    except OSError:  # a filesystem without hard links: a rename, which a racing writer may replace
        if not os.path.exists(path):
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return _read(path)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        key = f.read().strip()
    if mode & 0o077:
        log.warning("raycompile: the key file %s can be read by other users (mode %o): anyone who reads it "
                    "can sign cache entries; chmod 600 it", path, mode & 0o777)
    if not key:
        raise ValueError(f"the key file {path} is empty; delete it and a new key is made")
    return key


def derive(key: bytes, purpose: str) -> bytes:
    """A key for ``purpose`` made from ``key``, which it does not reveal (HMAC-SHA256, hex)."""
    return hmac.new(key, f"raycompile:{purpose}".encode(), hashlib.sha256).hexdigest().encode()


def sign(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def verify(secret: bytes, message: bytes, signature: str | None) -> bool:
    return bool(signature) and hmac.compare_digest(sign(secret, message), str(signature))
