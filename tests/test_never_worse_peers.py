"""Never worse, second pass (issue 28): ordinary programs end as they do without fsguard.

One section per class, each with two small programs run as real jobs (fresh interpreters of the wheel's venv;
ranks in a torchrun environment started by the test, or real ``torchrun`` where the launcher matters), once
with ``FSGUARD=1`` and once without:

* handlers fsguard does not see at once (a claim loop around ``shutil.copytree``; a mkdir lock retried by a
  hand-written decorator and by tenacity): the same claims, the same exit codes, one rank in the critical
  section, and the lost races ``deferred`` to the handler that decides;
* a previous job's data (a run directory made before the job, one made long ago and touched just before it, a
  symlink left by the previous job): the same exception as without fsguard, the old data untouched; a peer's
  directory made during the job is still absorbed;
* records after the application's ``logging.config.dictConfig``/``fileConfig``: still on stderr;
* floods (a rank polling a mkdir lock): a bounded number of lines per call site, and ``fsguard report`` of
  stderr alone counts every record.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fsguard.records import BURST, Record, parse_line
from tests.conftest import clean_env
from tests.support.cli import run_cli
from tests.support.ranks import launch, rank_env
from tests.support.threads import with_crash_of

TIMEOUT_S = 120


def run_ranks(python: Path, code: str, where: Path, ranks: int, guarded: bool, **extra: str) -> list[dict[str, Any]]:
    """``code`` on ``ranks`` ranks at once (a torchrun environment each, started by this test); per rank: its
    exit code, its stdout's last line as JSON (or None) and its stderr."""
    where.mkdir(parents=True, exist_ok=True)
    script = where / "program.py"
    script.write_text(textwrap.dedent(code))
    envs = [rank_env(rank, ranks, FSGUARD="1" if guarded else "0", **extra) for rank in range(ranks)]
    results = []
    for rank in launch([str(python), str(script), str(where)], envs, TIMEOUT_S):
        last = rank.out.strip().splitlines()[-1] if rank.out.strip() else ""
        results.append({"code": rank.code, "out": json.loads(last) if last.startswith("{") else None, "err": rank.err})
    return results


