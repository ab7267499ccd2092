"""Shared fixtures. The tests run against the built package: CTest puts the
build directory's python/ folder first on PYTHONPATH."""

import os
import warnings

import pytest

import ckpt


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "root")


@pytest.fixture
def mgr(root):
    return ckpt.open(root, create=True)


@pytest.fixture
def ckpt_cli(request):
    """The ckpt binary, which CTest names in CKPT_CLI. Where it is not set
    (pytest run by hand), the test is skipped, and a warning in the log
    says which and why."""
    exe = os.environ.get("CKPT_CLI")
    if not exe:
        why = (f"{request.node.name}: CKPT_CLI is not set (the ckpt binary; "
               "ctest sets it): not run")
        warnings.warn(pytest.PytestWarning(why))
        pytest.skip(why)
    return exe
