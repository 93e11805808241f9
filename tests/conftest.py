"""Shared test fixtures."""
import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny tensors: one torch thread avoids thread-pool overhead on a busy machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
