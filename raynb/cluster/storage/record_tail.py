"""A run's record with its newest reports and output only, read from the files' ends.

What the head hands a client (``get_run``, ``attach_run``, the dashboard) is what that
client shows: the newest reports for a plot, the last lines of output. A long run's
``result.json`` (hundreds of thousands of rows) and ``output.log`` (millions of lines)
are read backwards from their end, block by block, until that many are found, so the
cost of a record does not grow with the run's age. ``rundir.read_run_dir`` reads the
whole ``result.json`` where a caller needs every row (``Result.from_path``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .run_logs import OUTPUT_FILE

_BLOCK = 1 << 16
# The most of a file's end one record reads (bytes), whatever the counts asked.
MAX_TAIL_BYTES = 64 << 20


def tail_lines(path, limit: int, max_bytes: int = MAX_TAIL_BYTES) -> tuple[list[bytes], bool]:
    """The last ``limit`` complete lines of file ``path`` (without their newlines), read
    from its end; a last line not ended by a newline (being written now) is left out.

    Returns:
        ``(lines, more)``: oldest first, and whether the file holds older lines (or the
        scan stopped at ``max_bytes``). No file: ``([], False)``.

    Raises:
        OSError: the file exists but cannot be read.
    """
    if limit <= 0:
        return [], False
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], False
    with f:
        end = pos = f.seek(0, os.SEEK_END)
        found: list[bytes] = []
        carry = b""
        partial = True   # the bytes after the last newline are not a line yet
        while pos > 0 and len(found) < limit and end - pos < max_bytes:
            step = min(_BLOCK, pos, max_bytes - (end - pos))
            pos -= step
            f.seek(pos)
            pieces = (f.read(step) + carry).split(b"\n")
            carry = pieces.pop(0)
            if partial and pieces:
                pieces.pop()   # after the last newline: b"" or a torn line
                partial = False
            for line in reversed(pieces):
                if len(found) >= limit:
                    break
                found.append(line)
        if pos == 0 and len(found) < limit and carry and not partial:
            found.append(carry)
            carry = b""
        more = pos > 0 or bool(carry)
    found.reverse()
    return found, more


def tail_reports(run_path, limit: int) -> tuple[list[dict], bool]:
    """The newest ``limit`` rows of a run's ``result.json``, oldest first (a torn or
    unreadable line is skipped), and whether older rows were left unread."""
    rows = []
    lines, more = tail_lines(Path(run_path) / "result.json", limit)
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows, more


def tail_output(run_path, limit: int) -> list[str]:
    """The last ``limit`` lines of a run's ``output.log``, as tagged there; [] when the
    file cannot be read."""
    try:
        lines, _ = tail_lines(Path(run_path) / OUTPUT_FILE, limit)
    except OSError:
        return []
    return [line.decode("utf-8", errors="replace") for line in lines]
