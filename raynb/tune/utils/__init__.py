"""Tune utilities (``ray.tune.utils``): ``mock_trainable.MyTrainableClass``."""
