"""raynb.data against real ray.data (Ray 2.60, in this process, one CPU): the same calls on
the same rows give the same rows. Ray starts once for the module (tens of seconds) and
is shut down after; its session files go to a temp dir of ours."""

from __future__ import annotations

import numpy as np
import pytest
from support.ray_data_session import norm, ray_data_session

import raynb.data as rd


@pytest.fixture(scope="module")
def ray_data():
    pytest.importorskip("ray")
    with ray_data_session("rdv.", sort_shuffle=True) as data:
        yield data


def rows(n=12):
    return [
        {
            "id": i,
            "k": i % 3,
            "v": float(i) / 2,
            "s": "x" * (i % 4),
            "tags": ["t"] * (i % 3),
            "meta": {"a": i, "b": str(i)},
        }
        for i in range(n)
    ]


def same(build, ray_data, how=lambda ds: ds.take_all()):
    """``build(module)`` on raynb.data and on ray.data, consumed by ``how``: equal."""
    mine, theirs = norm(how(build(rd))), norm(how(build(ray_data)))
    assert mine == theirs, f"raynb: {mine}\nray:   {theirs}"
    return mine


def test_constructors_and_consumption_match_ray(ray_data):
    same(lambda m: m.from_items(rows()), ray_data)
    same(lambda m: m.from_items([1, "two", 3.0]), ray_data)
    same(lambda m: m.range(7), ray_data, lambda ds: ds.take(3))
    same(lambda m: m.from_numpy(np.arange(12).reshape(4, 3)), ray_data, lambda ds: ds.take_batch(2))
    same(lambda m: m.from_items(rows()), ray_data, lambda ds: ds.columns())
    same(lambda m: m.from_items(rows()), ray_data, lambda ds: ds.count())
    same(lambda m: m.from_items(rows()), ray_data, lambda ds: list(ds.iter_rows())[:3])
    same(
        lambda m: m.from_items(rows()),
        ray_data,
        lambda ds: [len(b["id"]) for b in ds.iter_batches(batch_size=5)],
    )
    same(
        lambda m: m.from_items(rows()),
        ray_data,
        lambda ds: ds.select_columns(["id", "s", "tags"]).to_pandas().to_dict("list"),
    )
    same(lambda m: m.from_items(rows()), ray_data, lambda ds: ds.materialize().count())


def test_transforms_match_ray(ray_data):
    base = lambda m: m.from_items(rows())  # noqa: E731
    same(lambda m: base(m).map(lambda r: {"id": r["id"], "n": len(r["tags"]) + r["k"]}), ray_data)
    same(lambda m: base(m).filter(lambda r: r["k"] == 1), ray_data)
    same(lambda m: base(m).flat_map(lambda r: [{"c": c} for c in r["s"]]), ray_data)
    same(lambda m: base(m).add_column("w", lambda df: df["v"] * 2).drop_columns(["meta", "tags"]), ray_data)
    same(lambda m: base(m).select_columns(["s", "id"]), ray_data)
    same(
        lambda m: m.range(10).map_batches(lambda b, k: {"id": b["id"] * k}, fn_args=(3,), batch_size=4),
        ray_data,
    )
    same(
        lambda m: m.range(10).map_batches(lambda df: df.assign(sq=df["id"] ** 2), batch_format="pandas"),
        ray_data,
    )

    class Offset:
        def __init__(self, off):
            self.off = off

        def __call__(self, batch):
            return {"id": batch["id"] + self.off}

    same(lambda m: m.range(6).map_batches(Offset, fn_constructor_args=(10,), concurrency=1), ray_data)
    same(
        lambda m: m.range(6).map_batches(
            Offset, fn_constructor_kwargs={"off": 5}, compute=m.ActorPoolStrategy(size=1)
        ),
        ray_data,
    )


def test_whole_dataset_operations_match_ray(ray_data):
    base = lambda m: m.from_items(rows())  # noqa: E731
    same(lambda m: base(m).sort("v", descending=True), ray_data)
    same(lambda m: base(m).sort(["k", "id"], descending=[True, False]), ray_data)
    by_key = lambda ds: sorted(ds.take_all(), key=lambda r: r["k"])  # noqa: E731 - Ray 2.60's groups come unordered
    for agg in ("count", "sum", "mean", "min", "max"):
        same(lambda m, a=agg: getattr(base(m).select_columns(["k", "v"]).groupby("k"), a)(), ray_data, by_key)
    same(lambda m: base(m).groupby("k").mean("v"), ray_data, by_key)
    same(lambda m: base(m), ray_data, lambda ds: ds.sum("v"))
    same(lambda m: base(m), ray_data, lambda ds: ds.limit(4).take_all())
    same(lambda m: m.range(3).union(m.range(2)), ray_data, lambda ds: sorted(r["id"] for r in ds.take_all()))
    same(lambda m: m.range(10), ray_data, lambda ds: [d.take_all() for d in ds.split(3, equal=True)])
    same(lambda m: m.range(10), ray_data, lambda ds: [d.take_all() for d in ds.train_test_split(0.25)])
    same(lambda m: m.range(10), ray_data, lambda ds: [d.take_all() for d in ds.train_test_split(3)])
    same(
        lambda m: m.range(10), ray_data, lambda ds: [d.count() for d in ds.split_proportionately([0.2, 0.5])]
    )
    same(
        lambda m: m.range(10),
        ray_data,
        lambda ds: sorted(r["id"] for r in ds.random_shuffle(seed=1).take_all()),
    )
    same(lambda m: m.range(10), ray_data, lambda ds: ds.repartition(3).take_all())
