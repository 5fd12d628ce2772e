"""The handler oracle against ground truth: generated programs, each run without fsguard (issue 45).

Each program nests ``try``/``except``/``else``/``finally`` (``return``/``break``/``continue`` in ``finally``),
``with`` blocks (``suppress``, class managers whose ``__exit__`` returns None/False/True/conditionally,
``@contextmanager`` helpers of one and of two yields, ``ExitStack``, conditional managers), decorators
(``@contextmanager`` and ``ContextDecorator`` ones among them), helper frames, generators, threads (the
default and a program-set ``threading.excepthook``), executors and asyncio around one failing call.

The failing call is ``fail()``, a stand-in for an os call: it asks the oracle (``caller_handles``) with the
real frames, then raises a real ``OSError``. The truth is what the run shows: the error (or one it caused)
reached the top of a thread whose hook is the default (``ends the thread``), or not (``handled``). An oracle
answer of ``ends the thread`` where the truth is ``handled`` is unsound; the run counts those and the share
of true crashes the oracle recognised (completeness).

Each program runs in a thread of its own in this process (the thread's top is ``threading``'s bootstrap).

Run: ``python -m tests.oracle_fuzz --n 10000 [--seed 1] [--show 3]`` (exit status 1 on an unsound answer).
"""

from __future__ import annotations

import argparse
import io
import json
import linecache
import random
import sys
import threading
import time
import warnings
from typing import Any

try:
    from fsguard.oracle import caller_handles
except ImportError:  # before the oracle was a package (e3a2108)
    from fsguard.handlers import caller_handles  # type: ignore[no-redef]

EXCEPTIONS = ("OSError", "FileExistsError", "FileNotFoundError", "ValueError", "Exception", "BaseException")
CLAUSES = (*EXCEPTIONS, "(KeyError, OSError)", "(KeyError, ValueError)")
HANDLER_BODIES = (
    "pass",
    "raise",
    "return",
    "raise RuntimeError('converted') from None",
    "if FLAG:\n    raise",
    "if not FLAG:\n    raise",
    "note()\nraise",
    "sys.exit(3)",
    "handle(e)",
    "absorb(e)",
    "raise e",
    "try:\n    raise\nexcept OSError:\n    pass",
    "try:\n    raise\nfinally:\n    note()",
    "with suppress(OSError):\n    raise",
    "with nullcontext():\n    raise",
)
FINALLY_BODIES = ("pass", "note()", "return", "if FLAG:\n    return", "if not FLAG:\n    return")
LOOP_BODIES = ("break", "continue", "if FLAG:\n    break", "if FLAG:\n    continue")

# Context managers, defined once in every program's prelude.
PRELUDE = """
import asyncio, concurrent.futures, contextlib, functools, os, sys, threading
from contextlib import suppress, nullcontext, ExitStack, contextmanager

def note():
    NOTES.append(1)

def handle(e):
    raise e

def absorb(e):
    pass

class Quiet:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return None

class No:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False

class Yes:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return True

class Flagged:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return FLAG

class Ignoring(contextlib.ContextDecorator):
    def __init__(self, *classes):
        self.classes = classes
    def __enter__(self):
        return self
    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, self.classes)

class Passing(contextlib.ContextDecorator):
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return None

@contextmanager
def swallowing(*classes):
    try:
        yield
    except classes:
        pass

@contextmanager
def timed():
    try:
        yield
    finally:
        note()

@contextmanager
def plain():
    yield

@contextmanager
def returning():
    try:
        yield
    finally:
        return

@contextmanager
def first(local):
    if local:
        try:
            yield
        finally:
            note()
    else:
        yield

@contextmanager
def profiled():
    if FLAG:
        with nullcontext():
            yield
    else:
        yield

@contextmanager
def two_ways():
    if FLAG:
        yield
    else:
        try:
            yield
        except OSError:
            pass

@contextmanager
def rethrowing():
    try:
        yield
    except BaseException:
        if FLAG:
            raise
"""

