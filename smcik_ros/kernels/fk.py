"""Forward kinematics kernels: body frames, link poses, Jacobian columns, body points.

Every kernel reads the chain record (``Chain.records``: bodies, columns, links, joints;
``records.CHAIN``). Body frames are body-major: rot (B, N, 3, 3) and pos (B, N, 3) in the
base frame [m], B bodies (one per movable joint, tree order) at N configurations.
"""

import math

import numpy as np

from .jit import njit

__all__ = ['FAST_TRIG_LIMIT', 'body_points_world', 'fk', 'jacobian_at', 'link_pose']

_REVOLUTE, _PRISMATIC, _BALL = 0, 1, 2


@njit(cache=True)
def fk(bodies, q):
    """Return (rot (B, N, 3, 3), pos (B, N, 3)): the body frames of configurations q (N, nq).

    Per body b (tree order), from the chain's bodies record (``records.BODIES``): the joint value
    mimic_mult[b] * q[q_index[b]] + mimic_add[b]; a revolute joint turns by it (R0 Rot(axis,
    t) = R0 + sin t R0 K + (1 - cos t) R0 K^2, the record's ``terms``), a prismatic one
    slides along its axis, a ball joint turns by the quaternion q[q_index[b]:+4]. Joint
    values beyond FAST_TRIG_LIMIT (or NaN) take libm's sin and cos.
    """
    parent, kind, qi, mult, add, rot0, terms, offset, axis = bodies
    n = q.shape[0]
    nb = parent.shape[0]
    rot = np.empty((nb, n, 3, 3))
    pos = np.empty((nb, n, 3))
    loc = np.empty((3, 3))
    t = np.empty(3)
    for b in range(nb):
        if kind[b] != _REVOLUTE:        # prismatic or ball bodies: row by row
            for i in range(n):
                _fk_row(bodies, q[i], rot, pos, i, loc, t)
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


@njit(cache=True, inline='always')
def _quat_matrix(w, x, y, z):
    """Return the rotation matrix of the unit quaternion (w, x, y, z) as a row-major 9-tuple."""
    return (1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y),
            2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x),
            2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y))


@njit(cache=True)
def _fk_row(bodies, qrow, rot, pos, i, loc, t):
    """Write the body frames of one configuration qrow (nq,) to rot[:, i], pos[:, i]
    (loc (3, 3), t (3,): work arrays)."""
    parent, kind, qi, mult, add, rot0, terms, offset, axis = bodies
    nb = parent.shape[0]
    for b in range(nb):
        k = kind[b]
        if k == _REVOLUTE:
            v = qrow[qi[b]] * mult[b] + add[b]
            s = math.sin(v)
            c1 = 1.0 - math.cos(v)
            for r in range(3):
                for c in range(3):
                    loc[r, c] = (rot0[b, r, c] + s * terms[b, 0, 3 * r + c]
                                 + c1 * terms[b, 1, 3 * r + c])
            for r in range(3):
                t[r] = offset[b, r]
        elif k == _PRISMATIC:
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
            m00, m01, m02, m10, m11, m12, m20, m21, m22 = _quat_matrix(
                qrow[j], qrow[j + 1], qrow[j + 2], qrow[j + 3])
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
def _ball_chain(R, P, q, j, r0, o, first):
    """Chain a ball body onto R (9, N), P (3, N) in place (``first``: set them): rotation
    r0 (9-tuple) times the quaternion q[:, j:j + 4] of each row, origin o (3-tuple)."""
    for i in range(q.shape[0]):
        m = _quat_matrix(q[i, j], q[i, j + 1], q[i, j + 2], q[i, j + 3])
        l0 = r0[0] * m[0] + r0[1] * m[3] + r0[2] * m[6]
        l1 = r0[0] * m[1] + r0[1] * m[4] + r0[2] * m[7]
        l2 = r0[0] * m[2] + r0[1] * m[5] + r0[2] * m[8]
        l3 = r0[3] * m[0] + r0[4] * m[3] + r0[5] * m[6]
        l4 = r0[3] * m[1] + r0[4] * m[4] + r0[5] * m[7]
        l5 = r0[3] * m[2] + r0[4] * m[5] + r0[5] * m[8]
        l6 = r0[6] * m[0] + r0[7] * m[3] + r0[8] * m[6]
        l7 = r0[6] * m[1] + r0[7] * m[4] + r0[8] * m[7]
        l8 = r0[6] * m[2] + r0[7] * m[5] + r0[8] * m[8]
        if first:
            R[0, i], R[1, i], R[2, i] = l0, l1, l2
            R[3, i], R[4, i], R[5, i] = l3, l4, l5
            R[6, i], R[7, i], R[8, i] = l6, l7, l8
            P[0, i], P[1, i], P[2, i] = o[0], o[1], o[2]
            continue
        for r in range(3):
            a0, a1, a2 = R[3 * r, i], R[3 * r + 1, i], R[3 * r + 2, i]
            R[3 * r, i] = a0 * l0 + a1 * l3 + a2 * l6
            R[3 * r + 1, i] = a0 * l1 + a1 * l4 + a2 * l7
            R[3 * r + 2, i] = a0 * l2 + a1 * l5 + a2 * l8
            P[r, i] += a0 * o[0] + a1 * o[1] + a2 * o[2]


