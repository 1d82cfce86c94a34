from __future__ import annotations

import json
import pathlib
import re

import pytest

from raycompile.errors import KernelSourceError, UnknownArchError
from raycompile.kernels import CppJob, CppStep, Failed, Versions, run_job
from raycompile.wrapper.compat import TOOLCHAIN, parse_arch, retarget, target_of
from raycompile.wrapper.job_keys import triton_job
from raycompile.wrapper.kernel_sources import find_kernels, read_kernel, scan

V = Versions(torch="2.13.0", triton="3.9.0")


def test_triton_job_key_changes_with_each_input(corpus_files: list[pathlib.Path]) -> None:
    src = corpus_files[0].read_text()
    config = {"use_static_triton_launcher": True}
    base = triton_job("k", src, {}, config, V)
    keys = {base.key}
    for args in ((src.replace("@triton.jit", "@triton.jit\n# edited", 1), {}, config, V),
                 (retarget(src, 80), {}, config, V),
                 (src, {}, config, Versions("2.11.0", "3.9.0")),
                 (src, {}, config, Versions("2.13.0", "3.6.0")),
                 (src, {}, {}, V)):
        keys.add(triton_job("k", *args).key)
    assert len(keys) == 6
    # neither where the driver's Triton cache is, nor which GPU index the source records, changes it
    assert triton_job("k", src, {"TRITON_CACHE_DIR": "/elsewhere"}, config, V).key == base.key
    assert triton_job("k", src.replace("index=0,", "index=3,", 1), {}, config, V).key == base.key


def test_corpus_is_found_and_read(corpus: pathlib.Path) -> None:
    kernels = find_kernels([str(corpus)])
    manifest = json.loads((corpus.parent / "MANIFEST.json").read_text())
    assert len(kernels) == manifest["kernels"] == 70
    assert all(k.name.startswith("triton_") for k in kernels)
    assert {target_of(k.source) for k in kernels} == {("cuda", 90, 32)}


def test_not_a_kernel(tmp_path: pathlib.Path) -> None:
    (tmp_path / "wrapper.py").write_text("def call(args):\n    return args\n")
    with pytest.raises(KernelSourceError, match="not an Inductor Triton kernel"):
        read_kernel(str(tmp_path / "wrapper.py"))
    assert find_kernels([str(tmp_path)]) == []  # walking a dir skips non-kernels
    with pytest.raises(KernelSourceError, match="no such file"):
        find_kernels([str(tmp_path / "missing.py")])


GOLDEN = pathlib.Path(__file__).parents[1] / "fixtures" / "golden"


def test_output_modules_are_told_from_kernels(inductor_cache: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A real Inductor cache dir: its output modules hold every kernel's source inline (so they look
    like kernels by their text) but are skipped, by name; only the kernel modules are found."""
    manifest = json.loads((inductor_cache.parent / "MANIFEST.json").read_text())
    found = scan([str(inductor_cache)])
    assert len(found.kernels) == manifest["kernels"] == 7 and not found.others
    assert len(found.output_modules) == manifest["output_modules"] == 2
    for module in found.output_modules:  # stock's wait: async_compile.wait(globals())
        assert "async_compile.wait(globals())" in pathlib.Path(module).read_text()
        with pytest.raises(KernelSourceError, match="an Inductor output module"):
            read_kernel(module)
    assert found.skipped().startswith("skipped 2 Inductor output modules")
    # raycompile's own output modules (wait_named), named directly: skipped too, never an error
    ours = tmp_path / "ours.py"
    kernel = found.kernels[0].source
    ours.write_text((GOLDEN / "output_module_cuda_pointwise.py.txt").read_text().replace("<kernel source>", kernel))
    named = scan([str(ours), found.kernels[0].path])
    assert named.output_modules == [str(ours)] and [k.name for k in named.kernels] == [found.kernels[0].name]


@pytest.mark.parametrize("arch,cc", [("sm_90", 90), ("sm80", 80), ("90a", 90), ("SM_86", 86)])
def test_parse_arch(arch: str, cc: int) -> None:
    assert parse_arch(arch) == cc


@pytest.mark.parametrize("arch", ["sm_42", "foo", "", "sm_9", "gfx90a"])
def test_unknown_arch(arch: str) -> None:
    with pytest.raises(UnknownArchError, match="sm_90"):
        parse_arch(arch)


def test_retarget(corpus_files: list[pathlib.Path]) -> None:
    src = corpus_files[0].read_text()
    out = retarget(src, 80)
    assert target_of(out) == ("cuda", 80, 32)
    assert re.search(r"cc=80, major=8", out) and out.replace("cc=80, major=8", "cc=90, major=9") == src


def test_worker_refuses_job_from_another_version() -> None:
    job = CppJob("x.so", (CppStep(["true"], "/nonexistent/x.so", "/tmp/b"),), {}, Versions("1.0.0", "0.0.1"), key="k")
    result = run_job(job, TOOLCHAIN)
    assert isinstance(result, Failed) and result.kind == "version"
    here = Versions.here()
    assert "1.0.0" in result.message and here.torch in result.message and here.triton in result.message


def test_installed_versions_are_read_without_importing_torch(tmp_path: pathlib.Path) -> None:
    """The first-contact probe's versions come from package metadata (no ``import torch`` on a
    fresh worker) and agree with the imported modules' here; an install whose metadata says
    another triton is seen as one."""
    import os
    import subprocess
    import sys

    code = ("import sys; from raycompile.kernels.jobs import Versions; v = Versions.installed(); "
            "print(v.torch, v.triton, 'torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    torch_v, triton_v, imported_torch, imported_triton = out.stdout.split()
    assert (imported_torch, imported_triton) == ("False", "False")
    assert Versions(torch_v, triton_v) == Versions.installed()
    # the imported module may add a local label the metadata lacks (PyPI's 2.15.0 wheel says
    # 2.15.0+cu132 when imported): the same release either way
    here = Versions.here()
    assert (here.torch.split("+")[0], here.triton.split("+")[0]) == (torch_v.split("+")[0], triton_v.split("+")[0])
    info = tmp_path / "triton-0.0.1+other.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 0.0.1+other\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                           env=env)
    assert other.stdout.split()[:2] == [torch_v, "0.0.1+other"]
