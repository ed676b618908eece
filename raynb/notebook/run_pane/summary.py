"""The static HTML summary of a run (what stays in the notebook after the live
pane): state, elapsed time, one bar per rank, final metrics, notes, the error and
the loss curve as an inline PNG."""

from __future__ import annotations

import base64
import html

from ..formatting import (
    BAR_COLOURS,
    PLOT_WIDTH_PX,
    STATE_COLOURS,
    _cell,
    _table,
    fmt_bytes,
    fmt_duration,
    metrics_html,
    progress_label,
    render_curve_png,
)


def summary_html(p, plot: bool = True, png: bytes | None = None) -> str:
    """``RunProgress.summary_html``: see there. ``p`` is a `RunProgress`; ``png``, the
    curve already drawn (else it is drawn here when ``plot``)."""
    e = html.escape
    colour = STATE_COLOURS.get(p.state, "#1565c0")
    head = (
        f'<div style="margin:0 0 4px 0"><b>{e(p.run_name)}</b> &mdash; '
        f'<span style="color:{colour};font-weight:bold">{e(p.state)}</span> '
        f"in {e(fmt_duration(p.elapsed_s))}"
        + (f" &middot; {e(p.latest_checkpoint)}" if p.latest_checkpoint else "")
        + (f" &middot; {p.restarts} restart(s)" if p.restarts else "")
        + "</div>"
    )
    left = [progress_bars_html(p)]
    if p.latest_metrics:
        left.append('<div style="height:8px"></div>' + metrics_html(p.ordered_metrics()))
    body = [f'<div style="flex:0 1 auto">{"".join(left)}</div>']
    if plot:
        key = p.loss_key() or "loss"
        if png is None:
            png = render_curve_png(*p.loss_series(), key)
        if png:
            body.append(
                f'<img alt="{e(key)} curve" width="{PLOT_WIDTH_PX}" '
                f'style="max-width:100%;height:auto;margin:0" '
                f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}"/>'
            )
    parts = [
        '<div class="raynb-summary" style="font-family:sans-serif;font-size:13px;line-height:1.4">',
        head,
        '<div style="display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start">',
        *body,
        "</div>",
    ]
    if p.notes:
        parts.append(
            '<ul style="margin:6px 0;padding-left:20px;color:#ef6c00">'
            + "".join(f"<li>{e(n)}</li>" for n in p.notes)
            + "</ul>"
        )
    if p.error_text:
        style = "color:#c62828;white-space:pre-wrap;margin:6px 0;font-family:monospace"
        parts.append(f'<pre style="{style}">{e(p.error_text)}</pre>')
    parts.append("</div>")
    return "\n".join(parts)


def progress_bars_html(p, stats: bool = True) -> str:
    """One static CSS bar per rank (for the summary; the live pane uses widgets),
    in a table whose rows also carry the rank's pid and peak memory when
    ``stats`` and samples arrived. Bars take the final state's colour."""
    prog = p.rank_progress
    fill = BAR_COLOURS.get(p.state, "#42a5f5")
    worker_stats = p.worker_stats if stats else {}
    rows = []
    if worker_stats:
        rows.append(
            [
                _cell("rank", head=True, muted=True),
                _cell("progress", head=True, muted=True),
                _cell(""),
                _cell("pid", right=True, head=True, muted=True),
                _cell("peak RSS", right=True, head=True, muted=True),
            ]
        )
    unit = p.progress_unit
    for r, (done, total) in prog.items():
        # No known total: no bar can say how far (full only for a FINISHED run), the label counts.
        pct = 100.0 * min(done, total) / total if total else 100.0 * (p.state == "FINISHED")
        bar = (
            f'<span style="display:inline-block;width:160px;height:10px;background:#e0e0e0;'
            f'border-radius:2px;overflow:hidden;vertical-align:middle">'
            f'<span style="display:block;height:100%;width:{pct:.0f}%;background:{fill}"></span></span>'
        )
        row = [
            _cell(f"rank {r}"),
            _cell(bar),
            _cell(html.escape(progress_label(done, total, unit, p.finished))),
        ]
        if worker_stats:
            s = worker_stats.get(r)
            row += [
                _cell(html.escape(str(s["pid"])) if s else "", right=True, muted=True),
                _cell(html.escape(fmt_bytes(p.peak_rss.get(r))) if s else "", right=True),
            ]
        rows.append(row)
    return _table(rows)
