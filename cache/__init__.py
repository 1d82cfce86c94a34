"""The cache: a local tier and an optional shared tier (file://, redis://), content-addressed,
signed, verified on every read; plus atomic publishing of the artifacts jobs bring back."""

from .files import publish, write_atomic, write_missing
from .keys import kernel_key
from .store import Entry, FileTier, Miss, RedisTier
from .tiered import Cache
from .usage import Usage

__all__ = ["Cache", "Entry", "FileTier", "Miss", "RedisTier", "Usage", "kernel_key", "publish", "write_atomic",
           "write_missing"]
