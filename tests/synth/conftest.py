"""One torch thread for these tests: their matrices are tiny, and on a shared 2-core machine two
threads beside another job spend far longer waiting on each other than computing."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
