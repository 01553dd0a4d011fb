"""Run the reader of :mod:`mlite.shell.lex` over a launcher: assignments in order, ``case`` branches, ``source`` /
``.`` / ``exec`` / ``bash`` of a sibling script (read in the same shell), and the verl launch line(s) with every word
expanded. Nothing is executed.

A ``case`` whose selector comes from a command substitution (``DEVICE=$(python3 -c 'import torch_npu' ... && echo
npu || echo gpu)``) takes the ``gpu`` branch and says so in :attr:`ScriptResult.notes`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .expand import SCRIPT_DIR, SPLIT, Shell, case_matches
from .lex import _ASSIGN, _BLOCK_OPEN, Command, lex
from .slurm import SlurmValue, sbatch_values

ENTRY_MODULES = (
    "verl.trainer.main_ppo",
    "verl.trainer.sft_trainer",
    "verl.trainer.sft_trainer_ray",
    "verl.trainer.fsdp_sft_trainer",
    "verl.trainer.main_ppo_v0",
)
"""verl entry points whose arguments are Hydra overrides (more are recognised by :data:`ENTRY_PATTERN` after ``-m``)."""
ENTRY_PATTERN = re.compile(r"(verl\.trainer\.[\w.]+|verl\.experimental\.[\w.]+|recipe\.\w+(\.\w+)*\.main_\w+)")
"""Other verl entry points launched with ``-m``: trainers, ``verl.experimental...`` mains, recipes'
``recipe.<name>.main_<name>``."""
HYDRA_ROOTS = ("actor_rollout_ref.", "data.", "trainer.", "model.", "engine.")
"""Keys under which an argument is a verl Hydra override: a Python entry point given one is a launch line
(``python ../qwen3/verl_entrypoint.py ...``, ``python3 -m main_gkd ...``), whatever the module is called."""
_PYTHON = re.compile(r"(.*/)?python(\d+(\.\d+)*)?")
GPU_BRANCH = "gpu"
"""The ``case`` word used when the selector is a command substitution (a device probe)."""
_FOLLOW = ("source", ".", "exec", "bash", "sh")
_MAX_DEPTH = 4

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
    """Things the reader did, or did not follow (``source``, ``case`` words it chose or could not resolve)."""
    unfollowed: list[str] = field(default_factory=list)
    """Scripts it was asked to read (``source``, ``exec``) but could not: ``FILE (why)``."""
    followed: list[str] = field(default_factory=list)
    """Sibling scripts it read."""
    prints: list[str] = field(default_factory=list)
    """What ``echo`` / ``printf`` commands outside blocks print (to tell a stub that only prints)."""
    commands: int = 0
    """Commands other than assignments, ``set``, ``export``, ``echo``, ``exit`` outside blocks."""
    unset_commands: list[tuple[int, str]] = field(default_factory=list)
    """``(line, variable)`` of commands whose first word is a variable that is not set (``$COMMAND ...``)."""
    skipped: list[Command] = field(default_factory=list)
    """Commands inside blocks that were not run (searched for a launch line when there is none outside)."""
    slurm: dict[str, SlurmValue] = field(default_factory=dict)
    """``SLURM_*`` values the ``#SBATCH`` headers set (and ``env`` did not), by name (:mod:`.slurm`)."""
    exported: dict[str, int] = field(default_factory=dict)
    """Variables the script puts in the environment of the commands it runs, by name -> the line that did it (the
    last): ``export NAME=...``, ``export NAME``, ``declare -x NAME=...``, and ``NAME=... cmd`` before a command run at
    the top level (the launch line's own prefix assignments included). Their values are :attr:`Shell.vars`."""


def _is_assign(w) -> bool:
    return (isinstance(w, tuple) and w[0] != "__pattern__") or (isinstance(w, str) and bool(_ASSIGN.match(w)))


