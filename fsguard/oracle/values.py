"""The oracle's small values: a layer of handling, and what it does with an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --- what one raising path of a handler raises --------------------------------------------------------------


@dataclass(frozen=True)
class Same:
    """The caught error itself (``raise``, ``raise e``)."""


@dataclass(frozen=True)
class NewClass:
    """Another class (``raise AlreadyExistsError(...)``): its expression, read in the frame at the search."""

    expression: Any
    label: str


@dataclass(frozen=True)
class Exits:
    """A call that may end the thread or process. It is told by its expression's value at the search. ``sys.exit``:
    ``SystemExit`` goes on; ``os._exit``: the process ends."""

    expression: Any
    label: str


@dataclass(frozen=True)
class Delegates:
    """The error handed to a function of the program (``self._handle_exception(e)``), read at the search."""

    callee: Any
    label: str


@dataclass(frozen=True)
class Unreadable:
    """A path fsguard cannot read."""

    why: str


Raised = Same | NewClass | Exits | Delegates | Unreadable


@dataclass(frozen=True)
class Fate:
    """What a handler does with the error it caught. ``swallows`` when a path may leave it normally: return, break,
    continue, fall through. Else what each raising path raises."""

    swallows: bool
    raised: tuple[Raised, ...] = ()


SWALLOWS = Fate(True)

# --- a layer of handling around an instruction, innermost first ---------------------------------------------


@dataclass(frozen=True)
class Clause:
    """One ``except`` clause (``expression`` None: a bare ``except`` or a ``finally``, which catch anything)."""

    expression: Any
    label: str
    fate: Fate


@dataclass(frozen=True)
class Catch:
    """One ``try`` statement's clauses, in order (the first that matches handles the error)."""

    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class With:
    """A ``with`` item: its context expression (instructions or an ast node; None: not found)."""

    expression: Any
    label: str
    reason: str = ""  # set where the expression cannot be trusted (conditional, rebound in the block)


@dataclass(frozen=True)
class Unknown:
    """Something fsguard cannot read: the program decides."""

    why: str


Layer = Catch | With | Unknown

# --- what a layer does with an error of one class -----------------------------------------------------------


@dataclass(frozen=True)
class Passes:
    """The error goes on unchanged."""


@dataclass(frozen=True)
class Converts:
    """The error goes on as these classes instead (each followed outwards from here)."""

    classes: tuple[type[BaseException], ...]


@dataclass(frozen=True)
class Decides:
    """Something here may handle the error, or fsguard cannot tell: the program decides."""

    reason: str
    handler: str | None = None
    inside: str | None = None  # a @contextmanager's own handler at its yield


@dataclass(frozen=True)
class Ends:
    """The process ends (``os._exit``)."""


PASSES = Passes()
ENDS = Ends()
Outcome = Passes | Converts | Decides | Ends
