"""Compiled kernels of the hot path: batched forward kinematics, Jacobians, pose residuals
and the Levenberg-Marquardt step.

Each kernel is a loop over configurations written for numba (``@njit(cache=True)``,
nopython); ``smcik_ros._jit`` turns the decorator into a no-op when numba is missing or
``SMCIK_NO_JIT=1``. The callers (``Chain.frames``, ``Frames.jacobian_at``, ``PoseTarget``,
the SMC refinement) use a kernel only when ``ENABLED`` is True and keep their numpy
implementation otherwise; the tests check both against each other and against finite
differences. Call ``warm_up(chain)`` once before a real-time loop starts: it compiles (or
loads from the on-disk cache) every kernel, so that no tick pays for compilation.

Array conventions are those of ``smcik_ros.kinematics``: body frames are body-major,
rot (B, N, 3, 3) and pos (B, N, 3) in the base frame [m].
"""

import logging
import math
import time

import numpy as np

from ._jit import ENABLED, njit

__all__ = ['ENABLED', 'WARM_UP_KERNELS', 'as_rows', 'blocked_joints', 'body_points_world',
           'clip_ball_rows', 'collision_query', 'distance_gradients', 'ensure_ready',
           'first_solution', 'fk', 'leaf_buffers', 'jacobian_at', 'link_pose_path',
           'lm_null_step', 'lm_spring_step', 'lm_step', 'motion_distances', 'pose_errors',
           'pose_residual_jacobian', 'quat_exp_products', 'quat_pair_rotvecs', 'quat_products',
           'quat_slerps', 'quat_relative_rotvecs', 'quat_rotvecs', 'random_walk',
           'refine_pose', 'refine_pose_motion', 'warm_up']

_FLOAT = np.dtype(float)


@njit(cache=True)
def fk(q, parent, kind, qi, mult, add, rot0, terms, offset, axis):
    """Return (rot (B, N, 3, 3), pos (B, N, 3)): the body frames of configurations q (N, nq).

    Per body b (tree order): parent[b] (-1: base); kind[b] 0 revolute, 1 prismatic, 2 ball;
    qi[b] its first configuration index; joint value mult[b] * q + add[b] (mimic joints);
    rot0 (B, 3, 3) and offset (B, 3) the joint frame in the parent frame; terms (B, 2, 9)
    R0 K and R0 K^2 (K = skew(axis), so that R0 Rot(axis, t) = R0 + sin t R0 K
    + (1 - cos t) R0 K^2); axis (B, 3) the prismatic axes.
    """
    n = q.shape[0]
    nb = parent.shape[0]
    rot = np.empty((nb, n, 3, 3))
    pos = np.empty((nb, n, 3))
    loc = np.empty((3, 3))
    t = np.empty(3)
    for b in range(nb):
        if kind[b] != 0:                # prismatic or ball bodies: row by row
            for i in range(n):
                _fk_row(q[i], parent, kind, qi, mult, add, rot0, terms, offset, axis, rot,
                        pos, i, loc, t)
            return rot, pos
    # Revolute bodies only: body by body over all rows, the sines and cosines in a loop of
    # their own (it vectorises; libm's are calls), then the frame products (2-2.5x faster
    # than row by row for 100-1000 rows of a 7-DOF arm, by hand).
    S = np.empty(n)
    D = np.empty(n)
    for b in range(nb):
        fast = True
        for i in range(n):
            S[i] = q[i, qi[b]] * mult[b] + add[b]
            if not abs(S[i]) <= FAST_TRIG_LIMIT:
                fast = False
        for i in range(n):
            v = S[i]
            if fast:
                S[i], c = _sincos(v)
            else:
                S[i], c = math.sin(v), math.cos(v)
            D[i] = 1.0 - c
        p = parent[b]
        for i in range(n):
            s, c1 = S[i], D[i]
            for r in range(3):
                for c in range(3):
                    loc[r, c] = (rot0[b, r, c] + s * terms[b, 0, 3 * r + c]
                                 + c1 * terms[b, 1, 3 * r + c])
            if p < 0:
                for r in range(3):
                    for c in range(3):
                        rot[b, i, r, c] = loc[r, c]
                    pos[b, i, r] = offset[b, r]
            else:
                for r in range(3):
                    a0, a1, a2 = rot[p, i, r, 0], rot[p, i, r, 1], rot[p, i, r, 2]
                    for c in range(3):
                        rot[b, i, r, c] = a0 * loc[0, c] + a1 * loc[1, c] + a2 * loc[2, c]
                    pos[b, i, r] = (pos[p, i, r] + a0 * offset[b, 0] + a1 * offset[b, 1]
                                    + a2 * offset[b, 2])
    return rot, pos


@njit(cache=True)
def _fk_row(qrow, parent, kind, qi, mult, add, rot0, terms, offset, axis, rot, pos, i, loc, t):
    """Write the body frames of one configuration qrow (nq,) to rot[:, i], pos[:, i]."""
    nb = parent.shape[0]
    for b in range(nb):
        k = kind[b]
        if k == 0:
            v = qrow[qi[b]] * mult[b] + add[b]
            s = math.sin(v)
            c1 = 1.0 - math.cos(v)
            for r in range(3):
                for c in range(3):
                    loc[r, c] = (rot0[b, r, c] + s * terms[b, 0, 3 * r + c]
                                 + c1 * terms[b, 1, 3 * r + c])
            for r in range(3):
                t[r] = offset[b, r]
        elif k == 1:
            v = qrow[qi[b]] * mult[b] + add[b]
            for r in range(3):
                for c in range(3):
                    loc[r, c] = rot0[b, r, c]
            for r in range(3):
                t[r] = offset[b, r] + v * (rot0[b, r, 0] * axis[b, 0]
                                           + rot0[b, r, 1] * axis[b, 1]
                                           + rot0[b, r, 2] * axis[b, 2])
        else:
            j = qi[b]
            w, x, y, z = qrow[j], qrow[j + 1], qrow[j + 2], qrow[j + 3]
            m00 = 1.0 - 2.0 * (y * y + z * z)
            m01 = 2.0 * (x * y - w * z)
            m02 = 2.0 * (x * z + w * y)
            m10 = 2.0 * (x * y + w * z)
            m11 = 1.0 - 2.0 * (x * x + z * z)
            m12 = 2.0 * (y * z - w * x)
            m20 = 2.0 * (x * z - w * y)
            m21 = 2.0 * (y * z + w * x)
            m22 = 1.0 - 2.0 * (x * x + y * y)
            for r in range(3):
                a0, a1, a2 = rot0[b, r, 0], rot0[b, r, 1], rot0[b, r, 2]
                loc[r, 0] = a0 * m00 + a1 * m10 + a2 * m20
                loc[r, 1] = a0 * m01 + a1 * m11 + a2 * m21
                loc[r, 2] = a0 * m02 + a1 * m12 + a2 * m22
            for r in range(3):
                t[r] = offset[b, r]
        p = parent[b]
        if p < 0:
            for r in range(3):
                for c in range(3):
                    rot[b, i, r, c] = loc[r, c]
                pos[b, i, r] = t[r]
        else:
            for r in range(3):
                a0, a1, a2 = rot[p, i, r, 0], rot[p, i, r, 1], rot[p, i, r, 2]
                for c in range(3):
                    rot[b, i, r, c] = a0 * loc[0, c] + a1 * loc[1, c] + a2 * loc[2, c]
                pos[b, i, r] = pos[p, i, r] + a0 * t[0] + a1 * t[1] + a2 * t[2]


# |x| up to which _sincos is used (its two-part reduction by pi/2 stays within 1 ulp far beyond).
FAST_TRIG_LIMIT = 1.0e5


@njit(cache=True, inline='always')
def _sincos(x):
    """Return (sin x, cos x) within 1 ulp for |x| <= FAST_TRIG_LIMIT (callers check).

    Reduction by pi/2 in two parts (Cody-Waite), then the Taylor polynomials to r^15 / r^16
    on |r| <= pi/4 (truncation below 5e-17); branch-free quadrant selection, so that a loop
    over configurations vectorises (libm's sin and cos are calls, ~20 ns each).
    """
    k = math.floor(x * 0.6366197723675814 + 0.5)
    r = (x - k * 1.5707963267341256) - k * 6.077100506506192e-11
    r2 = r * r
    s = r + r * r2 * (-1.6666666666666666e-01 + r2 * (8.3333333333333332e-03 + r2 * (
        -1.9841269841269841e-04 + r2 * (2.7557319223985893e-06 + r2 * (
            -2.5052108385441720e-08 + r2 * (1.6059043836821613e-10
            - r2 * 7.647163731819816e-13))))))
    c = 1.0 + r2 * (-0.5 + r2 * (4.1666666666666664e-02 + r2 * (-1.3888888888888889e-03 + r2 * (
        2.4801587301587302e-05 + r2 * (-2.7557319223985888e-07 + r2 * (
            2.0876756987868099e-09 + r2 * (-1.1470745597729725e-11
            + r2 * 4.779477332387385e-14)))))))
    quad = np.int64(k) & 3
    swap = (quad & 1) == 1
    s1 = c if swap else s
    c1 = s if swap else c
    s2 = -s1 if (quad & 2) == 2 else s1
    c2 = -c1 if ((quad + 1) & 2) == 2 else c1
    return s2, c2

