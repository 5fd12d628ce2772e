"""What the user documentation says, read the way a user reads it.

Today the documentation is ``README.md``; when it moves to a docs site, point ``DOCUMENTATION`` (or the
``path`` argument) at the page that holds the Configuration table: the tests that compare it with the code
read it only through ``configuration_table``.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCUMENTATION = Path(__file__).resolve().parents[2] / "README.md"

# A row of the Configuration table: | `FSGUARD_...` | `default` or unset | meaning |
_ROW = re.compile(r"^\|\s*`(FSGUARD[A-Z_]*)`\s*\|\s*([^|]*?)\s*\|")


def configuration_table(path: Path = DOCUMENTATION) -> dict[str, str]:
    """Each documented variable's default as the page's Configuration table writes it (the text between
    backquotes; ``unset`` for a variable whose default is no value). Only the first table of rows of the
    form ``| `FSGUARD_...` | default | ... |`` counts."""
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line.strip())
        if match is None:
            if found:
                break  # the table ended
            continue
        name, default = match.groups()
        found[name] = default[1:-1] if default.startswith("`") and default.endswith("`") else default
    return found
