"""The cover builder's candidate depths (``shrinking_ball``: the largest ball tangent inside
at each surface point), its containment test (which balls contain which surface pieces) and
its assignment of each piece to the ball that holds it with the least excess.

Used once per link when its sphere cover is computed (``collision.covers``), not on the hot
path; a kernel because the test runs on millions of (ball, piece) pairs for a mesh at a few
millimetres of tolerance.
"""

import numpy as np

from .jit import njit

__all__ = ['ball_containment', 'best_fit', 'shrinking_ball', 'compile_cover_kernels']


@njit(cache=True)
def _cells(means, lo, size, dims):
    """Return (order, starts): piece indices sorted by grid cell, and each cell's first index
    in that order ((cells + 1,), a prefix sum)."""
    n = means.shape[0]
    key = np.empty(n, dtype=np.int64)
    for i in range(n):
        ix = min(max(int((means[i, 0] - lo[0]) / size), 0), dims[0] - 1)
        iy = min(max(int((means[i, 1] - lo[1]) / size), 0), dims[1] - 1)
        iz = min(max(int((means[i, 2] - lo[2]) / size), 0), dims[2] - 1)
        key[i] = (ix * dims[1] + iy) * dims[2] + iz
    order = np.argsort(key, kind='mergesort')
    starts = np.zeros(dims[0] * dims[1] * dims[2] + 1, dtype=np.int64)
    for i in range(n):
        starts[key[i] + 1] += 1
    for c in range(1, len(starts)):
        starts[c] += starts[c - 1]
    return order, starts


@njit(cache=True, inline='always')
def _contains(centers, c, r, items, means, spread, i):
    """Return whether ball c (centers[c], radius r) holds every point of piece i."""
    dx = means[i, 0] - centers[c, 0]
    dy = means[i, 1] - centers[c, 1]
    dz = means[i, 2] - centers[c, 2]
    near = np.sqrt(dx * dx + dy * dy + dz * dz)
    if near > r * (1.0 + 1e-9):
        return False                     # the farthest point is as far as the mean (rounding)
    if near + spread[i] <= r * (1.0 - 1e-12):
        return True                      # the triangle inequality, with a rounding margin
    return _farthest2(items, i, centers, c) <= r * r


@njit(cache=True, inline='always')
def _farthest2(items, i, centers, c):
    """Return the squared distance of piece i's farthest point from centers[c]."""
    far = 0.0
    for k in range(items.shape[1]):
        px = items[i, k, 0] - centers[c, 0]
        py = items[i, k, 1] - centers[c, 1]
        pz = items[i, k, 2] - centers[c, 2]
        far = max(far, px * px + py * py + pz * pz)
    return far


@njit(cache=True)
def _grid_of(means, size):
    """Return (lo (3,), dims (3,)) of a grid of cells of edge ``size`` over ``means``."""
    lo = np.empty(3)
    dims = np.empty(3, dtype=np.int64)
    for a in range(3):
        lo[a] = means[:, a].min() if means.shape[0] else 0.0
        span = (means[:, a].max() - lo[a]) if means.shape[0] else 0.0
        dims[a] = int(span / size) + 1
    return lo, dims


@njit(cache=True, inline='always')
def _cell_range(center, r, lo, size, dims, b0, b1):
    """Write to b0, b1 (3,) the first and last grid cells, per axis, of the box around the
    ball (center, r)."""
    for a in range(3):
        b0[a] = max(int((center[a] - r - lo[a]) / size), 0)
        b1[a] = min(int((center[a] + r - lo[a]) / size), dims[a] - 1)


@njit(cache=True)
def _cell_spread(starts, spread):
    """Return (cells,) the largest spread of the pieces of each cell (0 when empty); the
    spreads are in cell order."""
    out = np.zeros(len(starts) - 1)
    for cell in range(len(out)):
        for j in range(starts[cell], starts[cell + 1]):
            out[cell] = max(out[cell], spread[j])
    return out


@njit(cache=True, inline='always')
def _box_distances(center, r, lo, size, ix, iy, iz):
    """Return (nearest, farthest) distance from ``center`` to the grid cell (ix, iy, iz)."""
    near = 0.0
    far = 0.0
    for a, i in ((0, ix), (1, iy), (2, iz)):
        low = lo[a] + i * size - center[a]
        high = low + size
        gap = max(low, -high, 0.0)
        near += gap * gap
        reach = max(abs(low), abs(high))
        far += reach * reach
    return np.sqrt(near), np.sqrt(far)


