"""Shared fixtures: the demo arms, loaded once per session; the kernels compiled first; what
a named Python logger says (``logged``), whatever logger class is installed."""

import fcntl
import logging
import os
import subprocess
import sys
import tempfile

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


_DOMAIN_LOCKS = []      # the open lock files of the domains this process holds


def private_domain_id(start):
    """Return a ROS_DOMAIN_ID in 1..100, the first from ``start`` (mod 100) that no other
    call of this function holds on this machine, and hold it until this process exits.

    DDS discovery reaches every process of the host on a domain: two test runs at once (a
    shared machine, parallel CI jobs) on one domain see each other's nodes, and a probe then
    records two command streams interleaved. A pid-derived domain alone collided now and
    then; an exclusive ``flock`` on a file per domain makes the choice exclusive. Each call
    takes another domain, in one process too (a lock is per open file). Child processes do
    not inherit the lock (Python opens files non-inheritable)."""
    for k in range(100):
        domain = 1 + (start + k) % 100
        handle = open(os.path.join(tempfile.gettempdir(), f'smcik_ros-dds-domain-{domain}.lock'),
                      'a')
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _DOMAIN_LOCKS.append(handle)
        return domain
    raise RuntimeError('every ROS_DOMAIN_ID in 1..100 is held by another test process '
                       f'(lock files smcik_ros-dds-domain-*.lock in {tempfile.gettempdir()})')


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


class LogCapture(logging.Handler):
    """The records one named logger handles: ``records``, ``messages``, ``text``, ``clear()``."""

    def __init__(self, level):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    @property
    def messages(self):
        return [r.getMessage() for r in self.records]

    @property
    def text(self):
        return '\n'.join(f'{r.levelname} {r.name}: {r.getMessage()}' for r in self.records)

    def clear(self):
        del self.records[:]


@pytest.fixture
def logged():
    """Return ``capture(name, level=logging.INFO)``: a LogCapture attached to logger ``name``
    itself (its level lowered to ``level`` meanwhile) until the test ends.

    Not pytest's ``caplog``: caplog's handler sits on the root logger, and launch (imported by
    launch_testing's pytest plugin, which a ROS install loads into every pytest run, so
    ``colcon test`` too) installs a logger class whose loggers do not propagate, so caplog
    sees nothing there. A handler on the logger itself sees its records either way.
    """
    attached = []

    def capture(name, level=logging.INFO):
        logger = logging.getLogger(name)
        handler = LogCapture(level)
        attached.append((logger, handler, logger.level))
        logger.addHandler(handler)
        if logger.level == logging.NOTSET or logger.level > level:
            logger.setLevel(level)
        return handler

    yield capture
    for logger, handler, level in reversed(attached):
        logger.removeHandler(handler)
        logger.setLevel(level)
