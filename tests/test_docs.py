"""The README and the documentation site (issue 38): short, linked, generated where they can be, and every
command they show is run by a test.

The site itself is built in strict mode by ``scripts/test.sh`` (``sphinx-build -W``): a broken cross-reference,
a missing page or a directive error fails the run there. What this file checks needs no Sphinx.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support import records as read_records
from tests.support.cli import run_cli
from tests.support.docs import docs_extension
from tests.support.env import ROOT, clean_env
from tests.support.ranks import launch, rank_env

DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 150

# The pages the issue asks for (docs/<name>.md), each in the site's table of contents.
PAGES = (
    "index",
    "getting-started",
    "decides/index",
    "decides/makedirs",
    "decides/mkdir",
    "decides/rename",
    "decides/rmtree",
    "decides/remove",
    "decides/symlink",
    "decides/link",
    "decides/handlers",
    "configuration",
    "launchers",
    "filesystems",
    "serialization",
    "audit",
    "never-worse",
    "real-programs",
    "measured",
    "troubleshooting",
    "api",
    "changelog",
)


def markdown_files() -> list[Path]:
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def load_extension() -> ModuleType:
    """``docs/_ext/fsguard_docs.py``, the Sphinx extension that renders the settings table."""
    return docs_extension()


# --- the README ----------------------------------------------------------------------------------------------


def test_readme_fits_on_two_screens() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md is {len(lines)} lines; at most {README_MAX_LINES}"


def test_readme_shows_the_two_commands() -> None:
    text = README.read_text()
    assert "$ python3 -m venv venv && venv/bin/pip install . && venv/bin/fsguard demo\n" in text
    assert "$ bash scripts/test.sh\n" in text


# --- links ---------------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` outside fenced code blocks, numbered."""
    fenced = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)  # inline code is not a link


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST (``myst_heading_anchors``) make it."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for _, line in prose(path):
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            found.add(slug(match.group(1)))
    return found


def local_links(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in prose(path):
        for match in LINK.finditer(line):
            target = match.group(1)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):  # not http:, https:, mailto:
                yield number, target


