"""Imports put off until first use, for start-up time (the rule is in :mod:`sessiondb.cli`).

Standard library only: the CLI imports this module before it has parsed its arguments.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload


class LazyChoices(Sequence[str]):
    """An ``argparse`` ``choices`` list read from a registry when first used: when the
    argument is given (to check it) or its command's help is printed, not when the
    parser is built. Give the argument a ``metavar``, or argparse reads the list to
    build one."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self._names: Sequence[str] | None = None

    def _loaded(self) -> Sequence[str]:
        if self._names is None:
            self._names = list(self._load())
        return self._names

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._loaded()[index]

    def __len__(self) -> int:
        return len(self._loaded())

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __contains__(self, value: object) -> bool:
        return value in self._loaded()


class LazyFunction:
    """A class attribute that is a function of another module, imported on first access:
    ``import_path = lazy_function("sessiondb.transfer", "import_path")`` binds like the
    function itself would (a method on an instance, the plain function on the class)."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        fn = getattr(importlib.import_module(self.module), self.name)
        return fn if obj is None else fn.__get__(obj, owner)


def lazy_function(module: str, name: str) -> Any:
    """A :class:`LazyFunction`; typed ``Any`` so that a class can declare the real
    function for type checkers under ``if TYPE_CHECKING:`` and this one otherwise."""
    return LazyFunction(module, name)


class LazyModule:
    """A module imported when one of its attributes is first read: ``(bulk,) =
    lazy_modules("bulk")`` at the top of a module whose functions call
    ``bulk.import_sessions(...)``, for a module that only some calls use."""

    def __init__(self, name: str) -> None:
        self.__name = name

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self.__name)
        self.__dict__.update(vars(module))  # later reads are plain attribute reads
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self.__name!r}>"


def lazy_modules(names: str) -> Any:
    """A :class:`LazyModule` for each of sessiondb's modules named in ``names`` (split on
    spaces); typed ``Any`` so that an importer can bind the real modules for type
    checkers under ``if TYPE_CHECKING:`` and these otherwise."""
    return tuple(LazyModule(f"{__package__}.{name}") for name in names.split())


def import_at_start(*modules: str, own_process: bool) -> None:
    """Import ``modules`` (the CLI's asyncio and store: SQLAlchemy, pydantic).

    In a process of its own (the console script, ``python -m sessiondb``) the garbage
    collector is off meanwhile, and what the imports built is then frozen out of later
    collections (:func:`gc.freeze`): nothing built at import is garbage, and collections
    walking those objects again and again took ~0.14 s of the ~0.47 s of CPU of
    ``sessiondb sessions list`` here (``python -m bench --only 14``). Otherwise (``main``
    called from Python) the caller's collector is left alone.
    """
    if not own_process:
        for name in modules:
            importlib.import_module(name)
        return
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()