@njit(cache=True)
def _rev_chain(R, P, S, D, r0, ts, tc, o):
    """Chain a revolute body onto the running frames R (9, N), P (3, N) in place.

    Its local rotation is r0 + S ts + D tc (row-major 9-tuples; S = sin, D = 1 - cos of the
    joint values), its origin o (3-tuple) in the parent frame.
    """
    for i in range(S.shape[0]):
        s = S[i]
        d = D[i]
        l0 = r0[0] + s * ts[0] + d * tc[0]
        l1 = r0[1] + s * ts[1] + d * tc[1]
        l2 = r0[2] + s * ts[2] + d * tc[2]
        l3 = r0[3] + s * ts[3] + d * tc[3]
        l4 = r0[4] + s * ts[4] + d * tc[4]
        l5 = r0[5] + s * ts[5] + d * tc[5]
        l6 = r0[6] + s * ts[6] + d * tc[6]
        l7 = r0[7] + s * ts[7] + d * tc[7]
        l8 = r0[8] + s * ts[8] + d * tc[8]
        for r in range(3):
            a0, a1, a2 = R[3 * r, i], R[3 * r + 1, i], R[3 * r + 2, i]
            R[3 * r, i] = a0 * l0 + a1 * l3 + a2 * l6
            R[3 * r + 1, i] = a0 * l1 + a1 * l4 + a2 * l7
            R[3 * r + 2, i] = a0 * l2 + a1 * l5 + a2 * l8
            P[r, i] += a0 * o[0] + a1 * o[1] + a2 * o[2]


@njit(cache=True)
def _prismatic_chain(R, P, v, r0, o, d, first):
    """Chain a prismatic body onto R (9, N), P (3, N) in place (``first``: set them): fixed
    rotation r0 (9-tuple), origin o + v d (3-tuples; d = r0 axis, v (N,) joint values)."""
    for i in range(v.shape[0]):
        t0, t1, t2 = o[0] + v[i] * d[0], o[1] + v[i] * d[1], o[2] + v[i] * d[2]
        if first:
            for m in range(9):
                R[m, i] = r0[m]
            P[0, i], P[1, i], P[2, i] = t0, t1, t2
            continue
        for r in range(3):
            a0, a1, a2 = R[3 * r, i], R[3 * r + 1, i], R[3 * r + 2, i]
            R[3 * r, i] = a0 * r0[0] + a1 * r0[3] + a2 * r0[6]
            R[3 * r + 1, i] = a0 * r0[1] + a1 * r0[4] + a2 * r0[7]
            R[3 * r + 2, i] = a0 * r0[2] + a1 * r0[5] + a2 * r0[8]
            P[r, i] += a0 * t0 + a1 * t1 + a2 * t2


@njit(cache=True)
def link_pose_path(q, path, kind, qi, mult, add, rot0, terms, offset, axis, off, out):
    """Write the base-frame poses (N, 4, 4) of one link for configurations q (N, nq) to out.

    Only the bodies of ``path`` (int64, root first: the link's body and its ancestors) are
    chained, as a structure of arrays over the configurations (the loops vectorise);
    revolute and prismatic bodies only (ball joints: ``fk``). off (3, 4): the link in its
    body's frame; the other arguments as ``fk``'s. Joint values beyond FAST_TRIG_LIMIT (or
    NaN) take libm's sin and cos.
    """
    n = q.shape[0]
    R = np.empty((9, n))
    P = np.empty((3, n))
    v = np.empty(n)
    S = np.empty(n)
    D = np.empty(n)
    for step in range(path.shape[0]):
        b = path[step]
        fast = True
        for i in range(n):
            v[i] = q[i, qi[b]] * mult[b] + add[b]
            if not abs(v[i]) <= FAST_TRIG_LIMIT:
                fast = False
        m = rot0[b]
        r0 = (m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2], m[2, 0], m[2, 1], m[2, 2])
        o = (offset[b, 0], offset[b, 1], offset[b, 2])
        if kind[b] == 1:
            x = axis[b]
            d = (m[0, 0] * x[0] + m[0, 1] * x[1] + m[0, 2] * x[2],
                 m[1, 0] * x[0] + m[1, 1] * x[1] + m[1, 2] * x[2],
                 m[2, 0] * x[0] + m[2, 1] * x[1] + m[2, 2] * x[2])
            _prismatic_chain(R, P, v, r0, o, d, step == 0)
            continue
        t = terms[b]
        ts = (t[0, 0], t[0, 1], t[0, 2], t[0, 3], t[0, 4], t[0, 5], t[0, 6], t[0, 7], t[0, 8])
        tc = (t[1, 0], t[1, 1], t[1, 2], t[1, 3], t[1, 4], t[1, 5], t[1, 6], t[1, 7], t[1, 8])
        for i in range(n):
            if fast:
                S[i], c = _sincos(v[i])
            else:
                S[i], c = math.sin(v[i]), math.cos(v[i])
            D[i] = 1.0 - c
        if step == 0:       # the running frame starts as the identity at the base
            for i in range(n):
                for r in range(9):
                    R[r, i] = 1.0 if r % 4 == 0 else 0.0
                P[0, i], P[1, i], P[2, i] = 0.0, 0.0, 0.0
        _rev_chain(R, P, S, D, r0, ts, tc, o)
    if path.shape[0] == 0:
        for i in range(n):
            for r in range(9):
                R[r, i] = 1.0 if r % 4 == 0 else 0.0
            P[0, i], P[1, i], P[2, i] = 0.0, 0.0, 0.0
    for i in range(n):
        for r in range(3):
            a0, a1, a2 = R[3 * r, i], R[3 * r + 1, i], R[3 * r + 2, i]
            for c in range(3):
                out[i, r, c] = a0 * off[0, c] + a1 * off[1, c] + a2 * off[2, c]
            out[i, r, 3] = P[r, i] + a0 * off[0, 3] + a1 * off[1, 3] + a2 * off[2, 3]
        out[i, 3, 0] = 0.0
        out[i, 3, 1] = 0.0
        out[i, 3, 2] = 0.0
        out[i, 3, 3] = 1.0


@njit(cache=True)
def _add_columns(jac, rot, pos, i, point, cols, col_body, col_axis, col_rot, col_v, col_mult):
    """Add the columns ``cols`` at configuration i for the point (3,) to jac (N, 6, nv)."""
    for c in cols:
        cb = col_body[c]
        ax = col_axis[c]
        a0 = rot[cb, i, 0, 0] * ax[0] + rot[cb, i, 0, 1] * ax[1] + rot[cb, i, 0, 2] * ax[2]
        a1 = rot[cb, i, 1, 0] * ax[0] + rot[cb, i, 1, 1] * ax[1] + rot[cb, i, 1, 2] * ax[2]
        a2 = rot[cb, i, 2, 0] * ax[0] + rot[cb, i, 2, 1] * ax[1] + rot[cb, i, 2, 2] * ax[2]
        v = col_v[c]
        f = col_mult[c]
        if col_rot[c]:
            l0 = point[0] - pos[cb, i, 0]
            l1 = point[1] - pos[cb, i, 1]
            l2 = point[2] - pos[cb, i, 2]
            jac[i, 0, v] += f * (a1 * l2 - a2 * l1)
            jac[i, 1, v] += f * (a2 * l0 - a0 * l2)
            jac[i, 2, v] += f * (a0 * l1 - a1 * l0)
            jac[i, 3, v] += f * a0
            jac[i, 4, v] += f * a1
            jac[i, 5, v] += f * a2
        else:
            jac[i, 0, v] += f * a0
            jac[i, 1, v] += f * a1
            jac[i, 2, v] += f * a2


@njit(cache=True)
def jacobian_at(rot, pos, point, cols, col_body, col_axis, col_rot, col_v, col_mult, nv):
    """Return the (N, 6, nv) Jacobians of base-frame points (N, 3) moved by columns ``cols``.

    Column c turns (col_rot[c]) or slides along col_axis[c] (in the frame of body
    col_body[c]) and drives tangent entry col_v[c] with the factor col_mult[c].
    """
    n = point.shape[0]
    jac = np.zeros((n, 6, nv))
    for i in range(n):
        _add_columns(jac, rot, pos, i, point[i], cols, col_body, col_axis, col_rot, col_v,
                     col_mult)
    return jac


@njit(cache=True)
def _link_pose(rot, pos, body, off, i, lr, lp):
    """Write the base-frame rotation lr (3, 3) and origin lp (3,) of a link at row i."""
    for r in range(3):
        a0, a1, a2 = rot[body, i, r, 0], rot[body, i, r, 1], rot[body, i, r, 2]
        for c in range(3):
            lr[r, c] = a0 * off[0, c] + a1 * off[1, c] + a2 * off[2, c]
        lp[r] = pos[body, i, r] + a0 * off[0, 3] + a1 * off[1, 3] + a2 * off[2, 3]


