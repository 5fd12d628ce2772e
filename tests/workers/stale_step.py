"""One "node"'s steps on a shared directory, in a fresh interpreter: look names up, then (maybe) do one operation.

``stale_step.py STEPS_JSON`` where STEPS_JSON is a list of steps, each a list ``[action, *args]``:

* ``["lookup", path, ...]``: ``os.lstat`` each path (this is what fills a node's lookup cache, positive and
  negative); the result says, per path, ``"present"`` or ``"missing"`` as *this node* sees it.
* ``["rename", src, dst]``, ``["replace", src, dst]``: ``os.rename`` / ``os.replace``.
* ``["makedirs", path, exist_ok]``: ``os.makedirs(path, exist_ok=bool(exist_ok))``.
* ``["mkdir", path]``: ``os.mkdir``.  ``["write", path, text]``: create a file.
* ``["rmtree", path]``: ``shutil.rmtree(path)``.

The functions are looked up on ``os``/``shutil`` at call time, so when fsguard is active in this
interpreter the guarded ones run. Prints one JSON object: ``patched`` (what fsguard wrapped here) and
``steps``, one result per step: ``ok``, ``seconds`` the call took, ``error`` (type, errno, strerror,
filename, filename2) or None, and for lookups ``seen``. A failing step does not stop the later ones.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from typing import Any

from gate import crash_of  # run as a script: this directory is on sys.path


def run(action: str, args: list[Any]) -> dict[str, Any]:
    if action == "lookup":
        seen = {}
        for path in args:
            try:
                os.lstat(path)
                seen[path] = "present"
            except FileNotFoundError:
                seen[path] = "missing"
        return {"seen": seen}
    if action == "rename":
        os.rename(args[0], args[1])
    elif action == "replace":
        os.replace(args[0], args[1])
    elif action == "makedirs":
        os.makedirs(args[0], exist_ok=bool(args[1]))
    elif action == "mkdir":
        os.mkdir(args[0])
    elif action == "write":
        with open(args[0], "w") as f:
            f.write(args[1])
    elif action == "rmtree":
        shutil.rmtree(args[0])
    else:
        raise SystemExit(f"stale_step: unknown action {action!r}")
    return {}


def main() -> None:
    steps = json.loads(sys.argv[1])
    patching = sys.modules.get("fsguard.patching")
    results = []
    for action, *args in steps:
        result: dict[str, Any] = {"action": action, "args": args, "ok": True, "error": None}
        started = time.monotonic()
        found, exc = crash_of(run, action, args)  # a lost race ends the step's thread: a would-be crash
        if exc is None:
            result.update(found)
        elif not isinstance(exc, OSError):
            raise exc
        else:
            result["ok"] = False
            result["error"] = {
                "type": type(exc).__name__,
                "errno": exc.errno,
                "strerror": exc.strerror,
                "filename": exc.filename,
                "filename2": exc.filename2,
            }
        result["seconds"] = time.monotonic() - started
        results.append(result)
    print(json.dumps({"patched": patching.installed() if patching else [], "steps": results}), flush=True)


if __name__ == "__main__":
    main()
