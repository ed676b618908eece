"""``ray.air.integrations.mlflow``: :class:`MLflowLoggerCallback` and :func:`setup_mlflow`,
the same objects as ``raynb.integrations.mlflow``'s."""

from ...integrations.mlflow import MLflowLoggerCallback, setup_mlflow

__all__ = ["MLflowLoggerCallback", "setup_mlflow"]
