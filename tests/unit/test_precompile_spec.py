"""precompile's spec (JSON/YAML, defaults merged, every mistake a SpecError naming it), its entry
points, the per-variant table, and where variants and compile jobs are placed."""

from __future__ import annotations

import json
import pathlib
import pickle

import pytest

from raycompile.errors import SpecError
from raycompile.orchestrator.farm import COMPILE_RESOURCE, GPU_RESOURCE, compile_resources
from raycompile.orchestrator.variants import placement
from raycompile.precompile import InputSpec, VariantResult, load_entry, load_spec, make_inputs, parse_spec, table

EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


def test_defaults_merge_into_each_variant() -> None:
    vs = parse_spec({"defaults": {"entry": "raycompile.models:ReductionTail", "mode": "max-autotune"},
                     "variants": [{"inputs": [{"shape": [8, 96]}]},
                                  {"name": "big", "inputs": [{"shape": [64, 96], "dtype": "bfloat16"}],
                                   "mode": None, "dynamic": True}]})
    assert [v.name for v in vs] == ["ReductionTail-0", "big"]
    assert vs[0].mode == "max-autotune" and vs[1].mode is None and vs[1].dynamic is True
    assert vs[1].inputs == (InputSpec((64, 96), "bfloat16"),)
    assert pickle.loads(pickle.dumps(vs)) == vs  # they travel to Ray tasks


def test_a_bare_list_is_a_spec() -> None:
    (v,) = parse_spec([{"entry": "m:f", "inputs": []}])
    assert v.entry == "m:f" and v.inputs == ()


@pytest.mark.parametrize("doc,message", [
    ({}, "non-empty list under 'variants'"),
    ({"variants": []}, "non-empty list under 'variants'"),
    ({"variants": [{"entry": "m:f", "inputs": []}], "extra": 1}, "unknown top-level key(s) ['extra']"),
    ({"variants": [{"entry": "nocolon", "inputs": []}]}, "'entry' must be 'package.module:callable'"),
    ({"variants": [{"entry": "m:f"}]}, "'inputs' must be a list"),
    ({"variants": [{"entry": "m:f", "inputs": [], "shapes": []}]}, "unknown key(s) ['shapes']"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8, -1]}]}]}, "'shape' must be a list of sizes"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "dtype": "float99"}]}]}, "unknown dtype 'float99'"),
    ({"variants": [{"entry": "m:f", "inputs": [], "mode": "fast"}]}, "'mode' must be one of"),
    ({"variants": [{"entry": "m:f", "inputs": [], "threads": 0}]}, "'threads' must be an integer >= 1"),
    ({"variants": [{"entry": "m:f", "inputs": [], "name": "a"}, {"entry": "m:g", "inputs": [], "name": "a"}]},
     "names must be unique: ['a']"),
])
def test_every_mistake_is_named(doc: object, message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(doc, "spec.yaml")
    assert message in str(e.value) and str(e.value).startswith("spec.yaml: ")


def test_json_and_yaml_files(tmp_path: pathlib.Path) -> None:
    doc = {"variants": [{"entry": "m:f", "inputs": [{"shape": [2]}]}]}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    (tmp_path / "s.yaml").write_text("variants:\n  - {entry: 'm:f', inputs: [{shape: [2]}]}\n")
    assert load_spec(str(tmp_path / "s.json")) == load_spec(str(tmp_path / "s.yaml"))
    (tmp_path / "bad.yaml").write_text("variants: [\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(str(tmp_path / "bad.yaml"))
    with pytest.raises(SpecError, match="cannot read it"):
        load_spec(str(tmp_path / "missing.json"))


def test_the_example_spec_loads_and_its_entries_import() -> None:
    variants = load_spec(str(EXAMPLES / "variants.yaml"))
    assert len(variants) == 5 and {v.mode for v in variants} == {None, "max-autotune-no-cudagraphs"}
    for v in variants:
        assert callable(load_entry(v.entry))


@pytest.mark.parametrize("entry,message", [
    ("nosuchmodule_xyz:f", "cannot import module 'nosuchmodule_xyz'"),
    ("raycompile.models:Nope", "has no 'Nope'"),
    ("raycompile.models:__doc__", "is not callable"),
])
def test_bad_entry_points(entry: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_entry(entry)


def test_inputs_are_seeded_and_typed() -> None:
    import torch

    specs = (InputSpec((2, 3)), InputSpec((4,), "int64", high=7), InputSpec((2,), "bfloat16", requires_grad=True))
    a, b = make_inputs(specs, "cpu", 0), make_inputs(specs, "cpu", 0)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[1].dtype == torch.int64 and int(a[1].max()) < 7 and a[2].dtype == torch.bfloat16 and a[2].requires_grad


def test_the_table_names_failures() -> None:
    text = table([VariantResult("b8", "ok", 12.5, 40, 3, "gpu-1"),
                  VariantResult("b16", "failed", 1.0, 0, 0, "gpu-2", "CompileError: ptxas died")])
    assert "b8" in text and "FAILED b16: CompileError: ptxas died" in text
    assert text.splitlines()[-1] == "precompiled 2 variants (1 failed): 40 compile jobs, 3 cache hits"


def test_variants_go_to_gpus_when_there_are_any() -> None:
    opts, limit = placement({"CPU": 64, "GPU": 8})
    assert opts["num_gpus"] == 1 and opts["resources"] == {} and limit > 8
    opts, _ = placement({"CPU": 64, "GPU": 8, GPU_RESOURCE: 8})
    assert opts["resources"] == {GPU_RESOURCE: 1}
    opts, limit = placement({"CPU": 2})
    assert opts == {"num_cpus": 1, "num_gpus": 0} and limit == 1  # a CPU stays free for compile jobs


def test_compile_jobs_ask_for_a_compile_slot_only_where_the_cluster_has_them() -> None:
    assert compile_resources({"CPU": 8}) == {}
    assert compile_resources({"CPU": 8, COMPILE_RESOURCE: 32}) == {COMPILE_RESOURCE: 1}


def test_spec_errors_pickle_and_say_what_to_do() -> None:
    for e in (SpecError("spec.yaml", "variant 0: unknown key(s) ['shapes']"), SpecError("train.py", "no such script")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is SpecError and str(back) == str(e)
    assert "precompile --help" in str(SpecError("spec.yaml", "x")) and "SCRIPT [-- ARGS]" in str(SpecError("t.py", "x"))
