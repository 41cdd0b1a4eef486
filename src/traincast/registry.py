"""Registries: the extension points of traincast (after ``torch.utils.flop_counter``'s decorator registry).

A :class:`Registry` maps names to objects (classes, functions, records), each with a line of help. Names,
CLI help, ``--help`` lists and did-you-mean suggestions all come from the registry, never retyped::

    SYNC = Registry("sync method")

    @SYNC.register("ring", help="ring all-reduce: 2(P-1)/P of the gradients over each link")
    def ring(size_bytes, p, bandwidth_bytes_per_s, alpha_s): ...

    SYNC.get("rign")   # UnknownNameError: unknown sync method 'rign'; did you mean 'ring'?
    SYNC.choices()     # 'ring | tree | ...'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from traincast.errors import UnknownNameError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    help: str = ""
    aliases: tuple[str, ...] = ()


class Registry(Generic[T]):
    """Named objects of one kind (``kind`` names it in error messages: "unknown <kind> 'x'")."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}

    # --- adding -------------------------------------------------------------------
    def add(self, name: str, obj: T, help: str = "", aliases: tuple[str, ...] = ()) -> T:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a non-empty name, got {name!r}")
        if name in self._entries or name in self._aliases:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, obj, help, tuple(aliases))
        for a in aliases:
            self._aliases[a] = name
        return obj

    def register(self, name: str, help: str = "", aliases: tuple[str, ...] = ()) -> Callable[[T], T]:
        """Decorator: ``@REG.register("name", help="...")``."""

        def deco(obj: T) -> T:
            return self.add(name, obj, help=help, aliases=aliases)

        return deco

    # --- looking up ---------------------------------------------------------------
    def canonical(self, name) -> str:
        """The registered name of ``name`` (itself or an alias), else UnknownNameError with suggestions."""
        if isinstance(name, str):
            if name in self._entries:
                return name
            if name in self._aliases:
                return self._aliases[name]
            low = name.strip().lower()
            for n in self._entries:
                if n.lower() == low:
                    return n
        raise UnknownNameError(self.kind, str(name), self.names())

    def get(self, name) -> T:
        return self._entries[self.canonical(name)].obj

    def entry(self, name) -> Entry[T]:
        return self._entries[self.canonical(name)]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> tuple[Entry[T], ...]:
        return tuple(self._entries.values())

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._aliases)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    # --- text for help ---------------------------------------------------------------
    def choices(self, sep: str = " | ") -> str:
        """``a | b | c``: the names, for an option's help."""
        return sep.join(self._entries)

    def describe(self) -> str:
        """``a (what a is); b (what b is)``: names with their help, for an option's help."""
        return "; ".join(f"{e.name} ({e.help})" if e.help else e.name for e in self._entries.values())
