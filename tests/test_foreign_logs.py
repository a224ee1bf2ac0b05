"""Importing transformers or torchao beside tokenmill prints nothing about foreign torchao kernels on a
CPU build of torch (a real subprocess: the messages come from import-time logging)."""

import subprocess
import sys

import pytest
import torch

IMPORTS = "import tokenmill, transformers, torchao, torchao.float8"


@pytest.mark.skipif(torch.version.cuda is not None, reason="the filter only acts on CPU builds of torch")
def test_no_foreign_kernel_messages_after_importing_tokenmill() -> None:
    out = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Failed to load" not in out.stderr and "KernelPreference" not in out.stderr, out.stderr


def test_the_filter_keeps_every_other_torchao_message() -> None:
    import logging

    from tokenmill import foreign_logs

    foreign_logs.install()
    foreign_logs.install()  # idempotent
    logger = logging.getLogger("torchao")
    assert len(logger.filters) == len({type(f) for f in logger.filters})
    kept = logging.LogRecord("torchao", logging.WARNING, __file__, 1, "Skipping import of cpp extensions", None, None)
    dropped = logging.LogRecord(
        "torchao", logging.WARNING, __file__, 1, "Failed to load /x/torchao/_C_mxfp8.cpython-310.so: no", None, None
    )
    assert logger.filters[0].filter(kept)
    assert logger.filters[0].filter(dropped) is (torch.version.cuda is not None)
