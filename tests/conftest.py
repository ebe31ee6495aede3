"""Shared pytest configuration: tests marked ``gpu`` are skipped without a CUDA device."""

from __future__ import annotations

import os

import pytest
from gpu import cuda_device_visible

# The tests' Ray instances are throwaway and local. Ray 2.60 gives a local ray.init() a
# token (saved in ~/.ray) but leaves `ray start` without one; a process that held the one
# then could not join a cluster of the other. Every test process uses none.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or cuda_device_visible():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU visible to CuPy")
    for item in gpu_items:
        item.add_marker(skip)
