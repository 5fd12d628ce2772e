"""``fsguard demo``: a small local job with the classic races, without and with fsguard.

The job (``fsguard.demo.workload``) is started as a distributed launcher would: by ``torchrun`` when torch is
importable, otherwise by fsguard's minimal launcher, which sets the same rank variables. Every rank is a fresh
interpreter of this Python. So in the guarded run (``FSGUARD=1``) fsguard's installed ``.pth`` activates it, exactly as
in a user's job. Afterwards: a before/after table, the ``fsguard report`` of the guarded run's records, and the path of
the same report as a web page (``fsguard report --html``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import launcher, records


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--steps", type=int, default=3, help="checkpoint steps (default 3)")
    parser.add_argument("--keep", metavar="DIR", help="keep the job's files, logs and records in DIR")
    parser.add_argument("--serialize", action="store_true", help="guarded run with FSGUARD_SERIALIZE=1")
    parser.add_argument(
        "--launcher",
        choices=("auto", "torchrun", "local"),
        default="auto",
        help="torchrun when torch is importable (auto), or fsguard's minimal local launcher",
    )


@dataclass
class Outcome:
    """What one run of the job did."""

    title: str
    guarded: bool
    exit_code: int = 0
    seconds: float = 0.0
    last: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its last event
    active: int = 0  # ranks in which fsguard was active
    records: list[records.Record] = field(default_factory=list)
    file_problems: list[str] = field(default_factory=list)

    def ranks_with(self, status: str) -> list[int]:
        return sorted(r for r, e in self.last.items() if e["status"] == status)

    @property
    def finished(self) -> list[int]:
        return sorted(r for r, e in self.last.items() if e["phase"] == "done")

    def succeeded(self, ranks: int) -> bool:
        return self.exit_code == 0 and len(self.finished) == ranks and not self.file_problems

    def summary(self) -> dict[str, Any]:
        return {
            "guarded": self.guarded,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 2),
            "finished": self.finished,
            "crashed": {r: self.last[r] for r in self.ranks_with("crashed")},
            "stopped": self.ranks_with("stopped"),
            "fsguard_active_ranks": self.active,
            "decisions": _count(self.records, "decision"),
            "absorbed_by_op": _count([r for r in self.records if r.decision == "absorbed"], "op"),
            "file_problems": self.file_problems,
        }


def _count(items: list[records.Record], attribute: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        key = str(getattr(item, attribute))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _torch_importable() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _pth_installed() -> bool:
    """Whether this interpreter's site-packages holds fsguard.pth (what activates fsguard in each rank)."""
    return any(
        os.path.isfile(os.path.join(p, "fsguard.pth"))
        for p in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
        if p
    )


def _environment(guarded: bool, run_dir: Path, serialize: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher.JOB_VARIABLE_PREFIXES)}
    env["FSGUARD"] = "1" if guarded else "0"
    if guarded:
        env["FSGUARD_LOG"] = str(run_dir / "records")
        if serialize:
            env["FSGUARD_SERIALIZE"] = "1"
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    if not _in_site_packages(package_parent):
        # Running from a source tree: let the ranks import the same fsguard.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def _in_site_packages(directory: str) -> bool:
    return any(
        os.path.realpath(directory) == os.path.realpath(p)
        for p in (sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))
        if p
    )


def _command(launcher: str, ranks: int, run_dir: Path, steps: int) -> list[str]:
    """The launcher's command line. The workload runs as a copy in the run directory, as a user's training
    script would: fsguard's records name their call site outside fsguard's own package (``train.py:NN``)."""
    script = run_dir / "train.py"
    from ..demo import workload

    shutil.copyfile(workload.__file__, script)
    job = [str(script), str(run_dir), str(steps)]
    if launcher == "torchrun":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={ranks}",
            "--max-restarts=0",
            "--monitor-interval=0.1",
            *job,
        ]
    return [sys.executable, "-m", "fsguard.demo.launch", f"--nproc-per-node={ranks}", *job]


class Progress:
    """Prints each phase once every rank has passed it, and each crash as it happens."""

    def __init__(self, run_dir: Path, ranks: int) -> None:
        self.events = run_dir / "events"
        self.ranks = ranks
        self.offsets: dict[Path, int] = {}
        self.ok: dict[str, set[int]] = {}
        self.last: dict[int, dict[str, Any]] = {}
        self.active: set[int] = set()

    def poll(self) -> None:
        for path in sorted(self.events.glob("rank*.jsonl")):
            with open(path, encoding="utf-8") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(complete.encode("utf-8"))
            for line in complete.splitlines():
                self._event(json.loads(line))

    def _event(self, event: dict[str, Any]) -> None:
        rank, phase, status = event["rank"], event["phase"], event["status"]
        self.last[rank] = event
        if phase == "start":
            if event.get("fsguard_active"):
                self.active.add(rank)
            return
        if status == "crashed":
            _say(f"      {phase:<24} rank {rank} crashed: {event['error']}: {event['message']}")
        elif status == "ok" and phase != "done":
            self.ok.setdefault(phase, set()).add(rank)
            if len(self.ok[phase]) == self.ranks:
                _say(f"      {phase:<24} ok on all {self.ranks} ranks")


