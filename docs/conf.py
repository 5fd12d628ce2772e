"""Sphinx configuration of fsguard's documentation (MyST markdown; built strict by scripts/test.sh)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]  # fsguard for autodoc, our extension

from fsguard._version import __version__  # noqa: E402

project = "fsguard"
author = "fsguard contributors"
copyright = "2026, fsguard contributors"
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "fsguard_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "README.md"]
myst_heading_anchors = 3  # [text](page.md#a-heading) works as on GitHub
myst_enable_extensions = ["colon_fence"]
html_theme = "alabaster"
html_title = f"fsguard {release}"
autodoc_member_order = "bysource"
nitpicky = True
# guarded()'s return type is a private context-manager class (no contextlib at startup): not documented apart.
nitpick_ignore = [("py:class", "_Guarded")]
