"""A compiled-frames entry made on one CUDA device index, moved to another
(``wrapper/compat/devices.py``): the output code's device forms, the guards' tensors (through
torch's own ``load_guards_state``), and the header that binds an entry with collectives to its
rank. The whole path (frames compiled on cuda:0, loaded by a process on cuda:1) runs on a machine
with two GPUs: ``tests/gpu/test_frames_gpu.py``."""

# ruff: noqa: E501 - the output code's own lines

from __future__ import annotations

import dataclasses
import pathlib
import pickle

import pytest
import torch

from raycompile.wrapper.compat import devices, precompile

# the device forms of an output module Inductor generated for cuda:0 (torch 2.11, an H200)
OUTPUT_CODE = """
from torch._inductor.runtime.triton_heuristics import grid
get_raw_stream = torch._C._cuda_getCurrentRawStream
triton_poi_fused_0 = async_compile.triton('triton_poi_fused_0', '''
@triton_heuristics.pointwise(size_hints={'x': 1024}, filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*bf16', 'xnumel': 'i32'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, warp_size=32), 'constants': {}},
)
''', device_str='cuda')
def call(args):
    primals_1, = args
    with torch.cuda._DeviceGuard(0):
        torch.cuda.set_device(0)
        buf0 = empty_strided_cuda((4, 512), (512, 1), torch.bfloat16)
        stream0 = get_raw_stream(0)
        triton_poi_fused_0.run(primals_1, buf0, 2048, stream=stream0)
        buf1 = torch.ops.aten.full.default([4], 0, dtype=torch.int64, device=device(type='cuda', index=0), pin_memory=False)
        buf2 = torch.empty((4,), device="cuda:0")
    return (buf0, buf1, buf2)
"""


def test_every_generated_form_of_the_index_moves() -> None:
    assert devices._indices(OUTPUT_CODE) == {0}
    moved = devices.move_source(OUTPUT_CODE, 3)
    assert devices._indices(moved) == {3}
    for form in ("_DeviceGuard(3)", "set_device(3)", "get_raw_stream(3)", "device(type='cuda', index=3)",
                 "DeviceProperties(type='cuda', index=3, multi", 'device="cuda:3"'):
        assert form in moved, form
    assert moved.replace("3", "0") == OUTPUT_CODE.replace("3", "0")  # nothing else changed


FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
# output modules Inductor generated on GPUs (torch 2.11, H100/H200): every index they name is
# in a known form, once their comment lines (the "Graph fragment", ``cuda:0`` in each type) are set aside
REAL = sorted([*(FIXTURES / "golden").glob("output_module_cuda*.txt"),
               *(FIXTURES / "corpus_torch211_cache" / "inductor_cache").glob("*.py")])


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:24])
def test_real_gpu_output_modules_move(path: pathlib.Path) -> None:
    source = path.read_text()
    assert devices._indices(source) == {0}
    moved = devices.move_source(source, 1)
    assert devices._indices(moved) == {1}
    try:
        compile(source, str(path), "exec")
    except SyntaxError:  # a golden file with its paths templated: not Python itself
        return
    compile(moved, str(path), "exec")  # still Python


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name[:24])
def test_real_output_modules_without_collectives_are_bound_to_no_rank(path: pathlib.Path) -> None:
    assert not devices._COLLECTIVE.search(path.read_text())


def test_an_index_in_a_form_not_known_is_never_moved() -> None:
    assert devices._indices(OUTPUT_CODE + "\nwith torch.cuda.device(0):\n    pass\n") is None
    assert devices._indices(OUTPUT_CODE + "\nx = torch.empty(3, device=torch.device('cuda', 0))\n") is None
    two = OUTPUT_CODE + "\nbuf9 = torch.empty((4,), device='cuda:1')\n"
    assert devices._indices(two) == {0, 1}  # two devices: dumps names none, and nothing is moved


def test_guards_tensors_move_through_torchs_own_loader() -> None:
    from torch._dynamo.package import load_guards_state

    state = {"x": torch.device("cuda", 0), "y": torch.device("cuda", 1), "z": torch.device("cpu"),
             "t": torch.empty(2, 3, device="meta")}
    wrapped = devices._guards(pickle.dumps(state), {0: 3})
    got = load_guards_state(wrapped)
    assert got["x"] == torch.device("cuda", 3)
    assert got["y"] == torch.device("cuda", 1) and got["z"] == torch.device("cpu")
    assert got["t"].shape == (2, 3)
    # an entry moved 0 -> 3, written again by that process and moved 3 -> 5: read 0 -> 5
    again = load_guards_state(devices._guards(wrapped, {3: 5}))
    assert again["x"] == torch.device("cuda", 5) and again["y"] == torch.device("cuda", 1)


