"""``mlite params CONFIG [--json]``: parameter accounting of a Hugging Face config."""

from __future__ import annotations

COMMAND = "params"
ORDER = 10


def add_parser(sub):
    p = sub.add_parser(
        COMMAND,
        help="count parameters of a model config (total, active, MTP, by component)",
        description="CONFIG is a path to a config.json or the name of a file in data/models/.",
    )
    p.add_argument("config", metavar="CONFIG")
    p.add_argument("--json", action="store_true", help="print the JSON document")
    return p


def _fmt(n: int) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def run(args) -> int:
    from ..models import from_hf_config
    from . import print_json

    spec = from_hf_config(args.config)
    doc = spec.summary()
    if args.json:
        print_json(doc)
        return 0
    print(f"{spec.name}  ({spec.model_type}, read as {spec.architecture}, {spec.source})")
    print(f"  total   {doc['total']:>20,}  ({_fmt(doc['total'])})")
    print(f"  active  {doc['active']:>20,}  ({_fmt(doc['active'])})")
    print(f"  mtp     {doc['mtp']:>20,}  ({doc['num_mtp_layers']} layer(s))")
    if doc["vision"]:
        print(f"  vision  {doc['vision']:>20,}  (not in total)")
    print(f"  layers  {doc['num_layers']}")
    kinds: dict[str, int] = {}
    for layer in doc["layers"]:
        kinds[layer["kind"]] = kinds.get(layer["kind"], 0) + 1
    print("  kinds   " + ", ".join(f"{k} x{v}" for k, v in kinds.items()))
    print("  components:")
    for c, n in doc["components"].items():
        print(f"    {c:18s} {n:>20,}  {100 * n / doc['total']:5.1f}%")
    for note in doc["notes"]:
        print(f"  note: {note}")
    return 0
