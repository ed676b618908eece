"""PyTorch Lightning on raynb's warm ranks (``ray.train.lightning``).

Inside a ``TorchTrainer`` function::

    trainer = pl.Trainer(devices="auto", accelerator="auto", strategy=RayDDPStrategy(),
                         plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()])
    trainer = prepare_trainer(trainer)
    trainer.fit(model, train_dataloaders=loader)

Lightning then trains over the run's ranks on raynb's existing process group, without
launching processes. Works with the ``lightning`` and the ``pytorch_lightning`` package.

Raises:
    ImportError: on import, when neither is installed (``pip install "raynb[lightning]"``).
"""
from .callback import RayTrainReportCallback
from .guard import install_trainer_check
from .strategies import (RayDDPStrategy, RayDeepSpeedStrategy, RayFSDPStrategy, RayLightningEnvironment,
                         prepare_trainer)

install_trainer_check()

__all__ = ["RayDDPStrategy", "RayFSDPStrategy", "RayDeepSpeedStrategy", "RayLightningEnvironment",
           "RayTrainReportCallback", "prepare_trainer"]