@njit(cache=True)
def _relative(lr, target, rel):
    """Write rel = lr @ target[:3, :3]^T."""
    for r in range(3):
        for c in range(3):
            rel[r, c] = lr[r, 0] * target[c, 0] + lr[r, 1] * target[c, 1] + lr[r, 2] * target[c, 2]


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
def pose_residual_jacobian(rot, pos, body, off, target, cols, col_body, col_axis, col_rot,
                           col_v, col_mult, nv):
    """Return (r (N, 6), jac (N, 6, nv)) of a pose target on a link of ``body`` (>= 0).

    r: position error [m] then the rotation vector of R_link target_R^T; jac: its exact
    Jacobian (orientation rows J_l^-1(r) J_w), as ``goals.PoseTarget.residual_jacobian``.
    off (4, 4): the link in the body frame; target (4, 4): the goal pose.
    """
    n = rot.shape[1]
    res = np.empty((n, 6))
    jac = np.zeros((n, 6, nv))
    lr = np.empty((3, 3))
    lp = np.empty(3)
    rel = np.empty((3, 3))
    tmp = np.empty((3, nv))
    for i in range(n):
        _pose_rj_row(rot, pos, i, body, off, target, cols, col_body, col_axis, col_rot, col_v,
                     col_mult, res[i], jac, lr, lp, rel, tmp)
    return res, jac


@njit(cache=True)
def _pose_rj_row(rot, pos, i, body, off, target, cols, col_body, col_axis, col_rot, col_v,
                 col_mult, res, jac, lr, lp, rel, tmp):
    """Write row i of ``pose_residual_jacobian``: res (6,), jac[i] (jac zeroed by the caller)."""
    nv = jac.shape[2]
    _link_pose(rot, pos, body, off, i, lr, lp)
    for r in range(3):
        res[r] = lp[r] - target[r, 3]
    _relative(lr, target, rel)
    _rotvec(rel, res[3:])
    _add_columns(jac, rot, pos, i, lp, cols, col_body, col_axis, col_rot, col_v, col_mult)
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
def pose_errors(rot, pos, body, off, target):
    """Return (position error [m] (N,), rotation angle [rad] (N,)) of a link of ``body``
    (>= 0) to the pose target (4, 4), as ``goals.PoseTarget.errors``."""
    n = rot.shape[1]
    perr = np.empty(n)
    angle = np.empty(n)
    lr = np.empty((3, 3))
    lp = np.empty(3)
    rel = np.empty((3, 3))
    for i in range(n):
        perr[i], angle[i] = _pose_errors_row(rot, pos, i, body, off, target, lr, lp, rel)
    return perr, angle


@njit(cache=True)
def _pose_errors_row(rot, pos, i, body, off, target, lr, lp, rel):
    """Return (position error, rotation angle) of row i (see ``pose_errors``)."""
    _link_pose(rot, pos, body, off, i, lr, lp)
    d0 = lp[0] - target[0, 3]
    d1 = lp[1] - target[1, 3]
    d2 = lp[2] - target[2, 3]
    _relative(lr, target, rel)
    x = rel[2, 1] - rel[1, 2]
    y = rel[0, 2] - rel[2, 0]
    z = rel[1, 0] - rel[0, 1]
    trace = rel[0, 0] + rel[1, 1] + rel[2, 2]
    return (math.sqrt(d0 * d0 + d1 * d1 + d2 * d2),
            math.atan2(0.5 * math.sqrt(x * x + y * y + z * z), 0.5 * (trace - 1.0)))


@njit(cache=True)
def _row_pose_errors(qrow, parent, kind, qi, mult, add, rot0, terms, offset, axis, body, off,
                     target, rot, pos, loc, t, lr, lp, rel):
    """Return (position error, rotation angle) of one configuration's link to the pose target:
    its FK into row 0 of the work arrays rot, pos, then ``_pose_errors_row``."""
    _fk_row(qrow, parent, kind, qi, mult, add, rot0, terms, offset, axis, rot, pos, 0, loc, t)
    return _pose_errors_row(rot, pos, 0, body, off, target, lr, lp, rel)


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
def quat_rotvecs(q, eps):
    """Return the (N, 3) rotation vectors 2 log(q) of (N, 4) unit quaternion rows, angle in
    [0, pi]: ``rotations.quat_to_rotvec`` (the hemisphere w >= 0; eps: its floor of w)."""
    out = np.empty((q.shape[0], 3))
    for i in range(q.shape[0]):
        sign = -1.0 if q[i, 0] < 0.0 else 1.0
        w, x, y, z = sign * q[i, 0], sign * q[i, 1], sign * q[i, 2], sign * q[i, 3]
        s = math.sqrt(x * x + y * y + z * z)
        scale = 2.0 / max(w, eps) if s < 1e-9 else 2.0 * math.atan2(s, w) / s
        out[i, 0] = x * scale
        out[i, 1] = y * scale
        out[i, 2] = z * scale
    return out


@njit(cache=True)
def quat_relative_rotvecs(q, ref, eps):
    """Return the (N, 3) rotation vectors 2 log(conj(q_i) ref_(i mod R)) of (N, 4) unit
    quaternion rows q and (R, 4) rows ref, R dividing N (particles' ball joints against one
    reference): ``rotations.quat_relative_rotvecs``, the arithmetic of ``quat_products`` and
    ``quat_rotvecs`` in one pass."""
    rel = np.empty((q.shape[0], 4))
    count = ref.shape[0]
    for i in range(q.shape[0]):
        r = i % count
        _hamilton_row(q[i, 0], -q[i, 1], -q[i, 2], -q[i, 3],
                      ref[r, 0], ref[r, 1], ref[r, 2], ref[r, 3], rel, i)
    return quat_rotvecs(rel, eps)


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
    """Return the (N, 4) slerps of (N, 4) unit quaternion rows a and b at the scalar t along
    the shorter arc: ``rotations.quat_slerp`` (the arithmetic of its numpy form, row by row;
    the SMC solver's branch memory averages every ball joint with it each step)."""
    out = np.empty((a.shape[0], 4))
    for i in range(a.shape[0]):
        dot = a[i, 0] * b[i, 0] + a[i, 1] * b[i, 1] + a[i, 2] * b[i, 2] + a[i, 3] * b[i, 3]
        sign = -1.0 if dot < 0.0 else 1.0
        dot = abs(dot)
        theta = math.acos(min(max(dot, -1.0), 1.0))
        sin_theta = math.sin(theta)
        if sin_theta < 1e-6:
            wa, wb = 1.0 - t, t
        else:
            wa = math.sin((1.0 - t) * theta) / sin_theta
            wb = math.sin(t * theta) / sin_theta
        norm2 = 0.0
        for k in range(4):
            out[i, k] = wa * a[i, k] + wb * (sign * b[i, k])
            norm2 += out[i, k] * out[i, k]
        norm = math.sqrt(norm2)
        for k in range(4):
            out[i, k] /= norm
    return out


@njit(cache=True)
def motion_distances(q, ref, sq, sv, cont, bq, bv, w, eps):
    """Return (norm (N,), peak (N,)): the weighted tangent differences ``ref - q_i`` of
    configuration rows q (N, nq) from ref (nq,), as their 2-norm and their largest
    magnitude: ``MinimalMotion.distance`` and ``jump`` in one pass, without the (N, nv)
    difference array. Scalar joints sq -> sv (continuous ones, ``cont``, wrapped to
    [-pi, pi)); ball joints bq (B, 4) -> bv (B, 3) the rotation vector 2 log(conj(q) ref),
    the arithmetic of ``quat_relative_rotvecs``; w (nv,) the weights. NaN propagates."""
    n = q.shape[0]
    nv = w.shape[0]
    norm = np.empty(n)
    peak = np.empty(n)
    d = np.empty(nv)
    rel = np.empty((1, 4))
    for i in range(n):
        for j in range(sq.shape[0]):
            x = ref[sq[j]] - q[i, sq[j]]
            if cont[j]:
                x = (x + math.pi) % (2.0 * math.pi) - math.pi
            d[sv[j]] = x
        for b in range(bq.shape[0]):
            c0, c1, c2, c3 = bq[b, 0], bq[b, 1], bq[b, 2], bq[b, 3]
            _hamilton_row(q[i, c0], -q[i, c1], -q[i, c2], -q[i, c3],
                          ref[c0], ref[c1], ref[c2], ref[c3], rel, 0)
            sign = -1.0 if rel[0, 0] < 0.0 else 1.0
            rw, rx, ry, rz = sign * rel[0, 0], sign * rel[0, 1], sign * rel[0, 2], sign * rel[0, 3]
            r = math.sqrt(rx * rx + ry * ry + rz * rz)
            scale = 2.0 / max(rw, eps) if r < 1e-9 else 2.0 * math.atan2(r, rw) / r
            d[bv[b, 0]] = rx * scale
            d[bv[b, 1]] = ry * scale
            d[bv[b, 2]] = rz * scale
        total = 0.0
        top = 0.0
        for v in range(nv):
            x = d[v] * w[v]
            total += x * x
            a = abs(x)
            if a > top or a != a:
                top = a
        norm[i] = math.sqrt(total)
        peak[i] = top
    return norm, peak


@njit(cache=True)
def clip_ball_rows(quat, limits):
    """Return the (N, 4) rows of ``quat`` (N, 4) normalised, in the hemisphere w >= 0, and
    turned back onto their joint's angle limit where they exceed it (about the same axis):
    ``kinematics._clip_ball`` row by row. limits (B,) [rad], B dividing N (the particles'
    ball joints, joint-minor)."""
    out = np.empty((quat.shape[0], 4))
    count = limits.shape[0]
    for i in range(quat.shape[0]):
        w, x, y, z = quat[i, 0], quat[i, 1], quat[i, 2], quat[i, 3]
        norm = max(math.sqrt(w * w + x * x + y * y + z * z), 1e-12)
        w, x, y, z = w / norm, x / norm, y / norm, z / norm
        if w < 0.0:
            w, x, y, z = -w, -x, -y, -z
        cos_half = math.cos(0.5 * min(limits[i % count], math.pi))
        if w < cos_half - 1e-15:
            s = max(math.sqrt(x * x + y * y + z * z), 1e-12)
            sin_half = math.sqrt(1.0 - cos_half * cos_half)
            w, x, y, z = cos_half, x / s * sin_half, y / s * sin_half, z / s * sin_half
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = w, x, y, z
    return out


