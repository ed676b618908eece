"""``raynb run SCRIPT [ARGS...]`` and ``raynb.compat.install()``: an unchanged Ray script's
``import ray`` served by raynb, in real processes on a real cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _raynb_run(script: Path, *args: str, env: dict | None = None, timeout: float = 240):
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "raynb.cli", "run", str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        cwd=script.parent,
    )


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_missing_script_is_exit_2_naming_it(tmp_path):
    proc = _raynb_run(tmp_path / "nope.py")
    assert proc.returncode == 2
    assert "nope.py: no such file" in proc.stderr


def test_script_that_raises_prints_its_traceback_and_exits_1(tmp_path, cluster):
    script = _write(
        tmp_path,
        "boom.py",
        """\
        import ray.tune
        def inner():
            raise ValueError("boom from the script")
        inner()
        """,
    )
    proc = _raynb_run(script)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback (most recent call last):" in proc.stderr
    assert f'File "{script}", line 3, in inner' in proc.stderr
    assert proc.stderr.strip().endswith("ValueError: boom from the script")
    assert "runpy" not in proc.stderr and "run_script" not in proc.stderr  # raynb's frames left out


def test_sys_exit_status_and_argv_are_the_scripts(tmp_path, cluster):
    script = _write(
        tmp_path,
        "argv.py",
        """\
        import sys, ray
        print("argv", sys.argv[1:], "name", __name__)
        sys.exit(int(sys.argv[1]))
        """,
    )
    proc = _raynb_run(script, "7", "--flag")
    assert proc.returncode == 7, proc.stderr
    assert "argv ['7', '--flag'] name __main__" in proc.stdout


def test_names_not_served_raise_where_used_naming_the_fix(tmp_path, cluster):
    script = _write(
        tmp_path,
        "core.py",
        """\
        import ray
        from ray import tune, train, data
        from ray.train import ScalingConfig
        for use in ("ray.remote", "ray.get", "ray.util", "ray.train.no_such_name"):
            try:
                eval(use)
            except AttributeError as e:
                print("AttributeError", use, "|", e)
        for mod in ("ray.serve", "ray.rllib", "ray.util.queue"):
            try:
                __import__(mod)
            except ImportError as e:
                print("ImportError", mod, "|", e)
        try:
            from ray import remote
        except ImportError as e:
            print("ImportError from-import |", e)
        """,
    )
    proc = _raynb_run(script)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if "|" in ln]
    assert len(lines) == 8, proc.stdout
    for ln in lines:
        assert "not served by raynb" in ln and "raynb start --ray" in ln and "coming-from-ray.md" in ln


def test_script_on_a_fresh_machine_starts_a_cluster_and_stops_it(tmp_path):
    """ray.init() starts raynb's cluster; a Tune run, whose function imports ray.train on
    the worker, reports through raynb; the cluster the run started is gone after it."""
    home, storage = tmp_path / "home", tmp_path / "results"
    home.mkdir(mode=0o700)
    script = _write(
        tmp_path,
        "tune_it.py",
        """\
        import pickle
        import ray
        from ray import tune

        def trainable(config):
            import ray.train            # resolved on the worker: raynb's, not Ray's
            from ray.train import report
            report({"score": config["x"] * 10, "mod": ray.train.__name__})

        ray.init(num_cpus=2)
        assert ray.is_initialized()
        assert pickle.loads(pickle.dumps(ray.tune)).__name__ == "ray.tune"
        grid = tune.Tuner(trainable, param_space={"x": tune.grid_search([1, 2])}).fit()
        best = grid.get_best_result(metric="score", mode="max")
        print("best", best.metrics["score"], best.metrics["mod"])
        """,
    )
    env = {"RAYNB_HOME": str(home), "RAYNB_STORAGE_PATH": str(storage)}
    proc = _raynb_run(script, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "best 20 ray.train" in proc.stdout
    check = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "status"],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert "no raynb cluster is running" in check.stdout, check.stdout


def test_install_in_a_process_serves_ray_and_refuses_after_real_ray():
    code = textwrap.dedent("""\
        import raynb.compat
        raynb.compat.install()
        import ray, ray.train.torch, ray.tune.schedulers
        import raynb.train.torch
        assert ray.train.torch.TorchTrainer is raynb.train.torch.TorchTrainer
        assert type(ray.tune.schedulers).__name__ == "ServedModule", ray.tune.schedulers
        try:
            ray.train.torch.no_such_name
        except AttributeError as e:
            assert "`ray.train.torch.no_such_name` is not served by raynb" in str(e), e
        raynb.compat.uninstall()
        import sys
        assert "ray" not in sys.modules
        import ray                      # real Ray now
        try:
            raynb.compat.install()
        except RuntimeError as e:
            print("refused:", e)
        """)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if proc.returncode != 0 and "No module named 'ray'" in proc.stderr:
        pytest.skip("real Ray is not installed")
    assert proc.returncode == 0, proc.stderr
    assert "refused: real Ray is already imported" in proc.stdout
