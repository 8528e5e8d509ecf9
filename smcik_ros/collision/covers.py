"""Conservative, tight sphere covers of collision meshes and primitives (computed at start-up).

A cover is a set of spheres whose union contains the solid (docs/collision.md, section 1).
*Conservative* by construction: the surface is cut into triangles with edges at most
``item_edge``, and each triangle (and each interior grid point) is assigned to a sphere that
contains its vertices (a ball is convex: it then contains the triangle). *Tight*: a sphere
may only be as large as ``tolerance`` plus the depth of its centre inside the solid,
``r <= tolerance + depth(c)``; each cover records the exact bound ``max(r - depth(c))`` it
achieved (its *excess*). Candidate centres lie on the medial axis (shrinking balls, Ma, Bae &
Choi 2012: for a surface point p with outward normal n the largest inscribed ball touching
p has radius min_q |p - q|^2 / (2 n.(p - q))) and at half that depth; a greedy set cover
chooses among them. Links on joints off the chain (gripper fingers) are covered over their
joint range (the triangles at consecutive sampled positions form one piece; rotations add
the arc's sagitta to the radii). Covers are cached on disk (``model.cache``, in
``default_cache_dir``, never inside the repository), keyed by a digest of the geometry and
the settings.
"""

import contextlib
import dataclasses
import heapq

import numpy as np

from ..kernels.cover import ball_containment, best_fit, shrinking_ball
from ..model import cache as model_cache
from ..model.cache import default_cache_dir   # the cover cache shares its directory
from .engine import smallest_per_group

__all__ = ['SphereCover', 'COVER_VERSION', 'default_cache_dir', 'cover_mesh', 'cover_box',
           'cover_cylinder', 'cover_sphere', 'bisect_triangles', 'cylinder_sections',
           'before_first_compute', 'cached_cover']

COVER_VERSION = 3      # the covers' algorithm; a new one ignores the cached covers
_before_compute = []     # callbacks of ``before_first_compute`` blocks, called once each


@dataclasses.dataclass(frozen=True)
class SphereCover:
    """Spheres covering one piece of geometry, in that geometry's frame.

    centers: (S, 3) [m]; radii: (S,) [m]; excess: (S,) upper bound of how far each sphere
    reaches beyond the real geometry [m] (r - depth of the centre); hull: True when the mesh
    was not watertight and its convex hull was covered instead (a superset; the excess is
    then measured against the hull).
    """

    centers: np.ndarray
    radii: np.ndarray
    excess: np.ndarray
    hull: bool = False

    def __len__(self):
        return len(self.radii)

    @property
    def max_excess(self):
        """The largest excess bound of the cover [m] (0 for an exact sphere)."""
        return float(self.excess.max()) if len(self.excess) else 0.0

    def transformed(self, pose, extra_radius=0.0):
        """Return the cover moved by the (4, 4) ``pose`` (radii grown by ``extra_radius``)."""
        pose = np.asarray(pose, dtype=float)
        centers = self.centers @ pose[:3, :3].T + pose[:3, 3]
        return SphereCover(centers, self.radii + extra_radius, self.excess + extra_radius,
                           self.hull)


@contextlib.contextmanager
def before_first_compute(callback):
    """Within the block, call ``callback()`` once, before the first cover that is not in the
    disk cache is computed (a start-up can say it will take seconds, and only then)."""
    _before_compute.append(callback)
    try:
        yield
    finally:
        if callback in _before_compute:
            _before_compute.remove(callback)


# ---------------------------------------------------------------------- public builders
def cover_sphere(radius, center=(0.0, 0.0, 0.0)):
    """Return the exact one-sphere cover of a sphere (radius [m], centre (3,) [m])."""
    return SphereCover(np.asarray(center, dtype=float).reshape(1, 3),
                       np.array([float(radius)]), np.zeros(1))


def cylinder_sections(radius, tolerance):
    """Return the number of sides of a prism circumscribing a cylinder within ``tolerance``.

    The circumscribed n-gon reaches radius / cos(pi / n); n is the smallest count (>= 8) with
    radius (1 / cos(pi / n) - 1) <= tolerance.
    """
    radius, tolerance = float(radius), max(float(tolerance), 1e-6)
    n = int(np.ceil(np.pi / np.arccos(radius / (radius + tolerance))))
    return max(n, 8)


def cover_box(size, tolerance, item_edge=None, cache_dir=None):
    """Return a cover of a box with side lengths ``size`` (3,) [m], centred at its origin."""
    import trimesh

    mesh = trimesh.creation.box(extents=np.asarray(size, dtype=float))
    return cover_mesh(mesh.vertices, mesh.faces, tolerance, item_edge, cache_dir=cache_dir)