def _say(text: str) -> None:
    print(text, flush=True)


def _run(title: str, guarded: bool, args: argparse.Namespace, launcher: str, run_dir: Path) -> Outcome:
    for sub in ("gates", "events", "job", "logs"):
        (run_dir / sub).mkdir(parents=True)
    outcome = Outcome(title, guarded)
    progress = Progress(run_dir, args.ranks)
    started = time.monotonic()
    with open(run_dir / "logs" / "launcher.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            _command(launcher, args.ranks, run_dir, args.steps),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=run_dir,
            env=_environment(guarded, run_dir, args.serialize),
        )
        while proc.poll() is None:
            progress.poll()
            if time.monotonic() - started > 300:
                proc.kill()
            time.sleep(0.05)
    outcome.seconds = time.monotonic() - started
    progress.poll()
    outcome.exit_code = proc.returncode
    outcome.last, outcome.active = progress.last, len(progress.active)
    outcome.records = _read_records(run_dir / "records")
    outcome.file_problems = _check_files(run_dir / "job", args.ranks, args.steps)
    stopped = outcome.ranks_with("stopped")
    if stopped:
        plural = "s" if len(stopped) > 1 else ""
        _say(f"      rank{plural} {', '.join(map(str, stopped))} stopped after a peer crashed")
    _say(f"      finished in {outcome.seconds:.1f} s, launcher exit status {outcome.exit_code}")
    return outcome


def _read_records(directory: Path) -> list[records.Record]:
    found = []
    for path in sorted(directory.glob("*.jsonl")) if directory.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            record = records.parse_line(line)
            if record is not None:
                found.append(record)
    return found


def _check_files(job: Path, ranks: int, steps: int) -> list[str]:
    """What differs from the files one rank alone would have left."""
    from ..demo.workload import KERNELS

    problems = []
    if not (job / "results").is_dir():
        problems.append("results/ missing")
    ckpt = job / "checkpoints"
    names = sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []
    if names != [f"step-{steps}"]:
        problems.append(f"checkpoints/ holds {names or 'nothing'}, expected ['step-{steps}']")
    elif len(list((ckpt / f"step-{steps}").iterdir())) != ranks:
        problems.append(f"checkpoints/step-{steps} lacks shards")
    cache = job / "cache"
    kernels = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    if kernels != [f"kernel-{k:02x}.so" for k in range(KERNELS)]:
        problems.append(f"cache/ holds {kernels or 'nothing'}")
    latest = job / "latest"
    target = os.readlink(latest) if latest.is_symlink() else None
    if target != os.path.join("checkpoints", f"step-{steps}"):
        problems.append(f"latest points to {target!r}, expected 'checkpoints/step-{steps}'")
    if (job / "RUNNING").exists():
        problems.append("RUNNING marker left behind")
    return problems


def _crash_text(outcome: Outcome) -> str:
    crashed = outcome.ranks_with("crashed")
    if not crashed:
        return "none"
    by_error: dict[str, list[int]] = {}
    for rank in crashed:
        event = outcome.last[rank]
        by_error.setdefault(f"{event['error']} in {event['phase']}", []).append(rank)
    return "; ".join(f"{len(r)}: {error} (rank {', '.join(map(str, r))})" for error, r in by_error.items())


def _table(before: Outcome, after: Outcome, ranks: int) -> str:
    def decisions(o: Outcome, decision: str) -> str:
        if not o.guarded:
            return "-"
        chosen = [r for r in o.records if r.decision == decision]
        by_op = _count(chosen, "op")
        return str(len(chosen)) + (f" ({', '.join(f'{op} {n}' for op, n in by_op.items())})" if by_op else "")

    rows = [
        ("fsguard active in", f"{before.active}/{ranks} ranks", f"{after.active}/{ranks} ranks"),
        ("ranks finished", f"{len(before.finished)}/{ranks}", f"{len(after.finished)}/{ranks}"),
        ("ranks crashed", _crash_text(before), _crash_text(after)),
        ("races absorbed", decisions(before, "absorbed"), decisions(after, "absorbed")),
        ("hazards", decisions(before, "hazard"), decisions(after, "hazard")),
        ("conflicts", decisions(before, "conflict"), decisions(after, "conflict")),
        (
            "files as one rank leaves them",
            "yes" if not before.file_problems else "no",
            "yes" if not after.file_problems else "no: " + "; ".join(after.file_problems),
        ),
        ("launcher exit status", str(before.exit_code), str(after.exit_code)),
        ("time taken", f"{before.seconds:.1f} s", f"{after.seconds:.1f} s"),
    ]
    width = max(len(r[0]) for r in rows)
    col = max(len("without fsguard"), *(len(r[1]) for r in rows))
    lines = [f"  {'':<{width}}  {'without fsguard':<{col}}  with fsguard"]
    lines += [f"  {name:<{width}}  {a:<{col}}  {b}" for name, a, b in rows]
    return "\n".join(lines)