MANAGERS = (
    "suppress(FileExistsError)",
    "suppress(FileNotFoundError)",
    "suppress(OSError, KeyError)",
    "nullcontext()",
    "open(os.devnull)",
    "threading.Lock()",
    "Quiet()",
    "No()",
    "Yes()",
    "Flagged()",
    "Ignoring(FileExistsError)",
    "Ignoring(KeyError)",
    "Passing()",
    "swallowing(FileExistsError)",
    "swallowing(KeyError)",
    "timed()",
    "plain()",
    "returning()",
    "first(FLAG)",
    "first(not FLAG)",
    "profiled()",
    "two_ways()",
    "rethrowing()",
)
DECORATORS = (
    "swallowing(FileExistsError)",
    "swallowing(ValueError)",
    "timed()",
    "plain()",
    "returning()",
    "first(True)",
    "Ignoring(OSError)",
    "Ignoring(KeyError)",
    "Passing()",
    "wrapping",
    "catching",
)
WRAPPERS = """
def wrapping(f):
    @functools.wraps(f)
    def inner(*a, **k):
        return f(*a, **k)
    return inner

def catching(f):
    @functools.wraps(f)
    def inner(*a, **k):
        try:
            return f(*a, **k)
        except OSError:
            return None
    return inner
"""


def indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


def split(text: str) -> list[str]:
    return text.split("\n")


class Program:
    """One generated program: module-level definitions and ``main``'s body."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.defs: list[list[str]] = []
        self.count = 0
        self.flag = rng.random() < 0.5
        self.features: set[str] = set()

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def body(self, depth: int, loop: bool) -> list[str]:
        """Statements that reach the failing call, nested ``depth`` constructs deep at most."""
        rng = self.rng
        if depth <= 0 or rng.random() < 0.12:
            return ["fail()"]
        kind = rng.choice(
            ("try", "try", "try", "finally", "finally", "loop", "with", "with", "with", "call", "decorated",
             "generator", "thread", "executor", "asyncio", "exitstack", "conditional", "object", "two", "rebound")
        )  # fmt: skip
        self.features.add(kind)
        if kind in ("call", "decorated", "generator", "thread", "executor", "asyncio"):
            return self.frame(kind, depth)
        if kind == "loop":
            return self.loop(depth)
        inner = self.body(depth - 1, loop)
        if kind == "try":
            return self.try_except(inner, loop)
        if kind == "finally":
            return ["try:", *indent(inner), "finally:", *indent(self.choice(FINALLY_BODIES, loop))]
        if kind == "with":
            return [f"with {rng.choice(MANAGERS)}:", *indent(inner)]
        if kind == "exitstack":
            return [
                "with ExitStack() as stack:",
                f"    stack.enter_context({rng.choice(MANAGERS)})",
                *indent(inner),
            ]
        if kind == "two":
            return [f"with {rng.choice(MANAGERS)}, {rng.choice(MANAGERS)}:", *indent(inner)]
        if kind == "rebound":
            name = self.name("cm")
            a, b = rng.choice(MANAGERS), rng.choice(MANAGERS)
            return [f"{name} = {a}", f"with {name}:", f"    {name} = {b}", *indent(inner)]
        if kind == "conditional":
            a, b = rng.choice(MANAGERS), rng.choice(MANAGERS)
            return [f"with ({a} if FLAG else {b}):", *indent(inner)]
        name = self.name("cm")
        return [f"{name} = {rng.choice(MANAGERS)}", f"with {name}:", *indent(inner)]

    def choice(self, bodies: tuple[str, ...], loop: bool) -> list[str]:
        return split(self.rng.choice(bodies + (LOOP_BODIES if loop else ())))

    def try_except(self, inner: list[str], loop: bool) -> list[str]:
        rng = self.rng
        lines = ["try:", *indent(inner)]
        for _ in range(rng.randint(1, 2)):
            clause = rng.choice(CLAUSES)
            lines += [f"except {clause} as e:"]
            lines += indent(self.choice(HANDLER_BODIES, loop))
        if rng.random() < 0.25:
            lines += ["except:", *indent(self.choice(HANDLER_BODIES, loop))]
        if rng.random() < 0.2:
            lines += ["else:", "    note()"]
        if rng.random() < 0.3:
            lines += ["finally:", *indent(self.choice(FINALLY_BODIES, loop))]
        return lines

    def loop(self, depth: int) -> list[str]:
        inner = self.body(depth - 1, True)
        return ["for _ in range(2):", *indent(inner)]

    def frame(self, kind: str, depth: int) -> list[str]:
        """A construct that puts the failing call in a frame of its own."""
        rng = self.rng
        inner = self.body(depth - 1, False)
        name = self.name("f")
        if kind == "call":
            self.defs.append([f"def {name}():", *indent(inner)])
            return [f"{name}()"]
        if kind == "decorated":
            self.defs.append([f"@{rng.choice(DECORATORS)}", f"def {name}():", *indent(inner)])
            return [f"{name}()"]
        if kind == "generator":
            self.defs.append([f"def {name}():", *indent(inner), "    yield 1"])
            loop = rng.choice((f"for _ in {name}():", f"list({name}())", f"next({name}(), None)"))
            return [loop, "    pass"] if loop.startswith("for") else [loop]
        if kind == "thread":
            self.defs.append(
                [f"def {name}():", "    try:", *indent(inner, " " * 8), "    except BaseException as e:",
                 "        top(e)", "        raise"]
            )  # fmt: skip
            hook = ["threading.excepthook = lambda args: None"] if rng.random() < 0.4 else []
            return [*hook, f"t = threading.Thread(target={name})", "t.start()", "t.join()"]
        if kind == "executor":
            self.defs.append([f"def {name}():", *indent(inner)])
            wait = rng.choice(("fut.result()", "fut.exception()", "pass"))
            return [
                "with concurrent.futures.ThreadPoolExecutor(1) as pool:",
                f"    fut = pool.submit({name})",
                f"    {wait}",
            ]
        # asyncio
        self.defs.append([f"async def {name}():", *indent(inner)])
        return [
            rng.choice(
                (
                    f"asyncio.run({name}())",
                    f"asyncio.run(asyncio.wait_for({name}(), 5))",
                )
            )
        ]

    def source(self, depth: int) -> str:
        main = self.body(depth, False)
        lines = [PRELUDE, WRAPPERS, f"FLAG = {self.flag}"]
        for definition in self.defs:
            lines += ["", *definition]
        lines += ["", "def main():", *indent(main)]
        return "\n".join(lines) + "\n"


def generate(seed: int, depth: int = 5) -> tuple[str, set[str]]:
    rng = random.Random(seed)
    program = Program(rng)
    return program.source(rng.randint(1, depth)), program.features


class Run:
    """What one run saw: the oracle's answer at the failing call and the error's end."""

    def __init__(self) -> None:
        self.failed = False
        self.answer: Any = "not asked"
        self.error: BaseException | None = None
        self.tops: list[tuple[BaseException, bool]] = []


RUN = Run()


def fail() -> None:
    """The stand-in for a failing os call: ask the oracle with the real frames, then raise the real error."""
    if RUN.failed:
        return
    RUN.failed = True
    error = FileExistsError(17, "File exists", "fuzz-token")
    RUN.answer = caller_handles(error, sys._getframe(1))
    RUN.error = error
    raise error


def top(error: BaseException) -> None:
    """The error reached a thread's top frame: with the default hook the thread ends with it."""
    RUN.tops.append((error, threading.excepthook is threading.__excepthook__))