@njit(cache=True)
def ball_containment(centers, radius, items, means, spread, size):
    """Return the CSR (indptr (C + 1,), indices) of which pieces each ball contains.

    centers (C, 3), radius (C,) [m]; items (I, m, 3) points of each piece, means (I, 3) and
    spread (I,) (its points' largest distance from their mean); size [m]: the edge of the
    grid cells the pieces are bucketed in. Row c lists, in no particular order, every piece
    whose points all lie within radius[c] of centers[c]. A cell whose every piece the
    per-piece test would refuse (its nearest point is beyond the radius) or take (its
    farthest point plus its largest spread is within it), by a margin above rounding, is
    decided whole: the answer is the per-piece test's, at a fraction of the work for the
    large balls deep inside a link.
    """
    lo, dims = _grid_of(means, size)
    b0 = np.empty(3, dtype=np.int64)
    b1 = np.empty(3, dtype=np.int64)
    order, starts = _cells(means, lo, size, dims)
    # The pieces in cell order: a run of cells along z is one contiguous slice.
    items, means, spread = items[order], means[order], spread[order]
    widest = _cell_spread(starts, spread)
    indptr = np.zeros(centers.shape[0] + 1, dtype=np.int64)
    found = np.empty(max(16, items.shape[0]), dtype=np.int32)
    indices = np.empty(max(16, 4 * items.shape[0]), dtype=np.int32)
    for c in range(centers.shape[0]):
        count = 0
        r = radius[c]
        margin = 1e-9 * (r + size)       # above the rounding of the cell distances
        _cell_range(centers[c], r, lo, size, dims, b0, b1)
        for ix in range(b0[0], b1[0] + 1):
            for iy in range(b0[1], b1[1] + 1):
                row = (ix * dims[1] + iy) * dims[2]
                for iz in range(b0[2], b1[2] + 1):
                    cell = row + iz
                    first, end = starts[cell], starts[cell + 1]
                    if first == end:
                        continue
                    near, far = _box_distances(centers[c], r, lo, size, ix, iy, iz)
                    if near > r * (1.0 + 1e-9) + margin:
                        continue
                    if far + widest[cell] <= r * (1.0 - 1e-12) - margin:
                        for j in range(first, end):
                            found[count] = order[j]
                            count += 1
                        continue
                    for j in range(first, end):
                        if _contains(centers, c, r, items, means, spread, j):
                            found[count] = order[j]
                            count += 1
        start = indptr[c]
        if start + count > len(indices):
            grown = np.empty(2 * (start + count), dtype=np.int32)
            grown[:start] = indices[:start]
            indices = grown
        indices[start:start + count] = found[:count]
        indptr[c + 1] = start + count
    return indptr, indices[:indptr[-1]].copy()


@njit(cache=True)
def best_fit(centers, depths, items, means, tolerance, size):
    """Return (best (I,), far (I,)): for each piece the ball that holds it with the least
    excess (its farthest point's distance minus the centre's depth, at most ``tolerance``
    + 1e-12; the lowest index among equals), -1 where none does, and that distance [m].

    centers (C, 3) [m], depths (C,) [m] (inside the mesh > 0); items (I, m, 3), means (I, 3)
    as in ``ball_containment``; size [m]: the grid's cell edge. Only pieces whose mean lies
    within the largest fitting distance (plus a margin above rounding) are measured: the
    farthest point is at least as far as the mean.
    """
    lo, dims = _grid_of(means, size)
    order, starts = _cells(means, lo, size, dims)
    n = means.shape[0]
    best = np.full(n, -1, dtype=np.int64)
    best_cost = np.full(n, np.inf)
    best_far = np.zeros(n)
    b0 = np.empty(3, dtype=np.int64)
    b1 = np.empty(3, dtype=np.int64)
    for c in range(centers.shape[0]):
        limit = tolerance + 1e-12 + depths[c]
        if limit < 0.0:
            continue
        reach = limit * (1.0 + 1e-9) + 1e-12
        _cell_range(centers[c], reach, lo, size, dims, b0, b1)
        for ix in range(b0[0], b1[0] + 1):
            for iy in range(b0[1], b1[1] + 1):
                row = (ix * dims[1] + iy) * dims[2]
                for j in range(starts[row + b0[2]], starts[row + b1[2] + 1]):
                    i = order[j]
                    dx = means[i, 0] - centers[c, 0]
                    dy = means[i, 1] - centers[c, 1]
                    dz = means[i, 2] - centers[c, 2]
                    if dx * dx + dy * dy + dz * dz > reach * reach:
                        continue
                    far = np.sqrt(_farthest2(items, i, centers, c))
                    cost = far - depths[c]
                    if cost <= tolerance + 1e-12 and cost < best_cost[i]:
                        best[i], best_cost[i], best_far[i] = c, cost, far
    return best, best_far


@njit(cache=True)
def shrinking_ball(points, normals, samples, cap):
    """Return (P,) radii of the largest balls tangent at ``points`` (P, 3), centred at
    p - r n behind their unit outward ``normals`` (P, 3), that hold none of ``samples``
    (S, 3) inside, at most ``cap`` [m]: for each point the least, over the samples q behind
    it, of |p - q|^2 / (2 (p - q) . n). O(P S) without the (P, S) temporaries of numpy
    (H2's pelvis, 8400 points: 3.1 s in numpy chunks, the cover 5.8 s)."""
    out = np.empty(points.shape[0])
    for i in range(points.shape[0]):
        best = cap
        for j in range(samples.shape[0]):
            dx = points[i, 0] - samples[j, 0]
            dy = points[i, 1] - samples[j, 1]
            dz = points[i, 2] - samples[j, 2]
            num = dx * dx + dy * dy + dz * dz
            den = 2.0 * (dx * normals[i, 0] + dy * normals[i, 1] + dz * normals[i, 2])
            if num > 1e-14 and den > 1e-9 * np.sqrt(num) and num / den < best:
                best = num / den
        out[i] = best
    return out


def compile_cover_kernels():
    """Call the kernels once on tiny inputs of the types ``collision.covers`` gives them
    (compiled, or loaded from numba's cache). The ``smcik`` script does it when it creates
    the environment: the covers' child process of a first start otherwise compiled them
    before its first cover (6.6 s, measured with an empty NUMBA_CACHE_DIR)."""
    items = np.zeros((2, 3, 3))
    means, spread = items.mean(axis=1), np.zeros(2)
    centers = np.zeros((1, 3))
    ball_containment(centers, np.ones(1), items, means, spread, 0.1)
    best_fit(centers, np.zeros(1), items, means, 0.01, 0.1)
    shrinking_ball(centers, centers, centers, 1.0)
