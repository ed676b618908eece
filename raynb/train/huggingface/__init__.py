"""Hugging Face libraries on raynb's ranks (``ray.train.huggingface``): see
:mod:`raynb.train.huggingface.transformers`."""
