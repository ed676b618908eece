"""The cluster dashboard, served by a real ``jupyter server`` process with raynb's
extension, against the session's real cluster: its JSON API (Jupyter's token required),
the 404 for an unknown run, a live run cancelled from the page, and the page rendered in
headless Chromium (Playwright driving Debian's ``chromium``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import cloudpickle
import pytest
from conftest import run_cell, wait_idle_workers

from raynb.notebook.dashboard import link
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])
REPO = Path(__file__).resolve().parents[2]
TOKEN = "raynb-dashboard-test-" + uuid.uuid4().hex[:8]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
RUN = "dash_run"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _say(config):
    import sys

    from raynb.train import get_context, report

    rank = get_context().get_world_rank()
    print(f"hello from rank {rank}")
    print(f"careful on rank {rank}", file=sys.stderr)
    for i in range(3):
        report({"loss": 1.0 / (i + 1), "epoch": i})


@pytest.fixture(scope="module")
def dash_run(cluster):
    wait_idle_workers(cluster, 4)
    return TorchTrainer(
        _say, scaling_config=ScalingConfig(num_workers=4), run_config=RunConfig(name=RUN, verbose=0)
    ).fit()


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    """A real ``jupyter server`` (free port, a token, its own Jupyter dirs) with the
    extension enabled on its command line, seeing the session cluster's RAYNB_HOME.
    Yields (base URL, its runtime dir)."""
    work = tmp_path_factory.mktemp("jupyter")
    port = _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(work / "config"),
        JUPYTER_DATA_DIR=str(work / "data"),
        JUPYTER_RUNTIME_DIR=str(work / "runtime"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={work}",
            "--ServerApp.jpserver_extensions={'raynb': True}",
        ],
        env=env,
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}api/status?token={TOKEN}", timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    f"jupyter server did not start:\n{(work / 'server.log').read_text()[-3000:]}"
                )
                time.sleep(0.2)
        yield base, work / "runtime"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(url: str, token: str | None = TOKEN, method: str = "GET"):
    """(status, JSON body or text, headers), following no redirect."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        req.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=20) as r:
            status, body, headers = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, body, headers = e.code, e.read(), e.headers
    try:
        return status, json.loads(body), headers
    except ValueError:
        return status, body.decode(errors="replace"), headers


def test_api_answers_with_the_cluster_state(server, dash_run, cluster):
    base, _ = server
    status, st, _ = _get(base + "raynb/api/status")
    assert status == 200, st
    head = cluster.status()
    assert st["address"] == head["address"] and [n["node_id"] for n in st["nodes"]] == ["local"]
    assert {w["worker_id"] for w in st["workers"]} == {w["worker_id"] for w in head["workers"]}
    assert all({"pid", "state", "rss", "cpu_percent"} <= set(w) for w in st["workers"])
    status, runs, _ = _get(base + "raynb/api/runs")
    row = next(r for r in runs["runs"] if r["name"] == RUN)
    assert status == 200 and row["state"] == "FINISHED" and row["world_size"] == 4
    status, rec, _ = _get(base + f"raynb/api/runs/{RUN}")
    assert status == 200 and rec["path"] == dash_run.path and "output" not in rec
    assert [r["loss"] for r in rec["reports"]] == pytest.approx([1.0, 0.5, 1 / 3])
    status, logs, _ = _get(base + f"raynb/api/runs/{RUN}/logs?rank=3")
    assert status == 200 and logs["lines"] == [
        {"rank": 3, "stream": "stdout", "text": "hello from rank 3"},
        {"rank": 3, "stream": "stderr", "text": "careful on rank 3"},
    ]
    status, logs, _ = _get(base + f"raynb/api/runs/{RUN}/logs?rank=all&stream=stderr")
    assert sorted(line["rank"] for line in logs["lines"]) == [0, 1, 2, 3]
    assert logs["file"] == os.path.join(dash_run.path, "output.log")


@pytest.mark.parametrize(
    "path",
    ["raynb/api/status", "raynb/api/runs", f"raynb/api/runs/{RUN}", f"raynb/api/runs/{RUN}/logs?rank=0"],
)
def test_requests_without_the_token_are_refused(server, dash_run, path):
    base, _ = server
    for token in (None, "wrong-token"):
        status, body, _ = _get(base + path, token=token)
        assert status == 403, (path, token, status, body)
        assert RUN not in json.dumps(body)
    status, _, _ = _get(base + f"raynb/api/runs/{RUN}/cancel", token=None, method="POST")
    assert status == 403
    status, _, headers = _get(base + "raynb/", token=None)  # the page: Jupyter's login
    assert status == 302 and "/login" in headers["Location"]


