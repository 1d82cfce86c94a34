"""precompile's spec (JSON/YAML, defaults merged, strict types, every mistake a SpecError naming
the variant and the field), its published JSON Schema, its entry points, the per-variant table,
and where variants and compile jobs are placed."""

from __future__ import annotations

import json
import pathlib
import pickle

import pytest

from raycompile.errors import SpecError
from raycompile.orchestrator.remote import COMPILE_RESOURCE, GPU_RESOURCE, compile_resources
from raycompile.orchestrator.variants import placement
from raycompile.precompile_job import InputSpec, VariantResult, load_entry, load_spec, make_inputs, parse_spec, table
from raycompile.spec import json_schema, schema_text

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
    ({}, "expected a non-empty list under 'variants'"),
    ({"variants": []}, "expected a non-empty list under 'variants', got []"),
    ("variants", "expected a non-empty list under 'variants', got 'variants'"),
    ({"variants": [{"entry": "m:f", "inputs": []}], "extra": 1}, "unknown top-level key(s) ['extra']"),
    ({"variants": [{"entry": "nocolon", "inputs": []}]},
     "variant 0: 'entry' must be 'package.module:callable', got 'nocolon'"),
    ({"variants": [{"entry": "m:f"}]}, "variant 0: 'inputs' is missing: give it in the variant or in defaults"),
    ({"variants": [{"entry": "m:f", "inputs": 5}]}, "variant 0: 'inputs' must be a list, got 5"),
    ({"variants": [{"entry": "m:f", "inputs": [], "shapes": [], "zz": 1}]},
     "variant 0: unknown key(s) ['shapes', 'zz'] (known: backward, device,"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8, -1]}]}]},
     "variant 0: 'inputs[0].shape[1]' must be an integer >= 0, got -1"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "dtype": "float99"}]}]}, "unknown dtype 'float99'"),
    ({"variants": [{"entry": "m:f", "inputs": [], "mode": "fast"}]}, "'mode' must be one of 'default',"),
    ({"variants": [{"entry": "m:f", "inputs": [], "threads": 0}]}, "'threads' must be an integer >= 1 (or null)"),
    ({"variants": [{"entry": "m:f", "inputs": [], "name": "a"}, {"entry": "m:g", "inputs": [], "name": "a"}]},
     "names must be unique: ['a']"),
    # issue 19: strict types, and every message names the variant and the field
    ({"variants": [{"name": "b0", "entry": "m:f", "inputs": []},
                   {"name": "b8", "entry": "m:f", "inputs": [{"shape": [8], "high": "x"}]}]},
     "variant 1 ('b8'): 'inputs[0].high' must be an integer, got 'x'"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "requires_grad": "false"}]}]},
     "variant 0: 'inputs[0].requires_grad' must be true or false, got 'false'"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": ["8"]}]}]},
     "variant 0: 'inputs[0].shape[0]' must be an integer, got '8'"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [True]}]}]},
     "variant 0: 'inputs[0].shape[0]' must be an integer, got True"),
    ({"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "size": 2}]}]},
     "variant 0: 'inputs[0]': unknown key(s) ['size'] (known: dtype, high, requires_grad, shape)"),
    ({"variants": [{"entry": "m:f", "inputs": [{"dtype": "int64"}]}]}, "variant 0: 'inputs[0].shape' is missing"),
    ({"variants": [{"entry": "m:f", "inputs": [], "device": "tpu"}]},
     "variant 0: 'device' must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ({"variants": [{"entry": "m:f", "inputs": [], "dynamic": "yes"}]},
     "variant 0: 'dynamic' must be true or false (or null), got 'yes'"),
    ({"variants": [{"entry": "m:f", "inputs": [], "fullgraph": 1}]},
     "variant 0: 'fullgraph' must be true or false, got 1"),
    ({"variants": [{"entry": "m:f", "inputs": [], "seed": 1.5}]}, "variant 0: 'seed' must be an integer, got 1.5"),
    ({"variants": [{"entry": "m:f", "inputs": [], "name": ""}]}, "variant 0 (''): 'name' must be a non-empty string"),
    ({"variants": [{"entry": "m:f", "inputs": [], "kwargs": [1]}]}, "variant 0: 'kwargs' must be a mapping, got [1]"),
    ({"variants": ["m:f"]}, "variant 0 must be a mapping, got 'm:f'"),
    ({"defaults": {"mode": "fast"}, "variants": [{"entry": "m:f", "inputs": []}]}, "defaults: 'mode' must be one of"),
    ({"defaults": [1], "variants": [{"entry": "m:f", "inputs": []}]}, "defaults must be a mapping, got [1]"),
    ({"defaults": {"entry": "m:f"}, "variants": [{"name": "b8"}]},
     "variant 0 ('b8'): 'inputs' is missing: give it in the variant or in defaults"),
])
def test_every_mistake_is_named(doc: object, message: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(doc, "spec.yaml")
    assert message in str(e.value) and str(e.value).startswith("spec.yaml: ")


def test_all_mistakes_are_named_at_once() -> None:
    doc = {"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "high": "x"}], "mode": "fast", "shapes": []},
                        {"entry": "nocolon", "inputs": []}]}
    with pytest.raises(SpecError) as e:
        parse_spec(doc, "spec.yaml")
    said = e.value.reason.split("; ")
    assert said == ["variant 0: 'inputs[0].high' must be an integer, got 'x'",
                    "variant 0: 'mode' must be one of 'default', 'reduce-overhead', 'max-autotune' or "
                    "'max-autotune-no-cudagraphs' (or null), got 'fast'",
                    "variant 0: unknown key(s) ['shapes'] (known: backward, device, dtype, dynamic, entry, fullgraph, "
                    "inputs, kwargs, mode, name, seed, threads)",
                    "variant 1: 'entry' must be 'package.module:callable', got 'nocolon'"]


