"""raynb without Ray imports no Ray; ``--ray`` without Ray, with a Ray of another version,
or with no Ray cluster at the address fails at once with a message naming the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from raynb.cluster.launch.ray_engine import check_ray_version
from raynb.errors import ClusterError


def _py(code: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def test_raynb_imports_no_ray():
    r = _py(
        "import sys, raynb, raynb.train, raynb.tune, raynb.cli, raynb.train.torch\n"
        "import raynb.cluster.launch.local, raynb.client.jobs, raynb.cluster.head.server\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_ray_version_outside_the_range_names_both_versions():
    check_ray_version("2.60.0")
    check_ray_version("2.60.3")
    for v in ("2.59.1", "2.61.0", "3.0.0"):
        with pytest.raises(ClusterError, match=rf"Ray {v} is installed, but raynb supports Ray >=2.60,<2.61"):
            check_ray_version(v)


def test_start_ray_without_ray_installed_says_to_install_the_extra(tmp_path):
    # A Ray that cannot be imported (None in sys.modules makes `import ray` fail).
    r = _py(
        "import sys; sys.modules['ray'] = None\n"
        "from raynb.cli import main; sys.exit(main(['start', '--ray']))",
        env={"RAYNB_HOME": str(tmp_path / "home")},
    )
    assert r.returncode == 2, r.stderr
    assert 'pip install "raynb[ray]"' in r.stderr and "not installed" in r.stderr


def _gcs_running() -> bool:
    import psutil

    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith("gcs_server"):
            return True
    return False


def test_no_ray_cluster_at_the_address_names_it_and_how_to_start_one():
    pytest.importorskip("ray", reason='Ray is not installed: pip install "raynb[ray]"')
    home = tempfile.mkdtemp(prefix="rh-bad.")
    tmp = tempfile.mkdtemp(prefix="rre.")  # an empty RAY_TMPDIR: "auto" finds no cluster there
    try:
        # Ray's "auto" also finds any GCS process running on this machine (another user's
        # cluster): it can only be expected to find nothing when none runs.
        addresses = ("127.0.0.1:1", "nonsense") if _gcs_running() else ("127.0.0.1:1", "auto", "nonsense")
        for address in addresses:
            r = _py(
                f"import sys; from raynb.cli import main; sys.exit(main(['start', '--ray', "
                f"'--ray-address', {address!r}]))",
                env={"RAYNB_HOME": home, "RAY_TMPDIR": tmp, "RAY_ADDRESS": ""},
            )
            assert r.returncode == 2, (address, r.stdout, r.stderr)
            if address == "nonsense":
                assert "is not 'auto' or HOST:PORT" in r.stderr
            else:
                assert f"no Ray cluster at {address}" in r.stderr and "ray start --head" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(home, "cluster.json"))
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_bad_worker_counts_are_refused_before_ray_is_touched():
    from raynb.cluster.launch.ray_engine import start_on_ray

    with pytest.raises(ValueError, match="workers_per_node must be at least 1"):
        start_on_ray("127.0.0.1:1", workers_per_node=0)
    with pytest.raises(ValueError, match="gpus_per_node must be a whole number"):
        start_on_ray("127.0.0.1:1", gpus_per_node=-1)


def test_storage_path_uri_is_a_local_path_or_an_object_store_pyarrow_opens():
    from raynb.cluster.storage.storage_uri import check_storage_uri, is_storage_uri, local_path_of, redact

    assert local_path_of("file:///tmp/a%20b") == "/tmp/a b"
    # An object store is no local path: the head uploads checkpoints there (test_storage_s3.py).
    with pytest.raises(ValueError, match=r"s3:// file system, not a local path"):
        local_path_of("s3://bucket/results")
    assert is_storage_uri("s3://bucket/results") and not is_storage_uri("file:///tmp")
    assert check_storage_uri("s3://bucket/results") == "s3://bucket/results"
    with pytest.raises(ValueError, match="not a URI pyarrow.fs can open"):
        local_path_of("file://otherhost/results")
    with pytest.raises(ValueError, match="'nosuchfs://x' is not a URI pyarrow.fs can open"):
        check_storage_uri("nosuchfs://x")
    assert redact("s3://b/p?secret_key=abc&scheme=http") == "s3://b/p?secret_key=***&scheme=http"
