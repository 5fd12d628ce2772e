"""Python tracebacks in job logs, read line by line. They hold several ranks interleaved, launcher prefixes, and the
failure summary of torchrun's elastic agent (``ChildFailedError``).

Each launcher-prefixed stream (``[rank3]:``, ``3:``, ``[1,3]<stderr>:``) has its own reader, so tracebacks
of several ranks interleaved line by line in one file come apart again. Lines without a prefix are one
stream: interleaved *unprefixed* output of several processes cannot be told apart by anyone.

torchrun's summary names each failed rank (``rank : 3 (local_rank: 3)``, ``host : n1``). After it comes the traceback it
read from the rank's error file (programs decorated with ``@record``). Those tracebacks take their rank and host from
there.

A reader gives up on a "traceback" as soon as a line fits none of a traceback's shapes. (A header quoted in a message; a
traceback cut by other output.) The line is then read afresh.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from . import prefixes

HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<function>.*))?$')
_EXCEPTION = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::(?P<message>.*))?$")
_CARETS = re.compile(r"[\^~ ]+$")
_SUMMARY_RANK = re.compile(r"rank\s*:\s*(\d+)")
_SUMMARY_HOST = re.compile(r"host\s*:\s*(\S+)")
_SUMMARY_ENTRY = re.compile(r"\[\d+\]:$")
_TORCHRUN_LOG = re.compile(r"[/\\]attempt_\d+[/\\](\d+)[/\\](?:stderr|stdout)\.log(?:\.\w+)?$")


@dataclass
class Frame:
    file: str
    line: int
    function: str
    source: str = ""
    caret: int = -1  # where the carets under the source line start (Python 3.11+), else -1

    def text(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass
class Traceback:
    """One complete traceback: its frames, the exception line, and who printed it."""

    frames: list[Frame]
    exception: str  # the type as printed, possibly dotted
    message: str
    rank: int | None
    host: str | None
    source: str
    lineno: int
    chained: bool = False  # another exception followed "during handling" of it (or "was the direct cause")
    handling: bool = False  # raised while the program handled an earlier exception


# What Python prints between the tracebacks of a chain: the one above was handled (or converted).
CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass
class _Open:
    rank: int | None
    host: str | None
    lineno: int
    frames: list[Frame] = field(default_factory=list)
    frame_indent: int = -1
    source_indent: int = -1
    state: str = "frame"  # frame: expecting a File line or the exception; source; caret
    handling: bool = False  # after a chain marker: raised while handling the traceback above

    def feed(self, body: str) -> str | tuple[str, str]:
        """``"more"``, ``"abandon"``, or ``(type, message)`` when the exception line ends it."""
        stripped = body.strip()
        indent = len(body) - len(body.lstrip())
        if stripped.startswith('File "'):
            match = _FRAME.match(stripped)
            if match is None:
                return "abandon"
            self.frames.append(Frame(match["file"], int(match["line"]), match["function"] or "?"))
            self.frame_indent, self.state = indent, "source"
            return "more"
        if self.frames and indent > self.frame_indent and stripped:
            if self.state == "source":
                self.frames[-1].source, self.source_indent, self.state = stripped, indent, "caret"
                return "more"
            if self.state == "caret" and _CARETS.match(stripped):
                self.frames[-1].caret, self.state = indent - self.source_indent, "frame"
                return "more"
            if stripped.startswith("[Previous line repeated") or stripped == "...":
                return "more"
        match = _EXCEPTION.match(stripped)
        if match is None or not (self.frames or indent == 0):
            return "abandon"
        return match["type"], (match["message"] or "").strip()


@dataclass
class _Summary:
    """torchrun's failure summary block, between its two ``=====`` rules."""

    rules: int = 0
    rank: int | None = None
    host: str | None = None

    def feed(self, stripped: str) -> bool:
        """Track the current entry; False once the block has ended."""
        if stripped.startswith("=====") and set(stripped) == {"="}:
            self.rules += 1
            return self.rules < 2
        if _SUMMARY_ENTRY.match(stripped):
            self.rank = self.host = None
        elif stripped.startswith("rank") and (match := _SUMMARY_RANK.match(stripped)):
            self.rank = int(match.group(1))
        elif stripped.startswith("host") and (match := _SUMMARY_HOST.match(stripped)):
            self.host = match.group(1)
        return True