def test_unknown_run_is_404_with_the_names_it_has(server, dash_run):
    base, _ = server
    for path in ("raynb/api/runs/nope", "raynb/api/runs/nope/logs?rank=0"):
        status, body, _ = _get(base + path)
        assert status == 404, body
        assert "no run named 'nope'" in body["message"] and RUN in body["runs"]
    status, body, _ = _get(base + "raynb/api/runs/nope/cancel", method="POST")
    assert status == 404 and RUN in body["runs"]


@pytest.mark.parametrize(
    "query, why",
    [
        ("rank=4", "this run has 4 rank"),
        ("rank=x", "give a rank number"),
        ("stream=out", "use stdout, stderr"),
        ("lines=0", "positive number"),
        # digits that str.isdigit() takes and int() refuses
        ("rank=%C2%B2", "the parameter rank='²' is not a rank"),
        ("lines=%C2%B9", "the parameter lines='¹' is not a line count"),
        ("lines=" + "9" * 5000, "is not a line count"),
    ],
)
def test_bad_log_parameters_are_400_saying_why(server, dash_run, query, why):
    status, body, _ = _get(server[0] + f"raynb/api/runs/{RUN}/logs?{query}")
    assert status == 400 and why in body["message"], body
    assert "invalid literal" not in body["message"] and "int()" not in body["message"], body


def test_cancel_of_an_ended_run_is_409(server, dash_run):
    status, body, _ = _get(server[0] + f"raynb/api/runs/{RUN}/cancel", method="POST")
    assert status == 409 and "already ended (FINISHED)" in body["message"]


def test_ray_cluster_dashboard_prints_this_servers_link(server, shell, monkeypatch):
    base, runtime = server
    info = json.loads(next(runtime.glob("jpserver-*.json")).read_text())
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JPY_PARENT_PID", str(info["pid"]))
    _, cap = run_cell(shell, "%ray_cluster dashboard")
    assert cap.stdout.strip() == f"raynb dashboard: {base}raynb/", cap.stdout + cap.stderr
    assert TOKEN not in cap.stdout  # a saved notebook must not carry it
    # A server without the extension (its raynb/ answers 404) is told how to enable it.
    without = link.dashboard_message([dict(info, url=base + "elsewhere/")], str(info["pid"]))
    assert "has no raynb dashboard" in without and "jupyter server extension enable raynb" in without
    # No server known: it says how to get one and how to enable the extension.
    assert "jupyter server extension enable raynb" in link.dashboard_message([], "1")
    gone = dict(info, url="http://127.0.0.1:9/", pid=-1)  # another server, not this kernel's
    assert "this kernel's Jupyter server is not known" in link.dashboard_message([gone], "1")


def test_no_cluster_is_503_saying_how_to_start_one(tmp_path, monkeypatch):
    import asyncio

    from raynb.notebook.dashboard.gateway import ClusterGateway, NoCluster, json_safe

    monkeypatch.setenv("RAYNB_HOME", str(tmp_path))  # no cluster.json there
    gateway = ClusterGateway()
    try:
        with pytest.raises(NoCluster, match="no raynb cluster is running.*raynb start"):
            asyncio.run(gateway.call(gateway.status))
    finally:
        gateway.close()
    assert json_safe({"loss": float("nan"), "x": [float("inf"), 1.5], 3: object}) == {
        "loss": None,
        "x": [None, 1.5],
        "3": repr(object),
    }


def test_extension_is_enabled_by_install_and_by_name():
    import raynb
    from raynb.notebook import dashboard

    assert raynb._jupyter_server_extension_points() == [{"module": "raynb.notebook.dashboard"}]
    assert dashboard._jupyter_server_extension_points() == [{"module": "raynb.notebook.dashboard"}]
    shipped = REPO / "kernel_ext" / "jupyter_server_config.d" / "raynb.json"
    assert json.loads(shipped.read_text()) == {"ServerApp": {"jpserver_extensions": {"raynb": True}}}
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["data-files"]["etc/jupyter/jupyter_server_config.d"] == [str(shipped.relative_to(REPO))]
    assert tool["package-data"]["raynb.notebook.dashboard"] == ["static/*"]


