"""Launcher prefixes in front of a process's output lines, and the rank they name.

Recognised, also nested (``srun -l`` around ``torchrun``: ``0: [rank3]: ...``), the innermost giving the rank:

* torchrun's ``[rank3]: `` (and ``[default3]:``, the role-and-local-rank form of older ``--tee``);
* ``srun -l`` / ``--label``: ``3: `` (padded with spaces when the job has many tasks);
* ``mpirun --tag-output``: ``[1,3]<stderr>:``.

torchrun's failure summary numbers its entries ``[0]:``; without a name before the number that is not a
prefix, so it is left alone.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(
    r"(?:\[[A-Za-z_][A-Za-z_-]*?(?P<torch>\d+)\]: ?"  # [rank3]: / [default3]:
    r"|\[\d+,(?P<mpi>\d+)\]<std(?:out|err|diag)>: ?"  # [1,3]<stderr>:
    r"|\s*(?P<srun>\d+): )"  # srun -l
)


def split(line: str) -> tuple[str, int | None, str]:
    """Split a line into ``(stream, rank, text)``. ``stream`` is the prefixes as one key for telling interleaved streams
    apart. ``rank`` is the innermost prefix's rank (None without a prefix); ``text`` is the line as the process wrote
    it."""
    stream = ""
    rank: int | None = None
    pos = 0
    for _ in range(3):
        match = _PREFIX.match(line, pos)
        if match is None:
            break
        number = match.group("torch") or match.group("mpi") or match.group("srun")
        rank = int(number)
        stream += match.group(0).strip() + "|"
        pos = match.end()
    return stream, rank, line[pos:]
