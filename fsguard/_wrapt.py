"""wrapt's ``FunctionWrapper`` at the price of wrapt's C extension alone (issue 37).

``import wrapt`` runs the package's ``__init__``, which imports everything wrapt offers. That is asyncio,
``importlib.metadata`` and ``inspect``: about 60 ms of a 10 ms interpreter start on wrapt 2.5. fsguard needs one type,
``FunctionWrapper`` of the extension ``wrapt._wrappers``. So the package's module object is made from its real spec but
not executed. The extension is imported beneath it (2.x's extension imports ``wrapt.exceptions`` too). The first
``import wrapt`` of anyone executes the package later, on that very module object. A meta path finder hands it over
once, then leaves. That import is then an ordinary one: the program gets the whole wrapt. Its ``wrapt.FunctionWrapper``
is the type fsguard's wrappers are instances of. (``wrapt.__wrapt__``, or ``wrapt.wrappers`` in 1.x, takes the types
from ``sys.modules["wrapt._wrappers"]``.)

Where that cannot hold, this is ``import wrapt``: wrapt already imported, extensions disabled
(``WRAPT_DISABLE_EXTENSIONS``: the program's wrapt would use the pure-Python types), no extension, any surprise.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: only what startup needs is imported
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

# The import system itself (``importlib._bootstrap``, always loaded): its module lock and spec helpers, with
# no import of ``importlib``.
_BOOTSTRAP: Any = sys.modules["_frozen_importlib"]
PACKAGE = "wrapt"
EXTENSION = "wrapt._wrappers"


def function_wrapper() -> type[Any]:
    """The ``FunctionWrapper`` type that ``wrapt.FunctionWrapper`` is, or will be once wrapt is imported."""
    if PACKAGE not in sys.modules and not os.environ.get("WRAPT_DISABLE_EXTENSIONS"):
        try:
            found: type[Any] | None = _extension_alone()
        except Exception:  # noqa: BLE001 - any surprise: the whole package, as before
            found = None
        if found is not None:
            return found
    import wrapt

    whole: type[Any] = wrapt.FunctionWrapper
    return whole


def _extension_alone() -> type[Any] | None:
    """Import ``wrapt._wrappers`` beneath wrapt's unexecuted package; None where it is not there."""
    spec: Any = _find_spec()
    if spec is None or spec.loader is None or not spec.submodule_search_locations:
        return None
    # the lock of ``import wrapt``: another thread importing wrapt meanwhile waits, then takes the finder's path
    with _BOOTSTRAP._ModuleLockManager(PACKAGE):
        if PACKAGE in sys.modules:
            return None
        package = _BOOTSTRAP.module_from_spec(spec)
        spec._initializing = True  # as the import system marks a module being loaded: others wait for it
        sys.modules[PACKAGE] = package
        try:
            extension = __import__(EXTENSION, fromlist=["FunctionWrapper"])
            found = getattr(extension, "FunctionWrapper", None)
        except ImportError:
            found = None
        finally:
            spec._initializing = False
            if sys.modules.get(PACKAGE) is package:
                del sys.modules[PACKAGE]
        if not isinstance(found, type):
            for name in [m for m in sys.modules if m.startswith(PACKAGE + ".")]:
                del sys.modules[name]  # as if nothing had been tried: ``import wrapt`` starts afresh
            return None
        loaded = [m for m in sys.modules if m.startswith(PACKAGE + ".")]
        sys.meta_path.insert(0, _Deferred(package, spec, loaded))
        return found


def _find_spec(skip: object = None) -> ModuleSpec | None:
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if find is not None and finder is not skip and not isinstance(finder, _Deferred):
            spec: ModuleSpec | None = find(PACKAGE, None)
            if spec is not None:
                return spec
    return None


class _Deferred:
    """Let the first ``import wrapt`` execute the unexecuted package, or step aside. The first ``import wrapt`` executes
    the package once, where the import path finds that very package. Where it finds another (a pinned wrapt first on
    ``sys.path``), this steps aside for good. The program then imports its own. fsguard's wrappers keep the type of the
    extension imported at start-up (callable, unwrappable: ``__wrapped__``)."""

    def __init__(self, package: ModuleType, spec: ModuleSpec, loaded: list[str]) -> None:
        self.package = package
        self.spec = spec
        self.loaded = loaded  # the submodules imported beneath it (the extension, and what it imports)

    def find_spec(self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> Any:
        if name != PACKAGE:
            return None
        now = _find_spec(self)
        if now is None or now.origin != self.spec.origin:
            self.step_aside()
            return None
        spec: ModuleSpec = _BOOTSTRAP.ModuleSpec(name, self, origin=self.spec.origin, is_package=True)
        spec.submodule_search_locations = self.spec.submodule_search_locations
        spec.cached = self.spec.cached
        spec.has_location = self.spec.has_location
        return spec

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.package

    def exec_module(self, module: ModuleType) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        loader: Any = self.spec.loader
        loader.exec_module(module)
        module.__spec__ = self.spec  # the package's own spec and loader, as an ordinary import leaves them

    def step_aside(self) -> None:
        """Leave ``sys.meta_path`` and forget the submodules beneath the unexecuted package. Then another wrapt imports
        its own; fsguard's wrappers' type still references them."""
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        for name in self.loaded:
            sys.modules.pop(name, None)


def pending() -> bool:
    """Whether wrapt's package is still waiting for its first ``import wrapt`` (``fsguard status``)."""
    return any(isinstance(finder, _Deferred) for finder in sys.meta_path)
