"""The ``mlite`` command line.

Each sub-command lives in its own module of this package and defines ``COMMAND`` (its name),
``add_parser(subparsers)`` and ``run(args) -> int``; modules are discovered, so adding a command touches
no other file. The exit codes follow :data:`EXIT_CODES` (printed by ``mlite --help``, quoted in the README):
bad input (:class:`mlite.errors.MliteError`, argparse errors) exits 2 with one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys

from ..errors import MliteError

EXIT_CODES = """\
Exit codes (every command):
  0  done, and any verdict asked for is yes.
  1  a verdict asked for is no, the reasons on stdout: mesh (the mesh is invalid, or --list finds none), memory and
     rl-memory (it does not fit, or the mesh is invalid), import-launcher (the launcher's mesh is invalid or, with
     --estimate, does not fit), run (the run failed or was stopped), logs check --strict / --fail-on (a failure
     found), logs compare --strict (not bitwise equal).
  2  input the command cannot act on (a malformed config, a bad flag value, run, export or time on an invalid mesh,
     an unknown hardware profile): one
     line on stderr naming the field, no traceback, nothing written. check (the preflight) exits 2 as well when
     any finding is an error (the findings on stdout)."""
"""The one exit-code rule of the ``mlite`` commands (``mlite --help``'s epilog; the README quotes it)."""


def _commands():
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "COMMAND"):
            mods.append(mod)
    return sorted(mods, key=lambda m: getattr(m, "ORDER", 50))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own contract), no usage dump
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mlite",
        description="Plan, debug-run and analyze verl + Megatron Lite training.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    p.add_argument("--version", action="version", version=f"mlite-lab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for mod in _commands():
        sp = mod.add_parser(sub)
        sp.set_defaults(_run=mod.run)
    return p


def print_json(obj) -> None:
    """The ``--json`` output: one JSON document on stdout."""
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_invalid_mesh(plan, as_json: bool) -> int:
    """An invalid mesh as the judging commands report it (``--json``: valid, errors, fits): a verdict, exit 1
    (:data:`EXIT_CODES`)."""
    if as_json:
        print_json({"valid": False, "errors": [f.message for f in plan.errors], "fits": False})
    else:
        for f in plan.errors:
            print(f"error: [{f.rule}] {f.message}")
    return 1


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()  # the option rows read the registries, which load $MLITE_PLUGINS
    except MliteError as e:
        print(f"mlite: {e.message}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except MliteError as e:
        print(f"mlite {args.command}: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # python -m mlite.cli
    sys.exit(main())
