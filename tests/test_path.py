"""A failing call goes down fsguard's modules once: it never bounces (issue 36).

Each test runs ``tests/workers/path_trace.py`` in a fresh interpreter of the wheel (the real ``.pth``,
``FSGUARD=1`` in a torchrun rank's environment), where a peer of the job left something at the path, and
follows one failing guarded call with ``sys.setprofile``: every frame of an ``fsguard`` module it enters and
leaves, from the guarded function's wrapper to its re-raise or return. The same failure is made once before,
unfollowed: the first failure imports the failure path, and an import is loading, not the call's course.

The metric, "following a failing call from ``install`` through the modules it enters, in order, it returns to a
module it already left at most once", made precise:

* A **stage** is a module the failing call passes through: ``patching`` (the wrapper), ``failure`` (the
  pipeline), ``oracle`` (the caller's context), a rule module ``guards.<op>`` (the decision), ``rmwalk``
  (rmtree's walk, which asks its rule at each step), ``runtime`` (the record), ``locks.*`` (the serializer). Every
  other fsguard module **answers** the stage that asked it: the call's and the process's values (``calls``,
  ``state``, ``config``, ``launcher``, ``_values``), who called (``callers``: the standard library's own call), the types every stage passes on (``guards``: ``Rules``,
  ``Verdict``), the world the rules ask (``world``, ``evidence``, ``memory``, ``mounts``), the record's format
  (``records``). An answer's frames count as the frames of the stage under it on the stack (a rule's predicate
  that ``evidence.wait_for_seen`` calls back is the rule's own frame).
* A **visit** of a stage starts when a frame of it starts above a frame of another stage (the stage under it on
  the stack: the visit's caller), and lasts while any of its frames is on the stack; a stage calling itself, or
  calling back into itself through answers and the standard library (``os.makedirs`` calling the guarded
  ``mkdir``), stays in its visit.
* The call **bounces** when (a) a stage starts a visit while a visit of it is still open lower on the stack (a
  lower module calling back up: ``patching`` entered again in the middle, a stage calling ``failure``), or (b) a
  stage asks a stage it already asked after asking another one in between (``A, B, A`` among the visits one visit
  makes: a stage entered again after the pipeline moved past it; ``A, A`` is one stage's turn, a rule asking
  several questions).
* The one return the issue allows is the failing call coming back to the wrapper (``patching``) to re-raise or
  return: there the call ends. Every other return is a bounce, so a failing call bounces 0 times: the pipeline
  (``failure``) asking each stage in turn (context, rule, record) is the design, not a bounce.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import TORCHRUN_ENV, clean_env
from tests.workers import path_trace

WORKER = Path(path_trace.__file__).resolve()
# The modules a failing call passes through (a module, or a package for everything in it, except ``guards``,
# whose rule modules are stages and whose ``__init__`` holds the types every stage passes on).
STAGES = ("fsguard.patching", "fsguard.failure", "fsguard.oracle", "fsguard.rmwalk", "fsguard.runtime")
STAGE_PACKAGES = ("fsguard.guards.", "fsguard.locks.")


def stage_of(module: str) -> str | None:
    """The stage a module is (itself, or the oracle or rmwalk package for its modules), or None where it answers the
    stage under it."""
    for package in ("fsguard.oracle", "fsguard.rmwalk"):
        if module.startswith(package + "."):
            return package
    if module in STAGES or module.startswith(STAGE_PACKAGES):
        return module
    return None


@dataclass
class Visit:
    stage: str
    asked: list[Visit] = field(default_factory=list)  # the visits it made, in order (A, A merged: one turn)

    def course(self, depth: int = 0) -> list[str]:
        return ["  " * depth + self.stage, *(line for visit in self.asked for line in visit.course(depth + 1))]


def follow(events: list[list[str]]) -> tuple[Visit, list[str]]:
    """The visits of one followed call's ``call``/``return`` events, and its bounces (see the docstring)."""
    root: Visit | None = None
    frames: list[Visit | None] = []  # per frame on the stack: the visit it opened (None: it opened none)
    open_visits: list[Visit] = []
    bounces: list[str] = []
    for kind, module, function in events:
        if kind == "return":
            opened = frames.pop()
            if opened is not None:
                assert open_visits.pop() is opened
            continue
        stage = stage_of(module)
        caller = open_visits[-1] if open_visits else None
        if stage is None or (caller is not None and caller.stage == stage):
            frames.append(None)  # an answer, or the same stage going on: no new visit
            continue
        if caller is None:
            assert root is None, f"a second top-level visit: {stage}.{function}"
            visit = root = Visit(stage)
        else:
            if any(v.stage == stage for v in open_visits):
                bounces.append(f"{caller.stage} called back up into {stage}.{function}")
            stages = [v.stage for v in caller.asked]
            if stages and stages[-1] == stage:
                visit = caller.asked[-1]  # the same stage asked again at once: one turn (A, A)
            else:
                if stage in stages:
                    bounces.append(f"{caller.stage} asked {stage}.{function} again after {stages[-1]}")
                visit = Visit(stage)
                caller.asked.append(visit)
        frames.append(visit)
        open_visits.append(visit)
    assert root is not None and not frames, "the followed call did not start and end in fsguard"
    return root, bounces


