"""Name → factory registries for what users extend: environments, policies, milestone generators,
advantage estimators (in the way verl registers its advantage estimators).

A registry is a plain dict with two rules added: a name is taken once (registering a different
object under a taken name is an error, re-registering the same one is harmless), and asking for an
unknown name says which names exist. Built-ins are imported on first lookup through ``loader``, so
importing a protocol module never pulls in a browser or torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
F = TypeVar("F")


class Registry(dict[str, T]):
    def __init__(self, kind: str, loader: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.kind = kind
        self._loader = loader

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: ``@REGISTRY.register("name")`` on a class or factory function."""

        def decorator(obj: F) -> F:
            existing = self.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"a {self.kind} named {name!r} is already registered "
                                 f"({getattr(existing, '__qualname__', existing)!r}); pick another name")
            self[name] = obj  # type: ignore[assignment]
            return obj

        return decorator

    def lookup(self, name: str) -> T:
        """The entry for ``name``, loading built-ins first; an unknown name lists the known ones."""
        if name not in self and self._loader is not None:
            self._loader(name)
        try:
            return self[name]
        except KeyError:
            known = ", ".join(sorted(self)) or "none"
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {known}") from None

    def names(self) -> list[str]:
        if self._loader is not None:
            self._loader("")
        return sorted(self)
