"""TrainContext.get_storage().build_checkpoint_path_from_name(): a path inside the run
directory, never one a name leads out of (absolute, ``..``)."""

from __future__ import annotations

import pytest

from raynb.train.storage_context import StorageContext


def _storage() -> StorageContext:
    return StorageContext("/r", "run", "/r/run", "/r")


def test_a_checkpoint_name_is_a_path_in_the_run_directory():
    assert _storage().build_checkpoint_path_from_name("checkpoint_000001") == "/r/run/checkpoint_000001"
    assert _storage().build_checkpoint_path_from_name("epoch_1/step_2") == "/r/run/epoch_1/step_2"


@pytest.mark.parametrize("bad", ["../x", "/etc", "a/../../x", "..", ".", "", "nul\0"])
def test_a_name_leading_out_of_the_run_directory_is_refused(bad):
    with pytest.raises(
        ValueError, match=r"a checkpoint's name is a directory name inside the run directory /r/run"
    ):
        _storage().build_checkpoint_path_from_name(bad)
