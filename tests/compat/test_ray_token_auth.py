"""``raynb start --ray`` and ``raynb stop`` on a Ray cluster with Ray's token
authentication on (``RAY_AUTH_MODE=token``, the token in ``~/.ray/auth_token``).

The Ray cluster is a real ``ray start --head`` inside a network namespace of this test's
own (tests/support/netns.py): its GCS on 198.18.0.1:6379 never meets another Ray on this machine,
and the namespace's processes (Ray's, and raynb's actors' children) are killed by pid
when it closes. ``ray stop`` is never run. Each ``raynb`` command runs in that namespace
with a HOME of its own, so what token it has is exactly the test's choice.

Skipped where Ray is not installed, has no token authentication, or namespaces cannot be
made (not root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "raynb[ray]"')

from support import netns  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# `ray start --head` alone takes minutes on a loaded machine (and is retried there).
pytestmark = pytest.mark.timeout(900)
GCS = "198.18.0.1:6379"


def _token_auth_missing() -> str | None:
    try:
        from ray._raylet import AuthenticationTokenLoader  # noqa: F401
    except ImportError:
        return f"Ray {ray.__version__} has no token authentication (ray._raylet.AuthenticationTokenLoader)"
    return None


@pytest.fixture(scope="module")
def token_ray():
    """A token-auth Ray head in a namespace. Yields a dict: ``net``, ``tmp``, ``env``
    (the environment of a machine holding the right token in ~/.ray/auth_token, with
    RAY_AUTH_MODE unset), ``token``."""
    why = netns.available() or _token_auth_missing()
    if why:
        pytest.skip(why)
    tmp = tempfile.mkdtemp(prefix="rta.")  # short: Ray's socket paths must stay < 108 bytes
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env = dict(
        base,
        HOME=home,
        PYTHONPATH=str(ROOT),
        RAY_TMPDIR=tmp,
        RAYNB_HOME=os.path.join(tmp, "raynb"),
        RAYNB_STORAGE_PATH=os.path.join(tmp, "results"),
    )
    net = netns.Net(["ray"], tag="ta")
    try:
        r = net.run("ray", ["ray", "get-auth-token", "--generate"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        token = Path(home, ".ray", "auth_token").read_text().strip()
        for attempt in range(5):  # Ray waits a fixed ~15 s for its agents, which a loaded machine can miss
            r = net.run(
                "ray",
                [
                    "ray",
                    "start",
                    "--head",
                    "--port=6379",
                    "--num-cpus=2",
                    "--disable-usage-stats",
                    "--include-dashboard=false",
                    f"--temp-dir={tmp}/r{attempt}",
                    "--node-ip-address=198.18.0.1",
                ],
                env=dict(env, RAY_AUTH_MODE="token"),
                timeout=240,
            )
            if r.returncode == 0 or "timed out during startup" not in r.stderr:
                break
            net.kill_all("ray")
            net.wait_empty("ray")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        yield {"net": net, "tmp": tmp, "env": env, "token": token}
    finally:
        net.close()  # every process of the namespace, by pid: Ray's and raynb's
        shutil.rmtree(tmp, ignore_errors=True)


def raynb(t, *args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return t["net"].run(
        "ray", [sys.executable, "-m", "raynb.cli", *args], env=env or t["env"], timeout=timeout, cwd=str(ROOT)
    )


def _refused(r: subprocess.CompletedProcess, cause: str) -> None:
    assert r.returncode != 0, r.stdout + r.stderr
    assert cause in r.stderr, r.stderr
    assert "ray get-auth-token" in r.stderr and "~/.ray/auth_token" in r.stderr, r.stderr
    assert "no Ray cluster at" not in r.stderr and "ray start --head" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_no_token_is_refused_with_rays_cause_and_the_fix(token_ray):
    no_token = dict(token_ray["env"], HOME=os.path.join(token_ray["tmp"], "empty"))
    t0 = time.monotonic()
    r = raynb(token_ray, "start", "--ray", "--ray-address", GCS, "--workers", "1", env=no_token)
    _refused(r, "InvalidAuthToken")
    assert "this machine has no Ray token" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 20, "ray.init's retries (about 20 s) were waited out"
    # RAY_AUTH_MODE=token and still no token: Ray's own words for it.
    r = raynb(token_ray, "start", "--ray", "--ray-address", GCS, env=dict(no_token, RAY_AUTH_MODE="token"))
    _refused(r, "no authentication token was found")


def test_a_wrong_token_is_refused_naming_where_it_came_from(token_ray):
    wrong = dict(token_ray["env"], RAY_AUTH_TOKEN="0" * len(token_ray["token"]))
    r = raynb(token_ray, "start", "--ray", "--ray-address", GCS, "--workers", "1", env=wrong)
    _refused(r, "InvalidAuthToken")
    assert "from the RAY_AUTH_TOKEN environment variable" in r.stderr, r.stderr
    assert not Path(token_ray["env"]["RAYNB_HOME"], "cluster.json").exists()


def test_start_status_stop_with_the_token_file_as_rays_cli_passes_it(token_ray):
    env = token_ray["env"]  # ~/.ray/auth_token holds the token, RAY_AUTH_MODE unset
    r = raynb(token_ray, "start", "--ray", "--ray-address", GCS, "--workers", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "started on the Ray cluster at 198.18.0.1:6379" in r.stdout, r.stdout
    try:
        r = raynb(token_ray, "status", timeout=60)
        assert r.returncode == 0 and "warm workers 1 " in r.stdout, r.stdout + r.stderr
        # A stop without the token is refused with Ray's cause and leaves raynb running.
        r = raynb(
            token_ray,
            "stop",
            env=dict(env, HOME=os.path.join(token_ray["tmp"], "empty"), RAYNB_HOME=env["RAYNB_HOME"]),
        )
        _refused(r, "InvalidAuthToken")
        r = raynb(token_ray, "status", timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        r = raynb(token_ray, "stop")
    assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
    left = [p for p in token_ray["net"].pids("ray") if _is_raynb(p)]
    deadline = time.monotonic() + 15
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = [p for p in token_ray["net"].pids("ray") if _is_raynb(p)]
    assert not left, f"raynb processes left after raynb stop: {left}"


def _is_raynb(pid: int) -> bool:
    try:
        return b"raynb.cluster" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
