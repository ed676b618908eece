"""``Dataset.to_tf`` / ``DataIterator.to_tf`` (Ray Data's): batches as a ``tf.data.Dataset``
of ``(features, labels)``, a column name giving a tensor and a list of names a dict."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

import raynb.data as rd  # noqa: E402

pytestmark = pytest.mark.tensorflow


def test_to_tf_of_a_dataset_and_of_a_shard():
    ds = rd.from_items([{"x": [float(i), 2.0 * i], "y": float(i), "z": i} for i in range(10)])
    batches = list(ds.to_tf("x", "y", batch_size=4))
    assert [tuple(f.shape) for f, _ in batches] == [(4, 2), (4, 2), (2, 2)]
    assert [float(v) for _, labels in batches for v in labels] == [float(i) for i in range(10)]

    shard = ds.shard(2, 1)
    (features, labels), *_ = list(shard.to_tf(["x", "z"], "y", batch_size=8))
    assert sorted(features) == ["x", "z"] and features["z"].numpy().tolist() == [5, 6, 7, 8, 9]
    assert [float(v) for v in labels] == [5.0, 6.0, 7.0, 8.0, 9.0]
    assert [tuple(f.shape) for f in ds.to_tf("x", batch_size=10)] == [(10, 2)]
