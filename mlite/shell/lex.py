"""A small reader for the bash that verl launchers are written in: enough to recover the words a launch line
passes to ``python3 -m verl.trainer.main_ppo`` / ``torchrun ... verl.trainer.sft_trainer``.

This module lexes: quotes, ``\\`` continuations, comments, redirections, bash arrays (``ACTOR=( ... )``), ``case``
patterns, ``(( ... ))``. :mod:`.expand` expands words; :mod:`.script` runs the commands in order (assignments,
the matching ``case`` branch; ``if`` / loops / functions are not run). Nothing is executed and the process
environment is not read: only ``env`` given by the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_BLOCK_OPEN = {"if": "fi", "for": "done", "while": "done", "until": "done", "select": "done"}


@dataclass
class Command:
    """A simple command: raw words (quotes kept), and whether it sat inside a block that was not run."""

    words: list
    """Raw words; an array assignment is a tuple ``(name, [raw elements])``."""
    skipped: bool = False
    """Inside an ``if`` / loop / function body."""
    line: int = 0
    """1-based line where it starts."""
    after: str = ""
    """The operator before it in a list: ``&&``, ``||`` (run on the previous command's status), else ``""``."""


class _Lexer:
    def __init__(self, text: str):
        self.s, self.i, self.line = text, 0, 1
        self.cmds: list[Command] = []
        self.case_depth = 0
        self.expect_pattern = False

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def adv(self, n: int = 1) -> str:
        out = self.s[self.i : self.i + n]
        self.line += out.count("\n")
        self.i += n
        return out

    def read_until_quote(self, q: str) -> str:
        out = [self.adv()]
        while self.i < len(self.s):
            c = self.peek()
            if q == '"' and c == "\\":
                out.append(self.adv(2))
                continue
            if q == '"' and c == "$" and self.peek(1) in "({":
                out.append(self.read_dollar())
                continue
            out.append(self.adv())
            if c == q:
                break
        return "".join(out)

    def read_dollar(self) -> str:
        """``$(...)``, ``$((...))`` or ``${...}`` with nesting and quotes."""
        out = [self.adv()]
        opener = self.peek()
        closer = ")" if opener == "(" else "}"
        depth = 0
        while self.i < len(self.s):
            c = self.peek()
            if c in "'\"":
                out.append(self.read_until_quote(c))
                continue
            if c == "\\":
                out.append(self.adv(2))
                continue
            if c == "$" and self.peek(1) in "({" and depth > 0:
                out.append(self.read_dollar())
                continue
            out.append(self.adv())
            if c == opener:
                depth += 1
            elif c == closer:
                depth -= 1
                if depth == 0:
                    break
        return "".join(out)

    def read_word(self) -> str:
        out: list[str] = []
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t\n;&|<>()" or (c == "#" and not out):
                if c == "(" and out and re.fullmatch(r"[A-Za-z_]\w*\+?=", "".join(out)):
                    return "".join(out)  # array assignment: caller reads the elements
                break
            if c == "\\":
                if self.peek(1) == "\n":
                    self.adv(2)
                    break
                out.append(self.adv(2))
            elif c in "'\"":
                out.append(self.read_until_quote(c))
            elif c == "$" and self.peek(1) in "({":
                out.append(self.read_dollar())
            elif c == "`":
                self.adv()
                body = []
                while self.i < len(self.s) and self.peek() != "`":
                    body.append(self.adv())
                self.adv()
                out.append("$(" + "".join(body) + ")")
            else:
                out.append(self.adv())
        return "".join(out)

    def skip_ws(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.peek()
            if c in " \t" or (newlines and c == "\n"):
                self.adv()
            elif c == "\\" and self.peek(1) == "\n":
                self.adv(2)
            elif c == "#":
                while self.i < len(self.s) and self.peek() != "\n":
                    self.adv()
            else:
                break

    def read_array(self) -> list[str]:
        self.adv()  # (
        elems = []
        while self.i < len(self.s):
            self.skip_ws(newlines=True)
            if self.peek() == ")":
                self.adv()
                break
            w = self.read_word()
            if w:
                elems.append(w)
            elif self.i < len(self.s) and self.peek() not in ")":
                self.adv()
        return elems

    def read_arith_command(self) -> str:
        self.adv(2)
        depth, out = 1, []
        while self.i < len(self.s) and depth:
            if self.peek() == "(":
                depth += 1
            elif self.peek() == ")":
                depth -= 1
                if depth == 0:
                    break
            out.append(self.adv())
        self.adv(2)
        return "((" + "".join(out) + "))"

    def lex(self) -> list[Command]:
        words: list = []
        start = self.line
        after = ""
        while self.i < len(self.s):
            self.skip_ws(newlines=False)
            c = self.peek()
            if not c:
                break
            if not words:
                start = self.line
            if c in "\n;&|":
                op = self.adv()
                if c == ";" and self.peek() == ";":
                    self.adv()
                    self.expect_pattern = self.case_depth > 0
                elif c in "&|" and self.peek() == c:
                    op += self.adv()
                flushed = bool(words)
                if words:
                    self.cmds.append(Command(words, line=start, after=after))
                    words = []
                if op in ("&&", "||"):
                    after = op
                elif flushed or op != "\n":  # a newline right after && / || continues the list
                    after = ""
                if op == "\n" and self.case_depth and self.cmds and self.cmds[-1].words[-1:] == ["in"]:
                    self.expect_pattern = True
                continue
            if c in "<>":
                if words and isinstance(words[-1], str) and words[-1].isdigit():
                    words.pop()
                while self.peek() in "<>&":
                    self.adv()
                while self.peek().isdigit() or self.peek() == "-":
                    self.adv()
                if self.s[self.i - 1] in "<>":
                    self.skip_ws(newlines=False)
                    self.read_word()
                continue
            if not words and self.case_depth and self.expect_pattern and not re.match(r"esac\b", self.s[self.i :]):
                pat = []
                while self.i < len(self.s) and self.peek() != ")":
                    ch = self.peek()
                    pat.append(self.read_until_quote(ch) if ch in "'\"" else self.adv())
                self.adv()
                words.append(("__pattern__", "".join(pat).strip().lstrip("(").strip()))
                self.expect_pattern = False
                continue
            if c == "(" and self.peek(1) == "(" and not words:
                words.append(self.read_arith_command())
                continue
            if c in "()":
                self.adv()
                if words:
                    self.cmds.append(Command(words, line=start))
                    words = []
                continue
            w = self.read_word()
            if self.peek() == "(" and re.fullmatch(r"[A-Za-z_]\w*\+?=", w):
                words.append((w.rstrip("="), self.read_array()))  # "NAME+" appends
                continue
            if not w:
                if self.i < len(self.s) and self.peek() not in " \t\n":
                    self.adv()
                continue
            if not words and w == "case":
                self.case_depth += 1
            elif not words and w == "esac":
                self.case_depth -= 1
                self.expect_pattern = False
            words.append(w)
            if words[-1] == "in" and words[0] == "case":
                self.expect_pattern = True
        if words:
            self.cmds.append(Command(words, line=start))
        return self.cmds


def lex(text: str) -> list[Command]:
    """Split bash text into simple commands (raw words)."""
    return _Lexer(text).lex()
