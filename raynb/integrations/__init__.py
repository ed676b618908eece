"""Experiment tracking: MLflow (:class:`MLflowLoggerCallback`, :func:`setup_mlflow`) and
TensorBoard (:class:`TBXLoggerCallback`), as Ray names them.

::

    from raynb.integrations import MLflowLoggerCallback
    RunConfig(callbacks=[MLflowLoggerCallback(tracking_uri="sqlite:///mlflow.db")])

Importing this package imports neither ``mlflow`` nor ``tensorboard``: a logger imports
its library when a run starts (``pip install 'raynb[tracking]'`` installs both).
"""

from .mlflow import MLflowLoggerCallback, setup_mlflow
from .tensorboard import TBXLoggerCallback

__all__ = ["MLflowLoggerCallback", "TBXLoggerCallback", "setup_mlflow"]
