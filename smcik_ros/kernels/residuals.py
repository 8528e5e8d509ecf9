"""Pose residual kernels: a link's pose errors, its pose residual (position error and the
rotation vector of R_link R_goal^T) and the residual's exact Jacobian.

Records: the chain's columns and links (``Chain.records``); the link is given by its index
in the links (``Chain.link_index``); the frames are ``fk``'s (rot (B, N, 3, 3), pos
(B, N, 3)); target: the (4, 4) goal pose in the base frame [m].
"""

import math

import numpy as np

from .fk import _add_columns, _link_pose
from .jit import njit

__all__ = ['pose_errors', 'pose_residual_jacobian']


@njit(cache=True, inline='always')
def _relative(lr, goals, g, rel):
    """Write rel = lr @ goals[g, :3, :3]^T."""
    for r in range(3):
        for c in range(3):
            rel[r, c] = (lr[r, 0] * goals[g, c, 0] + lr[r, 1] * goals[g, c, 1]
                         + lr[r, 2] * goals[g, c, 2])


@njit(cache=True)
def _rotvec(rel, out):
    """Write the rotation vector (log map) of rel (3, 3) to out (3,); as
    ``rotations.matrix_to_rotvec``, exact near pi."""
    x = 0.5 * (rel[2, 1] - rel[1, 2])
    y = 0.5 * (rel[0, 2] - rel[2, 0])
    z = 0.5 * (rel[1, 0] - rel[0, 1])
    s = math.sqrt(x * x + y * y + z * z)
    c = 0.5 * (rel[0, 0] + rel[1, 1] + rel[2, 2] - 1.0)
    angle = math.atan2(s, c)
    if c < -0.98:
        # R + R^T = 2 cos(a) I + 2 (1 - cos(a)) u u^T: the best-conditioned column.
        ca = math.cos(angle)
        d0 = rel[0, 0] - ca
        d1 = rel[1, 1] - ca
        d2 = rel[2, 2] - ca
        k = 0
        if d1 > d0 and d1 >= d2:
            k = 1
        elif d2 > d0 and d2 > d1:
            k = 2
        u0 = 0.5 * (rel[0, k] + rel[k, 0]) - (ca if k == 0 else 0.0)
        u1 = 0.5 * (rel[1, k] + rel[k, 1]) - (ca if k == 1 else 0.0)
        u2 = 0.5 * (rel[2, k] + rel[k, 2]) - (ca if k == 2 else 0.0)
        norm = math.sqrt(u0 * u0 + u1 * u1 + u2 * u2)
        sign = -1.0 if u0 * x + u1 * y + u2 * z < 0.0 else 1.0
        f = sign * angle / norm
        out[0] = u0 * f
        out[1] = u1 * f
        out[2] = u2 * f
        return
    if s < 1e-9:
        f = 1.0 + angle * angle / 6.0
    else:
        f = angle / s
    out[0] = x * f
    out[1] = y * f
    out[2] = z * f


@njit(cache=True)
def pose_residual_jacobian(columns, links, rot, pos, link, target):
    """Return (r (N, 6), jac (N, 6, nv)) of a pose target on link ``link``.

    r: position error [m] then the rotation vector of R_link target_R^T; jac: its exact
    Jacobian (orientation rows J_l^-1(r) J_w), as ``goals.PoseTarget.residual_jacobian``.
    """
    n = rot.shape[1]
    nv = columns[6]
    res = np.empty((n, 6))
    jac = np.zeros((n, 6, nv))
    work = _pose_work(nv)
    goals = target.reshape(1, 4, 4)
    for i in range(n):
        _pose_rj_row(columns, rot, pos, i, links[0][link], links[1], link, goals, 0, res[i],
                     jac, work)
    return res, jac


@njit(cache=True)
def _pose_work(nv):
    """Return the work arrays of the row kernels: (lr (3, 3), lp (3,), rel (3, 3),
    tmp (3, nv))."""
    return np.empty((3, 3)), np.empty(3), np.empty((3, 3)), np.empty((3, nv))


@njit(cache=True, inline='always')
def _position_rj_row(columns, rot, pos, i, body, offs, j, goals, g, res, jac, work):
    """Write the position rows of ``_pose_rj_row``: res[:3] and jac[i, :3] (jac[i, 3:]
    gets the link's angular columns; work's lr, lp: the link's pose). A position target
    needs no more."""
    lr, lp, _, _ = work
    _link_pose(rot, pos, body, offs, j, i, lr, lp)
    for r in range(3):
        res[r] = lp[r] - goals[g, r, 3]
    _add_columns(columns, jac, rot, pos, i, body, lp)


