"""Where a whole test run's CPU goes (issue 48): every process's CPU time, from the kernel's process accounting.

The test command is CPU-bound on 2 cores (both about 90 % busy for the whole run), so its wall time is its CPU
time halved: this says which processes spend it. Each process that ends during the run leaves one accounting
record (its command name, user and system time, parent); this sums them by command name, and the Python
interpreters by CPU band. ``import torch`` alone costs 2.4-2.6 s of CPU on these machines, so an interpreter in the
band of 2 s and more is, nearly always, one that imported torch: a rank of a real job, a benchmark's driver.
With ``--junit`` (pytest's ``--junitxml`` of the same run) it adds each test module's seconds.

What it cannot say: which test started a process (the records carry no test), and a process's threads' names
(a torchrun agent's record is named after its last thread, ``pt_elastic``).

usage: python bench/suite_cpu.py [--junit FILE] [--json FILE] -- COMMAND...   (root; Debian's ``acct``)
       python bench/suite_cpu.py --pacct FILE [--junit FILE] [--json FILE]    (a file recorded before)
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Any

HZ = 100  # dump-acct's time unit: clock ticks
BANDS = ((0.0, 0.3), (0.3, 2.0), (2.0, float("inf")))  # seconds of CPU; the last: interpreters that imported torch
TOP = 12


@dataclass(frozen=True)
class Process:
    """One accounting record: the command name and CPU seconds of a process that ended."""

    command: str
    cpu_s: float
    pid: int
    ppid: int


def parse(dump: str) -> list[Process]:
    """The records of ``dump-acct``'s output (fields separated by ``|``: name, version, user and system ticks,
    elapsed, uid, gid, memory, io, pid, ppid, ...)."""
    processes = []
    for line in dump.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 11 or not fields[9].isdigit():
            continue
        cpu_s = (float(fields[2]) + float(fields[3])) / HZ
        processes.append(Process(fields[0], cpu_s, int(fields[9]), int(fields[10])))
    return processes


def is_python(command: str) -> bool:
    return command.startswith("python")


def summarize(processes: list[Process]) -> dict[str, Any]:
    """Total CPU, CPU by command name (the ``TOP`` largest), and the Python interpreters by CPU band."""
    total = sum(p.cpu_s for p in processes)
    by_command: dict[str, list[float]] = collections.defaultdict(list)
    for process in processes:
        by_command[process.command].append(process.cpu_s)
    commands = sorted(by_command.items(), key=lambda item: -sum(item[1]))[:TOP]
    pythons = [p.cpu_s for p in processes if is_python(p.command)]
    bands = {}
    for low, high in BANDS:
        inside = [cpu for cpu in pythons if low <= cpu < high]
        name = f"{low:g}-{high:g} s" if high != float("inf") else f"{low:g} s and more"
        bands[name] = {"processes": len(inside), "cpu_s": round(sum(inside), 1), "share": share(sum(inside), total)}
    return {
        "processes": len(processes),
        "cpu_s": round(total, 1),
        "by_command": {
            name: {"processes": len(cpus), "cpu_s": round(sum(cpus), 1), "share": share(sum(cpus), total)}
            for name, cpus in commands
        },
        "python_by_cpu": bands,
    }


def share(part: float, total: float) -> float:
    return round(part / total, 3) if total else 0.0


def modules(junit: str) -> dict[str, Any]:
    """Each test module's tests and seconds (pytest's ``--junitxml``), the ``TOP`` largest, and the run's total."""
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        module = ".".join(parts[:3] if len(parts) > 2 and parts[1] in ("rules", "cluster") else parts[:2])
        seconds[module].append(float(case.get("time") or 0.0))
    total = sum(sum(times) for times in seconds.values())
    largest = sorted(seconds.items(), key=lambda item: -sum(item[1]))[:TOP]
    return {
        "test_s": round(total, 1),
        "modules": {
            name: {"tests": len(times), "s": round(sum(times), 1), "share": share(sum(times), total)}
            for name, times in largest
        },
    }


def record(command: list[str], pacct: str) -> int:
    """Run ``command`` with process accounting into ``pacct``; its exit status."""
    open(pacct, "w").close()
    subprocess.run(["accton", pacct], check=True, capture_output=True)
    try:
        return subprocess.run(command).returncode
    finally:
        subprocess.run(["accton", "off"], capture_output=True)


def show(result: dict[str, Any]) -> None:
    cpu = result["cpu"]
    print(f"{cpu['processes']:,} processes ended, {cpu['cpu_s']:,.0f} s of CPU")
    print(f"{'command':<20}{'processes':>10}{'CPU s':>10}{'share':>8}")
    for name, row in cpu["by_command"].items():
        print(f"{name:<20}{row['processes']:>10,}{row['cpu_s']:>10,.0f}{row['share']:>8.1%}")
    print("Python interpreters by CPU (2 s and more: nearly always one that imported torch)")
    for band, row in cpu["python_by_cpu"].items():
        print(f"  {band:<18}{row['processes']:>10,}{row['cpu_s']:>10,.0f}{row['share']:>8.1%}")
    if "tests" in result:
        tests = result["tests"]
        print(f"test modules, {tests['test_s']:,.0f} s of tests in all")
        for name, row in tests["modules"].items():
            print(f"  {name:<38}{row['tests']:>6}{row['s']:>8,.0f} s{row['share']:>8.1%}")


def main() -> None:
    argv = sys.argv[1:]
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pacct", help="a process accounting file recorded before (no command is run)")
    parser.add_argument("--junit", help="pytest's --junitxml file of the same run")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.pacct is None and not command:
        parser.error("give a command after --, or --pacct FILE")
    result: dict[str, Any] = {}
    pacct = args.pacct
    if pacct is None:
        pacct = tempfile.mkstemp(prefix="fsguard-suite-", suffix=".pacct")[1]
        result["command"] = command
        result["exit_status"] = record(command, pacct)
    dump = subprocess.run(["dump-acct", pacct], check=True, capture_output=True, text=True).stdout
    result["cpu"] = summarize(parse(dump))
    if args.junit:
        result["tests"] = modules(args.junit)
    show(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
