"""``RunConfig(storage_path="s3://...")``: checkpoints uploaded by the head to a real
S3-compatible server (moto's, on loopback), pruned there, read back by the client, and
resumed from after a failure; a missing bucket or an unreachable endpoint fails the run
naming the URI. The head's environment has the credentials, as pyarrow.fs reads them."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time

import pytest
from conftest import private_cluster, wait_idle_workers

pafs = pytest.importorskip("pyarrow.fs")
moto_server = pytest.importorskip("moto.server")

import torch.distributed  # noqa: E402

import raynb  # noqa: E402
from raynb import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from raynb.errors import RunError  # noqa: E402
from raynb.train import Result, get_checkpoint, get_context, report  # noqa: E402
from raynb.train.torch import TorchTrainer  # noqa: E402

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(endpoint "127.0.0.1:PORT", a pyarrow S3FileSystem of it, a raynb cluster of 2
    workers whose head has the credentials)."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"{host}:{port}"
        with pytest.MonkeyPatch.context() as mp:
            for k, v in AWS_ENV.items():
                mp.setenv(k, v)
            fs = pafs.S3FileSystem(
                endpoint_override=endpoint,
                scheme="http",
                region="us-east-1",
                access_key="testing",
                secret_key="testing",
                allow_bucket_creation=True,
            )
            fs.create_dir("bucket")
            tmp = tmp_path_factory.mktemp("s3")
            mp.setenv("RAYNB_STORAGE_PATH", str(tmp / "staging"))
            with private_cluster(tmp, mp, workers=2) as (info, client, pids):
                yield endpoint, fs, client
    finally:
        server.stop()


def _uri(endpoint: str, bucket: str = "bucket") -> str:
    return f"s3://{bucket}/runs?endpoint_override={endpoint}&scheme=http"


def _train(config):
    ctx = get_context()
    rank = ctx.get_world_rank()
    start = get_checkpoint()
    epoch0 = 0
    if start is not None:
        with start.as_directory() as d:
            epoch0 = json.load(open(os.path.join(d, "state.json")))["epoch"] + 1
    for epoch in range(epoch0, config["epochs"]):
        if epoch == config.get("fail_at"):
            # Both ranks' reports of the epoch before are sent before rank 0 fails: nothing
            # else here keeps the ranks in step (training would, by its all-reduce), and a
            # checkpoint counts only once every rank reported it.
            torch.distributed.barrier()
            time.sleep(0.5)
        if epoch == config.get("fail_at") and rank == 0 and not os.path.exists(config["flag"]):
            open(config["flag"], "w").close()
            raise RuntimeError("rank 0 fails once")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json" if rank == 0 else f"shard_{rank}.json"), "w") as f:
                json.dump({"epoch": epoch, "rank": rank}, f)
            report({"epoch": epoch, "resumed_from": epoch0}, checkpoint=Checkpoint.from_directory(d))


def _names(fs, prefix: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(prefix, recursive=True))
    return sorted(i.path[len(prefix) + 1 :] for i in infos if i.type == pafs.FileType.File)


def _fit(endpoint, name, config, **run_kw):
    return TorchTrainer(
        _train,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(
            name=name,
            storage_path=_uri(endpoint, run_kw.pop("bucket", "bucket")),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            verbose=0,
            **run_kw,
        ),
    ).fit()


def test_checkpoints_go_to_the_bucket_are_pruned_there_and_read_back(s3, tmp_path):
    endpoint, fs, client = s3
    wait_idle_workers(client, 2)
    result = _fit(endpoint, "s3-run", {"epochs": 4})
    assert result.error is None, result.error
    # num_to_keep=2: the two newest, each with every rank's files, and nothing else.
    assert _names(fs, "bucket/runs/s3-run") == [
        f"checkpoint_00000{i}/{f}" for i in (2, 3) for f in ("shard_1.json", "state.json")
    ]
    ckpt = result.checkpoint
    assert ckpt.path == f"s3://bucket/runs/s3-run/checkpoint_000003?endpoint_override={endpoint}&scheme=http"
    assert isinstance(ckpt.filesystem, pafs.S3FileSystem)
    with ckpt.as_directory() as d:
        assert json.load(open(os.path.join(d, "state.json"))) == {"epoch": 3, "rank": 0}
        assert sorted(os.listdir(d)) == ["shard_1.json", "state.json"]
    assert not os.path.exists(d)  # the download is removed after the block
    assert [c.path.split("?")[0].rsplit("/", 1)[1] for c, _ in result.best_checkpoints] == [
        "checkpoint_000002",
        "checkpoint_000003",
    ]
    out = ckpt.to_directory(tmp_path / "copy")
    assert json.load(open(os.path.join(out, "shard_1.json"))) == {"epoch": 3, "rank": 1}
    # The run directory (logs, run.json) stayed on the head's disk under the default path.
    assert result.path == os.path.join(os.environ["RAYNB_STORAGE_PATH"], "s3-run")
    assert os.path.exists(os.path.join(result.path, "run.json"))
    assert Checkpoint(result.best_checkpoints[0][0].path) == result.best_checkpoints[0][0]
    # The head's record and the run directory read back name the same URIs.
    assert raynb.get_run("s3-run").checkpoint.path == ckpt.path
    assert Result.from_path(result.path).checkpoint.path == ckpt.path
    # A new run resuming from the checkpoint's URI: each rank downloads it from the bucket.
    again = TorchTrainer(
        _train,
        train_loop_config={"epochs": 5},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="s3-resumed", verbose=0),
        resume_from_checkpoint=ckpt,
    ).fit()
    assert [(r["epoch"], r["resumed_from"]) for r in again.metrics_dataframe.to_dict("records")] == [(4, 4)]


def test_a_failed_attempt_resumes_from_the_checkpoint_in_the_bucket(s3, tmp_path):
    endpoint, fs, client = s3
    wait_idle_workers(client, 2)
    result = _fit(
        endpoint,
        "s3-restart",
        {"epochs": 4, "fail_at": 2, "flag": str(tmp_path / "failed")},
        failure_config=FailureConfig(max_failures=1),
    )
    assert result.error is None, result.error
    rows = result.metrics_dataframe.to_dict("records")
    assert [(r["epoch"], r["resumed_from"]) for r in rows] == [(0, 0), (1, 0), (2, 2), (3, 2)]
    assert len(result.failures) == 1 and "rank 0 fails once" in str(result.failures[0])
    with fs.open_input_stream("bucket/runs/s3-restart/checkpoint_000003/state.json") as f:
        assert json.loads(f.read()) == {"epoch": 3, "rank": 0}
    assert _names(fs, "bucket/runs/s3-restart") == [
        f"checkpoint_00000{i}/{f}" for i in (2, 3) for f in ("shard_1.json", "state.json")
    ]


def test_a_missing_bucket_or_unreachable_endpoint_fails_the_run_naming_the_uri(s3):
    endpoint, fs, client = s3
    wait_idle_workers(client, 2)
    with pytest.raises(RunError, match=r"s3://nobucket/runs.*bucket 'nobucket' does not exist"):
        _fit(endpoint, "s3-nobucket", {"epochs": 2}, bucket="nobucket")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(RunError, match=rf"storage_path s3://bucket/runs\?endpoint_override={dead}"):
        _fit(dead, "s3-unreachable", {"epochs": 2})
    assert client.status()["workers"]  # the head lives on
    # A scheme pyarrow.fs does not know is refused before anything ships.
    with pytest.raises(ValueError, match="not a URI pyarrow.fs can open"):
        TorchTrainer(
            _train,
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(storage_path="nosuchfs://x/y"),
        ).fit()


def test_a_tuner_refuses_an_object_store_before_anything_runs(s3):
    from raynb.tune import Tuner

    endpoint, fs, client = s3
    trainer = TorchTrainer(
        _train, train_loop_config={"epochs": 1}, scaling_config=ScalingConfig(num_workers=1)
    )
    with pytest.raises(
        ValueError,
        match=r"Tuner writes its directory from the notebook and does not "
        r"upload to an object store",
    ):
        Tuner(
            trainer,
            param_space={"train_loop_config": {"epochs": 1}},
            run_config=RunConfig(storage_path=_uri(endpoint)),
        ).fit()
    assert not os.path.exists("s3:")  # no experiment directory named after the URI's text
