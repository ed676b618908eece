"""Columns of Python objects (strings of any length, lists, dicts, ragged arrays) through
``TorchTrainer(datasets=...)`` to the ranks on the shared warm cluster: numeric columns
keep the zero-copy shared-memory path, object columns travel by Arrow (in the same
segment) or pickled in the payload, and every row lands in exactly one shard. Also Ray
Data's batch-inference quick start with its imports changed, and a Ray-style pipeline
(transforms, split, a class in map_batches) read on the ranks."""

from __future__ import annotations

import os
from typing import Dict

import numpy as np

import raynb.data as rd
from raynb.train import RunConfig, ScalingConfig, get_context, get_dataset_shard
from raynb.train.torch import TorchTrainer

QUIET = RunConfig(verbose=0)
N = 200  # even: with 2 ranks no row is padded in, so each is in exactly one shard


def make_rows(n=N):
    return [
        {
            "id": i,
            "vec": np.full(3, i, dtype=np.float32),
            "text": "w" * (i * 997 % 5000) + str(i),  # strings of very different lengths
            "tokens": list(range(i % 7)),  # lists, some empty
            "meta": {"i": i, "tag": "odd" if i % 2 else "even"} if i % 3 else {"only": i},  # dicts, keys vary
            "ragged": np.arange(i % 5, dtype=np.int64),
        }  # ragged arrays
        for i in range(n)
    ]


def _to_files(fn):
    """The training function: each rank pickles ``fn()``'s value to ``config["out"]/rank_<r>.pkl``
    (the cluster is on this machine)."""

    def loop(config):
        import pickle

        with open(os.path.join(config["out"], f"rank_{get_context().get_world_rank()}.pkl"), "wb") as f:
            pickle.dump(fn(), f)

    return loop


def _read(out, n=2) -> list:
    import pickle

    return [pickle.loads((out / f"rank_{r}.pkl").read_bytes()) for r in range(n)]


def _rank_rows():
    from raynb.cluster.node import shm

    shard = get_dataset_shard("train")
    src = shard._ds._source
    rows = []
    for batch in shard.iter_batches(batch_size=64):
        for i in range(len(batch["id"])):
            rows.append(
                {
                    "id": int(batch["id"][i]),
                    "vec": batch["vec"][i].tolist(),
                    "text": batch["text"][i],
                    "tokens": batch["tokens"][i],
                    "meta": batch["meta"][i],
                    "ragged": batch["ragged"][i].tolist(),
                }
            )
    vec = src.columns()["vec"]
    base = vec
    while isinstance(base, np.ndarray):
        base = base.base
    base = base.obj if isinstance(base, memoryview) else base
    frame = shard.to_pandas()
    return {
        "rows": rows,
        "arrow": sorted(src._arrow),
        "pickled": sorted(src._pickled),
        "vec_in_shm": type(base).__name__ == "mmap",
        "segments": len(shm.segments(os.environ["RAYNB_NODE_ID"])),
        "frame_rows": len(frame),
        "materialized": shard.materialize().count(),
    }


def test_object_columns_reach_two_ranks_each_row_in_exactly_one_shard(warm, tmp_path):
    rows = make_rows()
    ds = rd.from_items(rows)
    TorchTrainer(
        _to_files(_rank_rows),
        train_loop_config={"out": str(tmp_path)},
        datasets={"train": ds},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=QUIET,
    ).fit()
    per_rank = _read(tmp_path)
    ids = [[r["id"] for r in rank["rows"]] for rank in per_rank]
    assert sorted(ids[0] + ids[1]) == list(range(N)) and not set(ids[0]) & set(ids[1])
    for rank in per_rank:
        for got in rank["rows"]:
            want = rows[got["id"]]
            assert (
                got["text"] == want["text"]
                and got["tokens"] == want["tokens"]
                and got["meta"] == want["meta"]
            )
            assert got["vec"] == want["vec"].tolist() and got["ragged"] == want["ragged"].tolist()
        # strings, lists and ragged arrays by Arrow in the shared segment; dicts (keys vary) pickled
        assert rank["arrow"] == ["ragged", "text", "tokens"] and rank["pickled"] == ["meta"]
        assert rank["vec_in_shm"], "the numeric column is a view of the node's shared copy"
        assert rank["segments"] == 1, "one segment per node holds the numeric and Arrow columns"
        assert rank["frame_rows"] == rank["materialized"] == N // 2


