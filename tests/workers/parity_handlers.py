"""Rows for ``tests/test_handlers.py``: a race fsguard's evidence would absorb, inside the caller's own handlers.

Run as ``python parity_handlers.py BASE``, once with ``FSGUARD=force`` and once with ``FSGUARD=0``; prints one
JSON object ``{row: outcome}`` on stdout and ``handler-row: <name>`` on stderr before each row (so the test
can tell which row wrote which ``fsguard:`` record). Each row, in ``BASE/<row>``, plays the peer with the
unguarded function (``__wrapped__``: what this process does through it is not its own doing for fsguard),
then makes the guarded call (``# <- call``) inside the handler under test. ``EXPECT`` says what fsguard
must do: ``deferred`` (the caller handles the error: it gets exactly what the standard library raised, and
a ``deferred`` record names the handler) or ``absorbed`` (not a handler of this call: a ``with`` block,
``try/finally``, a broad handler further up, a non-matching clause).

The outcome: ``handled`` (which handler ran, if any), the exception the handler (or the row) got, in the
row's own frames, or ``ok``, and the row directory's tree afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import sys
import threading
import traceback
import unittest
from collections.abc import Callable
from contextlib import suppress
from typing import Any

Outcome = dict[str, Any]
ROWS: dict[str, Callable[[str, Outcome], Any]] = {}
EXPECT: dict[str, tuple[str, str | None]] = {}  # row -> (decision, handler label in the record)


def row(expect: str, handler: str | None = None) -> Callable[[Callable[[str, Outcome], Any]], Any]:
    def add(act: Callable[[str, Outcome], Any]) -> Any:
        ROWS[act.__name__] = act
        EXPECT[act.__name__] = (expect, handler)
        return act

    return add


def original(function: Any) -> Any:
    return getattr(function, "__wrapped__", function)


def peer_made(d: str) -> str:
    path = os.path.join(d, "run-0")
    original(os.mkdir)(path)  # as a peer of this job would, moments ago
    return path


def peer_moved(d: str) -> tuple[str, str]:
    src, dst = os.path.join(d, "tmp-checkpoint"), os.path.join(d, "checkpoint")
    with open(src, "w") as f:
        f.write("weights")
    original(os.rename)(src, dst)  # a peer did the same move first
    return src, dst


def peer_removed(d: str) -> str:
    top = os.path.join(d, "staging")
    original(os.mkdir)(top)
    original(os.rmdir)(top)  # a peer removed it (its parent changed during the job)
    return top


def seen(out: Outcome, label: str, error: BaseException) -> None:
    out["handled"] = label
    out["error"] = describe(error)


def describe(exc: BaseException) -> dict[str, Any]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == __file__]
    return {
        "type": type(exc).__name__,
        "errno": getattr(exc, "errno", None),
        "filename": os.path.basename(str(getattr(exc, "filename", ""))),
        "filename2": os.path.basename(str(getattr(exc, "filename2", ""))),
        "str": str(exc).replace(BASE, "<base>"),
        "context": None if exc.__context__ is None else type(exc.__context__).__name__,
        "cause": None if exc.__cause__ is None else type(exc.__cause__).__name__,
        "frames": [[f.name, f.lineno] for f in frames],
    }


# --- the caller handles it: deferred ---------------------------------------------------------------------


@row("deferred", "except FileExistsError")
def exact_class(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        os.makedirs(path)  # <- call
    except FileExistsError as error:
        seen(out, "exact", error)


@row("deferred", "except OSError")
def base_class(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        os.makedirs(path)  # <- call
    except OSError as error:
        seen(out, "base", error)


@row("deferred", "except (KeyError, FileExistsError)")
def tuple_of_classes(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        os.makedirs(path)  # <- call
    except (KeyError, FileExistsError) as error:
        seen(out, "tuple", error)


@row("deferred", "except")
def bare_except(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        os.makedirs(path)  # <- call
    except KeyError:
        out["handled"] = "wrong clause"
    except:  # noqa: E722 - the idiom under test
        seen(out, "bare", sys.exc_info()[1])  # type: ignore[arg-type]


@row("deferred", "with contextlib.suppress(FileExistsError)")
def contextlib_suppress(d: str, out: Outcome) -> None:
    path = peer_made(d)
    out["handled"] = "suppress"
    with contextlib.suppress(FileExistsError):
        os.makedirs(path)  # <- call
        out["handled"] = "not raised"


@row("deferred", "with suppress(KeyError, OSError)")
def suppress_base_class(d: str, out: Outcome) -> None:
    path = peer_made(d)
    out["handled"] = "suppress"
    with suppress(KeyError, OSError):
        os.makedirs(path)  # <- call
        out["handled"] = "not raised"


def make_one(path: str) -> None:
    os.makedirs(path)  # <- call


def make_two(path: str) -> None:
    make_one(path)


@row("deferred", "except FileExistsError")
def helper_one_frame_down(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        make_one(path)
    except FileExistsError as error:
        seen(out, "helper 1", error)


@row("deferred", "except FileExistsError")
def helper_two_frames_down(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        make_two(path)
    except FileExistsError as error:
        seen(out, "helper 2", error)


@row("deferred", "except FileNotFoundError")
def rename_exact_class(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)
    try:
        os.rename(src, dst)  # <- call
    except FileNotFoundError as error:
        seen(out, "rename", error)


@row("deferred", "except OSError")
def replace_py2_style_errno(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)
    try:
        os.replace(src, dst)  # <- call
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
        seen(out, "replace", e)


@row("deferred", "except FileNotFoundError")
def rmtree_of_a_tree_already_gone(d: str, out: Outcome) -> None:
    top = peer_removed(d)
    try:
        shutil.rmtree(top)  # <- call
    except FileNotFoundError as error:
        seen(out, "rmtree", error)


@row("deferred", "except FileNotFoundError")
def shutil_move_in_a_handler(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)  # shutil.move's own handler is passed over: the caller's decides
    try:
        shutil.move(src, dst)  # <- call
    except FileNotFoundError as error:
        seen(out, "move", error)


class _Case(unittest.TestCase):
    def runTest(self) -> None:
        pass


@row("deferred", "with tc.assertRaises(FileExistsError)")
def unittest_assert_raises_context(d: str, out: Outcome) -> None:
    path = peer_made(d)
    tc = _Case()
    with tc.assertRaises(FileExistsError) as raised:
        os.makedirs(path)  # <- call
    seen(out, "assertRaises", raised.exception)


@row("deferred", "with self (expecting FileNotFoundError)")
def unittest_assert_raises_callable(d: str, out: Outcome) -> None:
    top = peer_removed(d)  # the caller is unittest's own frame: ``with self:`` around the call
    _Case().assertRaises(FileNotFoundError, shutil.rmtree, top)
    out["handled"] = "assertRaises"


ATTEMPTS = 1


def retry_every_error(function: Callable[..., Any]) -> Callable[..., Any]:
    """A hand-written retry decorator: catches in its own frame (broadly), and calls the function again."""

    def wrapper(*args: Any) -> Any:
        for _ in range(ATTEMPTS):  # one here: each failed try would make its own record
            try:
                return function(*args)
            except Exception as error:
                seen(args[1], "retry", error)
        return None

    return wrapper


@retry_every_error
def make_or_retry(path: str, out: Outcome) -> None:
    os.makedirs(path)  # <- call


@row("deferred", "except Exception")
def retry_decorator_one_frame_up(d: str, out: Outcome) -> None:
    path = peer_made(d)
    make_or_retry(path, out)


@contextlib.contextmanager
def ignoring(*classes: type[BaseException]) -> Any:
    try:
        yield
    except classes:
        pass


@row("deferred", "with ignoring(FileExistsError)")
def contextmanager_helper(d: str, out: Outcome) -> None:
    path = peer_made(d)
    out["handled"] = "suppress"  # a suppressing helper: the error does not reach the row
    with ignoring(FileExistsError):
        os.makedirs(path)  # <- call
        out["handled"] = "not raised"


def make_another(path: str) -> None:
    """``make_one`` at a call site of its own (stderr shows a few records per call site and decision)."""
    os.makedirs(path)  # <- call


def logged(path: str, out: Outcome) -> None:
    try:
        make_another(path)
    except Exception:  # reporting that passes the error on: the handler above decides
        out["logged"] = True
        raise


@row("deferred", "except FileExistsError")
def specific_handler_above_one_that_reraises(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        logged(path, out)
    except FileExistsError as error:
        seen(out, "above reraise", error)


@row("deferred", "with suppress(FileExistsError)")
def suppress_around_a_handler_that_reraises(d: str, out: Outcome) -> None:
    path = peer_made(d)  # filelock's release: ``with suppress(FileNotFoundError): try: ... except OSError: raise``
    out["handled"] = "suppress"
    with suppress(FileExistsError):
        try:
            make_another(path)
        except OSError as error:
            out["errno"] = error.errno
            raise
        out["handled"] = "not raised"


# --- not a handler of this call: absorbed ----------------------------------------------------------------


@row("deferred", "except Exception")
def broad_handler_in_a_loop(d: str, out: Outcome) -> None:
    path = peer_made(d)
    for item in [path]:  # a batch loop whose broad handler swallows the error: the program's answer
        try:
            make_one(item)
        except Exception as error:
            seen(out, "batch", error)


def make_far_inner(path: str) -> None:
    """A call site of its own (stderr shows a few records per call site and decision)."""
    os.makedirs(path)  # <- call


def make_far(path: str) -> None:
    make_far_inner(path)


@row("deferred", "except Exception")
def broad_handler_two_frames_up(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        make_far(path)
    except Exception as error:  # it swallows the error, two frames above the call: it decides
        seen(out, "broad", error)


@row("absorbed")
def non_matching_clause(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        os.makedirs(path)  # <- call
    except (KeyError, FileNotFoundError) as error:
        seen(out, "wrong class", error)


@row("absorbed")
def suppress_of_another_class(d: str, out: Outcome) -> None:
    path = peer_made(d)
    with suppress(FileNotFoundError):
        os.makedirs(path)  # <- call


@row("absorbed")
def with_lock_around_rename(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)
    with threading.Lock():
        os.rename(src, dst)  # <- call


@row("absorbed")
def with_open_file_around_replace(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)
    with open(os.path.join(d, "log"), "w") as log:
        os.replace(src, dst)  # <- call
        log.write("published\n")


@row("absorbed")
def try_finally_around_rename(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)
    try:
        os.rename(src, dst)  # <- call
    finally:
        out["finally"] = True


@row("absorbed")
def handler_around_another_statement(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        int("7")
    except ValueError as error:
        seen(out, "other statement", error)
    os.makedirs(path)  # <- call


@row("absorbed")
def inside_an_except_block(d: str, out: Outcome) -> None:
    path = peer_made(d)
    try:
        raise KeyError("first")
    except KeyError:
        os.makedirs(path)  # <- call (the handler is not around this call)


@row("absorbed")
def shutil_move_peer_did_the_same(d: str, out: Outcome) -> None:
    src, dst = peer_moved(d)  # shutil.move's own except OSError (copy fallback) is not a handler of the race
    shutil.move(src, dst)  # <- call


@row("absorbed")
def makedirs_exist_ok_stale_lookup_in_a_handler(d: str, out: Outcome) -> None:
    path = os.path.join(d, "run-0")
    state = {"mkdir": False, "look": False}

    def node_view(event: str, args: Any) -> None:
        if event == "os.mkdir" and os.fspath(args[0]) == path and not state["mkdir"]:
            state["mkdir"] = True  # EEXIST while this node's lookup sees no directory (a stale cache)
            open(path, "w").close()
        elif event == "os.scandir" and state["mkdir"] and not state["look"]:
            state["look"] = True  # the fresh listing shows what the peer really made: a directory
            os.unlink(path)
            original(os.mkdir)(path)

    # The audit hook plays a caching mount's stale lookup; on a coherent local disk fsguard trusts the name's
    # own lstat and never lists the parent (rightly: no lookup is stale there). So this directory's mount is
    # declared one whose lookups may be stale, as bindfs or NFS would be (fsguard.mounts).
    from fsguard import mounts

    dev = os.stat(d).st_dev
    mounts.MOUNTS[dev] = mounts.Mount(d, "fuse.simulated", "test", {}, stale=True, shared=True)
    HOOK.append(node_view)
    try:
        os.makedirs(path, exist_ok=True)  # <- call
    except FileExistsError as error:  # waits for "exists and is not a directory": not the case
        seen(out, "exist_ok", error)
    finally:
        HOOK.clear()
        mounts.forget()


HOOK: list[Callable[[str, Any], None]] = []
BASE = ""


def ends_thread(act: Callable[[str, Outcome], Any], d: str, out: Outcome, escaped: list[BaseException]) -> None:
    """A row as its thread's target: what escapes it is seen, and passed on to the thread's end."""
    try:
        act(d, out)
    except BaseException as error:
        escaped.append(error)
        raise


class Records(io.TextIOBase):
    """stderr while a row's thread runs: fsguard's record lines go on, the thread's end report does not."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        while "\n" in self.pending:
            line, self.pending = self.pending.split("\n", 1)
            if line.startswith("fsguard: "):
                self.real.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.real.flush()


