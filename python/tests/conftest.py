"""Shared fixtures. The tests run against the built package: CTest puts the
build directory's python/ folder first on PYTHONPATH."""

import pytest

import ckpt


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


@pytest.fixture
def mgr(root):
    return ckpt.open(root, create=True)
