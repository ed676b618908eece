"""Hugging Face Transformers (and Accelerate) on raynb's warm ranks
(``ray.train.huggingface.transformers``).

Inside a ``TorchTrainer`` function a ``transformers.Trainer`` (and ``accelerate.Accelerator()``)
sees raynb's world from the ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` variables raynb sets,
and uses the run's process group, formed before the function started::

    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds,
                                   callbacks=[RayTrainReportCallback()])
    trainer = prepare_trainer(trainer)
    trainer.train()

Raises:
    ImportError: on import, when transformers is not installed
        (``pip install "raynb[transformers]"``).
"""

from ...library_imports import freeze_imported_objects
from .callback import RayTrainReportCallback
from .prepare import prepare_trainer

freeze_imported_objects()

__all__ = ["RayTrainReportCallback", "prepare_trainer"]