def cover_cylinder(radius, length, tolerance, item_edge=None, cache_dir=None):
    """Return a cover of a z-axis cylinder (radius, length [m]) centred at its origin.

    The cylinder is replaced by a circumscribed prism whose extra reach is at most a tenth of
    ``tolerance`` (added to the excess bounds), then covered like a mesh.
    """
    import trimesh

    slack = 0.1 * float(tolerance)
    n = cylinder_sections(radius, slack)
    outer = float(radius) / np.cos(np.pi / n)
    mesh = trimesh.creation.cylinder(radius=outer, height=float(length), sections=n)
    cover = cover_mesh(mesh.vertices, mesh.faces, tolerance, item_edge, cache_dir=cache_dir)
    return dataclasses.replace(cover, excess=cover.excess + (outer - float(radius)))


def cover_mesh(vertices, faces, tolerance, item_edge=None, poses=None, rotation_sag=0.0,
               cache_dir=None):
    """Return a conservative sphere cover of a triangle mesh (see the module docstring).

    vertices (V, 3) [m], faces (F, 3): the mesh in its own frame (scale applied).
    tolerance [m]: the largest allowed excess of a sphere beyond the geometry.
    item_edge [m]: longest edge of the surface pieces (default ``tolerance``).
    poses: (K, 4, 4) sampled poses of a moving mesh (a link on a joint outside the chain),
    in the frame the cover is wanted in; None: the mesh does not move. rotation_sag [m]:
    how far the motion between consecutive poses can leave their chords (added to radii).
    cache_dir: directory of the disk cache; None: ``default_cache_dir()``; '': no cache.
    """
    vertices = np.ascontiguousarray(vertices, dtype=float).reshape(-1, 3)
    faces = np.ascontiguousarray(faces, dtype=np.int64).reshape(-1, 3)
    tolerance = float(tolerance)
    if not tolerance > 0.0:
        raise ValueError(f'cover tolerance must be > 0 [m]; got {tolerance}')
    item_edge = tolerance if item_edge is None else float(item_edge)
    poses = None if poses is None else np.ascontiguousarray(poses, dtype=float).reshape(-1, 4, 4)

    def compute():
        while _before_compute:
            _before_compute.pop()()
        return _compute_cover(vertices, faces, tolerance, item_edge, poses, float(rotation_sag))
    return cached_cover(cache_dir, compute, 'mesh', vertices, faces, tolerance, item_edge, poses,
                        float(rotation_sag))


def cached_cover(cache_dir, compute, *parts):
    """Return the cover stored under the digest of ``parts`` (arrays and settings), else
    ``compute()``, stored there (``model.cache``; cache_dir as in ``cover_mesh``): also for
    covers whose ``cover_mesh`` inputs come out of costly steps (a swept mesh's thinned
    poses and proxy), found before those steps."""
    key = model_cache.digest('cover', COVER_VERSION, *parts)
    hit = model_cache.load(cache_dir, 'cover', key)
    if hit is not None:
        meta, arrays = hit
        return SphereCover(arrays['centers'], arrays['radii'], arrays['excess'], meta['hull'])
    cover = compute()
    model_cache.store(cache_dir, 'cover', key, {'hull': bool(cover.hull)},
                      {'centers': cover.centers, 'radii': cover.radii, 'excess': cover.excess})
    return cover


# ---------------------------------------------------------------------- the algorithm
def bisect_triangles(tris, max_edge):
    """Return triangles (T', 3, 3) covering ``tris`` (T, 3, 3) with every edge <= max_edge.

    Longest-edge bisection: each triangle whose longest edge is too long is split at that
    edge's midpoint, repeatedly. The pieces tile each original triangle exactly (they need
    not be conforming between triangles: each piece is covered on its own), and slivers
    turn into well-shaped pieces instead of multiplying like midpoint subdivision.
    """
    tris = np.asarray(tris, dtype=float).reshape(-1, 3, 3)
    out = []
    while len(tris):
        edges = np.linalg.norm(tris[:, [1, 2, 0]] - tris, axis=-1)   # edge k: vertex k -> k+1
        k = np.argmax(edges, axis=1)
        rows = np.arange(len(tris))
        done = edges[rows, k] <= max_edge
        out.append(tris[done])
        t, k = tris[~done], k[~done]
        rows = np.arange(len(t))
        a, b, c = t[rows, k], t[rows, (k + 1) % 3], t[rows, (k + 2) % 3]
        m = 0.5 * (a + b)
        tris = np.concatenate([np.stack([a, m, c], 1), np.stack([m, b, c], 1)])
    return np.concatenate(out) if out else np.zeros((0, 3, 3))


