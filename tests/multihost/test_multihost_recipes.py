"""The launch recipes parse, name raynb's real commands and flags, and the keys of
``raynb keygen`` start a head that keeps them (no processes beyond one short head)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_slurm_script_is_valid_bash_and_joins_with_the_real_flags():
    script = EXAMPLES / "slurm" / "raynb.sbatch"
    bash = shutil.which("bash")
    assert bash, "bash is needed to check the sbatch script"
    r = subprocess.run([bash, "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    assert "#SBATCH --nodes=" in text
    for flag in ("raynb start --host", "raynb node --address", "--key-file", "--node-ip", "--workers"):
        assert flag in text, flag
    from raynb.cli import main

    with pytest.raises(SystemExit) as e:  # the flags the script uses exist
        main(
            [
                "node",
                "--address",
                "tcp://198.18.0.1:6380",
                "--key-file",
                "k",
                "--node-ip",
                "x",
                "--shared-storage",
                "--node-id",
                "n",
                "--workers",
                "4",
                "--help",
            ]
        )
    assert e.value.code == 0


def _documents():
    text = (EXAMPLES / "kubernetes" / "raynb.yaml").read_text()
    try:
        import yaml
    except ImportError:  # PyYAML absent: the manifest is written in JSON-compatible flow style
        pytest.skip("PyYAML is not installed")
    return [d for d in yaml.safe_load_all(text) if d]


def test_kubernetes_manifest_has_a_head_deployment_node_statefulset_and_secret_keys():
    docs = {d["kind"]: d for d in _documents()}
    assert {"Deployment", "StatefulSet", "Service", "NetworkPolicy"} <= set(docs)
    head = docs["Deployment"]["spec"]["template"]["spec"]
    node = docs["StatefulSet"]["spec"]["template"]["spec"]
    assert head["volumes"][0]["secret"]["secretName"] == "raynb-head-keys"
    assert node["volumes"][0]["secret"]["secretName"] == "raynb-key"
    node_cmd = " ".join(node["containers"][0]["args"])
    assert "raynb node --address tcp://raynb-head:6380 --key-file" in node_cmd and "--node-ip" in node_cmd
    head_cmd = " ".join(head["containers"][0]["args"])
    assert "python -m raynb.cluster.head" in head_cmd and "--key-file /raynb/head-keys.json" in head_cmd
    assert docs["Service"]["spec"]["ports"][0]["port"] == 6380


def test_keygen_files_are_private_and_only_the_head_file_holds_the_server_secret(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAYNB_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "keygen", str(tmp_path / "keys")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    head = json.loads((tmp_path / "keys" / "head-keys.json").read_text())
    peers = json.loads((tmp_path / "keys" / "cluster-keys.json").read_text())
    assert len(head["curve"]["server_secret"]) == 40 and "server_secret" not in peers["curve"]
    assert head["key"] == peers["key"] and head["curve"]["server_public"] == peers["curve"]["server_public"]
    for f in ("head-keys.json", "cluster-keys.json"):
        assert (tmp_path / "keys" / f).stat().st_mode & 0o777 == 0o600
    again = subprocess.run(
        [sys.executable, "-m", "raynb.cli", "keygen", str(tmp_path / "keys")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert again.returncode != 0 and "never overwrites" in again.stderr + again.stdout