@njit(cache=True)
def quat_pair_rotvecs(q, first, second, eps):
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
    return quat_rotvecs(rel, eps).reshape(n, 3 * pairs)


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
    """Return (task (K, nv), pull (K, nv)) of ``smc_policies._lm_null_step``.

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
    """Return the (K, nv) steps of ``smc_policies._lm_spring_step``: the minimiser of
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


@njit(cache=True)
def blocked_joints(q, dv, sq, sv, lower, upper):
    """Return (any, mask (K, nv) bool): 1-DOF joints at a limit that dv (K, nv) pushes
    outwards, as ``smc_policies._blocked_joints``. sq, sv: the scalar joints' indices."""
    k_count, nv = dv.shape
    mask = np.zeros((k_count, nv), dtype=np.bool_)
    found = False
    for j in range(sq.shape[0]):
        qi = sq[j]
        vi = sv[j]
        span = upper[qi] - lower[qi]
        eps = 1e-9 * (span if span > 1.0 else 1.0)
        lo = lower[qi] + eps
        hi = upper[qi] - eps
        for k in range(k_count):
            if (q[k, qi] <= lo and dv[k, vi] < 0.0) or (q[k, qi] >= hi and dv[k, vi] > 0.0):
                mask[k, vi] = True
                found = True
    return found, mask


@njit(cache=True)
def random_walk(prev, z, scale, noise, sq, lower, upper, out, bad, keep):
    """Draw (or redraw) the 1-DOF joints of the SMC random walk, as ``FilterModel.propagate``.

    For each entry (i, j) flagged in ``bad`` (N, S), in row-major order: out[i, sq[j]] =
    prev[i, sq[j]] + z[next] * noise[j] * scale[i] (z: one standard normal per flagged
    entry, consumed in that order, so the draws are NumPy's for the same stream), then
    bad[i, j] = the value is outside [lower[sq[j]], upper[sq[j]]]. keep: instead of drawing,
    put the flagged entries back to ``prev`` (the fallback after the last redraw). Returns
    how many entries are still flagged.
    """
    n = prev.shape[0]
    s = sq.shape[0]
    used = 0
    left = 0
    for i in range(n):
        for j in range(s):
            if not bad[i, j]:
                continue
            c = sq[j]
            if keep:
                out[i, c] = prev[i, c]
                bad[i, j] = False
                continue
            v = prev[i, c] + z[used] * (noise[j] * scale[i])
            used += 1
            out[i, c] = v
            if v < lower[c] or v > upper[c]:
                left += 1
            else:
                bad[i, j] = False
    return left


@njit(cache=True)
def refine_pose(q, cost, steps, alphas, damping, max_step, lower, upper, scale, weight,
                sigma_p, sigma_o, parent, kind, qi, mult, add, rot0, terms, offset, axis,
                body, off, target, cols, col_body, col_axis, col_rot, col_v, col_mult):
    """Run the SMC refinement's LM steps on one pose target, each row on its own.

    The fused form of ``Refinement.move`` without motion prior, guard or hard constraints,
    for chains without ball joints (nq == nv): per step, the whitened residual r and
    Jacobian J (rows times scale (6,) = sqrt(weight) / sigma), lam = cost / 2 + damping, the
    LM step (again with the columns of the joints it pushes out of their limits removed),
    capped to max_step; the trials clip(q + alpha dv) for each alpha; the lowest-cost trial
    is taken when it lowers the cost weight ((p / sigma_p)^2 + (o / sigma_o)^2), else the
    row stops. q (K, nq) and cost (K,) are updated in place; returns improved (K,) bool.
    """
    k_count, nq = q.shape
    nb = parent.shape[0]
    nv = nq
    n_alpha = alphas.shape[0]
    rot = np.empty((nb, 1, 3, 3))
    pos = np.empty((nb, 1, 3))
    loc = np.empty((3, 3))
    t = np.empty(3)
    lr = np.empty((3, 3))
    lp = np.empty(3)
    rel = np.empty((3, 3))
    tmp = np.empty((3, nv))
    res = np.empty(6)
    jac = np.zeros((1, 6, nv))
    jm = np.empty((6, nv))
    a = np.empty((6, 6))
    y = np.empty(6)
    dv = np.empty(nv)
    best_q = np.empty(nq)
    trial = np.empty(nq)
    blocked = np.zeros(nv, dtype=np.bool_)
    improved = np.zeros(k_count, dtype=np.bool_)
    for k in range(k_count):
        for _ in range(steps):
            _fk_row(q[k], parent, kind, qi, mult, add, rot0, terms, offset, axis, rot, pos, 0,
                    loc, t)
            jac[:] = 0.0
            _pose_rj_row(rot, pos, 0, body, off, target, cols, col_body, col_axis, col_rot,
                         col_v, col_mult, res, jac, lr, lp, rel, tmp)
            for r in range(6):
                res[r] *= scale[r]
                for v in range(nv):
                    jm[r, v] = jac[0, r, v] * scale[r]
            lam = 0.5 * cost[k] + damping
            _lm_row(jm, res, lam, a, y, dv)
            any_blocked = False
            for v in range(nv):
                span = upper[v] - lower[v]
                eps = 1e-9 * (span if span > 1.0 else 1.0)
                blocked[v] = ((q[k, v] <= lower[v] + eps and dv[v] < 0.0)
                              or (q[k, v] >= upper[v] - eps and dv[v] > 0.0))
                any_blocked = any_blocked or blocked[v]
            if any_blocked:
                for r in range(6):
                    for v in range(nv):
                        if blocked[v]:
                            jm[r, v] = 0.0
                _lm_row(jm, res, lam, a, y, dv)
            biggest = 0.0
            for v in range(nv):
                biggest = max(biggest, abs(dv[v]))
            f = min(1.0, max_step / max(biggest, 1e-12))
            for v in range(nv):
                dv[v] *= f
            best = np.inf
            for j in range(n_alpha):
                for v in range(nv):
                    x = q[k, v] + alphas[j] * dv[v]
                    trial[v] = min(max(x, lower[v]), upper[v])
                pe, oe = _row_pose_errors(trial, parent, kind, qi, mult, add, rot0, terms, offset,
                                          axis, body, off, target, rot, pos, loc, t, lr, lp, rel)
                c = weight * ((pe / sigma_p) ** 2 + (oe / sigma_o) ** 2)
                if c != c:              # NaN: numpy's argmin picks the first one
                    best = c
                    break
                if c < best:
                    best = c
                    best_q[:] = trial
            if not best < cost[k]:
                break
            improved[k] = True
            cost[k] = best
            q[k] = best_q
    return improved


@njit(cache=True)
def _point_gradient(rot, pos, i, body, point, grad, body_mask, col_body, col_axis, col_rot,
                    col_v, col_mult, out):
    """Add grad . J(point) (3,) . (3, nv) into out (nv,): J the linear Jacobian of ``point``
    (base frame) moving with ``body`` at configuration i (``point_jacobians``' columns)."""
    m = body + 1
    for c in range(col_body.shape[0]):
        if not body_mask[m, c]:
            continue
        b = col_body[c]
        a0 = rot[b, i, 0, 0] * col_axis[c, 0] + rot[b, i, 0, 1] * col_axis[c, 1] \
            + rot[b, i, 0, 2] * col_axis[c, 2]
        a1 = rot[b, i, 1, 0] * col_axis[c, 0] + rot[b, i, 1, 1] * col_axis[c, 1] \
            + rot[b, i, 1, 2] * col_axis[c, 2]
        a2 = rot[b, i, 2, 0] * col_axis[c, 0] + rot[b, i, 2, 1] * col_axis[c, 1] \
            + rot[b, i, 2, 2] * col_axis[c, 2]
        if col_rot[c]:
            l0 = point[0] - pos[b, i, 0]
            l1 = point[1] - pos[b, i, 1]
            l2 = point[2] - pos[b, i, 2]
            j0 = a1 * l2 - a2 * l1
            j1 = a2 * l0 - a0 * l2
            j2 = a0 * l1 - a1 * l0
        else:
            j0, j1, j2 = a0, a1, a2
        f = col_mult[c]
        out[col_v[c]] += grad[0] * (j0 * f) + grad[1] * (j1 * f) + grad[2] * (j2 * f)


@njit(cache=True)
def distance_gradients(rot, pos, n, body_a, point_a, body_b, point_b, grad, body_mask,
                       col_body, col_axis, col_rot, col_v, col_mult, nv):
    """Return (R, nv): d distance / d tangent step of R leaves, ``grad . (J_a - J_b)``.

    rot (B, N, 3, 3), pos (B, N, 3): the frames; n (R,): each leaf's configuration;
    body_a (R,), point_a (R, 3): its robot sphere's body and centre (base frame); body_b,
    point_b: the other sphere's for a self pair, body_b < -1 for an obstacle (no second
    term); grad (R, 3): the distance's gradient in point a; body_mask (B + 1, C): which
    columns move which body (row 0: the base); columns as ``Chain.kernel_columns``.
    """
    out = np.zeros((n.shape[0], nv))
    ta = np.empty(nv)
    tb = np.empty(nv)
    for r in range(n.shape[0]):
        ta[:] = 0.0
        _point_gradient(rot, pos, n[r], body_a[r], point_a[r], grad[r], body_mask, col_body,
                        col_axis, col_rot, col_v, col_mult, ta)
        if body_b[r] < -1:
            for v in range(nv):
                out[r, v] = ta[v]
            continue
        tb[:] = 0.0
        _point_gradient(rot, pos, n[r], body_b[r], point_b[r], grad[r], body_mask, col_body,
                        col_axis, col_rot, col_v, col_mult, tb)
        for v in range(nv):
            out[r, v] = ta[v] - tb[v]
    return out


