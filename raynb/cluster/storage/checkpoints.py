"""The head's side of checkpoints: commit what the ranks staged, number, prune.

Ranks copy their checkpoint files into ``<run>/.staging/<attempt>_<report>/rank_<r>``
(see ``train.session.report``). Once every rank has made that report, the head
merges the ranks' files (rank 0 last, so its files win a name clash) into
``.tmp_checkpoint_000NNN`` and renames it to ``checkpoint_000NNN``: a rename is
atomic, so the latest checkpoint on disk is always a whole one. A checkpoint is
private to the user, as its run directory is: directories 0700, files without
group or other permissions.
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from .rundir import checkpoint_dir_name


def _merge_into(src: Path, dst: Path) -> None:
    """Move the tree ``src`` into ``dst``, replacing files of the same name."""
    dst.mkdir(parents=True, exist_ok=True, mode=0o700)
    for entry in os.scandir(src):
        target = dst / entry.name
        if entry.is_dir(follow_symlinks=False):
            if target.exists() and not target.is_dir():
                target.unlink()
            _merge_into(Path(entry.path), target)
        else:
            if target.is_dir():
                shutil.rmtree(target)
            if not entry.is_symlink():
                os.chmod(entry.path, entry.stat().st_mode & 0o700)
            os.replace(entry.path, target)


class CheckpointStore:
    """One run's committed checkpoints.

    Args:
        run_path (str | Path): the run directory.
        config (dict | None): ``CheckpointConfig`` fields (num_to_keep,
            checkpoint_score_attribute, checkpoint_score_order).
        existing (list[dict] | None): checkpoints already committed (a resumed run),
            each ``{"index", "name", "metrics"}``.
    """

    def __init__(self, run_path, config: dict | None = None, existing: list | None = None):
        self.path = Path(run_path)
        config = config or {}
        self.num_to_keep = config.get("num_to_keep")
        self.score_attr = config.get("checkpoint_score_attribute")
        self.score_order = config.get("checkpoint_score_order") or "max"
        self.kept: list[dict] = [dict(c) for c in existing or []
                                 if (self.path / c["name"]).is_dir()]
        if existing is not None:
            # A checkpoint is whole once renamed, but the record (run.json) is written after
            # the rename: a head killed in between left one on disk that the record lacks.
            known = {c["name"] for c in self.kept}
            for d in sorted(self.path.glob("checkpoint_[0-9][0-9][0-9][0-9][0-9][0-9]")):
                if d.name not in known and d.is_dir():
                    self.kept.append({"index": int(d.name.rsplit("_", 1)[1]), "name": d.name,
                                      "metrics": {}})
            self.kept.sort(key=lambda c: c["index"])
        self.next_index = max([c["index"] + 1 for c in [*(existing or []), *self.kept]], default=0)

    @property
    def latest(self) -> dict | None:
        return max(self.kept, key=lambda c: c["index"], default=None)

    def latest_path(self) -> str | None:
        c = self.latest
        return str(self.path / c["name"]) if c else None

    def commit(self, staged: list[str], metrics: dict) -> dict:
        """Merge the ranks' staged directories (rank order) into the next checkpoint.

        Returns ``{"index", "name", "path", "metrics"}`` of the new checkpoint, and
        ``"pruned"``: the names of the checkpoints ``num_to_keep`` removed for it.
        """
        index = self.next_index
        self.next_index += 1
        name = checkpoint_dir_name(index)
        tmp = self.path / f".tmp_{name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        for rank_dir in sorted(staged, key=_rank_of, reverse=True):  # rank 0 last: its files win
            if os.path.isdir(rank_dir):
                _merge_into(Path(rank_dir), tmp)
        final = self.path / name
        if final.exists():  # left by a run that was later restored over: ours is newer
            shutil.rmtree(final)
        os.rename(tmp, final)
        for rank_dir in staged:
            shutil.rmtree(Path(rank_dir).parent, ignore_errors=True)
        entry = {"index": index, "name": name, "metrics": dict(metrics)}
        self.kept.append(entry)
        pruned = self._prune()
        return {**entry, "path": str(final), "pruned": pruned}

    def _score(self, c: dict) -> float:
        if self.score_attr is None:
            return c["index"]
        v = c["metrics"].get(self.score_attr)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
            return -math.inf  # unscored checkpoints go first
        return v if self.score_order == "max" else -v

    def ranked(self) -> list[dict]:
        """Kept checkpoints, best first (by score, else newest first)."""
        return sorted(self.kept, key=lambda c: (self._score(c), c["index"]), reverse=True)

    def _prune(self) -> list[str]:
        if self.num_to_keep is None or len(self.kept) <= self.num_to_keep:
            return []
        latest = self.latest
        keep = [c for c in self.ranked() if c is not latest][: max(0, self.num_to_keep - 1)]
        keep.append(latest)  # the latest always stays: a restart resumes from it
        pruned = [c["name"] for c in self.kept if c not in keep]
        for name in pruned:
            shutil.rmtree(self.path / name, ignore_errors=True)
        self.kept = sorted(keep, key=lambda c: c["index"])
        return pruned

    def discard_staging(self) -> None:
        """Forget checkpoints staged by an attempt that failed before committing them."""
        try:
            names = os.listdir(self.path)  # one read of the directory, at every run's end
        except OSError:
            return
        for name in names:
            if name == ".staging" or name.startswith(".tmp_checkpoint_"):
                shutil.rmtree(self.path / name, ignore_errors=True)

    def records(self) -> list[dict]:
        return [{**c, "path": str(self.path / c["name"])} for c in sorted(self.kept, key=lambda c: c["index"])]


def _rank_of(staged_dir: str) -> int:
    try:
        return int(Path(staged_dir).name.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return 1 << 30
