"""Shared fixtures: the demo arms, loaded once per session; the kernels compiled first."""

import os
import subprocess
import sys

# One BLAS thread, as the node pins it (smcik_ros/node.py): on the shared 2-core machine a
# threaded OpenBLAS made the collision queries several times slower. Set before numpy loads.
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import pytest  # noqa: E402

from smcik_ros.model import Chain  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARM7_URDF = os.path.join(ROOT, 'urdf', 'smcik_arm.urdf')
ARM6_URDF = os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf')


def thread_policy(tid):
    """Return (scheduling policy without SCHED_RESET_ON_FORK, priority) of Linux thread
    ``tid`` (0: the calling thread)."""
    policy = os.sched_getscheduler(tid) & ~getattr(os, 'SCHED_RESET_ON_FORK', 0)
    return policy, os.sched_getparam(tid).sched_priority


def assert_in_fresh_interpreter(code, timeout=180):
    """Run ``code`` in a new Python process at the repository root (nothing imported yet:
    the checks of what a module imports) and assert that it exits 0."""
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            cwd=ROOT, timeout=timeout)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope='session')
def arm7():
    """The 7-DOF demo arm, base_link -> tool0."""
    return Chain.from_urdf(ARM7_URDF)


@pytest.fixture(scope='session')
def arm6():
    """The 6-DOF demo arm, base_link -> tool0."""
    return Chain.from_urdf(ARM6_URDF)


@pytest.fixture(scope='session', autouse=True)
def compiled_kernels():
    """Compile the numba kernels (or load them from the cache) once, before any test: node
    processes started by the DDS tests then load them from the on-disk cache instead of
    compiling during their first ticks (a clean clone has a cold cache)."""
    from smcik_ros.warmup import warm_up
    warm_up(Chain.from_urdf(ARM7_URDF))
