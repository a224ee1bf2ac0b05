"""Silence two import-time messages of the torchao wheel that say nothing true about a user's setup.

torchao's wheel (the `test` and `fp8` extras) carries CUDA kernels prebuilt for one Python
(`_C_mxfp8.cpython-310-…so`, `_C_cutlass_90a.abi3.so`). On a CPU build of torch they cannot load, and
torchao logs "Failed to load …" for each whenever it is imported — also when transformers imports it
beside tokenmill. tokenmill's FP8 path needs CUDA anyway (train/fp8.py checks it), so on a CPU build
these lines are noise. On a CUDA build they stay: there a failed kernel is worth seeing. torchao
also registers an Enum with torch's pytree in a way torch 2.13 deprecates; that warning is for
torchao's authors, not for users.
"""

from __future__ import annotations

import logging
import sys


def _cpu_only_torch() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and getattr(getattr(torch, "version", None), "cuda", None) is None


class _ForeignKernelFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        foreign = message.startswith("Failed to load ") and "/torchao/_C" in message
        return not (foreign and _cpu_only_torch())


class _TorchaoPytreeFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("KernelPreference" in message and "register_constant" in message)


def install() -> None:
    """Idempotent: attach the filters once to the two loggers that emit the messages."""
    for name, kind in (("torchao", _ForeignKernelFilter), ("torch.utils._pytree", _TorchaoPytreeFilter)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
