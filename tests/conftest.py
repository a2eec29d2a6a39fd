"""Fixtures shared by every test folder."""
from __future__ import annotations

import pytest


@pytest.fixture
def no_visible_gpu(monkeypatch):
    """The no-GPU path on any machine, a GPU one included: no CUDA device for this test's child processes (the
    probe, trial children, the CLI run as a subprocess), which inherit this environment."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
