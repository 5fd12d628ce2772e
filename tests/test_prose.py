"""Prose you can skim (issue 49): every docstring in ``fsguard/`` opens with one sentence of at most 15 words
saying what the thing does, and its sentences stay short (90th percentile at most 28 words, the anchors'
range: wrapt, filelock, coverage.py). The why goes in a comment naming its issue or commit; cases go in tables.

Run as a script for the figures: ``.venv/bin/python tests/test_prose.py [DIR]``.
"""

from __future__ import annotations

import ast
import re
import statistics
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "fsguard"
FIRST_WORDS = 15  # the opening sentence: what the thing does
P90_WORDS = 28  # the top of the anchors' 90th percentiles (wrapt, filelock, coverage.py: 18-28)

# A sentence ends at . ! or ? before a space and a capital, a backquote, a bracket or a quote.
_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'*:])")
# A line that starts an item of its own: a bullet, a numbered item, a table row; a table's rule is no prose.
_ITEM = re.compile(r"^\s*(?:[-*] |\d+\. |\|)")
_RULE = re.compile(r"^\s*[=+|-][=+|\- ]*$")


def sentences(doc: str) -> list[str]:
    """The sentences of a docstring; each list item or table row counts on its own."""
    units: list[list[str]] = []
    for paragraph in re.split(r"\n\s*\n", doc):
        lines = paragraph.splitlines()
        table = any(_RULE.match(line) for line in lines)
        units.append([])
        for line in lines:
            if _RULE.match(line):
                continue
            if table or _ITEM.match(line):
                units.append([])
            units[-1].append(line)
    found = []
    for unit in units:
        text = " ".join(" ".join(unit).split())
        found += [s for s in _END.split(text) if s]
    return found


def docstrings(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """``(where, docstring)`` of every module, class and function under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 1)} {getattr(node, 'name', '')}"
                    found.append((where.rstrip(), doc))
    return found


def long_openings(root: Path = PACKAGE) -> list[str]:
    """Where a docstring's first sentence runs over ``FIRST_WORDS`` words."""
    return [
        f"{where}: {len(first.split())} words: {first}"
        for where, doc in docstrings(root)
        for first in sentences(doc)[:1]
        if len(first.split()) > FIRST_WORDS
    ]


def lengths(root: Path = PACKAGE) -> list[int]:
    """The word count of every docstring sentence under ``root``, sorted."""
    return sorted(len(s.split()) for _, doc in docstrings(root) for s in sentences(doc))


def p90(counts: list[int]) -> float:
    return statistics.quantiles(counts, n=10, method="inclusive")[-1]


def test_every_docstring_opens_with_a_short_sentence() -> None:
    assert long_openings() == []


def test_docstring_sentences_stay_short() -> None:
    counts = lengths()
    assert len(counts) > 500, "the measure found too few docstrings to mean anything"
    assert p90(counts) <= P90_WORDS, f"90th percentile {p90(counts)} words (median {statistics.median(counts)})"


def test_a_long_opening_and_long_sentences_are_flagged(tmp_path: Path) -> None:
    package = tmp_path / "fsguard"
    package.mkdir()
    long = "Word " + " ".join(["word"] * 29) + "."
    (package / "bad.py").write_text(
        f'"""{long}"""\n\n\ndef short() -> None:\n    """Do one thing. {long}"""\n', encoding="utf-8"
    )
    assert [line.split(":")[0] for line in long_openings(package)] == ["fsguard/bad.py"]
    assert p90(lengths(package)) > P90_WORDS


def test_items_and_sentences_are_told_apart() -> None:
    doc = "Do one thing. Then ``another``.\n\n- a case\n- another case\n\n===== ====\nrow   cell\nrow2  cell\n===== ====\n"
    assert sentences(doc) == [
        "Do one thing.",
        "Then ``another``.",
        "- a case",
        "- another case",
        "row cell",
        "row2 cell",
    ]


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PACKAGE
    counts = lengths(root)
    print(
        f"{root.name}: {len(docstrings(root))} docstrings, {len(counts)} sentences, "
        f"median {statistics.median(counts)} words, p90 {p90(counts):.0f}, "
        f"{len(long_openings(root))} opening sentences over {FIRST_WORDS} words"
    )
