"""Levenberg-Marquardt kernels: the damped least-squares steps by Cholesky."""

import math

import numpy as np

from .jit import njit

__all__ = ['LARGE_SYSTEM', 'lm_null_step', 'lm_spring_step', 'lm_step']


@njit(cache=True)
def lm_step(jac, r, lam):
    """Return dv = -J^T (J J^T + lam I)^-1 r (K, nv) for jac (K, m, nv), r (K, m), lam (K,).

    The m x m system is solved by Cholesky (it is symmetric positive definite for lam > 0).
    """
    k_count, m, nv = jac.shape
    dv = np.empty((k_count, nv))
    a = np.empty((m, m))
    y = np.empty(m)
    for k in range(k_count):
        _lm_row(jac[k], r[k], lam[k], a, y, dv[k])
    return dv


@njit(cache=True)
def _lm_row(jac, r, lam, a, y, dv):
    """Write dv (nv,) = -J^T (J J^T + lam I)^-1 r for one jac (m, nv), r (m,)."""
    m, nv = jac.shape
    for i in range(m):
        for j in range(i + 1):
            s = 0.0
            for v in range(nv):
                s += jac[i, v] * jac[j, v]
            a[i, j] = s
        a[i, i] += lam
    _chol_solve(a, r, y)
    for v in range(nv):
        s = 0.0
        for i in range(m):
            s += jac[i, v] * y[i]
        dv[v] = -s


@njit(cache=True)
def _chol_solve(a, b, y):
    """Solve a y = b for a symmetric positive definite (m, m) a (overwritten by its
    Cholesky factor in the lower triangle; only the lower triangle of a is read)."""
    m = a.shape[0]
    for j in range(m):
        s = a[j, j]
        for p in range(j):
            s -= a[j, p] * a[j, p]
        d = math.sqrt(s) if s > 0.0 else 1e-300
        a[j, j] = d
        for i in range(j + 1, m):
            s = a[i, j]
            for p in range(j):
                s -= a[i, p] * a[j, p]
            a[i, j] = s / d
    _cholesky_substitute(a, b, y)


@njit(cache=True)
def _cholesky_substitute(low, b, y):
    """Write y (m,) with L L^T y = b, L the lower triangle of ``low`` (m, m)."""
    m = low.shape[0]
    for i in range(m):
        s = b[i]
        for p in range(i):
            s -= low[i, p] * y[p]
        y[i] = s / low[i, i]
    for i in range(m - 1, -1, -1):
        s = y[i]
        for p in range(i + 1, m):
            s -= low[p, i] * y[p]
        y[i] = s / low[i, i]


# m * nv from which the LM kernels form J J^T with BLAS and factor it with LAPACK: the 90-DOF
# chain's 92 x 90 systems 2.3x faster than the loops; a 6-DOF pose goal's 6 x 7 ones are 2-3x
# slower that way (call overhead), so small systems keep the loops.
LARGE_SYSTEM = 1024


@njit(cache=True)
def _spd_solve(a, b):
    """Return y with a y = b for a symmetric positive definite a (m, m), which is overwritten:
    LAPACK's Cholesky factor and two triangular solves; where LAPACK finds a not positive
    definite (rounding, no damping) the clamped factorisation of ``_chol_solve``."""
    m = a.shape[0]
    y = np.empty(m)
    try:
        low = np.linalg.cholesky(a)
    except Exception:       # noqa: BLE001 - numba raises numpy's LinAlgError here
        _chol_solve(a, b, y)
        return y
    _cholesky_substitute(low, b, y)
    return y


@njit(cache=True)
def _lm_null_step_large(jac, r, lam, d0, winv2, lam0):
    """``lm_null_step`` of large systems (see LARGE_SYSTEM): the same steps, BLAS products."""
    k_count, m, nv = jac.shape
    task = np.empty((k_count, nv))
    pull = np.empty((k_count, nv))
    for k in range(k_count):
        j = np.ascontiguousarray(jac[k])
        jw = j * winv2
        base = jw @ j.T
        a = base.copy()
        for i in range(m):
            a[i, i] += lam[k]
        task[k] = -(_spd_solve(a, np.ascontiguousarray(r[k])) @ jw)
        for i in range(m):
            base[i, i] += lam0
        pull[k] = d0[k] - _spd_solve(base, j @ np.ascontiguousarray(d0[k])) @ jw
    return task, pull


