"""``raycompile precompile`` and ``raycompile status``: the cluster operator's commands."""

from __future__ import annotations

import argparse
import json
import os
import sys

from .settings import Settings

PRECOMPILE_EXAMPLE = """examples:
  raycompile precompile train.py -- --steps 1        # run a script with the farm enabled
  raycompile precompile --spec variants.yaml --address auto
  ray job submit --working-dir . --runtime-env-json '{"env_vars": {"RAYCOMPILE_SECRET": "..."}}' \\
      -- raycompile precompile --spec variants.yaml

a spec (JSON or YAML); each variant is a Ray task (a GPU when the cluster has one):
  defaults: {entry: "mypkg.models:build_model", kwargs: {layers: 4}, mode: max-autotune}
  variants:
    - {name: b8,  inputs: [{shape: [8, 512],  dtype: int64, high: 32000}]}
    - {name: b16, inputs: [{shape: [16, 512], dtype: int64, high: 32000}], dynamic: false, backward: true}
  fields: entry, kwargs, inputs [{shape, dtype, high, requires_grad}], name, mode, dynamic,
          fullgraph, backward, device (auto|cpu|cuda), dtype, threads, seed
  types are strict: `requires_grad: false`, not "false"; `high: 32000`, not "32000"
  raycompile precompile --print-schema > spec.schema.json   # its JSON Schema, for editors and CI

exit status: 0 all compiled, 1 a variant (or the script) failed, 2 bad usage (spec, module, address)"""

STATUS_EXAMPLE = """example:
  raycompile status --address auto     # nodes, GPUs, compile slots, coordinator, cache tiers"""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("precompile", help="fill the cluster's cache: run a script, or compile a spec's variants",
                       epilog=PRECOMPILE_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("script", nargs="?", help="a Python script to run with the farm enabled")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    p.add_argument("--spec", help="a JSON or YAML file of variants to compile, each as a Ray task")
    p.add_argument("--address", help="Ray address (default: RAY_ADDRESS, e.g. inside `ray job submit`; "
                                     "else an embedded local Ray; `auto` joins the cluster on this machine)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds all variants may take (default 3600)")
    p.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    p.add_argument("--print-schema", action="store_true",
                   help="print the spec's JSON Schema (draft 2020-12) and exit")
    s = sub.add_parser("status", help="show the cluster: nodes, GPUs, compile slots, coordinator, cache tiers",
                       epilog=STATUS_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--address", help="Ray address (default: RAY_ADDRESS, else auto)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")


def run_precompile(args: argparse.Namespace) -> int:
    if args.print_schema:
        from .spec import schema_text

        if args.spec or args.script:
            print("raycompile: precompile --print-schema takes no SCRIPT or --spec", file=sys.stderr)
            return 2
        sys.stdout.write(schema_text())
        return 0
    if bool(args.spec) == bool(args.script):
        print("raycompile: precompile needs a SCRIPT or --spec FILE (not both); see --help", file=sys.stderr)
        return 2
    settings = Settings.resolve(address=args.address)
    if args.script:
        from .precompile_job import run_script

        script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
        return run_script(args.script, script_args, settings.address)
    from .orchestrator.variants import run_variants
    from .precompile_job import VariantResult, load_entry, load_spec, run_variant, table

    variants = load_spec(args.spec)
    paths = [os.getcwd(), os.path.dirname(os.path.abspath(args.spec))]
    for entry in sorted({v.entry for v in variants}):
        load_entry(entry, paths)  # a typo fails here (exit 2), before any Ray task starts
    results = run_variants(variants, settings, run_variant, VariantResult, paths, timeout_s=args.timeout)
    print(table(results))
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 1 if any(r.status != "ok" for r in results) else 0


def run_status(args: argparse.Namespace) -> int:
    from .orchestrator.cluster_status import collect, render

    status = collect(Settings.resolve(address=args.address))
    print(json.dumps(status, indent=2, default=str) if args.json else render(status))
    return 0

