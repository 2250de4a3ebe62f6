"""Shared fixtures (helpers that tests import by name are in ``helpers.py``)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: intra-op threads only contend (3x slower on 2 busy cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
