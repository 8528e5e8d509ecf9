"""Joint-space kernels: motion distances, the random walk, blocked joints, ball joint
clipping. The joints come from the chain record's joints (``records.JOINTS``)."""

import math

import numpy as np

from .jit import njit
from .quat import W_FLOOR, _hamilton_row

__all__ = ['blocked_joints', 'clip_ball_rows', 'motion_distances', 'random_walk']


@njit(cache=True)
def motion_distances(joints, q, ref, w):
    """Return (norm (N,), peak (N,)): the weighted tangent differences ``ref - q_i`` of
    configuration rows q (N, nq) from ref (nq,), as their 2-norm and their largest
    magnitude: ``MinimalMotion.distance`` and ``jump`` in one pass, without the (N, nv)
    difference array. Scalar joints: ref - q (continuous ones wrapped to [-pi, pi)); ball
    joints: the rotation vector 2 log(conj(q) ref), the arithmetic of
    ``quat_relative_rotvecs``; w (nv,) the weights. NaN propagates."""
    n = q.shape[0]
    nv = w.shape[0]
    norm = np.empty(n)
    peak = np.empty(n)
    d = np.empty(nv)
    for i in range(n):
        _tangent_diff(joints, q[i], ref, d)
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
def clip_ball_rows(joints, quat):
    """Return the (N, 4) rows of ``quat`` (N, 4) normalised, in the hemisphere w >= 0, and
    turned back onto their joint's angle limit where they exceed it (about the same axis):
    ``Chain.clip``'s ball joints. The rows are the chain's K ball joints, joint-minor (row i
    is ball joint i % K)."""
    limits = joints[7]
    out = np.empty((quat.shape[0], 4))
    count = limits.shape[0]
    for i in range(quat.shape[0]):
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = _clip_ball(
            quat[i, 0], quat[i, 1], quat[i, 2], quat[i, 3], limits[i % count])
    return out


@njit(cache=True, inline='always')
def _clip_ball(w, x, y, z, limit):
    """Return the unit quaternion (w, x, y, z) normalised, in the hemisphere w >= 0 and
    turned back onto the angle ``limit`` [rad] about its own axis where it exceeds it."""
    norm = max(math.sqrt(w * w + x * x + y * y + z * z), 1e-12)
    w, x, y, z = w / norm, x / norm, y / norm, z / norm
    if w < 0.0:
        w, x, y, z = -w, -x, -y, -z
    cos_half = math.cos(0.5 * min(limit, math.pi))
    if w < cos_half - 1e-15:
        s = max(math.sqrt(x * x + y * y + z * z), 1e-12)
        sin_half = math.sqrt(1.0 - cos_half * cos_half)
        w, x, y, z = cos_half, x / s * sin_half, y / s * sin_half, z / s * sin_half
    return w, x, y, z


@njit(cache=True)
def blocked_joints(joints, q, dv):
    """Return (any, mask (K, nv) bool): 1-DOF joints at a limit that dv (K, nv) pushes
    outwards from the configurations q (K, nq)."""
    lower, upper, sq, sv, _, _, _, _ = joints
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
def random_walk(joints, prev, z, scale, noise, out, bad, keep):
    """Draw (or redraw) the 1-DOF joints of the SMC random walk, as ``FilterModel.propagate``.

    For each entry (i, j) flagged in ``bad`` (N, S), in row-major order, with sq the
    chain's scalar joints: out[i, sq[j]] = prev[i, sq[j]] + z[next] * noise[j] * scale[i]
    (z: one standard normal per flagged entry, consumed in that order, so the draws are
    NumPy's for the same stream), then bad[i, j] = the value is outside the joint's limits.
    keep: instead of drawing, put the flagged entries back to ``prev`` (the fallback after
    the last redraw). Returns how many entries are still flagged.
    """
    lower, upper, sq, _, _, _, _, _ = joints
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


