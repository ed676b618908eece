"""How soon the head holds a node lost whose host vanishes without closing its connection
(a power cut, a network cut): network namespaces on this machine
(``tests/support/netns.py``), the head on 198.18.0.1, node agents n1 and n2 on .2 and .3,
a client on .4. Each cycle takes h2's interface down (``ip link set eth0 down`` in its
namespace: no FIN, no RST, its packets just stop) and times, from the client, the cut to
the head no longer listing n2 (status polled every 50 ms); then brings the link back and
waits for n2 to register again. Prints one JSON object.

The head is started with ``RAYNB_IDLE_HEARTBEAT_S=1`` so n2 keeps a busy node's one
heartbeat a second while idle (``head/node_pace.py``): the time measured is a busy node's.
``--timeout S`` sets ``RAYNB_NODE_TIMEOUT_S`` (default: the setting's, 5).

Needs root (namespaces). Usage: ``python -m benchmarks.link_cut [--cycles N] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from tests.support import netns  # noqa: E402
from tests.support.multihost_fixture import hosts_up  # noqa: E402

WATCH = """
    c = raynb.connect(KEY_FILE)
    while not os.path.exists(CUT):
        time.sleep(0.01)
    cut_at = float(open(CUT).read())
    while any(n["node_id"] == "n2" for n in c.status()["nodes"]):
        time.sleep(0.05)
    print(json.dumps({"lost_s": time.time() - cut_at}))
"""


def _cycle(c, cut: Path) -> float:
    watcher = c.net.popen(
        "client",
        [sys.executable, "-c", c.client_prelude() + f"CUT = {str(cut)!r}\n" + textwrap.dedent(WATCH)],
        env=c.env("client"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3.0)  # the watcher connected
        cut.write_text(repr(time.time()))
        c.net.link("h2", up=False)
        out, _ = watcher.communicate(timeout=120)
    finally:
        c.net.link("h2", up=True)
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
        cut.unlink(missing_ok=True)
    c.wait_workers(2, nodes={"n2"}, timeout=120)
    return json.loads([x for x in out.splitlines() if x.startswith("{")][-1])["lost_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=None, help="RAYNB_NODE_TIMEOUT_S")
    args = ap.parse_args(argv)
    why = netns.available()
    if why:
        print(json.dumps({"skipped": why}))
        return 0
    os.environ["RAYNB_IDLE_HEARTBEAT_S"] = "1"
    if args.timeout is not None:
        os.environ["RAYNB_NODE_TIMEOUT_S"] = str(args.timeout)
    load = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="raynb-bench-cut-") as d:
        with hosts_up(Path(d), tag="lc") as c:
            lost = [_cycle(c, Path(d) / "cut") for _ in range(args.cycles)]
    print(
        json.dumps(
            {
                "cut_to_lost_s": {
                    "median": round(statistics.median(lost), 3),
                    "min": round(min(lost), 3),
                    "max": round(max(lost), 3),
                    "samples": [round(x, 3) for x in lost],
                },
                "node_timeout_s": float(os.environ.get("RAYNB_NODE_TIMEOUT_S", "5")),
                "load_avg": [load, [round(x, 2) for x in os.getloadavg()]],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
