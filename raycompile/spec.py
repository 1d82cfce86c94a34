"""The precompile spec: what ``raycompile precompile --spec FILE`` reads.

The file format is declared once, as pydantic models (``SpecModel``, ``VariantModel``,
``InputModel``): strict (a YAML ``false`` is a bool, the string ``"false"`` is not; ``8`` is a
size, ``"8"`` is not) and closed (an unknown key is an error). The same models give the JSON
Schema published as ``raycompile/precompile-spec.schema.json`` and printed by
``raycompile precompile --print-schema``. A spec that does not validate raises ``SpecError``
naming the variant, the field and what it must be.

What the rest of raycompile uses are the frozen dataclasses ``Variant`` and ``InputSpec``: plain
values that pickle to the Ray task compiling each variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from .errors import SpecError

# -- what the rest of raycompile uses ------------------------------------------------------------


@dataclass(frozen=True)
class InputSpec:
    """One example input: random values of this shape and dtype (integers in [0, high))."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 2
    requires_grad: bool = False


@dataclass(frozen=True)
class Variant:
    """One thing to compile: ``entry(**kwargs)`` (a module or a function) called on ``inputs``."""

    name: str
    entry: str  # "package.module:callable"
    inputs: tuple[InputSpec, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None
    dynamic: bool | None = None
    fullgraph: bool = False
    backward: bool = False  # also compile the backward (sum of the outputs, .backward())
    device: str = "auto"  # auto: cuda when the task has a GPU, else cpu
    dtype: str | None = None  # cast a module's parameters, e.g. bfloat16
    threads: int | None = None  # torch.set_num_threads (Ray workers run with 1; CPU kernels depend on it)
    seed: int = 0


# -- the file format -----------------------------------------------------------------------------


def _torch_dtype(name: str) -> str:
    # checked against the torch that runs the variants, not a fixed list, so every dtype of that
    # torch is accepted and the published schema does not change with the torch version
    import torch

    if not isinstance(getattr(torch, name, None), torch.dtype):
        raise ValueError(f"unknown dtype {name!r} (use torch's names: float32, bfloat16, int64, ...)")
    return name


def _not_given(schema: dict[str, Any]) -> None:
    """For a field whose default (None) only means "not given": the schema shows no default."""
    schema.pop("default", None)


DType = Annotated[str, AfterValidator(_torch_dtype)]
Entry = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")]
Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
DTYPE_EXAMPLES = ["float32", "bfloat16", "float16", "int64", "int32", "bool"]
EXPECTED = {  # what a field's pattern stands for, said in words
    "entry": "'package.module:callable'",
    "device": "auto, cpu, cuda or cuda:N",
}


class InputModel(BaseModel):
    """One example input of a variant: a tensor of random values."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Input")

    shape: list[Annotated[int, Field(ge=0)]] = Field(description="the tensor's sizes, e.g. [8, 512]")
    dtype: DType = Field("float32", description="a torch dtype name", examples=DTYPE_EXAMPLES)
    high: int = Field(2, ge=1, description="integer dtypes: values are drawn from [0, high)")
    requires_grad: bool = Field(False, description="make the input require grad (with backward: true)")


class VariantModel(BaseModel):
    """One thing to compile: entry and inputs are required, in the variant or in defaults."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Variant")

    name: Annotated[str, StringConstraints(min_length=1)] = Field(
        None, json_schema_extra=_not_given,
        description="unique in the spec (default: the callable's name and the variant's index)")
    entry: Entry = Field(
        None, json_schema_extra=_not_given,
        description="package.module:callable, returning a torch.nn.Module or a function to compile")
    inputs: list[InputModel] = Field(
        None, json_schema_extra=_not_given, description="the example inputs the compiled callable is run on")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the entry point")
    mode: Mode | None = Field(None, description="torch.compile's mode (null: its default)")
    dynamic: bool | None = Field(None, description="torch.compile's dynamic (null: decide from recompiles)")
    fullgraph: bool = Field(False, description="torch.compile's fullgraph")
    backward: bool = Field(False, description="also compile the backward (sum of the outputs, .backward())")
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                        description="auto: cuda when the variant's task has a GPU, else cpu")
    dtype: DType | None = Field(None, description="cast a module's parameters to this torch dtype",
                                examples=DTYPE_EXAMPLES)
    threads: int | None = Field(None, ge=1, description="torch.set_num_threads in the variant's task")
    seed: int = Field(0, description="seed of the module's initialisation and of the inputs")


