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
    _, _, sq, sv, cont, bq, bv, _ = joints
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
            scale = 2.0 / max(rw, W_FLOOR) if r < 1e-9 else 2.0 * math.atan2(r, rw) / r
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
def clip_ball_rows(joints, quat):
    """Return the (N, 4) rows of ``quat`` (N, 4) normalised, in the hemisphere w >= 0, and
    turned back onto their joint's angle limit where they exceed it (about the same axis):
    ``Chain.clip``'s ball joints. The rows are the chain's K ball joints, joint-minor (row i
    is ball joint i % K)."""
    limits = joints[7]
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