@njit(cache=True)
def link_pose(bodies, links, q, link, out):
    """Write the base-frame poses (N, 4, 4) of link ``link`` (its index in the chain's
    links) for configurations q (N, nq) to out.

    Only the link's body and its ancestors are chained, as a structure of arrays over the
    configurations (the loops vectorise), root first; the joints as in ``fk``.
    """
    parent, kind, qi, mult, add, rot0, terms, offset, axis = bodies
    link_body, link_offset = links
    body = link_body[link]
    depth = 0
    b = body
    while b >= 0:
        depth += 1
        b = parent[b]
    path = np.empty(depth, dtype=np.int64)
    b = body
    for k in range(depth - 1, -1, -1):
        path[k] = b
        b = parent[b]
    off = link_offset[link]
    n = q.shape[0]
    R = np.empty((9, n))
    P = np.empty((3, n))
    v = np.empty(n)
    S = np.empty(n)
    D = np.empty(n)
    for step in range(path.shape[0]):
        b = path[step]
        m = rot0[b]
        r0 = (m[0, 0], m[0, 1], m[0, 2], m[1, 0], m[1, 1], m[1, 2], m[2, 0], m[2, 1], m[2, 2])
        o = (offset[b, 0], offset[b, 1], offset[b, 2])
        if kind[b] == _BALL:
            _ball_chain(R, P, q, qi[b], r0, o, step == 0)
            continue
        fast = True
        for i in range(n):
            v[i] = q[i, qi[b]] * mult[b] + add[b]
            if not abs(v[i]) <= FAST_TRIG_LIMIT:
                fast = False
        if kind[b] == _PRISMATIC:
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


@njit(cache=True, inline='always')
def _add_columns(columns, jac, rot, pos, i, body, point):
    """Add the columns moving ``body`` (-1: the base, none) at configuration i for the
    base-frame point (3,) to jac (N, 6, nv)."""
    col_body, col_axis, col_rot, col_v, col_mult, moves, nv = columns
    row = body + 1
    for c in range(col_body.shape[0]):
        if not moves[row, c]:
            continue
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
def jacobian_at(columns, rot, pos, body, point):
    """Return the (N, 6, nv) Jacobians of base-frame points (N, 3) moving with ``body``
    (-1: the base: zeros). Rows 0-2: the points' linear velocity, 3-5: the body's angular
    velocity, per tangent entry; the columns from the chain's columns record (each turns or
    slides about its axis in its body's frame and drives one tangent entry by its factor).
    """
    n = point.shape[0]
    jac = np.zeros((n, 6, columns[6]))
    for i in range(n):
        _add_columns(columns, jac, rot, pos, i, body, point[i])
    return jac


@njit(cache=True, inline='always')
def _link_pose(rot, pos, body, offs, j, i, lr, lp):
    """Write the base-frame rotation lr (3, 3) and origin lp (3,) at configuration i of a
    link fixed to ``body`` (-1: the base) with the pose ``offs[j]`` (4, 4) in that body's
    frame (offs: the links record's offsets, or a target record's: indexed here, not sliced
    per row by the caller)."""
    if body < 0:
        for r in range(3):
            for c in range(3):
                lr[r, c] = offs[j, r, c]
            lp[r] = offs[j, r, 3]
        return
    for r in range(3):
        a0, a1, a2 = rot[body, i, r, 0], rot[body, i, r, 1], rot[body, i, r, 2]
        for c in range(3):
            lr[r, c] = a0 * offs[j, 0, c] + a1 * offs[j, 1, c] + a2 * offs[j, 2, c]
        lp[r] = (pos[body, i, r] + a0 * offs[j, 0, 3] + a1 * offs[j, 1, 3]
                 + a2 * offs[j, 2, 3])


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
