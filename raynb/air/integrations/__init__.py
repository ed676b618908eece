"""``ray.air.integrations``: experiment-tracking integrations (``mlflow``)."""
