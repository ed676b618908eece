"""Run at every Python start whose path has this folder first (the scripts of
tests/compat/test_ray_examples_generated_data.py and the processes of the cluster they
run on): Ray's example scripts get generated data where they would download it. Test-only;
see _generated_data.py."""

import _generated_data

_generated_data.install()

# This MLflow refuses a new ./mlruns file store unless told (Ray's CI has an older MLflow);
# the MLflow examples log to one.
import os  # noqa: E402

os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