def test_an_entry_with_collectives_is_bound_to_its_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    assert devices._COLLECTIVE.search("buf3 = torch.ops._c10d_functional.all_reduce_.default(buf2, 'sum', '0')")
    assert not devices._COLLECTIVE.search(OUTPUT_CODE)
    body = pickle.dumps({"an": "entry"})
    bound = precompile.MAGIC + precompile._HEADER.pack(-1, 2) + body
    monkeypatch.setenv("RANK", "2")
    assert precompile._unpickled(bound) == {"an": "entry"}
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(RuntimeError, match="compiled by rank 2: rank 0 compiles its own"):
        precompile._unpickled(bound)
    free = precompile.MAGIC + precompile._HEADER.pack(-1, -1) + body
    assert precompile._unpickled(free) == {"an": "entry"}
    with pytest.raises(ValueError, match="no header"):
        precompile._unpickled(body)  # an entry of an older raycompile: not unpickled


# an entry's shape as the mover walks it (torch's PrecompileCacheEntry: backends, dynamo.codes[i].guarded_codes)
@dataclasses.dataclass
class _Guarded:
    guards_state: bytes


@dataclasses.dataclass
class _Code:
    guarded_codes: list[_Guarded]


@dataclasses.dataclass
class _Dynamo:
    codes: list[_Code]


@dataclasses.dataclass
class _Entry:
    backends: dict
    dynamo: _Dynamo
    where: object


def test_an_entry_records_its_one_index_and_moves_whole() -> None:
    from torch._dynamo.package import load_guards_state

    guards = pickle.dumps({"t": torch.device("cuda", 0)})
    entry = _Entry({}, _Dynamo([_Code([_Guarded(guards)])]), torch.device("cuda", 0))
    data, index = devices.dumps(entry)
    assert index == 0
    moved = devices.loads(data, 0, 2)
    assert moved.where == torch.device("cuda", 2)
    assert load_guards_state(moved.dynamo.codes[0].guarded_codes[0].guards_state)["t"] == torch.device("cuda", 2)
    from types import SimpleNamespace

    regional = SimpleNamespace(content=SimpleNamespace(compiled_fw=SimpleNamespace(result="a regional output code"),
                                                       compiled_bw=None))
    assert devices.dumps(_Entry({"f": regional}, _Dynamo([]), torch.device("cuda", 0)))[1] is None  # not Python code
    two = _Entry({"b": torch.device("cuda", 1)}, _Dynamo([]), torch.device("cuda", 0))
    assert devices.dumps(two)[1] is None  # two devices: never moved
    assert devices.dumps(_Entry({}, _Dynamo([]), torch.device("cpu")))[1] is None


def test_the_null_popper_in_dynamo_bytecode_pickles_as_an_equal_function() -> None:
    """``PyCodegen.pop_null`` loads a ``lambda: None`` as a constant of the frame's bytecode (torch
    2.11 on Python 3.12 after every graph break). pickle cannot name it: the entry's write failed
    on the GPU machine, and each new process traced the model again. The entry's pickler writes it
    as a module-level function that does the same, and the code still runs."""
    from types import SimpleNamespace

    from torch._dynamo.codegen import PyCodegen
    from torch._dynamo.package import SerializedCode

    popper = PyCodegen.pop_null(SimpleNamespace(create_load_const_unchecked=lambda value: value))[0]
    assert callable(popper) and popper.__qualname__.endswith("pop_null.<locals>.<lambda>")
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(popper)  # what the write failed on
    code = compile("x = 1", "<frame>", "exec")
    code = code.replace(co_consts=(*code.co_consts, popper))  # a constant of the frame's bytecode, as Dynamo loads it
    entry = _Entry({}, _Dynamo([SerializedCode.from_code_object(code)]), torch.device("cpu"))
    loaded = SerializedCode.to_code_object(precompile._unpickled(precompile.dumps(entry)).dynamo.codes[0])
    scope: dict = {}
    exec(loaded, scope)
    assert scope["x"] == 1
    (got,) = (c for c in loaded.co_consts if callable(c))
    assert got is precompile._null_popped and got() is None  # called with no argument, it returns None as the lambda did
    others = _Entry({"f": lambda: None}, _Dynamo([]), torch.device("cpu"))
    with pytest.raises((AttributeError, pickle.PicklingError)):
        precompile.dumps(others)  # only Dynamo's own popper: any other local function still fails
