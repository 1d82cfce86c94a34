"""HMAC-SHA256 signatures for entries that get unpickled, with a cluster secret.

The secret is RAYCOMPILE_SECRET, else a key file created with mode 0600 on first use. Drivers on
several nodes that share a tier must share the secret: set RAYCOMPILE_SECRET on every node.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets


def load_secret(key_file: str) -> bytes:
    """The cluster secret: RAYCOMPILE_SECRET, else ``key_file`` (created 0600 if missing)."""
    env = os.environ.get("RAYCOMPILE_SECRET")
    if env:
        return env.encode()
    try:
        with open(key_file, "rb") as f:
            return f.read()
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(key_file) or ".", exist_ok=True)
    key = secrets.token_hex(32).encode()
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        with open(key_file, "rb") as f:
            return f.read()
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def sign(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def verify(secret: bytes, message: bytes, signature: str | None) -> bool:
    return bool(signature) and hmac.compare_digest(sign(secret, message), str(signature))
