"""Who called the guarded function: whether its failure is the standard library's own business.

Cheap frame questions asked before any rule, with no import and no source read. Some standard callers settle their own
errors, so fsguard neither decides, records nor serializes them. They are ``os.makedirs`` calling the guarded ``mkdir``
(or itself, for a missing parent), shutil's tree walks, ``tempfile``'s name claims and ``pathlib``'s
``exist_ok``/``missing_ok``. What the *program* does with an error is ``fsguard.oracle``' question, asked only where a
rule would absorb it.
"""

from __future__ import annotations

from .state import STATE

TYPE_CHECKING = False  # not typing's: imported with the wrapper, at startup (see bench/startup.py)
if TYPE_CHECKING:
    from typing import Any

# What the standard library settles itself, when it is the guarded call's caller (``left_to_caller``)
_STDLIB_CALLERS = frozenset(("os", "shutil", "tempfile"))
_PATHLIB_OPTIONS = {"mkdir": "exist_ok", "unlink": "missing_ok"}  # Path method -> its "that is fine" flag
# Where a makedirs calls itself for a missing parent: the standard makedirs, and patching's level taken in turn
_IN_TURN = ("fsguard.patching", "_parents_in_turn")


def inside_makedirs(wrapper: Any) -> bool:
    """Whether a failing makedirs is the standard makedirs' own call for a missing parent. ``frame`` is its guarded
    function's ``wrapper`` frame.

    The standard makedirs calls ``makedirs(head, exist_ok=exist_ok)`` through the module attribute, so that
    call is guarded too; its ``FileExistsError`` is caught by the outer standard makedirs, which goes on.
    Deciding (and recording) it here would only add a record for a failure nobody sees.
    """
    code = getattr(STATE.originals.get("makedirs"), "__code__", None)
    frame: Any = wrapper  # (and a serializer's frames above it)
    for _ in range(6):
        if frame is None:
            return False
        if frame.f_code is code or (frame.f_globals.get("__name__"), frame.f_code.co_name) == _IN_TURN:
            return True
        frame = frame.f_back
    return False


def left_to_caller(wrapper: Any) -> bool:
    """Whether a failing remove/mkdir/symlink/link is the standard library's own business. ``frame`` is its guarded
    function's ``wrapper`` frame; the first frame outside fsguard and wrapt decides. ``os.makedirs`` calls ``mkdir`` and
    is decided itself: one decision, not two. Shutil's tree walks hand errors to their own handlers. ``tempfile`` claims
    names by ``mkdir``, and ``FileExistsError`` means "try another". ``Path.mkdir(exist_ok=True)`` and
    ``Path.unlink(missing_ok=True)`` settle the very error themselves; a decision there would only add a record. Such
    calls are not serialized either: ``os.makedirs`` already holds the lock on its path, and would wait for itself."""
    frame: Any = wrapper
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not (module == "wrapt" or module.startswith(("wrapt.", "fsguard."))) or module.startswith(
            ("fsguard.demo", "fsguard.cli")
        ):
            if module == "pathlib" or module.startswith("pathlib."):  # 3.13: pathlib._local
                return (
                    frame.f_code.co_name in _PATHLIB_OPTIONS
                    and frame.f_locals.get(_PATHLIB_OPTIONS[frame.f_code.co_name]) is True
                )
            return module in _STDLIB_CALLERS
        frame = frame.f_back
    return False
