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
        self.words: list = []  # the command being read
        self.start = 1  # its first line
        self.after = ""  # the list operator before it

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
        while self.i < len(self.s):
            self.skip_ws(newlines=False)
            c = self.peek()
            if not c:
                break
            if not self.words:
                self.start = self.line
            if c in "\n;&|":
                self.read_operator(c)
            elif c in "<>":
                self.skip_redirect()
            elif not self.words and self.at_pattern():
                self.read_pattern()
            elif c == "(" and self.peek(1) == "(" and not self.words:
                self.words.append(self.read_arith_command())
            elif c in "()":
                self.adv()
                self.flush("")
            else:
                self.read_command_word()
        self.flush("")
        return self.cmds

    def flush(self, after: str) -> bool:
        """End the command being read (if it has words), its list operator ``after``; whether there was one."""
        if not self.words:
            return False
        self.cmds.append(Command(self.words, line=self.start, after=after))
        self.words = []
        return True

    def read_operator(self, c: str) -> None:
        """A newline, ``;``, ``;;``, ``&``, ``&&``, ``|``, ``||``: ends the command; ``&&`` / ``||`` start a list."""
        op = self.adv()
        if c == ";" and self.peek() == ";":
            self.adv()
            self.expect_pattern = self.case_depth > 0
        elif c in "&|" and self.peek() == c:
            op += self.adv()
        flushed = self.flush(self.after)
        if op in ("&&", "||"):
            self.after = op
        elif flushed or op != "\n":  # a newline right after && / || continues the list
            self.after = ""
        if op == "\n" and self.case_depth and self.cmds and self.cmds[-1].words[-1:] == ["in"]:
            self.expect_pattern = True

    def skip_redirect(self) -> None:
        """A redirection (``2>&1``, ``> file``, ``<<<``): dropped with its fd number and its target word."""
        if self.words and isinstance(self.words[-1], str) and self.words[-1].isdigit():
            self.words.pop()
        while self.peek() in "<>&":
            self.adv()
        while self.peek().isdigit() or self.peek() == "-":
            self.adv()
        if self.s[self.i - 1] in "<>":
            self.skip_ws(newlines=False)
            self.read_word()

    def at_pattern(self) -> bool:
        """Whether a ``case`` pattern (``gpu)``) comes next, not the ``esac``."""
        return bool(self.case_depth and self.expect_pattern and not re.match(r"esac\b", self.s[self.i :]))

    def read_pattern(self) -> None:
        pat = []
        while self.i < len(self.s) and self.peek() != ")":
            ch = self.peek()
            pat.append(self.read_until_quote(ch) if ch in "'\"" else self.adv())
        self.adv()
        self.words.append(("__pattern__", "".join(pat).strip().lstrip("(").strip()))
        self.expect_pattern = False

    def read_command_word(self) -> None:
        """A word of the command, or an array assignment ``NAME=( ... )``; tracks ``case`` / ``esac`` nesting."""
        w = self.read_word()
        if self.peek() == "(" and re.fullmatch(r"[A-Za-z_]\w*\+?=", w):
            self.words.append((w.rstrip("="), self.read_array()))  # "NAME+" appends
            return
        if not w:
            if self.i < len(self.s) and self.peek() not in " \t\n":
                self.adv()
            return
        if not self.words and w == "case":
            self.case_depth += 1
        elif not self.words and w == "esac":
            self.case_depth -= 1
            self.expect_pattern = False
        self.words.append(w)
        if self.words[-1] == "in" and self.words[0] == "case":
            self.expect_pattern = True


def lex(text: str) -> list[Command]:
    """Split bash text into simple commands (raw words)."""
    return _Lexer(text).lex()