def main() -> None:
    global BASE
    BASE = os.path.abspath(sys.argv[1])
    sys.addaudithook(lambda event, args: [hook(event, args) for hook in list(HOOK)] and None)
    results: dict[str, Outcome] = {}
    for name, act in ROWS.items():
        d = os.path.join(BASE, name)
        os.mkdir(d)
        sys.stderr.write(f"handler-row: {name}\n")
        sys.stderr.flush()
        out: Outcome = {"handled": None}
        escaped: list[BaseException] = []
        # Each row runs in a thread of its own: an error that escapes it ends the thread (a would-be crash,
        # which fsguard may absorb). The default threading.excepthook reports it (a program-set hook would
        # decide: issue 45); its report is left out of stderr, fsguard's records kept.
        thread = threading.Thread(target=ends_thread, args=(act, d, out, escaped))
        stderr, sys.stderr = sys.stderr, Records(sys.stderr)
        try:
            thread.start()
            thread.join()
        finally:
            sys.stderr = stderr
        out["ok"] = not escaped
        if escaped:  # the row's escaping error is its outcome
            out["escaped"] = describe(escaped[0])
        sys.stderr.flush()
        out["state"] = sorted(os.listdir(d))
        results[name] = out
    meta = {"python": list(sys.version_info[:2]), "patched": hasattr(os.makedirs, "__wrapped__")}
    print(json.dumps({"meta": meta, "rows": results}))


if __name__ == "__main__":
    main()
