"""Formatting shared by the progress views: numbers, durations and bytes as text,
the loss-curve PNG, and the HTML pieces (inline-styled tables) of the panes and
summaries. Nothing here imports ipywidgets or IPython; matplotlib is imported only
when a curve is drawn."""

from __future__ import annotations

import html
import io
import math
from typing import Any, Callable, Iterable

from ..cluster.protocol.run_states import RUN_TERMINAL as TERMINAL

TERMINAL_STATES = frozenset(TERMINAL)
KNOWN_STATES = frozenset({"PENDING", "RUNNING"}) | TERMINAL_STATES

# Tried in this order when looking for the curve to plot.
LOSS_KEYS = (
    "loss",
    "train_loss",
    "training_loss",
    "val_loss",
    "valid_loss",
    "validation_loss",
    "eval_loss",
    "test_loss",
)

# Keys that the head or the progress bars already account for; the compact
# views leave them out of the metric listing.
BOOKKEEPING_KEYS = frozenset(
    {"epoch", "step", "training_iteration", "time_total_s", "timestamp", "time_this_iter_s", "done"}
)
# Added to every row by the head; a wall-clock number (1.7e9) is noise in any view.
HIDDEN_KEYS = frozenset({"timestamp"})

# Terminal-state colours, shared by the live pane and the static summary.
STATE_COLOURS = {
    "FINISHED": "#2e7d32",
    "FAILED": "#c62828",
    "CANCELLED": "#ef6c00",
    "STOPPED": "#ef6c00",
    "RUNNING": "#1565c0",
    "PENDING": "#757575",
}
BAR_COLOURS = {"FINISHED": "#43a047", "FAILED": "#e53935", "CANCELLED": "#fb8c00", "STOPPED": "#fb8c00"}
MUTED = "color:#888"
PLOT_WIDTH_PX = 360  # the loss curve is drawn at 2x this, for sharp high-DPI screens
PLOT_HEIGHT_PX = 192  # its height at that width (the figure's 4.5 x 2.4 in)

OUTPUT_TAIL_LINES = 20


# ----------------------------------------------------------------- formatting
def as_number(value: Any) -> float | int | None:
    """``value`` as a finite int/float, or None (bools, NaN, inf, strings that
    are not numbers, anything else)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def fmt_value(value: Any) -> str:
    """A metric value for display: floats to 4 significant digits."""
    if isinstance(value, float):
        if 1e4 <= abs(value) < 1e12:  # 12346, not 1.235e+04
            return f"{value:.0f}"
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def fmt_bytes(n: Any) -> str:
    """A byte count as MiB (or GiB from 1 GiB up); '?' when not a number."""
    n = as_number(n)
    if n is None:
        return "?"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB"


def fmt_range(values: Iterable, fmt: Callable[[Any], str]) -> str:
    """'257 MiB', or '250-262 MiB' when the values differ (the unit once); '?' when none."""
    vals = sorted(v for v in values if as_number(v) is not None)
    if not vals:
        return "?"
    lo, hi = fmt(vals[0]), fmt(vals[-1])
    if lo == hi:
        return lo
    (lo_num, lo_unit), (_, hi_unit) = _num_unit(lo), _num_unit(hi)
    return f"{lo_num}-{hi}" if lo_unit == hi_unit and lo_num else f"{lo}-{hi}"


def _num_unit(text: str) -> tuple[str, str]:
    """'257 MiB' -> ('257', ' MiB'); '28%' -> ('28', '%')."""
    n = len(text) - len(text.lstrip("0123456789.-"))
    return text[:n], text[n:]


def fmt_duration(seconds: float) -> str:
    """Seconds as '12.3s', '4m 05s' or '1h 02m 03s'."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s"


def wants_log_y(ys: list) -> bool:
    """True for a positive curve that falls over more than two decades (2.3 to 0.002)."""
    return len(ys) > 1 and min(ys) > 0 and max(ys) / min(ys) > 100


