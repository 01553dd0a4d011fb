"""Reading Hugging Face ``config.json`` files: by path, by name in ``data/models/``, or as a dict.

All problems surface as :class:`mlite.errors.ConfigError` with one line naming the file and field.
"""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..paths import models_dir


def available_models() -> list[str]:
    """Names of the configs shipped in ``data/models/`` (file stems, sorted)."""
    d = models_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def resolve_config_path(ref: str | Path) -> Path:
    """A path for ``ref``: an existing file, or ``data/models/<ref>[.json]``."""
    p = Path(ref).expanduser()
    if p.is_file():
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p / "config.json"
    for cand in (models_dir() / f"{ref}.json", models_dir() / str(ref)):
        if cand.is_file():
            return cand
    names = ", ".join(available_models()) or "none"
    raise ConfigError(f"{ref}: no such file, and no model of that name in data/models/ (available: {names})")


LARGEST_VALUE = 2**63
"""The magnitude a config number must stay below (int64, what tensor sizes are): the largest shipped config
value is about 1e7; a 400-digit integer would overflow the float arithmetic of the estimates."""


def _unusable(value: Any, key: str = "") -> tuple[str, str] | None:
    """The first ``(dotted key, shown value)`` in ``value`` that is NaN, infinite or not below
    :data:`LARGEST_VALUE`, or None."""
    if isinstance(value, float) and math.isnan(value):
        return key, "NaN"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= LARGEST_VALUE:
        if isinstance(value, float) and math.isinf(value):
            return key, "Infinity" if value > 0 else "-Infinity"
        digits = len(str(abs(int(value))))
        return key, f"{value:.3g}" if isinstance(value, float) else f"a {digits}-digit integer"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _unusable(v, f"{key}[{k}]" if isinstance(k, int) else f"{key}.{k}" if key else str(k))
        if found is not None:
            return found
    return None


def refuse_non_finite(cfg: dict, where: str) -> None:
    """Refuse a config holding ``NaN`` / ``Infinity`` anywhere (Python's ``json`` accepts them, JSON does not;
    an overflowing literal such as ``1e999`` reads as infinity) or a number not below :data:`LARGEST_VALUE`:
    one line naming the field and the file."""
    found = _unusable(cfg)
    if found is not None:
        key, shown = found
        raise ConfigError(f"{where}: field '{key}' is {shown}; a config value must be a finite number below 2^63")


def load_config(ref: str | Path | dict) -> tuple[str, dict]:
    """Return ``(name, config_dict)`` for a path, a ``data/models`` name or a dict; every number is finite.

    A file's name is its folder's for a ``config.json`` (``./config.json`` included), else the file stem."""
    if isinstance(ref, dict):
        refuse_non_finite(ref, "config")
        return str(ref.get("_name_or_path") or ref.get("model_type") or "config"), dict(ref)
    path = resolve_config_path(ref)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; a config.json is a JSON object") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from None
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path}: the top level must be a JSON object, found {type(cfg).__name__}")
    refuse_non_finite(cfg, str(path))
    name = (path.resolve().parent.name or path.stem) if path.name == "config.json" else path.stem
    return name, cfg


class Fields:
    """Typed access to a config dict; a missing or wrong field raises one clear :class:`ConfigError`."""

    def __init__(self, cfg: dict, where: str, model_type: str):
        self.cfg = cfg
        self.where = where
        self.model_type = model_type

    def _bad(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{key}' {why} (model_type '{self.model_type}')")

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: Any = ..., *, min_value: int = 1) -> int:
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise self._bad(key, "is missing; add it to the config")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
            raise self._bad(key, f"must be an integer, found {v!r}")
        if int(v) < min_value:
            raise self._bad(key, f"must be >= {min_value}, found {v}")
        return int(v)

    def float(self, key: str, default: Any = ...) -> float:
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise self._bad(key, "is missing; add it to the config")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._bad(key, f"must be a number, found {v!r}")
        return float(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.cfg.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(key, f"must be true or false, found {v!r}")
        return v

    def list(self, key: str, default: Any = ..., *, length: builtins.int | None = None, allowed=None) -> list:
        v = self.cfg.get(key)
        if v is None:
            if default is ...:
                raise self._bad(key, "is missing; add it to the config")
            return default
        if not isinstance(v, list):
            raise self._bad(key, f"must be a list, found {type(v).__name__}")
        if length is not None and len(v) < length:
            raise self._bad(key, f"has {len(v)} entries but num_hidden_layers is {length}")
        if allowed is not None:
            bad = sorted({str(x) for x in v if x not in allowed})
            if bad:
                raise self._bad(key, f"has unknown entries {bad}; expected {sorted(allowed)}")
        return v
