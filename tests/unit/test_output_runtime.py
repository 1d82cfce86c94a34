"""The output module's pieces that need no compile: the cache key each kernel definition gets
(wrapper/codegen.py) and the autotune winner stitched into a loaded kernel (wrapper/runtime.py).
Kernel sources are real: Inductor kernels captured on an H200 (tests/fixtures/corpus_torch211)."""

from __future__ import annotations

import ast
import pathlib
import types
from collections.abc import Iterator
from typing import Any

import pytest

from raycompile.cache.keys import kernel_key
from raycompile.kernels import Versions
from raycompile.wrapper import compat, runtime
from raycompile.wrapper.codegen import definition_key, with_key
from raycompile.wrapper.compat import compile_only_driver, target_of
from raycompile.wrapper.kernel_sources import read_kernel

pytest.importorskip("triton")

GOLDEN = pathlib.Path(__file__).parents[1] / "fixtures" / "golden"


def inductor_definition(name: str, source: str) -> str:
    """A kernel definition as TritonScheduling writes it into the output module."""
    return f"async_compile.triton({name!r}, '''\n{source.strip()}\n''', device_str='cuda')"


def test_a_triton_definition_is_keyed_as_the_farm_files_the_kernel(corpus_files: list[pathlib.Path]) -> None:
    src = read_kernel(str(corpus_files[0]))
    body = inductor_definition(src.name, src.source)
    key = definition_key(src.name, body)
    source = ast.literal_eval(ast.parse(body, mode="eval").body.args[1])
    # the identity cache/keys.py defines, its inputs read off the source here, independently: the
    # module text without its device index, the versions, ptxas, the target it records, and what
    # AsyncCompile.triton sends with the job (2.13: the static-launcher flag)
    import re

    props = re.search(r"DeviceProperties\(type='(\w+)', index=\d+, (.*?)\)", source)
    cc, warp = re.search(r"\bcc=(\d+)", props.group(2)).group(1), re.search(r"warp_size=(\d+)", props.group(2)).group(1)
    v = Versions.here()
    expected = kernel_key("triton", [re.sub(r"(DeviceProperties\(type='\w+', )index=\d+, ", r"\1", source)], v.torch,
                          v.triton, compat.ptxas_version(), f"{props.group(1)}:{cc}:{warp}",
                          {"use_static_triton_launcher": compat.inductor_config().use_static_triton_launcher})
    assert key == expected
    # rank 1's module names the kernel by the same key (the device index is not part of it)
    assert definition_key(src.name, body.replace("index=0,", "index=1,", 1)) == key
    call = ast.parse(with_key(body, key), mode="eval").body
    assert [k.arg for k in call.keywords] == ["device_str", "key"] and call.keywords[1].value.value == key
    assert definition_key(src.name, with_key(body, key)) is None  # never keyed twice


def test_a_user_defined_triton_kernel_definition_is_keyed_too() -> None:
    """The body Inductor's ``define_user_defined_triton_kernel`` wrote for a user @triton.jit
    kernel (captured on the GPU machine: Inductor cannot generate it without a GPU)."""
    body = (GOLDEN / "user_kernel_definition_cuda.txt").read_text()
    key = definition_key("add_kernel_0", body)
    assert key is not None and "key=" in with_key(body, key)


def test_a_cpp_definition_key_follows_its_source() -> None:
    body = "async_compile.cpp_pybinding(['float*'], r'''\nextern \"C\" void kernel(float* p) { p[0] = 1; }\n''')"
    key = definition_key("cpp_fused_0", body)
    assert key and key != definition_key("cpp_fused_0", body.replace("= 1", "= 2"))
    assert key != definition_key("cpp_fused_0", body.replace("'float*'", "'double*'"))


@pytest.mark.parametrize("body", ["async_compile.multi_kernel('k', [a, b])", "something_else('x', '''y''')",
                                  "async_compile.triton(name, src)", "not python ((("])
def test_other_definitions_get_no_key(body: str) -> None:
    assert definition_key("k", body) is None


