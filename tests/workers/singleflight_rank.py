"""One rank of tests/test_singleflight.py: connect (a first serialized call), wait for the start file, then
make the call named on the command line and print what it returned or raised, as JSON. ``rmtree_stuck``: an
rmtree that stops inside the walk (see ``stuck``), for a test that kills it there. ``claim_*``: a call that
claims a name, in a ``try`` of the program's own (``claim``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

from gate import crash_of  # run as a script: this directory is on sys.path

op, target, gate = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(target + f".warm{os.environ['RANK']}", exist_ok=True)  # the store connection, before the gate
if not os.environ.get("KEEP_WARM"):  # a removal: it ends the reuse of every makedirs outcome made before it
    os.rmdir(target + f".warm{os.environ['RANK']}")
open(gate + f".ready{os.environ['RANK']}", "w").close()
deadline = time.monotonic() + 600  # bounded: a test that timed out before opening the gate leaves no rank behind
while not os.path.exists(gate):
    if time.monotonic() > deadline:
        raise SystemExit(f"singleflight_rank {os.environ['RANK']}: the start gate {gate} never opened")
    time.sleep(0.002)


def stuck(path: object, *args: object, **kwargs: object) -> None:
    """In place of ``os.unlink`` (which the rmtree walk calls): the rank stops inside its guarded call, holding
    its flight and its lock, until the test kills it."""
    open(gate + ".stuck", "w").close()
    time.sleep(600)


def claim() -> dict[str, object]:
    """A call that claims a name, its error handled by the program (``except OSError``): did this rank win,
    and if not, the standard library's error as the program saw it."""
    rank = os.environ["RANK"]
    try:
        if op == "claim_makedirs":
            os.makedirs(target)
        elif op == "claim_mkdir":
            os.mkdir(target)
        elif op == "claim_rename":  # every rank renames the one staging directory
            os.rename(target + ".src", target)
        elif op == "claim_rename_own":  # each rank renames its own directory onto the one name
            os.rename(target + f".src{rank}", target)
        elif op == "claim_excl":
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        else:
            raise ValueError(op)
    except OSError as error:
        return {"won": False, "type": type(error).__name__, "errno": error.errno, "filename": error.filename}
    return {"won": True}


if op.startswith("claim_"):
    print(json.dumps(claim()))
    raise SystemExit(0)


def call() -> None:  # the error is handled one frame up: fsguard decides as for an unhandled error
    if op == "makedirs":
        os.makedirs(target)
    elif op == "makedirs_exist_ok":
        os.makedirs(target, exist_ok=True)
    elif op == "rmtree":
        shutil.rmtree(target)
    elif op == "rmtree_stuck":
        os.unlink = stuck
        shutil.rmtree(target)
    else:
        raise ValueError(op)


_, error = crash_of(call)  # a lost race ends the call's thread: a would-be crash
if error is None:
    print(json.dumps({"ok": True}))
else:
    print(json.dumps({"ok": False, "type": type(error).__name__, "errno": error.errno, "filename": error.filename}))
