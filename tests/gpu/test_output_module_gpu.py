"""GPU check of the output module (wrapper/codegen.py, wrapper/runtime.py); run on the GPU
machine, skipped without a GPU. Self-checking: each test asserts what it proves.

- the Triton module's text against goldens (tests/fixtures/golden/output_module_cuda_*.py.txt,
  made on the GPU machine's torch; regenerate with RAYCOMPILE_REGEN_GOLDEN=1 and review the diff);
- a Llama training step through the farm's codegen: the same loss as stock, every kernel of every
  output module defined through FarmCompile with its key, listed in the manifest, and filed in the
  farm's cache under that key (so a node loading the module finds each one);
- a warm module launches the autotune winner known for each kernel without benchmarking it;
- a user-defined @triton.jit kernel (the triton_kernel_wrap path) compiles on the farm too.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from outputmodule import check_shape, compile_and_get_code, defined_kernels, normalise
from tinyllama import tiny_llama

import raycompile
from raycompile.wrapper import compat, runtime

pytestmark = pytest.mark.gpu

GOLDEN = pathlib.Path(__file__).parents[1] / "fixtures" / "golden"
REGEN = os.environ.get("RAYCOMPILE_REGEN_GOLDEN") == "1"


@pytest.fixture
def farm(local_ray: None) -> Iterator[Any]:
    raycompile.enable()
    try:
        yield raycompile.session.current()
    finally:
        raycompile.disable()


def graphs() -> dict[str, tuple[Any, tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    x, w = torch.randn(64, 256, device="cuda"), torch.randn(256, 64, device="cuda")
    return {
        "pointwise": (lambda x: (x.sin() + 1) * 2, (x,)),
        "reduction": (lambda x: torch.softmax(x, dim=-1), (x,)),
        "matmul_epilogue": (lambda x, w: torch.relu(x @ w) * 2 + 1, (x, w)),
    }


@pytest.mark.parametrize("name", ["pointwise", "reduction", "matmul_epilogue"])
def test_golden_cuda_module(name: str, farm: Any) -> None:
    fn, args = graphs()[name]
    out, (code,) = compile_and_get_code(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    manifest = check_shape(code)
    assert any(kind == "triton" for _, kind in defined_kernels(code)) and manifest["kernels"]
    golden = GOLDEN / f"output_module_cuda_{name}.py.txt"
    if REGEN:
        golden.write_text(normalise(code))
    assert normalise(code) == golden.read_text(), f"{golden} differs (torch {torch.__version__}); see the docstring"


def test_compile_time_autotuning_runs_the_same_runtime(farm: Any) -> None:
    """With ``triton.autotune_at_compile_time`` Inductor runs a block that defines the kernels
    again (with their ``key=``) at compile time, and saves it as a docstring at the top of the
    module: that block uses FarmCompile too (with Inductor's own wait, on the block's globals)."""
    fn, args = graphs()["reduction"]
    out, (code,) = compile_and_get_code(fn, *args, options={"triton.autotune_at_compile_time": True})
    torch.testing.assert_close(out, fn(*args))
    assert code.startswith('r"""') and "AsyncCompile()" not in code
    block, module = code[:code.index('"""', 4)], code[code.index('"""', 4) + 3:]
    assert "async_compile = FarmCompile()" in block and ", key='" in block
    check_shape(module)


def llama_step(codes: list[str] | None = None) -> torch.Tensor:
    model, step, ids = tiny_llama()

    loss, step_codes = compile_and_get_code(step, ids)
    torch.cuda.synchronize()
    if codes is not None:
        codes.extend(step_codes)
    return loss.detach()


