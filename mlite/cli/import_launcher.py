"""``mlite import-launcher FILE [--config CONFIG] [--env NAME=VALUE ...] [--json]``: read an existing verl launcher
(script with bash arrays, a resolved ``DRY_RUN=1`` / ``set -x`` command, or a generated launcher) back into a plan
and judge its mesh with the runtime's rule.

Exit 0 when the mesh is valid, 1 when it is not, 2 on bad usage (no file, no verl launch line).
"""

from __future__ import annotations

COMMAND = "import-launcher"
ORDER = 45


def add_parser(sub):
    p = sub.add_parser(COMMAND, help="read a verl launcher's Hydra overrides back into a mesh plan",
                       description="Reads tp/pp/vpp/cp/ep/etp (mlite engine or verl Megatron keys), "
                       "trainer.nnodes x trainer.n_gpus_per_node and the memory options; FILE '-' reads stdin.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--config", default=None, help="model config (data/models name or path); default: from model.path")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable the script reads from the environment (repeatable)")
    p.add_argument("--json", action="store_true")
    return p


def run(args) -> int:
    import sys

    from ..errors import MliteError
    from ..export import import_launcher
    from . import print_json

    env = {}
    for item in args.env:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise MliteError(f"--env {item!r}: expected NAME=VALUE")
        env[name] = value
    if args.file == "-":
        imp = import_launcher("<stdin>", env=env, text=sys.stdin.read())
    else:
        imp = import_launcher(args.file, env=env)
    doc = imp.to_dict(args.config)
    if args.json:
        print_json(doc)
        return 0 if doc["valid"] else 1
    print(f"{imp.source}: {doc['target']} ({doc['entry']}), {doc['nnodes']} x {doc['gpus_per_node']} = "
          f"{doc['ngpu']} GPUs, model {doc['model_config'] or doc['model_path'] or '?'}")
    print(f"  tp={doc['tp']} pp={doc['pp']} vpp={doc['vpp']} cp={doc['cp']} ep={doc['ep']} etp={doc['etp']} -> "
          f"dp={doc['dp']} edp={doc['edp']}  [{'valid' if doc['valid'] else 'INVALID'}]")
    if doc["pp_layout"]:
        print(f"  stages: {doc['pp_layout']}  ({doc['layout_source']})")
    if doc["options"]:
        print("  options: " + " ".join(f"{k}={v}" for k, v in doc["options"].items()))
    for e in doc["errors"]:
        print(f"  error: {e}")
    for w in doc["warnings"]:
        print(f"  warning: {w}")
    return 0 if doc["valid"] else 1
