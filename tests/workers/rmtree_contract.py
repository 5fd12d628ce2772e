"""One rank of a job whose ``shutil.rmtree`` calls pass a handler (``onerror``/``onexc``) or ``ignore_errors``,
for ``tests/test_rmwalk_contract.py`` (issue 45: the standard call's contract in a launched rank).

Run as ``python rmtree_contract.py CASE WRAP HANDLER ROOT`` by every rank at once (``ROOT/gate`` must exist).
``HANDLER``: ``onerror``, ``onexc`` or ``ignore``. ``WRAP``: what stands around the call: ``none`` (nothing: an
error ends the process), ``except`` (``except Exception: log``, a framework's callback runner), ``executor`` (a
``ThreadPoolExecutor`` future, its exception read back). Cases, each deterministic:

* ``missing``: every rank removes a directory that was never there (its parent made during this job);
* ``removed``: rank 0 removes a tree, then ranks 1 and 2 remove it too (a tree a peer removed);
* ``entries``: ranks 1 and 2 each remove a tree of their own; at their walk's first ``unlink`` rank 0 removes the
  rest of the tree's entries (entries a peer removed), then the walk goes on;
* ``callback``: an optional tmp dir removed in an end-of-epoch callback with ``onerror=log`` (never made);
* ``staging``: ranks 1 and 2 clean one staging directory at once, with ``onerror=log``;
* ``rotation``: every rank removes the old checkpoints (made by rank 0) in an executor with
  ``onerror=lambda *a: None``.

Each rank prints one JSON line per handler call as it happens, then ``{"done": ...}`` with what the wrapper
caught and what is left. The racing cases (``staging``, ``rotation``) print only what does not depend on who
came first: the exception types the handler saw, what was raised, what is left.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from gate import barrier  # run as a script: this directory is on sys.path

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
CASE, WRAP, HANDLER, ROOT = sys.argv[1:5]
WORK = os.path.join(ROOT, "work")
SEEN: list[list[Any]] = []


def rel(path: Any) -> str:
    return os.fsdecode(path or "").replace(ROOT, "<root>")


def describe(func: Any) -> str:
    for name in ("lstat", "open", "unlink", "rmdir", "scandir", "close"):
        if func is getattr(os, name):
            return "os." + name
    return "os.path.islink" if func is os.path.islink else getattr(func, "__qualname__", repr(func))


def log(*entry: Any) -> None:
    SEEN.append(list(entry))
    print(json.dumps(list(entry)), flush=True)


def onerror(func: Any, path: Any, exc_info: Any) -> None:
    log("onerror", describe(func), rel(path), exc_info[0].__name__, getattr(exc_info[1], "errno", None))


def onexc(func: Any, path: Any, exc: BaseException) -> None:
    log("onexc", describe(func), rel(path), type(exc).__name__, getattr(exc, "errno", None), rel(exc.filename))


def options() -> dict[str, Any]:
    if HANDLER == "ignore":
        return {"ignore_errors": True}
    return {"onexc": onexc} if HANDLER == "onexc" else {"onerror": onerror}


def wrapped(call: Callable[[], Any]) -> str | None:
    """Run ``call`` as ``WRAP`` says; the name of the exception the wrapper caught (None: none)."""
    if WRAP == "none":
        call()
        return None
    if WRAP == "executor":
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            error = pool.submit(call).exception()
        return None if error is None else type(error).__name__
    try:  # a framework's callback runner
        call()
    except Exception as error:  # logged and swallowed, as the runner does
        return type(error).__name__
    return None


def tree(path: str, names: tuple[str, ...] = ("f0", "f1", "f2")) -> str:
    os.makedirs(os.path.join(path, "sub"))
    for name in (*names, os.path.join("sub", "g")):
        with open(os.path.join(path, name), "w") as f:
            f.write(name)
    return path


def peer_removes_entries() -> None:
    """Rank 0, for ranks 1 and 2: when a rank asks (its walk's first unlink), remove every other entry of its tree."""
    for _ in range(2):
        deadline = time.monotonic() + 60
        while not (asked := [n for n in os.listdir(WORK) if n.startswith("ask.")]):
            if time.monotonic() > deadline:
                raise SystemExit("rank 0: nobody asked")
            time.sleep(0.001)
        name = asked[0]
        rank, first = name.split(".", 2)[1:]
        target = os.path.join(WORK, f"t{rank}")
        for entry in os.listdir(target):
            if entry == first:
                continue
            full = os.path.join(target, entry)
            (shutil.rmtree if os.path.isdir(full) else os.unlink)(full)
        os.rename(os.path.join(WORK, name), os.path.join(WORK, f"done.{rank}"))


def asking_unlink(real: Callable[..., Any]) -> Callable[..., Any]:
    """``os.unlink`` that, at its first call, lets rank 0 remove the rest of the tree first (and waits for it)."""
    asked: list[bool] = []

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if not asked:
            asked.append(True)
            with open(os.path.join(WORK, f"ask.{RANK}.{os.path.basename(os.fsdecode(path))}"), "w"):
                pass
            while not os.path.exists(os.path.join(WORK, f"done.{RANK}")):
                time.sleep(0.001)
        real(path, *args, **kwargs)

    return unlink


def main() -> None:
    os.makedirs(WORK, exist_ok=True)
    barrier(ROOT, "start", RANK, WORLD)
    caught: list[str | None] = []
    left: list[bool] = []
    if CASE in ("missing", "callback"):
        target = os.path.join(WORK, f"{'tmp_eval' if CASE == 'callback' else 'never'}-{RANK}")
        caught.append(wrapped(lambda: shutil.rmtree(target, **options())))
    elif CASE == "removed":
        target = os.path.join(WORK, "t")
        if RANK == 0:
            tree(target)
        barrier(ROOT, "made", RANK, WORLD)
        if RANK == 0:
            shutil.rmtree(target)
        barrier(ROOT, "gone", RANK, WORLD)
        if RANK:
            caught.append(wrapped(lambda: shutil.rmtree(target, **options())))
    elif CASE == "entries":
        target = os.path.join(WORK, f"t{RANK}")
        if RANK:
            tree(target)
        barrier(ROOT, "made", RANK, WORLD)
        if RANK == 0:
            peer_removes_entries()
        else:
            real, os.unlink = os.unlink, asking_unlink(os.unlink)
            try:
                caught.append(wrapped(lambda: shutil.rmtree(target, **options())))
            finally:
                os.unlink = real
        left.append(os.path.exists(target))
    elif CASE == "staging":
        target = os.path.join(WORK, "tmp-checkpoint-1")
        if RANK == 0:
            tree(target, tuple(f"shard-{i}" for i in range(200)))
        barrier(ROOT, "made", RANK, WORLD)
        if RANK:
            caught.append(wrapped(lambda: shutil.rmtree(target, **options())))
        barrier(ROOT, "cleaned", RANK, WORLD)
        left.append(os.path.exists(target))
    elif CASE == "rotation":
        old = [os.path.join(WORK, f"checkpoint-{n}") for n in range(1, 5)]
        if RANK == 0:
            for path in old:
                tree(path, tuple(f"shard-{i}" for i in range(50)))
        barrier(ROOT, "made", RANK, WORLD)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(shutil.rmtree, path, onerror=lambda *a: None) for path in old]
        caught.extend(None if f.exception() is None else type(f.exception()).__name__ for f in futures)
        barrier(ROOT, "rotated", RANK, WORLD)
        left.extend(os.path.exists(path) for path in old)
    if CASE in ("staging", "rotation"):  # who came first decides which calls fail: only the kinds are compared
        kinds = sorted({entry[3] for entry in SEEN})
        print(json.dumps({"done": {"caught": caught, "left": left, "kinds": kinds}}), flush=True)
    else:
        print(json.dumps({"done": {"caught": caught, "left": left}}), flush=True)


if __name__ == "__main__":
    main()