@njit(cache=True)
def body_points_world(rot, pos, row_body, local, out):
    """Write the base-frame positions of points fixed to bodies, for every configuration.

    rot (B, N, 3, 3), pos (B, N, 3): body frames (``Frames.rot``/``pos``); row_body (T,)
    int: each point's body (-1: the base); local (T, 3): the point in its body's frame [m];
    out (3, N * T): x, y and z planes, point r of configuration n at column n * T + r (the
    collision engine's ``World`` layout).
    """
    n_count = rot.shape[1]
    t_count = row_body.shape[0]
    for n in range(n_count):
        base = n * t_count
        for r in range(t_count):
            b = row_body[r]
            x, y, z = local[r, 0], local[r, 1], local[r, 2]
            if b < 0:
                out[0, base + r] = x
                out[1, base + r] = y
                out[2, base + r] = z
            else:
                for a in range(3):
                    out[a, base + r] = (rot[b, n, a, 0] * x + rot[b, n, a, 1] * y
                                        + rot[b, n, a, 2] * z + pos[b, n, a])


@njit(cache=True)
def _row_point(rot, pos, row_body, row_local, n, r, out):
    """Write the base-frame position of row r (its body's frame at configuration n) to out."""
    b = row_body[r]
    x, y, z = row_local[r, 0], row_local[r, 1], row_local[r, 2]
    if b < 0:
        out[0], out[1], out[2] = x, y, z
    else:
        for a in range(3):
            out[a] = rot[b, n, a, 0] * x + rot[b, n, a, 1] * y + rot[b, n, a, 2] * z + pos[b, n, a]


# [m] how far a part's bound must clear a test before its spheres are skipped: the bound
# never exceeds a member sphere's own value, but the two are rounded differently.
_PART_SLACK = 1e-9


@njit(cache=True)
def _near_spheres(rot, pos, row_body, row_local, n, sph_row, radii, sphere_index, indexed,
                  start, count, center, radius, limit, keep, points, sphere_part, rpart_local,
                  rpart_body, rpart_radius):
    """Keep the spheres start..start+count (through ``sphere_index`` when ``indexed``) whose
    distance to the sphere (center, radius) is below ``limit``: their indices to keep[:k],
    their base-frame centres to points[:k]; return k. A run of spheres of one part (the
    spheres are stored part by part) is skipped when the part's bounding sphere is clear,
    so a large link (a torso of 1800 spheres) costs its parts, not its spheres; the spheres
    kept and their order are those of the sphere-by-sphere test. (The arithmetic is written
    out here: a call per sphere or part, with its array arguments, costs more than it.)"""
    k = 0
    current, clear = -1, False
    cx, cy, cz = center[0], center[1], center[2]
    for j in range(count):
        s = sphere_index[start + j] if indexed else start + j
        part = sphere_part[s]
        if part != current:
            current = part
            b = rpart_body[part]
            x, y, z = rpart_local[part, 0], rpart_local[part, 1], rpart_local[part, 2]
            if b >= 0:
                x, y, z = (rot[b, n, 0, 0] * x + rot[b, n, 0, 1] * y + rot[b, n, 0, 2] * z
                           + pos[b, n, 0],
                           rot[b, n, 1, 0] * x + rot[b, n, 1, 1] * y + rot[b, n, 1, 2] * z
                           + pos[b, n, 1],
                           rot[b, n, 2, 0] * x + rot[b, n, 2, 1] * y + rot[b, n, 2, 2] * z
                           + pos[b, n, 2])
            dx, dy, dz = x - cx, y - cy, z - cz
            clear = (math.sqrt(dx * dx + dy * dy + dz * dz) - rpart_radius[part] - radius
                     >= limit + _PART_SLACK)
        if clear:
            continue
        r = sph_row[s]
        b = row_body[r]
        x, y, z = row_local[r, 0], row_local[r, 1], row_local[r, 2]
        if b >= 0:
            x, y, z = (rot[b, n, 0, 0] * x + rot[b, n, 0, 1] * y + rot[b, n, 0, 2] * z
                       + pos[b, n, 0],
                       rot[b, n, 1, 0] * x + rot[b, n, 1, 1] * y + rot[b, n, 1, 2] * z
                       + pos[b, n, 1],
                       rot[b, n, 2, 0] * x + rot[b, n, 2, 1] * y + rot[b, n, 2, 2] * z
                       + pos[b, n, 2])
        dx, dy, dz = x - cx, y - cy, z - cz
        if math.sqrt(dx * dx + dy * dy + dz * dz) - radii[s] - radius < limit:
            keep[k] = s
            points[k, 0], points[k, 1], points[k, 2] = x, y, z
            k += 1
    return k


@njit(cache=True)
def _put(out_n, out_p, out_a, out_b, out_d, out_s, m, n, pair, a, b, d, is_self):
    """Write leaf m (n, pair, a, b, d, is_self) into the output arrays when it fits (the
    caller counts every leaf and calls again with room for all when some did not fit)."""
    if m < out_d.shape[0]:
        out_n[m], out_p[m], out_a[m], out_b[m], out_d[m], out_s[m] = n, pair, a, b, d, is_self