@pytest.fixture
def autotuner(corpus_files: list[pathlib.Path]) -> Iterator[Any]:
    """A real CachingAutotuner with several configs, loaded from a captured kernel, with one
    stand-in launcher per config: real launchers load cubins onto a GPU, which CI lacks."""
    from torch._inductor.codecache import _load_triton_kernel_from_source

    with compat.fresh_cache():
        for path in corpus_files:
            src = read_kernel(str(path))
            with compile_only_driver(*target_of(src.source)):
                kernel = _load_triton_kernel_from_source(src.name, src.source)
            if len(kernel.configs) > 2:
                kernel.launchers = [types.SimpleNamespace(config=c) for c in kernel.configs]
                yield kernel
                return
    pytest.fail("no captured kernel with several configs")


def test_a_known_winner_leaves_one_launcher(autotuner: Any) -> None:
    winner = compat.config_dict(autotuner.configs[1])
    assert runtime.stitch("k", autotuner, None, winner) == winner
    assert [launcher.config for launcher in autotuner.launchers] == [autotuner.configs[1]]


def test_the_farms_winner_comes_first_then_the_manifests_then_inductors(autotuner: Any) -> None:
    configs = autotuner.configs
    launchers = list(autotuner.launchers)
    assert runtime.stitch("k", autotuner, "key", None) is None and len(autotuner.launchers) == len(configs)

    autotuner.save_cache_hook(configs[2], 1000)  # Inductor benchmarked it: its .best_config file
    assert compat.inductor_best_config(autotuner) == compat.config_dict(configs[2])
    assert runtime.stitch("k", autotuner, "key", compat.config_dict(configs[1])) == compat.config_dict(configs[1])

    autotuner.launchers = list(launchers)
    binding = runtime.Binding()
    unbind = runtime.bind(binding)
    remove = binding.winners.add(lambda key: compat.config_dict(configs[0]) if key == "key" else None)
    try:
        assert runtime.stitch("k", autotuner, "key", compat.config_dict(configs[1])) == compat.config_dict(configs[0])
        autotuner.launchers = list(launchers)
        assert runtime.stitch("k", autotuner, "other", None) == compat.config_dict(configs[2])
        remove()
        assert runtime.winner_for("key") is None  # removed from the bound session's registry
    finally:
        unbind()
    assert runtime.bound() is None


def test_a_winner_that_matches_no_compiled_config_changes_nothing(autotuner: Any) -> None:
    n = len(autotuner.launchers)
    assert runtime.stitch("k", autotuner, None, {"XBLOCK": 3, "num_warps": 1, "num_stages": 9}) is None
    assert len(autotuner.launchers) == n


def test_a_broken_winner_store_is_skipped() -> None:
    def broken(key: str) -> dict[str, Any]:
        raise OSError("store unreachable")

    winners = runtime.Winners()
    winners.add(broken)
    winners.add(lambda key: {"XBLOCK": 8} if key == "key" else None)
    assert winners.winner_for("key") == {"XBLOCK": 8}  # the broken store is skipped, the next one answers
    assert winners.winner_for("other") is None


@pytest.mark.parametrize("setting", ["1", "0", "unbound"])
def test_a_long_wait_shows_a_bar_only_where_progress_is_wanted(setting: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The bar follows the bound session's ``progress`` setting, as the session binds it; a module
    loaded with no session bound shows none."""
    import threading
    from concurrent.futures import Future

    from raycompile.observe.progress import wanted as progress_wanted

    value = None if setting == "unbound" else setting == "1"
    unbind = (runtime.bind(runtime.Binding(None, value, lambda: progress_wanted(value)))
              if setting != "unbound" else (lambda: None))
    futures: dict[str, Future[Any]] = {f"k{i}": Future() for i in range(runtime.MANY)}

    def finish() -> None:
        for i, f in enumerate(futures.values()):
            f.set_result(i)

    threading.Timer(0.3, finish).start()
    try:
        assert runtime.FarmCompile().wait_named({"kernels": {}}, futures) == tuple(range(runtime.MANY))
    finally:
        unbind()
    shown = "raycompile: waiting for kernels" in capsys.readouterr().out
    assert shown == (setting == "1")