def _assigned_name(w) -> str:
    """The variable an assignment word (one :func:`_is_assign` accepts) sets."""
    if isinstance(w, tuple):
        return w[0].rstrip("+")
    m = _ASSIGN.match(w)
    assert m is not None, w  # callers check _is_assign first
    return m.group(1)


def _assign(sh: Shell, w) -> str:
    sh.unresolved, sh.used = set(), set()
    if isinstance(w, tuple):
        name, elems = w
        parts = [p for e in elems for p in sh.expand_each(e)]
        values, taint, deps = [v for v, _, _ in parts], [t for _, t, _ in parts], [d for _, _, d in parts]
        if name.endswith("+"):  # ARR+=( ... ): append
            name = name[:-1]
            old = sh.vars.get(name)
            old = old if isinstance(old, list) else ([old] if old else [])
            n = len(old)

            def pad(store):
                return (store.get(name) if isinstance(store.get(name), list) else [set()] * n)[:n]

            values, taint, deps = old + values, pad(sh.taint) + taint, pad(sh.deps) + deps
        sh.assign(name, values, taint=taint, deps=deps)
        return name
    m = _ASSIGN.match(w)
    assert m is not None, w  # only assignment words come here (_is_assign)
    name, append, raw = m.group(1), m.group(2), w[m.end() :]
    val = sh._expand_text(raw, quoted=False).replace(SPLIT, " ")
    if append and isinstance(sh.vars.get(name), list):
        sh.assign(name, sh.vars[name] + [val])
    else:
        sh.assign(name, (sh.vars.get(name) or "") + val if append else val)
    return name


def _is_override_of_verl(word: str) -> bool:
    """Whether a word is a Hydra override (``key=v``, ``+key=v``, ``++key=v``, ``~key``) of a verl config key."""
    key = word.lstrip("+~").split("=", 1)[0]
    return ("=" in word or word.startswith("~")) and key.startswith(HYDRA_ROOTS)


def _python_entry(words: list[str]) -> int | None:
    """The index of the module (``-m M``) or script (``F.py``) a ``python`` command runs, when the arguments after
    it are verl Hydra overrides; None otherwise."""
    for k, w in enumerate(words):
        if not _PYTHON.fullmatch(w):
            continue
        j = k + 1
        while j < len(words) and words[j].startswith("-") and words[j] != "-m":
            j += 1  # interpreter flags (-u, -X ...)
        if j < len(words) and words[j] == "-m":
            j += 1
        elif j >= len(words) or not words[j].endswith(".py"):
            return None
        if j < len(words) and any(_is_override_of_verl(a) for a in words[j + 1 :]):
            return j
        return None
    return None


def _find_launch(sh: Shell, cmd: Command, in_block: bool) -> Launch | None:
    text = " ".join(w if isinstance(w, str) else w[0] for w in cmd.words)
    if not any(t in text for t in ("verl", "recipe.", "$", *HYDRA_ROOTS)):
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
        if w in ENTRY_MODULES or (k and words[k - 1] == "-m" and ENTRY_PATTERN.fullmatch(w)):
            return Launch(words=words, unresolved=unres, used=used, entry=k, line=cmd.line, in_block=in_block)
    entry = _python_entry(words)
    if entry is not None:
        return Launch(words=words, unresolved=unres, used=used, entry=entry, line=cmd.line, in_block=in_block)
    return None


def run_script(text: str, env: dict | None = None, *, path: str | Path | None = None) -> ScriptResult:
    """Read ``text`` (a script, or a resolved command line) with ``env`` as the only outside variables; ``path`` (the
    file ``text`` came from) lets ``source`` / ``exec`` of a sibling script be followed."""
    res = ScriptResult(shell=Shell(vars=dict(env or {}), script_dir=str(Path(path).resolve().parent) if path else None))
    res.slurm = {k: v for k, v in sbatch_values(text).items() if k not in res.shell.vars}  # --env wins
    res.shell.vars.update({k: v.value for k, v in res.slurm.items()})
    _run(res, text, Path(path) if path else None, 0)
    if not res.launches:
        for cmd in res.skipped:
            launch = _find_launch(
                res.shell,
                Command([w for w in cmd.words if not _is_assign(w)] or cmd.words, line=cmd.line),
                in_block=True,
            )
            if launch:
                res.launches.append(launch)
    return res