def _caused(error: BaseException | None, root: BaseException) -> bool:
    seen = 0
    while error is not None and seen < 20:
        if error is root:
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def run(seed: int, depth: int = 5) -> dict[str, Any]:
    """Generate and run one program; {"seed", "truth": "crash"/"handled", "oracle": "crash"/"defer", ...}."""
    text, features = generate(seed, depth)
    return {"seed": seed, "features": sorted(features), **run_text(text, f"<fuzz-{seed}>")}


def run_text(text: str, filename: str) -> dict[str, Any]:
    """Run one program's text (its ``main`` in a thread of its own): the truth and the oracle's answer."""
    global RUN
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": "fuzz", "fail": fail, "top": top, "NOTES": []}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(text, filename, "exec"), namespace)
    RUN = Run()

    def thread_main() -> None:
        try:
            namespace["main"]()
        except BaseException as e:
            top(e)
            raise

    hook, stderr = threading.excepthook, sys.stderr
    sys.stderr = captured = io.StringIO()
    threading.excepthook = threading.__excepthook__  # the default (a harness's own, such as pytest's, decides)
    try:
        worker = threading.Thread(target=thread_main, daemon=True)
        worker.start()
        worker.join(10)
        alive = worker.is_alive()
    finally:
        threading.excepthook, sys.stderr = hook, stderr
        linecache.cache.pop(filename, None)
    result: dict[str, Any] = {}
    if alive:
        return {**result, "truth": "timeout"}
    if RUN.error is None:
        return {**result, "truth": "no call"}
    # a thread the program did not wrap (threading.Timer's) ends with the default hook's report
    report = captured.getvalue()
    reported = "Exception in thread" in report and "'fuzz-token'" in report
    crashed = reported or any(default and _caused(error, RUN.error) for error, default in RUN.tops)
    answer = RUN.answer
    result.update(truth="crash" if crashed else "handled", oracle="crash" if answer is None else "defer")
    if answer is not None:
        result["why"] = answer.get("reason") or answer.get("handler")
    return result


