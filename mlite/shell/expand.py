"""Expansion for :mod:`mlite.shell.lex`: ``$X``, ``${X}``, ``${X:-default}`` (nested), ``${X-d}``,
``${X:=d}``, ``${X:+w}``, ``${X:?msg}``, ``"${ARR[@]}"``, ``$((NNODES * 8))``, ``"$@"`` (no extra arguments), quotes and
backslashes, and bash's field splitting of unquoted expansions (``${ENGINE_CONFIG}`` holding several overrides,
``${ENTRYPOINT}`` holding ``-m verl.trainer.sft_trainer``). Unknown variables and ``$(...)`` stay in the text and
are reported, with the variables each value was computed from (so a warning can name the override they reach).
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SCRIPT_DIR = re.compile(r"\$\((cd\s+)?[\"']?\$\(dirname[^)]*\)[\"']?(\s*(&&|;)\s*pwd)?\)|\$\(dirname[^)]*\)")
"""``$(dirname "$0")``, ``$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)``: the folder of the script being read."""
SPLIT = "\x00"
"""Marks where an unquoted expansion's whitespace splits a word into several (bash's field splitting)."""

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _arith(expr: str) -> int:
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = ev(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, (ast.Div, ast.FloorDiv)):
                if b == 0:
                    raise ZeroDivisionError
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if type(n.op) in _OPS:
                return _OPS[type(n.op)](a, b)
        raise ValueError(expr)

    return ev(ast.parse(expr.replace("/", "//"), mode="eval"))


@dataclass
class Shell:
    """Variables and what could not be resolved while expanding."""

    vars: dict = field(default_factory=dict)
    """Name -> str, or list[str] for arrays."""
    unresolved: set = field(default_factory=set)
    """Names (or ``$(...)`` texts) that expanded to nothing known during the last :meth:`expand`."""
    taint: dict = field(default_factory=dict)
    """Name -> what could not be resolved when the variable was assigned (carried into every use)."""
    used: set = field(default_factory=set)
    """Variables read during the last :meth:`expand` (with the variables their values came from)."""
    deps: dict = field(default_factory=dict)
    """Name -> variables its value was computed from (one set per element for arrays)."""
    required: dict = field(default_factory=dict)
    """Name -> message of a ``${NAME:?message}`` whose variable was unset or empty (the script would stop there)."""
    script_dir: str | None = None
    """The folder of the script read (:data:`SCRIPT_DIR` expands to it), None for a command line without a file."""

    def lookup(self, name: str):
        """A variable's value (str or list, None when unset); its taint joins :attr:`unresolved`."""
        v = self.vars.get(name)
        self.used.add(name)
        for store, into in ((self.taint, self.unresolved), (self.deps, self.used)):
            t = store.get(name)
            if v is not None and t:
                into |= set().union(*t) if isinstance(t, list) else t
        return v

    def expand_each(self, raw: str) -> list[tuple[str, set, set]]:
        """Like :meth:`expand`, with what could not be resolved and which variables were read, per word."""
        m = re.fullmatch(r'"?\$\{([A-Za-z_]\w*)\[[@*]\]\}"?', raw)
        if m and isinstance(self.vars.get(m.group(1)), list):
            name = m.group(1)
            v, t, d = self.vars[name], self.taint.get(name), self.deps.get(name)
            return [(x, _pick(t, i), _pick(d, i) | {name}) for i, x in enumerate(v)]
        self.unresolved, self.used = set(), set()
        out = self.expand(raw)
        return [(x, set(self.unresolved), set(self.used)) for x in out]

    def assign(
        self, name: str, value, taint: list[set] | set | None = None, deps: list[set] | set | None = None
    ) -> None:
        """Set ``name``; what was unresolved / read while computing ``value`` stays attached to it (``taint`` and
        ``deps``: one set per element of an array)."""
        self.vars[name] = value
        for store, given, cur in ((self.taint, taint, self.unresolved), (self.deps, deps, self.used)):
            if given is not None:
                store[name] = given
            elif cur:
                store[name] = set(cur)
            else:
                store.pop(name, None)

    # a word -> list of words (arrays and "$@" may give several or none)
    def expand(self, raw: str) -> list[str]:
        m = re.fullmatch(r'"?\$\{([A-Za-z_]\w*)\[[@*]\]\}"?', raw)
        if m:
            v = self.lookup(m.group(1))
            if v is None:
                self.unresolved.add(m.group(1))
                return []
            return list(v) if isinstance(v, list) else [v]
        if raw in ('"$@"', "$@", '"$*"', "$*", '"${@}"'):
            return []
        out = self._expand_text(raw, quoted=False)
        if SPLIT in out or (not out and "$" in raw and not re.search("[\"']", raw)):
            return [w for w in out.split(SPLIT) if w]  # an unquoted expansion: split on whitespace, empty -> none
        return [out]

    def _expand_text(self, s: str, quoted: bool) -> str:
        out, i = [], 0
        while i < len(s):
            c = s[i]
            if c == "'" and not quoted:
                j = s.index("'", i + 1) if "'" in s[i + 1 :] else len(s)
                out.append(s[i + 1 : j])
                i = j + 1
            elif c == '"' and not quoted:
                j, depth = i + 1, 0
                while j < len(s):
                    if s[j] == "\\":
                        j += 2
                        continue
                    if s[j : j + 2] in ("${", "$("):
                        depth += 1
                    elif s[j] in "})" and depth:
                        depth -= 1
                    elif s[j] == '"' and not depth:
                        break
                    j += 1
                out.append(self._expand_text(s[i + 1 : j], quoted=True))
                i = j + 1
            elif c == "\\":
                nxt = s[i + 1 : i + 2]
                if nxt != "\n":  # backslash-newline: a line continuation, quoted or not
                    out.append(nxt if (not quoted or nxt in '$`"\\') else "\\" + nxt)
                i += 2
            elif c == "$":
                start = i
                text, i = self._dollar(s, i, quoted)
                if not quoted and (not s.startswith("$(", start) or s.startswith("$((", start)):
                    text = _mark_fields(text)
                out.append(text)
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def _dollar(self, s: str, i: int, quoted: bool = False) -> tuple[str, int]:
        if s.startswith("$((", i):
            j = _match(s, i + 1, "(", ")")
            inner = s[i + 3 : j - 1]
            try:
                body = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", self._expand_text(inner, quoted=True))
                unknown = False

                def name(m):
                    nonlocal unknown
                    v = self.lookup(m.group(0))
                    if v is None or isinstance(v, list) or not re.fullmatch(r"-?\d+", str(v).strip()):
                        unknown = True
                        self.unresolved.add(m.group(0))
                        return "0"
                    return str(v).strip()

                body = _NAME.sub(name, body)
                if unknown:
                    return s[i : j + 1], j + 1
                return str(_arith(body.strip())), j + 1
            except (ValueError, SyntaxError, ZeroDivisionError):
                self.unresolved.add(f"$(({inner}))")
                return s[i : j + 1], j + 1
        if s.startswith("$(", i):
            j = _match(s, i + 1, "(", ")")
            if self.script_dir is not None and SCRIPT_DIR.fullmatch(s, i, j + 1):
                return self.script_dir, j + 1
            self.unresolved.add(s[i : j + 1])
            return s[i : j + 1], j + 1
        if s.startswith("${", i):
            j = _match(s, i + 1, "{", "}")
            return self._brace(s[i + 2 : j], quoted), j + 1
        m = _NAME.match(s, i + 1)
        if m:
            v = self._value(m.group(0))
            if v is None:
                self.unresolved.add(m.group(0))
                return "${" + m.group(0) + "}", m.end()
            return v, m.end()
        if s[i + 1 : i + 2] in ("@", "*"):
            return "", i + 2
        return "$", i + 1

    def _value(self, name: str):
        v = self.lookup(name)
        return " ".join(v) if isinstance(v, list) else v

    def _brace(self, body: str, quoted: bool = False) -> str:
        if body.startswith("#"):
            v = self.vars.get(body[1:].split("[")[0])
            return str(len(v) if isinstance(v, list) else len(v or ""))
        m = re.match(r"([A-Za-z_]\w*)(\[[^\]]*\])?(:?[-=+?])?(.*)$", body, re.DOTALL)
        if not m:
            self.unresolved.add("${" + body + "}")
            return "${" + body + "}"
        name, idx, op, word = m.group(1), m.group(2), m.group(3), m.group(4)
        v = self.lookup(name)
        if idx and isinstance(v, list):
            k = idx[1:-1]
            v = " ".join(v) if k in "@*" else (v[int(k)] if k.isdigit() and int(k) < len(v) else None)
        elif isinstance(v, list):
            v = v[0] if v else ""
        empty = v is None or ((op or "").startswith(":") and v == "")
        if op in (":-", "-"):
            if (v is None if op == "-" else empty) or v is None:  # (empty includes unset)
                return self._expand_text(word, quoted=quoted)
            return v
        if op in (":=", "="):
            if (v is None if op == "=" else empty) or v is None:  # (empty includes unset)
                v = self._expand_text(word, quoted=quoted).replace(SPLIT, " ")
                self.assign(name, v)
            return v
        if op in (":+", "+"):
            return "" if (v is None if op == "+" else empty) else self._expand_text(word, quoted=quoted)
        if op in (":?", "?") and (v is None if op == "?" else empty):
            self.required.setdefault(name, self._expand_text(word, quoted=True).replace(SPLIT, " "))
            return v or ""
        if v is None:
            self.unresolved.add(name)
            return "${" + name + "}"
        return v


def _pick(store, i: int) -> set:
    """Element ``i``'s set of a per-element store (arrays), or the store itself (strings)."""
    return set(store[i]) if isinstance(store, list) else set(store or ())


def _mark_fields(text: str) -> str:
    """Whitespace of an unquoted expansion's value -> :data:`SPLIT`, except inside a ``$(...)`` that stayed
    unexpanded (it is reported whole, not as the words of its command line)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$(", i):
            j = _match(text, i + 1, "(", ")")
            out.append(text[i : j + 1])
            i = j + 1
        elif text[i] in " \t\n":
            out.append(SPLIT)
            while i < len(text) and text[i] in " \t\n":
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _match(s: str, i: int, o: str, c: str) -> int:
    depth, j = 0, i
    while j < len(s):
        ch = s[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "'" and o == "{":
            k = s.find("'", j + 1)
            j = (k if k >= 0 else len(s) - 1) + 1
            continue
        if ch == o:
            depth += 1
        elif ch == c:
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return len(s) - 1


def case_matches(pattern: str, word: str) -> bool:
    """A ``case`` pattern (``a|b*``) against a word."""
    return any(fnmatch.fnmatchcase(word, p.strip().strip("'\"")) for p in pattern.split("|"))
