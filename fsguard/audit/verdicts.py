"""What fsguard would do with a failing call: the guards' ``SCAN`` verdicts."""

from __future__ import annotations

from .. import guards
from ..guards import ABSORBED, EVERY_OP, NOT_FIXABLE, SERIALIZE, Scan

# A race the traceback cannot prove fsguard absorbs: it absorbs only an error that would end its thread, and the
# log shows the program's own handling on the way, or no way to the top (issue 45).
DEPENDS = "depends"
VERDICT_ORDER = (SERIALIZE, ABSORBED, DEPENDS, NOT_FIXABLE)
DEPENDS_WHY = (
    "{reason}: fsguard absorbs a race only where the error would end its thread; here that depends on the "
    "program's handling (what a handler or context manager may swallow, fsguard leaves to the program: a deferred "
    "record, the job as without fsguard)."
)


def _verdicts() -> dict[tuple[str, str, bool], Scan]:
    """Every row of the guards' ``SCAN`` tables, by (operation, errno name, staging)."""
    found: dict[tuple[str, str, bool], Scan] = {}
    for row in (*guards.SCAN, *[row for rule in RULES for row in rule.SCAN]):
        for key in ((op, name, row.staging) for op in row.ops for name in row.errors):
            if key in found:
                raise ValueError(f"two guards' SCAN rows for {key}: {found[key]} and {row}")
            found[key] = row
    return found


RULES = tuple(guards.rule_modules().values())  # fsguard/guards/*.py, each with its SCAN table: one list (issue 49)
VERDICTS = _verdicts()


def verdict(op: str, errno_name: str | None, staging: bool = False) -> tuple[str, str]:
    """The verdict for one operation and error, with one sentence of why. It is read from the guards' ``SCAN`` tables,
    for a staging or temporary tree."""
    name = errno_name or ""
    keys = [(op, name, True), (op, name, False)] if staging else [(op, name, False)]
    for key in [*keys, (EVERY_OP, name, False)]:
        row = VERDICTS.get(key)
        if row is not None:
            return row.verdict, row.why
    return NOT_FIXABLE, f"fsguard does not absorb {errno_name or 'this error'} from {op}: not a race it can prove."
