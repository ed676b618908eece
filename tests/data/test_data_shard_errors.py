"""read_webdataset and read_tfrecords on hostile or broken files: members named outside
the shard are only keys (nothing is extracted), links are skipped, pickles are never
unpickled, and a broken shard, record or member is named in a ValueError with the fix."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile

import numpy as np
import pytest

import raynb.data as rd
from raynb.data.tfrecords import example_class


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _tar(path, members) -> str:
    with tarfile.open(path, "w") as t:
        for name, data, kw in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            for k, v in kw.items():
                setattr(ti, k, v)
            t.addfile(ti, io.BytesIO(data) if data else None)
    return str(path)


def test_members_outside_the_shard_and_links_are_never_written(tmp_path):
    shard = _tar(
        tmp_path / "s.tar",
        [
            ("../../a.txt", b"x", {}),
            ("../../a.cls", b"1", {}),
            ("/etc/b.txt", b"y", {}),
            ("/etc/b.cls", b"2", {}),
            ("c.txt", b"", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
        ],
    )
    rows = rd.read_webdataset(shard).take_all()
    assert [(r["__key__"], r["txt"]) for r in rows] == [("../../a", "x"), ("/etc/b", "y")]
    assert sorted(os.listdir(tmp_path)) == ["s.tar"]


def test_pickled_members_are_never_unpickled(tmp_path):
    marker = tmp_path / "PWNED"
    _Evil.marker = str(marker)
    buf = io.BytesIO()
    np.save(buf, np.array([_Evil()], dtype=object), allow_pickle=True)
    for name, data in (
        ("a.pkl", pickle.dumps(_Evil())),
        ("a.npy", buf.getvalue()),
        ("a.PT", pickle.dumps(_Evil())),
    ):
        shard = _tar(tmp_path / f"{name}.tar", [(name, data, {})])
        try:
            rows = rd.read_webdataset(shard).take_all()
            assert isinstance(next(v for k, v in rows[0].items() if not k.startswith("__")), bytes)
        except ValueError as e:
            assert "pickle" in str(e)
    assert not marker.exists()


@pytest.mark.parametrize(
    "name,data,why",
    [
        ("a.json", b"{no", "JSONDecodeError"),
        ("a.cls", b"zz", "invalid literal"),
        ("a.jpg", b"no", "Unidentified"),
    ],
)
def test_a_member_that_does_not_decode_names_the_shard_and_sample(tmp_path, name, data, why):
    shard = _tar(tmp_path / "s.tar", [(name, data, {})])
    with pytest.raises(
        ValueError, match=rf"read_webdataset: .*s\.tar: sample 'a' does not decode \(.*{why}.*decoder=None"
    ):
        rd.read_webdataset(shard)
    assert rd.read_webdataset(shard, decoder=None).take_all()[0][name.split(".")[1]] == data


def test_a_truncated_shard_is_named(tmp_path):
    shard = _tar(tmp_path / "s.tar", [("a.txt", b"x" * 100_000, {})])
    data = open(shard, "rb").read()
    open(shard, "wb").write(data[:5000])
    with pytest.raises(ValueError, match=r"s\.tar is not a whole tar file \(unexpected end of data\)"):
        rd.read_webdataset(shard)


def _record(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + b"\0" * 4 + payload + b"\0" * 4


def test_a_corrupt_or_truncated_record_is_named(tmp_path):
    ex = example_class()()
    ex.features.feature["x"].int64_list.value.append(3)
    good = _record(ex.SerializeToString())
    (tmp_path / "ok.tfrecords").write_bytes(good * 2)
    assert rd.read_tfrecords(str(tmp_path / "ok.tfrecords")).take_all() == [{"x": 3}, {"x": 3}]
    (tmp_path / "bad.tfrecords").write_bytes(good + _record(b"\xff" * 5))
    with pytest.raises(ValueError, match=r"bad\.tfrecords: record 1 is not a tf\.train\.Example"):
        rd.read_tfrecords(str(tmp_path / "bad.tfrecords"))
    (tmp_path / "cut.tfrecords").write_bytes(good + good[:-6])
    with pytest.raises(ValueError, match=r"cut\.tfrecords ends inside a record at byte"):
        rd.read_tfrecords(str(tmp_path / "cut.tfrecords"))
    (tmp_path / "empty.tfrecords").write_bytes(b"")
    with pytest.raises(ValueError, match=r"the files hold no records"):
        rd.read_tfrecords(str(tmp_path / "empty.tfrecords"))
