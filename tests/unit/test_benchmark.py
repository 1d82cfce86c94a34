"""The pure parts of autotuning on GPU actors: what a benchmark job carries, how its arguments
are described and rebuilt, which kernels are kept local (indirect indexing), how a user's kernel
travels, and the store of winners."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl

from raycompile.cache import Cache
from raycompile.cache.winners import WinnerStore, get_winner, put_winner
from raycompile.kernels.benchmark import (
    INF,
    Payload,
    TensorArg,
    Timing,
    bundle_user_kernel,
    describe_args,
    fastest,
    has_indirect_indexing,
    is_sticky,
    load_user_kernel,
    make_args,
    retarget_device,
)
from raycompile.orchestrator import Stats

CORPUS = pathlib.Path(__file__).parents[1] / "fixtures" / "corpus_torch211" / "kernels"


def test_arguments_by_value_round_trip_with_strides_and_offset() -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    view = base[1:, 2:7].t()  # non-contiguous, offset 12
    described = describe_args([view, 7, 2.5, None, torch.tensor([3, 1, 2])], by_value=True)
    assert isinstance(described[0], TensorArg) and described[0].offset == view.storage_offset()
    rebuilt = make_args(described, "cpu")
    assert torch.equal(rebuilt[0], view) and rebuilt[0].stride() == view.stride()
    assert rebuilt[1:4] == [7, 2.5, None] and torch.equal(rebuilt[4], torch.tensor([3, 1, 2]))


def test_arguments_by_layout_are_made_as_inductor_makes_examples() -> None:
    x = torch.randn(8, 16, dtype=torch.float16).t()
    idx = torch.tensor([5, 9])
    described = describe_args([x, idx])
    assert described[0].data is None
    made, made_idx = make_args(described, "cpu")
    assert made.shape == x.shape and made.stride() == x.stride() and made.dtype == torch.float16
    assert torch.equal(made_idx, torch.zeros(2, dtype=idx.dtype))  # rand_strided: zeros for integers


def test_payload_id_changes_with_every_input() -> None:
    base = dict(kind="inductor", name="k", source="src")
    ids = {Payload.make(**base).kernel_id, Payload.make(**{**base, "source": "src2"}).kernel_id,
           Payload.make(**base, args=(TensorArg((2,), (1,), "float32"),)).kernel_id,
           Payload.make(**base, bmreq=b"x").kernel_id, Payload.make(**{**base, "kind": "template"}).kernel_id}
    assert len(ids) == 5 and Payload.make(**base).kernel_id == Payload.make(**base).kernel_id


def test_indirect_indexing_is_found_in_real_kernels() -> None:
    sources = {p.name: p.read_text() for p in sorted(CORPUS.glob("*.py"))}
    flagged = {n for n, s in sources.items() if has_indirect_indexing(s)}
    bounds_checked = {n for n, s in sources.items() if "index out of bounds" in s}
    assert flagged == bounds_checked and len(flagged) >= 2  # embedding gathers; nothing else


def test_indirect_indexing_in_user_kernels() -> None:
    gather = textwrap.dedent("""
        def k(idx_ptr, src_ptr, out_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            i = tl.load(idx_ptr + offs)
            row = i * 64
            tl.store(out_ptr + offs, tl.load(src_ptr + row + offs))
    """)
    plain = gather.replace("tl.load(src_ptr + row + offs)", "tl.load(src_ptr + offs) * row")
    assert has_indirect_indexing(gather) and not has_indirect_indexing(plain)


def test_sticky_cuda_errors_are_recognised() -> None:
    assert is_sticky(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_sticky(RuntimeError("out of resource: shared memory"))


def test_retarget_device_and_fastest() -> None:
    src = "triton_meta={'device': DeviceProperties(type='cuda', index=3, multi_processor_count=132, cc=90"
    assert "index=0, multi" in retarget_device(src, 0)
    ts = [Timing(0, INF), Timing(1, 2.0), Timing(2, 1.5), Timing(3, 1.5)]
    assert fastest(ts) is ts[2] and fastest([Timing(0, INF)]) is None


SCALE = tl.constexpr(3)


@triton.jit
def _times(x):
    return x * SCALE


@triton.jit
def user_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _times(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_a_user_kernel_travels_as_source_and_rebuilds_in_another_process(tmp_path: pathlib.Path) -> None:
    """A JITFunction does not pickle; its bundle (source, the jit functions it calls, its globals)
    rebuilds in a process that never imported this test module."""
    import cloudpickle

    source, values = bundle_user_kernel(user_kernel)
    assert "def _times(x)" in source and "def user_kernel(" in source and set(values) == {"SCALE"}
    blob = tmp_path / "bundle.pkl"
    blob.write_bytes(cloudpickle.dumps((source, values)))
    code = ("import pickle, sys; from raycompile.kernels.benchmark import load_user_kernel; "
            f"src, values = pickle.loads(open({str(blob)!r}, 'rb').read()); "
            "k = load_user_kernel('user_kernel', src, values); "
            "print(type(k).__name__, k.fn.__globals__['SCALE'].value, 'test_benchmark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["JITFunction", "3", "False"]
    rebuilt = load_user_kernel("user_kernel", source, values)  # here too: same source as the original
    assert rebuilt.src == user_kernel.src
    with pytest.raises(TypeError, match="triton.jit"):
        bundle_user_kernel(lambda x: x)


def test_winners_survive_in_the_cache_tiers(tmp_path: pathlib.Path) -> None:
    stats = Stats()
    shared = f"file://{tmp_path / 'shared'}"
    cache = Cache.from_settings(str(tmp_path / "a"), shared, 2**30, stats)
    winner = {"XBLOCK": 64, "num_warps": 4, "num_stages": 1}
    assert get_winner(cache, "k1") is None
    put_winner(cache, "k1", winner, {"kernel": "triton_poi_0"})
    assert get_winner(cache, "k1") == winner
    # another node: an empty local tier, the same shared tier (and secret: the local key file is per dir)
    import os

    os.makedirs(tmp_path / "b", exist_ok=True)
    (tmp_path / "b" / "secret.key").write_bytes((tmp_path / "a" / "secret.key").read_bytes())
    other = Cache.from_settings(str(tmp_path / "b"), shared, 2**30, Stats())
    store = WinnerStore(other)
    assert store.get("k1") == winner and store.get("k2") is None
    assert get_winner(Cache(other.local, None, Stats()), "k1") == winner  # copied to the local tier
    assert stats.misses == 0 and stats.local_hits == 0  # winner lookups are not kernel lookups


def test_a_max_autotune_request_is_pointed_at_this_node(tmp_path: pathlib.Path) -> None:
    """A TritonBenchmarkRequest made on the driver names a module file that exists only there and
    the driver's device: on the GPU node its source is written to the local Inductor cache and
    its tensors are put on the local GPU."""
    from torch._inductor.autotune_process import TensorMeta, TritonGPUBenchmarkRequest

    from raycompile.wrapper.autotune import point_request_here

    meta = TensorMeta(device=torch.device("cuda", 3), dtype=torch.float16, sizes=(8, 8), strides=(8, 1), offset=0)
    bmreq = TritonGPUBenchmarkRequest("triton_mm", [meta, meta], meta, [], "/elsewhere/triton_mm.py", "k",
                                      num_stages=2, num_warps=4)
    source = "def triton_mm():\n    pass\n"
    point_request_here(bmreq, source, torch.device("cpu"))
    assert pathlib.Path(bmreq.module_path).read_text() == source and bmreq.module_cache_key in bmreq.module_path
    assert {m.device for m in bmreq.input_tensor_meta} == {torch.device("cpu")}
    assert bmreq.output_tensor_meta.device == torch.device("cpu")