def _sibling(sh: Shell, words: list, here: Path | None) -> tuple[Path | None, str]:
    """The script a ``source`` / ``exec`` word names, resolved next to ``here``: ``(path or None, shown name)``."""
    raw = words[1] if len(words) > 1 and isinstance(words[1], str) else ""
    if raw in ("-c", "-e", "-x", "-u") or raw.startswith("-"):
        raw = next((w for w in words[2:] if isinstance(w, str) and not w.startswith("-")), "")
    if not raw:
        return None, ""
    # $(dirname "$0"), $(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd): the script's own folder
    raw = SCRIPT_DIR.sub(".", raw)
    sh.unresolved = set()
    name = (sh.expand(raw) or [""])[0]
    if sh.unresolved or not name or here is None:
        return None, name or raw
    p = Path(name).expanduser()
    return (p if p.is_absolute() else here.parent / p), name


def _run(res: ScriptResult, text: str, here: Path | None, level: int) -> None:
    """Run the commands of ``text`` in order on ``res`` (the sibling script ``here`` is read at nesting ``level``)."""
    _Runner(res, here, level).run(lex(text))


def _keyword(words: list) -> str | None:
    return words[0] if words and isinstance(words[0], str) else None


def _opens_block(first: str | None, words: list) -> bool:
    """Whether a command starts a block that is not run: ``if`` / a loop, ``{``, ``function f {``."""
    return first in _BLOCK_OPEN or first == "{" or (first == "function" and "{" in words)


def _unset(res: ScriptResult, words: list) -> None:
    for w in words[1:]:
        if isinstance(w, str):
            res.shell.vars.pop(w, None)


def _print(res: ScriptResult, words: list) -> None:
    sh = res.shell
    sh.unresolved = set()
    res.prints.append(" ".join(x for w in words[1:] if isinstance(w, str) for x in sh.expand(w)))


def _colon(res: ScriptResult, words: list) -> None:
    """``: "${X:=default}"``, ``: "${X:?message}"``: only the expansion's side effects."""
    for w in words[1:]:
        if isinstance(w, str):
            res.shell.expand(w)


def _ignore(res: ScriptResult, words: list) -> None:
    """A builtin with no effect on the words of a launch line."""


_BUILTINS = {
    "unset": _unset,
    "echo": _print,
    "printf": _print,
    ":": _colon,
    **dict.fromkeys(("set", "exit", "cd", "mkdir", "pushd", "popd", "trap", "shopt", "ulimit", "true"), _ignore),
}
"""Commands read for their effect on the variables or :attr:`ScriptResult.prints`, not counted as commands."""