def test_every_local_link_resolves() -> None:
    """In the README and every page: the file exists, and so does the heading an anchor names."""
    broken = []
    checked = 0
    for path in markdown_files():
        for number, target in local_links(path):
            checked += 1
            name, _, anchor = target.partition("#")
            goal = (path.parent / name).resolve() if name else path
            where = f"{path.relative_to(ROOT)}:{number}: {target}"
            if not goal.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (goal.suffix != ".md" or anchor not in anchors(goal)):
                broken.append(f"{where}: no heading #{anchor} in {goal.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)
    assert checked > 50  # the check found the links


def test_slug_is_githubs() -> None:
    assert slug("The rename wins") == "the-rename-wins"
    assert slug("`fsguard report --html`") == "fsguard-report---html"
    assert slug("What is still not true") == "what-is-still-not-true"
    assert slug("Python 3.15's .start files") == "python-315s-start-files"


def test_readme_links_into_every_page_group() -> None:
    targets = {target.partition("#")[0] for _, target in local_links(README)}
    for page in ("getting-started", "decides/index", "configuration", "launchers", "filesystems"):
        assert f"docs/{page}.md" in targets, page
    for page in ("serialization", "audit", "never-worse", "measured", "troubleshooting", "api"):
        assert f"docs/{page}.md" in targets, page
    assert "CHANGELOG.md" in targets


# --- pages ---------------------------------------------------------------------------------------------------


def test_every_page_exists_and_is_in_the_table_of_contents() -> None:
    listed = set()
    for path in [DOCS / "index.md", DOCS / "decides" / "index.md"]:
        prefix = "" if path.parent == DOCS else "decides/"
        block = re.findall(r"```\{toctree\}\n(.*?)```", path.read_text(), re.S)
        for body in block:
            listed |= {prefix + line.strip() for line in body.splitlines() if line.strip() and ":" not in line}
    for page in PAGES:
        assert (DOCS / f"{page}.md").is_file(), page
        assert page == "index" or page in listed, f"{page} is not in a toctree"
    assert (DOCS / "report-html.png").is_file()
    assert "```{include} ../CHANGELOG.md" in (DOCS / "changelog.md").read_text()


# --- the settings table: one source for load(), status and the docs -----------------------------------------


def test_configuration_page_is_generated_from_the_settings_table() -> None:
    """The page holds the generating directive and no hand-written copy of a setting's row."""
    from fsguard import config

    page = (DOCS / "configuration.md").read_text()
    assert "```{fsguard-settings}" in page
    for variable in config.VARIABLES:
        assert not re.search(rf"^\|\s*`{variable.name}`\s*\|", page, re.M), f"hand-written row for {variable.name}"

    rendered = load_extension().settings_markdown()
    rows = [line for line in rendered.splitlines() if line.startswith("| `")]
    assert len(rows) == len(config.VARIABLES)
    for row, variable in zip(rows, config.VARIABLES, strict=True):
        shown = f"`{variable.default}`" if variable.default else "unset"
        assert row.startswith(f"| `{variable.name}` | {shown} |"), row


def test_status_prints_the_settings_the_docs_show(bare_python: Path) -> None:
    """``fsguard status --json`` of an installed fsguard and the rendered page: the same names and defaults."""
    done = run_cli(bare_python, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = [(s["name"], s["default"]) for s in json.loads(done.stdout)["settings"]]
    documented = [(name, default) for name, default, _ in load_extension().settings_rows()]
    assert status == documented


# --- the record format ---------------------------------------------------------------------------------------

SCHEMA = DOCS / "record.schema.json"


def fresh_records(python: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """Records a real job writes now: 4 ranks (torchrun's environment, FSGUARD=1) race ``makedirs`` of one
    directory (absorbed), then of another in a ``try/except FileExistsError`` (the program's handler: deferred)."""
    shared, log = tmp_path / "shared", tmp_path / "log"
    code = textwrap.dedent(
        """
        import os, sys
        os.makedirs(os.path.join(sys.argv[1], "absorbed"))
        try:
            os.makedirs(os.path.join(sys.argv[1], "claimed"))
        except FileExistsError:
            pass
        """
    )
    envs = [rank_env(r, 4, FSGUARD="1", FSGUARD_LOG=str(log), FSGUARD_STDERR="0") for r in range(4)]
    ranks = launch([str(python), "-c", code, str(shared)], envs, timeout_s=120)
    assert [r.code for r in ranks] == [0, 0, 0, 0], [r.err for r in ranks]
    found = read_records.json_records(log)
    assert {r["decision"] for r in found} >= {"absorbed", "deferred"}, found
    return found


def stored_records() -> list[dict[str, Any]]:
    """Records real runs wrote, kept as test data (tests/data/audit: the demo's, guarded torchrun jobs')."""
    found = []
    for path in sorted((ROOT / "tests" / "data" / "audit").rglob("*")):
        if path.suffix in (".jsonl", ".log"):
            found += [r.as_dict() for r in read_records.from_lines(path.read_text(errors="replace").splitlines())]
    assert len(found) > 20
    return found


def test_record_schema_matches_the_record_type() -> None:
    from fsguard import records

    schema = json.loads(SCHEMA.read_text())
    assert set(schema["required"]) == set(records.FIELDS) == set(schema["properties"])
    assert schema["properties"]["decision"]["enum"] == list(records.DECISIONS)
    assert schema["properties"]["v"]["const"] == records.SCHEMA


def test_real_records_follow_the_schema(bare_python: Path, tmp_path: Path) -> None:
    try:
        import jsonschema
    except ImportError:
        pytest.fail("jsonschema is not installed: install requirements-test.txt (bash scripts/test.sh)")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for record in fresh_records(bare_python, tmp_path) + stored_records():
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(record)]
        assert not errors, (record, errors)
    # and the schema says no to what is not a record
    assert not validator.is_valid({"op": "makedirs", "decision": "absorbed"})
    assert not validator.is_valid({**stored_records()[0], "decision": "ignored"})


# --- every command the docs show is run ----------------------------------------------------------------------
#
# A command is a line starting with "$ " inside a fenced block of the README or a page ("  # ..." after it is a
# comment). Each is either run here, as shown (in a fresh venv holding fsguard's wheel, with its placeholders
# filled), or named with the test that runs it. A command added to the docs without an entry here fails
# test_every_documented_command_is_run; an entry whose command left the docs fails it too.


def documented_commands() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in markdown_files():
        fenced = False
        for line in path.read_text().splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced and line.startswith("$ "):
                command = re.split(r"\s{2,}#", line[2:])[0].strip()
                found.setdefault(command, []).append(str(path.relative_to(ROOT)))
    return found


# Commands other tests run: command -> "file::test" (the test exists: test_covering_tests_exist).
COVERED = {
    # The README's two commands (tests/test_first_contact.py): the first run as typed in a copy of the tree, the
    # second's flow (its checks, exit statuses, coverage floor) with its tools stubbed: it runs this test.
    "python3 -m venv venv && venv/bin/pip install . && venv/bin/fsguard demo": (
        "tests/test_first_contact.py::test_the_first_command_runs_the_demo"
    ),
    "bash scripts/test.sh": "tests/test_first_contact.py::test_the_test_command_and_ci",
    "pip install fsguard": "tests/test_wheel.py::test_pip_installs_the_wheel",  # the wheel; not yet on PyPI
    "export FSGUARD=1": "tests/test_demo.py::test_demo_before_and_after",
    "torchrun --nproc-per-node 8 train.py": "tests/test_demo.py::test_demo_before_and_after",  # real torchrun
    "fsguard report --html /tmp/fsguard-demo-report-2j5x0v1c.html /tmp/fsguard-demo-gs8ok674/with-fsguard/records": (
        "tests/test_demo.py::test_demo_before_and_after"  # the demo runs and prints it: check_report_paths
    ),
    ".venv/bin/python -m bench": "tests/test_bench.py::test_runner_writes_one_json",
    ".venv/bin/python bench/startup.py": "tests/test_bench.py::test_startup_alone",
    ".venv/bin/python -m tests.oracle_fuzz --n 10000": "tests/test_oracle_fuzz.py::test_a_bounded_sample_is_sound",
    ".venv/bin/python bench/calls.py": "tests/test_bench.py::test_calls_alone",
    ".venv/bin/python bench/decide.py": "tests/test_bench.py::test_decide_alone",
    ".venv/bin/python bench/scale.py": "tests/test_bench.py::test_scale_alone",
    ".venv/bin/python bench/yield_window.py": "tests/test_bench.py::test_yield_window_alone",
    ".venv/bin/python bench/storm.py": "tests/test_bench.py::test_storm_alone",
    ".venv/bin/python bench/storm_model.py --json bench/results/<file>.json": (
        "tests/test_measured.py::test_the_committed_storm_model_is_what_its_script_computes_from_the_committed_files"
    ),
    ".venv/bin/python bench/audit.py": "tests/test_report.py::test_bench_audit_quick_runs",
}

# Commands run here; each check gets the finished process.
Check = Callable[[subprocess.CompletedProcess[str]], None]


def _status_ok(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    pth = next(line for line in done.stdout.splitlines() if line.strip().startswith(".pth:"))
    assert pth.rstrip().endswith("site-packages/fsguard.pth"), pth
    assert "FSGUARD_SETTLE_S" in done.stdout and "filesystem:" in done.stdout


def _status_of_torchrun(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    assert "would patch: no" in done.stdout, done.stdout  # torchrun's agent is never patched


def _report_found(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, done.stdout + done.stderr  # 1: records found
    assert "fsguard report:" in done.stdout and "absorbed" in done.stdout


def _scan_found(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 1, done.stdout + done.stderr  # 1: races found
    assert "fsguard scan:" in done.stdout


def _scan_not_fixable(done: subprocess.CompletedProcess[str]) -> None:
    _scan_found(done)
    assert "not fixable" in done.stdout and "torch.save" in done.stdout


def _bench_ran(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


AUDIT = ROOT / "tests" / "data" / "audit"
RUN_HERE: dict[str, tuple[Check, dict[str, str]]] = {
    # command -> (check, what to prepare: "env:NAME" = a path under tests/data, "file:NAME" = one copied in)
    "fsguard status": (_status_ok, {}),
    'fsguard status --command "torchrun --nproc-per-node 8 train.py"': (_status_of_torchrun, {}),
    "fsguard report $FSGUARD_LOG": (_report_found, {"env:FSGUARD_LOG": "demo/records"}),
    "fsguard scan old-job.log": (_scan_found, {"file:old-job.log": "unguarded/replace.log"}),
    "fsguard scan staging-torch-save.log": (
        _scan_not_fixable,
        {"file:staging-torch-save.log": "unguarded/staging-torch-save.log"},
    ),
    # the benchmarks no other test runs, in their small form
    ".venv/bin/python bench/locks.py": (_bench_ran, {"args": "--quick"}),
    ".venv/bin/python bench/convoy.py": (_bench_ran, {"args": "--sizes 4 --trials 1"}),
}


def test_every_documented_command_is_run() -> None:
    shown = documented_commands()
    known = set(COVERED) | set(RUN_HERE)
    unrun = {command: where for command, where in shown.items() if command not in known}
    assert not unrun, f"commands shown in the docs that no test runs (add them to tests/test_docs.py): {unrun}"
    assert not known - set(shown), f"entries for commands no longer in the docs: {known - set(shown)}"


def test_covering_tests_exist() -> None:
    for command, node in COVERED.items():
        path, _, name = node.partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), (command, node)


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_documented_command_runs(command: str, bare_python: Path, tmp_path: Path) -> None:
    """The command as the docs show it, by bash, with the installed ``fsguard`` first on ``PATH`` (a fresh venv
    holding the wheel) and the repository's ``.venv`` for the benchmarks."""
    check, prepare = RUN_HERE[command]
    env = {"PATH": f"{bare_python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cwd = tmp_path
    line = command
    for key, value in prepare.items():
        kind, _, name = key.partition(":")
        if kind == "env":
            env[name] = str(AUDIT / value)
        elif kind == "file":
            shutil.copy(AUDIT / value, tmp_path / name)
        elif kind == "args":
            line = f"{command} {value} --json {tmp_path / 'out.json'}"
    if line.startswith(".venv/"):
        cwd = ROOT
        line = line.replace(".venv/bin/python", sys.executable, 1)  # this test run's interpreter
    done = subprocess.run(
        ["bash", "-c", line], env=clean_env(env), cwd=cwd, capture_output=True, text=True, timeout=240
    )
    check(done)


def test_a_record_is_one_flat_json_object_and_reads_back_the_same() -> None:
    """``Origin`` (who wrote it) is a part of ``Record`` in Python; on disk its fields stand beside the others,
    in ``FIELDS`` order, and the one parser puts them back."""
    from fsguard import records

    origin = records.Origin("n1", 42, 3, 1, 8, "torchrun", "1.0")
    record = records.Record("rename", "absorbed", "why", ["/a", "/b"], None, 0.5, None, 12.5, origin, {"x": 1})
    assert list(record.as_dict()) == list(records.FIELDS)
    assert json.loads(record.to_json())["rank"] == 3 and "origin" not in json.loads(record.to_json())
    assert records.parse_line(f"[rank3]: {record.to_line()}") == record
    assert records.parse_line(record.to_json()) == record
