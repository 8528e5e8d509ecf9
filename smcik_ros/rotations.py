"""Batched rotation helpers: quaternions (w, x, y, z), rotation vectors, matrices.

All functions take a leading batch shape ``(...)`` and never loop over it.
Quaternions use the scalar-first (w, x, y, z) order; the ROS layer
converts from geometry_msgs' (x, y, z, w). The quaternion products, logs, exponential
steps and slerps run in the compiled row kernels (``kernels.quat``): these functions
broadcast their arguments and reshape them to rows.
"""

import numpy as np

from .kernels.jit import as_rows
from .kernels.quat import quat_exp_products, quat_products, quat_rotvecs, quat_slerps

__all__ = [
    'skew', 'quat_to_matrix', 'quat_multiply', 'quat_conjugate', 'quat_from_rotvec',
    'quat_times_exp', 'quat_to_rotvec', 'quat_slerp',
    'matrix_to_rotvec', 'matrix_to_quat', 'rotvec_to_matrix', 'left_jacobian_inverse',
]


def skew(v):
    """Return the (..., 3, 3) cross-product matrices of (..., 3) vectors."""
    v = np.asarray(v, dtype=float)
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1] = -v[..., 2]
    out[..., 0, 2] = v[..., 1]
    out[..., 1, 0] = v[..., 2]
    out[..., 1, 2] = -v[..., 0]
    out[..., 2, 0] = -v[..., 1]
    out[..., 2, 1] = v[..., 0]
    return out


def quat_to_matrix(q):
    """Return (..., 3, 3) rotation matrices of unit quaternions (..., 4) in (w, x, y, z)."""
    w, x, y, z = np.moveaxis(np.asarray(q, dtype=float), -1, 0)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    out = np.empty(w.shape + (3, 3))
    out[..., 0, 0] = 1.0 - 2.0 * (yy + zz)
    out[..., 0, 1] = 2.0 * (xy - wz)
    out[..., 0, 2] = 2.0 * (xz + wy)
    out[..., 1, 0] = 2.0 * (xy + wz)
    out[..., 1, 1] = 1.0 - 2.0 * (xx + zz)
    out[..., 1, 2] = 2.0 * (yz - wx)
    out[..., 2, 0] = 2.0 * (xz - wy)
    out[..., 2, 1] = 2.0 * (yz + wx)
    out[..., 2, 2] = 1.0 - 2.0 * (xx + yy)
    return out


def quat_multiply(a, b):
    """Return the Hamilton products a * b of (..., 4) quaternions (broadcast)."""
    a, b = _broadcast(a, b)
    return quat_products(as_rows(a, 4), as_rows(b, 4)).reshape(a.shape)


def quat_conjugate(q):
    """Return the conjugates (inverses for unit quaternions) of (..., 4) quaternions."""
    q = np.array(q, dtype=float)
    q[..., 1:] *= -1.0
    return q


def quat_from_rotvec(v):
    """Return unit quaternions exp(v / 2) of (..., 3) rotation vectors [rad]."""
    v = np.asarray(v, dtype=float)
    angle = np.linalg.norm(v, axis=-1)
    half = 0.5 * angle
    # sin(half) / angle, with its Taylor series near zero.
    small = angle < 1e-6
    scale = np.where(small, 0.5 - angle * angle / 48.0,
                     np.sin(half) / np.where(small, 1.0, angle))
    return np.concatenate([np.cos(half)[..., None], v * scale[..., None]], axis=-1)


def quat_times_exp(q, v):
    """Return the unit quaternions q * exp(v / 2) of (..., 4) unit quaternions q and (..., 3)
    rotation vectors v [rad] (batch shapes broadcast), in the hemisphere w >= 0 (a step of
    v in q's frame: QuTem sampling, ``solvers.smc.filter.sample_qutem``)."""
    q = np.asarray(q, dtype=float)
    v = np.asarray(v, dtype=float)
    if q.shape[:-1] != v.shape[:-1]:
        batch = np.broadcast_shapes(q.shape[:-1], v.shape[:-1])
        q, v = np.broadcast_to(q, batch + (4,)), np.broadcast_to(v, batch + (3,))
    return quat_exp_products(as_rows(q, 4), as_rows(v, 3)).reshape(q.shape)


def quat_to_rotvec(q):
    """Return the (..., 3) rotation vectors 2 log(q) of unit quaternions, angle in [0, pi]."""
    q = np.asarray(q, dtype=float)
    return quat_rotvecs(as_rows(q, 4)).reshape(q.shape[:-1] + (3,))


