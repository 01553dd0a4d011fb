"""Run the reader of :mod:`mlite.export.shell` over a launcher: assignments in order, ``case`` branches, and the
verl launch line(s) with every word expanded. Nothing is executed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .expand import Shell, case_matches
from .shell import _ASSIGN, _BLOCK_OPEN, Command, lex

ENTRY_MODULES = ("verl.trainer.main_ppo", "verl.trainer.sft_trainer", "verl.trainer.sft_trainer_ray",
                 "verl.trainer.fsdp_sft_trainer", "verl.trainer.main_ppo_v0")
"""verl entry points whose arguments are Hydra overrides."""

_PREFIX_WORDS = {"exec", "command", "env", "nohup", "time", "builtin"}
_DECL = {"export", "declare", "local", "readonly", "typeset"}


@dataclass
class Launch:
    """A verl launch line, expanded."""

    words: list[str]
    """All words of the command."""
    unresolved: list[list[str]]
    """Per word: the variables / substitutions that could not be resolved."""
    used: list[set]
    """Per word: the variables it was computed from."""
    entry: int
    """Index of the entry module in :attr:`words`."""
    line: int
    """Line of the script where the command starts."""
    in_block: bool = False
    """Found inside an ``if`` / loop / function body (used only when there is no launch line outside)."""

    @property
    def module(self) -> str:
        return self.words[self.entry]


@dataclass
class ScriptResult:
    """What reading a script found."""

    launches: list[Launch] = field(default_factory=list)
    """Every verl launch line, in order."""
    shell: Shell = field(default_factory=Shell)
    """Variables after the run."""
    block_assignments: set = field(default_factory=set)
    """Variables assigned only inside blocks that were not run (``if``, loops, functions)."""
    notes: list[str] = field(default_factory=list)
    """Things the reader did not follow (``source``, unresolved ``case`` words)."""


def _is_assign(w) -> bool:
    return isinstance(w, tuple) and w[0] != "__pattern__" or isinstance(w, str) and bool(_ASSIGN.match(w))


def _assign(sh: Shell, w) -> str:
    sh.unresolved, sh.used = set(), set()
    if isinstance(w, tuple):
        name, elems = w
        parts = [p for e in elems for p in sh.expand_each(e)]
        sh.assign(name, [v for v, _, _ in parts], taint=[t for _, t, _ in parts], deps=[d for _, _, d in parts])
        return name
    m = _ASSIGN.match(w)
    name, append, raw = m.group(1), m.group(2), w[m.end():]
    val = sh._expand_text(raw, quoted=False)
    if append and isinstance(sh.vars.get(name), list):
        sh.assign(name, sh.vars[name] + [val])
    else:
        sh.assign(name, (sh.vars.get(name) or "") + val if append else val)
    return name


def _find_launch(sh: Shell, cmd: Command, in_block: bool) -> Launch | None:
    text = " ".join(w if isinstance(w, str) else w[0] for w in cmd.words)
    if "verl" not in text and "${" not in text and "$" not in text:
        return None
    words, unres, used = [], [], []
    for w in cmd.words:
        if not isinstance(w, str):
            continue
        for word, t, d in sh.expand_each(w):
            words.append(word)
            unres.append(sorted(t))
            used.append(d)
    while words and (set(words[0]) == {"+"} or words[0] in _PREFIX_WORDS):
        words, unres, used = words[1:], unres[1:], used[1:]
    for k, w in enumerate(words):
        if w in ENTRY_MODULES:
            return Launch(words=words, unresolved=unres, used=used, entry=k, line=cmd.line, in_block=in_block)
    return None


def run_script(text: str, env: dict | None = None) -> ScriptResult:
    """Read ``text`` (a script, or a resolved command line) with ``env`` as the only outside variables."""
    res = ScriptResult(shell=Shell(vars=dict(env or {})))
    sh = res.shell
    depth = 0
    cases: list[dict] = []
    skipped: list[Command] = []
    for cmd in lex(text):
        words = list(cmd.words)
        if words and isinstance(words[0], tuple) and words[0][0] == "__pattern__":
            if cases and depth == 0:
                cs = cases[-1]
                cs["active"] = not cs["matched"] and cs["word"] is not None and case_matches(words[0][1], cs["word"])
                cs["matched"] |= cs["active"]
            words = words[1:]
            if not words:
                continue
        first = words[0] if isinstance(words[0], str) else None
        if first == "esac" and depth == 0:
            if cases:
                cases.pop()
            continue
        inactive = any(not cs["active"] for cs in cases)
        if depth or inactive:
            if first in _BLOCK_OPEN or first == "{" or (first == "function" and "{" in words):
                depth += 1
            elif first in ("fi", "done", "}") and depth:
                depth -= 1
            if depth and not inactive:
                skipped.append(Command(words, skipped=True, line=cmd.line))
                res.block_assignments |= {w[0] if isinstance(w, tuple) else _ASSIGN.match(w).group(1)
                                          for w in words if _is_assign(w)}
            if first == "case" and inactive:
                cases.append({"word": None, "matched": True, "active": False})
            elif first == "esac" and cases:
                cases.pop()
            continue
        if first == "case":
            sh.unresolved = set()
            word = sh.expand(words[1])[0] if len(words) > 1 else ""
            if sh.unresolved:
                res.notes.append(f"line {cmd.line}: case on {words[1]} could not be resolved "
                                 f"({', '.join(sorted(sh.unresolved))}); no branch was read")
                word = None
            cases.append({"word": word, "matched": False, "active": False})
            continue
        if first in _BLOCK_OPEN or first == "{" or (first == "function" and "{" in words):
            depth += 1
            skipped.append(Command(words, skipped=True, line=cmd.line))
            continue
        if first in _DECL:
            for w in words[1:]:
                if _is_assign(w):
                    _assign(sh, w)
            continue
        while words and _is_assign(words[0]):
            _assign(sh, words[0])
            words = words[1:]
        if not words:
            continue
        if words[0] == "unset":
            for w in words[1:]:
                if isinstance(w, str):
                    sh.vars.pop(w, None)
            continue
        if words[0] in ("source", "."):
            res.notes.append(f"line {cmd.line}: '{words[0]} {words[1] if len(words) > 1 else ''}' was not followed")
            continue
        launch = _find_launch(sh, Command(words, line=cmd.line), in_block=False)
        if launch:
            res.launches.append(launch)
    if not res.launches:
        for cmd in skipped:
            launch = _find_launch(sh, Command([w for w in cmd.words if not _is_assign(w)] or cmd.words,
                                              line=cmd.line), in_block=True)
            if launch:
                res.launches.append(launch)
    return res


def uses_launcher_rule(text: str) -> bool:
    """Whether a script computes DP with verl's mlite launcher rule: its code divides by ``(TP * EP)``, or its
    comment states ``ngpu / pp = tp * ep * dp = etp * ep * edp`` as verl's mlite examples do."""
    for line in text.splitlines():
        t = line.replace(" ", "").lower()
        if t.startswith("#"):
            if "ngpu/pp=tp*ep*dp=etp*ep*edp" in t:
                return True
        elif re.search(r"/\(\$?\{?tp\}?\*\$?\{?ep\}?\)", t):
            return True
    return False
