"""A one-shot timer that one thread arms and another waits on, with no wake-up to arm it.

A worker's main thread lends its sockets to the I/O thread only once a task has run
for a while (``worker.py``). Telling the I/O thread "take them in 20 ms" through a
pipe or a condition would wake it at once: on a VM a wake-up costs the waker tens of
microseconds (an inter-processor interrupt), the very cost a short task avoids. A
Linux ``timerfd`` (timerfd_create(2)) is armed and disarmed by a system call that
wakes nobody; the waiting thread wakes when it fires, and not at all when it is
disarmed first.

Elsewhere (no timerfd) :meth:`WakeTimer.arm` makes the file descriptor readable at
once: the hand-over is not deferred, which costs a wake-up but is still correct.
"""
from __future__ import annotations

import ctypes
import os
import sys

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0o2000000)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own C library: find_library would run ldconfig in a subprocess.
        libc = ctypes.CDLL(None, use_errno=True)
        return libc if hasattr(libc, "timerfd_create") else None
    except (OSError, AttributeError):
        return None


class WakeTimer:
    """One-shot timer readable through :meth:`fileno` (select, poll, ``zmq.Poller``).

    ``arm(seconds)`` and ``disarm()`` may be called from any thread; the thread that
    waits on ``fileno()`` calls :meth:`clear` after it woke. ``deferred`` is False
    where the platform has no timerfd (the fd is then readable as soon as armed).
    """

    def __init__(self) -> None:
        self._libc = _libc()
        self.deferred = self._libc is not None
        if self.deferred:
            fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"timerfd_create: {os.strerror(err)}")
            self._fd, self._write_fd = fd, -1
            self._spec = _Itimerspec()
        else:
            self._fd, self._write_fd = os.pipe()
            os.set_blocking(self._fd, False)
            os.set_blocking(self._write_fd, False)

    def fileno(self) -> int:
        return self._fd

    def arm(self, seconds: float) -> None:
        """Make :meth:`fileno` readable ``seconds`` (> 0) from now; re-arming moves it."""
        if not self.deferred:
            try:
                os.write(self._write_fd, b"!")
            except BlockingIOError:  # already readable
                pass
            return
        ns = max(1000, int(seconds * 1e9))  # an all-zero it_value would disarm instead
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(ns, 1_000_000_000)
        self._settime()

    def disarm(self) -> None:
        """Cancel the timer; one that already fired reads as not fired (the kernel resets
        its count), so a waiter woken by it finds nothing in :meth:`clear`."""
        if self.deferred:
            self._spec.it_value.tv_sec = self._spec.it_value.tv_nsec = 0
            self._settime()
        else:
            self.clear()

    def clear(self) -> bool:
        """Consume a firing; True when the timer had fired since it was last armed."""
        try:
            return bool(os.read(self._fd, 8 if self.deferred else 64))
        except BlockingIOError:
            return False

    def close(self) -> None:
        for fd in (self._fd, self._write_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._write_fd = -1

    def _settime(self) -> None:
        if self._libc.timerfd_settime(self._fd, 0, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
