"""``from_tf`` (Ray Data's): a ``tf.data.Dataset``'s elements as rows, dict elements giving
their keys as columns, as Ray's (which is ``from_items(list(ds.as_numpy_iterator()))``)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import raynb.data as rd  # noqa: E402

pytestmark = pytest.mark.tensorflow


def test_from_tf_of_dict_and_plain_elements():
    feats = np.arange(12, dtype=np.float32).reshape(6, 2)
    ds = rd.from_tf(tf.data.Dataset.from_tensor_slices({"x": feats, "y": np.arange(6)}))
    assert ds.count() == 6 and ds.schema().names == ["x", "y"]
    rows = ds.take_all()
    assert [r["y"] for r in rows] == list(range(6))
    assert np.array_equal(np.stack([r["x"] for r in rows]), feats)
    plain = rd.from_tf(tf.data.Dataset.range(4))
    assert [r["item"] for r in plain.take_all()] == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="tf.data.Dataset"):
        rd.from_tf([1, 2])
