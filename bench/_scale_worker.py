"""The ranks of ``bench/scale.py``: either one rank (a fresh interpreter started with launcher variables), or,
with ``--fork N``, a zygote that forks N ranks.

A rank connects to the coordinator's Unix socket (``FSG_BENCH_SOCKET``), says who it is
(``{"rank", "pid", "fsguard_active"}``), then answers trials, one JSON object per line: the coordinator sends
``{"op", "path", "dst", "start", "rank0_marker"}`` or ``{"quit": true}``; the rank sleeps until ``start`` (a
``time.monotonic`` value, one clock for all processes of the machine), makes the call (``convoy``: its own
``os.replace(f"{path}.{rank}", dst)``, a call no peer makes, onto the one name every rank replaces), and answers
``{"ok", "error", "latency_s", "end", "late_s", "cpu_s", "store_ops"}``.

A fresh rank had fsguard activated by its ``.pth`` at start-up. A forked rank is made from a zygote: one
interpreter per pool, started with ``FSGUARD=0`` (its ``.pth`` does nothing), that imports what a rank would
import (fsguard's modules, those its first decisions import lazily included; torch.distributed for the
store arm, which fsguard imports at the first serialized call), freezes its objects out of the garbage
collector's reach (``gc.freeze``: the children's collections then leave the shared pages alone), and forks.
Each child sets its own launcher variables (``RANK``, ``WORLD_SIZE``, ...) and ``FSGUARD`` in ``os.environ``
and calls ``fsguard._boot.start()``: the one function the ``.pth`` calls, reading the same variables, so
launcher detection and activation take the path a real rank's start-up takes. Nothing of fsguard was active
in the zygote, so no fsguard state is inherited (fsguard's at-fork hook would reset it anyway). What differs
from a real rank: the code pages and imported modules are shared copy-on-write (about 10 MiB private per
rank instead of about 150 MiB with torch), no first call pays a lazy import, and the rank's parent is the
zygote (fsguard reads the parent's start time as a bound of the job's start: the zygote started before the
trials' files were laid out, as a launcher agent does).

Cold pools (``FSG_BENCH_DEFER_BOOT=1``): a forked rank runs ``fsguard._boot.start()`` not at once but when
the first trial's ``boot_at`` comes, so that every rank of the pool starts fsguard at the same moment, as the
ranks of a job start together (forking one by one spreads the start-ups over seconds, during which the first
ranks' background connections would be made); the trial's own call comes at its ``start``.

Store operations: in the store arm, fsguard's store clients (``fsguard.locks.wire.StoreClient``, and
``torch.distributed.TCPStore``, its fallback and the process group's) are replaced in the rank by factories of
counting proxies before fsguard's first serialized call makes its clients, so every request fsguard sends
to the store (the lease renewal thread's included) is counted, per method; fsguard itself is untouched.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pkgutil
import shutil
import socket
import sys
import threading
import time
from typing import Any

STORE_OPS: dict[str, int] = {}
CONNECTS: list[tuple[float, float]] = []  # when (time.monotonic) each of fsguard's TCPStore clients began and was made
_REAL_STORE: list[Any] = []
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


class CountingStore:
    """A TCPStore client that counts the requests made through it (one per method call)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            STORE_OPS[name] = STORE_OPS.get(name, 0) + 1
            return attr(*args, **kwargs)

        return counted


def count_store_ops() -> None:
    """Make every store client of fsguard's in this process a counting one: its own (``fsguard.locks.wire``) and
    c10d's (the fallback). A forked rank does it before fsguard starts; a fresh rank before its first serialized
    call."""
    if _REAL_STORE:
        return
    import torch.distributed as dist

    import fsguard.locks.wire as wire

    real = getattr(dist, "TCPStore")  # noqa: B009
    _REAL_STORE.append(real)  # the probe's own requests are not fsguard's: it uses the real class

    def counting(made: Any) -> Any:
        def factory(*args: Any, **kwargs: Any) -> CountingStore:
            began = time.monotonic()
            client = made(*args, **kwargs)
            CONNECTS.append((began, time.monotonic()))
            return CountingStore(client)

        return factory

    setattr(dist, "TCPStore", counting(real))  # noqa: B010
    setattr(wire, "StoreClient", counting(wire.StoreClient))  # noqa: B010


_PROBE: list[Any] = []


def store_probe(trial: dict[str, Any], rank: int) -> dict[str, tuple[float, float]]:
    """When (``time.monotonic``) ``n`` requests of each kind on a client of its own (ranks below ``clients`` only): one
    client gives the round trip, many the store server's time per request when it is the bottleneck."""
    if rank >= trial["clients"]:
        return {}
    if not _PROBE:
        from datetime import timedelta

        import torch.distributed as dist

        tcp_store = _REAL_STORE[0] if _REAL_STORE else getattr(dist, "TCPStore")  # noqa: B009
        address = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        _PROBE.append(tcp_store(*address, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=60)))
    store = _PROBE[0]
    key = f"/fsg-bench/probe/{rank}"
    store.set(key, b"")
    times = {}
    for kind in ("add", "compare_set", "get"):
        started = time.monotonic()
        for _ in range(trial["n"]):
            if kind == "add":
                store.add(key + "/n", 1)
            elif kind == "compare_set":
                store.compare_set(key, b"", b"")
            else:
                store.get(key)
        times[kind] = (started, time.monotonic())
    return times