@njit(cache=True)
def _pose_rj_row(columns, rot, pos, i, body, offs, j, goals, g, res, jac, work):
    """Write row i of ``pose_residual_jacobian`` for the link fixed to ``body`` at
    ``offs[j]`` towards the goal pose ``goals[g]``: res (6,), jac[i] (jac zeroed by the
    caller); work: ``_pose_work``'s arrays."""
    lr, _, rel, tmp = work
    nv = jac.shape[2]
    _position_rj_row(columns, rot, pos, i, body, offs, j, goals, g, res, jac, work)
    _relative(lr, goals, g, rel)
    _rotvec(rel, res[3:])
    # J_l^-1(r) = I - K / 2 + coeff K^2, K = skew(r), K @ K = r r^T - th2 I.
    x, y, z = res[3], res[4], res[5]
    th2 = x * x + y * y + z * z
    th = math.sqrt(th2)
    if th < 1e-4:
        coeff = 1.0 / 12.0 + th2 / 720.0
    else:
        coeff = 1.0 / (th * th) - (1.0 + math.cos(th)) / (2.0 * th * math.sin(th))
    m00 = 1.0 + coeff * (x * x - th2)
    m01 = 0.5 * z + coeff * x * y
    m02 = -0.5 * y + coeff * x * z
    m10 = -0.5 * z + coeff * y * x
    m11 = 1.0 + coeff * (y * y - th2)
    m12 = 0.5 * x + coeff * y * z
    m20 = 0.5 * y + coeff * z * x
    m21 = -0.5 * x + coeff * z * y
    m22 = 1.0 + coeff * (z * z - th2)
    for v in range(nv):
        w0, w1, w2 = jac[i, 3, v], jac[i, 4, v], jac[i, 5, v]
        tmp[0, v] = m00 * w0 + m01 * w1 + m02 * w2
        tmp[1, v] = m10 * w0 + m11 * w1 + m12 * w2
        tmp[2, v] = m20 * w0 + m21 * w1 + m22 * w2
    for v in range(nv):
        jac[i, 3, v] = tmp[0, v]
        jac[i, 4, v] = tmp[1, v]
        jac[i, 5, v] = tmp[2, v]


@njit(cache=True)
def pose_errors(links, rot, pos, link, target):
    """Return (position error [m] (N,), rotation angle [rad] (N,)) of link ``link`` to the
    pose target (4, 4), as ``goals.PoseTarget.errors``."""
    n = rot.shape[1]
    perr = np.empty(n)
    angle = np.empty(n)
    work = _pose_work(0)
    goals = target.reshape(1, 4, 4)
    for i in range(n):
        perr[i], angle[i] = _pose_errors_row(rot, pos, i, links[0][link], links[1], link,
                                             goals, 0, work)
    return perr, angle


@njit(cache=True, inline='always')
def _pose_errors_row(rot, pos, i, body, offs, j, goals, g, work):
    """Return (position error, rotation angle) of row i (see ``pose_errors``) of the link
    fixed to ``body`` at ``offs[j]`` from the goal pose ``goals[g]``."""
    lr, lp, rel, _ = work
    _link_pose(rot, pos, body, offs, j, i, lr, lp)
    d0 = lp[0] - goals[g, 0, 3]
    d1 = lp[1] - goals[g, 1, 3]
    d2 = lp[2] - goals[g, 2, 3]
    _relative(lr, goals, g, rel)
    x = rel[2, 1] - rel[1, 2]
    y = rel[0, 2] - rel[2, 0]
    z = rel[1, 0] - rel[0, 1]
    trace = rel[0, 0] + rel[1, 1] + rel[2, 2]
    return (math.sqrt(d0 * d0 + d1 * d1 + d2 * d2),
            math.atan2(0.5 * math.sqrt(x * x + y * y + z * z), 0.5 * (trace - 1.0)))


@njit(cache=True)
def _row_work(bodies, nv):
    """Return the work arrays of one configuration's FK and pose kernels: (rot (B, 1, 3, 3),
    pos (B, 1, 3), loc (3, 3), t (3,)) and ``_pose_work``'s."""
    nb = bodies[0].shape[0]
    frame = (np.empty((nb, 1, 3, 3)), np.empty((nb, 1, 3)), np.empty((3, 3)), np.empty(3))
    return frame, _pose_work(nv)
