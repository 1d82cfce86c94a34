"""A kernel's identity, and the layout of what its cache entry holds. The one place either is
defined: the farm's dedupe, the tiers, the cluster coordinator, the output module's manifest and the
autotune winners all name a Triton kernel by the key made here, computed once when its job is made
(``wrapper/job_keys.py``), carried by the job (``kernels.jobs.TritonJob.key``) and by the compiled
kernel. A C++ kernel has a build key (its resolved command lines: what the farm, the tiers and the
coordinator use) and, in the manifest, a source key (the commands do not exist at codegen).

Inputs of a key: the kernel source (Triton module text, or the C++ sources and the resolved command
lines), the torch / triton / ptxas versions, the target arch, and the settings Inductor passes with
the job. The CUDA device index is NOT an input: the cubin does not depend on it, so the same kernel
compiled for cuda:0 and cuda:1 (rank 0 and rank 1) shares one entry, where Inductor's FX-graph cache
misses (pytorch#170123). The cached autotuner records its device; the loader points it at the
requesting device (``wrapper.compat.set_autotuner_device``).

An entry's blobs are named:
- ``triton/GROUP/FILE``: a file of Triton's cache group GROUP (relative to a Triton cache dir);
- ``inductor/REL``: a file under Inductor's cache dir (the C++ libraries it loads);
- an absolute path: a file that lives there on every node;
- ``payload``: the pickled compiled kernel (Inductor's ``CachingAutotuner``), not a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

KEY_VERSION = 1  # bump when the layout of what is cached changes
# In torch.compiler.config.cache_key_tag while enabled (wrapper/codegen.py's output modules import
# raycompile's runtime): the wrapper class is not in Inductor's FX-graph key, so without it
# farm-made and stock modules would share cache entries. v2: the header imports ``align`` and
# ``extern_kernels`` from elsewhere (wrapper/compat/light.py, LIGHT_LINES), which a raycompile
# before it cannot import: it must not find these entries.
OUTPUT_MODULE_TAG = "raycompile-output-module-v2"

TRITON = "triton/"
INDUCTOR = "inductor/"
PAYLOAD = "payload"
INDUCTOR_DIR_TOKEN = "<inductor-cache>"  # a C++ command's paths under Inductor's cache dir, in its key

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
        "sources": list(sources),
        "torch": torch_version,
        "triton": triton_version,
        "ptxas": ptxas_version,
        "arch": arch,
        "settings": {k: repr(settings[k]) for k in sorted(settings)},
    }
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    _remember(key, {"kind": kind, "source": _digest(doc["sources"]), "torch": torch_version,
                    "triton": triton_version, "toolchain": ptxas_version, "arch": arch,
                    **{f"option {k}": v for k, v in doc["settings"].items()}})
    return key


# --- what a key was made of (`raycompile explain`) -----------------------------------------------
# Each key this process makes is remembered with its parts: the inputs of the key as short texts
# (versions, arch, options as they are; sources and configs as digests). Entries carry their
# key's parts in their manifest (signed with it), so a miss can be set against the entries a tier
# holds: which part differs from the nearest one.

PARTS_KEPT = 8192  # the newest keys' parts this process remembers
_parts: OrderedDict[str, dict[str, str]] = OrderedDict()
_parts_lock = threading.Lock()


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _remember(key: str, parts: dict[str, str]) -> None:
    with _parts_lock:
        _parts[key] = parts
        _parts.move_to_end(key)
        while len(_parts) > PARTS_KEPT:
            _parts.popitem(last=False)


def parts_of(key: str) -> dict[str, str] | None:
    """What ``key`` was made of, if this process made it (recently); generations of a compiled
    function's entry (``BASE.gN``) answer with their base's."""
    with _parts_lock:
        found = _parts.get(key)
        if found is None:
            found = _parts.get(frames_base(key))
        return dict(found) if found is not None else None


def differing(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The names of the parts in which two keys' parts differ (present in one only included)."""
    return sorted(name for name in set(a) | set(b) if a.get(name) != b.get(name))


def triton_key(source: str, torch_version: str, triton_version: str, ptxas_version: str,
               target: tuple[str, int, int], extra_config: Mapping[str, object]) -> str:
    """An Inductor Triton kernel module's key. ``source``: the module text without its device
    index (``wrapper.compat.without_device_index``: the cubin does not depend on it); ``target``:
    (device type, compute capability, warp size) recorded in it; ``extra_config``: what
    ``AsyncCompile.triton`` sends with it."""
    device, cc, warp = target
    return kernel_key("triton", [source], torch_version, triton_version, ptxas_version, f"{device}:{cc}:{warp}",
                      extra_config)


def cpp_build_key(commands: Sequence[Sequence[str]], inputs: Mapping[str, bytes], torch_version: str,
                  triton_version: str, compiler_version: str, inductor_dir: str) -> str:
    """A C++ kernel build's key: its resolved command lines and the bytes of the files it reads.
    Paths under ``inductor_dir`` (this process's Inductor cache dir) are named relative to it, so a
    node with another TORCHINDUCTOR_CACHE_DIR finds the same entry."""
    parts = [" ".join(c).replace(inductor_dir, INDUCTOR_DIR_TOKEN) for c in commands]
    parts += [f"{path.replace(inductor_dir, INDUCTOR_DIR_TOKEN)}:{hashlib.sha256(data).hexdigest()}"
              for path, data in sorted(inputs.items())]
    return kernel_key("cpp", parts, torch_version, triton_version, compiler_version, "", {})