def operation(trial: dict[str, Any], rank: int) -> None:
    op, path = trial["op"], trial["path"]
    if op == "convoy":  # different calls on one path: singleflight cannot collapse them, the lock serializes them
        os.replace(f"{path}.{rank}", trial["dst"])
    elif op == "makedirs":
        os.makedirs(path)
    elif op == "rename":
        os.rename(path, trial["dst"])
    elif op == "replace":
        os.replace(path, trial["dst"])
    elif op == "rmtree":
        shutil.rmtree(path)
    else:
        raise ValueError(op)


def rank0_then_barrier(trial: dict[str, Any], rank: int) -> None:
    """The usual fix: rank 0 makes the call, everyone else waits for its marker file (a file barrier)."""
    marker = trial["rank0_marker"]
    if rank == 0:
        try:
            operation(trial, rank)
        finally:
            with open(marker, "w"):
                pass
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        if time.monotonic() > deadline:
            raise TimeoutError("rank 0 never finished")
        time.sleep(0.0005)


def serve(rank: int) -> int:
    """Warm up, say hello, answer trials until told to quit."""
    if os.environ.get("FSGUARD_LOCK") == "store":
        count_store_ops()
    warm = os.environ.get("FSG_BENCH_WARM")
    warm_started = time.monotonic()
    if warm:  # a first serialized call: the store connection (and torch's import) before any trial
        os.makedirs(f"{warm}/{rank}", exist_ok=True)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["FSG_BENCH_SOCKET"])
    stream = conn.makefile("rw", encoding="utf-8", newline="\n")
    active = hasattr(os.rename, "__wrapped__")
    hello = {"rank": rank, "pid": os.getpid(), "fsguard_active": active, "warm_s": time.monotonic() - warm_started}
    stream.write(json.dumps(hello) + "\n")
    stream.flush()
    booted = None
    for line in stream:
        trial = json.loads(line)
        if trial.get("quit"):
            break
        if trial.get("boot_at") is not None and booted is None:  # a deferred start-up: at the cold trial's gate
            delay = trial["boot_at"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            boot()
            booted = time.monotonic()
        delay = trial["start"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if trial.get("op") == "store":
            probe = store_probe(trial, rank)
            stream.write(json.dumps({"probe": probe, "end": time.monotonic()}) + "\n")
            stream.flush()
            continue
        before = dict(STORE_OPS)
        cpu = time.process_time()
        woke = time.monotonic()
        latency, error = _as_a_crash(trial, rank)
        end = time.monotonic()
        answer = {
            "ok": error is None,
            "error": error,
            "latency_s": latency,
            "end": end,
            "late_s": woke - trial["start"],
            "cpu_s": time.process_time() - cpu,
            "store_ops": {k: v - before.get(k, 0) for k, v in STORE_OPS.items() if v != before.get(k, 0)},
            "active": hasattr(os.rename, "__wrapped__"),
            "booted": booted,
            "connects": CONNECTS,
        }
        stream.write(json.dumps(answer) + "\n")
        stream.flush()
    conn.close()
    return 0


def boot() -> None:
    """What the ``.pth`` runs at a rank's start-up, on the rank's own variables (the store arm's requests counted
    first)."""
    import fsguard._boot

    if os.environ.get("FSGUARD_LOCK") == "store":
        count_store_ops()
    fsguard._boot.start()


def zygote(size: int) -> int:
    """Import what ranks need, then fork ``size`` ranks (see the module docstring); wait for them all."""
    rank_env = json.loads(os.environ.pop("FSG_BENCH_RANK_ENV"))
    defer = os.environ.pop("FSG_BENCH_DEFER_BOOT", "") == "1"  # start-up at the first trial's boot_at
    import fsguard
    import fsguard._boot

    for module in pkgutil.walk_packages(fsguard.__path__, "fsguard."):
        if not module.name.startswith(("fsguard.cli", "fsguard.demo", "fsguard.audit", "fsguard.__main__")):
            importlib.import_module(module.name)  # what startup and the first decisions import, shared
    import copy  # noqa: F401 - imported by the first decisions
    import dataclasses  # noqa: F401

    if rank_env.get("FSGUARD_LOCK") == "store":
        import torch.distributed  # noqa: F401 - what the counting clients and the probe import, shared
    gc.collect()
    gc.freeze()
    children = []
    for rank in range(size):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.environ.update({**rank_env, "RANK": str(rank), "LOCAL_RANK": str(rank)})
                if not defer:
                    boot()
                code = serve(rank)
            finally:
                os._exit(code)
        children.append(pid)
    failed = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    return 1 if failed else 0


def _as_a_crash(trial: dict[str, Any], rank: int) -> tuple[float, str | None]:
    """The trial's call in a thread of its own with no handler around it, as a job's rank makes it: a lost race
    there would crash the rank, which fsguard absorbs (a handler around the call would decide instead).
    (seconds, the class of the error that escaped, or None)."""
    timing = [0.0, 0.0]
    escaped: list[BaseException] = []

    def act() -> None:
        timing[0] = time.perf_counter()
        try:
            if trial.get("rank0_marker"):
                rank0_then_barrier(trial, rank)
            else:
                operation(trial, rank)
        except BaseException as error:  # seen, and the thread ends: a program-set excepthook would decide
            escaped.append(error)
            raise SystemExit from error  # (the default excepthook ends a thread on SystemExit quietly)
        finally:
            timing[1] = time.perf_counter()

    thread = threading.Thread(target=act)
    thread.start()
    thread.join()
    if escaped and not isinstance(escaped[0], OSError):
        raise escaped[0]
    return timing[1] - timing[0], (type(escaped[0]).__name__ if escaped else None)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--fork":
        return zygote(int(argv[1]))
    return serve(int(os.environ["RANK"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
