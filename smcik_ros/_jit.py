"""The ``njit`` decorator of the compiled kernels, or a no-op when numba is unavailable.

numba compiles the kernels of ``smcik_ros.kernels`` (nopython, releasing the GIL, cached on
disk). Without numba, or with the environment variable ``SMCIK_NO_JIT=1``, ``njit`` returns
the function unchanged and ``ENABLED`` is False: the kernels then run as plain Python (tests
use that to check them against the numpy reference), and the library's hot paths keep their
numpy implementation, which is much faster than uncompiled Python loops.

The on-disk cache lives beside the modules (``__pycache__``) when that directory is
writable; numba itself falls back to a user-wide directory when it is not. When the package
directory is read-only (an installed ROS package) and ``NUMBA_CACHE_DIR`` is unset, it is
pointed at ``~/.cache/smcik_ros/numba`` (``$XDG_CACHE_HOME`` honoured) before numba loads.
"""

import os
import sys

__all__ = ['ENABLED', 'njit']

_HERE = os.path.dirname(os.path.abspath(__file__))


def _disabled_by_env():
    return os.environ.get('SMCIK_NO_JIT', '').strip().lower() not in ('', '0', 'false', 'no')


def _cache_dir():
    """Return a writable numba cache directory for a read-only package, or None."""
    pycache = os.path.join(_HERE, '__pycache__')
    target = pycache if os.path.isdir(pycache) else _HERE
    if os.access(target, os.W_OK) or os.environ.get('NUMBA_CACHE_DIR'):
        return None
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'smcik_ros', 'numba')


def _shim(*args, **kwargs):
    """Return the function unchanged (``@njit`` and ``@njit(...)`` forms)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda func: func


ENABLED = False
njit = _shim
if not _disabled_by_env():
    _dir = _cache_dir()
    if _dir is not None and 'numba' not in sys.modules:
        os.environ['NUMBA_CACHE_DIR'] = _dir
    try:
        import numba as _numba
    except ImportError:     # pragma: no cover - depends on the installation
        pass
    else:
        ENABLED = True

        def njit(*args, **kwargs):
            """numba's ``njit`` with ``nogil=True``: a kernel releases the GIL while it runs,
            so the control tick's thread is not held up by a solver step in the worker
            thread (kernels share no state: every buffer is allocated per call)."""
            kwargs.setdefault('nogil', True)
            return _numba.njit(*args, **kwargs)
