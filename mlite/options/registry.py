"""A named registry: one entry per kind, looked up by name, whose names are the live choices of a flag.

:class:`Registry` is a read-only mapping ``name -> entry`` with :meth:`Registry.register` /
:meth:`Registry.unregister`; :attr:`Registry.names` is a live sequence of the names, so an option row, an argparse
``choices`` or a widget built from it sees an entry registered after import (a test's toy optimizer).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Generic, TypeVar, overload

from ..errors import MliteError

E = TypeVar("E")


class Names(Sequence[str]):
    """The names of a :class:`Registry`, in registration order, read when used (not copied at import)."""

    def __init__(self, registry: Registry):
        self._registry = registry

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i):
        return tuple(self._registry)[i]

    def __len__(self) -> int:
        return len(self._registry)

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, Names)) else other)

    def __hash__(self) -> int:
        return id(self._registry)

    def __repr__(self) -> str:
        return repr(tuple(self))


class Registry(Mapping[str, E], Generic[E]):
    """``name -> entry`` (entries have a ``name`` attribute); the only place that lists the entries of a kind."""

    def __init__(self, kind: str, field: str):
        self.kind = kind
        """What an entry is, in words (``optimizer algorithm``)."""
        self.field = field
        """The option field that names an entry (``optimizer_algorithm``), for error messages."""
        self._entries: dict[str, E] = {}
        self.names = Names(self)
        """Live sequence of the registered names (the choices of :attr:`field`)."""

    def register(self, entry: E) -> E:
        """Add ``entry`` under ``entry.name``; a name already taken is refused."""
        name = entry.name  # type: ignore[attr-defined]
        if name in self._entries:
            raise MliteError(f"{self.field}: a {self.kind} named {name!r} is registered already")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove the entry ``name`` (a test's toy entry)."""
        self._entries.pop(name)

    def entry(self, name: object) -> E:
        """The entry ``name``, or :class:`MliteError` naming the field and the registered names."""
        if name not in self._entries:
            raise MliteError(f"{self.field}: {name!r} is not one of the {self.kind}s ({', '.join(self._entries)})")
        return self._entries[name]

    def __getitem__(self, name: str) -> E:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
