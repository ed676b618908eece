"""Look at raynb's progress pane the way a person does: in a real browser.

A manual check, not part of CI (it needs Chromium, JupyterLab and Playwright,
and what it produces is screenshots for a human to look at). Three parts:

``static``  executes notebooks/01_quickstart.ipynb with nbclient, converts it
            with nbconvert and screenshots the HTML: the static summaries a
            saved or exported notebook keeps.
``reopen``  opens that executed notebook in JupyterLab (untrusted, so its HTML
            goes through Lab's sanitizer) and screenshots each summary.
``live``    opens the quickstart in JupyterLab, runs it up to the first
            ``%%ray_train`` cell, runs that cell and screenshots the live pane
            while it runs and the summary that replaces it.

Everything runs against a private cluster (its own RAYNB_HOME and
RAYNB_STORAGE_PATH, stopped at the end) and a private Jupyter config.

Setup (once; JupyterLab and Playwright can live in their own venv, the kernel
is the interpreter that has raynb):

    apt-get install -y chromium
    python -m venv /tmp/labenv && /tmp/labenv/bin/pip install jupyterlab "jupyterlab_widgets~=3.0" playwright

Run:

    /tmp/labenv/bin/python tools/browser_check.py --kernel-python "$(which python)" --out /tmp/raynb-screens

Screenshots land in --out: static_full.png (the whole exported page),
static_summary_*.png, reopen_*.png, live_start.png,
live_mid.png, live_end.png (the last live frame), live_after.png (the
summary in place), and live_frames/ (every frame).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "notebooks" / "01_quickstart.ipynb"


def private_env(work: Path, kernel_python: str) -> dict:
    """Environment for the kernel and Lab: a cluster, results and Jupyter dirs of our own."""
    kdir = work / "jupyter" / "kernels" / "python3"
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [kernel_python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
            }
        )
    )
    settings = work / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)  # no "get Jupyter news?" toast over the outputs
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    return dict(
        os.environ,
        JUPYTER_PATH=str(work / "jupyter"),
        RAYNB_HOME=str(work / "raynb-home"),
        RAYNB_STORAGE_PATH=str(work / "results"),
        JUPYTER_CONFIG_DIR=str(work / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(work / "jupyter-runtime"),
        IPYTHONDIR=str(work / "ipython"),
        JUPYTERLAB_SETTINGS_DIR=str(work / "lab-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(work / "lab-workspaces"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )


def stop_cluster(env: dict, kernel_python: str) -> None:
    subprocess.run(
        [kernel_python, "-m", "raynb.cli", "stop"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def execute_quickstart(work: Path, env: dict, kernel_python: str) -> tuple[Path, Path]:
    """(executed .ipynb, its nbconvert HTML)."""
    executed = work / "quickstart_executed.ipynb"
    code = (
        "import nbformat, sys\nfrom nbclient import NotebookClient\n"
        f"nb = nbformat.read({str(QUICKSTART)!r}, as_version=4)\n"
        f"NotebookClient(nb, timeout=300, kernel_name='python3', "
        f"resources={{'metadata': {{'path': {str(QUICKSTART.parent)!r}}}}}).execute()\n"
        f"nbformat.write(nb, {str(executed)!r})\n"
    )
    subprocess.run([kernel_python, "-c", code], env=env, check=True)
    subprocess.run(
        [kernel_python, "-m", "nbconvert", "--to", "html", str(executed), "--output-dir", str(work)],
        env=env,
        check=True,
        capture_output=True,
    )
    return executed, work / "quickstart_executed.html"


@contextmanager
def jupyterlab(root: Path, env: dict, log: Path):
    """A JupyterLab server on a free port serving ``root``; yields its base URL (with token)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "raynb-browser-check"
    with open(log, "w") as out:
        srv = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                f"--port={port}",
                "--ip=127.0.0.1",
                "--allow-root",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={root}",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
                    break
                except OSError:
                    if srv.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"JupyterLab did not start; see {log}")
                    time.sleep(0.3)
            yield f"http://127.0.0.1:{port}", token
        finally:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()