def cpp_source_key(argtypes: Sequence[str], source: str, torch_version: str, triton_version: str,
                   compiler_version: str, march: str) -> str:
    """A C++ kernel's key in the output module's manifest, where its build commands do not exist
    yet (Inductor writes the source out when it builds): source, argument types, compiler, CPU."""
    return kernel_key("cpp-source", [repr(list(argtypes)), source], torch_version, triton_version,
                      compiler_version, march, {})


def module_key(kind: str, inductor_key: str) -> str:
    """The entry of a whole compiled module Inductor's remote cache stores (``kind``: "fx" for an
    FX-graph entry, "aot" for an AOTAutograd one) under Inductor's own key."""
    return hashlib.sha256(f"raycompile-module:{kind}:{inductor_key}".encode()).hexdigest()


def isa_library_key(blob: str) -> str:
    """The entry holding one library of Inductor's CPU instruction-set checks (``blob``:
    ``inductor-isa:<subdir>/<key>.so``, whose key Inductor hashed from the check's source, the
    compiler, the set's flags and torch's version), shared by the nodes whose checks look for it."""
    return hashlib.sha256(f"raycompile-isa-library:{KEY_VERSION}:{blob}".encode()).hexdigest()


FRAMES_GENERATIONS = 8  # a compiled function's entry, published again after recompiles, at most this often


def frames_key(identity: Mapping[str, object]) -> str:
    """A compiled function's Dynamo precompile entry (``wrapper/frames.py``): ``identity`` names the
    function and its module source, the model it closes over, the compile options, the configs and
    the versions and GPU (any JSON-able mapping; equal mappings give equal keys)."""
    doc = {"v": KEY_VERSION, "kind": "dynamo-frames", "identity": identity}
    key = hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()
    _remember(key, _frames_parts(identity))
    return key


def _frames_parts(identity: Mapping[str, object]) -> dict[str, str]:
    """A compiled function's key parts: each section of its identity, one level down where that
    names something a user can act on (a version, the GPU, one compile option, one config)."""
    out: dict[str, str] = {"kind": "dynamo-frames"}
    for name, value in identity.items():
        if isinstance(value, Mapping) and name in ("system", "options", "config", "function"):
            for sub, v in value.items():
                if v is None or isinstance(v, (bool, int, float)):
                    text = str(v)
                else:
                    text = v if isinstance(v, str) and len(v) <= 80 else _digest(v)
                out[f"{name} {sub}"] = text
        else:
            out[name] = _digest(value)
    return out


def frames_backward_note(base: str) -> str:
    """A note beside the entry ``base``: a process compiled the function lazily (its backward
    lowered at the first backward, as stock does) and never ran a backward, so its entry was never
    complete; the next process lowers the backward with the forward (``wrapper/frames.py``)."""
    return f"{base}.backward-with-forward"


def frames_generation(base: str, generation: int) -> str:
    """Generation ``generation`` of the entry ``base``: tiers never replace an entry, and a
    function's entry grows when a warm node meets a new shape, so each publish is a new key;
    a loader takes the newest that loads."""
    return f"{base}.g{generation}"


def frames_base(key: str) -> str:
    """The base of a generation's key (``frames_generation``'s inverse); any other key unchanged."""
    base, sep, generation = key.rpartition(".g")
    return base if sep and generation.isdigit() else key


# --- the blobs of an entry --------------------------------------------------------------------


def triton_blob(group: str, name: str) -> str:
    """The blob name of file ``name`` of Triton cache group ``group``."""
    return f"{TRITON}{group}/{name}"


def triton_blobs(blobs: Mapping[str, bytes]) -> dict[str, bytes]:
    """The Triton cache group files among ``blobs``."""
    return {n: d for n, d in blobs.items() if n.startswith(TRITON)}


def to_paths(blobs: Mapping[str, bytes], triton_dir: str, inductor_dir: str) -> dict[str, bytes]:
    """Blob names -> paths on this node: ``triton/GROUP/FILE`` under ``triton_dir``,
    ``inductor/REL`` under ``inductor_dir``, absolute as is; the payload is not a file."""
    out = {}
    for name, data in blobs.items():
        if name.startswith(TRITON):
            if triton_dir:
                out[os.path.join(triton_dir, name[len(TRITON):])] = data
        elif name.startswith(INDUCTOR):
            out[os.path.join(inductor_dir, name[len(INDUCTOR):])] = data
        elif os.path.isabs(name):
            out[name] = data
    return out


def triton_paths(blobs: Mapping[str, bytes], triton_dir: str) -> dict[str, bytes]:
    """The Triton cache group files among ``blobs``, as paths under ``triton_dir`` (a Triton cache
    dir: this process's, or one a GPU node will use)."""
    return to_paths(triton_blobs(blobs), triton_dir, "")


def from_paths(files: Mapping[str, bytes], inductor_dir: str) -> dict[str, bytes]:
    """Paths on this node (and ``triton/`` names as they are) -> blob names: a path under
    ``inductor_dir`` becomes ``inductor/REL``."""
    base = inductor_dir.rstrip(os.sep) + os.sep
    return {(INDUCTOR + n[len(base):] if n.startswith(base) else n): d for n, d in files.items()}
