"""Reading the inputs of ``report`` and ``scan``: files, directories of them, compressed logs and ``-``.

Why it is built this way:

* **Constant memory.** An input is read in blocks of about 1 MiB, cut at line ends; a line longer than
  ``MAX_LINE`` is cut into pieces instead of being held whole (a progress bar that never prints a newline
  must not fill memory).
* **Speed on logs with few matches.** A consumer (a ``Sink``) names the byte strings that can start
  something it cares about (``markers``). While it is idle, a block without any of them is skipped by a
  substring search, never split into lines or decoded; with a hit, lines are handed over from the hit's
  line on. A consumer in the middle of something (a traceback) is ``busy`` and sees every line.
* **One bad input never stops the others.** Every problem becomes a ``Problem`` naming the input; what
  was read before it (the start of a truncated ``.gz``) is still used.

Compression is recognised by its magic bytes, not the file name, so ``zcat``-less pipes and oddly named
files work: gzip, bzip2 and xz. An input whose first block holds NUL bytes is binary: named and skipped
(quietly noted, not an error, when it was only found by walking a directory).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

BLOCK = 1 << 20
MAX_LINE = 8 << 20
STDIN = "-"


class InputError(Exception):
    """Reading one input failed; the message says how, the caller adds which input."""


@dataclass(frozen=True)
class Problem:
    """Something to tell the user about one input. ``error``: it makes the exit status 2."""

    source: str
    message: str
    error: bool = True

    def text(self) -> str:
        return f"{self.source}: {self.message}"


class Sink(Protocol):
    """A consumer of lines: ``report``'s record collector, ``scan``'s traceback reader."""

    markers: tuple[bytes, ...]

    def begin(self, source: str) -> None:
        """A new input starts: per-input state is reset."""

    def busy(self) -> bool:
        """True while the sink must see every line, as inside a traceback."""

    def feed(self, line: bytes, lineno: int) -> None:
        """One line, without its newline."""

    def end(self) -> list[str]:
        """The input ended: flush per-input state; return messages about it being incomplete, if any."""


def _describe(error: OSError) -> str:
    return error.strerror or str(error)


def walk(paths: Sequence[str], report: Callable[[Problem], None]) -> Iterator[tuple[str, bool]]:
    """Every input to read, as ``(path, found_by_walking)``; directories are walked recursively in name order."""
    for path in paths:
        if path == STDIN:
            yield path, False
            continue
        try:
            isdir = os.path.isdir(path)
            os.stat(path)
        except OSError as error:
            dangling = os.path.islink(path) and error.errno == errno.ENOENT
            why = "dangling symbolic link" if dangling else _describe(error)
            report(Problem(path, f"cannot read: {why}"))
            continue
        if not isdir:
            yield path, False
            continue
        found = False

        def unlisted(error: OSError, top: str = path) -> None:
            report(Problem(error.filename or top, f"cannot list: {_describe(error)}"))

        for top, dirs, files in os.walk(path, onerror=unlisted):
            dirs.sort()
            for name in sorted(files):
                found = True
                yield os.path.join(top, name), True
        if not found:
            report(Problem(path, "directory holds no files", error=False))


def _open(path: str) -> IO[bytes]:
    if path == STDIN:
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as error:
        raise InputError(f"cannot read: {_describe(error)}") from error


def _reader(raw: IO[bytes]) -> Callable[[int], bytes]:
    """How to read ``raw``: directly, or decompressing when its magic bytes say so.

    Decompressed streams are read with ``read1``, one compressed chunk at a time. So a truncated stream loses only its
    last chunk; ``read(n)`` would drop everything it had decoded towards ``n``.
    """
    peek = getattr(raw, "peek", None)
    head = peek(6)[:6] if peek is not None else b""
    if head[:2] == b"\x1f\x8b":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb").read1
    if head[:3] == b"BZh":
        import bz2

        return bz2.BZ2File(raw, mode="rb").read1
    if head == b"\xfd7zXZ\x00":
        import lzma

        return lzma.LZMAFile(raw, mode="rb").read1
    return raw.read


def _read_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean a damaged or unreadable input (the decompressors' only where imported)."""
    errors: list[type[BaseException]] = [OSError, EOFError]
    for module, name in (("zlib", "error"), ("lzma", "LZMAError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


def blocks(path: str) -> Iterator[bytes]:
    """The input's bytes in blocks that end at a line end. Only a cut over-long line or a last line ends elsewhere.

    Raises ``InputError`` for an unreadable, binary or damaged input, after yielding what came before.
    """
    raw = _open(path)
    try:
        read = _reader(raw)
        carry = b""
        first = True
        while True:
            try:
                chunk = read(BLOCK)
            except _read_errors() as error:
                if carry:
                    yield carry
                raise InputError(_damaged(error)) from error
            if first:
                first = False
                if b"\x00" in chunk:
                    raise InputError("binary file (NUL bytes in its first block), skipped")
            if not chunk:
                if carry:
                    yield carry
                return
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry += chunk
                if len(carry) >= MAX_LINE:
                    yield carry
                    carry = b""
                continue
            yield carry + chunk[: cut + 1]
            carry = chunk[cut + 1 :]
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


def _damaged(error: BaseException) -> str:
    if isinstance(error, EOFError):
        return "truncated: the compressed stream ends early; what came before was read"
    if isinstance(error, OSError) and not type(error).__module__.startswith(("gzip", "zlib")) and error.errno:
        return f"read failed: {_describe(error)}; what came before was read"
    return f"damaged compressed data ({error}); what came before was read"


def feed(chunks: Iterator[bytes], sink: Sink) -> None:
    """Hand ``sink`` every line that matters. Idle: lines from a marker on; busy: every line."""
    markers = sink.markers
    lineno = 1
    for block in chunks:
        pos, size = 0, len(block)
        # each marker's next occurrence at or after pos, -1 when none is left in this block: a block is searched
        # once per marker and hit, never again from every line (a marker absent from a block of records)
        upcoming = [block.find(marker) for marker in markers]
        while pos < size:
            if not sink.busy():
                hit = -1
                for i, at in enumerate(upcoming):
                    if 0 <= at < pos:
                        at = upcoming[i] = block.find(markers[i], pos)
                    if at >= 0 and (hit < 0 or at < hit):
                        hit = at
                if hit < 0:
                    lineno += block.count(b"\n", pos)
                    break
                start = block.rfind(b"\n", pos, hit) + 1
                if start > pos:
                    lineno += block.count(b"\n", pos, start)
                    pos = start
            end = block.find(b"\n", pos)
            if end < 0:
                end = size
            sink.feed(block[pos:end], lineno)
            lineno += 1
            pos = end + 1


def process(paths: Sequence[str], sink: Sink, report: Callable[[Problem], None]) -> int:
    """Read every input through ``sink``, reporting problems; return how many were read."""
    read = 0
    for path, walked in walk(paths, report):
        name = "<stdin>" if path == STDIN else path
        sink.begin(name)
        try:
            feed(blocks(path), sink)
            read += 1
        except InputError as error:
            binary = str(error).startswith("binary")
            report(Problem(name, str(error), error=not (binary and walked)))
        for message in sink.end():
            report(Problem(name, message))
    return read
