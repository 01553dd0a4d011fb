"""Hydra overrides as the launchers write them and the importer reads them back: rendering, quoting, parsing.

Two quoting layers meet in a launcher: Hydra's override grammar (``key='E,t*7|t*8,L'``, ``key=[console,file]``)
and bash (each override is one double-quoted word in a bash array, so ``${TP}`` expands and nothing splits).
:func:`hydra_literal` renders a Python value for Hydra; :func:`dq` escapes text for a double-quoted bash word;
:class:`Override` holds one ``[+]key=value`` whose value is already Hydra text that may contain ``${VAR}``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_BARE = re.compile(r"^[A-Za-z0-9_./:@%~+\-]+$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def hydra_literal(value) -> str:
    """A Python value as Hydra override text: ``True``, ``null``, ``1.0``, ``[full]``, ``'E,t*7|t*8,L'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_literal(v) for v in value) + "]"
    s = str(value)
    if _BARE.match(s) and s.lower() not in ("true", "false", "null", "none") and not _NUMBER.match(s):
        return s
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def dq(text: str) -> str:
    """``text`` escaped for the inside of a bash double-quoted word (no expansion happens)."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def var(name: str) -> str:
    """A bash expansion of ``name`` for an override value (kept unescaped by :meth:`Override.render`)."""
    return "${" + name + "}"


@dataclass(frozen=True, slots=True)
class Override:
    """One Hydra override of a launcher."""

    key: str
    """Dotted key, or ``group@package`` for a config-group choice, or ``hydra.searchpath``."""
    value: str
    """Hydra value text; may contain bash expansions ``${VAR}`` (the only ``$`` allowed)."""
    add: bool = False
    """``+key=value``: the key is not in the base config (Hydra errors if this is wrong either way)."""

    @classmethod
    def lit(cls, key: str, value, add: bool = False) -> Override:
        """An override with a literal Python value (rendered by :func:`hydra_literal`, escaped for bash)."""
        return cls(key, dq(hydra_literal(value)), add)

    @property
    def text(self) -> str:
        """``[+]key=value`` (bash expansions left in place)."""
        return f"{'+' if self.add else ''}{self.key}={self.value}"

    def render(self) -> str:
        """The override as one double-quoted bash word."""
        return '"' + self.text + '"'


@dataclass(frozen=True, slots=True)
class ParsedOverride:
    """An override read back from a command line (after bash expansion)."""

    key: str
    """Dotted key or ``group@package``."""
    value: object
    """The value parsed as Hydra would (bool, None, int, float, str, list)."""
    raw: str
    """The value text as written."""
    prefix: str = ""
    """``""``, ``+``, ``++`` or ``~``."""
    origin: str = ""
    """``""`` for the command line, else the config file the value comes from (:mod:`.hydra_config`)."""

    @property
    def add(self) -> bool:
        return self.prefix in ("+", "++")

    @property
    def delete(self) -> bool:
        """``~key`` / ``~key=value``: Hydra removes the key (and what is under it) from the config."""
        return self.prefix == "~"


def parse_override(word: str) -> ParsedOverride | None:
    """``[+|++|~]key=value`` -> :class:`ParsedOverride`; None for a word that is not an override."""
    m = re.match(r"^(\+\+|\+|~)?([A-Za-z_][\w.@/\-]*)(?:=(.*))?$", word, re.DOTALL)
    if not m or (m.group(3) is None and m.group(1) != "~"):
        return None
    raw = m.group(3) or ""
    value = None if m.group(1) == "~" and m.group(3) is None else parse_value(raw)  # ~key: unset, not ""
    return ParsedOverride(key=m.group(2), value=value, raw=raw, prefix=m.group(1) or "")


def _under(key: str, root: str) -> bool:
    return key == root or key.startswith(root + ".")


def apply_overrides(base: list[ParsedOverride], cli: list[ParsedOverride]) -> tuple[list, list[str], list[str]]:
    """The overrides as Hydra applies them to a config: ``(effective values, deleted keys, warnings)``.

    ``base`` holds the values the config files set (:func:`mlite.export.hydra_config.read_config`), ``cli`` the
    command line in order. ``key=v`` overrides, ``++key=v`` adds or overrides, ``+key=v`` adds (Hydra refuses it
    for a key the config already has: "Could not append to config. An item is already at ..."), ``~key`` deletes the
    key and everything under it (``~key=v`` only when the value is ``v``). Mirrors
    ``hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config`` (Hydra 1.3,
    https://github.com/facebookresearch/hydra/blob/v1.3.2/hydra/_internal/config_loader_impl.py)."""
    values: dict[str, ParsedOverride] = {o.key: o for o in base}
    deleted: list[str] = []
    warnings: list[str] = []
    for o in cli:
        if o.delete:
            hit = [k for k in values if _under(k, o.key)]
            if o.raw and o.key in values and values[o.key].value != o.value:
                warnings.append(f"~{o.key}={o.raw}: the value is {values[o.key].raw}, not {o.raw}; Hydra refuses it")
                continue
            for k in hit:
                del values[k]
            deleted.append(o.key)
            continue
        old = values.get(o.key)
        if o.prefix == "+" and old is not None and old.origin:
            warnings.append(
                f"+{o.key}={o.raw}: {old.origin} already sets {o.key} ({old.raw}); Hydra refuses '+' for it "
                f"(write {o.key}=... or ++{o.key}=...); the command line's value used"
            )
        values.pop(o.key, None)  # keep command-line order: re-insert at the end
        values[o.key] = o
    return list(values.values()), deleted, warnings


def parse_value(text: str):
    """A Hydra override value: quoted strings, ``[a,b]`` lists, ``True/False``, ``null``, numbers, bare strings."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", t[1:-1])
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].strip()
        return [parse_value(x) for x in _split_top(inner)] if inner else []
    low = t.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low in ("null", "~"):
        return None
    if re.match(r"^[+-]?\d+$", t):
        return int(t)
    if _NUMBER.match(t):
        return float(t)
    return t


def _split_top(text: str) -> list[str]:
    parts, depth, cur, quote = [], 0, [], ""
    for ch in text:
        if quote:
            cur.append(ch)
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == "[":
            depth += 1
            cur.append(ch)
        elif ch == "]":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def shell_word(value: str) -> str:
    """A literal for a bash assignment default; ``~/x`` and ``$HOME/x`` keep expanding to the home directory."""
    s = str(value)
    for home in ("~/", "$HOME/", "${HOME}/"):
        if s.startswith(home):
            rest = s[len(home) :]
            return '"${HOME}"/' + shlex.quote(rest) if rest else '"${HOME}"'
    return shlex.quote(s)
