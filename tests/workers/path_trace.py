"""One failing guarded call, followed through fsguard's modules, for ``tests/test_path.py``.

Run as ``python path_trace.py <scenario> <root>`` with ``FSGUARD=1`` and a launcher environment: the scenario
prepares what a peer of the job left at its path (with the unguarded ``posix`` functions: not this process's
own calls), then makes one guarded call with ``sys.setprofile`` on. Every Python frame of ``fsguard`` that the
call enters or leaves is one event; the worker prints one JSON line ``{"events": [[kind, module], ...],
"outcome": ...}`` (kind ``call`` or ``return``), and the records fsguard wrote go to stderr as usual.

The profiler is switched on right before the call and off in a ``finally`` clause (a would-be crash for fsguard's
handler analysis, as in a program without one), so nothing of the worker's own is followed.
"""

from __future__ import annotations

import json
import os
import posix
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

EVENTS: list[tuple[str, str, str]] = []
FOLLOWING: list[bool] = []  # set for the followed call (the first, with the same course, is not followed)
_IMPORTING: list[Any] = []  # the module body being executed (an import), whose frames are not followed


def _profile(frame: Any, event: str, arg: Any) -> None:
    if event != "call" and event != "return":
        return
    code = frame.f_code
    if _IMPORTING:  # an import's frames are loading, not the call's course
        if event == "return" and frame is _IMPORTING[-1]:
            _IMPORTING.pop()
        elif event == "call" and code.co_name == "<module>":
            _IMPORTING.append(frame)
        return
    if code.co_name == "<module>" and event == "call":
        _IMPORTING.append(frame)
        return
    module = frame.f_globals.get("__name__") or ""
    if module == "fsguard" or module.startswith("fsguard."):
        EVENTS.append((event, module, code.co_name))


def followed(call: Callable[[], Any]) -> Any:
    """Run ``call`` with the profiler on; the events are in ``EVENTS``."""
    if not FOLLOWING:
        return call()
    sys.setprofile(_profile)
    try:
        return call()
    finally:
        sys.setprofile(None)


def _fresh(path: str) -> str:
    """A directory that changed during this job (its parent too), made by the unguarded call: a peer's."""
    posix.mkdir(path)
    return path


def makedirs_absorbed(root: str) -> str:
    name = _fresh(os.path.join(_fresh(os.path.join(root, "ckpt")), "step-1"))  # a peer made it moments ago
    followed(lambda: os.makedirs(name))  # guarded call: makedirs (no handler: a would-be crash)
    return "returned"


def rename_missing_source(root: str) -> str:
    parent = _fresh(os.path.join(root, "out"))
    src, dst = os.path.join(parent, "model.tmp"), os.path.join(parent, "model.bin")
    with open(src, "w") as f:
        f.write("weights\n")
    posix.rename(src, dst)  # a peer moved the same staged file moments ago
    followed(lambda: os.replace(src, dst))  # guarded call: replace
    return "returned"


def rmtree_gone(root: str) -> str:
    parent = _fresh(os.path.join(root, "runs"))
    tree = _fresh(os.path.join(parent, "old"))
    posix.rmdir(tree)  # a peer removed it moments ago
    followed(lambda: shutil.rmtree(tree))  # guarded call: rmtree
    return "returned"


def makedirs_handled(root: str) -> str:
    name = _fresh(os.path.join(_fresh(os.path.join(root, "claims")), "run-0"))
    try:
        followed(lambda: os.makedirs(name))  # guarded call: makedirs (the program handles the error)
    except FileExistsError:
        return "handled"
    return "returned"


SCENARIOS: dict[str, Callable[[str], str]] = {
    "makedirs_absorbed": makedirs_absorbed,
    "rename_missing_source": rename_missing_source,
    "rmtree_gone": rmtree_gone,
    "makedirs_handled": makedirs_handled,
}


def main() -> None:
    scenario, root = sys.argv[1], sys.argv[2]
    time.sleep(0.01)  # the job started before the peer's work (its start is read at the first failure)
    os.mkdir(os.path.join(root, "first"))
    SCENARIOS[scenario](os.path.join(root, "first"))  # the first failure loads the failure path: not followed
    FOLLOWING.append(True)
    os.mkdir(os.path.join(root, "followed"))
    outcome = SCENARIOS[scenario](os.path.join(root, "followed"))
    print(json.dumps({"events": EVENTS, "outcome": outcome}))


if __name__ == "__main__":
    main()
