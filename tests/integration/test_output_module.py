"""The output module the farm's wrapper codegen writes (wrapper/codegen.py), compiled for real on
CPU through a real local Ray: its text (goldens), that it runs as Inductor's modules do, and that
turning the farm on and off leaves no trace.

Goldens live in tests/fixtures/golden/output_module_cpu_<name>.py.txt, normalised: cache keys,
versions, AOT ids, paths and kernel sources (their C++ depends on this CPU's vector width) are
replaced by placeholders. After a deliberate change to the module's shape, regenerate them with

    RAYCOMPILE_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/integration/test_output_module.py

and review the diff. The Triton (cuda) shape is checked on the GPU machine
(tests/gpu/test_output_module_gpu.py): Inductor cannot generate Triton code without a GPU.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
from outputmodule import check_shape, compile_and_get_code, normalise

import raycompile
from raycompile.wrapper import compat
from raycompile.wrapper.codegen import FarmWrapperCodegen

GOLDEN = pathlib.Path(__file__).parents[1] / "fixtures" / "golden"
REGEN = os.environ.get("RAYCOMPILE_REGEN_GOLDEN") == "1"


def pointwise(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() + 1) * 2


def reduction(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def matmul_epilogue(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) * 2 + 1


GRAPHS: dict[str, tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...]]] = {
    "pointwise": (pointwise, (torch.randn(16, 32),)),
    "reduction": (reduction, (torch.randn(16, 32),)),
    "matmul_epilogue": (matmul_epilogue, (torch.randn(16, 32), torch.randn(32, 8))),
}


# pointwise: extended (docs/testing.md); matmul_epilogue's module has a pointwise epilogue kernel
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.extended) if n == "pointwise" else n
                                  for n in GRAPHS])
def test_golden_cpu_module(name: str, farm_on: None) -> None:
    fn, args = GRAPHS[name]
    out, codes = compile_and_get_code(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    (code,) = codes
    manifest = check_shape(code)
    assert manifest["kernels"] and manifest["versions"]["torch"] == torch.__version__
    golden = GOLDEN / f"output_module_cpu_{name}.py.txt"
    if REGEN:
        golden.write_text(normalise(code))
    assert normalise(code) == golden.read_text(), f"{golden} differs; see the module docstring to regenerate"


@pytest.mark.slow  # the module run by a fresh Python process
def test_the_module_runs_as_a_script_with_the_farm_off(local_ray: None, tmp_path: pathlib.Path) -> None:
    """Inductor's output modules are runnable benchmarks (``python module.py``); a farm-made one
    too, in a process where the farm is not enabled (FarmCompile is then plain AsyncCompile)."""
    fn, args = GRAPHS["matmul_epilogue"]
    raycompile.enable()
    try:
        torch._dynamo.reset()
        with compat.fresh_cache():
            torch.compile(fn)(*args)
            (module,) = compat.loaded_output_modules()
            script = tmp_path / "output_module.py"
            shutil.copy(module.__file__, script)
    finally:
        raycompile.disable()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.fullmatch(r"\d+\.\d+\n", proc.stdout), proc.stdout  # compiled_module_main: the time in ms


def test_on_off_on_gives_equal_outputs_and_restores_stock(local_ray: None) -> None:
    stock_cls = compat.wrapper_codegen_for("cpu")
    tag = torch.compiler.config.cache_key_tag
    fn, args = GRAPHS["reduction"]
    outs = []
    for on in (True, False, True):
        if on:
            # compiled frames off: the third round must compile again (not load the first's frames)
            raycompile.enable(dynamo_cache=False)
            raycompile.ready()  # the hooks are installed at the first compile, or by ready()
            assert compat.wrapper_codegen_for("cpu") is FarmWrapperCodegen
            assert compat.wrapper_codegen_for("cuda") is FarmWrapperCodegen
            assert torch.compiler.config.cache_key_tag != tag
        try:
            out, (code,) = compile_and_get_code(fn, *args)
        finally:
            if on:
                raycompile.disable()
        outs.append(out)
        assert ("FarmCompile()" in code) == on and ("AsyncCompile()" in code) != on
        assert compat.wrapper_codegen_for("cpu") is stock_cls and compat.wrapper_codegen_for("cuda") is stock_cls
        assert torch.compiler.config.cache_key_tag == tag
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


def test_dynamic_shapes(farm_on: None) -> None:
    fn = GRAPHS["reduction"][0]
    x = torch.randn(8, 32)
    torch._dynamo.reset()
    with compat.fresh_cache():
        from torch._inductor.utils import run_and_get_code

        f = torch.compile(fn, dynamic=True)
        outs, codes = run_and_get_code(lambda: [f(x[:n]) for n in (3, 5, 8)])
    for n, out in zip((3, 5, 8), outs):
        torch.testing.assert_close(out, fn(x[:n]))
    (code,) = codes  # one module serves every size
    assert check_shape(code)["kernels"] and re.search(r"\bs\d+\b", code)  # sizes are symbols


@pytest.mark.parametrize("fn", [lambda x, w: x.view(-1), lambda x, w: x @ w], ids=["view", "extern_mm_only"])
def test_a_module_with_no_kernels(fn: Callable[..., torch.Tensor], farm_on: None) -> None:
    args = (torch.randn(4, 4), torch.randn(4, 4))
    out, codes = compile_and_get_code(fn, *args)
    torch.testing.assert_close(out, fn(*args))
    assert codes
    for code in codes:
        assert check_shape(code)["kernels"] == {}
        assert "async_compile.wait_named(_raycompile_manifest, {})" in code


def test_subgraph_kernels_join_the_modules_wait(farm_on: None) -> None:
    """torch.cond's branches are subgraphs with their own wrappers; their kernels are module
    globals too, so they are keyed, listed in the manifest and bound by the one wait."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: (x.sin() + 1) * 2, lambda x: x.cos() - 1, (x,))

    x = torch.randn(8, 8)
    out, (code,) = compile_and_get_code(fn, x)
    torch.testing.assert_close(out, fn(x))
    kernels = check_shape(code)["kernels"]
    assert len(kernels) == 3 and "def true_graph_0(args)" in code and "def false_graph_0(args)" in code
