"""A trial's rank-0 output, relayed to the driver's stdout/stderr with the trial's id."""

from __future__ import annotations

import sys


def relay_output(trial_id: str, event: dict) -> None:
    """Write an ``output`` event's text, each line prefixed ``(<trial_id>)``, to the stream
    it came from."""
    text = event.get("text", "")
    if not text:
        return
    stream = sys.stderr if event.get("stream") == "stderr" else sys.stdout
    stream.write("".join(f"({trial_id}) {line}" for line in text.splitlines(True)))
    if not text.endswith("\n"):
        stream.write("\n")
    stream.flush()
