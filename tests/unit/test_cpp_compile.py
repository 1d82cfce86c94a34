from __future__ import annotations

import ctypes
import pathlib
import shutil

import pytest

from raycompile.kernels import Built, CppJob, CppStep, Failed, Versions, run_job
from raycompile.kernels.cpp_compile import native_march_flags, resolve_command
from raycompile.wrapper.compat import TOOLCHAIN

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")


def test_march_native_is_expanded_for_this_machine() -> None:
    flags = native_march_flags(CXX)
    assert flags[0].startswith("-march=") and flags[0] != "-march=native"
    argv = resolve_command(f"{CXX} -O3 -march=native a.cpp -o a.so")
    assert "-march=native" not in argv and flags[0] in argv and argv[-2:] == ["-o", "a.so"]
    assert resolve_command("g++ -O2 a.cpp") == ["g++", "-O2", "a.cpp"]


def _job(tmp_path: pathlib.Path, code: str) -> CppJob:
    src, target = tmp_path / "k.cpp", tmp_path / "out" / "k.so"
    cmd = resolve_command(f"{CXX} -O2 -march=native -shared -fPIC {src} -o {target}")
    return CppJob("k.so", (CppStep(cmd, str(target), str(tmp_path / "build")),),
                  {str(src): code.encode()}, Versions.here(), str(tmp_path / "k.lock"), key="k")


def test_builds_a_library_from_shipped_sources(tmp_path: pathlib.Path) -> None:
    result = run_job(_job(tmp_path, 'extern "C" int answer() { return 42; }\n'), TOOLCHAIN)
    assert isinstance(result, Built), result
    (path, data), = result.files.items()
    assert path.endswith("k.so") and data.startswith(b"\x7fELF")
    assert ctypes.CDLL(path).answer() == 42
    assert not (tmp_path / "build").exists()  # scratch dir cleaned


def test_a_broken_source_returns_the_compilers_message(tmp_path: pathlib.Path) -> None:
    result = run_job(_job(tmp_path, 'extern "C" int answer() { return 42 }\n'), TOOLCHAIN)
    assert isinstance(result, Failed) and result.kind == "compile"
    assert "expected" in result.message and "k.cpp" in result.message
    assert not (tmp_path / "out" / "k.so").exists()
