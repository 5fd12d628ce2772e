"""What the user documentation says, read the way a user reads it.

The Configuration table lives on ``docs/configuration.md``, where the ``{fsguard-settings}`` directive of
``docs/_ext/fsguard_docs.py`` renders it when Sphinx builds the site. ``configuration_table`` reads the page as
Sphinx does: the directive replaced by what the extension renders, then the table's rows parsed as a reader
sees them. The tests that compare the documentation with the code read it only through this function.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTATION = ROOT / "docs" / "configuration.md"
EXTENSION = ROOT / "docs" / "_ext" / "fsguard_docs.py"
DIRECTIVE = "```{fsguard-settings}\n```"

# A row of the Configuration table: | `FSGUARD_...` | `default` or unset | meaning |
_ROW = re.compile(r"^\|\s*`(FSGUARD[A-Z_]*)`\s*\|\s*([^|]*?)\s*\|")


def docs_extension() -> ModuleType:
    """``docs/_ext/fsguard_docs.py`` loaded by its path (its renderer needs no Sphinx)."""
    spec = importlib.util.spec_from_file_location("fsguard_docs", EXTENSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered_page(path: Path = DOCUMENTATION) -> str:
    """The page's text with the settings directive replaced by the table the extension renders there."""
    text = path.read_text(encoding="utf-8")
    if DIRECTIVE in text:
        text = text.replace(DIRECTIVE, docs_extension().settings_markdown())
    return text


def configuration_table(path: Path = DOCUMENTATION) -> dict[str, str]:
    """Each documented variable's default as the page's Configuration table shows it (the text between
    backquotes; ``unset`` for a variable whose default is no value). Only the first table of rows of the
    form ``| `FSGUARD_...` | default | ... |`` counts."""
    found: dict[str, str] = {}
    for line in rendered_page(path).splitlines():
        match = _ROW.match(line.strip())
        if match is None:
            if found:
                break  # the table ended
            continue
        name, default = match.groups()
        found[name] = default[1:-1] if default.startswith("`") and default.endswith("`") else default
    return found
