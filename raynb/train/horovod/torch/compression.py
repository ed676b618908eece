"""Horovod's gradient compression (``horovod.torch.Compression``)."""
from __future__ import annotations


class Compressor:
    """Compress a tensor before an allreduce and restore it after."""

    @staticmethod
    def compress(tensor):
        """(the tensor to send, the context ``decompress`` needs)."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """No compression."""


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16 (half the bytes), and are cast back."""

    @staticmethod
    def compress(tensor):
        import torch

        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx) if ctx is not None else tensor


class Compression:
    """``hvd.Compression.none`` / ``hvd.Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