def render_curve_png(
    xs: list,
    ys: list,
    label: str = "loss",
    size_in: tuple[float, float] = (4.5, 2.4),
    dpi: int = 160,
    log_y: bool | None = None,
) -> bytes | None:
    """A line plot of ``ys`` against ``xs`` as PNG bytes, or None when there
    are fewer than two points or matplotlib is missing.

    The default is drawn at twice the pixels it is shown at (`PLOT_WIDTH_PX`),
    so it stays sharp on high-DPI screens. A positive curve that falls over
    more than two decades (a loss from 2.3 to 0.002) gets a log y axis, where
    the late, small improvements stay visible instead of hugging zero; ``log_y``
    True or False fixes the scale instead (a live view decides it once, so its
    axis does not switch from linear to log in the middle of a run).

    Uses a bare ``Figure`` on the Agg canvas rather than pyplot, so the user's
    backend and pyplot's global figure list are left alone (and it is safe to
    call from the client's event thread).
    """
    if len(xs) < 2:  # one point is no curve; its value is in the metrics table
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=size_in, dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(xs, ys, marker="." if len(xs) < 50 else None, linewidth=1.2, color="#1e88e5")
    if wants_log_y(ys) if log_y is None else (log_y and min(ys) > 0):
        ax.set_yscale("log")
    ax.set_xlabel("training_iteration")
    ax.set_ylabel(label)
    ax.set_title(f"{label} {fmt_value(ys[-1])}", fontsize="medium", loc="right")
    if all(isinstance(x, int) for x in xs):  # no 2.5th iteration
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# ----------------------------------------------------------------- shared HTML pieces
# Inline styles that undo what Jupyter front ends do to tables in outputs
# (JupyterLab / nbconvert: right-aligned cells, 0.5em padding, striped rows,
# auto margins; ipywidgets' HTML: a 28px line height).
_TABLE_STYLE = (
    "border-collapse:collapse;border:none;margin:0;table-layout:auto;width:auto;"
    "font-size:inherit;color:inherit;line-height:1.4"
)
_ROW_STYLE = "background:none;border:none"


def _cell(content: str, right: bool = False, head: bool = False, muted: bool = False) -> str:
    tag = "th" if head else "td"
    style = (
        f"padding:1px 12px 1px 0;text-align:{'right' if right else 'left'};border:none;"
        "line-height:1.4;white-space:nowrap;vertical-align:middle;font-variant-numeric:tabular-nums"
    )
    if head:
        style += ";font-weight:600"
    if muted:
        style += ";" + MUTED
    return f'<{tag} style="{style}">{content}</{tag}>'


def _table(rows: list[list[str]]) -> str:
    return (
        f'<table style="{_TABLE_STYLE}">'
        + "".join(f'<tr style="{_ROW_STYLE}">{"".join(r)}</tr>' for r in rows)
        + "</table>"
    )


def split_metrics(pairs: list[tuple[str, Any]]) -> tuple[list, list]:
    """(the run's own metrics, bookkeeping ones such as epoch and time_total_s),
    each in the given order; `HIDDEN_KEYS` (the wall-clock timestamp) in neither."""
    shown = [(k, v) for k, v in pairs if k not in BOOKKEEPING_KEYS and k not in HIDDEN_KEYS]
    books = [(k, v) for k, v in pairs if k in BOOKKEEPING_KEYS and k not in HIDDEN_KEYS]
    return shown, books


def kv_table_html(pairs: list[tuple[str, Any]]) -> str:
    """A two-column metric/value HTML table: names left, values right."""
    rows = [[_cell("metric", head=True, muted=True), _cell("value", right=True, head=True, muted=True)]]
    rows += [[_cell(html.escape(str(k))), _cell(html.escape(fmt_value(v)), right=True)] for k, v in pairs]
    return _table(rows)


def metrics_html(pairs: list[tuple[str, Any]], limit: int | None = None) -> str:
    """The run's own metrics as a table, then the bookkeeping keys (epoch,
    training_iteration, time_total_s, ...) on one muted line; past ``limit``
    metrics, a '+N more' line."""
    shown, books = split_metrics(pairs)
    out = []
    if shown:
        more = len(shown) - limit if limit is not None and len(shown) > limit else 0
        out.append(kv_table_html(shown[: len(shown) - more]))
        if more:
            out.append(f'<div style="{MUTED}">+{more} more</div>')
    if books:
        # Wraps between pairs, never inside one, so it does not widen the column.
        out.append(
            f'<div style="{MUTED};white-space:normal;max-width:380px">'
            + " &middot; ".join(
                f'<span style="white-space:nowrap">{html.escape(str(k))} {html.escape(fmt_value(v))}</span>'
                for k, v in books
            )
            + "</div>"
        )
    return "".join(out)


def plural(unit: str, n: int | None) -> str:
    """'epochs' unless n == 1."""
    return unit if n == 1 else unit + "s"


def progress_label(done: int, total: int | None, unit: str, finished: bool = True) -> str:
    """'7/15 epochs', '1 epoch', '42 steps'; while a run with no known total runs,
    '42 steps (no total)' (its bar is empty, not full)."""
    if total:
        return f"{done}/{total} {plural(unit, total)}"
    return f"{done} {plural(unit, done)}" + ("" if finished else " (no total)")