@njit(cache=True)
def collision_query(rot, pos, row_body, row_local, q, threshold, padding, radii, sph_row,
                    link_row, link_radius, link_sphere_start, link_sphere_count, sphere_part,
                    rpart_local, rpart_body, rpart_radius, pairs,
                    table_of_pair, t_qcols, t_low, t_step, t_size, t_offset, t_values,
                    subset_limit, sphere_index, sphere_ranges, full_ranges, pair_link,
                    pair_obj, obj_center, obj_radius, obj_part_start, obj_part_count,
                    part_center, part_radius, part_start, part_count, prim_kind, prim_rot,
                    prim_trans, prim_size, mode, out_n, out_p, out_a, out_b, out_d, out_s):
    """Write the leaf pairs of ``engine.query`` below ``threshold`` to out_n, out_p, out_a,
    out_b, out_d, out_s (n, pair, a, b, d, is_self; as many as fit) and return their count
    (the caller calls again with room for all when it exceeds the arrays' length: growing
    arrays inside the loops would cost reference counting on every sphere pair), the same
    three-level broad phase in one pass per configuration.

    mode: 0 every leaf below ``threshold``; 1 (nearest) only each configuration's closest
    leaf; 2 (per pair) only the closest leaf of each (configuration, object pair). Modes 1
    and 2 prune by branch and bound: the threshold drops to the best distance found so far
    (of the configuration, of the pair), so the broad phase and the leaf loop skip what
    cannot be closer. Ties keep the first leaf found, as a stable sort of mode 0's leaves
    by distance would.

    rot (B, N, 3, 3), pos (B, N, 3): the body frames of N configurations; row_body (T,),
    row_local (T, 3): the ``RobotGeometry`` rows (each sphere centre and link centre: its
    body, -1 for the base, and its position there [m]), moved to the base frame only when
    the broad phase reaches them; q (N, nq): the configurations (for the pair tables);
    radii, sph_row, link_row, link_radius, link_sphere_start/count: the ``RobotGeometry``;
    sphere_part (S,), rpart_local (Q, 3), rpart_body (Q,), rpart_radius (Q,): its parts (each
    sphere's part; each part's bounding sphere in its body's frame), which skip the spheres
    of a part whose bound is clear;
    pairs (P, 2): self pairs; table_of_pair (P,): each pair's table (-1: none; all -1
    without tables) and the ``PairTables`` arrays (t_*: qcols, low, step, size, offset,
    values of the tables; subset_limit, sphere_index, sphere_ranges, full_ranges);
    pair_link, pair_obj and the rest: the ``ObstacleGeometry`` (empty without obstacles).
    The leaves come configuration by configuration, self pairs before obstacle pairs.
    """
    m = 0
    cap = out_d.shape[0]
    n_spheres = radii.shape[0]
    n_links = link_row.shape[0]
    keep_a = np.empty(n_spheres, dtype=np.int64)
    point_a = np.empty((n_spheres, 3))
    keep_b = np.empty(n_spheres, dtype=np.int64)
    point_b = np.empty((n_spheres, 3))
    wl = np.empty((n_links, 3))
    n_pairs = pairs.shape[0]
    use_tables = sphere_ranges.shape[0] == n_pairs and n_pairs > 0
    for n in range(rot.shape[1]):
        thr = threshold
        best_p, best_a, best_b, best_d, best_s = -1, -1, -1, math.inf, False
        for link in range(n_links):
            _row_point(rot, pos, row_body, row_local, n, link_row[link], wl[link])
        for p in range(n_pairs):
            lim = thr                 # this pair's threshold (drops in modes 1 and 2)
            pair_a, pair_b, pair_d = -1, -1, math.inf
            la, lb = pairs[p, 0], pairs[p, 1]
            dx, dy, dz = wl[la, 0] - wl[lb, 0], wl[la, 1] - wl[lb, 1], wl[la, 2] - wl[lb, 2]
            d1 = math.sqrt(dx * dx + dy * dy + dz * dz) - (link_radius[la] + link_radius[lb]
                                                           + padding)
            t = table_of_pair[p]
            if t >= 0:
                c0 = np.floor((q[n, t_qcols[t, 0]] - t_low[t, 0]) / t_step[t, 0])
                c1 = np.floor((q[n, t_qcols[t, 1]] - t_low[t, 1]) / t_step[t, 1])
                c0 = min(max(c0, 0.0), t_size[t, 0] - 1.0)
                c1 = min(max(c1, 0.0), t_size[t, 1] - 1.0)
                bound = t_values[t_offset[t] + int(c0) * t_size[t, 1] + int(c1)] - padding
                if bound > d1:
                    d1 = bound
            if not d1 < lim:
                continue
            indexed = use_tables
            if use_tables:
                if lim + padding <= subset_limit[p]:
                    a_start, a_count = sphere_ranges[p, 0], sphere_ranges[p, 1]
                    b_start, b_count = sphere_ranges[p, 2], sphere_ranges[p, 3]
                else:
                    a_start, a_count = full_ranges[p, 0], full_ranges[p, 1]
                    b_start, b_count = full_ranges[p, 2], full_ranges[p, 3]
            else:
                a_start, a_count = link_sphere_start[la], link_sphere_count[la]
                b_start, b_count = link_sphere_start[lb], link_sphere_count[lb]
            # Each side's spheres against the other link's bounding sphere.
            na = _near_spheres(rot, pos, row_body, row_local, n, sph_row, radii, sphere_index,
                               indexed, a_start, a_count, wl[lb], link_radius[lb],
                               lim + padding, keep_a, point_a,
                               sphere_part, rpart_local, rpart_body, rpart_radius)
            if na == 0:
                continue
            nb = _near_spheres(rot, pos, row_body, row_local, n, sph_row, radii, sphere_index,
                               indexed, b_start, b_count, wl[la], link_radius[la],
                               lim + padding, keep_b, point_b,
                               sphere_part, rpart_local, rpart_body, rpart_radius)
            for i in range(na):
                sa = keep_a[i]
                for j in range(nb):
                    sb = keep_b[j]
                    dx = point_a[i, 0] - point_b[j, 0]
                    dy = point_a[i, 1] - point_b[j, 1]
                    dz = point_a[i, 2] - point_b[j, 2]
                    d3 = math.sqrt(dx * dx + dy * dy + dz * dz) - (radii[sa] + radii[sb]
                                                                   + padding)
                    if d3 < lim:
                        if mode == 0:
                            if m < cap:
                                out_n[m], out_p[m], out_a[m], out_b[m] = n, p, sa, sb
                                out_d[m], out_s[m] = d3, True
                            m += 1
                        else:
                            pair_a, pair_b, pair_d, lim = sa, sb, d3, d3
            if pair_a >= 0:
                if mode == 2:
                    _put(out_n, out_p, out_a, out_b, out_d, out_s, m, n, p, pair_a, pair_b,
                         pair_d, True)
                    m += 1
                else:
                    best_p, best_a, best_b, best_d, best_s = p, pair_a, pair_b, pair_d, True
                    thr = pair_d
        for k in range(pair_link.shape[0]):
            lim = thr
            pair_a, pair_b, pair_d = -1, -1, math.inf
            link, o = pair_link[k], pair_obj[k]
            cx, cy, cz = obj_center[o, 0], obj_center[o, 1], obj_center[o, 2]
            dx, dy, dz = wl[link, 0] - cx, wl[link, 1] - cy, wl[link, 2] - cz
            d1 = math.sqrt(dx * dx + dy * dy + dz * dz) - (link_radius[link] + obj_radius[o]
                                                           + padding)
            if not d1 < lim:
                continue
            # The link's spheres against the obstacle's bounding sphere.
            na = _near_spheres(rot, pos, row_body, row_local, n, sph_row, radii, sphere_index,
                               False, link_sphere_start[link], link_sphere_count[link],
                               obj_center[o], obj_radius[o], lim + padding, keep_a, point_a,
                               sphere_part, rpart_local, rpart_body, rpart_radius)
            multi = obj_part_count[o] != 1
            for i in range(na):
                s = keep_a[i]
                px, py, pz = point_a[i, 0], point_a[i, 1], point_a[i, 2]
                for part in range(obj_part_start[o], obj_part_start[o] + obj_part_count[o]):
                    if multi:
                        dx = px - part_center[part, 0]
                        dy = py - part_center[part, 1]
                        dz = pz - part_center[part, 2]
                        d2 = math.sqrt(dx * dx + dy * dy + dz * dz) - (
                            radii[s] + part_radius[part] + padding)
                        if not d2 < lim:
                            continue
                    for g in range(part_start[part], part_start[part] + part_count[part]):
                        # ``_point_primitive``, written out (a call per primitive passes
                        # three arrays and costs more than the arithmetic).
                        vx, vy, vz = px - prim_trans[g, 0], py - prim_trans[g, 1], \
                            pz - prim_trans[g, 2]
                        lx = prim_rot[g, 0, 0] * vx + prim_rot[g, 1, 0] * vy + \
                            prim_rot[g, 2, 0] * vz
                        ly = prim_rot[g, 0, 1] * vx + prim_rot[g, 1, 1] * vy + \
                            prim_rot[g, 2, 1] * vz
                        lz = prim_rot[g, 0, 2] * vx + prim_rot[g, 1, 2] * vy + \
                            prim_rot[g, 2, 2] * vz
                        kind = prim_kind[g]
                        if kind == 0:                                   # sphere
                            e = math.sqrt(lx * lx + ly * ly + lz * lz) - prim_size[g, 0]
                        elif kind == 1:                                 # box
                            qx = abs(lx) - prim_size[g, 0]
                            qy = abs(ly) - prim_size[g, 1]
                            qz = abs(lz) - prim_size[g, 2]
                            ox, oy, oz = max(qx, 0.0), max(qy, 0.0), max(qz, 0.0)
                            e = math.sqrt(ox * ox + oy * oy + oz * oz) + min(
                                max(qx, max(qy, qz)), 0.0)
                        else:                                           # cylinder
                            ea = math.sqrt(lx * lx + ly * ly) - prim_size[g, 0]
                            eb = abs(lz) - prim_size[g, 1]
                            oa, ob = max(ea, 0.0), max(eb, 0.0)
                            e = math.sqrt(oa * oa + ob * ob) + min(max(ea, eb), 0.0)
                        d3 = e - (radii[s] + padding)
                        if d3 < lim:
                            if mode == 0:
                                if m < cap:
                                    out_n[m], out_p[m], out_a[m], out_b[m] = n, k + n_pairs, s, g
                                    out_d[m], out_s[m] = d3, False
                                m += 1
                            else:
                                pair_a, pair_b, pair_d, lim = s, g, d3, d3
            if pair_a >= 0:
                if mode == 2:
                    _put(out_n, out_p, out_a, out_b, out_d, out_s, m, n, k + n_pairs, pair_a,
                         pair_b, pair_d, False)
                    m += 1
                else:
                    best_p, best_a, best_b, best_d = k + n_pairs, pair_a, pair_b, pair_d
                    best_s = False
                    thr = pair_d
        if mode == 1 and best_p >= 0:
            _put(out_n, out_p, out_a, out_b, out_d, out_s, m, n, best_p, best_a, best_b,
                 best_d, best_s)
            m += 1
    return m


@njit(cache=True)
def first_solution(q, steps, alphas, damping, max_step, lower, upper, scale, weight, sigma_p,
                   sigma_o, pos_tol, ori_tol, parent, kind, qi, mult, add, rot0, terms, offset,
                   axis, body, off, target, cols, col_body, col_axis, col_rot, col_v,
                   col_mult):
    """Refine the rows of ``q`` (K, nq) one after another, each alone by ``refine_pose``'s LM
    steps, until one meets the tolerance; return its index (-1: none did).

    The SMC ``solve``'s first stage (``SmcSolver._seed_stage``): row 0 is the seed, the others
    draws of the filter's proposal. q is updated in place (refined rows); rows after the
    returned one are untouched. pos_tol [m], ori_tol [rad]; the other arguments as
    ``refine_pose`` (a plain pose target on a chain without ball joints). Returns (index,
    position error [m], orientation error [rad]) of that row (errors NaN when none).
    """
    nb = parent.shape[0]
    rot = np.empty((nb, 1, 3, 3))
    pos = np.empty((nb, 1, 3))
    loc = np.empty((3, 3))
    t = np.empty(3)
    lr = np.empty((3, 3))
    lp = np.empty(3)
    rel = np.empty((3, 3))
    cost = np.empty(1)
    for r in range(q.shape[0]):
        row = q[r:r + 1]
        pe, oe = _row_pose_errors(row[0], parent, kind, qi, mult, add, rot0, terms, offset,
                                  axis, body, off, target, rot, pos, loc, t, lr, lp, rel)
        if pe <= pos_tol and oe <= ori_tol:
            return r, pe, oe
        cost[0] = weight * ((pe / sigma_p) ** 2 + (oe / sigma_o) ** 2)
        refine_pose(row, cost, steps, alphas, damping, max_step, lower, upper, scale, weight,
                    sigma_p, sigma_o, parent, kind, qi, mult, add, rot0, terms, offset, axis,
                    body, off, target, cols, col_body, col_axis, col_rot, col_v, col_mult)
        pe, oe = _row_pose_errors(row[0], parent, kind, qi, mult, add, rot0, terms, offset,
                                  axis, body, off, target, rot, pos, loc, t, lr, lp, rel)
        if pe <= pos_tol and oe <= ori_tol:
            return r, pe, oe
    return -1, math.nan, math.nan