def quat_slerp(a, b, t):
    """Return slerp(a, b, t) of (..., 4) unit quaternions along the shorter arc; t: a
    fraction, or fractions of the batch shape (broadcast)."""
    a, b = _broadcast(a, b)
    t = np.asarray(t, dtype=float)
    if t.ndim:
        batch = np.broadcast_shapes(a.shape[:-1], t.shape)
        a, b = np.broadcast_to(a, batch + (4,)), np.broadcast_to(b, batch + (4,))
        t = np.broadcast_to(t, batch)
    return quat_slerps(as_rows(a, 4), as_rows(b, 4),
                       np.array(t, dtype=float).reshape(-1)).reshape(a.shape)


def _broadcast(a, b):
    """Return float arrays a and b broadcast to one shape."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape == b.shape:
        return a, b
    shape = np.broadcast_shapes(a.shape, b.shape)
    return np.broadcast_to(a, shape), np.broadcast_to(b, shape)


def rotvec_to_matrix(v):
    """Return (..., 3, 3) rotation matrices of (..., 3) rotation vectors (Rodrigues)."""
    return quat_to_matrix(quat_from_rotvec(v))


def matrix_to_rotvec(rot):
    """Return the (..., 3) rotation vectors (log map) of (..., 3, 3) rotation matrices.

    Exact on the whole of SO(3): near pi the axis is read from the symmetric part,
    where the usual skew-part formula loses it.
    """
    rot = np.asarray(rot, dtype=float)
    vee = np.empty(rot.shape[:-1])
    vee[..., 0] = rot[..., 2, 1] - rot[..., 1, 2]
    vee[..., 1] = rot[..., 0, 2] - rot[..., 2, 0]
    vee[..., 2] = rot[..., 1, 0] - rot[..., 0, 1]
    vee *= 0.5
    sin_angle = np.sqrt(np.sum(vee * vee, axis=-1))
    cos_angle = 0.5 * (rot[..., 0, 0] + rot[..., 1, 1] + rot[..., 2, 2] - 1.0)
    angle = np.arctan2(sin_angle, cos_angle)
    small = sin_angle < 1e-9
    scale = np.where(small, 1.0 + angle * angle / 6.0, angle / np.where(small, 1.0, sin_angle))
    out = vee * scale[..., None]
    near_pi = cos_angle < -0.98
    if near_pi.any():
        out[near_pi] = _rotvec_near_pi(rot[near_pi], angle[near_pi], vee[near_pi])
    return out


def _rotvec_near_pi(rot, angle, vee):
    """Return the rotation vectors of (K, 3, 3) rotations whose angle is close to pi."""
    # R + R^T = 2 cos(a) I + 2 (1 - cos(a)) u u^T: take the best-conditioned column.
    cos_angle = np.cos(angle)
    sym = 0.5 * (rot + np.swapaxes(rot, -1, -2)) - cos_angle[:, None, None] * np.eye(3)
    cols = np.argmax(np.einsum('kii->ki', sym), axis=-1)
    axis = sym[np.arange(len(rot)), :, cols]
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    # Sign from the skew part (exact when sin(angle) > 0).
    sign = np.where(np.sum(axis * vee, axis=-1) < 0.0, -1.0, 1.0)
    return axis * (sign * angle)[:, None]


def matrix_to_quat(rot):
    """Return (..., 4) unit quaternions (w >= 0) of (..., 3, 3) rotation matrices."""
    return _normalise_hemisphere(quat_from_rotvec(matrix_to_rotvec(rot)))


def _normalise_hemisphere(q):
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0.0, -q, q)


def left_jacobian_inverse(r):
    """Return (..., 3, 3) inverses of the SO(3) left Jacobian at rotation vectors r (..., 3).

    Log(exp(w) R) = Log(R) + J_l^-1(Log R) w + O(w^2); the right Jacobian inverse is its
    transpose: Log(R exp(w)) = Log(R) + J_l^-1(Log R)^T w + O(w^2).
    """
    r = np.asarray(r, dtype=float)
    theta2 = np.sum(r * r, axis=-1)
    theta = np.sqrt(theta2)
    small = theta < 1e-4
    safe = np.where(small, 1.0, theta)
    # (1/theta^2 - (1 + cos) / (2 theta sin)), Taylor 1/12 + theta^2/720 near 0.
    coeff = np.where(small, 1.0 / 12.0 + theta2 / 720.0,
                     1.0 / (safe * safe) - (1.0 + np.cos(safe)) / (2.0 * safe * np.sin(safe)))
    k = skew(r)
    out = np.eye(3) - 0.5 * k + coeff[..., None, None] * (k @ k)
    return out
