"""Drawing Tune's trial table: as aligned text, as HTML (live pane and the static
summary left in the notebook) and the metric curves as a PNG. Each function takes
the `TuneProgress` it draws (``trial_table.py``), whose methods of the same name
call it; pandas formats the tables and matplotlib (Agg canvas, no pyplot) the plot."""

from __future__ import annotations

import base64
import html
import io
from typing import Any

from ..formatting import _TABLE_STYLE, MUTED, _cell, as_number, fmt_duration, fmt_value

# Display order of the per-status counts.
STATUSES = ("RUNNING", "PAUSED", "PENDING", "TERMINATED", "STOPPED", "ERROR")
STATUS_COLOURS = {
    "RUNNING": "#1565c0",
    "PAUSED": "#6a1b9a",
    "PENDING": "#757575",
    "TERMINATED": "#2e7d32",
    "STOPPED": "#ef6c00",
    "ERROR": "#c62828",
}
BEST_BG = "#fff3c4"  # the best trial's row
BEST_LINE = "#d81b60"  # and its curve
STOPPED_LINE = "#bdbdbd"  # curves of trials the scheduler stopped
BEST_MARK = "*"  # the best trial's marker in the text table
PLOT_WIDTH_PX = 420  # the plot is drawn at 2x this, for high-DPI screens
TRAIN_LOOP_PREFIX = "train_loop_config/"  # TorchTrainer trials: param_space={"train_loop_config": {...}}


def text_table(p, max_rows: int | None = None) -> str:
    """The table as aligned text (pandas ``to_string``); the best trial's
    row starts with ``*``; past ``max_rows``, a last line counts the rest."""
    rows, hidden = p.select_rows(max_rows)
    if not rows:
        return "(no trials yet)"
    df = p.dataframe(rows)
    best = p.best_trial_id
    df.insert(0, "", [BEST_MARK if r.trial_id == best else " " for r in rows])
    formatters = _text_formatters(df)
    # pandas right-aligns headers: a left-aligned column gets a header as wide as it.
    df = df.rename(columns={c: c.ljust(formatters[c].width) for c in ("trial_id", "status")})
    formatters = {c.ljust(getattr(f, "width", 0)): f for c, f in formatters.items()}
    text = df.to_string(index=False, na_rep="", formatters=formatters)
    if hidden:
        text += "\n" + _more_line(hidden)
    return text


def html_table(p, max_rows: int | None = None) -> str:
    """The table as a static HTML ``<table>`` with inline styles (they
    survive JupyterLab's and nbconvert's table CSS): statuses coloured, the
    best trial's row shaded and marked ★."""
    e = html.escape
    rows, hidden = p.select_rows(max_rows)
    if not rows:
        return f'<div style="{MUTED}">no trials yet</div>'
    df = p.dataframe(rows)
    best = p.best_trial_id
    numeric = {
        c
        for c in df.columns
        if c not in ("trial_id", "status") and all(_is_na(v) or as_number(v) is not None for v in df[c])
    }
    head = "".join(_cell(e(str(c)), right=c in numeric, head=True, muted=True) for c in df.columns)
    out = [
        f'<table class="raynb-trials" style="{_TABLE_STYLE}">',
        f'<tr style="background:none;border:none">{_cell("", head=True)}{head}</tr>',
    ]
    for r, values in zip(rows, df.itertuples(index=False)):
        is_best = r.trial_id == best
        style = f"background:{BEST_BG};border:none" if is_best else "background:none;border:none"
        cells = [
            _cell(f'<span title="best trial" style="color:{BEST_LINE}">&#9733;</span>' if is_best else "")
        ]
        for col, v in zip(df.columns, values):
            if col == "status":
                cells.append(
                    _cell(
                        f'<span style="color:{STATUS_COLOURS.get(v, "#000")};font-weight:600">{e(v)}</span>'
                    )
                )
            elif col == "trial_id":
                cells.append(_cell(f"<b>{e(v)}</b>" if is_best else e(v)))
            else:
                cells.append(_cell(e(_fmt_cell(col, v)), right=col in numeric))
        out.append(f'<tr style="{style}">{"".join(cells)}</tr>')
    out.append("</table>")
    if hidden:
        out.append(f'<div style="{MUTED}">{e(_more_line(hidden))}</div>')
    return "".join(out)