def _compute_cover(vertices, faces, tolerance, item_edge, poses, rotation_sag):
    import trimesh

    mesh = trimesh.Trimesh(vertices, faces, process=True)
    hull = False
    if not mesh.is_watertight or not mesh.is_volume:
        # Not a closed solid: cover its convex hull, a superset (signed distance and the
        # interior are defined for it).
        mesh = mesh.convex_hull
        hull = True
    elif mesh.volume < 0.0:
        mesh.invert()
    if poses is None:
        poses = np.eye(4)[None]
    copies = len(poses)
    # Candidates come from at most 9 of the poses. A candidate's depth is its depth in its
    # own copy, a lower bound of its depth in the union of the copies: the radius bound and
    # the excess bound stay valid (the union's depth, 9 copies x 9 poses of queries, took
    # 3.3 s of 7.3 s for Talos's swept gripper link at 6 mm; 2 % more spheres without it).
    sample = np.unique(np.linspace(0, copies - 1, min(copies, 9)).round().astype(int))

    # Pieces that must each fit in one sphere: surface triangles (at two consecutive poses
    # for a moving mesh) and interior points.
    tris = bisect_triangles(mesh.triangles, item_edge)
    rot, trans = poses[:, :3, :3], poses[:, :3, 3]
    at_pose = np.einsum('kij,tvj->ktvi', rot, tris) + trans[:, None, None, :]   # (K, T, 3, 3)
    if copies == 1:
        pieces = at_pose[0]
    else:
        pieces = np.concatenate([at_pose[:-1], at_pose[1:]], axis=2).reshape(-1, 6, 3)
    grid = _grid(mesh.bounds, max(2.0 * tolerance, float(np.max(mesh.extents)) / 12.0))
    inside = grid[mesh.contains(grid)] if len(grid) else np.zeros((0, 3))
    interior = (np.einsum('kij,pj->kpi', rot, inside) + trans[:, None, :]).reshape(-1, 1, 3)
    width = pieces.shape[1]
    interior_pieces = np.repeat(interior, width, axis=1)
    items = np.concatenate([pieces, interior_pieces])

    # Candidate centres: shrinking balls on every pose's surface, at full and half depth.
    count = int(np.clip(2.0 * mesh.area / tolerance ** 2, 200, 1500))
    samples, face_index = trimesh.sample.sample_surface(mesh, count, seed=0)
    pts = np.vstack([mesh.vertices, samples])
    nrm = np.vstack([mesh.vertex_normals, mesh.face_normals[face_index]])
    cap = 0.5 * float(np.linalg.norm(mesh.extents))
    depth_t = shrinking_ball(pts, nrm, pts, cap)
    local = np.concatenate([pts - depth_t[:, None] * nrm, pts - 0.5 * depth_t[:, None] * nrm])
    score = np.concatenate([depth_t, 0.5 * depth_t])
    cell = np.floor(local / (0.5 * tolerance)).astype(np.int64)     # the deepest per cell
    local = local[smallest_per_group(-score, *cell.T)]
    cand = (np.einsum('kij,pj->kpi', rot[sample], local) + trans[sample][:, None, :]) \
        .reshape(-1, 3)
    depth = np.tile(_depth([mesh], local), len(sample))       # pose-major, as cand
    keep = depth + tolerance > 0.0
    cand, depth = cand[keep], depth[keep]
    if len(sample) > 1:
        cell = np.floor(cand / (0.5 * tolerance)).astype(np.int64)
        keep = smallest_per_group(-depth, *cell.T)
        cand, depth = cand[keep], depth[keep]

    # Which candidate contains which piece (all its points within tolerance + depth).
    hits = _containment(cand, tolerance + depth, items)
    chosen, uncovered = _greedy_cover(hits, len(items))

    centers = cand[chosen]
    depths = depth[chosen]
    if uncovered.any():
        # Pieces no candidate could take (a corner sharper than the candidates resolve):
        # one small sphere each, around its own points.
        extra = items[uncovered]
        mid = 0.5 * (extra.max(axis=1) + extra.min(axis=1))
        centers = np.vstack([centers, mid])
        moved = [mesh.copy().apply_transform(poses[k]) for k in sample]
        depths = np.concatenate([depths, _depth(moved, mid)])
    radii, excess = _fit_radii(items, centers, depths, tolerance)
    radii = radii + rotation_sag
    excess = excess + rotation_sag
    used = radii > 0.0
    return SphereCover(centers[used], radii[used], excess[used], hull)