def open_notebook(browser, base: str, token: str, name: str, width: int):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(f"{base}/lab/tree/{name}?token={token}&reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # The kernel is up when the status bar says "... | Idle".
    page.wait_for_function(
        "() => /\\|\\s*Idle/.test(document.querySelector('#jp-main-statusbar')?.innerText || '')",
        timeout=60_000,
    )
    return page


def run_live(browser, base, token, root: Path, out: Path, width: int) -> None:
    nb = json.loads((root / "live.ipynb").read_text())
    watched = next(
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%ray_train")
    )
    page = open_notebook(browser, base, token, "live.ipynb", width)
    cells = page.locator(".jp-Notebook .jp-Cell")
    cells.nth(0).click()
    page.keyboard.press("Escape")
    for _ in range(watched):  # everything before the watched cell
        page.keyboard.press("Shift+Enter")
    last_code = max(i for i in range(watched) if nb["cells"][i]["cell_type"] == "code")
    prompt = cells.nth(last_code).locator(".jp-InputPrompt")
    deadline = time.monotonic() + 120
    while not re.search(r"\[\d+\]", prompt.inner_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    page.keyboard.press("Shift+Enter")  # the training cell
    cell = cells.nth(watched)
    output = cell.locator(".jp-Cell-outputWrapper")
    frames = out / "live_frames"
    shutil.rmtree(frames, ignore_errors=True)
    frames.mkdir()
    t0, shots = time.monotonic(), []
    while time.monotonic() - t0 < 180:
        if cell.locator(".raynb-summary").count():
            break
        if cell.locator(".widget-hprogress, .jupyter-widgets").count():
            output.scroll_into_view_if_needed()
            path = frames / f"{len(shots):02d}_{time.monotonic() - t0:05.1f}s.png"
            output.screenshot(path=str(path))
            shots.append(path)
        time.sleep(0.3)
    time.sleep(0.5)
    output.scroll_into_view_if_needed()
    output.screenshot(path=str(out / "live_after.png"))
    page.screenshot(path=str(out / "live_after_page.png"))
    if shots:
        shutil.copy(shots[0], out / "live_start.png")
        shutil.copy(shots[len(shots) // 2], out / "live_mid.png")
        shutil.copy(shots[-1], out / "live_end.png")
    print(
        f"live: {len(shots)} frames of the pane, then "
        f"{'the summary' if cell.locator('.raynb-summary').count() else 'NO summary'} in its place"
    )
    page.close()


def run_reopen(browser, base, token, out: Path, width: int) -> None:
    page = open_notebook(browser, base, token, "executed.ipynb", width)
    summaries = page.locator(".raynb-summary")
    for i in range(summaries.count()):
        summaries.nth(i).scroll_into_view_if_needed()
        summaries.nth(i).screenshot(path=str(out / f"reopen_{i}.png"))
    print(f"reopen: {summaries.count()} summaries in the untrusted executed notebook")
    page.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/raynb-screens")
    ap.add_argument(
        "--kernel-python",
        default=sys.executable,
        help="interpreter with raynb, torch and scikit-learn (runs the notebook)",
    )
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--width", type=int, default=1300, help="browser window width (px)")
    ap.add_argument("--parts", default="static,reopen,live")
    ap.add_argument(
        "--live-notebook",
        default=str(QUICKSTART),
        help="notebook for the live part (its first %%%%ray_train cell is watched)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="raynb-browser-"))
    env = private_env(work, a.kernel_python)
    try:
        if parts & {"static", "reopen"}:
            executed, html_path = execute_quickstart(work, env, a.kernel_python)
            stop_cluster(env, a.kernel_python)
            if "static" in parts:
                subprocess.run(
                    [
                        a.chromium,
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--disable-background-networking",
                        "--disable-component-update",
                        "--no-first-run",
                        "--hide-scrollbars",
                        f"--window-size={a.width},5200",
                        f"--screenshot={out / 'static_full.png'}",
                        html_path.as_uri(),
                    ],
                    check=True,
                    capture_output=True,
                )
                print(f"static: {out / 'static_full.png'}")
                try:
                    from playwright.sync_api import sync_playwright
                except ImportError:
                    pass
                else:  # each summary on its own, as nbconvert's HTML shows it
                    with sync_playwright() as pw:
                        browser = pw.chromium.launch(
                            executable_path=a.chromium, headless=True, args=["--no-sandbox"]
                        )
                        page = browser.new_page(viewport={"width": a.width, "height": 1000})
                        page.goto(html_path.as_uri())
                        summaries = page.locator(".raynb-summary")
                        for i in range(summaries.count()):
                            summaries.nth(i).screenshot(path=str(out / f"static_summary_{i}.png"))
                        browser.close()
        if parts & {"reopen", "live"}:
            from playwright.sync_api import sync_playwright

            root = work / "lab-root"
            root.mkdir()
            shutil.copy(a.live_notebook, root / "live.ipynb")
            if "reopen" in parts:
                shutil.copy(executed, root / "executed.ipynb")
            with jupyterlab(root, env, work / "lab.log") as (base, token), sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=a.chromium, headless=True, args=["--no-sandbox"])
                try:
                    if "reopen" in parts:
                        run_reopen(browser, base, token, out, a.width)
                    if "live" in parts:
                        run_live(browser, base, token, root, out, a.width)
                finally:
                    browser.close()
    finally:
        stop_cluster(env, a.kernel_python)
        if a.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
