"""Which start-up files fsguard's wheel carries (issue 40): two wheels, told apart by their Python tags.

* ``pth`` (built by default on CPython < 3.18): ``fsguard.pth`` alone, tagged for 3.10-3.17 by name
  (``py310.py311...py317-none-any``). Its import line runs on every one of them, and costs nothing disabled.
* ``start`` (built by default on 3.18+, where ``.pth`` import lines are ignored): ``fsguard.pth`` and
  ``fsguard.start``, tagged ``py3-none-any``. From 3.15 (PEP 829) the ``.start`` entry point runs and the
  ``.pth`` line is suppressed; before 3.15 the ``.pth`` line runs. It works everywhere, but on 3.15-3.17 any
  ``.start`` file costs every interpreter CPython's ``pkgutil`` import (about 7 ms), fsguard enabled or not.

With both published, an installer takes the most specific tag the interpreter supports: ``py315`` ranks above
``py3`` on 3.15, and on 3.18+ (which lists ``py318``, then ``py3``, then ``py317``...) ``py3`` ranks above the
``pth`` wheel's tags. ``FSGUARD_WHEEL=pth`` or ``start`` picks one explicitly (``scripts/build-wheels.sh``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PTH_ONLY_UNTIL = (3, 18)  # PEP 829: from 3.18 the import lines of .pth files are ignored
PTH_TAG = ".".join(f"py3{minor}" for minor in range(10, PTH_ONLY_UNTIL[1])) + "-none-any"


def flavour() -> str:
    chosen = os.environ.get("FSGUARD_WHEEL", "").strip().lower()
    if chosen in ("pth", "start"):
        return chosen
    if chosen:
        raise ValueError(f"FSGUARD_WHEEL={chosen!r}: expected 'pth' or 'start'")
    return "start" if sys.version_info >= PTH_ONLY_UNTIL else "pth"


class StartupFiles(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        build_data["force_include"]["fsguard.pth"] = "fsguard.pth"
        if flavour() == "start":
            build_data["force_include"]["fsguard.start"] = "fsguard.start"
        elif version == "standard":
            build_data["tag"] = PTH_TAG
