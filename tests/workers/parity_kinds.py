"""The bad-input table's path-type rows: every operation with str, bytes, ``pathlib.Path`` and a user ``os.PathLike``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from parity_table import KINDS, Calls, j, mkdir, row, touch


def _kind_rows(kind: str, wrap: Callable[[str], Any]) -> None:
    @row("ok", name=f"rename_{kind}")
    def rename_ok(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        return os.rename(wrap(j(d, "a")), wrap(j(d, "b")))

    @row("FileNotFoundError", name=f"rename_missing_{kind}")
    def rename_missing(d: str, calls: Calls) -> Any:
        os.rename(wrap(j(d, "a")), wrap(j(d, "b")))  # <- call

    @row("FileNotFoundError", name=f"replace_twice_{kind}")
    def replace_twice(d: str, calls: Calls) -> Any:
        touch(j(d, "a"))
        os.replace(wrap(j(d, "a")), wrap(j(d, "b")))
        os.replace(wrap(j(d, "a")), wrap(j(d, "b")))  # <- call

    @row("ok", name=f"makedirs_{kind}")
    def makedirs_ok(d: str, calls: Calls) -> Any:
        return os.makedirs(wrap(j(d, "x", "y")))

    @row("FileExistsError", name=f"makedirs_file_in_the_way_{kind}")
    def makedirs_file(d: str, calls: Calls) -> Any:
        touch(j(d, "f"))
        os.makedirs(wrap(j(d, "f")))  # <- call

    @row("FileExistsError", name=f"makedirs_twice_{kind}")
    def makedirs_twice(d: str, calls: Calls) -> Any:
        os.makedirs(wrap(j(d, "x")))
        os.makedirs(wrap(j(d, "x")))  # <- call

    @row("ok", name=f"rmtree_{kind}")
    def rmtree_ok(d: str, calls: Calls) -> Any:
        mkdir(j(d, "t"), "f")
        return shutil.rmtree(wrap(j(d, "t")))

    @row("NotADirectoryError", name=f"rmtree_file_{kind}")
    def rmtree_file(d: str, calls: Calls) -> Any:
        touch(j(d, "f"))
        shutil.rmtree(wrap(j(d, "f")))  # <- call

    @row("FileNotFoundError", name=f"rmtree_twice_{kind}")
    def rmtree_twice(d: str, calls: Calls) -> Any:
        mkdir(j(d, "t"), "f")
        shutil.rmtree(wrap(j(d, "t")))
        shutil.rmtree(wrap(j(d, "t")))  # <- call


for _kind, _wrap in KINDS.items():
    _kind_rows(_kind, _wrap)
