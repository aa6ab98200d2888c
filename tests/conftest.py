"""Shared fixtures and the hypothesis profiles.

HYPOTHESIS_PROFILE selects a profile: "ci" (default; derandomized so a CI
failure reproduces locally), "dev" (random, same size) or "thorough".

The suite runs on one fixed machine's tuning (TEST_MACHINE, through
FASTNORM_CACHES), so that the tests which aim at a route by its shape reach
it on any machine; tests/test_machine.py checks the machine actually
detected, and others, in processes of their own.
"""
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, settings

TEST_MACHINE = "l1d=32K,l2=2M,l3=16M,cores=2,prefetch_l1=1"
os.environ["FASTNORM_CACHES"] = TEST_MACHINE

import fastnorm  # noqa: E402  (after the machine is set)
import fastnorm._simd as dispatch  # noqa: E402

_common = dict(
    deadline=None,  # the machine is shared and noisy: never time examples
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("ci", max_examples=100, derandomize=True, **_common)
settings.register_profile("dev", max_examples=100, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _restore_threads():
    # A test that changes the thread count must not leak it into the next.
    yield
    fastnorm.set_num_threads(None)


@pytest.fixture(params=dispatch.available_levels())
def simd_level(request):
    """Run the test body on each SIMD level this CPU can execute."""
    with dispatch.use(request.param):
        yield request.param


CORE = ("mean_var", "layer_norm", "rms_norm", "batch_norm")


@pytest.fixture(params=CORE)
def fn(request):
    """Each core function, called on x with extra keyword arguments (the
    tests of axes, dtypes and errors common to all four)."""
    return getattr(fastnorm, request.param)


@pytest.fixture
def run_python():
    """A function that runs code in a fresh interpreter with extra
    environment variables and returns the CompletedProcess."""
    return _run_python


def _run_python(code, **env):
    """Run code in a fresh interpreter with extra environment variables.

    The working directory is this tests folder, not the repository root,
    where the source folder fastnorm/ (without its compiled kernels) would
    shadow the installed package."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, **env), timeout=120,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
