"""``mlite calibrate [CONFIG] --device cuda|cpu [--base NAME|PROFILE.json] [--out PROFILE.json] [--quick] [--json]``:
measure this machine (GEMMs at CONFIG's shapes, attention, routed experts, memory bandwidth, launch cost, host <->
device copies, the host AdamW of offloading) and write a hardware profile that ``mlite time --hardware PROFILE.json``
reads (:mod:`mlite.time.calibrate`).

Exit 0 when measured (and written); 2 on bad input (an unknown device or base, ``--device cuda`` without CUDA, an
``--out`` whose folder does not exist): one line on stderr, nothing measured, nothing written. See
:data:`mlite.cli.EXIT_CODES`.
"""

from __future__ import annotations

from pathlib import Path

from . import _Parser

COMMAND = "calibrate"
ORDER = 65


def add_parser(sub):
    p = sub.add_parser(
        COMMAND,
        help="measure this GPU (or CPU) and write a hardware profile for mlite time --hardware",
        description="CONFIG: the model whose GEMM and attention shapes are measured (a config.json path or a name in "
        "data/models/; default tiny-dense). The fields a single process cannot measure (peak FLOP/s, NVLink, "
        "network, GPUs per node) are the base profile's.",
    )
    p.add_argument("config", metavar="CONFIG", nargs="?", default="tiny-dense")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu: a smoke test only); default cuda")
    p.add_argument(
        "--base",
        default=None,
        help="the profile whose unmeasured fields are kept: a shipped name (A100, H100, H200, B200) or a profile "
        "file; default: the shipped one named in the GPU's name, else H100",
    )
    p.add_argument("--out", default=None, help="write the profile JSON here (its folder must exist)")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds; a smoke test)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.__class__ = _StrictParser
    return p


class _StrictParser(_Parser):
    """Unknown flags are this command's error (``mlite calibrate: error: ...``): with every argument optional,
    argparse would hand them to the top-level parser, whose message does not name the command."""

    def parse_known_args(self, args=None, namespace=None):
        ns, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return ns, extra


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def run(args) -> int:
    import json

    from ..errors import MliteError
    from ..models import from_hf_config
    from ..time.calibrate import MEASURED_FIELDS, calibrate, check_device, resolve_base
    from . import print_json

    out = None
    if args.out is not None:
        out = Path(args.out).expanduser()
        if not out.parent.is_dir():
            raise MliteError(f"--out {args.out}: the folder {out.parent} does not exist; create it or pick another")
        if out.is_dir():
            raise MliteError(f"--out {args.out}: is a folder; give the profile file's path (e.g. {out}/profile.json)")
    device = check_device(args.device)
    base = resolve_base(args.base, device)
    spec = from_hf_config(args.config)
    prof = calibrate(device, spec, base, quick=args.quick)
    if out is not None:  # every measurement done: write
        out.write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    if args.json:
        print_json(prof.to_dict())
        return 0
    m = prof.measured
    print(f"{prof.name}: {spec.name}'s shapes, base {base.name}, {m['sizes']} sizes, {m['seconds']:.1f} s")
    for k in MEASURED_FIELDS:
        old, new = getattr(base, k), getattr(prof, k)
        mark = "" if k in m["replaced"] else "  (kept: not measured)"
        print(f"  {k:26s} {_fmt(old):>12s} -> {_fmt(new):<12s}{mark}")
    if "note" in m:
        print(f"  note: {m['note']}")
    if out is not None:
        print(f"wrote {out}")
    return 0
