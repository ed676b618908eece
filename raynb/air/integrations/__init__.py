"""Ray AIR's integrations (``ray.air.integrations``): ``mlflow``."""