def _pipeline_rank():
    shard = get_dataset_shard("train")
    seen = {"rows": 0, "instances": set(), "labels": set()}
    for batch in shard.iter_batches(batch_size=16):
        seen["rows"] += len(batch["n_tokens"])
        seen["instances"].update(batch["instance"].tolist())
        seen["labels"].update(batch["label"].tolist())
    import torch

    t = next(
        iter(shard.iter_torch_batches(batch_size=8, collate_fn=lambda b: torch.as_tensor(b["n_tokens"])))
    )
    return {
        "rows": seen["rows"],
        "instances": len(seen["instances"]),
        "labels": sorted(seen["labels"]),
        "tensor": str(t.dtype),
        "val": get_dataset_shard("val").materialize().count(),
    }


class Featurize:
    """A callable class in map_batches: built once per rank, as one actor of Ray's pool."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        return {
            "n_tokens": np.array([len(t) * self.scale for t in batch["tokens"]], dtype=np.int64),
            "label": np.array([m.get("tag", "none") for m in batch["meta"]], dtype=object),
            "instance": np.full(len(batch["tokens"]), id(self), dtype=np.int64),
        }


def test_a_ray_data_pipeline_read_on_the_ranks(warm, tmp_path):
    ds = (
        rd.from_items(make_rows())
        .filter(lambda r: r["id"] < 160)
        .map(lambda r: {**r, "tokens": r["tokens"] + [0]})
        .drop_columns(["ragged", "vec"])
        .random_shuffle(seed=1)
    )
    train, val = ds.train_test_split(test_size=0.25)
    train = train.map_batches(Featurize, fn_constructor_args=(2,), concurrency=2, batch_size=10)
    TorchTrainer(
        _to_files(_pipeline_rank),
        train_loop_config={"out": str(tmp_path)},
        datasets={"train": train, "val": val},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=QUIET,
    ).fit()
    per_rank = _read(tmp_path)
    assert [r["rows"] for r in per_rank] == [60, 60]
    assert [r["instances"] for r in per_rank] == [1, 1], "the class is built once per rank, not per batch"
    assert set(per_rank[0]["labels"]) | set(per_rank[1]["labels"]) == {"even", "odd", "none"}
    assert per_rank[0]["tensor"] == "torch.int64" and [r["val"] for r in per_rank] == [20, 20]


def test_batch_inference_quick_start_imports_changed(capsys):
    # Ray Data's batch-inference quick start: `import ray` -> raynb, data generated.
    import torch
    import torch.nn as nn

    import raynb as ray

    ds = ray.data.from_numpy(np.ones((1, 100)))

    class TorchPredictor:
        def __init__(self):
            self.model = nn.Sequential(nn.Linear(in_features=100, out_features=1), nn.Sigmoid())
            self.model.eval()

        def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
            tensor = torch.as_tensor(batch["data"], dtype=torch.float32)
            with torch.inference_mode():
                return {"output": self.model(tensor).numpy()}

    for predictions in (
        ds.map_batches(TorchPredictor, compute=ray.data.ActorPoolStrategy(size=2)),
        ds.map_batches(TorchPredictor, concurrency=2),
    ):
        predictions.show(limit=1)
        out = capsys.readouterr().out.strip().splitlines()
        assert (
            len(out) == 1 and out[0].startswith("{'output': array([0.") and out[0].endswith("dtype=float32)}")
        )
        assert predictions.take_all()[0]["output"].shape == (1,)


def _socket_rows():
    shard = get_dataset_shard("train")
    return [(int(r["id"]), r["text"], r["tokens"], r["meta"]) for r in shard.iter_rows()]


def test_object_columns_through_a_node_agents_data_socket(warm, tmp_path, monkeypatch):
    """The path to node agents on other hosts (forced for the local one): the Arrow streams
    travel in the same signed segment as the numeric columns."""
    monkeypatch.setenv("RAYNB_DATA_VIA_SOCKET", "1")
    rows = make_rows(40)
    TorchTrainer(
        _to_files(_socket_rows),
        train_loop_config={"out": str(tmp_path)},
        datasets={"train": rd.from_items(rows)},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=QUIET,
    ).fit()
    got = sorted(r for rank in _read(tmp_path) for r in rank)
    assert got == [(r["id"], r["text"], r["tokens"], r["meta"]) for r in rows]
