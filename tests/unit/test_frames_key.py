"""The key of a compiled function's frames (``wrapper/frames.py``): what torch's own id (qualname
and line) leaves out must change it, and what names only this machine or process must not. Keys are
taken from real ``torch.compile`` calls, through the seam that serves them (``compat.frames_stored``)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch

from raycompile.cache.keys import OUTPUT_MODULE_TAG as CACHE_KEY_TAG
from raycompile.cache.keys import frames_key
from raycompile.observe.stats import Stats
from raycompile.wrapper import compat
from raycompile.wrapper.frames import FrameCache


class Net(torch.nn.Module):
    def __init__(self, act: Any = torch.nn.functional.relu, width: int = 16) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, width)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(x))


class Recorder:
    """A frame store that only records the key each load would use (and loads nothing)."""

    def __init__(self) -> None:
        self.frames = FrameCache(None, Stats(), lambda: None, CACHE_KEY_TAG)  # type: ignore[arg-type]
        self.keys: list[str | None] = []

    def load(self, fn: Any, options: dict[str, Any] | None, package: Any = None) -> None:
        self.keys.append(None if options is None else frames_key(self.frames.identity(fn, options)))

    def saves(self, options: dict[str, Any]) -> bool:
        return True

    def serve(self, package: Any, code: Any, f_locals: Any) -> None:
        return None

    def traced(self, source_id: str) -> None: ...

    def write(self, entry: Any, source_id: str) -> None: ...

    def unbuilt(self, why: str) -> None: ...


def key_of(target: Any, **options: Any) -> str:
    recorder = Recorder()
    with compat.frames_stored(recorder):
        torch.compile(target, **options)
    assert len(recorder.keys) == 1 and recorder.keys[0] is not None
    return recorder.keys[0]


def test_the_same_model_and_options_give_the_same_key() -> None:
    assert key_of(Net()) == key_of(Net())


def test_the_key_names_the_function_not_the_model_its_guards_tell_models_apart() -> None:
    """Every guard travels with the entry now (wrapper/compat/guards.py), identity guards included:
    the model's activation, shapes, dtypes and devices are told apart by them, as in stock, not by
    the key. So one key (and its generations) serves a function whatever it is called with, on any
    device index (tensor guards carry the device; the key holds no device)."""
    base = key_of(Net())
    assert key_of(Net(act=torch.nn.functional.gelu)) == base
    assert key_of(Net(width=24)) == base
    assert key_of(Net().double()) == base
    assert key_of(Net().to("meta")) == base


def test_compile_options_change_the_key() -> None:
    base = key_of(Net())
    keys = {key_of(Net(), mode="max-autotune-no-cudagraphs"), key_of(Net(), dynamic=True),
            key_of(Net(), fullgraph=True), key_of(Net(), backend="eager"),
            key_of(Net(), options={"epilogue_fusion": False})}
    assert base not in keys and len(keys) == 5


def test_loads_outside_torch_compile_are_unkeyed() -> None:
    recorder = Recorder()
    with compat.frames_stored(recorder):
        from torch._dynamo.package import DynamoCache  # noqa: PLC0415 - the seam itself, as Dynamo calls it

        DynamoCache.load(Net().forward)
    assert recorder.keys == [None]


PROBE = """
import json, sys, torch
sys.path.insert(0, {here!r})
from test_frames_key import Net, key_of
print(json.dumps(key_of(Net())))
"""


def test_the_key_is_the_same_in_another_process_with_other_dirs_and_threads(tmp_path: pathlib.Path) -> None:
    """Hash seeds (set order), cache dirs and thread counts differ between nodes; keys must not."""
    here = str(pathlib.Path(__file__).parent)
    keys = set()
    for i, (seed, threads) in enumerate((("1", "1"), ("2", "2"))):
        env = {**os.environ, "PYTHONHASHSEED": seed, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / str(i)),
               "TORCHINDUCTOR_COMPILE_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", PROBE.format(here=here)], env=env, capture_output=True, text=True,
                             timeout=300, check=True)
        keys.add(json.loads(out.stdout.strip().splitlines()[-1]))
    assert len(keys) == 1


def test_frames_stored_restores_torch_exactly() -> None:
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    from torch._dynamo import package

    before = (type(package.DynamoCache), dconfig.caching_precompile, fconfig.bundled_autograd_cache,
              fconfig.force_non_lazy_backward_lowering, list(warnings.filters),
              torch._TorchCompileInductorWrapper.__dict__["get_compiler_config"])
    with compat.frames_stored(Recorder()):
        assert type(package.DynamoCache) is not before[0] and dconfig.caching_precompile
        assert torch._TorchCompileInductorWrapper.__dict__["get_compiler_config"] is not before[5]
    after = (type(package.DynamoCache), dconfig.caching_precompile, fconfig.bundled_autograd_cache,
             fconfig.force_non_lazy_backward_lowering, list(warnings.filters),
             torch._TorchCompileInductorWrapper.__dict__["get_compiler_config"])
    assert after == before


def test_inductor_is_patched_at_the_first_trace_and_restored() -> None:
    """``fx_cache_kept`` wraps Inductor's ``_compile_fx_inner`` only once Dynamo traces a frame (a
    process that only loads frames never imports compile_fx for it), and the wrap goes at exit."""
    import torch._inductor.compile_fx as compile_fx

    stock = compile_fx._compile_fx_inner
    with compat.frames_stored(Recorder()):
        assert compile_fx._compile_fx_inner is stock  # nothing traced yet
        torch.compile(lambda x: x * 3 + 1)(torch.randn(4))
        assert getattr(compile_fx._compile_fx_inner, "__wrapped__", None) is stock
    assert compile_fx._compile_fx_inner is stock


def test_entering_compiled_frames_does_not_import_inductor() -> None:
    """A warm process that only loads frames never imports compile_fx (a second of its first call);
    Inductor's backend, when called, patches it then."""
    code = ("import sys, torch\n"
            "from raycompile.wrapper import compat\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from test_frames_key import Recorder\n"
            "with compat.frames_stored(Recorder()):\n"
            "    print('torch._inductor.compile_fx' in sys.modules)\n"
            "    compat.inductor_compiling()  # the session's gate, as Inductor's backend is called\n"
            "    import torch._inductor.compile_fx as fx\n"
            "    stock = getattr(fx._compile_fx_inner, '__wrapped__', None)\n"
            "    print(stock is not None)\n"
            "print(fx._compile_fx_inner is stock)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(pathlib.Path(__file__).parent)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "True", "True"], proc.stdout


def _printed(code: str) -> list[str]:
    """The lines ``code`` prints in a new interpreter (which must exit 0)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_a_light_load_gives_the_real_modules_to_every_other_use() -> None:
    """``light_loads``: while an entry installs, the graph module's stand-in (with the real spec)
    gives anyone but the cache hit's post-compile the real module; ``torch._inductor.debug`` looked
    up by anyone but a compiled graph's call is the real module, imported then; on exit the package
    is as it was. (The two readers themselves: test_frames.py's warm process imports neither
    module, and calls its loaded graphs after ``disable()`` too.)"""
    code = ("import sys, torch\n"
            "import torch._inductor.codecache\n"
            "from raycompile.wrapper.compat import light as precompile\n"
            "G, D = 'torch._inductor.graph', 'torch._inductor.debug'\n"
            "print(G in sys.modules, D in sys.modules)\n"
            "with precompile.light_loads():\n"
            "    print(D in sys.modules)\n"
            "    from torch._inductor import debug\n"
            "    print(type(debug).__name__, debug.__name__, debug is sys.modules[D], G in sys.modules)\n"
            "    with precompile._graph_module_deferred():\n"
            "        print(type(sys.modules[G]).__name__, sys.modules[G].__spec__.name)\n"
            "        from torch._inductor.graph import GraphLowering\n"
            "        print(GraphLowering.__module__, hasattr(GraphLowering, 'run'), type(sys.modules[G]).__name__)\n"
            "print('__getattr__' in vars(torch._inductor), torch._inductor.graph is sys.modules[G])\n")
    assert _printed(code) == [
        "False False",  # neither imported by torch or the codecache
        "False",
        "module torch._inductor.debug True False",  # not a graph's call: the real module
        "_GraphModuleDeferred torch._inductor.graph",
        "torch._inductor.graph True module",  # any other use: the real class, the real module in place
        "False True",
    ]


def test_a_compiled_graphs_call_reads_the_debug_switches_without_the_module() -> None:
    """A compiled graph's call (``CompiledFxGraph.__call__``, run here on a stand-in graph) reads
    ``torch._inductor.debug``'s recording switches at every call: inside ``light_loads`` it runs
    without the module (not imported after), and while another thread is importing the module
    (in ``sys.modules``, still initialising, not yet the package's attribute) it reads the values
    set there, where stock's lookup would raise ``AttributeError``."""
    code = ("import sys, types, importlib.machinery, torch\n"
            "import torch._inductor.codecache\n"
            "from torch._inductor.output_code import CompiledFxGraph\n"
            "from raycompile.wrapper.compat import light as precompile\n"
            "D = 'torch._inductor.debug'\n"
            "graph = types.SimpleNamespace(current_callable=lambda inputs: ('ran', inputs), _compile_context=None,\n"
            "                              fx_kwargs={}, _fx_graph_cache_key='k')\n"
            "with precompile.light_loads():\n"
            "    print(CompiledFxGraph.__call__(graph, [1]), D in sys.modules)\n"
            "    importing = types.ModuleType(D)\n"
            "    importing.__spec__ = importlib.machinery.ModuleSpec(D, None)\n"
            "    importing.__spec__._initializing = True\n"
            "    importing.RECORD_GRAPH_EXECUTION, importing.GRAPH_EXECUTION_ORDER = True, []\n"
            "    sys.modules[D] = importing\n"
            "    print(CompiledFxGraph.__call__(graph, [2]), importing.GRAPH_EXECUTION_ORDER)\n"
            "    del sys.modules[D]\n"
            "print(D in sys.modules)\n")
    assert _printed(code) == [
        "('ran', [1]) False",
        "('ran', [2]) [{'compile_id': None}]",
        "False",  # no entry installed: the session's end imports nothing
    ]


def test_a_cache_hits_autotune_meta_lacks_tritons_hash_only_where_nothing_reads_it() -> None:
    """A cache hit's post-compile asks ``inductor_meta_from_config`` for the bundled remote
    autotune cache's meta, which hashes Triton's sources and library (0.29 s of a warm start on an
    H200). From a session's first install (``light_loads``) to its end, that caller's meta has no hash where the
    bundled cache is off, and the hash as stock's where it is on; any other caller gets stock's
    meta; on exit the module is as it was. This box has no GPU (Triton is not usable here), so
    ``has_triton`` and the hash are stand-ins that count calls, and the cache hit's code object is
    a stand-in function's; that stock's post-compile is the caller is checked against its source."""
    code = ("import inspect, torch\n"
            "import torch._inductor.codecache as codecache\n"
            "from torch._inductor import config\n"
            "from torch._inductor.runtime import autotune_cache\n"
            "from raycompile.wrapper.compat import light\n"
            "print('autotune_cache.inductor_meta_from_config()' in inspect.getsource("
            "codecache.FxGraphCache.cache_hit_post_compile))\n"
            "hashed = []\n"
            "torch.utils._triton.triton_hash_with_backend = lambda: hashed.append(1) or 'HASH'\n"
            "stock_meta, autotune_cache.has_triton = autotune_cache.inductor_meta_from_config, lambda: True\n"
            "def cache_hit():\n"
            "    return autotune_cache.inductor_meta_from_config()['backend_hash']\n"
            "light._cache_hit_code = lambda: cache_hit.__code__\n"
            "with light._cache_hit_meta_without_triton_hash():\n"
            "    print(cache_hit(), len(hashed))\n"
            "    print(autotune_cache.inductor_meta_from_config()['backend_hash'], len(hashed))\n"
            "    with config.patch(bundled_autotune_remote_cache=True):\n"
            "        print(cache_hit(), len(hashed))\n"
            "stand_in = autotune_cache.has_triton\n"
            "print(autotune_cache.inductor_meta_from_config is stock_meta, autotune_cache.has_triton is stand_in,\n"
            "      cache_hit(), len(hashed))\n"
            "from torch._dynamo.package import CompilePackage\n"
            "CompilePackage.install = lambda self: print('installed', cache_hit(), len(hashed))\n"
            "with light.light_loads():\n"
            "    print(autotune_cache.inductor_meta_from_config is stock_meta)\n"
            "    CompilePackage.install(None)\n"
            "    late = CompilePackage.install\n"
            "print(autotune_cache.inductor_meta_from_config is stock_meta, autotune_cache.has_triton is stand_in)\n"
            "late(None)\n"
            "print(autotune_cache.inductor_meta_from_config is stock_meta, autotune_cache.has_triton is stand_in)\n")
    assert _printed(code) == [
        "True",
        "None 0",  # the cache hit, bundled cache off: no hash
        "HASH 1",  # any other caller: stock's
        "HASH 2",  # the bundled cache on: hashed as stock
        "True True HASH 3",  # restored
        "True",  # light_loads: nothing patched before an entry installs
        "installed None 3",  # the first install: a cache hit's meta lacks the hash
        "True True",  # restored at the session's end
        "installed HASH 4",  # an install after the end (a thread holding the wrapper) patches nothing
        "True True",
    ]


def test_torch_compile_keys_its_options_without_importing_inductor() -> None:
    """``torch.compile`` asks Inductor's backend for its compiler config at once (Dynamo keeps it;
    the frames' key reads it), and stock's method imports compile_fx for it: a second of a warm
    process that only loads frames. Inside ``frames_stored`` the same dict comes without that
    import, for every mode and for options; compile_fx comes when a graph is compiled."""
    code = ("import json, sys, torch\n"
            "from raycompile.wrapper import compat\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from test_frames_key import Recorder\n"
            "cases = [(None, None), ('max-autotune', None), ('reduce-overhead', None),\n"
            "         ('max-autotune-no-cudagraphs', None), (None, {'epilogue_fusion': False, 'max_autotune': True})]\n"
            "got = []\n"
            "with compat.frames_stored(Recorder()):\n"
            "    for mode, options in cases:\n"
            "        fn = torch.compile(lambda x: x + 1, mode=mode, options=options)\n"
            "        got.append(fn.get_compiler_config())\n"
            "    print('torch._inductor.compile_fx' in sys.modules)\n"
            "    print(hasattr(torch.ops.quantized_decomposed, 'quantize_per_token'))\n"
            "    torch.compile(lambda x: x * 2)(torch.randn(3))\n"
            "    print('torch._inductor.compile_fx' in sys.modules)\n"
            "stock = [torch.compile(lambda x: x + 1, mode=m, options=o).get_compiler_config() for m, o in cases]\n"
            "print(json.dumps([sorted(k for k in set(a) | set(b) if a.get(k, 'unset') != b.get(k, 'unset'))\n"
            "                  for a, b in zip(got, stock)]))\n"
            "print(stock[1]['max_autotune'], stock[0]['max_autotune'])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(pathlib.Path(__file__).parent)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.split("\n")
    # no compile_fx, but the operators stock's import of it registers (a function may call them)
    assert lines[:3] == ["False", "True", "True"], proc.stdout
    assert json.loads(lines[3]) == [[]] * 5, proc.stdout  # every mode's and the options' dict: stock's
    assert lines[4] == "True False", proc.stdout  # and the modes did patch it


@pytest.mark.parametrize("value, env, on", [(None, None, True), (None, "0", False), (False, None, False),
                                            (True, "0", True)])
def test_compiled_frames_are_on_unless_turned_off(value: Any, env: Any, on: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from raycompile.settings import Settings

    monkeypatch.delenv("TORCH_CACHING_PRECOMPILE", raising=False)
    if env is None:
        monkeypatch.delenv("RAYCOMPILE_DYNAMO_CACHE", raising=False)
    else:
        monkeypatch.setenv("RAYCOMPILE_DYNAMO_CACHE", env)
    assert Settings.resolve(dynamo_cache=value).dynamo_cache_on is on


def _local_class() -> type:
    class Local:  # defined in a function: torch cannot pickle a guard on it
        scale = 2.0

    return Local


def test_a_frame_whose_guards_torch_cannot_save_still_compiles() -> None:
    """Stock caching_precompile fails the whole compile here (TypeError, or an assertion after a
    CLASS_MATCH guard); raycompile leaves the frame out of the entry and counts it."""
    local = _local_class()()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * local.scale if type(local).__name__ == "Local" else x

    class Store(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.unsaved: list[str] = []

        def unsaveable(self, source_id: str, why: str) -> None:
            self.unsaved.append(why)

    store = Store()
    torch._dynamo.reset()
    with compat.frames_stored(store):
        out = torch.compile(f, backend="eager")(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 2.0))
    assert len(store.unsaved) == 1 and "local scope" in store.unsaved[0]


def test_guard_sources_pickle_whole_where_torch_2_11_would_not() -> None:
    """torch 2.11 pickles a guard source as its class called with all its fields, also those its
    constructor does not take: a frame reading a function's defaults (Mixtral's, on the GPU
    machine) then never unpickles, so it could be neither written nor loaded. This torch (2.13)
    pickles it right; its reducer is swapped here for 2.11's (a stand-in for that torch, named as
    such), and inside ``frames_stored`` the guard pickles and unpickles; outside, torch's is back."""
    import dataclasses
    import pickle

    from torch._dynamo.source import DefaultsSource, LocalSource

    def reduce_like_torch_2_11(self: Any) -> tuple[Any, tuple[Any, ...]]:
        return type(self), tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    reduce_like_torch_2_11.__module__ = "torch._guards"
    ours = DefaultsSource.__dict__["__reduce__"]
    source = DefaultsSource(LocalSource("fn"), 1)
    try:  # this torch's own: right from 2.13 on; on the GPU machine's 2.11 it is the bug itself
        own_pickles = pickle.loads(pickle.dumps(source)) == source
    except TypeError:
        own_pickles = False
    assert own_pickles or torch.__version__.startswith("2.11."), torch.__version__
    DefaultsSource.__reduce__ = reduce_like_torch_2_11
    try:
        with pytest.raises(TypeError, match="positional arguments"):
            pickle.loads(pickle.dumps(source))
        with compat.frames_stored(Recorder()):
            again = pickle.loads(pickle.dumps(source))
        assert again == source and again.name == source.name
        assert DefaultsSource.__dict__["__reduce__"] is reduce_like_torch_2_11
    finally:
        DefaultsSource.__reduce__ = ours