def test_llama_step_every_kernel_goes_through_the_farms_runtime(local_ray: None) -> None:
    stock, again = llama_step(), llama_step()
    codes: list[str] = []
    raycompile.enable()
    try:
        loss = llama_step(codes)
        cache = raycompile.session.current().hooks.router.cache
        triton_keys = {}
        for code in codes:  # forward and backward modules
            manifest = check_shape(code)
            triton_keys.update({n: manifest["kernels"][n] for n, kind in defined_kernels(code) if kind == "triton"})
        missing = [n for n, key in triton_keys.items() if cache.get(key) is None]
        s = raycompile.stats()
    finally:
        raycompile.disable()
    if torch.equal(stock, again):  # stock is bitwise reproducible here: so must the farm be
        assert torch.equal(loss, stock)
    else:
        torch.testing.assert_close(loss, stock)
    assert len(codes) >= 2 and len(triton_keys) > 10
    assert not missing, f"kernels not in the farm's cache under their manifest key: {missing}"
    assert s["jobs"] > 0 and s["fallbacks"] == 0 and s["failures"] == 0
    print(f"\noutput module: {len(codes)} modules, {len(triton_keys)} Triton kernels, all through FarmCompile, "
          f"all in the cache under their manifest keys; {s['jobs']} Ray jobs")


def kernels_of(module: Any) -> dict[str, Any]:
    return {name: getattr(module, name) for name in module._raycompile_manifest["kernels"]
            if compat.is_caching_autotuner(getattr(module, name, None))}


def test_a_warm_module_launches_known_winners_without_benchmarking(farm: Any) -> None:
    def model(x: torch.Tensor) -> torch.Tensor:  # reductions and 2D tiles: kernels with several configs
        return torch.softmax(x.t().contiguous() * 2, dim=-1).sum(0) + x.mean(1)

    x = torch.randn(4096, 4096, device="cuda")
    options = {"max_autotune_pointwise": True}  # several configs per kernel, benchmarked at the first run
    torch._dynamo.reset()
    with compat.fresh_cache():
        cold = torch.compile(model, options=options)(x)
        (module,) = compat.loaded_output_modules()
        keys = module._raycompile_manifest["kernels"]
        tuned = {keys[n]: compat.config_dict(k.launchers[0].config)
                 for n, k in kernels_of(module).items() if k.autotune_time_taken_ns > 0}
    assert tuned, "no kernel had several configs to benchmark: pick a bigger shape"
    jobs = raycompile.stats()["jobs"]
    remove = runtime.bound().winners.add(tuned.get)  # a store that knows the winners (issue 7 files them)
    try:
        torch._dynamo.reset()
        with compat.fresh_cache():  # a new process's view: only the farm's cache is warm
            warm = torch.compile(model, options=options)(x)
            (module,) = compat.loaded_output_modules()
            manifest = module._raycompile_manifest
            kernels = kernels_of(module)
    finally:
        remove()
    assert raycompile.stats()["jobs"] == jobs  # every kernel came from the cache
    assert torch.equal(cold, warm)
    # the module itself came from the farm's module cache (made before any winner was known); the
    # winners were stitched in when it loaded its kernels
    stitched = {n: k for n, k in kernels.items() if manifest["kernels"][n] in tuned}
    assert stitched
    for name, kernel in stitched.items():
        assert kernel.autotune_time_taken_ns == 0, f"{name} benchmarked its configs again"
        assert compat.config_dict(kernel.launchers[0].config) == tuned[manifest["kernels"][name]]


def test_a_user_defined_triton_kernel_compiles_on_the_farm(farm: Any) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out * 2

    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out, (code,) = compile_and_get_code(fn, x, y)
    torch.testing.assert_close(out, fn(x, y))
    manifest = check_shape(code)
    user = [n for n, kind in defined_kernels(code) if kind == "triton" and n.startswith("add_kernel")]
    labels = [r.label for r in farm.stats.job_records()]
    assert user and manifest["kernels"][user[0]], code
    assert any(label.startswith("add_kernel") for label in labels), labels  # a Ray job compiled it
    if REGEN:  # the definition Inductor writes, for tests/unit/test_output_runtime.py (no GPU there)
        start = code.index(f"{user[0]} = async_compile.triton(") + len(f"{user[0]} = ")
        body = code[start:code.index("\n", code.index("''', device_str=", start))]
        key = manifest["kernels"][user[0]]
        (GOLDEN / "user_kernel_definition_cuda.txt").write_text(body.replace(f", key='{key}'", ""))
