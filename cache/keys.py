"""The cache key: one pure function of everything that changes a kernel's binary.

Inputs: the kernel source (Triton module text, or the C++ sources and the resolved command lines),
the torch / triton / ptxas versions, the target arch, and the settings Inductor passes with the job.
The CUDA device index is NOT an input: the cubin does not depend on it, so the same kernel
compiled for cuda:0 and cuda:1 (rank 0 and rank 1) shares one entry, where Inductor's FX-graph cache
misses (pytorch#170123). The cached autotuner records its device; the loader points it at the
requesting device (``wrapper.compat.set_autotuner_device``).
"""


from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence

KEY_VERSION = 1  # bump when the layout of what is cached changes

_DEVICE_INDEX = re.compile(r"(DeviceProperties\(type='\w+', )index=\d+, ")


def normalize_source(source: str) -> str:
    """The kernel source with its device index removed (it does not change the binary)."""
    return _DEVICE_INDEX.sub(r"\1", source)


def kernel_key(
    kind: str,
    sources: Sequence[str],
    torch_version: str,
    triton_version: str,
    ptxas_version: str,
    arch: str,
    settings: Mapping[str, object],
) -> str:
    """sha256 hex digest naming a cache entry; equal inputs give equal keys, any change a new key."""
    doc = {
        "v": KEY_VERSION,
        "kind": kind,
        "sources": [normalize_source(s) for s in sources],
        "torch": torch_version,
        "triton": triton_version,
        "ptxas": ptxas_version,
        "arch": arch,
        "settings": {k: repr(settings[k]) for k in sorted(settings)},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
