"""Framework callbacks that report to Tune (``ray.tune.integration``): ``xgboost``, ``lightgbm``."""
