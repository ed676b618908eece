"""Every rank's output as the run directory keeps it: ``output.log``.

One file for all ranks, in the order the head received the lines, each line tagged
with its rank and, for stderr, its stream::

    (rank 0) epoch 1 done
    (rank 2, stderr) UserWarning: ...

One file keeps the ranks' interleaving (what "all ranks" shows); one rank's output is
that file filtered. Nothing is dropped: the file grows with the run, bounded only by
the disk, and a resumed run appends to it. The head writes it (``RunDirectory``);
``Result.logs(rank=...)`` and the dashboard read it here, with no cluster needed.
"""
from __future__ import annotations

import re
from pathlib import Path

OUTPUT_FILE = "output.log"
STREAMS = ("stdout", "stderr")
# A tail read scans at most this much of the file's end (bytes): a rank silent for the
# last 32 MiB of a chatty run shows nothing there, its full output is still read whole.
TAIL_SCAN_BYTES = 32 << 20
_BLOCK = 1 << 16
_TAG = re.compile(r"\(rank (\d+)(, stderr)?\) ?")


def tag_lines(rank: int, text: str, stream: str | None = "stdout") -> str:
    """``text`` as ``output.log`` lines: each line tagged ``(rank N)``, or
    ``(rank N, stderr)`` for stderr, and ended with a newline."""
    tag = f"(rank {rank}, stderr) " if stream == "stderr" else f"(rank {rank}) "
    return "".join(f"{tag}{line}\n" for line in text.splitlines())


def parse_line(line: str) -> tuple[int | None, str, str]:
    """(rank, stream, text) of one ``output.log`` line; rank None for an untagged line."""
    m = _TAG.match(line)
    if m is None:
        return None, "stdout", line
    return int(m.group(1)), "stderr" if m.group(2) else "stdout", line[m.end():]


def check_selection(rank, stream, world_size: int | None = None) -> None:
    """Raise ValueError for a rank or stream that selects nothing a run can have.

    Args:
        rank: None (every rank) or a rank number, below ``world_size`` when known.
        stream: None (both), ``"stdout"`` or ``"stderr"``.
    """
    if rank is not None:
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"rank={rank!r}: give a rank number (0, 1, ...), or None for every rank")
        if world_size and rank >= world_size:
            raise ValueError(f"rank={rank}: this run has {world_size} rank(s), 0-{world_size - 1}")
    if stream is not None and stream not in STREAMS:
        raise ValueError(f"stream={stream!r}: use 'stdout', 'stderr', or None for both")


def _keep(parsed: tuple[int | None, str, str], rank, stream) -> bool:
    r, s, _ = parsed
    return (rank is None or r == rank) and (stream is None or s == stream)


def read_output(run_path, rank: int | None = None, stream: str | None = None) -> str:
    """The full output of a run from its directory, as text.

    Args:
        run_path: the run directory.
        rank: None for every rank (lines keep their ``(rank N)`` tags), else that
            rank's lines without the tag, as it printed them.
        stream: None for both streams, ``"stdout"`` or ``"stderr"``.

    Returns:
        The selected lines, each ended by a newline; ``""`` when there are none (a
        run that printed nothing has no ``output.log``).

    Raises:
        FileNotFoundError: ``run_path`` is not a directory here (a remote head's run
            directory is on its machine, or on a file system both mount).
        ValueError: a bad ``rank`` or ``stream`` (see :func:`check_selection`).
    """
    check_selection(rank, stream)
    p = Path(run_path).expanduser()
    if not p.is_dir():
        raise FileNotFoundError(f"{run_path}: no such run directory on this machine; the output of "
                                f"every rank is in its {OUTPUT_FILE}")
    try:
        f = open(p / OUTPUT_FILE, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    with f:
        if rank is None and stream is None:
            return f.read()
        out = []
        for line in f:
            parsed = parse_line(line.rstrip("\n"))
            if _keep(parsed, rank, stream):
                out.append((line if rank is None else parsed[2] + "\n"))
        return "".join(out)


def tail_output(run_path, rank: int | None = None, stream: str | None = None, lines: int = 200,
                max_bytes: int = TAIL_SCAN_BYTES) -> tuple[list[tuple[int | None, str, str]], bool]:
    """The last ``lines`` selected lines of a run's ``output.log``, read from its end.

    Returns:
        ``(entries, more)``: entries ``(rank, stream, text)``, oldest first, and whether
        older output may exist beyond them (the scan stopped before the file's start).
        No file: ``([], False)``.

    Raises:
        ValueError: a bad ``rank``, ``stream`` or ``lines``.
    """
    check_selection(rank, stream)
    if not isinstance(lines, int) or isinstance(lines, bool) or lines < 1:
        raise ValueError(f"lines={lines!r}: give a positive number of lines")
    try:
        f = open(Path(run_path).expanduser() / OUTPUT_FILE, "rb")
    except OSError:
        return [], False
    found: list[tuple[int | None, str, str]] = []
    left = False          # lines were left unread when the tail was full
    with f:
        end = pos = f.seek(0, 2)
        carry = b""       # the start of a line whose beginning is in an earlier block
        partial = True    # carry still ends in what follows the last newline (skipped)
        while pos > 0 and len(found) < lines and end - pos < max_bytes:
            step = min(_BLOCK, pos, max_bytes - (end - pos))
            pos -= step
            f.seek(pos)
            pieces = (f.read(step) + carry).split(b"\n")
            carry = pieces.pop(0)
            if partial and pieces:
                pieces.pop()  # after the last newline: "" or a line being written now
                partial = False
            left = _collect(reversed(pieces), found, lines, rank, stream)
        if pos == 0 and not partial and not left:
            left = _collect([carry], found, lines, rank, stream)
        more = left or pos > 0
    found.reverse()
    return found, more


def _collect(raw_lines, found: list, limit: int, rank, stream) -> bool:
    """Add the selected lines of ``raw_lines`` (newest first) to ``found`` up to ``limit``;
    True when it stopped with lines left over."""
    for raw in raw_lines:
        if len(found) >= limit:
            return True
        parsed = parse_line(raw.decode("utf-8", errors="replace"))
        if _keep(parsed, rank, stream):
            found.append(parsed)
    return False
