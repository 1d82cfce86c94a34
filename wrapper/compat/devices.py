"""Seam family "devices": a compiled-frames entry made on one CUDA device index, installed on
another (an entry compiled by the rank on cuda:0 serves the rank on cuda:3).

What in an entry names its device index, and how each is moved:

- ``torch.device`` objects anywhere in the entry (AOTAutograd's metadata, the graphs' example
  metadata): the entry is unpickled with ``torch.device`` mapped (``_Unpickler``);
- the tensors its frames' guards were built for (their device is in the guards' own pickle,
  which torch unpickles when it installs the frame): each guards pickle is wrapped in one that
  unpickles it with the same mapping (``_guards``);
- Inductor's output code, a Python source that names the index in a few generated forms
  (``_DEVICE_FORMS``: device guards, ``set_device``, streams, ``device(type='cuda', index=N)``,
  a kernel's ``DeviceProperties``): rewritten; its module key gets the target index, so another
  process of the node that wrote the first device's module never loads it here; its Triton bundle
  (binaries and launchers saved for the first device) is dropped, the kernels then come from the
  farm's cache, whose keys hold no device index.

Only an entry that names exactly one CUDA index, in the forms above and nowhere else in its output
code, holds no CUDA tensor, and whose output code is all Python, is moved (``dumps`` records the
index); any other is installed as it is (its guards then fail on another device and the frame is
traced, as stock traces it), and so is one the loading process holds tensors on the device of
(``uses``). An entry whose output code calls a collective under Inductor's passes that bake the
rank into it is bound to the rank that compiled it (``collective_rank``; pytorch#188332).
Checked on torch 2.11.0 and 2.13.0."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import re
from collections.abc import Callable, Iterator
from typing import Any

from ._base import Seams

CHECKED_ON = ("2.11.0", "2.13.0")

SEAMS: Seams = {
    "output_code.CompiledFxGraph": ("torch._inductor.output_code", "CompiledFxGraph"),
    "output_code.CompiledFxGraph.write_to_disk": ("torch._inductor.output_code", "CompiledFxGraph.write_to_disk"),
    "package.load_guards_state": ("torch._dynamo.package", "load_guards_state"),
    # the passes that bake a rank into collective code (the others are read with a default)
    "config.reorder_for_compute_comm_overlap": ("torch._inductor.config", "reorder_for_compute_comm_overlap"),
}

# the generated forms of a CUDA device index in Inductor's output code (codegen/wrapper.py,
# codegen/cuda/device_op_overrides.py, the kernels' triton_meta): (pattern, its index's group)
_DEVICE_FORMS = (
    r"(device\(type='cuda', index=)(\d+)(\))",
    r"(DeviceProperties\(type='cuda', index=)(\d+)(\b)",
    r"(torch\.cuda\._DeviceGuard\()(\d+)(\))",
    r"(torch\.cuda\.set_device\()(\d+)(\))",
    r"(get_raw_stream\()(\d+)(\))",
    r"(['\"]cuda:)(\d+)(['\"])",
    r"(default_generators\[)(\d+)(\])",
)
_FORMS = re.compile("|".join(f"(?:{f})" for f in _DEVICE_FORMS))
# any other mention of an index: an entry with one is never moved
_ANY_INDEX = re.compile(r"cuda:\d|index=\d|_DeviceGuard\(|set_device\(|get_raw_stream\(|default_generators\[|"
                        r"cuda\.device\(|[\"']cuda['\"],\s*\d|"
                        r"device_guard\(|get_current_cuda_stream\(|device_type_cuda")  # the C++ wrapper's
# a collective the output code calls (every output module binds ``empty_strided_p2p`` from
# ``torch._C._distributed_c10d``: that is no call of one)
_COLLECTIVE = re.compile(r"\b_c10d_functional\.\w|torch\.ops\.c10d\.\w")


def _indices(source: str) -> set[int] | None:
    """The CUDA indices ``source`` names in the known forms; None when it names one otherwise.
    Comment lines are not code (Inductor's "Graph fragment" comments name ``cuda:0`` in each
    tensor's type)."""
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    found: set[int] = set()
    rest = []
    last = 0
    for m in _FORMS.finditer(source):
        groups = [g for g in m.groups() if g is not None]
        found.add(int(groups[1]))
        rest.append(source[last:m.start()])
        last = m.end()
    rest.append(source[last:])
    if _ANY_INDEX.search("".join(rest)):
        return None
    return found


def move_source(source: str, to: int) -> str:
    """``source`` (output code naming one index, ``_indices``) with that index replaced by ``to``."""

    def sub(m: re.Match[str]) -> str:
        groups = [g for g in m.groups() if g is not None]
        return f"{groups[0]}{to}{groups[2]}"

    return _FORMS.sub(sub, source)


def _results(entry: Any) -> Iterator[Any]:
    """The output codes of a precompile entry's backends (forward and backward), of any kind."""
    for artifact in entry.backends.values():
        backend = getattr(artifact, "content", artifact)  # BundledAOTAutogradCacheArtifact's result
        for part in ("compiled_fw", "compiled_bw"):
            result = getattr(getattr(backend, part, None), "result", None)
            if result is not None:
                yield result


def output_codes(entry: Any) -> Iterator[Any]:
    """The compiled FX graphs (Inductor's Python output code) of a precompile entry's backends."""
    from torch._inductor.output_code import CompiledFxGraph

    for result in _results(entry):
        if isinstance(result, CompiledFxGraph):
            yield result


def _movable_code(entry: Any) -> bool:
    """Whether every output code of ``entry`` is Python output code this module can move: a
    regional or AOT-compiled one, or one with the C++ wrapper, is not."""
    from torch._inductor.output_code import CompiledFxGraph

    return all(isinstance(r, CompiledFxGraph) and not (r.fx_kwargs or {}).get("cpp_wrapper") for r in _results(entry))


class _Recorder(pickle.Pickler):
    """A pickler that records the CUDA indices of the ``torch.device`` objects it pickles, and
    whether it pickles a CUDA tensor or storage (its device travels as a location string, which
    nothing here moves: index -1)."""

    def __init__(self, file: io.BytesIO, reduce: Callable[[Any], Any] | None = None) -> None:
        import torch

        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.indices: set[int] = set()
        self._device = torch.device
        self._on_device = (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)
        self._reduce = reduce

    def reducer_override(self, obj: Any) -> Any:
        if self._reduce is not None:
            got = self._reduce(obj)
            if got is not None:
                return got
        if type(obj) is self._device:
            if obj.type == "cuda":
                self.indices.add(-1 if obj.index is None else obj.index)
        elif isinstance(obj, self._on_device) and getattr(obj, "is_cuda", False):
            self.indices.add(-1)
        return NotImplemented


def dumps(entry: Any, reduce: Callable[[Any], Any] | None = None) -> tuple[bytes, int | None]:
    """(the pickled entry, the one CUDA index it names, or None: none, several, or one named in a
    form this module does not know). ``reduce(obj)``, where given, is asked first for each object:
    a ``__reduce__`` value for it, or None for pickle's own."""
    buf = io.BytesIO()
    pickler = _Recorder(buf, reduce)
    pickler.dump(entry)
    found = set(pickler.indices)
    if not _movable_code(entry):
        return buf.getvalue(), None
    for graph in output_codes(entry):
        got = _indices(graph.source_code)
        if got is None:
            return buf.getvalue(), None
        found |= got | set(graph.device_idxs)
    return buf.getvalue(), (found.pop() if len(found) == 1 and -1 not in found else None)


def collective_rank(entry: Any) -> int | None:
    """The rank an entry is bound to: this process's, when its output code calls a collective and
    Inductor's passes that bake the rank into such code are on (the bucketing of all-gathers and
    reduce-scatters, overlap scheduling: pytorch#188332, #191878); else None (the code of plain
    functional collectives names the process group, not the rank, and serves every rank)."""
    if not _rank_baked() or not any(_COLLECTIVE.search(g.source_code) for g in output_codes(entry)):
        return None
    return this_rank()


def _rank_baked() -> bool:
    from torch._inductor import config

    overlap = getattr(getattr(config, "aten_distributed_optimizations", None), "enable_overlap_scheduling", False)
    return (getattr(config, "bucket_all_gathers_fx", "none") != "none"
            or getattr(config, "bucket_reduce_scatters_fx", "none") != "none"
            or bool(overlap) or bool(getattr(config, "reorder_for_compute_comm_overlap", False)))


def this_rank() -> int:
    """This process's rank: its process group's, else torchrun's ``RANK``, else 0."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):
        pass
    rank = os.environ.get("RANK", "")
    return int(rank) if rank.isdigit() else 0


def current_index() -> int | None:
    """This process's current CUDA device, once CUDA is up (never initializes it)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.current_device())


def uses(index: int) -> bool:
    """Whether this process holds tensors on cuda:``index`` (an entry made there is then its own,
    whatever its current device is: a script that moved its model to ``cuda:N`` without
    ``set_device``)."""
    import torch

    try:
        return 0 <= index < torch.cuda.device_count() and torch.cuda.memory_allocated(index) > 0
    except (RuntimeError, AssertionError):
        return False


Mapping = dict[int, int]  # CUDA index -> the index it is read as


class _Unpickler(pickle.Unpickler):
    """Unpickles with every CUDA ``torch.device`` read through ``mapping``; guards that an earlier
    move wrapped (``_load_guards``) are read through that move's mapping, then this one's."""

    def __init__(self, data: bytes, mapping: Mapping) -> None:
        super().__init__(io.BytesIO(data))
        self._mapping = mapping

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name == "device":
            return self._device
        if module == __name__ and name == "_load_guards":
            outer = self._mapping
            return lambda data, inner: _load_guards(data, _then(inner, outer))
        return super().find_class(module, name)

    def _device(self, *args: Any) -> Any:
        import torch

        d = torch.device(*args)
        if d.type == "cuda" and d.index in self._mapping:
            return torch.device("cuda", self._mapping[d.index])
        return d


def _then(first: Mapping, second: Mapping) -> Mapping:
    """``first``, then ``second``: each index where the two moves take it."""
    return {**{i: second.get(j, j) for i, j in first.items()}, **{i: j for i, j in second.items() if i not in first}}


def _load_guards(data: bytes, mapping: Mapping) -> Any:
    """A frame's guards state, its tensors' devices read through ``mapping`` (called by torch's
    own ``load_guards_state`` through the pickle ``_guards`` makes)."""
    return _Unpickler(data, mapping).load()


class _Guards:
    def __init__(self, data: bytes, mapping: Mapping) -> None:
        self.args = (data, mapping)

    def __reduce__(self) -> Any:
        return _load_guards, self.args


def _guards(data: bytes, mapping: Mapping) -> bytes:
    return pickle.dumps(_Guards(data, mapping), protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes, src: int, to: int) -> Any:
    """The entry pickled in ``data`` (made on cuda:``src``, ``dumps``), moved to cuda:``to``."""
    entry = _Unpickler(data, {src: to}).load()
    for graph in output_codes(entry):
        graph.source_code = move_source(graph.source_code, to)
        graph.cache_key = f"{graph.cache_key}d{to}"  # never the first device's module of this node
        graph.device_idxs = type(graph.device_idxs)(to if i == src else i for i in graph.device_idxs)
        graph._triton_bundle = None
    for code in entry.dynamo.codes:
        code.guarded_codes = [dataclasses.replace(g, guards_state=_guards(g.guards_state, {src: to}))
                              for g in code.guarded_codes]
    return entry
