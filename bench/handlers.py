"""What the handler analysis costs (issue 33), and which failures pay it.

fsguard absorbs only a would-be crash: before it absorbs a failure, ``fsguard.oracle.caller_handles`` walks
the calling frames up to the thread's top (no depth limit), reading each frame's exception table at its
current instruction (cached per code object and instruction). This measures, in this process with the working
tree's fsguard:

* **the walk**, by frames between the failing call and the thread's top (5, 50, 200; each frame a function of
  its own, so a cold walk reads every frame's bytecode): no handler anywhere (a would-be crash: the whole
  stack is walked), a handler at the thread's top (``except OSError`` around everything: also the whole
  stack), and a handler in the immediate caller (one frame). Cold: the cache emptied before each call; warm:
  the cache filled by the call before. Each call runs in a thread of its own, whose top ends the walk.
* **who pays it**: in a rank of a 2-process job (``fsguard.install()``), how many times the analysis runs per
  failing call: the happy path, genuine errors (a file where a directory is asked for, a rename whose source
  never existed) and a race the evidence absorbs (a peer's directory).

Run: ``python bench/handlers.py [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "bench"

from bench import _common as common

DEPTHS = (5, 50, 200)
SHAPES = ("no handler", "handler at the top", "handler in the caller")


def _load_fsguard() -> Any:
    os.environ["FSGUARD_STDERR"] = "0"
    os.environ.pop("FSGUARD_LOG", None)
    if str(common.ROOT) not in sys.path:
        sys.path.insert(0, str(common.ROOT))
    import fsguard

    return fsguard


def _stack(depth: int, shape: str) -> Callable[[Callable[[], None]], None]:
    """``depth`` distinct functions, each calling the next; the innermost calls ``work`` (the failing call)."""
    lines = []
    for n in range(depth):
        inner = "work()" if n == depth - 1 else f"f{n + 1}(work)"
        if (n == depth - 1 and shape == "handler in the caller") or (n == 0 and shape == "handler at the top"):
            lines.append(f"def f{n}(work):\n    try:\n        {inner}\n    except OSError:\n        pass\n")
        else:
            lines.append(f"def f{n}(work):\n    {inner}\n    return None\n")
    space: dict[str, Any] = {}
    exec(compile("".join(lines), f"<bench stack {depth} {shape}>", "exec"), space)
    top: Callable[[Callable[[], None]], None] = space["f0"]
    return top


def walk(iterations: int) -> dict[str, Any]:
    _load_fsguard()
    from fsguard import oracle as handlers
    from fsguard.oracle.layers import HANDLER_LAYERS

    error = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), "run-0")
    out: dict[str, Any] = {}
    for shape in SHAPES:
        for depth in DEPTHS:
            top = _stack(depth, shape)
            times: dict[str, list[float]] = {"cold": [], "warm": []}
            found: list[Any] = []

            def work(temperature: str, times: dict[str, list[float]] = times, found: list[Any] = found) -> None:
                frame = sys._getframe(1)
                if temperature == "cold":
                    HANDLER_LAYERS.clear()
                started = time.perf_counter()
                found.append(handlers.caller_handles(error, frame))
                times[temperature].append(time.perf_counter() - started)

            for _ in range(iterations):
                for temperature in ("cold", "warm"):
                    thread = threading.Thread(target=top, args=(lambda t=temperature: work(t),))
                    thread.start()
                    thread.join()
            out[f"{shape}/{depth}"] = {
                "shape": shape,
                "frames": depth,
                "decides": "absorb (a would-be crash)" if found[-1] is None else "defer",
                **{f"{t}_us": common.median(v) * 1e6 for t, v in times.items()},
                **{f"{t}_p90_us": common.percentile(v, 90) * 1e6 for t, v in times.items()},
            }
    return out


def payers(iterations: int) -> dict[str, Any]:
    """How often the analysis runs per call, by kind of call, in a rank of a 2-process job."""
    import posix

    fsguard = _load_fsguard()
    os.environ.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", TORCHELASTIC_RUN_ID="bench")
    os.environ["FSGUARD_SETTLE_S"] = "0.05"
    from fsguard import oracle as handlers

    counted = [0]
    original = handlers.caller_handles

    def counting(error: BaseException, frame: Any = None) -> Any:
        counted[0] += 1
        return original(error, frame)

    handlers.caller_handles = counting  # type: ignore[assignment]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fsguard-handlers-") as tmp:
        fsguard.install()
        counter = iter(range(10**9))

        def fresh() -> str:
            return os.path.join(tmp, f"n{next(counter)}")

        def happy() -> None:
            os.makedirs(fresh())

        def onto_file() -> None:
            path = fresh()
            Path(path).write_text("x")
            os.makedirs(path)

        def missing_source() -> None:
            os.rename(fresh(), fresh())

        def peer_made() -> None:
            path = fresh()
            posix.mkdir(path)  # a peer's, moments ago (the unguarded call)
            os.makedirs(path)

        cases = {
            "happy path (makedirs)": happy,
            "genuine: makedirs onto a file": onto_file,
            "genuine: rename of a missing source": missing_source,
            "race absorbed: a peer's directory": peer_made,
        }
        for name, case in cases.items():
            counted[0] = 0
            raised = 0
            started = time.perf_counter()
            for _ in range(iterations):
                escaped: list[BaseException] = []

                def target(case: Callable[[], None] = case, escaped: list[BaseException] = escaped) -> None:
                    try:
                        case()
                    except BaseException as error:  # seen, and passed on: a program-set hook would decide
                        escaped.append(error)
                        raise

                stderr, sys.stderr = sys.stderr, io.StringIO()  # the default hook's report of the thread's end
                thread = threading.Thread(target=target)
                thread.start()
                thread.join()
                sys.stderr = stderr
                raised += bool(escaped)
            out[name] = {
                "calls": iterations,
                "raised": raised,
                "analyses": counted[0],
                "per_call_ms": (time.perf_counter() - started) / iterations * 1000,
            }
        fsguard.uninstall()
    handlers.caller_handles = original  # type: ignore[assignment]
    return out


def render(result: dict[str, Any]) -> str:
    rows = [
        [
            r["shape"],
            r["frames"],
            r["decides"],
            common.fmt(r["cold_us"], " us", 1),
            common.fmt(r["warm_us"], " us", 1),
            common.fmt(r["warm_p90_us"], " us", 1),
        ]
        for r in result["walk"].values()
    ]
    lines = [
        "handler analysis (caller_handles), median per failing call the evidence would absorb",
        common.table(["stack", "frames", "decides", "cold", "warm", "warm p90"], rows),
        "",
    ]
    rows = [
        [name, f"{r['analyses']}/{r['calls']}", f"{r['raised']}/{r['calls']}", common.fmt(r["per_call_ms"], " ms", 3)]
        for name, r in result["payers"].items()
    ]
    lines += [
        "who pays it: analyses per call in a rank of a 2-process job (each call in a thread of its own)",
        common.table(["call", "analyses", "raised", "per call (thread included)"], rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200, help="walks per stack and temperature")
    parser.add_argument("--calls", type=int, default=100, help="calls per kind for 'who pays it'")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.calls = 3, 5
    info = common.machine()
    print(common.machine_line(info), flush=True)
    result = {"walk": walk(args.iterations), "payers": payers(args.calls)}
    print(render(result))
    if args.json:
        common.write_json(args.json, {"machine": info, "handlers": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
