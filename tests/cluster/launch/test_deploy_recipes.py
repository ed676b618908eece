"""The deployment recipes can be applied: the Kubernetes manifest validates against the
Kubernetes API schema (``kubernetes-validate``, strict); its image is the one
``examples/docker/Dockerfile`` builds with the command ``docs/deploy.md`` gives; and the
Slurm batch script, run on three network namespaces standing for three nodes, with
``srun``, ``scontrol`` and ``hostname --ip-address`` played by a harness that sets Slurm's
variables as Slurm does for a step's tasks, starts a cluster over the three whose run
spans them, and leaves nothing behind."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from support import netns

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
MANIFEST = EXAMPLES / "kubernetes" / "raynb.yaml"
DOCKERFILE = EXAMPLES / "docker" / "Dockerfile"


def _manifest() -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def test_kubernetes_manifest_validates_against_the_api_schema():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (the test extra)")
    docs = _manifest()
    assert {d["kind"] for d in docs} == {"Service", "Deployment", "StatefulSet", "NetworkPolicy"}
    for version in ("1.30", kv.latest_version()):
        for doc in docs:
            kv.validate(doc, version, strict=True)  # raises ValidationError naming the path
    # The validator can fail: a misspelt field and a wrong type are refused.
    bad = copy.deepcopy(next(d for d in docs if d["kind"] == "StatefulSet"))
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, kv.latest_version(), strict=True)
    bad = copy.deepcopy(next(d for d in docs if d["kind"] == "Service"))
    bad["spec"]["ports"][0]["port"] = "six thousand"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, kv.latest_version(), strict=True)


def test_the_kubernetes_image_is_the_dockerfiles_built_as_documented():
    text = DOCKERFILE.read_text()
    doc = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"<!-- build-command:.*?-->\s*```bash\n(.*?)```", doc, re.S).group(1).strip()
    assert block == "docker build -f examples/docker/Dockerfile -t raynb:0.1.0 ."
    assert block in text  # the Dockerfile's own header says the same
    tag = block.split("-t ", 1)[1].split()[0]
    for d in _manifest():
        if d["kind"] in ("Deployment", "StatefulSet"):
            pod = d["spec"]["template"]["spec"]
            assert [c["image"] for c in pod["containers"]] == [tag]
            assert pod["securityContext"]["runAsUser"] == 1000  # the image's user
    assert re.search(r"^FROM python:3\.1[0-9]", text, re.M)
    assert '"torch==2.13.0+cpu"' in text and "useradd --create-home --uid 1000 raynb" in text
    assert re.search(r"^USER raynb$", text, re.M)
    for line in re.findall(r"^COPY (\S+(?: \S+)*) \S+$", text, re.M):
        for src in line.split():
            assert (ROOT / src).exists(), f"the Dockerfile copies {src}, which the repository lacks"
    assert 'pip install ".[examples]"' in text


# -- Slurm ------------------------------------------------------------------------------
SRUN = r"""#!/bin/bash
# srun as Slurm runs a step: one task on each node of -w (here: a network namespace
# named for it), with the variables slurmstepd sets for a task; waits for them all.
set -u
nodes=""
while (( $# )); do
    case "$1" in
        -w) nodes="$2"; shift 2 ;;
        --nodes=*|--ntasks-per-node=*|--kill-on-bad-exit=*|--ntasks=*) shift ;;
        -N|-n) shift 2 ;;
        -*) echo "srun harness: unsupported option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
