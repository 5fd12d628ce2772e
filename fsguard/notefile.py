"""A file of notes read backwards from its end, for a path's newest note. ``fsguard.journal``'s files.

A note is ``<time>[@<rank>] <absolute path>\\0``, appended. The newest note naming a path is most often among the last
few, so the file is read from its end in growing chunks.
"""

from __future__ import annotations

import os

CHUNK = 1 << 16  # the largest chunk read at once
FIRST_CHUNK = 1 << 9  # the first chunk: a note is about 80 bytes


def newest_note(fd: int, needle: bytes, chunks: int | None, size: int = -1) -> tuple[bytes, bytes] | None:
    """The newest note naming ``needle``'s path in the file ``fd``: (time, rank), as written. ``needle`` is
    ``b" <path>\\0"``. None where no note does within ``chunks`` chunks of its end (``chunks`` None: the whole file;
    ``size``: its size, -1: read it here). Read backwards in growing chunks."""
    end = os.fstat(fd).st_size if size < 0 else size
    chunk = FIRST_CHUNK  # then growing: the newest making is most often among the last few notes
    tail = b""  # the start of a chunk, up to its first note's end: that note began in the chunk before
    read = 0
    while chunks is None or read < chunks:
        if end <= 0:
            return None
        read += 1
        start = max(0, end - chunk)
        chunk = min(4 * chunk, CHUNK)
        data = os.pread(fd, end - start, start) + tail
        cut = data.find(b"\0") + 1 if start else 0
        tail, data, end = data[:cut], data[cut:], start
        at = len(data)
        while True:
            at = data.rfind(needle, 0, at)
            if at < 0:
                break
            when, _, rank = data[data.rfind(b"\0", 0, at) + 1 : at].partition(b"@")
            if not when.replace(b".", b"", 1).isdigit() or (rank and not rank.isdigit()):
                continue  # the needle inside a longer path
            return when, rank
    return None