@njit(cache=True, inline='always')
def _tangent_diff(joints, qrow, ref, out):
    """Write ref - qrow (nv,) in the tangent space: scalar joints' differences (continuous
    ones wrapped to [-pi, pi)), ball joints' rotation vectors 2 log(conj(q) ref)."""
    _, _, sq, sv, cont, bq, bv, _ = joints
    for j in range(sq.shape[0]):
        x = ref[sq[j]] - qrow[sq[j]]
        if cont[j]:
            x = (x + math.pi) % (2.0 * math.pi) - math.pi
        out[sv[j]] = x
    for b in range(bq.shape[0]):
        c0, c1, c2, c3 = bq[b, 0], bq[b, 1], bq[b, 2], bq[b, 3]
        x, y, z = _relative_rotvec(qrow[c0], qrow[c1], qrow[c2], qrow[c3],
                                   ref[c0], ref[c1], ref[c2], ref[c3])
        out[bv[b, 0]], out[bv[b, 1]], out[bv[b, 2]] = x, y, z


@njit(cache=True, inline='always')
def _relative_rotvec(aw, ax, ay, az, bw, bx, by, bz):
    """Return the rotation vector 2 log(conj(a) b) of unit quaternions a, b (the arithmetic of
    ``quat_relative_rotvecs``)."""
    rw = aw * bw + ax * bx + ay * by + az * bz
    rx = aw * bx - ax * bw - ay * bz + az * by
    ry = aw * by + ax * bz - ay * bw - az * bx
    rz = aw * bz - ax * by + ay * bx - az * bw
    sign = -1.0 if rw < 0.0 else 1.0
    rw, rx, ry, rz = sign * rw, sign * rx, sign * ry, sign * rz
    r = math.sqrt(rx * rx + ry * ry + rz * rz)
    scale = 2.0 / max(rw, W_FLOOR) if r < 1e-9 else 2.0 * math.atan2(r, rw) / r
    return rx * scale, ry * scale, rz * scale


@njit(cache=True, inline='always')
def _integrate_row(joints, qrow, dv, out):
    """Write qrow moved by the tangent step dv (nv,) into out (nq,), not clipped: scalar
    joints q + dv, ball joints q * exp(dv / 2) (``Chain.integrate``)."""
    _, _, sq, sv, _, bq, bv, _ = joints
    for j in range(sq.shape[0]):
        out[sq[j]] = qrow[sq[j]] + dv[sv[j]]
    if not bq.shape[0]:
        return
    quat = np.empty((1, 4))
    for b in range(bq.shape[0]):
        x, y, z = dv[bv[b, 0]], dv[bv[b, 1]], dv[bv[b, 2]]
        angle = math.sqrt(x * x + y * y + z * z)
        half = 0.5 * angle
        scale = 0.5 - angle * angle / 48.0 if angle < 1e-6 else math.sin(half) / angle
        _hamilton_row(qrow[bq[b, 0]], qrow[bq[b, 1]], qrow[bq[b, 2]], qrow[bq[b, 3]],
                      math.cos(half), x * scale, y * scale, z * scale, quat, 0)
        for c in range(4):
            out[bq[b, c]] = quat[0, c]


@njit(cache=True, inline='always')
def _clip_row(joints, row):
    """Project one configuration (nq,) into the limits in place (``Chain.clip``): scalar
    joints clipped, ball joints normalised, in the hemisphere w >= 0 and within their angle
    limit."""
    lower, upper, sq, _, _, bq, _, limits = joints
    for j in range(sq.shape[0]):
        c = sq[j]
        x = row[c]
        row[c] = lower[c] if x < lower[c] else (upper[c] if x > upper[c] else x)
    for b in range(bq.shape[0]):
        w, x, y, z = _clip_ball(row[bq[b, 0]], row[bq[b, 1]], row[bq[b, 2]], row[bq[b, 3]],
                                limits[b])
        row[bq[b, 0]], row[bq[b, 1]], row[bq[b, 2]], row[bq[b, 3]] = w, x, y, z