class _Runner:
    """The state of one :func:`_run`: open ``if`` / ``case`` / other blocks and the status of the last command."""

    def __init__(self, res: ScriptResult, here: Path | None, level: int):
        self.res, self.sh, self.here, self.level = res, res.shell, here, level
        self.depth = 0  # nesting of blocks that are not run
        self.cases: list[dict] = []
        self.status: bool | None = True  # of the last command run at the top level (None: a test not read)
        self.unknown_test = ""  # the test that made it None
        self.ifs: list[dict] = []  # if-blocks whose condition was read: {"taken", "done", "nest", "then", "unknown"}
        self.cmds: list[Command] = []

    def run(self, cmds: list[Command]) -> None:
        self.cmds = cmds
        for k, cmd in enumerate(cmds):  # an ``else cmd`` inserts ``cmd`` after itself
            self.step(k, cmd)

    def top_level(self) -> bool:
        """Outside any block that is not run and any ``case`` branch that is not taken."""
        return self.depth == 0 and not cases_inactive(self.cases)

    def step(self, k: int, cmd: Command) -> None:
        words = list(cmd.words)
        if _keyword(words) == "then" and self.ifs and self.ifs[-1]["then"]:
            self.ifs[-1]["then"] = False
            words = words[1:]
            if not words:
                return
        kw = _keyword(words)
        if self.ifs and not self.ifs[-1]["taken"]:
            self.skip_branch(k, cmd, words, kw)
            return
        if self.if_control(k, words, kw):
            return
        if self.top_level() and self.list_step(cmd, words):
            return
        words = self.case_pattern(words)
        if not words:
            return
        first = words[0] if isinstance(words[0], str) else None
        if first == "esac" and self.depth == 0:
            self.esac()
        elif self.depth or cases_inactive(self.cases):
            self.in_block(cmd, words, first)
        elif first == "case":
            self.cases.append(_case(self.res, words, cmd.line))
        elif _opens_block(first, words):
            self.depth += 1
            self.res.skipped.append(Command(words, skipped=True, line=cmd.line))
        elif first in _DECL:
            flags = [w for w in words[1:] if isinstance(w, str) and w.startswith("-")]
            exports = (first == "export" and "-n" not in flags) or any("x" in f for f in flags)
            for w in words[1:]:
                if _is_assign(w):
                    name = _assign(self.sh, w)
                    if exports:
                        self.res.exported[name] = cmd.line
                elif exports and isinstance(w, str) and w.isidentifier():
                    self.res.exported[w] = cmd.line
        else:
            self.simple(cmd, words)

    def skip_branch(self, k: int, cmd: Command, words: list, kw: str | None) -> None:
        """Inside an ``if`` branch not taken: find the next branch or the ``fi``."""
        top = self.ifs[-1]
        if top["unknown"]:
            self.res.block_assignments |= {_assigned_name(w) for w in words if _is_assign(w)}
        if kw in _OPENERS:
            top["nest"] += 1
        elif kw in _CLOSERS and top["nest"]:
            top["nest"] -= 1
        elif top["nest"]:
            pass
        elif kw == "fi":
            self.ifs.pop()
        elif kw == "elif" and not top["done"]:
            r = _condition(self.sh, words, self.cmds, k)
            if r is None:
                top.update(done=True, unknown=True)
                self.res.notes.append(
                    f"line {cmd.line}: the elif condition could not be read; its branch and the "
                    "ones after it were not read"
                )
            else:
                top.update(taken=r, done=r, then=True)
        elif kw == "else" and not top["done"]:
            top.update(taken=True, done=True)
            if words[1:]:
                self.cmds.insert(k + 1, Command(words[1:], line=cmd.line))

    def if_control(self, k: int, words: list, kw: str | None) -> bool:
        """An ``if`` whose condition can be read, or the end of the branch that ran: whether ``words`` was one."""
        if not self.top_level():
            return False
        if self.ifs and kw in ("elif", "else", "fi"):
            if kw == "fi":
                self.ifs.pop()
            else:
                self.ifs[-1]["taken"] = False  # the branch that ran ends here; skip to the fi
            return True
        if kw == "if":
            r = _condition(self.sh, words, self.cmds, k)
            if r is not None:
                self.ifs.append({"taken": r, "done": r, "nest": 0, "then": True, "unknown": False})
                return True
        return False

    def list_step(self, cmd: Command, words: list) -> bool:
        """``&&`` / ``||`` lists and tests at the top level: whether the command was read (or not run) here."""
        if (cmd.after == "&&" and self.status is False) or (cmd.after == "||" and self.status is True):
            return True  # not run; the list's status stays
        guess = cmd.after and self.status is None
        if not cmd.after:
            self.status, self.unknown_test = True, ""
        if words and words[0] in ("[", "[[", "test"):
            self.status = _test(self.sh, words, cmd.line)
            if self.status is None:
                self.unknown_test = f"the test at line {cmd.line}"
            return True
        if guess and words and _is_assign(words[0]):
            # run on a test that could not be read: what it assigns is unresolved, not a guess
            for w in words:
                if _is_assign(w):
                    name = _assign(self.sh, w)
                    self.sh.taint[name] = {self.unknown_test or f"the test before line {cmd.line}"}
            return True
        return False

    def case_pattern(self, words: list) -> list:
        """A ``case`` pattern (``gpu)``) opens its branch when it matches; the words after it."""
        if not (words and isinstance(words[0], tuple) and words[0][0] == "__pattern__"):
            return words
        if self.cases and self.depth == 0:
            cs = self.cases[-1]
            cs["active"] = not cs["matched"] and cs["word"] is not None and case_matches(words[0][1], cs["word"])
            cs["matched"] |= cs["active"]
        return words[1:]

    def esac(self) -> None:
        if not self.cases:
            return
        cs = self.cases.pop()
        if cs.get("guess") and not cs["matched"]:
            self.res.notes.append(
                f"line {cs['line']}: no '{GPU_BRANCH}' branch in the case on {cs['raw']}; no branch was read"
            )

    def in_block(self, cmd: Command, words: list, first: str | None) -> None:
        """Inside a block that is not run, or a ``case`` branch not taken: track nesting, keep the command."""
        inactive = cases_inactive(self.cases)
        if _opens_block(first, words):
            self.depth += 1
        elif first in ("fi", "done", "}") and self.depth:
            self.depth -= 1
        if self.depth and not inactive:
            self.res.skipped.append(Command(words, skipped=True, line=cmd.line))
            self.res.block_assignments |= {_assigned_name(w) for w in words if _is_assign(w)}
        if first == "case" and inactive:
            self.cases.append({"word": None, "matched": True, "active": False})
        elif first == "esac" and self.cases:
            self.cases.pop()

    def simple(self, cmd: Command, words: list) -> None:
        """A simple command run at the top level: assignments, builtins, a launch line, ``source`` / ``exec``."""
        res, sh = self.res, self.sh
        prefix = []
        while words and _is_assign(words[0]):
            prefix.append(_assign(sh, words[0]))
            words = words[1:]
        if not words:
            return
        for name in prefix:  # NAME=... cmd: in the environment of cmd
            res.exported[name] = cmd.line
        head = words[0] if isinstance(words[0], str) else None
        if head in _BUILTINS:
            _BUILTINS[head](res, words)
            return
        launch = _find_launch(sh, Command(words, line=cmd.line), in_block=False)
        if launch:
            res.launches.append(launch)
            res.commands += 1
            return
        m = re.fullmatch(r'"?\$\{?([A-Za-z_]\w*)\}?"?', head) if head is not None else None
        if m and sh.vars.get(m.group(1)) is None and len(words) > 1:
            res.unset_commands.append((cmd.line, m.group(1)))
        exec_shell = head == "exec" and len(words) > 1 and words[1] in ("bash", "sh")
        if head in _FOLLOW or exec_shell:
            _follow(res, words[1:] if exec_shell else words, self.here, self.level, cmd.line)
            return
        res.commands += 1