@njit(cache=True)
def _motion_diff(qrow, ref, cont, out):
    """Write ref - qrow (nv,) with continuous joints wrapped to [-pi, pi)."""
    for v in range(qrow.shape[0]):
        d = ref[v] - qrow[v]
        if cont[v]:
            d = (d + math.pi) % (2.0 * math.pi) - math.pi
        out[v] = d


@njit(cache=True)
def _motion_d2(qrow, ref, cont, w, tmp):
    """Return the squared weighted distance as ``MinimalMotion.distance(q) ** 2``."""
    _motion_diff(qrow, ref, cont, tmp)
    s = 0.0
    for v in range(qrow.shape[0]):
        x = tmp[v] * w[v]
        s += x * x
    return math.sqrt(s) ** 2


@njit(cache=True)
def refine_pose_motion(q, cost, guard, steps, alphas, damping, max_step, lower, upper, scale,
                       weight, sigma_p, sigma_o, tol_p, tol_o, precise_fraction, tol_cost,
                       spring_w, spring_fade, slide_min, gain, w, ref, cont,
                       parent, kind, qi, mult, add, rot0, terms, offset, axis,
                       body, off, target, cols, col_body, col_axis, col_rot, col_v, col_mult):
    """``Refinement.move`` with the minimal-motion prior on one pose target, row by row.

    The fused form for chains without ball joints (nq == nv), no hard constraints, one
    plain ``PoseTarget``: coarse rows take the LM step with the prior's spring, precise rows
    the task step plus shares (1, 1/4, 1/16, 0) of the null-space pull, with the
    Gauss-Newton corrector on slides; the trial is picked as in ``move``. q (K, nq), cost
    (K,) and guard (K,; inf: none) are updated in place. spring_w = SPRING * spring,
    w (nv,) the prior's weights, ref (nv,) its reference, cont (nv,) continuous joints.
    Returns (improved (K,) bool, gained (K,) [rad^2]).
    """
    k_count, nq = q.shape
    nv = nq
    nb = parent.shape[0]
    n_alpha = alphas.shape[0]
    n_trials = n_alpha + 1
    rot = np.empty((nb, 1, 3, 3))
    pos = np.empty((nb, 1, 3))
    loc = np.empty((3, 3))
    t = np.empty(3)
    lr = np.empty((3, 3))
    lp = np.empty(3)
    rel = np.empty((3, 3))
    tmp3 = np.empty((3, nv))
    res = np.empty(6)
    res1 = np.empty(6)
    jac = np.zeros((1, 6, nv))
    jac1 = np.zeros((1, 6, nv))
    jm = np.empty((1, 6, nv))
    jb = np.empty((1, 6, nv))
    r2 = np.empty((1, 6))
    one = np.empty(1)
    one_mu = np.empty(1)
    diff = np.empty((1, nv))
    diffb = np.empty((1, nv))
    d0 = np.empty((1, nv))
    dsum = np.empty((1, nv))
    winv2 = np.empty(nv)
    for v in range(nv):
        winv2[v] = 1.0 / (w[v] * w[v])
    tmpv = np.empty(nv)
    steps_k = np.empty((n_trials, nv))
    trials = np.empty((n_trials, nq))
    t_cost = np.empty(n_trials)
    t_pos = np.empty(n_trials)
    t_d2 = np.empty(n_trials)
    t_prec = np.zeros(n_trials, dtype=np.bool_)
    pull_share = np.array([1.0, 0.25, 0.0625, 0.0])
    a = np.empty((6, 6))
    y = np.empty(6)
    improved = np.zeros(k_count, dtype=np.bool_)
    gained = np.zeros(k_count)
    every = np.arange(nv)            # nq == nv: every joint is a scalar one
    for k in range(k_count):
        # Start: distance to the reference and precision of the row.
        pe, oe = _row_pose_errors(q[k], parent, kind, qi, mult, add, rot0, terms, offset,
                                  axis, body, off, target, rot, pos, loc, t, lr, lp, rel)
        precise = pe <= precise_fraction * tol_p and oe <= precise_fraction * tol_o
        dist2 = _motion_d2(q[k], ref, cont, w, tmpv)
        for _ in range(steps):
            _fk_row(q[k], parent, kind, qi, mult, add, rot0, terms, offset, axis, rot, pos,
                    0, loc, t)
            jac[:] = 0.0
            _pose_rj_row(rot, pos, 0, body, off, target, cols, col_body, col_axis, col_rot,
                         col_v, col_mult, res, jac, lr, lp, rel, tmp3)
            for r in range(6):
                r2[0, r] = res[r] * scale[r]
                for v in range(nv):
                    jm[0, r, v] = jac[0, r, v] * scale[r]
            lam = 0.5 * cost[k] + damping
            one[0] = lam
            mu = spring_w * min(1.0, cost[k] / (spring_fade * tol_cost))
            one_mu[0] = mu
            _motion_diff(q[k], ref, cont, diff[0])
            if not precise:
                dv_c = lm_spring_step(jm, r2, one, one_mu, w, diff)
                found, mask = blocked_joints(q[k:k + 1], dv_c, every, every,
                                             lower, upper)
                if found:
                    for r in range(6):
                        for v in range(nv):
                            jb[0, r, v] = 0.0 if mask[0, v] else jm[0, r, v]
                    for v in range(nv):
                        diffb[0, v] = 0.0 if mask[0, v] else diff[0, v]
                    dv_c = lm_spring_step(jb, r2, one, one_mu, w, diffb)
            else:
                dv_c = np.zeros((1, nv))
            for v in range(nv):
                d0[0, v] = gain * diff[0, v]
            dv_t, dv_p = lm_null_step(jm, r2, one, d0, winv2, damping)
            for v in range(nv):
                dsum[0, v] = dv_t[0, v] + dv_p[0, v]
            found, mask = blocked_joints(q[k:k + 1], dsum, every, every,
                                         lower, upper)
            if found:
                for r in range(6):
                    for v in range(nv):
                        if mask[0, v]:
                            jm[0, r, v] = 0.0
                for v in range(nv):
                    if mask[0, v]:
                        d0[0, v] = 0.0
                dv_t, dv_p = lm_null_step(jm, r2, one, d0, winv2, damping)
            biggest = 0.0
            for v in range(nv):
                biggest = max(biggest, abs(dv_p[0, v]))
            f = min(1.0, max_step / max(biggest, 1e-12))
            pull_size = 0.0
            for v in range(nv):
                dv_p[0, v] *= f
                pull_size = max(pull_size, abs(dv_p[0, v]))
            for j in range(n_trials):
                for v in range(nv):
                    if precise:
                        steps_k[j, v] = dv_t[0, v] + pull_share[j] * dv_p[0, v]
                    elif j < n_alpha:
                        steps_k[j, v] = alphas[j] * dv_c[0, v]
                    else:
                        steps_k[j, v] = dv_t[0, v]
                big = 0.0
                for v in range(nv):
                    big = max(big, abs(steps_k[j, v]))
                fs = min(1.0, max_step / max(big, 1e-12))
                for v in range(nv):
                    x = q[k, v] + steps_k[j, v] * fs
                    trials[j, v] = min(max(x, lower[v]), upper[v])
            slide = precise and pull_size > slide_min
            for j in range(n_trials):
                if slide and j < 3:
                    # Gauss-Newton task correction with the step's Jacobian (jm, masked).
                    _fk_row(trials[j], parent, kind, qi, mult, add, rot0, terms, offset, axis,
                            rot, pos, 0, loc, t)
                    jac1[:] = 0.0
                    _pose_rj_row(rot, pos, 0, body, off, target, cols, col_body, col_axis,
                                 col_rot, col_v, col_mult, res1, jac1, lr, lp, rel, tmp3)
                    for r in range(6):
                        res1[r] *= scale[r]
                    for i in range(6):
                        for jj in range(i + 1):
                            s = 0.0
                            for v in range(nv):
                                s += jm[0, i, v] * winv2[v] * jm[0, jj, v]
                            a[i, jj] = s
                        a[i, i] += damping
                    _chol_solve(a, res1, y)
                    for v in range(nv):
                        s = 0.0
                        for i in range(6):
                            s += jm[0, i, v] * winv2[v] * y[i]
                        x = trials[j, v] + (-s)
                        trials[j, v] = min(max(x, lower[v]), upper[v])
                pe, oe = _row_pose_errors(trials[j], parent, kind, qi, mult, add, rot0, terms,
                                          offset, axis, body, off, target, rot, pos, loc, t, lr,
                                          lp, rel)
                c = weight * ((pe / sigma_p) ** 2 + (oe / sigma_o) ** 2)
                if not pe <= guard[k] + 1e-12:
                    c = np.inf
                t_cost[j] = c
                t_pos[j] = pe
                t_d2[j] = _motion_d2(trials[j], ref, cont, w, tmpv)
                t_prec[j] = (pe <= precise_fraction * tol_p and oe <= precise_fraction * tol_o
                             and math.isfinite(c))
            lowest_merit = 0
            lowest = 0
            nearest = -1
            best_merit = np.inf
            best_cost = np.inf
            best_d2 = np.inf
            for j in range(n_trials):
                m = t_cost[j] + mu * t_d2[j]
                if j == 0 or m < best_merit:
                    best_merit = m
                    lowest_merit = j
                if j == 0 or t_cost[j] < best_cost:
                    best_cost = t_cost[j]
                    lowest = j
                dj = t_d2[j] if t_prec[j] else np.inf
                if nearest < 0 or dj < best_d2:
                    best_d2 = dj
                    nearest = j
            moves_nearer = t_prec[nearest] and t_d2[nearest] < dist2 - 1e-12
            if precise:
                pick = nearest if moves_nearer else lowest
            else:
                pick = lowest_merit
            new_cost = t_cost[pick]
            if precise:
                ok = moves_nearer or (t_prec[pick] and new_cost < cost[k])
            else:
                ok = t_cost[pick] + mu * t_d2[pick] < cost[k] + mu * dist2
            if not ok:
                break
            improved[k] = True
            q[k] = trials[pick]
            cost[k] = new_cost
            gained[k] += dist2 - t_d2[pick]
            dist2 = t_d2[pick]
            precise = precise or t_prec[pick]
            if math.isfinite(guard[k]):
                guard[k] = t_pos[pick]
    return improved, gained


