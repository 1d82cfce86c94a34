"""The layer order the README states, checked on the installed package's import graph:

    base (errors, settings, sizes, counters, _version, observe/: stats, progress, report, quiet)
        <- cache <- kernels <- {wrapper, orchestrator} <- facade

A module may import its own component and the layers below it; ``wrapper`` and ``orchestrator``
never import each other; only ``orchestrator`` imports Ray; only the Inductor adapter
(``wrapper/compat``) reaches ``torch._*`` or a Triton internal. Every import counts, including
the ones inside functions and under ``TYPE_CHECKING``. A class counts as a use of each class it
subclasses: its bases must come from a layer it may import, and a base reached as an attribute
(``class X(torch._dynamo.Foo)``, ``class X(orchestrator.Farm)`` after ``from .. import
orchestrator``) is checked as an import of that name."""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass

import pytest

PACKAGE = "raycompile"
BASE = {"raycompile.errors", "raycompile.settings", "raycompile.sizes", "raycompile._version", "raycompile.counters",
        # the counters, the progress bar and the reports: every layer may count and report
        "raycompile.observe", "raycompile.observe.stats", "raycompile.observe.progress", "raycompile.observe.report",
        "raycompile.observe.quiet"}
COMPONENTS = {"raycompile.cache": 1, "raycompile.kernels": 2, "raycompile.wrapper": 3, "raycompile.orchestrator": 3}
ADAPTER = "raycompile.wrapper.compat"
FACADE_LAYER = 4
# Triton's public names: importing these is not reaching into Triton
TRITON_PUBLIC = {"triton", "triton.language"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the absolute name imported (a module, or module.attribute)
    line: int


def _modules() -> dict[str, str]:
    """Every module of the installed package: name -> file."""
    out: dict[str, str] = {}
    todo = [PACKAGE, *COMPONENTS]  # an editable install maps the components from other folders
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        for root in spec.submodule_search_locations:
            for entry in sorted(os.listdir(root)):
                path = os.path.join(root, entry)
                if entry == "__init__.py":
                    out[name] = path
                elif entry.endswith(".py"):
                    out[f"{name}.{entry[:-3]}"] = path
                elif os.path.isfile(os.path.join(path, "__init__.py")):
                    todo.append(f"{name}.{entry}")
    return out


def _imports(name: str, path: str) -> list[Import]:
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(name, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found += [Import(name, f"{prefix}.{a.name}", node.lineno) for a in node.names]
    return found


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _subclassed(name: str, path: str, imports: list[Import]) -> list[Import]:
    """Each class's bases, as the absolute names they resolve to through the module's imports
    (``class X(compat.Foo)`` after ``from . import compat`` -> ``raycompile.wrapper.compat.Foo``)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    bound = {imp.target.rsplit(".", 1)[-1]: imp.target for imp in imports if "." in imp.target}
    bound.update({imp.target.split(".")[0]: imp.target.split(".")[0] for imp in imports if "." not in imp.target})
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for base in node.bases:
            dotted = _dotted(base)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in bound and (rest or bound[head] != head):
                out.append(Import(name, f"{bound[head]}.{rest}" if rest else bound[head], node.lineno))
    return out


def _private_attributes(name: str, path: str) -> list[Import]:
    """``torch._x`` reached as an attribute (``torch._dynamo.reset()``), not imported."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    return [Import(name, f"torch.{n.attr}", n.lineno) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "torch"
            and n.attr.startswith("_") and not n.attr.startswith("__")]


def _component(module: str) -> tuple[str, int]:
    if module in BASE:
        return "base", 0
    for component, layer in COMPONENTS.items():
        if module == component or module.startswith(component + "."):
            return component, layer
    return "facade", FACADE_LAYER


def _target_module(target: str, modules: dict[str, str]) -> str | None:
    """The package module ``target`` names (``raycompile.cache.keys.PAYLOAD`` -> ``raycompile.cache.keys``)."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def violations(modules: dict[str, str]) -> list[str]:
    out = []
    for name, path in sorted(modules.items()):
        component, layer = _component(name)
        in_adapter = name == ADAPTER or name.startswith(ADAPTER + ".")
        imports = _imports(name, path)
        for imp in imports + _private_attributes(name, path) + _subclassed(name, path, imports):
            where = f"{name}:{imp.line} imports {imp.target}"
            top = imp.target.split(".")[0]
            if top == "ray" and component != "raycompile.orchestrator":
                out.append(f"{where}: only orchestrator/ talks to Ray")
            private_torch = imp.target.startswith("torch._")
            triton_internal = top == "triton" and not any(
                imp.target == p or imp.target.startswith(p + ".") and imp.target.count(".") == p.count(".") + 1
                for p in TRITON_PUBLIC)
            if (private_torch or triton_internal) and not in_adapter:
                out.append(f"{where}: Inductor's and Triton's private API only behind wrapper/compat")
            if top != PACKAGE:
                continue
            target = _target_module(imp.target, modules)
            if target is None:
                continue
            t_component, t_layer = _component(target)
            if t_component == component:
                continue
            if t_layer >= layer:
                out.append(f"{where}: {component} (layer {layer}) may not import {t_component} (layer {t_layer})")
    return out


def test_the_package_keeps_its_layer_order() -> None:
    modules = _modules()
    assert {"raycompile.cache.keys", "raycompile.wrapper.compat.triton", "raycompile.orchestrator.farm",
            "raycompile.kernels.jobs"} <= set(modules)  # the walk found the subpackages where they install
    assert violations(modules) == []


@pytest.mark.parametrize(("module", "source", "why"), [
    ("raycompile.kernels.x", "from ..wrapper import compat\n", "kernels (layer 2) may not import raycompile.wrapper"),
    ("raycompile.wrapper.x", "from ..orchestrator.farm import Farm\n", "may not import raycompile.orchestrator"),
    ("raycompile.orchestrator.x", "def f():\n    from ..precompile_job import run_variant\n", "may not import facade"),
    ("raycompile.cache.x", "import raycompile\n", "may not import facade"),
    ("raycompile.wrapper.x", "import ray\n", "only orchestrator/ talks to Ray"),
    ("raycompile.wrapper.x", "import torch._inductor.config\n", "only behind wrapper/compat"),
    ("raycompile.kernels.x", "from triton.runtime.jit import JITFunction\n", "only behind wrapper/compat"),
    ("raycompile.x", "import torch\ntorch._dynamo.reset()\n", "only behind wrapper/compat"),
    ("raycompile.observe.stats", "from ..cache import Cache\n", "base (layer 0) may not import raycompile.cache"),
])
def test_a_violation_is_named(tmp_path, module: str, source: str, why: str) -> None:
    """Each rule fails on a module that breaks it (the checker is not vacuous)."""
    path = tmp_path / "x.py"
    path.write_text(source)
    modules = {**_modules(), module: str(path)}
    found = [v for v in violations(modules) if v.startswith(module + ":")]
    assert len(found) == 1 and why in found[0], found


def test_a_subclass_of_a_higher_layer_is_named(tmp_path) -> None:
    """Subclassing counts: a class whose base is reached through a module of a higher layer is a
    violation at the class as well as at the import (here the import alone is in a TYPE_CHECKING
    block, which counts too)."""
    path = tmp_path / "x.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
                    "from .. import orchestrator\n\n\nclass MyFarm(orchestrator.Farm):\n    pass\n")
    found = [v for v in violations({**_modules(), "raycompile.wrapper.x": str(path)})
             if v.startswith("raycompile.wrapper.x:")]
    assert len(found) == 2, found
    assert any(":7 imports raycompile.orchestrator.Farm" in v for v in found), found
    path.write_text("from ..kernels import jobs\n\n\nclass MyJob(jobs.TritonJob):\n    pass\n")
    assert not [v for v in violations({**_modules(), "raycompile.wrapper.x": str(path)})
                if v.startswith("raycompile.wrapper.x:")]


def test_the_stats_progress_and_report_sit_below_every_component() -> None:
    """Where every layer may import them: the cache and the wrapper type their counters as ``Stats``."""
    modules = _modules()
    for name in ("raycompile.observe.stats", "raycompile.observe.progress", "raycompile.observe.report"):
        assert name in modules and _component(name) == ("base", 0), name
    assert not {n for n in modules if n.startswith("raycompile.orchestrator.") and
                n.rsplit(".", 1)[-1] in ("stats", "progress", "report")}


def test_the_adapter_may_reach_inductor_and_public_triton_is_fine(tmp_path) -> None:
    path = tmp_path / "x.py"
    path.write_text("import torch._inductor.config\nimport triton\nimport triton.language as tl\n")
    assert not [v for v in violations({**_modules(), "raycompile.wrapper.compat.x": str(path)})
                if v.startswith("raycompile.wrapper.compat.x:")]
    path.write_text("import triton\nimport triton.language as tl\n")
    assert not [v for v in violations({**_modules(), "raycompile.kernels.x": str(path)})
                if v.startswith("raycompile.kernels.x:")]


def mutual_imports(modules: dict[str, str]) -> list[tuple[str, str]]:
    """Pairs of modules that import each other (a package and its own submodules aside)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {_target_module(imp.target, modules) for imp in _imports(name, path)}
        edges[name] = {t for t in targets if t is not None and t != name}
    return sorted({tuple(sorted((a, b))) for a, targets in edges.items() for b in targets  # type: ignore[misc]
                   if a in edges.get(b, ()) and not (a.startswith(b + ".") or b.startswith(a + "."))})


def test_no_module_imports_one_that_imports_it_back(tmp_path) -> None:
    """The session imported the autotune and graph-worker modules and both imported the session
    back; none such is left (imports inside functions count), and the check names one it meets."""
    modules = _modules()
    assert mutual_imports(modules) == []
    path = tmp_path / "x.py"
    path.write_text("def f():\n    from .session import current\n")  # inside a function: counted
    cyclic = tmp_path / "session.py"
    cyclic.write_text(open(modules["raycompile.session"]).read() + "\nfrom .x import y\n")
    found = mutual_imports({**modules, "raycompile.x": str(path), "raycompile.session": str(cyclic)})
    assert found == [("raycompile.session", "raycompile.x")], found


def test_every_subpackage_is_in_the_wheel() -> None:
    """pyproject.toml lists the packages a wheel carries (the components live in folders of their
    own); a new subpackage left out works in an editable install and is missing from a real one."""
    import pathlib

    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {name for name, path in _modules().items() if path.endswith("__init__.py")}
    assert packages == listed, (packages - listed, listed - packages)