_OPENERS = {"if", "case", "for", "while", "until", "select", "{"}
_CLOSERS = {"fi", "esac", "done", "}"}


def cases_inactive(cases: list[dict]) -> bool:
    return any(not cs["active"] for cs in cases)


def _condition(sh: Shell, words: list, cmds: list[Command], k: int) -> bool | None:
    """The value of ``if [ ... ]; then`` / ``elif [ ... ]; then``: a single test followed by ``then``; None when it is
    anything else (a list of tests, a command) or cannot be read."""
    nxt = cmds[k + 1].words if k + 1 < len(cmds) else []
    if len(words) < 2 or words[1] not in ("[", "[[", "test") or not nxt or nxt[0] != "then":
        return None
    return _test(sh, words[1:], 0)


def _case(res: ScriptResult, words: list, line: int) -> dict:
    """The state of a ``case``: its word, or the GPU branch when the word is a command substitution's output."""
    sh = res.shell
    sh.unresolved = set()
    raw = words[1] if len(words) > 1 and isinstance(words[1], str) else ""
    expanded = sh.expand(raw) if raw else []
    word = expanded[0] if expanded else ""
    cs = {"word": word, "matched": False, "active": False, "line": line, "raw": raw}
    if not sh.unresolved:
        return cs
    subs = sorted(u for u in sh.unresolved if u.startswith("$(") and not u.startswith("$(("))
    if subs and sh.unresolved == set(subs):
        m = re.fullmatch(r'"?\$\{?([A-Za-z_]\w*)\}?"?', raw)
        if m:  # later tests of the same variable agree with the branch taken
            sh.assign(m.group(1), GPU_BRANCH, taint=set(), deps=set())
        res.notes.append(
            f"line {line}: case on {raw} depends on {subs[0]}, which is not run: took the "
            f"'{GPU_BRANCH}' branch" + (f" (pass --env {m.group(1)}=... for another)" if m else "")
        )
        cs.update(word=GPU_BRANCH, guess=True)
        return cs
    res.notes.append(
        f"line {line}: case on {raw} could not be resolved ({', '.join(sorted(sh.unresolved))}); no branch was read"
    )
    cs["word"] = None
    return cs


