"""``docs/measured.md`` quotes the committed result files (issue 47). No benchmark runs here: the files are read
as committed.

The mechanism is one kind of table row, usable in any section: ``| figure | value | `bench/results/<file>` |
`<key>` |``. The test reads ``<key>`` (``a/b/c``; a number indexes a list) in that file and checks that the value
shown (its first number, thousands separators dropped) is the file's, rounded to the digits shown. A section
listed in ``SOURCED`` must have such rows; every result file the page names must exist; and the storm model
(``bench/storm_model.py``) committed beside them must be what the script computes from its committed inputs.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest

from tests.support.env import ROOT

MEASURED = ROOT / "docs" / "measured.md"
RESULTS = ROOT / "bench" / "results"
# Sections whose figures are sourced rows (a section another change rewrites joins here with its rows).
SOURCED = {"Start-up and per call", "Metadata storm", "Serialized storm and scale model"}
# The committed model (bench/storm_model.py --json), recomputed here from its committed inputs.
MODEL = "2026-12-06-storm-model-66f4df8.json"
# A sourced row: | figure | value | `bench/results/<file>.json` | `key/path` |
ROW = re.compile(
    r"^\|(?P<figure>[^|]+)\|(?P<value>[^|]+)\|\s*`bench/results/(?P<file>[^`]+)`\s*\|\s*`(?P<key>[^`]+)`\s*\|$"
)
NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")
NAMED = re.compile(r"bench/results/([0-9A-Za-z_.{},-]+\.json)")


def sourced_rows() -> list[tuple[str, str, str, str, str]]:
    """(section, figure, value as shown, file, key) of every sourced row of ``docs/measured.md``."""
    rows, section = [], ""
    for line in MEASURED.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        found = ROW.match(line.strip())
        if found:
            rows.append((section, found["figure"].strip(), found["value"].strip(), found["file"], found["key"]))
    return rows


def value_at(data: Any, key: str) -> Any:
    """The value at ``key`` (``a/b/c``; a number indexes a list) in a result file's JSON."""
    for part in key.split("/"):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def shown(value: str) -> Decimal:
    """The number a table cell shows: the first number in it, thousands separators dropped."""
    found = NUMBER.search(value)
    assert found is not None, f"no number in {value!r}"
    return Decimal(found.group().replace(",", ""))


def matches(number: Decimal, found: float) -> bool:
    """Whether ``number`` is ``found`` rounded to the digits ``number`` shows."""
    digits = -number.as_tuple().exponent  # type: ignore[operator]
    return number == round(Decimal(repr(float(found))), int(digits))


def test_each_listed_section_has_sourced_rows() -> None:
    sections = {row[0] for row in sourced_rows()}
    assert sections >= SOURCED, SOURCED - sections


def test_matches_rounds_to_the_digits_shown() -> None:
    assert matches(Decimal("1.06"), 1.0602) and matches(Decimal("2,972".replace(",", "")), 2972)
    assert not matches(Decimal("1.05"), 1.0602) and not matches(Decimal("2972"), 2972.6)


@pytest.mark.parametrize("row", sourced_rows(), ids=lambda row: f"{row[3]}:{row[4]}")
def test_each_sourced_figure_is_the_result_files(row: tuple[str, str, str, str, str]) -> None:
    _, figure, value, file, key = row
    data = json.loads((RESULTS / file).read_text())
    found = value_at(data, key)
    assert isinstance(found, (int, float)) and not isinstance(found, bool), (figure, key, found)
    assert matches(shown(value), found), (figure, value, file, key, found)


def test_every_result_file_the_page_names_exists() -> None:
    named = set()
    for name in NAMED.findall(MEASURED.read_text()):
        if "{" in name:  # `2026-12-05-startup{,-py315}-61cc1cb.json`: each spelled out
            head, rest = name.split("{", 1)
            options, tail = rest.split("}", 1)
            named |= {head + option + tail for option in options.split(",")}
        else:
            named.add(name)
    missing = sorted(name for name in named if "*" not in name and not (RESULTS / name).exists())
    assert not missing, missing


def test_the_committed_storm_model_is_what_its_script_computes_from_the_committed_files() -> None:
    from bench import storm_model

    committed = json.loads((RESULTS / MODEL).read_text())
    assert committed == json.loads(json.dumps(storm_model.compute())), "rerun: python bench/storm_model.py --json"
    assert MODEL in MEASURED.read_text()
    for ranks in ("1000", "10000"):
        row = committed["model"][ranks]
        assert {"none", "serialize", "rank0"} <= set(row), row