def header_html(p) -> str:
    """The status line as HTML, with the counts in their statuses' colours."""
    e = html.escape
    counts = p.counts
    n = p.num_trials
    parts = [
        f"<b>Tune</b> &middot; {n} trial{'s' if n != 1 else ''}"
        + (
            ": "
            + ", ".join(
                f'<span style="color:{STATUS_COLOURS[s]};font-weight:600">{c} {s}</span>'
                for s, c in counts.items()
            )
            if counts
            else ""
        ),
        e(fmt_duration(p.elapsed_s)),
    ]
    in_use, total = p.workers
    parts.append(f"workers {in_use}/{total} in use" + e(p.cpus_text))
    best = p.best_trial_id
    if best is not None:
        row = p._trials[best]
        parts.append(
            f"best trial <b>{e(best)}</b> by last result: {e(p.metric)} {e(fmt_value(row.latest))}"
            f' <span style="{MUTED}">({e(p.best_column)} {e(fmt_value(row.best))})</span>'
        )
    return " &middot; ".join(parts)


def errors_html(p) -> str:
    return "".join(
        f'<div style="color:#c62828">{html.escape(t)}: {html.escape(_one_line(err))}</div>'
        for t, err in p.errors
    )


def notes_html(p, last: int | None = None) -> str:
    notes = p.notes if last is None else p.notes[-last:]
    return "".join(f'<div style="color:#ef6c00">{html.escape(n)}</div>' for n in notes)


# ------------------------------------------------------------- the plot