IFS=, read -ra list <<< "$nodes"
n=${#list[@]}; i=0; pids=()
for node in "${list[@]}"; do
    ip netns exec "$HARNESS_NS-$node" env SLURM_STEP_ID=0 SLURM_STEP_NODELIST="$nodes" SLURM_STEP_NUM_NODES=$n \
        SLURM_STEP_NUM_TASKS=$n SLURM_NTASKS=$n SLURM_NNODES=$n SLURM_NODEID=$((i + 1)) SLURM_PROCID=$i \
        SLURM_LOCALID=0 SLURMD_NODENAME="$node" SLURM_TOPOLOGY_ADDR="$node" "$@" &
    pids+=($!); i=$((i + 1))
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
"""

SCONTROL = r"""#!/bin/bash
# scontrol show hostnames LIST: one name a line (the harness's lists are plain, no ranges)
[[ "$1 $2" == "show hostnames" ]] || { echo "scontrol harness: only 'show hostnames'" >&2; exit 2; }
tr , '\n' <<< "$3"
"""

HOSTNAME = r"""#!/bin/bash
# hostname --ip-address: this node's (namespace's) address; anything else as usual.
if [[ "${1:-}" == "--ip-address" || "${1:-}" == "-i" ]]; then
    ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1
else
    exec /bin/hostname "$@"
fi
"""

TRAIN = r"""
import json, os, time
import raynb
from raynb.train import ScalingConfig, RunConfig
from raynb.train.torch import TorchTrainer

client = raynb.connect(os.path.join(os.environ["RAYNB_HOME"], "cluster.json"))
deadline = time.monotonic() + 180
while True:
    st = client.status()
    idle = [w for w in st["workers"] if w["state"] == "idle"]
    if len({w["node_id"] for w in idle}) >= 3 or time.monotonic() > deadline:
        break
    time.sleep(0.5)

def loop():
    import torch, torch.distributed as dist
    t = torch.ones(1)
    dist.all_reduce(t)
    raynb.train.report({"sum": t.item(), "node": os.environ["RAYNB_NODE_ID"]})

r = TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=3, placement_strategy="SPREAD"),
                 run_config=RunConfig(verbose=0)).fit()
print("RESULT " + json.dumps({"nodes": sorted(n["node_id"] for n in client.status()["nodes"]),
                              "sum": r.metrics["sum"],
                              "job": os.environ.get("SLURM_JOB_ID")}), flush=True)
"""


def _harness(bindir: Path) -> None:
    bindir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("hostname", HOSTNAME)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)


def test_the_slurm_script_runs_a_cluster_over_its_nodes(tmp_path):
    why = netns.available()
    if why:
        pytest.skip(why)
    hosts = ["node0", "node1", "node2"]
    bindir = tmp_path / "bin"
    _harness(bindir)
    (tmp_path / "train.py").write_text(TRAIN)
    job = str(os.getpid())
    home = tmp_path / "home"
    env = dict(
        os.environ,
        PATH=f"{bindir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        RAYNB_HOME=str(home),
        RAYNB_STORAGE_PATH=str(tmp_path / "results"),
        WORKERS_PER_NODE="1",
        SLURM_JOB_ID=job,
        SLURM_JOBID=job,
        SLURM_JOB_NODELIST=",".join(hosts),
        SLURM_NODELIST=",".join(hosts),
        SLURM_JOB_NUM_NODES="3",
        SLURM_NNODES="3",
        SLURM_NODEID="0",
        SLURMD_NODENAME=hosts[0],
        SLURM_CPUS_PER_TASK="8",
        SLURM_SUBMIT_DIR=str(tmp_path),
        RAYNB_PROGRESS="text",
    )
    net = netns.Net(hosts, tag="sl")
    env["HARNESS_NS"] = net.tag
    try:
        r = net.run(
            hosts[0],
            ["bash", str(EXAMPLES / "slurm" / "raynb.sbatch"), str(tmp_path / "train.py")],
            env=env,
            timeout=400,
            cwd=tmp_path,
        )
        left = {h: net.wait_empty(h) for h in hosts}
    finally:
        net.close()
        for h in hosts:
            shutil.rmtree(f"/tmp/raynb-{job}-{h}", ignore_errors=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(line[len("RESULT ") :])
    assert out["sum"] == 3.0 and out["job"] == job
    assert {"node1", "node2"} <= set(out["nodes"]) and len(out["nodes"]) == 3, out
    assert left == {h: [] for h in hosts}, left  # `raynb stop` ended the head and every node agent
