"""What fsguard's value types share, in place of ``dataclasses``. (``dataclasses`` costs about 10 ms to import, with
``inspect``, in every interpreter fsguard starts in.)

A subclass names its fields once, in ``_fields``, in the order of its ``__init__`` parameters. It uses them as its
``__slots__`` and passes their values to ``Value.__init__`` in that order.
"""

from __future__ import annotations


class Value:
    """Fields from ``_fields``, with ``==``, ``repr``, ``copy`` and ``pickle`` over them, as a dataclass has.

    Mutable and unhashable, as a plain ``@dataclass``; ``Frozen`` is the ``frozen=True`` kind.
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __init__(self, *values: object) -> None:
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def _key(self) -> tuple[object, ...]:
        """What ``==`` (and a frozen value's hash) compares: every field, unless a subclass says otherwise."""
        return self._values()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Value) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({fields})"

    def __reduce__(self) -> tuple[type[Value], tuple[object, ...]]:
        return type(self), self._values()


class Frozen(Value):
    """A ``Value`` whose fields cannot be assigned after ``__init__``; hashable."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of {type(self).__qualname__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of {type(self).__qualname__}")

    def __hash__(self) -> int:
        return hash(self._key())