def _report(records_dir: Path, found: list[records.Record], page: Path) -> bool:
    """``fsguard report`` of the guarded run, also written as the web page ``page``. False if none was."""
    if importlib.util.find_spec("fsguard.cli.report") is not None:
        _say(f"$ fsguard report --html {page} {records_dir}")
        done = subprocess.run(
            [sys.executable, "-m", "fsguard", "report", "--html", str(page), str(records_dir)], check=False
        )
        if done.returncode in (0, 1):  # report's statuses: 0 no records, 1 records found, 2 errors
            return True
        _say(f"(fsguard report exited {done.returncode}; a plain count of the records follows)")
    _say(f"records in {records_dir}: {len(found)}")
    for (decision, op, site), n in sorted(_count_pairs(found).items()):
        _say(f"  {decision:<10} {op:<10} {n:>4}  at {site}")
    return False


def _page_path(root: Path, keep: bool) -> Path:
    """Where the web page goes: ``--keep``'s directory, else a temporary file of its own. The run's directory is removed
    at the end; the page is kept."""
    if keep:
        return root / "report.html"
    fd, name = tempfile.mkstemp(prefix="fsguard-demo-report-", suffix=".html")
    os.close(fd)
    return Path(name)


def _count_pairs(found: list[records.Record]) -> dict[tuple[str, str, str], int]:
    counts: dict[tuple[str, str, str], int] = {}
    for r in found:
        key = (r.decision, r.op, r.site_text())
        counts[key] = counts.get(key, 0) + 1
    return counts


def run(args: argparse.Namespace) -> int:
    launcher = _launcher(args)
    if launcher is None:
        return 2
    root = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="fsguard-demo-"))
    if args.keep and root.exists() and any(root.iterdir()):
        print(f"fsguard demo: --keep {root}: directory is not empty", file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)
    _announce(args, launcher, root)
    try:
        _say("\n[1/2] without fsguard (FSGUARD=0)")
        before = _run("without fsguard", False, args, launcher, root / "without-fsguard")
        extra = ", FSGUARD_SERIALIZE=1" if args.serialize else ""
        _say(f"\n[2/2] with fsguard (FSGUARD=1{extra}, records in FSGUARD_LOG)")
        after = _run("with fsguard", True, args, launcher, root / "with-fsguard")
        return _conclude(args, launcher, root, before, after)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _launcher(args: argparse.Namespace) -> str | None:
    """The launcher the demo uses; None, told why on stderr. ``auto`` means torchrun where torch is importable."""
    if args.ranks < 2:
        print("fsguard demo: --ranks must be at least 2 (a race needs two)", file=sys.stderr)
        return None
    launcher: str = args.launcher
    if launcher == "auto":
        launcher = "torchrun" if _torch_importable() else "local"
    if launcher == "torchrun" and not _torch_importable():
        print("fsguard demo: --launcher torchrun needs torch, which is not importable here", file=sys.stderr)
        return None
    return launcher


def _announce(args: argparse.Namespace, launcher: str, root: Path) -> None:
    launcher_text = "torchrun" if launcher == "torchrun" else "fsguard's minimal launcher (torch not used)"
    _say(f"fsguard demo: {args.ranks} ranks via {launcher_text}, {args.steps} checkpoint steps")
    _say(
        "  races: results directory (makedirs), checkpoint staging and rotation (rename, rmtree), "
        "latest symlink (remove, symlink), compile cache (replace), cleanup (remove)"
    )
    _say(f"  files in {root}" + ("" if args.keep else " (removed at the end; --keep DIR keeps them)"))
    if not _pth_installed():
        _say(
            f"  warning: no fsguard.pth in {sys.executable}'s site-packages: the guarded run will not be guarded "
            f"(install fsguard with pip into this environment)"
        )


def _conclude(args: argparse.Namespace, launcher: str, root: Path, before: Outcome, after: Outcome) -> int:
    """Print both runs' table, summary and report; return the exit status. It is 1 when the guarded run failed."""
    _say("\n" + _table(before, after, args.ranks) + "\n")
    page = _page_path(root, bool(args.keep))
    page_written = _report(root / "with-fsguard" / "records", after.records, page)
    ok = after.succeeded(args.ranks)
    summary = {
        "ranks": args.ranks,
        "steps": args.steps,
        "launcher": launcher,
        "serialize": args.serialize,
        "without_fsguard": before.summary(),
        "with_fsguard": after.summary(),
        "guarded_run_ok": ok,
    }
    (root / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if not ok:
        log = (root / "with-fsguard" / "logs" / "launcher.log").read_text(encoding="utf-8", errors="replace")
        _say("\nlast lines of the guarded run's launcher log:\n" + "\n".join(log.splitlines()[-20:]))
    _say(
        "\nguarded run: "
        + ("succeeded" if ok else "FAILED (see the table above)")
        + (f"; logs, records and files in {root}" if args.keep else "")
    )
    if page_written:
        _say(f"HTML report of the guarded run: {page}")
    elif not args.keep:
        page.unlink(missing_ok=True)
    return 0 if ok else 1