# -- in a browser -------------------------------------------------------------------------
def _playwright():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install -y chromium` (.ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is missing: `pip install playwright` (in the project's test extra)")
    return sync_playwright


LIVE = """
import sys, time
sys.path.insert(0, {tests!r})
import raynb
from raynb.train import RunConfig, ScalingConfig
from raynb.train.torch import TorchTrainer

def slow(config):
    import time
    from raynb.train import report
    for i in range(600):
        print("tick", i, flush=True)
        report({{"loss": 1.0 / (i + 1)}})
        time.sleep(0.1)

try:
    TorchTrainer(slow, scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(name={name!r}, verbose=0)).fit()
except raynb.RunError as e:
    print("ended:", e.result.state)
"""


def test_dashboard_renders_in_chromium_and_cancels_a_live_run(server, dash_run, cluster):
    sync_playwright = _playwright()
    base, _ = server
    live = f"dash_live_{uuid.uuid4().hex[:6]}"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    wait_idle_workers(cluster, 4)
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE.format(tests=str(REPO / "tests"), name=live)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 1000})
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(f"{base}raynb/?token={TOKEN}")
                row = page.locator(f'#runs tr[data-run="{RUN}"]')
                row.wait_for(state="visible", timeout=20_000)
                assert row.locator("td.state").inner_text() == "FINISHED"
                assert page.locator("#workers tbody tr").count() >= 4
                assert page.locator("#nodes tbody tr").first.inner_text().startswith("local")
                # The run's metrics, plot and each rank's logs, stderr marked.
                row.click()
                page.locator("#run").wait_for(state="visible")
                page.wait_for_function("document.querySelector('#plot polyline') !== null")
                page.select_option("#rank", "3")
                page.wait_for_function("document.getElementById('logs').textContent.includes('rank 3')")
                assert page.locator("#logs").inner_text().splitlines() == [
                    "hello from rank 3",
                    "[stderr] careful on rank 3",
                ]
                assert page.locator("#logs .stderr").inner_text().strip() == "[stderr] careful on rank 3"
                # Logged in by the cookie from now on (as from JupyterLab): the Cancel button's
                # POST carries Jupyter's XSRF token.
                page.goto(f"{base}raynb/")
                live_row = page.locator(f'#runs tr[data-run="{live}"]')
                live_row.locator("td.state", has_text="RUNNING").wait_for(timeout=30_000)
                page.on("dialog", lambda d: d.accept())
                live_row.locator("button.cancel").click()
                live_row.locator("td.state", has_text="CANCELLED").wait_for(timeout=30_000)
                page.screenshot(path=str(server[1].parent / "dashboard.png"), full_page=True)
            finally:
                browser.close()
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "ended: CANCELLED" in output, output[-2000:]
    assert not errors, errors
    wait_idle_workers(cluster, 4)


def _trial_for_page(config):
    from raynb import tune

    tune.report({"loss": float(config["i"])})


def test_dashboard_groups_trials_under_their_experiment(server, dash_run, cluster, tmp_path):
    """A Tune experiment is one row (closed once it ended) with its trials under it, each in
    the notebook's status (TERMINATED), not its run's (FINISHED); a plain run stays a row."""
    from raynb import tune

    sync_playwright = _playwright()
    base, _ = server
    wait_idle_workers(cluster, 4)
    name = f"dash_exp_{uuid.uuid4().hex[:6]}"
    grid = tune.Tuner(
        _trial_for_page,
        param_space={"i": tune.grid_search([0, 1, 2])},
        run_config=RunConfig(name=name, storage_path=str(tmp_path), verbose=0),
    ).fit()
    trials = sorted(os.path.basename(r.path) for r in grid)
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}raynb/?token={TOKEN}")
            group = page.locator(f'#runs tr.experiment[data-experiment="{name}"]')
            group.wait_for(state="visible", timeout=20_000)
            assert "3 trials: 3 TERMINATED" in group.inner_text(), group.inner_text()
            assert page.locator(f'#runs tr[data-run="{trials[0]}"]').count() == 0  # closed: it ended
            group.click()
            rows = page.locator("#runs tr.trial")
            rows.first.wait_for(state="visible", timeout=10_000)
            shown = {
                rows.nth(i).get_attribute("data-run"): rows.nth(i).locator("td.state").inner_text()
                for i in range(rows.count())
            }
            assert {n: shown.get(n) for n in trials} == dict.fromkeys(trials, "TERMINATED"), shown
            page.locator(f'#runs tr.trial[data-run="{trials[0]}"]').click()
            page.wait_for_function("document.getElementById('run-state').textContent === 'TERMINATED'")
            assert page.locator(f'#runs tr[data-run="{RUN}"]:not(.trial)').count() == 1
        finally:
            browser.close()
    assert not errors, errors