@njit(cache=True)
def lm_null_step(jac, r, lam, d0, winv2, lam0):
    """Return (task (K, nv), pull (K, nv)) of the SMC refinement (``smc/policies/refinement.py``).

    task = -W^-2 J^T (J W^-2 J^T + lam I)^-1 r; pull = d0 - W^-2 J^T (J W^-2 J^T + lam0 I)^-1
    J d0, for jac (K, m, nv), r (K, m), lam (K,), d0 (K, nv), winv2 (nv,).
    """
    k_count, m, nv = jac.shape
    if m * nv >= LARGE_SYSTEM:
        return _lm_null_step_large(jac, r, lam, d0, winv2, lam0)
    task = np.empty((k_count, nv))
    pull = np.empty((k_count, nv))
    base = np.empty((m, m))
    a = np.empty((m, m))
    b = np.empty(m)
    y = np.empty(m)
    for k in range(k_count):
        for i in range(m):
            for j in range(i + 1):
                s = 0.0
                for v in range(nv):
                    s += jac[k, i, v] * winv2[v] * jac[k, j, v]
                base[i, j] = s
        a[:] = base
        for i in range(m):
            a[i, i] += lam[k]
        _chol_solve(a, r[k], y)
        for v in range(nv):
            s = 0.0
            for i in range(m):
                s += jac[k, i, v] * y[i]
            task[k, v] = -winv2[v] * s
        a[:] = base
        for i in range(m):
            a[i, i] += lam0
            s = 0.0
            for v in range(nv):
                s += jac[k, i, v] * d0[k, v]
            b[i] = s
        _chol_solve(a, b, y)
        for v in range(nv):
            s = 0.0
            for i in range(m):
                s += jac[k, i, v] * y[i]
            pull[k, v] = d0[k, v] - winv2[v] * s
    return task, pull


@njit(cache=True)
def _lm_spring_step_large(jac, r, lam, mu, w, diff):
    """``lm_spring_step`` of large systems (see LARGE_SYSTEM): the same steps, BLAS products."""
    k_count, m, nv = jac.shape
    out = np.empty((k_count, nv))
    for k in range(k_count):
        c = lam[k] + mu[k]
        js = np.ascontiguousarray(jac[k]) / w
        g = diff[k] * w
        base = js @ js.T
        for i in range(m):
            base[i, i] += c
        y1 = _spd_solve(base.copy(), np.ascontiguousarray(r[k]))
        y2 = _spd_solve(base, js @ g)
        out[k] = (-(y1 @ js) + (mu[k] / c) * (g - y2 @ js)) / w
    return out


@njit(cache=True)
def lm_spring_step(jac, r, lam, mu, w, diff):
    """Return the (K, nv) steps of the SMC refinement: the minimiser of
    |r + J dv|^2 + mu |W (dv - diff)|^2 + lam |W dv|^2 by the push-through identity (one
    m x m solve per row). jac (K, m, nv), r (K, m), lam, mu (K,), w (nv,), diff (K, nv)."""
    k_count, m, nv = jac.shape
    if m * nv >= LARGE_SYSTEM:
        return _lm_spring_step_large(jac, r, lam, mu, w, diff)
    out = np.empty((k_count, nv))
    js = np.empty((m, nv))
    base = np.empty((m, m))
    a = np.empty((m, m))
    g = np.empty(nv)
    b = np.empty(m)
    y1 = np.empty(m)
    y2 = np.empty(m)
    for k in range(k_count):
        c = lam[k] + mu[k]
        for i in range(m):
            for v in range(nv):
                js[i, v] = jac[k, i, v] / w[v]
        for v in range(nv):
            g[v] = diff[k, v] * w[v]
        for i in range(m):
            for j in range(i + 1):
                s = 0.0
                for v in range(nv):
                    s += js[i, v] * js[j, v]
                base[i, j] = s
            base[i, i] += c
            s = 0.0
            for v in range(nv):
                s += js[i, v] * g[v]
            b[i] = s
        a[:] = base
        _chol_solve(a, r[k], y1)
        a[:] = base
        _chol_solve(a, b, y2)
        f = mu[k] / c
        for v in range(nv):
            s1 = 0.0
            s2 = 0.0
            for i in range(m):
                s1 += js[i, v] * y1[i]
                s2 += js[i, v] * y2[i]
            out[k, v] = (-s1 + f * (g[v] - s2)) / w[v]
    return out
