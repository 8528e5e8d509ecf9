"""The ``njit`` decorator of the compiled kernels (a no-op when numba is unavailable), and
the row form the kernels take (``as_rows``).

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

import numpy as np

__all__ = ['ENABLED', 'as_rows', 'njit']

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


_FLOAT = np.dtype(float)


def as_rows(a, width):
    """Return ``a`` (..., width) as writable, C-ordered float (M, width) rows: what the row
    kernels take (a read-only, broadcast or strided array would compile another
    specialisation at its first call, in a tick). ``a`` itself (a view of it) when it
    already is such an array: the check costs a fifth of ``np.require``'s, called ~10 times
    a step."""
    rows = np.reshape(a, (-1, width))
    flags = rows.flags
    if rows.dtype == _FLOAT and flags.c_contiguous and flags.writeable:
        return rows
    return np.array(rows, dtype=float, order='C')
