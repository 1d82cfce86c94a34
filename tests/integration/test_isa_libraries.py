"""The libraries of Inductor's checks of this CPU's vector instruction sets travel with compiled
frames (``compat.isa``): a process that checked records the libraries its checks built, and a
process with an empty Inductor cache dir that installs them checks this CPU without building any
(each build there is counted, and fails the check) and finds the same instruction sets valid,
with the same build flags, which name every C++ kernel. Real Inductor checks, real g++
builds in the first process, real child-process loads in both."""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys

import pytest

from raycompile.wrapper.compat import isa

HERE = pathlib.Path(__file__).parent


def run(mode: str, cache: pathlib.Path, out: pathlib.Path) -> None:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, str(HERE / "isa_driver.py"), mode, str(out)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.skipif(sys.platform != "linux", reason="Inductor's ISA checks build Linux libraries")
def test_a_fresh_cache_dir_checks_this_cpu_without_building(tmp_path: pathlib.Path) -> None:
    run("record", tmp_path / "built", tmp_path / "isa.pkl")
    recorded = pickle.loads((tmp_path / "isa.pkl").read_bytes())
    blobs = recorded["blobs"]
    if recorded["picked"][0][0] == "INVALID_VEC_ISA" and not blobs:
        pytest.skip("this CPU offers Inductor no vector instruction set to check")
    assert blobs and all(b.startswith(isa.ISA_BLOB) and b.endswith(".so") for b in blobs), sorted(blobs)

    run("load", tmp_path / "fresh", tmp_path / "isa.pkl")
    loaded = pickle.loads((tmp_path / "isa.pkl.load").read_bytes())
    assert loaded["written"] == len(blobs) and loaded["again"] == 0, loaded  # each written once
    assert loaded["builds"] == [], loaded  # every check found its library: nothing built
    # the same pick and valid sets, with the same build flags (the bf16 and AMX-fp16 variants too)
    assert loaded["picked"] == recorded["picked"], (loaded, recorded)


def test_a_blob_not_named_as_inductor_names_a_library_is_not_written(tmp_path: pathlib.Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    key = "c" + "a" * 51
    bad = {f"{isa.ISA_BLOB}../{key}.so": b"x", f"{isa.ISA_BLOB}zz/{key}.so": b"x",  # outside, wrong subdir
           f"{isa.ISA_BLOB}aa/{key}.py": b"x", f"{isa.ISA_BLOB}aa/{key}.so/../../x.so": b"x"}
    assert isa.install_isa_libraries(bad) == 0
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
    assert isa.install_isa_libraries({f"{isa.ISA_BLOB}aa/{key}.so": b"x"}) == 1
    assert (tmp_path / "aa" / f"{key}.so").read_bytes() == b"x"


@pytest.mark.skipif(sys.platform != "linux", reason="Inductor's ISA checks build Linux libraries")
def test_the_libraries_travel_through_the_tiers_without_frames(tmp_path: pathlib.Path) -> None:
    """A node that checks this CPU with no compiled frames to bring the libraries (``dynamo_cache``
    off, frames that miss, a waiter of another node's flight) takes them from the tiers: the
    first process built them and published each, through a real signed file tier; the second,
    with an empty Inductor cache dir and its own local tier, builds none and picks the same sets."""
    shared = f"file://{tmp_path / 'shared'}"

    def run_shared(mode: str, name: str) -> dict:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name / "inductor"), "SHARED": shared,
               "LOCAL_TIER": str(tmp_path / name / "local")}
        out = tmp_path / f"{name}.pkl"
        proc = subprocess.run([sys.executable, str(HERE / "isa_driver.py"), mode, str(out)], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        return pickle.loads(out.read_bytes())

    first = run_shared("share-record", "first")
    if first["picked"][0][0] == "INVALID_VEC_ISA" and not first["published"]:
        pytest.skip("this CPU offers Inductor no vector instruction set to check")
    assert first["published"] >= 1 and first["fetched"] == 0, first  # built here, so published
    second = run_shared("share-load", "second")
    assert second["builds"] == [], second  # every check found its library: nothing built
    assert second["fetched"] == first["published"] and second["published"] == 0, second
    assert second["picked"] == first["picked"], (second, first)


def test_only_a_library_whose_check_passed_here_is_published(tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that was built here but failed its check (a build cut short, or a set this CPU
    lacks) stays here: the next node builds its own. The check itself is a named stand-in that
    writes the library where Inductor's check would and answers as told."""
    from torch._inductor import cpu_vec_isa

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    answers = {"VecAVX2": True, "VecAVX512": False}

    def stand_in(self: object, code: str, *args: object, **kwargs: object) -> bool:
        path = pathlib.Path(isa._paths(self, code)[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"library of " + type(self).__name__.encode())
        return answers[type(self).__name__]

    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", stand_in)
    published: dict[str, bytes] = {}
    with isa.isa_checks_recorded(lambda names: {}, published.__setitem__):
        for cls in (cpu_vec_isa.VecAVX2, cpu_vec_isa.VecAVX512):
            assert cpu_vec_isa.VecISA.check_build(cls(), "int main() {}") is answers[cls.__name__]
    assert list(published.values()) == [b"library of VecAVX2"], published
