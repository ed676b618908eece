"""The process that makes a head's spare run directories (``spare_files``).

Run as ``python -I -S spare_maker.py ROOT READY_FD USED_FD COUNT AHEAD`` by the head,
at the lowest CPU priority (``SCHED_IDLE``): it makes batches in ``ROOT``, each a
directory ``<k>`` of COUNT empty directories ``0..COUNT-1`` (0700), and writes
``"<k> <count>\\n"`` on READY_FD once a batch is whole. It keeps AHEAD batches ready;
the head writes ``"<k>\\n"`` on USED_FD when it has taken a batch's last directory, and
the empty batch is removed and a new one made. When USED_FD reaches its end (the head
stopped, or died), ROOT is removed and the process exits.

Standard library only, and nothing of raynb imported: it starts in a few ms. It holds
no lock the head waits on (no rename; the head takes directories only from whole
batches). Its priority does not make its system calls preemptible (the kernel may not
be): what keeps it out of the head's way is that each costs little (``spare_files``).
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time

# After the disk refused a batch (full, read-only), the next try waits this long (s).
RETRY_AFTER_S = 5.0


def _lowest_priority() -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass


def _make_batch(root: str, k: int, count: int) -> None:
    batch = os.path.join(root, str(k))
    os.mkdir(batch, 0o700)
    for i in range(count):
        os.mkdir(os.path.join(batch, str(i)), 0o700)


def serve(root: str, ready_fd: int, used_fd: int, count: int, ahead: int) -> None:
    """Make batches until ``used_fd`` ends (see the module's doc)."""
    k = out = 0  # the next batch's number; batches announced and not used up yet
    retry_at = 0.0
    pending = b""
    while True:
        now = time.monotonic()
        short = out < ahead and retry_at <= now
        # Between batches, look for the head's word without waiting (its end, above all).
        wait = 0 if short else (retry_at - now if out < ahead else None)
        if select.select([used_fd], [], [], wait)[0]:
            data = os.read(used_fd, 4096)
            if not data:
                return  # the head is gone
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                out -= 1
                shutil.rmtree(os.path.join(root, str(int(line))), ignore_errors=True)
            continue
        if not short:
            continue  # a retry is due
        try:
            _make_batch(root, k, count)
        except OSError:  # a full disk: try again later (the head makes its directories meanwhile)
            shutil.rmtree(os.path.join(root, str(k)), ignore_errors=True)
            retry_at = time.monotonic() + RETRY_AFTER_S
            continue
        os.write(ready_fd, f"{k} {count}\n".encode())
        k, out = k + 1, out + 1


def main(argv: list[str]) -> int:
    root, ready_fd, used_fd, count, ahead = argv
    os.umask(0o077)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # still remove ROOT
    _lowest_priority()
    try:
        serve(root, int(ready_fd), int(used_fd), int(count), int(ahead))
    except (BrokenPipeError, KeyboardInterrupt):
        pass  # the head is gone
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