def records_of(results: list[dict[str, Any]]) -> list[Record]:
    lines = [line for r in results for line in r["err"].splitlines() if line.startswith("fsguard: ")]
    found = [parse_line(line) for line in lines]
    assert all(found), lines
    return [r for r in found if r is not None]


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> content), directory (-> "/") and symlink (-> its target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.name == "program.py":
            continue
        if path.is_symlink():
            out[str(path.relative_to(root))] = "-> " + os.readlink(path)
        else:
            out[str(path.relative_to(root))] = "/" if path.is_dir() else path.read_text()
    return out


# --- class 2: handlers further up the stack decide -----------------------------------------------------------

GATE = """
    import os, sys, time
    root = sys.argv[1]
    rank = int(os.environ["RANK"])
    open(os.path.join(root, f"ready-{rank}"), "w").close()
    while len([n for n in os.listdir(root) if n.startswith("ready-")]) < int(os.environ["WORLD_SIZE"]):
        time.sleep(0.002)
"""

SNAPSHOT_CLAIMS = (
    GATE
    + """
    import json, shutil, sys
    source = os.path.join(root, f"source-{rank}")
    os.makedirs(source, exist_ok=True)
    with open(os.path.join(source, "weights"), "w") as f:
        f.write(f"rank {rank}")

    def snapshot(dst):
        shutil.copytree(source, dst)  # its os.makedirs(dst) fails when the name is taken

    i = 0
    while True:
        try:
            snapshot(os.path.join(root, f"snap-{i}"))
            break
        except FileExistsError:
            i += 1
    sys.stdout.write(json.dumps({"claimed": i}) + "\\n")  # one write: ranks share the pipe
"""
)


def check_same_claims(without: list[dict[str, Any]], guarded: list[dict[str, Any]], where: Path) -> None:
    for results in (without, guarded):
        assert [r["code"] for r in results] == [0] * len(results), [r["err"] for r in results]
    for mode in ("without", "with"):
        claims = sorted(tree(where / mode).items())
        snaps = {k: v for k, v in claims if k.startswith("snap-") and k.endswith("weights")}
        # one rank's data in each claimed name, every rank's data somewhere
        assert sorted(snaps.values()) == [f"rank {r}" for r in range(len(without))], snaps


def test_claim_loop_around_copytree(fsguard_python: Path, tmp_path: Path) -> None:
    """``try: snapshot(dst) except FileExistsError: i += 1`` where ``snapshot`` calls ``shutil.copytree``:
    the standard library's frames are read on the way (no frame budget); each rank claims its own name."""
    without = run_ranks(fsguard_python, SNAPSHOT_CLAIMS, tmp_path / "without", 3, guarded=False)
    guarded = run_ranks(fsguard_python, SNAPSHOT_CLAIMS, tmp_path / "with", 3, guarded=True)
    check_same_claims(without, guarded, tmp_path)
    claimed = sorted(r["out"]["claimed"] for r in guarded)
    assert claimed == sorted(r["out"]["claimed"] for r in without) == [0, 1, 2]
    records = records_of(guarded)
    assert records and {(r.op, r.decision) for r in records} == {("makedirs", "deferred")}, records
    assert {r.detail["handler"] for r in records} == {"except FileExistsError"}
    # shutil's copytree and _copytree, snapshot, then the claim loop (the standard library's frames are read too)
    assert {r.detail["frames_up"] for r in records} == {3}


LOCK_IN_A_RETRY = (
    GATE
    + """
    import json, sys
    lock = os.path.join(root, "lock")
    RETRY = os.environ["RETRY"]
    tries = [0]

    if RETRY == "tenacity":
        import tenacity

        retry = tenacity.retry(
            wait=tenacity.wait_fixed(0.003), stop=tenacity.stop_after_delay(60), reraise=True,
            before_sleep=lambda state: tries.__setitem__(0, tries[0] + 1),
        )
    else:
        def retry(function):  # a hand-written decorator: catches in its own frame, sleeps, calls again
            def wrapper(*args, **kwargs):
                for _ in range(20000):
                    try:
                        return function(*args, **kwargs)
                    except Exception:
                        tries[0] += 1
                        time.sleep(0.003)
                raise TimeoutError(lock)
            return wrapper

    @retry
    def acquire():
        os.mkdir(lock)

    most = 0
    for _ in range(3):
        acquire()
        mark = os.path.join(root, f"inside-{rank}")
        os.mkdir(mark)
        most = max(most, len([n for n in os.listdir(root) if n.startswith("inside-")]))
        time.sleep(0.03)
        os.rmdir(mark)
        os.rmdir(lock)
        time.sleep(0.005)
    found = {"most_inside": most, "retries": tries[0]}
    sys.stdout.write(json.dumps(found) + "\\n")  # one write: ranks share the pipe
"""
)


@pytest.mark.parametrize("retry", ["decorator", "tenacity"])
def test_mkdir_lock_in_a_retry_decorator(fsguard_python: Path, tmp_path: Path, retry: str) -> None:
    """A mkdir lock retried by a decorator (hand-written, ``except Exception`` in a loop; tenacity's
    ``except BaseException``): one rank in the critical section at a time, with and without fsguard."""
    pytest.importorskip("tenacity")
    runs = {}
    for mode, guarded in (("without", False), ("with", True)):
        for attempt in range(4):  # until the lock was contended: on a loaded machine the ranks may never meet
            where = tmp_path / f"{mode}{attempt}"
            runs[mode] = run_ranks(fsguard_python, LOCK_IN_A_RETRY, where, 3, guarded=guarded, RETRY=retry)
            assert [r["code"] for r in runs[mode]] == [0, 0, 0], [r["err"] for r in runs[mode]]
            assert [r["out"]["most_inside"] for r in runs[mode]] == [1, 1, 1], runs[mode]
            assert tree(where).keys() == {"ready-0", "ready-1", "ready-2"}
            if sum(r["out"]["retries"] for r in runs[mode]):
                break
        assert sum(r["out"]["retries"] for r in runs[mode]), f"{mode}: the lock was never contended"
    records = records_of(runs["with"])
    assert {(r.op, r.decision) for r in records} == {("mkdir", "deferred")}, records
    handler = "except BaseException" if retry == "tenacity" else "except Exception"
    assert {r.detail["handler"] for r in records} == {handler}


# --- class 3: a previous job's data ----------------------------------------------------------------------------

PREVIOUS_JOB = """
    import json, os, sys, time
    base = sys.argv[1]
    rank = int(os.environ["RANK"])
    out = {}

    def start_run(run_dir):  # the script's guard against reusing a run directory
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, f"weights-{rank}"), "w") as f:
            f.write("new")

    def link_latest(run):  # a previous job's ``latest`` must not be taken over either
        os.symlink(run, os.path.join(base, "links", "latest"))

    scenarios = [
        ("previous", lambda: start_run(os.path.join(base, "previous"))),
        ("touched", lambda: start_run(os.path.join(base, "touched"))),
        ("latest", lambda: link_latest("run-1")),
    ]
    if rank == 0:
        os.makedirs(os.path.join(base, "fresh"))  # during this job: a peer's directory for rank 1
    for name, act in scenarios:
        try:
            act()
            out[name] = "ok"
        except Exception as error:  # the program's handler: it gets what the rule re-raises
            out[name] = f"{type(error).__name__}:{error.errno}"
    if rank == 1:
        while not os.path.isdir(os.path.join(base, "fresh")):
            time.sleep(0.01)
        # a would-be crash of a thread of its own: absorbed when a peer made the directory
        _, escaped = crash_of(start_run, os.path.join(base, "fresh"))
        out["fresh"] = type(escaped).__name__ if escaped else "ok"
    sys.stdout.write(json.dumps(out) + "\\n")  # one write: ranks share the pipe
"""


def torchrun(python: Path, script: Path, where: Path, guarded: bool, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"FSGUARD": "1" if guarded else "0", **extra}
    command = [str(python), "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run(
        [*command, str(script), str(where)], env=clean_env(env), capture_output=True, text=True, timeout=TIMEOUT_S
    )


def previous_job(base: Path) -> None:
    """What the previous job left: a run directory with weights, one made long ago, a ``latest`` link."""
    for name in ("previous", "touched"):
        (base / name).mkdir(parents=True)
        (base / name / "weights-0").write_text("old")
    (base / "links").mkdir()
    os.symlink("run-1", base / "links" / "latest")


def test_previous_jobs_run_directory_is_never_a_peers(fsguard_python: Path, tmp_path: Path) -> None:
    """Under real torchrun, with the defaults a user gets (``FSGUARD_FRESH_S`` 5 s): a run directory and a
    ``latest`` link the previous job made 6.5 s before launch, and a directory made then into which a file was
    written just before launch
    (its ctime is new, its birth time is not), make ``os.makedirs``/``os.symlink`` raise as without fsguard,
    on both ranks, and the old weights stay. A peer's directory made during the job is still absorbed."""
    from fsguard import config, evidence

    script = tmp_path / "program.py"
    script.write_text(with_crash_of(PREVIOUS_JOB))
    outcomes, trees = {}, {}
    for mode, guarded in (("without", False), ("with", True)):
        base = tmp_path / mode
        previous_job(base)
        time.sleep(config.Settings().fresh_s + 1.5)  # older than the default's slack, with a margin
        (base / "touched" / "notes").write_text("added just before launch")  # the directory's ctime: now
        done = torchrun(fsguard_python, script, base, guarded)
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 2, done.stdout + done.stderr
        outcomes[mode] = sorted(lines, key=lambda o: "fresh" in o)
        trees[mode] = {k: v for k, v in tree(base).items() if not k.startswith("fresh")}
        records = [parse_line(line) for line in done.stderr.splitlines()]
        if guarded:
            found = [r for r in records if r is not None]
            assert [(r.op, r.decision) for r in found] == [("makedirs", "absorbed")], done.stderr
            assert found[0].args[0].endswith("fresh"), found
    expected = {"previous": "FileExistsError:17", "touched": "FileExistsError:17", "latest": "FileExistsError:17"}
    if evidence.birth_time(str(tmp_path)) is None:  # no birth times here: a ctime can only tell "changed"
        expected.pop("touched")
    for mode in outcomes:
        for outcome in outcomes[mode]:
            assert {k: outcome[k] for k in expected} == expected, outcomes
    assert trees["with"] == trees["without"], trees
    assert trees["with"]["previous/weights-0"] == "old" and "previous/weights-1" not in trees["with"]
    fresh = {mode: [o.get("fresh") for o in outcomes[mode] if "fresh" in o] for mode in outcomes}
    assert fresh == {"without": ["FileExistsError"], "with": ["ok"]}, fresh


def test_job_start_is_the_launchers(fsguard_python: Path, tmp_path: Path) -> None:
    """A rank's job start is its torchrun agent's start (not the rank's own, not a minute earlier), and a
    record of a raised duplicate says so."""
    code = """
        import json, os, sys, time
        from fsguard import evidence
        started = evidence.job_start(True)
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            agent = f.read().split(b"\\0")
        found = {"start": started, "source": evidence.job_start_source, "agent": agent[1].decode()}
        sys.stdout.write(json.dumps(found) + "\\n")  # one write: ranks share the pipe
    """
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    before = time.time()
    done = torchrun(fsguard_python, script, tmp_path, True)
    assert done.returncode == 0, done.stderr
    for line in done.stdout.splitlines():
        seen = json.loads(line)
        assert seen["agent"] == "-m" and "agent" in seen["source"], seen
        assert before - 1 <= seen["start"] <= time.time(), (before, seen)


# --- class 6: records after the application's logging configuration ---------------------------------------

CLAIM_AFTER_LOGGING = """
    import json, logging, logging.config, os, posix, sys, tempfile
    root = sys.argv[1]

    def claim(tag):
        posix.mkdir(os.path.join(root, f"{tag}-0"))  # a peer's, moments ago (unguarded: not this rank's own)
        i = 0
        while True:
            try:
                os.makedirs(os.path.join(root, f"{tag}-{i}"))
                return i
            except FileExistsError:
                i += 1

    first = claim("before")  # fsguard's logger exists now
    if os.environ["CONFIGURE"] == "dict":
        logging.config.dictConfig({
            "version": 1,
            "formatters": {"plain": {"format": "app: %(message)s"}},
            "handlers": {"out": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "plain"}},
            "root": {"handlers": ["out"], "level": "WARNING"},
        })
    else:
        ini = os.path.join(root, "logging.ini")
        with open(ini, "w") as f:
            f.write("[loggers]\\nkeys=root\\n[handlers]\\nkeys=out\\n[formatters]\\nkeys=\\n"
                    "[logger_root]\\nlevel=ERROR\\nhandlers=out\\n"
                    "[handler_out]\\nclass=StreamHandler\\nargs=(sys.stdout,)\\n")
        logging.config.fileConfig(ini)
        logging.disable(logging.INFO)
    logging.getLogger("app").error("configured")
    second = claim("after")
    sys.stdout.write(json.dumps({"claims": [first, second]}) + "\\n")  # one write: ranks share the pipe
"""


@pytest.mark.parametrize("configure", ["dict", "file"])
def test_records_survive_the_applications_logging_configuration(
    fsguard_python: Path, tmp_path: Path, configure: str
) -> None:
    """``dictConfig`` (``disable_existing_loggers``, root handlers replaced) or ``fileConfig`` plus
    ``logging.disable``: fsguard's records still reach stderr, the program's output is its own."""
    runs = {}
    for mode, guarded in (("without", False), ("with", True)):
        runs[mode] = run_ranks(
            fsguard_python, CLAIM_AFTER_LOGGING, tmp_path / mode, 1, guarded, CONFIGURE=configure, WORLD_SIZE="4"
        )
        (result,) = runs[mode]
        assert result["code"] == 0 and result["out"] == {"claims": [1, 1]}, result
    assert tree(tmp_path / "with") == tree(tmp_path / "without")
    records = records_of(runs["with"])
    assert [(r.decision, r.args[0].rsplit("/", 1)[1]) for r in records] == [
        ("deferred", "before-0"),
        ("deferred", "after-0"),
    ], runs["with"][0]["err"]
    assert runs["without"][0]["err"] == ""


# --- class 8: floods -----------------------------------------------------------------------------------------

POLLING = (
    GATE
    + """
    import json, sys
    lock = os.path.join(root, "lock")
    polls = 0
    world = int(os.environ["WORLD_SIZE"])
    if rank == 0:  # held HOLD_S, and until every poller has polled ENOUGH times (a loaded machine polls slowly)
        os.mkdir(lock)
        time.sleep(float(os.environ["HOLD_S"]))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(os.path.exists(f"{root}.polled-{r}") for r in range(1, world)):
            time.sleep(0.01)
        os.rmdir(lock)
    else:
        while not os.path.exists(lock):
            time.sleep(0.001)
        while True:
            try:
                os.mkdir(lock)
                break
            except FileExistsError:
                polls += 1
                if polls == int(os.environ["ENOUGH"]):
                    open(f"{root}.polled-{rank}", "w").close()
                time.sleep(0.002)
        os.rmdir(lock)
    sys.stdout.write(json.dumps({"polls": polls}) + "\\n")  # one write: ranks share the pipe
"""
)


@pytest.mark.parametrize("ranks", [2, 3])
def test_polling_a_lock_does_not_flood_stderr(fsguard_python: Path, tmp_path: Path, ranks: int) -> None:
    """Ranks polling a mkdir lock held for 1 s: hundreds of ``deferred`` records, at most ``BURST`` + 1
    lines per rank on stderr (the last says how many more), every record in ``FSGUARD_LOG``, and
    ``fsguard report`` counting every one from stderr alone, from the files alone, and from both."""
    runs = {}
    logs = tmp_path / "records"
    for mode, guarded in (("without", False), ("with", True)):
        extra = {"HOLD_S": "1.0", "ENOUGH": str(5 * (BURST + 1)), **({"FSGUARD_LOG": str(logs)} if guarded else {})}
        runs[mode] = run_ranks(fsguard_python, POLLING, tmp_path / mode, ranks, guarded, **extra)
        assert [r["code"] for r in runs[mode]] == [0] * ranks, [r["err"] for r in runs[mode]]
        assert tree(tmp_path / mode).keys() == {f"ready-{r}" for r in range(ranks)}
    polls = sum(r["out"]["polls"] for r in runs["with"])
    assert polls > 4 * (ranks - 1) * (BURST + 1), runs["with"]  # a flood, had every record been printed
    written = Counter(
        json.loads(line)["rank"] for f in logs.glob("*.jsonl") for line in f.read_text().splitlines() if line.strip()
    )
    for rank, result in enumerate(runs["with"]):
        lines = [line for line in result["err"].splitlines() if line.startswith("fsguard: ")]
        assert len(lines) <= BURST + 1 and len(lines) == len(result["err"].splitlines()), result["err"]
        # Every failed poll is one record, but one that lost to the holder's release (the lock gone when the rule
        # looked: nothing to absorb, a plain re-raise) has none.
        assert result["out"]["polls"] - 1 <= written[rank] <= result["out"]["polls"], (written, result["out"])
        records = records_of([result])
        if written[rank] > BURST:
            assert records[-1].detail["more"] == written[rank] - BURST - 1, lines
            assert "more like it" in records[-1].evidence
    polls = sum(written.values())
    stderr_log = tmp_path / "job.log"
    stderr_log.write_text("".join(r["err"] for r in runs["with"]))
    for inputs in ([stderr_log], [logs], [stderr_log, logs]):
        done = run_cli(fsguard_python, "report", "--json", *map(str, inputs))
        document = json.loads(done.stdout)
        counts = Counter({g["decision"]: g["count"] for g in document["groups"]})
        assert counts == Counter({"deferred": polls}) and document["records"] == polls, (inputs, document)
    assert sum(1 for _ in logs.glob("*.jsonl")) == ranks - 1


def test_limiter_unit() -> None:
    """The limiter itself: a burst, then counts; the next line after the window carries the count."""
    from fsguard import records

    limiter = records._Limiter()
    site = {"file": "t.py", "line": 1, "function": "f"}
    made = [records.Record("mkdir", "deferred", "e", ["x"], site=site, time=100.0 + i / 10) for i in range(10)]
    shown = [r for rec in made for r in limiter.admit(rec)]
    assert shown == made[:BURST]
    later = records.Record("mkdir", "deferred", "e", ["x"], site=site, time=100.0 + records.WINDOW_S + 5)
    (again,) = limiter.admit(later)
    assert again.detail["more"] == 10 - BURST and again.time == later.time
    assert limiter.held_back() == []
