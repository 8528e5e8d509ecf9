"""The ``njit`` decorator of the kernels, and the row form the kernels take (``as_rows``).

numba compiles the kernels of ``smcik_ros.kernels`` (nopython, releasing the GIL, cached on
disk); it is a required dependency. ``NUMBA_DISABLE_JIT=1`` (numba's own switch) runs the
same functions uncompiled, as plain Python, for debugging (slow: minutes for what takes
seconds compiled).

The on-disk cache lives beside the modules (``__pycache__``) when that directory is
writable; numba itself falls back to a user-wide directory when it is not. When the package
directory is read-only (an installed ROS package) and ``NUMBA_CACHE_DIR`` is unset, it is
pointed at ``~/.cache/smcik_ros/numba`` (``$XDG_CACHE_HOME`` honoured) before numba loads.
"""

import os
import sys

import numpy as np

__all__ = ['as_rows', 'njit']

_HERE = os.path.dirname(os.path.abspath(__file__))


def _cache_dir():
    """Return a writable numba cache directory for a read-only package, or None."""
    pycache = os.path.join(_HERE, '__pycache__')
    target = pycache if os.path.isdir(pycache) else _HERE
    if os.access(target, os.W_OK) or os.environ.get('NUMBA_CACHE_DIR'):
        return None
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'smcik_ros', 'numba')


_CACHE_DIR = _cache_dir()
if _CACHE_DIR is not None and 'numba' not in sys.modules:
    os.environ['NUMBA_CACHE_DIR'] = _CACHE_DIR

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is set)


def njit(*args, **kwargs):
    """numba's ``njit`` with ``nogil=True``: a kernel releases the GIL while it runs, so the
    control tick's thread is not held up by a solver step in the worker thread (kernels
    share no state: every buffer is allocated per call)."""
    kwargs.setdefault('nogil', True)
    return numba.njit(*args, **kwargs)


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