def test_null_means_the_default_where_a_field_allows_it() -> None:
    (v,) = parse_spec({"defaults": {"mode": "max-autotune", "threads": 4}, "variants": [
        {"entry": "m:f", "inputs": [{"shape": [2]}], "mode": None, "dynamic": None, "dtype": None, "threads": None}]})
    assert (v.mode, v.dynamic, v.dtype, v.threads) == (None, None, None, None)
    assert parse_spec({"defaults": None, "variants": [{"entry": "m:f", "inputs": []}]})[0].name == "f-0"
    for field in ("name", "fullgraph", "backward", "device", "seed", "kwargs", "entry", "inputs"):
        with pytest.raises(SpecError, match=f"'{field}' must be"):
            parse_spec([{"entry": "m:f", "inputs": [], field: None}])


def test_yaml_booleans_are_booleans_and_quoted_ones_are_not(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("variants:\n  - {entry: 'm:f', inputs: [{shape: [2], requires_grad: false}], backward: true}\n")
    (v,) = load_spec(str(good))
    assert v.inputs[0].requires_grad is False and v.backward is True
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants:\n  - {name: b8, entry: 'm:f', inputs: [{shape: [2], requires_grad: \"false\"}]}\n")
    with pytest.raises(SpecError) as e:
        load_spec(str(bad))
    assert str(e.value).startswith(f"{bad}: variant 0 ('b8'): 'inputs[0].requires_grad' must be true or false, "
                                   "got 'false'")


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


# -- the published JSON Schema -------------------------------------------------------------------

SCHEMA = pathlib.Path(__file__).parents[2] / "raycompile" / "precompile-spec.schema.json"


def test_the_committed_schema_is_what_the_models_generate() -> None:
    assert json.loads(SCHEMA.read_text()) == json_schema(), (
        "the spec models changed: run `raycompile precompile --print-schema > raycompile/precompile-spec.schema.json`")
    assert SCHEMA.read_text() == schema_text()


def test_the_schema_accepts_the_example_and_rejects_what_the_models_reject() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    validator.check_schema(validator.schema)
    assert not list(validator.iter_errors(yaml.safe_load((EXAMPLES / "variants.yaml").read_text())))
    assert not list(validator.iter_errors([{"entry": "m:f", "inputs": [{"shape": [2]}], "mode": None}]))
    for bad in ({"variants": []}, {"variants": [{"entry": "m:f", "inputs": [], "extra": 1}]},
                {"variants": [{"entry": "nocolon", "inputs": []}]},
                {"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "high": "x"}]}]},
                {"variants": [{"entry": "m:f", "inputs": [{"shape": [8], "requires_grad": "false"}]}]},
                {"variants": [{"entry": "m:f", "inputs": [], "mode": "fast"}]},
                {"variants": [{"entry": "m:f", "inputs": [], "device": "tpu"}]},
                {"variants": [{"entry": "m:f", "inputs": [], "threads": 0}]}):
        assert list(validator.iter_errors(bad)), bad
        with pytest.raises(SpecError):
            parse_spec(bad)


def test_print_schema() -> None:
    import contextlib
    import io

    from raycompile.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["precompile", "--print-schema"]) == 0
    assert json.loads(out.getvalue()) == json_schema()
