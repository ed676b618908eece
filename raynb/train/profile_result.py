"""A profiled run's ``profile/`` directory read back (``Result.profile``): each rank's
top operators and Chrome trace, and the table the notebook shows after the run.

The table puts the ranks side by side, so a straggler (a longer step time, less time
waiting in the all-reduce than its peers) or a slow collective shows at a glance.
Written by the ranks (``raynb.train.profiling``); read here in the notebook.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from .profiling import COMM_PREFIXES, PROFILE_DIR


class RunProfile:
    """What ``RunConfig(profile=...)`` / ``%%ray_train --profile`` left in a run directory.

    Attributes:
        dir (str): ``<run dir>/profile``.
        summaries (dict[int, dict]): each rank's ``rank_<r>_top.json``, by rank.
        traces (dict[int, str]): each rank's Chrome trace (absolute path), by rank; a rank
            whose window recorded nothing has none.
        notes (list[str]): why a window was short, once per distinct note.

    ``profile[r]`` is rank r's operators as a DataFrame (name, calls, self_cpu_us,
    cpu_total_us, and self_cuda_us, cuda_total_us on GPU runs); :meth:`table` compares
    the ranks. Displaying the object shows the step times, the top operators and the
    collectives per rank.
    """

    def __init__(self, directory: str | Path, summaries: dict[int, dict]):
        self.dir = str(directory)
        self.summaries = dict(sorted(summaries.items()))
        self.traces = {
            r: str(Path(directory) / s["trace"])
            for r, s in self.summaries.items()
            if s.get("trace") and (Path(directory) / s["trace"]).is_file()
        }
        notes = [s["note"] for s in self.summaries.values() if s.get("note")]
        self.notes = list(dict.fromkeys(notes))

    @classmethod
    def from_run_dir(cls, path: str | None, world_size: int | None = None) -> "RunProfile | None":
        """The profile of the run in ``path``, or None when it was never profiled (or the
        directory cannot be read from here). Only the newest attempt's files count (a
        restart rewrites them), and with ``world_size`` only its ranks (a resumed run on
        fewer ranks leaves the old ones' files)."""
        if not path:
            return None
        directory = Path(path) / PROFILE_DIR
        summaries = {}
        for f in sorted(directory.glob("rank_*_top.json")) if directory.is_dir() else ():
            try:
                s = json.loads(f.read_text())
                summaries[int(s["rank"])] = s
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a file being replaced, or not ours: the others still show
        newest = max((s.get("attempt") or 0 for s in summaries.values()), default=0)
        summaries = {
            r: s
            for r, s in summaries.items()
            if (s.get("attempt") or 0) == newest and (world_size is None or r < world_size)
        }
        return cls(directory, summaries) if summaries else None

    @property
    def cuda(self) -> bool:
        return any(s.get("cuda") for s in self.summaries.values())

    def __getitem__(self, rank: int):
        import pandas as pd

        return pd.DataFrame(
            self.summaries[rank].get("ops") or [],
            columns=["name", "calls", "self_cpu_us", "cpu_total_us"]
            + (["self_cuda_us", "cuda_total_us"] if self.cuda else []),
        )

    def step_ms(self):
        """Mean step time of the recorded steps by rank (ms): a pandas Series."""
        import pandas as pd

        return pd.Series(
            {f"rank {r}": s.get("step_ms") for r, s in self.summaries.items()},
            name="step ms",
            dtype="float64",
        )

    def table(self, n: int = 10, by: str | None = None, collectives: bool = False):
        """The operators of every rank side by side: one row per operator, one column per
        rank (ms summed over the recorded steps), and ``calls`` (rank 0's, else the first).

        Args:
            n (int): rows: the operators with the most time on any rank.
            by (str | None): ``self_cpu_us``, ``cpu_total_us``, ``self_cuda_us`` or
                ``cuda_total_us``; None is self CUDA time on GPU runs, else self CPU time.
            collectives (bool): only the collectives (``c10d::``, ``gloo:``, ``nccl:``).

        Raises:
            ValueError: an unknown ``by``.
        """
        import pandas as pd

        by = by or ("self_cuda_us" if self.cuda else "self_cpu_us")
        allowed = ("self_cpu_us", "cpu_total_us") + (("self_cuda_us", "cuda_total_us") if self.cuda else ())
        if by not in allowed:
            raise ValueError(f"table(by={by!r}): use one of {', '.join(allowed)}")
        times: dict[str, dict[str, float]] = {}
        calls: dict[str, int] = {}
        for r, s in self.summaries.items():
            for op in s.get("ops") or []:
                if collectives and not op["name"].startswith(COMM_PREFIXES):
                    continue
                times.setdefault(op["name"], {})[f"rank {r}"] = op.get(by, 0.0) / 1000
                calls.setdefault(op["name"], op.get("calls"))
        names = sorted(times, key=lambda k: max(times[k].values()), reverse=True)[:n]
        columns = [f"rank {r}" for r in self.summaries]
        frame = pd.DataFrame(
            [times[k] for k in names], index=pd.Index(names, name="operator"), columns=columns
        )
        frame.insert(0, "calls", [calls[k] for k in names])
        return frame.round(3)

    def _title(self) -> str:
        first = next(iter(self.summaries.values()))
        sch = first.get("schedule") or {}
        unit = first.get("unit", "reports")
        recorded = max((s.get("recorded_steps") or 0) for s in self.summaries.values())
        return (
            f"profile of {len(self.summaries)} rank(s): wait={sch.get('wait')}, warmup={sch.get('warmup')}, "
            f"active={sch.get('active')} {unit}; {recorded} step(s) recorded; Chrome traces in {self.dir}"
        )

    def _sections(self):
        by = "self_cuda_us" if self.cuda else "self_cpu_us"
        what = "self CUDA" if self.cuda else "self CPU"
        steps = self.step_ms().dropna().to_frame().T
        return [
            ("mean step time (ms)", steps if steps.shape[1] else steps.iloc[:0]),
            (f"top operators by {what} time (ms, summed over the recorded steps)", self.table(by=by)),
            (
                "collectives, CPU total time (ms: from issue to completion)",
                self.table(by="cpu_total_us", collectives=True),
            ),
        ]

    def __repr__(self) -> str:
        lines = [self._title()]
        for title, frame in self._sections():
            if len(frame):
                lines += ["", title + ":", frame.to_string()]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [
            f'<div class="raynb-profile" style="font-family:sans-serif;font-size:13px">'
            f"<div><b>{e(self._title())}</b></div>"
        ]
        for title, frame in self._sections():
            if len(frame):
                parts.append(
                    f'<div style="margin-top:6px">{e(title)}</div>' + frame.to_html(na_rep="", border=0)
                )
        parts += [f'<div style="color:#ef6c00">{e(n)}</div>' for n in self.notes]
        return "".join(parts) + "</div>"