def plot_png(p, size_in: tuple[float, float] = (5.2, 3.0), dpi: int = 160) -> bytes | None:
    """The metric against ``training_iteration`` for every trial, as PNG
    bytes: STOPPED trials grey, ERROR ones dashed red, the best trial thick
    and on top; None without a metric, without points, or without matplotlib.

    Uses a bare ``Figure`` on the Agg canvas (no pyplot, so the user's
    backend and figure list are untouched and any thread may call it)."""
    fig = plot_figure(p, size_in, dpi)
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def plot_figure(p, size_in: tuple[float, float] = (5.2, 3.0), dpi: int = 160):
    """`plot_png`'s ``matplotlib.figure.Figure`` (laid out, not saved), or None."""
    if not p.metric:
        return None
    rows = [r for r in p.rows() if r.series]
    if not rows:
        return None
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        return None
    best = p.best_trial_id
    fig = Figure(figsize=size_in, dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    stopped = _draw_others(fig, ax, [r for r in rows if r.trial_id != best])
    handles = []
    if best is not None:
        xs, ys = zip(*next(r.series for r in rows if r.trial_id == best))
        handles += ax.plot(
            xs,
            ys,
            color=BEST_LINE,
            linewidth=2.4,
            zorder=5,
            marker="o" if len(xs) < 30 else None,
            markersize=3,
            label=f"best {best}",
        )
    if stopped:
        handles.append(Line2D([], [], color=STOPPED_LINE, linewidth=1.0, label="stopped"))
    ax.autoscale_view()
    ys_all = [y for r in rows for _, y in r.series]
    if min(ys_all) > 0 and max(ys_all) / min(ys_all) > 100:
        ax.set_yscale("log")  # a loss over decades: the late differences stay visible
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("training_iteration")
    ax.set_ylabel(p.metric)
    ax.grid(True, alpha=0.3)
    if handles:  # above the axes, never over a curve
        ax.legend(
            handles=handles,
            fontsize="small",
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=len(handles),
            frameon=False,
            borderaxespad=0.2,
        )
    fig.tight_layout()
    return fig


def _draw_others(fig, ax, rows) -> bool:
    """Every trial but the best: one LineCollection per kind (hundreds of trials draw
    as fast as one line), one-point trials as markers. True if a stopped one was drawn."""
    from matplotlib.collections import LineCollection

    cmap = fig.colormaps["tab10"] if hasattr(fig, "colormaps") else None
    if cmap is None:
        import matplotlib

        cmap = matplotlib.colormaps["tab10"]
    groups: dict[str, tuple[list, list]] = {"STOPPED": ([], []), "ERROR": ([], []), "other": ([], [])}
    single = []  # one-point trials: a marker, not an invisible segment
    for r in rows:
        kind = "STOPPED" if r.early_stopped else r.status if r.status in ("STOPPED", "ERROR") else "other"
        colour = STOPPED_LINE if kind == "STOPPED" else "#e57373" if kind == "ERROR" else cmap(r.order % 10)
        if len(r.series) == 1:
            single.append((r, kind, colour))
            continue
        groups[kind][0].append(r.series)
        groups[kind][1].append(colour)
    styles = {
        "STOPPED": dict(linewidths=1.0, alpha=0.9, zorder=1),
        "ERROR": dict(linewidths=1.0, linestyles="dashed", zorder=1),
        "other": dict(linewidths=1.2, alpha=0.85, zorder=2),
    }
    for kind, (segs, colours) in groups.items():
        if segs:
            ax.add_collection(LineCollection(segs, colors=colours, **styles[kind]))
    if single:  # one scatter for them all: a Line2D per trial made the plot grow with the sweep
        xs, ys = zip(*(r.series[0] for r, _, _ in single))
        ax.scatter(xs, ys, s=9, c=[colour for _, _, colour in single], marker="o", linewidths=0, zorder=2)
    return bool(groups["STOPPED"][0]) or any(k == "STOPPED" for _, k, _ in single)


# ------------------------------------------------------------- summaries


def summary_html(p, plot: bool = True, max_rows: int | None = None) -> str:
    """A p-contained HTML summary (no widgets, no scripts) for the
    notebook's saved output: the status line, the rows a live table of
    ``max_rows`` shows (None: every trial's), errors, notes, and the curves as
    an inline base64 PNG when ``plot``."""
    parts = [
        '<div class="raynb-tune-summary" style="font-family:sans-serif;font-size:13px;line-height:1.4">',
        f'<div style="margin:0 0 4px 0">{p.header_html()}</div>',
        '<div style="display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start">',
        f'<div style="flex:0 1 auto;max-height:480px;overflow:auto">{p.html_table(max_rows)}</div>',
    ]
    png = p.plot_png() if plot else None
    if png:
        parts.append(
            f'<img alt="{html.escape(p.metric or "")} per trial" width="{PLOT_WIDTH_PX}" '
            f'style="max-width:100%;height:auto;margin:0" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"/>'
        )
    parts.append("</div>")
    parts += [p.errors_html(), p.notes_html(), "</div>"]
    return "\n".join(p for p in parts if p)


def summary_text(p, max_rows: int | None = 50) -> str:
    """The status line, the table (``max_rows`` at most), errors and notes."""
    lines = [f"== Tune {p.status_line()} ==", p.text_table(max_rows)]
    lines += [f"error {t}: {_one_line(err)}" for t, err in p.errors]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


# ----------------------------------------------------------------- formatting helpers
def _param_labels(keys: list[str]) -> list[str]:
    """Column labels: TorchTrainer trials' ``train_loop_config/`` prefix dropped when every key has it."""
    if keys and all(k.startswith(TRAIN_LOOP_PREFIX) and len(k) > len(TRAIN_LOOP_PREFIX) for k in keys):
        return [k[len(TRAIN_LOOP_PREFIX) :] for k in keys]
    return list(keys)


def _fmt_cell(col: str, v: Any) -> str:
    if _is_na(v) or (col == "iter" and v == 0):  # iterations count from 1: 0 is "none yet"
        return ""
    if col == "time (s)":
        return f"{v:.1f}"
    return fmt_value(v)


def _text_formatters(df) -> dict:
    """Numbers as in the HTML table, right-aligned; ids and statuses left-aligned
    (pandas right-aligns strings), padded to the column's widest value or header."""
    out = {c: (lambda v, c=c: _fmt_cell(c, v)) for c in df.columns if c not in ("", "trial_id", "status")}
    for c in ("trial_id", "status"):
        out[c] = _LeftAligned(max([len(c)] + [len(str(v)) for v in df[c]]))
    return out


class _LeftAligned:
    def __init__(self, width: int):
        self.width = width

    def __call__(self, v) -> str:
        return str(v).ljust(self.width)


def _is_na(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _more_line(hidden: dict[str, int]) -> str:
    n = sum(hidden.values())
    return f"... {n} more trial{'s' if n != 1 else ''} ({', '.join(f'{c} {s}' for s, c in hidden.items())})"


def _one_line(text: str, limit: int = 200) -> str:
    line = next((ln.strip() for ln in reversed(str(text).strip().splitlines()) if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."