# A program run as a script of its own: its main thread's top is the interpreter's (``sys.excepthook``).
SCRIPT_HEAD = """
import json, sys, threading
sys.path.insert(0, {root!r})
try:
    from fsguard.oracle import caller_handles
except ImportError:
    from fsguard.handlers import caller_handles
NOTES, RUN = [], {{"failed": False, "answer": "not asked", "tops": []}}

def fail():
    if RUN["failed"]:
        return
    RUN["failed"] = True
    RUN["error"] = error = FileExistsError(17, "File exists", "fuzz-token")
    answer = caller_handles(error, sys._getframe(1))
    RUN["answer"] = None if answer is None else answer.get("reason", "?")
    raise error

def top(error):
    caused, seen = False, error
    while seen is not None:
        caused = caused or seen is RUN.get("error")
        seen = seen.__cause__ or seen.__context__
    default = threading.excepthook is threading.__excepthook__ if threading.current_thread() is not \\
        threading.main_thread() else sys.excepthook is sys.__excepthook__
    RUN["tops"].append(caused and default)
"""
SCRIPT_TAIL = """
if {hook}:
    sys.excepthook = lambda *args: None  # the program's own hook: it decides
try:
    main()
except BaseException as error:
    top(error)
    raise
finally:
    with open(sys.argv[1], "w") as out:
        json.dump({{"failed": RUN["failed"], "answer": RUN["answer"], "tops": RUN["tops"]}}, out)
"""


def run_script(seed: int, python: str, depth: int = 5) -> dict[str, Any]:
    """Generate one program and run it as a script of its own with ``python``."""
    import os
    import subprocess
    import tempfile

    text, features = generate(seed, depth)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    hook = random.Random(-seed).random() < 0.3
    script = SCRIPT_HEAD.format(root=root) + text + SCRIPT_TAIL.format(hook=hook)
    with tempfile.TemporaryDirectory(prefix="fsguard-fuzz-") as where:
        path, report = os.path.join(where, f"fuzz_{seed}.py"), os.path.join(where, "report.json")
        with open(path, "w") as f:
            f.write(script)
        try:
            subprocess.run([python, "-W", "ignore", path, report], capture_output=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            return {"seed": seed, "truth": "timeout"}
        if not os.path.exists(report):
            return {"seed": seed, "truth": "no report"}
        with open(report) as f:
            found = json.load(f)
    result: dict[str, Any] = {"seed": seed, "features": sorted(features), "hook": hook}
    if not found["failed"]:
        return {**result, "truth": "no call"}
    answer = found["answer"]
    result.update(truth="crash" if any(found["tops"]) else "handled", oracle="crash" if answer is None else "defer")
    return {**result, "why": answer} if answer is not None else result


def fuzz(n: int, seed: int = 1, depth: int = 5, scripts: bool = False) -> dict[str, Any]:
    """Run ``n`` programs from ``seed`` on; the counts and the first unsound seeds."""
    counts = {"programs": 0, "crash": 0, "handled": 0, "recognised": 0, "unsound": 0, "skipped": 0}
    unsound: list[int] = []
    started = time.monotonic()
    for s in range(seed, seed + n):
        found = run_script(s, sys.executable, depth) if scripts else run(s, depth)
        counts["programs"] += 1
        if found["truth"] not in ("crash", "handled"):
            counts["skipped"] += 1
            continue
        counts[found["truth"]] += 1
        if found["truth"] == "crash" and found["oracle"] == "crash":
            counts["recognised"] += 1
        if found["truth"] == "handled" and found["oracle"] == "crash":
            counts["unsound"] += 1
            unsound.append(s)
    crashes = counts["crash"]
    return {
        **counts,
        "completeness": round(counts["recognised"] / crashes, 4) if crashes else None,
        "unsound_seeds": unsound[:50],
        "python": sys.version.split()[0],
        "as": "scripts" if scripts else "threads",
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--show", type=int, default=0, help="print the first SHOW unsound programs")
    parser.add_argument("--program", type=int, help="print the program of this seed and its run")
    parser.add_argument("--scripts", action="store_true", help="each program a script of its own (main thread)")
    args = parser.parse_args(argv)
    if args.program is not None:
        print(generate(args.program, args.depth)[0])
        print(
            json.dumps(
                run_script(args.program, sys.executable, args.depth) if args.scripts else run(args.program, args.depth)
            )
        )
        return 0
    summary = fuzz(args.n, args.seed, args.depth, args.scripts)
    print(json.dumps(summary))
    for s in summary["unsound_seeds"][: args.show]:
        print(f"--- seed {s}\n{generate(s, args.depth)[0]}\n{json.dumps(run(s, args.depth))}")
    return 1 if summary["unsound"] else 0


if __name__ == "__main__":
    sys.exit(main())
