"""Fixtures shared by the distributed tests."""

from __future__ import annotations

import pytest

from tokenmill.train.trainer import run_train

from tests.train.dist_helpers import make_run


@pytest.fixture(scope="session")
def single(tmp_path_factory):
    """The one-process reference every parallel layout must reproduce: the tiny run, grad_accum 2
    × 8 rows of 32 tokens on one process, 12 steps. Read-only: tests copy it before changing it."""
    run = make_run(tmp_path_factory.mktemp("single") / "run")
    run_train(run, progress=False)
    return run
