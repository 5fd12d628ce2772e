"""Processes that fork while fsguard is busy in another thread (tests/test_fork.py).

``fork_worker.py stress <dir> <forks>``: a thread makes absorbed races without pause (a directory made with the
unguarded ``posix.mkdir``, as a peer would, then a guarded ``os.makedirs`` of it: decided, absorbed, recorded) while
the main thread forks ``<forks>`` children, one after another; each child makes one absorbed race itself (so it
needs every lock fsguard has: memory's, the records', the logger's) and exits. A child that has not exited
after ``CHILD_TIMEOUT_S`` is counted as hung and killed. Prints ``{"forks", "hung", "failed", "absorbed"}``.

``fork_worker.py forker <dir> <ready-file> <children>``: a thread replaces ``<dir>/target`` in a loop (serialized,
``FSGUARD_SERIALIZE=1``) while the main thread, once ``<ready-file>`` exists, forks long-lived children (as a
DataLoader starts its workers) that sleep ``CHILD_LIFE_S`` and exit. Prints ``{"replaces", "children"}``.

``fork_worker.py lookups <dir> <forks>``: a rank imports ``torch.distributed`` and at once forks ``<forks>``
children, all of them running together (a DataLoader starting its workers); each makes two ordinary name lookups
(``getaddrinfo`` of ``localhost``, ``getnameinfo`` of ``127.0.0.1``: an HTTP or object-store client, a logger) and
exits. A child that has not exited after ``CHILD_TIMEOUT_S`` is counted as hung (its traceback on stderr). Prints
``{"forks", "hung", "failed", "slowest_fork_s"}``.

``fork_worker.py peer <dir> <ready-file> <seconds>``: another rank replacing the same target for ``<seconds>``;
prints the worst time one call took (``worst_s``): the wait for the lock, since the call itself is quick.
"""

from __future__ import annotations

import faulthandler
import json
import os
import posix
import signal
import socket
import sys
import threading
import time
import traceback

CHILD_TIMEOUT_S = 30.0
CHILD_LIFE_S = 6.0


def _absorbed_race(parent: str) -> None:
    os.mkdir(parent)  # a parent of its own: the rule's fresh listing stays one entry long
    path = os.path.join(parent, "d")
    posix.mkdir(path)  # not guarded: as a peer rank would have made it
    os.makedirs(path)  # guarded: FileExistsError, decided as a peer's doing, absorbed and recorded


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit status, or None when it has not exited within ``timeout`` (it is then killed)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)


def stress(base: str, forks: int) -> None:
    from gate import crash_of  # run as a script: this directory is on sys.path (the tests import only constants)

    stop = threading.Event()
    absorbed = [0]

    def race() -> None:
        n = 0
        while not stop.is_set():
            _absorbed_race(os.path.join(base, f"t{n}"))
            n += 1
        absorbed[0] = n

    thread = threading.Thread(target=race)
    thread.start()
    hung = failed = 0
    for i in range(forks):
        pid = os.fork()
        if pid == 0:
            code = 1
            # a child still here after half its time says where it stands (stderr), then exits
            faulthandler.dump_traceback_later(CHILD_TIMEOUT_S / 2, exit=True)
            try:
                # A thread of its own, no handler around the race: a would-be crash, which fsguard absorbs
                # (a handler here would be the program's own, and decide).
                _, escaped = crash_of(_absorbed_race, os.path.join(base, f"child{i}"))
                if escaped is not None:
                    traceback.print_exception(escaped)  # the test shows it (os._exit below would lose it)
                    sys.stderr.flush()
                else:
                    code = 0
            finally:
                os._exit(code)
        status = _wait(pid, CHILD_TIMEOUT_S)
        if status is None:
            hung += 1
            if hung >= 3:  # enough to say it; no need to wait out every child
                break
        elif status != 0:
            failed += 1
    stop.set()
    thread.join()
    print(json.dumps({"forks": i + 1, "hung": hung, "failed": failed, "absorbed": absorbed[0]}), flush=True)


def lookups(forks: int) -> None:
    port = int(os.environ.get("MASTER_PORT", "0"))
    import torch.distributed  # noqa: F401 - a training script's imports, then its DataLoader's workers at once

    pids = []
    slowest = 0.0
    for _ in range(forks):
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(CHILD_TIMEOUT_S, exit=True)  # says where it hangs, exits 1
            try:
                socket.getaddrinfo("localhost", port)
                socket.getnameinfo(("127.0.0.1", port), 0)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(3)
            os._exit(0)
        slowest = max(slowest, time.monotonic() - started)
        pids.append(pid)
    deadline = time.monotonic() + CHILD_TIMEOUT_S + 10.0
    statuses = [_wait(pid, max(deadline - time.monotonic(), 0.0)) for pid in pids]
    hung = sum(1 for status in statuses if status in (None, 1))  # still there, or ended by its watchdog
    failed = sum(1 for status in statuses if status not in (None, 0, 1))
    print(json.dumps({"forks": len(pids), "hung": hung, "failed": failed, "slowest_fork_s": slowest}), flush=True)


def _replace_once(base: str, tag: str) -> None:
    tmp = os.path.join(base, f"target.{tag}")
    with open(tmp, "w") as f:
        f.write(tag)
    os.replace(tmp, os.path.join(base, "target"))


def forker(base: str, ready: str, children: int) -> None:
    stop = threading.Event()
    replaces = [0]

    def loop() -> None:
        while not stop.is_set():
            _replace_once(base, "forker")
            replaces[0] += 1

    thread = threading.Thread(target=loop)
    thread.start()
    while not os.path.exists(ready):
        time.sleep(0.01)
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            time.sleep(CHILD_LIFE_S)  # a DataLoader worker: lives on, never touches the lock
            os._exit(0)
        pids.append(pid)
        time.sleep(0.02)
    statuses = [_wait(pid, CHILD_LIFE_S + CHILD_TIMEOUT_S) for pid in pids]
    stop.set()
    thread.join()
    print(json.dumps({"replaces": replaces[0], "children": len(pids), "statuses": statuses}), flush=True)


def peer(base: str, ready: str, seconds: float) -> None:
    if os.environ.get("FSGUARD_LOCK") == "store":
        import torch.distributed  # noqa: F401 - the first serialized call would import it: do it before timing
    _replace_once(base, "peer")  # the backend is chosen (and the store connected) before timing
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    worst = 0.0
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        _replace_once(base, "peer")
        worst = max(worst, time.monotonic() - started)
        calls += 1
        time.sleep(0.01)
    print(json.dumps({"worst_s": worst, "calls": calls}), flush=True)


if __name__ == "__main__":
    role, where = sys.argv[1], sys.argv[2]
    if role == "stress":
        stress(where, int(sys.argv[3]))
    elif role == "lookups":
        lookups(int(sys.argv[3]))
    elif role == "forker":
        if os.environ.get("FSGUARD_LOCK") == "store":
            import torch.distributed  # noqa: F401
        forker(where, sys.argv[3], int(sys.argv[4]))
    else:
        peer(where, sys.argv[3], float(sys.argv[4]))