def _follow(res: ScriptResult, words: list, here: Path | None, level: int, line: int) -> None:
    """Read a sibling script named by ``source`` / ``.`` / ``exec`` / ``bash`` in the same shell."""
    target, shown = _sibling(res.shell, words, here)
    verb = words[0]
    if target is None or level >= _MAX_DEPTH:
        why = "its path could not be expanded" if target is None else "too deeply nested"
        res.unfollowed.append(f"{shown or '?'} ({why})")
        res.notes.append(f"line {line}: '{verb} {shown}' was not followed ({why})")
        return
    if not target.is_file():
        res.unfollowed.append(f"{target} (no such file)")
        res.notes.append(f"line {line}: '{verb} {shown}' was not followed (no such file: {target})")
        return
    res.followed.append(str(target))
    res.notes.append(f"line {line}: read {target} ('{verb}')")
    _run(res, target.read_text(encoding="utf-8", errors="replace"), target, level + 1)


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


_INT_OPS = {
    "-gt": lambda a, b: a > b,
    "-ge": lambda a, b: a >= b,
    "-lt": lambda a, b: a < b,
    "-le": lambda a, b: a <= b,
    "-eq": lambda a, b: a == b,
    "-ne": lambda a, b: a != b,
}


def _test(sh: Shell, words: list, line: int) -> bool | None:
    """``[ A -gt B ]``, ``[ "$X" = y ]``, ``[ -z "$X" ]``, ``!``: True / False, None when an operand could not be
    expanded, reads a variable neither the script nor ``env`` sets, or the test is not one of these."""
    raw = [w for w in words[1:] if isinstance(w, str) and w not in ("]", "]]")]
    neg = bool(raw) and raw[0] == "!"
    raw = raw[1:] if neg else raw
    sh.unresolved = set()
    vals = [(sh.expand(w) or [""])[0] if re.search("[\"']", w) or "$" in w else w for w in raw]
    named = {m.group(1) for w in raw for m in re.finditer(r"\$\{?([A-Za-z_]\w*)", w)}
    if sh.unresolved or any(sh.vars.get(n) is None for n in named):
        return None  # a substitution, or a variable from the environment nobody gave (--env): not known here
    out = None
    if len(vals) == 3 and vals[1] in _INT_OPS:
        try:
            out = _INT_OPS[vals[1]](int(vals[0]), int(vals[2]))
        except ValueError:
            return None
    elif len(vals) == 3 and vals[1] in ("=", "==", "!="):
        out = (vals[0] == vals[2]) == (vals[1] != "!=")
    elif len(vals) == 2 and vals[0] in ("-z", "-n"):
        out = (vals[1] == "") == (vals[0] == "-z")
    elif len(vals) == 1:
        out = vals[0] != ""
    if out is None:
        return None
    return not out if neg else out
