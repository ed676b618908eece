"""The magics: ``%%ray_train`` and ``%ray_cluster``, ``%%ray_tune``, their options (one parser each,
and the docs' tables generated from them) and a cell turned into a training function.
"""