def _cache_is_warm(func):
    """Return whether numba's on-disk cache holds an index for ``func`` (best effort)."""
    try:
        return bool(func._cache._cache_file._load_index())
    except Exception:
        return False


def _warm_collision_query(frames):
    """Compile ``collision_query`` for the argument types the collision engine passes (one
    robot sphere and link, one self pair with a table, one sphere obstacle)."""
    i1 = np.zeros(1, dtype=np.int64)
    i2 = np.zeros((1, 2), dtype=np.int64)
    i4 = np.zeros((1, 4), dtype=np.int64)
    f1, f2, f3 = np.zeros(1), np.zeros((1, 2)), np.zeros((1, 3))
    collision_query(np.array(frames.rot, order='C'), np.array(frames.pos, order='C'),
                    np.array([-1, -1], dtype=np.int64), np.zeros((2, 3)),
                    np.zeros((len(frames), 1)), 0.01, 0.0, np.ones(1), i1.copy(),
                    np.ones(1, dtype=np.int64), np.ones(1), i1.copy(), np.ones(1, np.int64),
                    i1.copy(), f3.copy(), np.full(1, -1, dtype=np.int64), np.ones(1),
                    i2.copy(), np.full(1, -1, dtype=np.int64), i2.copy(), f2.copy(), f2 + 1.0,
                    i2 + 1, i1.copy(), f1.copy(), f1.copy(), i1.copy(), i4.copy(), i4.copy(),
                    i1.copy(), i1.copy(), f3.copy(), np.ones(1), i1.copy(),
                    np.ones(1, np.int64), f3.copy(), np.ones(1), i1.copy(),
                    np.ones(1, np.int64), i1.copy(), np.eye(3)[None].copy(), f3.copy(),
                    f3 + 0.1, 0, *leaf_buffers(1))


def leaf_buffers(size):
    """Return the six output arrays of ``collision_query`` with room for ``size`` leaves
    (n, pair, a, b: int64; d: float; is_self: bool)."""
    return (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
            np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size),
            np.empty(size, dtype=np.bool_))


_READY = False
_LOG = logging.getLogger(__name__)


def ensure_ready(chain):
    """Run ``warm_up(chain)`` once per process (the SMC solver's constructor calls it).

    The kernels' types do not depend on the chain, so one warm-up serves every chain. The
    messages go to the ``smcik_ros.kernels`` logger (level INFO).
    """
    global _READY
    if _READY or not ENABLED:
        return
    _READY = True           # first: warm_up builds an SMC solver itself
    try:
        warm_up(chain, _LOG.info)
    except Exception as exc:    # the warm-up is an optimisation: the kernels compile lazily
        _LOG.warning('kernel warm-up failed (%s: %s); kernels compile on first use',
                     type(exc).__name__, exc)


# The kernels warm_up calls itself (each one then has its on-disk cache index, which is what
# tells a warm start from a cold one): every kernel a solver or the collision engine calls.
WARM_UP_KERNELS = ('fk', 'link_pose_path', 'jacobian_at', 'pose_residual_jacobian',
                   'pose_errors', 'lm_step', 'lm_null_step', 'lm_spring_step',
                   'blocked_joints', 'refine_pose', 'refine_pose_motion', 'first_solution',
                   'body_points_world', 'random_walk', 'collision_query',
                   'distance_gradients', 'quat_products',
                   'quat_rotvecs', 'quat_relative_rotvecs', 'quat_exp_products',
                   'quat_slerps', 'clip_ball_rows', 'quat_pair_rotvecs', 'motion_distances')


def warm_up(chain, log=None):
    """Compile (or load from the on-disk cache) every kernel for ``chain``'s arrays.

    Call it once before a real-time loop starts (the node: after building the chain, before
    its solver and its timer; otherwise the SMC solver's constructor runs it once per
    process, logging to ``smcik_ros.kernels``): it runs FK, Jacobians, the pose kernels and
    a short SMC solve and steps, so that every specialisation the solvers use exists before
    the first tick. log: optional
    callable taking a message; it gets 'compiling kernels (first run) ...' before a cold
    compilation and the time it took after. Returns the seconds spent; does nothing
    (returns 0.0) when the kernels are not compiled (SMCIK_NO_JIT=1 or no numba).
    """
    global _READY
    if not ENABLED:
        return 0.0
    _READY = True
    start = time.perf_counter()
    cold = not all(_cache_is_warm(globals()[name]) for name in WARM_UP_KERNELS)
    if cold and log is not None:
        log('compiling kernels (first run; later starts load them from the on-disk cache)')
    from .goals import PoseTarget
    from .solvers import make_solver
    q = chain.neutral_configuration()
    frames = chain.frames(np.atleast_2d(q))
    body_points_world(np.ascontiguousarray(frames.rot), np.ascontiguousarray(frames.pos),
                      np.array([-1, chain.num_bodies - 1], dtype=np.int64), np.zeros((2, 3)),
                      np.empty((3, 2)))
    _warm_collision_query(frames)
    if len(chain.column_body):
        two = np.zeros((2, 3))
        distance_gradients(np.ascontiguousarray(frames.rot), np.ascontiguousarray(frames.pos),
                           np.zeros(2, dtype=np.int64), np.array([0, -1], dtype=np.int64),
                           two.copy(), np.array([-1, -2], dtype=np.int64), two.copy(),
                           two.copy(), np.ones((chain.num_bodies + 1, len(chain.column_body)),
                                               dtype=np.bool_),
                           *chain.kernel_columns(0)[1:], chain.nv)
    frames.jacobian()
    chain.fk(q)
    chain.fk(np.atleast_2d(q))
    pose = frames.link_pose()[0]
    term = PoseTarget(pose)
    term.residual_jacobian(frames)
    term.errors(frames)
    jac = frames.jacobian()
    lm_step(jac, np.zeros((1, 6)), np.ones(1))
    lm_null_step(jac, np.zeros((1, 6)), np.ones(1), np.zeros((1, chain.nv)),
                 np.ones(chain.nv), 1e-6)
    lm_spring_step(jac, np.zeros((1, 6)), np.ones(1), np.ones(1), np.ones(chain.nv),
                   np.zeros((1, chain.nv)))
    blocked_joints(np.atleast_2d(q), np.zeros((1, chain.nv)), chain.scalar_q, chain.scalar_v,
                   chain.lower, chain.upper)
    quat_rotvecs(quat_products(np.eye(1, 4), np.eye(1, 4)), 1e-12)
    quat_relative_rotvecs(np.eye(1, 4), np.eye(1, 4), 1e-12)
    quat_exp_products(np.eye(1, 4), np.zeros((1, 3)))
    quat_slerps(np.eye(1, 4), np.eye(1, 4), 0.5)
    clip_ball_rows(np.eye(1, 4), np.ones(1))
    quat_pair_rotvecs(np.eye(1, 8), np.zeros(1, dtype=np.int64), np.full(1, 4), 1e-12)
    index = np.zeros(1, dtype=np.int64)
    motion_distances(np.eye(1, 5), np.eye(1, 5)[0], index, index, np.zeros(1, dtype=np.bool_),
                     np.arange(1, 5).reshape(1, 4), np.arange(1, 4).reshape(1, 3), np.ones(4),
                     1e-12)
    # A goal a little away from the seed: the solve and the steps refine.
    goal = chain.fk(chain.clip(chain.integrate(q, np.full(chain.nv, 0.2))))
    solver = make_solver('smc', chain, seed=0, num_particles=8)
    solver.solve(goal, q, max_iters=3)
    # Without the seed-first stage, solve() refines in the filter (refine_pose).
    make_solver('smc', chain, seed=0, num_particles=8, seed_rows=0).solve(goal, q, max_iters=2)
    solver.reset(q)
    for _ in range(3):
        solver.step(goal)
    elapsed = time.perf_counter() - start
    if cold and log is not None:
        log(f'kernels ready ({elapsed:.1f} s)')
    return elapsed
