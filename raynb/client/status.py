"""The text of ``raynb status`` and ``%ray_cluster status``."""

from __future__ import annotations


def _mib(n) -> str:
    return f"{n / 2**20:.0f}MiB" if isinstance(n, (int, float)) else "-"


def _gpu_columns(w: dict) -> str:
    """'0   57%   1234/81559MiB' for a worker NVML saw on GPU 0; blanks otherwise."""
    if w.get("gpu") is None:
        return f"{'-':>3}{'':>6}{'':>16}"
    util = w.get("gpu_util")
    mem = f"{_mib(w.get('gpu_mem_used'))[:-3]}/{_mib(w.get('gpu_mem_total'))}"
    return f"{w['gpu']:>3}{'-' if util is None else f'{util:.0f}%':>6}{mem:>16}"


def _head_lines(st: dict) -> list[str]:
    """The status's first lines: the head, how it stops, its local node agent and loop."""
    lines = [
        f"head {st['address']} (pid {st['pid']}), up {st['uptime_s']:.0f}s, "
        f"rejected messages: {st['rejected_messages']}"
    ]
    if st.get("curve"):
        lines[0] += f", CurveZMQ on, refused handshakes: {st.get('rejected_connections', 0)}"
    if st.get("duplicate_nodes_refused"):
        lines[0] += (
            f", node agents refused for a node id already in use: {st['duplicate_nodes_refused']} "
            "(see head.log)"
        )
    if st.get("stop_when_idle"):
        lines.append("stops by itself once no other client uses it (the script that started it exited)")
    if st.get("kept"):
        lines.append(
            "kept up by `raynb start`: the script that started it leaves it running (`raynb stop` ends it)"
        )
    local = st.get("local_node") or {}
    if local.get("gave_up"):
        lines.append(f"LOCAL NODE AGENT DOWN: {local['gave_up']}")
    elif local.get("exits"):
        lines.append(
            f"the local node agent exited {local['exits']} time(s) and was restarted (see node-local.log)"
        )
    loop = st.get("loop") or {}
    if loop.get("stalls"):
        lines.append(
            f"the head's loop stalled {loop['stalls']} time(s), the longest {loop['longest_stall_s']:.1f}s "
            "(a stopped or starved head process; peers were not blamed)"
        )
    return lines


def _node_lines(nodes: list[dict]) -> list[str]:
    """A line per node (and its labels and note, indented under it)."""
    lines = []
    for n in nodes:
        zygote = f", zygote pid {n['zygote_pid']}" if n.get("zygote_pid") else ""
        cpus = f", {n['cpus']} cores" if n.get("cpus") else ""
        load = f", load {n['load']:.2f}" if isinstance(n.get("load"), (int, float)) else ""
        beat = (
            f", last heartbeat {n['last_heartbeat_s']:.1f}s ago"
            if isinstance(n.get("last_heartbeat_s"), (int, float))
            else ""
        )
        lines.append(
            f"node {n['node_id']} on {n['hostname']} ({n['ip']}), pid {n['pid']}{zygote}{cpus}, "
            f"workers {n.get('workers', '-')}, GPUs {len(n.get('gpus') or [])}{load}{beat}, "
            f"warm workers {n['num_workers']} (max {n['max_workers']})"
        )
        if n.get("labels"):
            lines.append(
                "  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(n["labels"].items()))
            )
        if n.get("note"):
            lines.append(f"  note: {n['note']}")
    return lines


def format_status(st: dict) -> str:
    """Human-readable cluster status: nodes, workers, runs, rejected messages."""
    lines = _head_lines(st)
    lines += _node_lines(st["nodes"])
    # GPU columns only where NVML saw a worker on a GPU (absent on CPU machines).
    gpus = any(w.get("gpu") is not None for w in st["workers"])
    lines.append(
        f"{'worker':<14}{'pid':>8}  {'state':<6}{'kind':<11}{'rank':>5}  {'cpu%':>6}{'rss':>9}"
        + (f"  {'gpu':>3}{'util':>6}{'gpu mem':>16}" if gpus else "")
        + "  run"
    )
    for w in sorted(st["workers"], key=lambda w: w["worker_id"]):
        cpu = w.get("cpu_percent")
        lines.append(
            # the framework its zygote imported (node/kind_zygote.py); a head before 2.6: torch
            f"{w['worker_id']:<14}{w['pid']:>8}  {w['state']:<6}{w.get('kind') or 'torch':<11}"
            f"{'' if w['rank'] is None else w['rank']:>5}  "
            f"{'-' if cpu is None else f'{cpu:.0f}':>6}{_mib(w.get('rss')):>9}"
            + (f"  {_gpu_columns(w)}" if gpus else "")
            + f"  {w.get('run') or ''}"
        )
        if w.get("not_responding"):
            lines[-1] = f"{lines[-1].rstrip()}  NOT RESPONDING: {w['not_responding']}"
    active = [r for r in st["runs"] if r["state"] in ("PENDING", "RUNNING", "CANCELLING", "FAILING")]
    lines.append(f"runs: {len(st['runs'])} recorded, {len(active)} active")
    for r in active:
        lines.append(f"  {r['name']}  {r['state']}  world size {r['world_size']}")
    return "\n".join(lines)
