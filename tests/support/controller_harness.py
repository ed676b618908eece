"""A run controller driven by hand, for tests: recording fakes of its effects (the head)
and its run store, a clock advanced by hand, and a :class:`Harness` that makes real ``Run``
objects (with a real ``RunDirectory``) in each state. Used by the controller's own tests
(``tests/cluster/head/test_run_controller.py``) and by those of what drives it (elastic
resizes, rank replacement, Tune's stop)."""

from __future__ import annotations

from raynb.cluster.head.controller import RunController
from raynb.cluster.head.run import Run
from raynb.cluster.storage.rundir import RunDirectory


# -- fakes ------------------------------------------------------------------------------
class Clock:
    """``time.monotonic`` for the controller, moved by the test."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeEffects:
    """The head: records every call; ``kill_ok`` says which ranks ``kill_rank`` can kill."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.events: list[dict] = []
        self.done: list[dict] = []  # run.done_content() at each run_ended
        self.kill_ok = lambda rank: True

    def cancel_rank(self, run, rank):
        self.calls.append(("cancel_rank", rank))

    def kill_rank(self, run, rank):
        self.calls.append(("kill_rank", rank))
        return self.kill_ok(rank)

    def release(self, run):
        self.calls.append(("release",))

    def requeue(self, run):
        self.calls.append(("requeue",))

    def emit(self, run, event):
        self.calls.append(("emit", event.get("kind")))
        self.events.append(event)

    def run_ended(self, run):
        self.calls.append(("run_ended",))
        self.done.append(run.done_content())

    def named(self, name: str) -> list[tuple]:
        return [c for c in self.calls if c[0] == name]

    def ranks(self, name: str) -> list[int]:
        return [c[1] for c in self.calls if c[0] == name]

    def notes(self) -> list[str]:
        return [e["text"] for e in self.events if e.get("kind") == "note"]


class FakeStore:
    """The run store: records commits, state writes and run ends (with the summary then)."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.summaries: list[dict] = []

    def commit_checkpoints(self, run, run_ended=False):
        self.calls.append(("commit_checkpoints", run_ended))

    def write_state(self, run):
        self.calls.append(("write_state", run.state, run.attempt))

    def uploading(self, run):
        return False  # no storage URI: nothing to wait for

    def run_ended(self, run):
        self.calls.append(("run_ended", run.state))
        self.summaries.append(run.summary())


class FakeCheckpoints:
    """A run's ``CheckpointStore``: ``latest`` is None or ``{"name": ...}``."""

    def __init__(self, latest: dict | None = None):
        self.latest = latest
        self.discarded = 0

    def discard_staging(self):
        self.discarded += 1

    def latest_path(self):
        return f"/ckpt/{self.latest['name']}" if self.latest else None

    def records(self):
        return [{"index": 0, **self.latest, "metrics": {}}] if self.latest else []


# -- helpers ----------------------------------------------------------------------------
class Harness:
    def __init__(self, tmp_path, failure_policy=None):
        self.tmp_path = tmp_path
        self.effects, self.store, self.clock = FakeEffects(), FakeStore(), Clock()
        kw = {} if failure_policy is None else {"failure_policy": failure_policy}
        self.ctl = RunController(self.effects, self.store, clock=self.clock, **kw)
        self._n = 0

    def run(self, world_size: int = 3, max_failures: int = 0, latest: dict | None = None, **spec) -> Run:
        self._n += 1
        name = f"TorchTrainer_test_{self._n}"
        return Run(
            run_id=f"run{self._n}",
            name=name,
            client=b"client:test",
            spec={"num_workers": world_size, "max_failures": max_failures, **spec},
            payload=[b"fn"],
            rundir=RunDirectory(str(self.tmp_path), name),
            store=FakeCheckpoints(latest),
        )

    def running(self, **kw) -> Run:
        run = self.run(**kw)
        self.ctl.placed(run, [f"local-w{r}" for r in range(run.world_size)])
        return run

    def failing(self, **kw) -> Run:
        """RUNNING, then rank 1 raised (at clock 100): FAILING, ranks 0 and 2 being cancelled."""
        run = self.running(**kw)
        self.ctl.rank_returned(run, 1, "error", _raised(1))
        assert run.state == "FAILING"
        return run

    def cancelling(self, **kw) -> Run:
        run = self.running(**kw)
        self.ctl.cancel(run)
        assert run.state == "CANCELLING"
        return run

    def reset(self):
        """Forget the calls so far (what setting up a state did)."""
        self.effects.calls.clear()
        self.effects.events.clear()
        self.store.calls.clear()


def _raised(rank: int, exc: str = "ValueError", msg: str = "boom") -> dict:
    return {"rank": rank, "exc_type": exc, "message": msg, "traceback": f"{exc}: {msg}"}
