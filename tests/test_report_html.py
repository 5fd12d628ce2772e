"""``fsguard report --html`` (issue 27): the page's content against the records, bad input said in words, and
the page in a real headless Chromium (console, DOM, pixels, hover, load time of a 1,000-rank job's page)."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fsguard.audit.html import COLOURS
from fsguard.records import parse_line
from tests.conftest import ROOT
from tests.support import browser
from tests.support.cli import run_cli

DATA = ROOT / "tests" / "data" / "audit"
SYNTHETIC = DATA / "synthetic" / "records.jsonl"
NOTEMPTY = DATA / "guarded" / "notempty.log"
DEMO = DATA / "demo" / "records"


def fsguard(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(python, *args, env={"TZ": "UTC"}, timeout=240)


def cells(page: str) -> list[dict[str, Any]]:
    """The marks' records, as the page's script reads them."""
    match = re.search(r'<script type="application/json" id="cells">(.*?)</script>', page, re.DOTALL)
    assert match, "no cells script in the page"
    found: list[dict[str, Any]] = json.loads(match.group(1).replace("<\\/", "</"))
    return found


def records_of(directory: Path) -> list[Any]:
    found = []
    for path in sorted(directory.iterdir()):
        found += [r for r in map(parse_line, path.read_text().splitlines()) if r is not None]
    return found


def test_page_holds_the_records(fsguard_python: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = fsguard(fsguard_python, "report", "--html", str(out), str(SYNTHETIC), str(NOTEMPTY))
    assert done.returncode == 1, done.stderr
    text = fsguard(fsguard_python, "report", str(SYNTHETIC), str(NOTEMPTY))
    assert done.stdout == text.stdout + f"fsguard report: HTML report in {out}\n"  # the table, then the page
    page = out.read_text()
    # self-contained: nothing to fetch, and a policy that forbids fetching anything
    assert not re.search(r"<(?:link|img|iframe)\b|\bsrc=|url\(|@import", page)
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in page
    # in the order a person asks: summary, what was at risk, timeline, call sites
    order = [page.index(f'id="{name}"') for name in ("summary", "at-risk", "timeline", "sites")]
    assert order == sorted(order)
    risk = page[page.index('id="at-risk"') : page.index('id="timeline"')]
    assert "Data may have been lost: 4 hazards and conflicts" in risk
    hazard, *conflicts = re.findall(r"<tr class=\"d-(\w+)\">(.*?)</tr>", risk)
    assert hazard[0] == "hazard" and "/ckpt/staging-50" in hazard[1] and "/job/train.py:140 in cleanup" in hazard[1]
    assert "3 entries missing from /ckpt/checkpoint-50" in hazard[1]
    assert [c[0] for c in conflicts] == ["conflict"] * 3
    assert all("left in place: /tmp/races/g_notempty/published" in c[1] for c in conflicts)
    # every record is in one mark; lanes: the 10 processes (host, rank) of the inputs
    marks = cells(page)
    assert sum(c["total"] for c in marks) == 13
    assert len(re.findall(r'<rect class="m d-\w+"', page)) == len(marks)
    assert len(set(re.findall(r'data-lane="([^"]+)" data-host="([^"]+)"', page))) == 10
    worst = [c["s"] for c in marks if c["s"]["decision"] == "hazard"]
    assert worst and worst[0]["detail"] == {} and worst[0]["site"] == "/job/train.py:140 in cleanup"
    # the call-site table is the text report's: same groups, same order, same path patterns
    doc = json.loads(fsguard(fsguard_python, "report", "--json", str(SYNTHETIC), str(NOTEMPTY)).stdout)
    sites = page[page.index('id="sites"') :]
    at = [sites.index(f"<code>{g['site_text']}</code>") for g in doc["groups"]]
    assert at == sorted(at)
    for g in doc["groups"]:
        assert f"<code>{g['paths'][0]['pattern'].replace('<', '&lt;').replace('>', '&gt;')}</code>" in sites


def test_bad_input_gets_the_text_reports_words_and_status(fsguard_python: Path, tmp_path: Path) -> None:
    cut = tmp_path / "job.log.gz"
    cut.write_bytes(gzip.compress(NOTEMPTY.read_bytes() + os.urandom(4000).hex().encode())[:-40])
    quiet = tmp_path / "quiet.log"
    quiet.write_text("step 1 loss 0.5\nstep 2 loss 0.4\n")
    cases = {
        "missing": ([str(tmp_path / "missing.log")], 2, "cannot read: No such file or directory"),
        "truncated": ([str(cut)], 2, "truncated: the compressed stream ends early"),
        "no records": ([str(quiet)], 0, "No fsguard records in 1 input"),
    }
    for name, (inputs, status, words) in cases.items():
        out = tmp_path / f"{name}.html"
        text = fsguard(fsguard_python, "report", *inputs)
        done = fsguard(fsguard_python, "report", "--html", str(out), *inputs)
        assert (done.returncode, done.stderr) == (text.returncode, text.stderr) == (status, done.stderr), name
        assert done.stdout.startswith(text.stdout)
        page = out.read_text()
        assert words in page, (name, page)
        if status == 2:
            assert "exit status 2" in page and 'id="problems"' in page
    # the page itself cannot be written: said, status 2, nothing left behind
    done = fsguard(fsguard_python, "report", "--html", str(tmp_path / "no" / "dir.html"), str(SYNTHETIC))
    assert done.returncode == 2
    assert f"fsguard report: cannot write {tmp_path / 'no' / 'dir.html'}: No such file or directory" in done.stderr
    assert not any(p.name.startswith(".fsguard-report-") for p in tmp_path.iterdir())


def test_timeline_memory_is_bounded_by_lanes_and_bins() -> None:
    """Records in any order, any span: cells never exceed lanes x BINS, and every record is counted once."""
    import random

    from fsguard.audit import timeline
    from fsguard.records import Origin, Record

    rng = random.Random(27)
    line = timeline.Timeline()
    hosts, per_host, n = 300, 4, 30_000
    for i in range(n):  # one process's records after another's, as files are read: time goes back and forth
        rank = i * hosts * per_host // n
        at = 1796000000.0 + rng.random() * 3 * 86400 * (1 + rank % 3)
        decision = "hazard" if i % 5000 == 7 else "waited" if i % 700 == 3 else "absorbed"
        waited = float(1 + i % 13) if decision == "waited" else 0.0
        line.add(
            Record(
                "rename", decision, "why", ["/a", "/b"], None, waited, None, at, Origin(f"n{rank // per_host}", 0, rank)
            )
        )
    assert line.by_host and line.bins <= timeline.BINS
    assert len(line.cells) <= hosts * timeline.BINS
    assert sum(c.total for c in line.cells.values()) == n
    assert line.attention_total == len(line.attention) == 6
    assert [s.waited_s for s in line.longest_waits()] == sorted(
        (s.waited_s for s in line.longest_waits()), reverse=True
    )
    rows, kind = timeline.lanes(line)
    assert kind == "hosts" and len(rows) <= timeline.MAX_LANES and rows[0].label == "n0 .. n2"
    assert sum(c.total for row in rows for c in row.cells.values()) == n
    assert sum(c.total for c in line.cells.values()) == n  # drawing merged copies, not the timeline's cells


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = browser.find()
    if binary is None:
        pytest.skip("chromium not installed (scripts/test.sh installs it as root): cannot be installed here")
    return binary


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _pixel(chrome: browser.Chromium, x: float, y: float) -> tuple[int, int, int]:
    """The colour on screen at page coordinates (x, y), from a 1x1 screenshot decoded here."""
    _, _, rows = browser.png_pixels(chrome.screenshot({"x": int(x), "y": int(y), "width": 1, "height": 1}))
    return rows[0][0]


MARKS = """[...document.querySelectorAll('#timeline-svg rect.m')].map(m => {
  const r = m.getBoundingClientRect();
  return {x: r.x + scrollX + r.width / 2, y: r.y + scrollY + r.height / 2, i: +m.dataset.i, n: +m.dataset.n,
          decision: m.getAttribute('class').split(' d-')[1]};
})"""


@pytest.mark.timeout(240)
def test_in_chromium(chromium: str, fsguard_python: Path, tmp_path: Path) -> None:
    demo_page, hazard_page, big_page = tmp_path / "demo.html", tmp_path / "hazards.html", tmp_path / "big.html"
    assert fsguard(fsguard_python, "report", "--html", str(demo_page), str(DEMO)).returncode == 1
    assert fsguard(fsguard_python, "report", "--html", str(hazard_page), str(SYNTHETIC), str(NOTEMPTY)).returncode == 1
    from bench.audit import write_records  # a long job: 1,000 ranks on 125 hosts, 100,000 records

    write_records(tmp_path / "big", ranks=1000, records=100_000)
    started = time.perf_counter()
    assert fsguard(fsguard_python, "report", "--html", str(big_page), str(tmp_path / "big")).returncode == 1
    report_s = time.perf_counter() - started
    demo_records = records_of(DEMO)

    with browser.Chromium(chromium, width=1280, height=1000) as chrome:
        chrome.load(demo_page)
        assert chrome.errors == []
        # lanes: one per rank of the demo's records, marks: every record once, hazard section on the first screen
        lanes = chrome.evaluate("[...document.querySelectorAll('#timeline-svg g.lane')].map(g => g.dataset.lane)")
        assert lanes == [f"rank {r}" for r in sorted({r.origin.rank for r in demo_records})]
        marks = chrome.evaluate(MARKS)
        assert sum(m["n"] for m in marks) == len(demo_records) == 33
        risk = chrome.evaluate(
            "(() => { const r = document.getElementById('at-risk').getBoundingClientRect(); "
            "return [r.top, r.height, document.getElementById('at-risk').innerText]; })()"
        )
        assert 0 < risk[0] < 1000 and risk[1] > 0 and risk[2].startswith("No hazards or conflicts")
        shot = chrome.screenshot()
        (tmp_path / "demo.png").write_bytes(shot)
        if os.environ.get("FSGUARD_SCREENSHOT"):  # how docs/report-html.png is made
            shutil.copyfile(tmp_path / "demo.png", os.environ["FSGUARD_SCREENSHOT"])
        assert browser.png_pixels(shot)[:2] == (1280, 1000)
        # pixels: each sampled mark is drawn in its decision's colour where the DOM says it is
        for mark in marks[:: max(len(marks) // 6, 1)]:
            assert _pixel(chrome, mark["x"], mark["y"]) == _rgb(COLOURS[mark["decision"]]), mark
        # hovering over a mark shows its record: call site and paths
        sample = chrome.evaluate(f"JSON.parse(document.getElementById('cells').textContent)[{marks[0]['i']}].s")
        chrome.mouse("mouseMoved", marks[0]["x"], marks[0]["y"])
        tip = chrome.evaluate("[document.getElementById('tip').hidden, document.getElementById('tip').innerText]")
        assert tip[0] is False and sample["site"] in tip[1] and sample["args"][0] in tip[1]
        assert chrome.errors == []

        chrome.load(hazard_page)
        box = chrome.evaluate(
            "(() => { const r = document.getElementById('at-risk').getBoundingClientRect(); "
            "return [r.x + 3, r.y + r.height / 2, r.top]; })()"
        )
        assert box[2] < 1000  # on the first screen, above the timeline
        assert _pixel(chrome, box[0], box[1]) == _rgb(COLOURS["hazard"])  # its red border
        rows = chrome.evaluate("[...document.querySelectorAll('#at-risk tbody tr')].map(r => r.className)")
        assert rows == ["d-hazard", "d-conflict", "d-conflict", "d-conflict"]
        marks = chrome.evaluate(MARKS)
        hazard_marks = [m for m in marks if m["decision"] == "hazard"]
        assert len(hazard_marks) == 1 and _pixel(chrome, hazard_marks[0]["x"], hazard_marks[0]["y"]) == _rgb(
            COLOURS["hazard"]
        )
        chrome.mouse("mousePressed", hazard_marks[0]["x"], hazard_marks[0]["y"])
        chrome.mouse("mouseReleased", hazard_marks[0]["x"], hazard_marks[0]["y"])
        chrome.mouse("mouseMoved", 5, 5)  # clicked: the record stays shown
        tip = chrome.evaluate("document.getElementById('tip').innerText")
        assert "/job/train.py:140 in cleanup" in tip and "/ckpt/staging-50" in tip
        assert chrome.errors == []

        load_s = chrome.load(big_page)
        assert chrome.errors == []
        lanes = chrome.evaluate("document.querySelectorAll('#timeline-svg g.lane').length")
        total = chrome.evaluate(
            "[...document.querySelectorAll('#timeline-svg rect.m')].reduce((a, m) => a + +m.dataset.n, 0)"
        )
        assert (lanes, total) == (125, 100_000)
    size = big_page.stat().st_size / 1e6
    print(f"\n1,000 ranks x 100,000 records: report --html {report_s:.1f} s, page {size:.1f} MB, load {load_s:.2f} s")
    assert load_s < 30  # loose: the target (under 3 s) is measured and reported, not asserted under load