def _containment(centers, allowance, items):
    """Return the (C, I) sparse int8 matrix: 1 where ball c (radius ``allowance[c]``, less a
    relative 1e-9) contains every point of item i ((I, m, 3) points).

    A ball contains all of an item's points only if it contains their mean (a ball is
    convex), so a grid of the means gives the candidates. A candidate whose mean lies
    within the radius less the item's own radius (its points' largest distance from their
    mean) is inside (the triangle inequality, with a relative margin of 1e-12 so rounding
    cannot differ from the exact test); the others are checked point by point
    (``kernels.cover.ball_containment``: a swept finger has millions of pairs).
    """
    import scipy.sparse as sp

    n_items = len(items)
    if not len(centers) or not n_items:
        return sp.csr_matrix((len(centers), n_items), dtype=np.int8)
    items = np.ascontiguousarray(items, dtype=float)
    means = items.mean(axis=1)
    spread = np.sqrt(np.max(np.sum((items - means[:, None, :]) ** 2, axis=2), axis=1))
    radius = np.ascontiguousarray(allowance * (1.0 - 1e-9), dtype=float)
    extent = float(np.max(means.max(axis=0) - means.min(axis=0)))
    size = max(0.25 * float(np.median(radius)), extent / 100.0, 1e-4)
    indptr, indices = ball_containment(np.ascontiguousarray(centers, dtype=float), radius,
                                       items, means, spread, size)
    return sp.csr_matrix((np.ones(len(indices), dtype=np.int8), indices, indptr),
                         shape=(len(centers), n_items))


def _grid(bounds, spacing):
    lo, hi = np.asarray(bounds[0], float), np.asarray(bounds[1], float)
    axes = [np.arange(a + 0.5 * spacing, b, spacing) for a, b in zip(lo, hi)]
    if any(len(a) == 0 for a in axes):
        return np.zeros((0, 3))
    return np.stack(np.meshgrid(*axes, indexing='ij'), -1).reshape(-1, 3)


def _depth(meshes, points):
    """Return (P,) depth of points inside the union of ``meshes`` (< 0 outside) [m]."""
    import trimesh

    if len(points) == 0:
        return np.zeros(0)
    depth = np.full(len(points), -np.inf)
    for mesh in meshes:
        depth = np.maximum(depth, trimesh.proximity.signed_distance(mesh, points))
    return depth


def _greedy_cover(hits, n_items):
    """Return (chosen candidate rows, uncovered item mask) of a lazy greedy set cover."""
    uncovered = np.ones(n_items, dtype=bool)
    counts = np.diff(hits.indptr)
    heap = [(-int(c), i) for i, c in enumerate(counts) if c > 0]
    heapq.heapify(heap)
    chosen = []
    indptr, indices = hits.indptr, hits.indices
    while heap:
        _, i = heapq.heappop(heap)
        row = indices[indptr[i]:indptr[i + 1]]
        gain = int(np.count_nonzero(uncovered[row]))
        if gain == 0:
            continue
        if heap and gain < -heap[0][0]:
            heapq.heappush(heap, (-gain, i))
            continue
        chosen.append(i)
        uncovered[row] = False
        if not uncovered.any():
            break
    return np.array(chosen, dtype=np.int64), uncovered


def _fit_radii(items, centers, depths, tolerance, pair_limit=2_000_000):
    """Assign every piece to a sphere and shrink radii to what they must contain.

    Each piece goes to the sphere that contains it with the least excess (its farthest
    point's distance minus the centre's depth; the lowest index among equals: the kernel
    ``kernels.cover.best_fit``, over a grid of the pieces' means); a piece no sphere
    contains within tolerance (only the fallback spheres' own pieces can be in that case)
    goes to the one with the least excess of all. Returns (radii (S,), excess bounds (S,)).
    """
    n_items, n_centers = len(items), len(centers)
    radii = np.zeros(n_centers)
    if not n_items or not n_centers:
        return radii, radii - depths
    items = np.ascontiguousarray(items, dtype=float)
    means = items.mean(axis=1)
    extent = float(np.max(means.max(axis=0) - means.min(axis=0)))
    reach = tolerance + np.maximum(depths, 0.0)
    size = max(0.25 * float(np.median(reach)), extent / 100.0, 1e-4)
    best, best_far = best_fit(np.ascontiguousarray(centers, dtype=float),
                              np.ascontiguousarray(depths, dtype=float), items, means,
                              float(tolerance), size)
    lost = np.flatnonzero(best < 0)             # no sphere fits: the least excess of all
    chunk = max(1, pair_limit // (n_centers * items.shape[1]))
    for lo in range(0, len(lost), chunk):
        i = lost[lo:lo + chunk]
        far = np.sqrt(np.max(np.sum((items[i][:, :, None, :] - centers) ** 2, axis=-1),
                             axis=1))                                        # (chunk, S)
        pick = np.argmin(far - depths, axis=1)
        best[i], best_far[i] = pick, far[np.arange(len(i)), pick]
    np.maximum.at(radii, best, best_far)
    radii = np.where(radii > 0.0, radii * (1.0 + 1e-12) + 1e-12, 0.0)
    return radii, radii - depths