class Reader:
    """The ``inputs.Sink`` that finds tracebacks; ``found`` is called with each complete one."""

    markers: tuple[bytes, ...] = (
        b"Traceback (most recent call last)",
        b"ChildFailedError",
        *(marker.encode() for marker in CHAIN_MARKERS),
    )

    def __init__(self, found: Callable[[Traceback], None]) -> None:
        self.found = found
        self._open: dict[str, _Open] = {}
        self._summaries: dict[str, _Summary] = {}
        # A complete traceback waits for its stream's next line: a chain marker there says it was handled.
        self._done: dict[str, Traceback] = {}
        self._handling: set[str] = set()  # streams whose next traceback was raised while handling another
        self._source = ""
        self._default_rank: int | None = None

    def begin(self, source: str) -> None:
        self._flush()
        self._open.clear()
        self._summaries.clear()
        self._handling.clear()
        self._source = source
        match = _TORCHRUN_LOG.search(source)  # torchrun --log-dir: .../attempt_0/<local rank>/stderr.log
        self._default_rank = int(match.group(1)) if match else None

    def busy(self) -> bool:
        return bool(self._open or self._summaries or self._done)

    def _flush(self) -> None:
        for done in self._done.values():
            self.found(done)
        self._done.clear()

    def _chain(self, stream: str, body: str) -> bool:
        """Whether the line after a complete traceback continues it. True when the line is a blank line or a chain
        marker (consumed). The traceback is reported once its next non-blank line says whether it was handled."""
        done = self._done.get(stream)
        stripped = body.strip()
        if done is None or not stripped:
            return done is not None
        del self._done[stream]
        if stripped in CHAIN_MARKERS:
            done.chained = True
            self._handling.add(stream)
        self.found(done)
        return done.chained

    def feed(self, line: bytes, lineno: int) -> None:
        text = line.decode("utf-8", "replace")
        if "\r" in text:  # progress bars: keep what a terminal would show last
            text = text.rstrip("\r")
            text = text[text.rfind("\r") + 1 :]
        stream, rank, body = prefixes.split(text)
        if rank is None:
            rank = self._default_rank
        if self._chain(stream, body):
            return
        current = self._open.get(stream)
        if current is not None:
            outcome = current.feed(body)
            if outcome == "more":
                return
            del self._open[stream]
            if isinstance(outcome, tuple):
                self._done[stream] = Traceback(
                    current.frames,
                    outcome[0],
                    outcome[1],
                    current.rank,
                    current.host,
                    self._source,
                    current.lineno,
                    handling=current.handling,
                )
                if "ChildFailedError" in body:
                    self._summaries[stream] = _Summary()
                return
        summary = self._summaries.get(stream)
        if HEADER in body:
            host = None
            if summary is not None and rank is None:
                rank, host = summary.rank, summary.host
            self._open[stream] = _Open(rank, host, lineno, handling=stream in self._handling)
            self._handling.discard(stream)
            return
        if body.strip():
            self._handling.discard(stream)  # a chain marker not followed by a traceback
        if summary is not None and not summary.feed(body.strip()):
            del self._summaries[stream]
        elif "ChildFailedError" in body:
            self._summaries[stream] = _Summary()

    def end(self) -> list[str]:
        self._flush()
        messages = []
        if self._open:
            where = ", ".join(f"line {t.lineno}" for t in self._open.values())
            messages.append(f"ends inside a traceback that starts at {where} (truncated?)")
        self._open.clear()
        self._summaries.clear()
        return messages