class _CompleteVariant(VariantModel):
    """A variant merged with the defaults: now ``entry`` and ``inputs`` must be there."""

    entry: Entry
    inputs: list[InputModel]


class SpecModel(BaseModel):
    """A spec file: defaults merged into each variant (the variant's own fields win)."""

    model_config = ConfigDict(extra="forbid", strict=True, title="Spec")

    defaults: VariantModel | None = Field(None, description="fields every variant starts from")
    variants: list[VariantModel] = Field(min_length=1, description="what to compile, each variant a Ray task")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec file: a ``SpecModel`` mapping, or a bare list of
    variants. ``raycompile/precompile-spec.schema.json`` is this, as ``schema_text()`` writes it."""
    bare_list = Annotated[list[VariantModel], Field(min_length=1)]
    schema = TypeAdapter(SpecModel | bare_list).json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "raycompile precompile spec",
        "description": ("The variants `raycompile precompile --spec FILE` compiles (JSON or YAML): "
                        "{defaults: {...}, variants: [...]} or a bare list of variants."),
        **schema,
    }


def schema_text() -> str:
    """``json_schema()`` as the committed file holds it (and ``precompile --print-schema`` prints it)."""
    return json.dumps(json_schema(), indent=2) + "\n"


# -- reading a spec ------------------------------------------------------------------------------


def load_spec(path: str) -> list[Variant]:
    """Read and check a spec file (``.json``: JSON, else YAML).

    Raises SpecError naming the file and what is wrong."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise SpecError(path, f"cannot read it ({e.strerror})") from None
    if path.endswith(".json"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise SpecError(path, f"not valid JSON ({e})") from None
    else:
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SpecError(path, f"not valid YAML ({' '.join(str(e).split())})") from None
    return parse_spec(doc, path)


def parse_spec(doc: Any, path: str = "<spec>") -> list[Variant]:
    """The variants of ``doc``: a list of variants, or ``{"defaults": {...}, "variants": [...]}``.

    Raises SpecError naming ``path``, each variant and field that is wrong, and what it must be."""
    if isinstance(doc, list):
        doc = {"variants": doc}
    if not isinstance(doc, dict):
        raise SpecError(path, f"expected a non-empty list under 'variants', got {_show(doc)}")
    try:
        spec = SpecModel.model_validate(doc)
    except ValidationError as e:
        raise SpecError(path, _explain(e, doc)) from None
    defaults = spec.defaults.model_dump(exclude_unset=True) if spec.defaults else {}
    variants = []
    for i, given in enumerate(spec.variants):
        try:
            v = _CompleteVariant.model_validate({**defaults, **given.model_dump(exclude_unset=True)})
        except ValidationError as e:  # only what may be missing from both: entry, inputs
            raise SpecError(path, _explain(e, doc, prefix=("variants", i))) from None
        variants.append(Variant(
            name=v.name or f"{v.entry.rsplit(':', 1)[1]}-{i}", entry=v.entry,
            inputs=tuple(InputSpec(tuple(x.shape), x.dtype, x.high, x.requires_grad) for x in v.inputs),
            kwargs=v.kwargs, mode=v.mode, dynamic=v.dynamic, fullgraph=v.fullgraph, backward=v.backward,
            device=v.device, dtype=v.dtype, threads=v.threads, seed=v.seed))
    names = [v.name for v in variants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(path, f"variant names must be unique: {dupes}")
    return variants


# -- saying what is wrong ------------------------------------------------------------------------

_BY_TYPE = {
    "int_type": "an integer", "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
    "string_too_short": "a non-empty string",
}
_MAX_PROBLEMS = 8
# a variant's fields that may be null (mode, dynamic, dtype, threads), said so in their errors
_NULLABLE = frozenset(n for n, f in VariantModel.model_fields.items() if type(None) in get_args(f.annotation))


def _explain(error: ValidationError, doc: dict[str, Any], prefix: tuple[Any, ...] = ()) -> str:
    """pydantic's errors in a spec's words: ``variant 1 ('b8'): 'inputs[0].high' must be an
    integer, got 'x'``; the unknown keys of one mapping are named together."""
    problems: list[str | tuple[Any, ...]] = []  # a tuple: the mapping with unknown keys, said below
    unknown: dict[tuple[Any, ...], list[str]] = {}
    for err in error.errors():
        loc = prefix + tuple(err["loc"])
        if err["type"] != "extra_forbidden":
            problems.append(_one(err, loc, doc))
            continue
        if loc[:-1] not in unknown:
            unknown[loc[:-1]] = []
            problems.append(loc[:-1])
        unknown[loc[:-1]].append(str(loc[-1]))
    said = [_unknown_keys(p, unknown[p], doc) if isinstance(p, tuple) else p for p in problems]
    more = f"; and {len(said) - _MAX_PROBLEMS} more" if len(said) > _MAX_PROBLEMS else ""
    return "; ".join(said[:_MAX_PROBLEMS]) + more


def _one(err: Any, loc: tuple[Any, ...], doc: dict[str, Any]) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, _show(err.get("input"))
    if loc == ("variants",):  # missing, empty or not a list
        return "expected a non-empty list under 'variants'" + ("" if kind == "missing" else f", got {got}")
    where, path = _where(loc, doc)
    if kind == "missing":
        own = loc[0] == "variants" and len(loc) == 3  # a variant's field, not an input's
        return f"{where}: '{path}' is missing" + (": give it in the variant or in defaults" if own else "")
    if kind == "value_error":
        return f"{where}: '{path}': {err['msg'].removeprefix('Value error, ')}"
    if kind == "literal_error":
        expected = f"one of {ctx['expected']}"
    elif kind == "greater_than_equal":
        expected = f"an integer >= {ctx['ge']}"
    elif kind == "string_pattern_mismatch":
        name = next((p for p in reversed(loc) if isinstance(p, str)), "")
        expected = EXPECTED.get(name, f"text matching {ctx.get('pattern')}")
    else:
        expected = _BY_TYPE.get(kind, err["msg"].lower().removeprefix("input should be "))
    if path in _NULLABLE:
        expected += " (or null)"
    subject = f"{where}: '{path}'" if path else where
    return f"{subject} must be {expected}, got {got}"


def _where(loc: tuple[Any, ...], doc: dict[str, Any]) -> tuple[str, str]:
    """(the part of the spec, the field's path in it): ("variant 1 ('b8')", "inputs[0].high")."""
    if loc[0] == "variants" and len(loc) > 1 and isinstance(loc[1], int):
        raw = doc["variants"][loc[1]] if loc[1] < len(doc.get("variants") or ()) else None
        name = raw.get("name") if isinstance(raw, dict) else None
        where, rest = f"variant {loc[1]}" + (f" ({name!r})" if isinstance(name, str) else ""), loc[2:]
    elif loc[0] == "defaults":
        where, rest = "defaults", loc[1:]
    else:
        where, rest = "the spec", loc
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest).lstrip(".")
    return where, path


def _unknown_keys(parent: tuple[Any, ...], keys: list[str], doc: dict[str, Any]) -> str:
    if not parent:
        return f"unknown top-level key(s) {sorted(keys)} (known: defaults, variants)"
    model = InputModel if len(parent) >= 2 and parent[-2] == "inputs" else VariantModel
    where, path = _where(parent, doc)
    what = f"{where}: '{path}'" if path else where
    return f"{what}: unknown key(s) {sorted(keys)} (known: {', '.join(sorted(model.model_fields))})"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
