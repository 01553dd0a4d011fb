"""The import graph of ``mlite/``: no module imports itself back through other modules.

The graph is read statically (``ast``): an edge ``A -> B`` for every import of a module of the package.
``from .pkg import name`` is an edge to the submodule ``pkg.name`` when that is a module, else to ``pkg`` (its
``__init__``). Two graphs are checked: the import-time one (module level, including ``try`` / ``if`` blocks, not
``if TYPE_CHECKING:``, not inside functions), where a cycle makes the import order matter (half-initialised modules,
``ImportError`` for a name not defined yet); and the full one (imports inside functions too), where a cycle means two
modules that need each other and belong together or need their shared part split out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "mlite"


def _modules(root: Path = PKG) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` of the package (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body):
    """Import statements that run when the module is imported (not in functions / classes / TYPE_CHECKING)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_nodes(node.body)
            yield from _import_time_nodes(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_nodes(block)
        elif isinstance(node, (ast.With,)):
            yield from _import_time_nodes(node.body)


def _all_import_nodes(body):
    """Every import statement, at any depth."""
    for node in ast.walk(ast.Module(body=list(body), type_ignores=[])):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph(mods: dict[str, Path], *, lazy: bool = False) -> dict[str, set[str]]:
    """``module -> modules it imports``; ``lazy``: imports inside functions (and TYPE_CHECKING blocks) count too."""
    nodes = _all_import_nodes if lazy else _import_time_nodes
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        here = mod.split(".") if is_pkg else mod.split(".")[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in nodes(tree.body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base_parts = here[: len(here) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = []
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else base)
            for t in targets:
                while t and t not in mods and "." in t:  # `import mlite.x.y` where y is a name: the module x
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_graph_reader_sees_cycles_and_skips_lazy_imports(tmp_path):
    pkg = tmp_path / "pk"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("try:\n    from .sub.c import f\nexcept ImportError:\n    pass\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("import pk.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import e\ndef g():\n    from . import e\n"
    )
    (pkg / "e.py").write_text("from .d import g\n")
    graph = import_graph(_modules(pkg))
    assert graph["pk.a"] == {"pk.b"} and graph["pk.b"] == {"pk.sub.c"} and graph["pk.sub.c"] == {"pk.a"}
    assert graph["pk.d"] == set() and graph["pk.e"] == {"pk.d"}
    assert find_cycles(graph) == [["pk.a", "pk.b", "pk.sub.c"]]
    full = import_graph(_modules(pkg), lazy=True)
    assert full["pk.d"] == {"pk.e"} and find_cycles(full) == [["pk.a", "pk.b", "pk.sub.c"], ["pk.d", "pk.e"]]


@pytest.mark.parametrize("lazy", [False, True], ids=["import-time", "with-lazy-imports"])
def test_mlite_has_no_import_cycle(lazy):
    mods = _modules()
    assert "mlite.launch.rundir" in mods and "mlite.cli" in mods
    graph = import_graph(mods, lazy=lazy)
    assert "mlite.errors" in graph["mlite.launch.config"]  # the reader sees relative imports
    cycles = find_cycles(graph)
    assert not cycles, "import cycles in mlite/ (move the shared part into its own module): " + "; ".join(
        " <-> ".join(c) for c in cycles
    )


CONTRACTS = ("mlite.options", "mlite.rundir", "mlite.mesh.checks", "mlite.errors", "mlite.units")
"""The contracts layer of the README's Architecture section."""
CONTRACT_VOCABULARY = {
    "mlite.mesh.axes",
    "mlite.mesh.config",
    "mlite.mesh.layout",
    "mlite.mesh.rules",
    "mlite.models",
}
"""Logic modules the contracts may read: the dataclasses and vocabularies they describe (TrainingOptions' GPU names
and recompute granularities, the mesh's axes, config and layout, ModelSpec for typing)."""


def _in(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_the_layers_import_downwards_only():
    """README, Architecture: views (``mlite.cli``) import logic and contracts, never the other way; the contracts
    import each other and only the vocabularies above; nothing in ``mlite/`` imports ``widgets``."""
    mods = _modules()
    graph = import_graph(mods, lazy=True)
    for mod, targets in graph.items():
        if not _in(mod, ("mlite.cli", "mlite.__main__")):
            assert not [t for t in targets if _in(t, ("mlite.cli",))], f"{mod} imports the CLI"
        if _in(mod, CONTRACTS):
            extra = {t for t in targets if not _in(t, CONTRACTS) and t not in CONTRACT_VOCABULARY}
            assert not extra, f"contract {mod} imports logic {sorted(extra)}"
    for mod, path in mods.items():
        for node in _all_import_nodes(ast.parse(path.read_text(encoding="utf-8")).body):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not [n for n in names if n == "widgets" or n.startswith("widgets.")], f"{mod} imports widgets"


# ---------------------------------------------------------------------------------------------- the layers, transitively
_BASE = frozenset({"errors", "units", "paths"})
LAYERS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "units": frozenset(),
    "paths": frozenset(),
    "rundir": _BASE,
    "mesh": _BASE | {"models"},
    "models": _BASE,
    "options": _BASE | {"mesh", "models"},
    "shell": _BASE,
    "logs": _BASE | {"rundir"},
    "synth": _BASE | {"rundir", "logs"},
    "memory": _BASE | {"mesh", "models", "options"},
    "runtime": _BASE | {"mesh", "models", "options"},
    "export": _BASE | {"mesh", "models", "options", "memory", "shell", "time"},
    "launch": _BASE | {"mesh", "models", "options", "memory", "runtime", "rundir"},
    "validation": _BASE
    | {"mesh", "models", "options", "memory", "runtime", "rundir", "logs", "export", "shell", "time"},
    "verl_engine": _BASE | {"mesh", "models", "options", "memory", "runtime", "rundir", "launch"},
    "time": _BASE | {"mesh", "models", "options", "memory", "runtime", "rundir", "launch"},
    "check": _BASE | {"mesh", "models", "options", "memory", "runtime", "rundir", "launch", "export", "shell", "time"},
}
"""README, Architecture: each package of ``mlite/`` -> the packages it may load (directly or through others).
``mlite.cli`` (the views) may load all of them; ``options`` sits just above ``mesh`` and ``models``; ``memory`` (the
estimator) and ``runtime`` (the lite runtime) never load each other."""


def _package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_is_in_the_layer_table():
    pkgs = {_package(m) for m in _modules()} - {"", "cli", "__main__", "_data"}
    assert pkgs == set(LAYERS), f"add {sorted(pkgs - set(LAYERS))} to LAYERS (and to the README's table)"


def test_the_layers_hold_transitively_with_lazy_imports():
    """The closure of the full import graph (imports inside functions too): what a call may end up loading."""
    graph = import_graph(_modules(), lazy=True)
    closure: dict[str, set[str]] = {}

    def reach(m: str) -> set[str]:
        if m not in closure:
            closure[m] = set()
            todo, seen = list(graph[m]), set()
            while todo:
                t = todo.pop()
                if t not in seen:
                    seen.add(t)
                    todo.extend(graph[t])
            closure[m] = seen
        return closure[m]

    bad = []
    for mod in graph:
        pkg = _package(mod)
        if pkg not in LAYERS:
            continue
        extra = {_package(t) for t in reach(mod)} - LAYERS[pkg] - {pkg, ""}
        if extra:
            bad.append(f"{mod} reaches {sorted(extra)}")
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_what_import_really_loads():
    """``import mlite.X`` in a fresh interpreter loads only X's layers below it, and no UI library."""
    import json
    import subprocess
    import sys

    code = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"
        "importlib.import_module('mlite.' + sys.argv[1])\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    loaded: dict[str, list[str]] = {}
    for pkg in LAYERS:  # one fresh interpreter each: an earlier import would hide what this one loads
        r = subprocess.run([sys.executable, "-c", code, pkg], capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 0, f"import mlite.{pkg} failed: {r.stderr.strip().splitlines()[-1:]}"
        loaded[pkg] = json.loads(r.stdout)
    bad = []
    for pkg, mods in loaded.items():
        extra = {_package(m) for m in mods if m.startswith("mlite.")} - LAYERS[pkg] - {pkg, ""}
        ui = [m for m in mods if m.split(".")[0] in ("ipywidgets", "matplotlib", "IPython")]
        if extra or ui:
            bad.append(f"import mlite.{pkg} loads {sorted(extra)} {ui}")
    assert not bad, "\n".join(bad)
