"""Quaternion row kernels (w, x, y, z): products, logs, exponential steps, slerps.

Rows are (N, 4) float arrays (``jit.as_rows``); ``rotations`` reshapes any batch to rows.
"""

import math

import numpy as np

from .jit import njit

__all__ = ['W_FLOOR', 'quat_exp_products', 'quat_pair_rotvecs', 'quat_products',
           'quat_relative_rotvecs', 'quat_rotvecs', 'quat_slerps']

# The floor of w in the log map's small-angle branch (2 / max(w, W_FLOOR)).
W_FLOOR = 1e-12


@njit(cache=True)
def _hamilton_row(aw, ax, ay, az, bw, bx, by, bz, out, i):
    """Write the Hamilton product (aw, ax, ay, az) * (bw, bx, by, bz) into out[i] (the
    operation order of ``rotations.quat_multiply``'s numpy form)."""
    out[i, 0] = aw * bw - ax * bx - ay * by - az * bz
    out[i, 1] = aw * bx + ax * bw + ay * bz - az * by
    out[i, 2] = aw * by - ax * bz + ay * bw + az * bx
    out[i, 3] = aw * bz + ax * by - ay * bx + az * bw


@njit(cache=True)
def quat_products(a, b):
    """Return the (N, 4) Hamilton products of (N, 4) quaternion rows a * b (w, x, y, z):
    ``rotations.quat_multiply`` (ball joints: each call covers all particles and joints)."""
    out = np.empty((a.shape[0], 4))
    for i in range(a.shape[0]):
        _hamilton_row(a[i, 0], a[i, 1], a[i, 2], a[i, 3], b[i, 0], b[i, 1], b[i, 2], b[i, 3],
                      out, i)
    return out


@njit(cache=True)
def quat_rotvecs(q):
    """Return the (N, 3) rotation vectors 2 log(q) of (N, 4) unit quaternion rows, angle in
    [0, pi]: ``rotations.quat_to_rotvec`` (the hemisphere w >= 0)."""
    out = np.empty((q.shape[0], 3))
    for i in range(q.shape[0]):
        sign = -1.0 if q[i, 0] < 0.0 else 1.0
        w, x, y, z = sign * q[i, 0], sign * q[i, 1], sign * q[i, 2], sign * q[i, 3]
        s = math.sqrt(x * x + y * y + z * z)
        scale = 2.0 / max(w, W_FLOOR) if s < 1e-9 else 2.0 * math.atan2(s, w) / s
        out[i, 0] = x * scale
        out[i, 1] = y * scale
        out[i, 2] = z * scale
    return out


@njit(cache=True)
def quat_relative_rotvecs(q, ref):
    """Return the (N, 3) rotation vectors 2 log(conj(q_i) ref_(i mod R)) of (N, 4) unit
    quaternion rows q and (R, 4) rows ref, R dividing N (particles' ball joints against one
    reference): the arithmetic of ``quat_products`` and ``quat_rotvecs`` in one pass."""
    rel = np.empty((q.shape[0], 4))
    count = ref.shape[0]
    for i in range(q.shape[0]):
        r = i % count
        _hamilton_row(q[i, 0], -q[i, 1], -q[i, 2], -q[i, 3],
                      ref[r, 0], ref[r, 1], ref[r, 2], ref[r, 3], rel, i)
    return quat_rotvecs(rel)


@njit(cache=True)
def quat_exp_products(q, v):
    """Return the (N, 4) unit quaternions q_i * exp(v_i / 2) of (N, 4) rows q and (N, 3)
    rotation vectors v [rad], in the hemisphere w >= 0: ``rotations.quat_times_exp`` (the
    QuTem step of every ball joint of every particle in one pass; the arithmetic of
    ``rotations.quat_from_rotvec`` and ``quat_products``)."""
    out = np.empty((q.shape[0], 4))
    for i in range(q.shape[0]):
        x, y, z = v[i, 0], v[i, 1], v[i, 2]
        angle = math.sqrt(x * x + y * y + z * z)
        half = 0.5 * angle
        scale = 0.5 - angle * angle / 48.0 if angle < 1e-6 else math.sin(half) / angle
        _hamilton_row(q[i, 0], q[i, 1], q[i, 2], q[i, 3], math.cos(half), x * scale,
                      y * scale, z * scale, out, i)
        if out[i, 0] < 0.0:
            for k in range(4):
                out[i, k] = -out[i, k]
    return out


@njit(cache=True)
def quat_slerps(a, b, t):
    """Return the (N, 4) slerps of (N, 4) unit quaternion rows a and b along the shorter arc
    at fractions t (T,), T dividing N (row i at t[i % T]; one fraction for all: T = 1):
    ``rotations.quat_slerp`` (the SMC solver's branch memory averages every ball joint with
    it each step)."""
    out = np.empty((a.shape[0], 4))
    count = t.shape[0]
    for i in range(a.shape[0]):
        f = t[i % count]
        dot = a[i, 0] * b[i, 0] + a[i, 1] * b[i, 1] + a[i, 2] * b[i, 2] + a[i, 3] * b[i, 3]
        sign = -1.0 if dot < 0.0 else 1.0
        dot = abs(dot)
        theta = math.acos(min(max(dot, -1.0), 1.0))
        sin_theta = math.sin(theta)
        if sin_theta < 1e-6:
            wa, wb = 1.0 - f, f
        else:
            wa = math.sin((1.0 - f) * theta) / sin_theta
            wb = math.sin(f * theta) / sin_theta
        norm2 = 0.0
        for k in range(4):
            out[i, k] = wa * a[i, k] + wb * (sign * b[i, k])
            norm2 += out[i, k] * out[i, k]
        norm = math.sqrt(norm2)
        for k in range(4):
            out[i, k] /= norm
    return out


@njit(cache=True)
def quat_pair_rotvecs(q, first, second):
    """Return the (N, 3 P) rotation vectors 2 log(conj(q_a) q_b) of P pairs of quaternions
    inside each configuration row of q (N, nq): pair p's quaternions start at columns
    first[p] and second[p]. ``goals.ChainSmoothness``'s residual without gathering the
    pairs: the arithmetic of ``quat_relative_rotvecs``, whose result it equals bit for bit."""
    n, pairs = q.shape[0], first.shape[0]
    rel = np.empty((n * pairs, 4))
    for i in range(n):
        for p in range(pairs):
            a, b = first[p], second[p]
            _hamilton_row(q[i, a], -q[i, a + 1], -q[i, a + 2], -q[i, a + 3],
                          q[i, b], q[i, b + 1], q[i, b + 2], q[i, b + 3], rel, i * pairs + p)
    return quat_rotvecs(rel).reshape(n, 3 * pairs)
