"""fsguard's own Sphinx extension: pages generated from the code, so the docs cannot drift from it.

``{fsguard-settings}`` renders the settings table from ``fsguard.config.VARIABLES`` (the one table that
``config.load`` and ``fsguard status`` read their defaults from). ``settings_markdown`` is the renderer, and
needs no Sphinx: tests compare its output with ``fsguard status`` (``tests/test_docs.py`` loads this file by
its path).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_rows(variables: Iterable[Any] | None = None) -> list[tuple[str, str, str]]:
    """(name, default, meaning) for every setting, in the table's order; ``variables`` defaults to fsguard's."""
    if variables is None:
        from fsguard.config import VARIABLES as variables
    return [(v.name, v.default, v.help) for v in variables]


def settings_markdown(variables: Iterable[Any] | None = None) -> str:
    """The settings table as a Markdown table: variable, default (``unset`` for an empty one), meaning."""
    lines = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, default, meaning in settings_rows(variables):
        shown = f"`{default}`" if default else "unset"
        lines.append(f"| `{name}` | {_cell(shown)} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def setup(app: Any) -> dict[str, Any]:
    """Sphinx's entry point. Sphinx and docutils are imported here only: the renderer above needs neither."""
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective

    class SettingsTable(SphinxDirective):
        """``{fsguard-settings}``: the settings table, parsed as MyST markdown in place."""

        has_content = False

        def run(self) -> list[nodes.Node]:
            self.env.note_dependency(str(Path(self.env.srcdir).parent / "fsguard" / "config.py"))
            container = nodes.container(classes=["fsguard-settings"])
            lines = StringList(settings_markdown().splitlines(), source="fsguard/config.py")
            self.state.nested_parse(lines, 0, container)
            return [container]

    app.add_directive("fsguard-settings", SettingsTable)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
