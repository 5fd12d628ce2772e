"""Run a function right after a module's first import, from inside that import (issue 37).

A bare interpreter does not import ``shutil``, and importing it costs about as much as the whole start. (``fnmatch``
brings ``re``; then ``bz2``, ``lzma``, ``collections``.) So where the program has not imported it yet, fsguard wraps
``shutil.rmtree`` when the program does. The wrap happens inside that import, before any other thread can see the
module. (The import system holds its module lock until it returns.) So no caller ever gets the unwrapped function.
"""

from __future__ import annotations

import sys

from ._warn import warn

TYPE_CHECKING = False  # not typing's: only what startup needs is imported
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any


class AfterImport:
    """Run ``then(module)`` once, right after one module's own code. It is a meta path finder that finds the module as
    the others would. It then leaves ``sys.meta_path``, and the module keeps its real loader."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then
        self.loader: Any = None

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if name != self.name or self.loader is not None:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(name, path, target)
            if spec is None:
                continue
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec  # nothing to hook into: an ordinary import (``then`` runs at the next one)
            self.loader = spec.loader
            spec.loader = self  # type: ignore[assignment]
            return spec
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        loader, self.loader = self.loader, None
        self.cancel()
        module.__loader__ = loader  # the module's own code and everyone after see its real loader
        if module.__spec__ is not None:
            module.__spec__.loader = loader
        loader.exec_module(module)
        try:
            self.then(module)
        except Exception as error:  # noqa: BLE001 - never break the program's import
            warn(f"after importing {self.name}: {type(error).__name__}: {error}")

    def cancel(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def after_import(name: str, then: Callable[[ModuleType], None]) -> AfterImport | None:
    """Run ``then(module)`` now, or right after ``name``'s first import. Returns None if it ran now, else the hook,
    whose ``cancel`` takes it back."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
        return None
    hook = AfterImport(name, then)
    sys.meta_path.insert(0, hook)
    return hook