def followed(python: Path, scenario: str, root: Path) -> tuple[Visit, list[str], str, list[str]]:
    done = subprocess.run(
        [str(python), str(WORKER), scenario, str(root)],
        env=clean_env({**TORCHRUN_ENV, "FSGUARD": "1"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    visit, bounces = follow(report["events"])
    records = [line.split(" rank=")[0] for line in done.stderr.splitlines() if line.startswith("fsguard: ")]
    return visit, bounces, report["outcome"], records


CONTEXT, RECORD = "fsguard.oracle", "fsguard.runtime"


@pytest.mark.parametrize(
    ("scenario", "outcome", "decision", "pipeline"),
    [
        # the rule first: the context (handler analysis) is asked only where the evidence would absorb
        ("makedirs_absorbed", "returned", "absorbed makedirs", ["fsguard.guards.makedirs", CONTEXT, RECORD]),
        # the context first: a rule that would wait for evidence does not wait where the caller handles it
        # (its staged file was written in place under the name a peer moved: a hazard, absorbed all the same)
        ("rename_missing_source", "returned", "hazard replace", [CONTEXT, "fsguard.guards.rename", RECORD]),
        # the walk first: the error whose context is asked is the one the walk lets escape (the tree was gone)
        ("rmtree_gone", "returned", "absorbed rmtree", ["fsguard.rmwalk", CONTEXT, RECORD]),
        ("makedirs_handled", "handled", "deferred makedirs", ["fsguard.guards.makedirs", CONTEXT, RECORD]),
    ],
)
def test_a_failing_call_goes_down_once(
    fsguard_python: Path, tmp_path: Path, scenario: str, outcome: str, decision: str, pipeline: list[str]
) -> None:
    """The followed call bounces 0 times, and the pipeline asks its stages once each: the rule, the caller's
    context (asked only where the evidence would absorb: handler analysis costs no other failure), the record; a
    rename's missing source asks the context first (a handled error does not wait for evidence); rmtree's walk,
    then the context of the error it let escape."""
    visit, bounces, got, records = followed(fsguard_python, scenario, tmp_path)
    course = "\n".join(visit.course())
    # the race happened and fsguard decided it (once unfollowed, once followed): the course is a failure's
    assert (got, records) == (outcome, [f"fsguard: {decision}"] * 2), course
    assert bounces == [], f"{bounces}\n{course}"
    assert visit.stage == "fsguard.patching" and [v.stage for v in visit.asked] == ["fsguard.failure"], course
    assert [v.stage for v in visit.asked[0].asked] == pipeline, course


def _events(*course: str) -> list[list[str]]:
    """``call``/``return`` events from a course written as ``"+module"`` (a frame starts) and ``"-"`` (the newest
    frame returns)."""
    stack: list[str] = []
    events: list[list[str]] = []
    for step in course:
        if step == "-":
            events.append(["return", stack.pop(), "f"])
        else:
            stack.append("fsguard." + step[1:])
            events.append(["call", stack[-1], "f"])
    return events


def test_the_metric_tells_a_pipeline_from_a_bounce() -> None:
    """The pipeline asking each stage in turn does not bounce; what the issue names does: patching entered
    again in the middle, a lower module calling back up, a stage asked again after the pipeline moved on."""
    pipeline = _events(
        *("+patching", "+calls", "-", "+failure", "+oracle", "+runtime", "-", "-", "+state", "-", "+oracle", "-"),
        *("+guards.makedirs", "+world", "+evidence", "+guards.makedirs", "-", "-", "-", "-"),
        *("+runtime", "+records", "-", "-", "-", "-"),
    )
    visit, bounces = follow(pipeline)
    assert bounces == [] and visit.course() == [
        "fsguard.patching",
        "  fsguard.failure",
        "    fsguard.oracle",
        "      fsguard.runtime",
        "    fsguard.guards.makedirs",
        "    fsguard.runtime",
    ], visit.course()
    # the oracle asked again after the rule (above, asked twice with only an answer, state, between: one turn)
    again = _events("+patching", "+failure", "+oracle", "-", "+guards.rename", "-", "+oracle", "-", "-", "-")
    assert follow(again)[1] == ["fsguard.failure asked fsguard.oracle.f again after fsguard.guards.rename"]
    # the mechanism asking the pipeline before and after another stage
    around = _events("+patching", "+failure", "-", "+rmwalk", "-", "+failure", "-", "-")
    assert follow(around)[1] == ["fsguard.patching asked fsguard.failure.f again after fsguard.rmwalk"]
    # a serializer calling the wrapper back: patching entered again in the middle
    back = _events("+patching", "+locks.serializer", "+patching", "+failure", "-", "-", "-", "-")
    assert follow(back)[1] == ["fsguard.locks.serializer called back up into fsguard.patching.f"]
