"""The batched distance engine: sphere hierarchies and a three-level broad phase.

Both sides are organised in three levels, each a sphere containing the level below:

- robot: link -> parts (groups of at most ``part_size`` spheres) -> cover spheres, all in
  the frames of the chain's bodies (moved by the kinematics, per configuration);
- scene: obstacle -> parts (groups of point-cloud spheres, or the one primitive) ->
  primitives (sphere, box, cylinder), fixed in the base frame.

A query gives every leaf pair (a robot sphere against a robot sphere of another link, or
against a primitive) whose padded signed distance is below a threshold, for all
configurations at once: level-1 bounds for every (configuration, link pair) and (link,
obstacle) pair, then only the children of pairs whose bound is below the threshold. A bound
is never larger than any distance below it (bounding spheres contain their children), so
nothing below the threshold is missed. The numpy form runs no Python loop over
configurations, pairs or spheres (each level is a few gathers and one distance kernel,
``shapes``); with numba the same levels run as one compiled kernel per query
(``kernels.collision_query``) that moves only the spheres its bounds reach to the base frame
(``World`` then computes positions lazily).

Distances are padded: ``d = gap - padding`` (robot against robot: the gap between the two
spheres; robot against obstacles: the signed distance of the sphere to the primitive).

Link pairs whose relative pose depends on one or two joints only (a forearm and the hand
two joints further on: the pairs that are close in most configurations) also get a lookup
table (``PairTables``): the smallest gap at the centre of each cell of a grid over those
joints, minus how far any cover point can move within a cell (joint half-width times its
lever arm, ``lever_matrix``), is a lower bound of the gap anywhere in the cell; level 1 uses
the larger of that bound and the bounding spheres' one.
"""

import numpy as np

from .. import kernels
from . import shapes

__all__ = ['RobotGeometry', 'ObstacleGeometry', 'World', 'Leaves', 'PairTables', 'query',
           'lever_matrix', 'split_groups',
           'bounding_sphere']


def bounding_sphere(centers, radii):
    """Return (centre (3,), radius) of a sphere containing spheres (centers (k, 3), radii)."""
    lo = np.min(centers - radii[:, None], axis=0)
    hi = np.max(centers + radii[:, None], axis=0)
    center = 0.5 * (lo + hi)
    radius = float(np.max(np.linalg.norm(centers - center, axis=1) + radii))
    return center, radius


def split_groups(centers, size):
    """Return index arrays grouping points (k, 3) into spatial groups of at most ``size``.

    Recursive median split along the axis of largest extent (a k-d tree's leaves).
    """
    out = []
    stack = [np.arange(len(centers))]
    while stack:
        idx = stack.pop()
        if len(idx) <= size:
            out.append(idx)
            continue
        pts = centers[idx]
        axis = int(np.argmax(np.ptp(pts, axis=0)))
        order = idx[np.argsort(pts[:, axis], kind='stable')]
        half = len(order) // 2
        stack.extend([order[half:], order[:half]])
    return out


class RobotGeometry:
    """The model's spheres regrouped per link (and in parts), with bounding spheres.

    Sphere k here is model sphere ``order[k]``. ``world(frames)`` moves every sphere and
    link centre (rows ``sph_row``, ``link_row``) to the base frame in one matrix product.
    """

    def __init__(self, model, part_size=8):
        self.model = model
        L = len(model.link_names)
        order, part_link, part_start, part_count = [], [], [], []
        link_part_start, link_part_count = [], []
        for link in range(L):
            idx = np.arange(model.link_start[link], model.link_start[link] +
                            model.link_count[link])
            groups = split_groups(model.centers[idx], part_size)
            link_part_start.append(len(part_start))
            link_part_count.append(len(groups))
            for g in groups:
                part_start.append(len(order))
                part_count.append(len(g))
                part_link.append(link)
                order.extend(idx[g].tolist())
        self.order = np.array(order, dtype=np.int64)
        self.centers = model.centers[self.order] if len(order) else np.zeros((0, 3))
        self.radii = model.radii[self.order] if len(order) else np.zeros(0)
        self.sphere_link = model.sphere_link[self.order] if len(order) else \
            np.zeros(0, dtype=np.int64)
        self.sphere_body = model.sphere_body[self.order] if len(order) else \
            np.zeros(0, dtype=np.int64)
        self.part_start = np.array(part_start, dtype=np.int64)
        self.part_count = np.array(part_count, dtype=np.int64)
        self.part_link = np.array(part_link, dtype=np.int64)
        self.link_part_start = np.array(link_part_start, dtype=np.int64)
        self.link_part_count = np.array(link_part_count, dtype=np.int64)
        Q = len(part_start)
        self.part_center = np.zeros((Q, 3))
        self.part_radius = np.zeros(Q)
        for q in range(Q):
            s = slice(part_start[q], part_start[q] + part_count[q])
            self.part_center[q], self.part_radius[q] = bounding_sphere(self.centers[s],
                                                                       self.radii[s])
        self.link_center = np.zeros((L, 3))
        self.link_radius = np.zeros(L)
        self.link_sphere_start = np.zeros(L, dtype=np.int64)
        self.link_sphere_count = np.zeros(L, dtype=np.int64)
        for link in range(L):
            first = part_start[link_part_start[link]]
            count = int(model.link_count[link])
            s = slice(first, first + count)
            self.link_sphere_start[link], self.link_sphere_count[link] = first, count
            self.link_center[link], self.link_radius[link] = bounding_sphere(self.centers[s],
                                                                             self.radii[s])
        self.link_body = np.asarray(model.link_body, dtype=np.int64)
        self.part_body = self.link_body[self.part_link] if Q else np.zeros(0, dtype=np.int64)
        # Rows of the world array: spheres then link centres. World positions come from one
        # matrix product: [R_b | t_b] of every body (and the identity for the base) times a
        # block matrix holding each row's local coordinates (and a 1) under its body.
        local = np.concatenate([self.centers, self.link_center])
        body = np.concatenate([self.sphere_body, self.link_body])
        S = len(self.radii)
        self.sph_row = np.arange(S)
        self.link_row = S + np.arange(L)
        self.bodies = np.unique(body) if len(body) else np.zeros(0, dtype=np.int64)
        slot = {int(b): k for k, b in enumerate(self.bodies)}
        block = np.zeros((4 * len(self.bodies), len(local)))
        for row, (b, point) in enumerate(zip(body, local)):
            k = slot[int(b)]
            block[4 * k:4 * k + 3, row] = point
            block[4 * k + 3, row] = 1.0
        self.block = block
        self.num_rows = len(local)
        # The same rows for the compiled path: each row's body and local point.
        self.row_body = np.ascontiguousarray(body, dtype=np.int64)
        self.row_local = np.ascontiguousarray(local, dtype=float).reshape(-1, 3)
        for arr in (self.centers, self.radii, self.part_center, self.part_radius,
                    self.link_center, self.link_radius, self.block):
            arr.setflags(write=False)

    @property
    def num_spheres(self):
        return len(self.radii)

    def world(self, frames):
        """Return the ``World`` of ``frames``: every sphere and link centre in the base frame.

        With the compiled kernels the positions are computed when first asked for (the
        compiled query moves only the rows its broad phase reaches); the World keeps a copy
        of the frames, so later changes to ``frames`` do not reach it.
        """
        n = len(frames)
        if kernels.ENABLED:
            return World(None, self.num_rows, n, np.array(frames.rot, order='C'),
                         np.array(frames.pos, order='C'), self)
        k = len(self.bodies)
        stack = np.empty((3, n, k, 4))
        moving = self.bodies >= 0
        if moving.any():
            b = self.bodies[moving]
            stack[:, :, moving, :3] = frames.rot[b].transpose(2, 1, 0, 3)
            stack[:, :, moving, 3] = frames.pos[b].transpose(2, 1, 0)
        if not moving.all():
            stack[:, :, ~moving, :3] = np.eye(3)[:, None, None, :]
            stack[:, :, ~moving, 3] = 0.0
        xyz = stack.reshape(3 * n, 4 * k) @ self.block
        return World(xyz.reshape(3, n * self.num_rows), self.num_rows, n)


class World:
    """Base-frame positions of a RobotGeometry's rows at N configurations.

    xyz: (3, N * T): x, y and z planes, row r of configuration n at column n * T + r. Built
    from the body frames (rot (B, N, 3, 3), pos (B, N, 3) and the ``geometry``) instead,
    ``xyz`` is computed on first use and ``points`` computes only the rows asked for.
    """

    __slots__ = ('_xyz', 'rows', 'n', 'rot', 'pos', 'geometry')

    def __init__(self, xyz, rows, n, rot=None, pos=None, geometry=None):
        self._xyz, self.rows, self.n = xyz, rows, n
        self.rot, self.pos, self.geometry = rot, pos, geometry

    @property
    def xyz(self):
        if self._xyz is None:
            g = self.geometry
            xyz = np.empty((3, self.n * self.rows))
            kernels.body_points_world(self.rot, self.pos, g.row_body, g.row_local, xyz)
            self._xyz = xyz
        return self._xyz

    def points(self, n, rows):
        """Return (K, 3) positions of rows (K,) at configurations n (K,)."""
        if self._xyz is None and self.rot is not None:
            g = self.geometry
            body, local = g.row_body[rows], g.row_local[rows]
            out = local.astype(float, copy=True).reshape(-1, 3)
            moving = body >= 0
            if moving.any():
                b, m = body[moving], np.asarray(n)[moving]
                out[moving] = np.einsum('kij,kj->ki', self.rot[b, m], local[moving]) + \
                    self.pos[b, m]
            return out
        idx = n * self.rows + rows
        xyz = self.xyz
        return np.stack([xyz[0].take(idx), xyz[1].take(idx), xyz[2].take(idx)], axis=-1)

    def grid(self, rows):
        """Return (N, R, 3) positions of ``rows`` (R,) at every configuration."""
        return self.xyz.reshape(3, self.n, self.rows)[:, :, rows].transpose(1, 2, 0)

    def distance(self, n, rows_a, rows_b):
        """Return (K,) distances between rows_a and rows_b (K,) at configurations n (K,)."""
        ia = n * self.rows + rows_a
        ib = n * self.rows + rows_b
        x, y, z = self.xyz
        dx = x.take(ia) - x.take(ib)
        dy = y.take(ia) - y.take(ib)
        dz = z.take(ia) - z.take(ib)
        return np.sqrt(dx * dx + dy * dy + dz * dz)

    def distance_to(self, n, rows, points):
        """Return (K,) distances between rows (K,) at configurations n and points (K, 3)."""
        idx = n * self.rows + rows
        x, y, z = self.xyz
        dx = x.take(idx) - points[:, 0]
        dy = y.take(idx) - points[:, 1]
        dz = z.take(idx) - points[:, 2]
        return np.sqrt(dx * dx + dy * dy + dz * dz)


class ObstacleGeometry:
    """Scene obstacles compiled to primitives, parts and objects, with bounding spheres.

    keys: the (ns, id) of each object; link_mask (O, L): which robot links each applies to.
    """

    def __init__(self, items, link_names, part_size=16):
        index = {n: i for i, n in enumerate(link_names)}
        L = len(link_names)
        kinds, rots, transs, sizes, prim_obj = [], [], [], [], []
        part_start, part_count, obj_part_start, obj_part_count = [], [], [], []
        self.keys, self.obstacles, masks = [], [], []
        total = 0
        for o, (key, obstacle) in enumerate(items):
            kind, rot, trans, size = obstacle.primitives()
            if not len(kind):
                continue
            groups = split_groups(trans, part_size) if len(kind) > part_size else \
                [np.arange(len(kind))]
            obj_part_start.append(len(part_start))
            obj_part_count.append(len(groups))
            for g in groups:
                part_start.append(total)
                part_count.append(len(g))
                kinds.append(kind[g])
                rots.append(rot[g])
                transs.append(trans[g])
                sizes.append(size[g])
                prim_obj.append(np.full(len(g), len(self.keys)))
                total += len(g)
            mask = np.zeros(L, dtype=bool)
            if obstacle.links is None:
                mask[:] = True
            else:
                for name in obstacle.links:
                    if name in index:
                        mask[index[name]] = True
            masks.append(mask)
            self.keys.append(key)
            self.obstacles.append(obstacle)
        cat = (lambda parts, shape, dtype=float: np.concatenate(parts) if parts
               else np.zeros(shape, dtype=dtype))
        self.kind = cat(kinds, (0,), np.int64)
        self.rot = cat(rots, (0, 3, 3))
        self.trans = cat(transs, (0, 3))
        self.size = cat(sizes, (0, 3))
        self.prim_obj = cat(prim_obj, (0,), np.int64)
        self.prim_radius = shapes.primitive_bounding_radius(self.kind, self.size)
        self.part_start = np.array(part_start, dtype=np.int64)
        self.part_count = np.array(part_count, dtype=np.int64)
        self.obj_part_start = np.array(obj_part_start, dtype=np.int64)
        self.obj_part_count = np.array(obj_part_count, dtype=np.int64)
        Q = len(part_start)
        self.part_center = np.zeros((Q, 3))
        self.part_radius = np.zeros(Q)
        for q in range(Q):
            s = slice(part_start[q], part_start[q] + part_count[q])
            self.part_center[q], self.part_radius[q] = bounding_sphere(self.trans[s],
                                                                       self.prim_radius[s])
        O = len(self.keys)
        self.obj_center = np.zeros((O, 3))
        self.obj_radius = np.zeros(O)
        for o in range(O):
            s = slice(obj_part_start[o], obj_part_start[o] + obj_part_count[o])
            self.obj_center[o], self.obj_radius[o] = bounding_sphere(self.part_center[s],
                                                                     self.part_radius[s])
        self.link_mask = np.array(masks, dtype=bool).reshape(O, L)
        pl, po = np.nonzero(self.link_mask.T)          # link-major pairs
        self.pair_link = pl.astype(np.int64)
        self.pair_obj = po.astype(np.int64)

    @property
    def num_primitives(self):
        return len(self.kind)


def lever_matrix(chain, model):
    """Return (B + 1, nv): for each body (row b + 1; row 0: the base, zeros) the largest speed
    of any of its cover points per unit of each tangent coordinate [m/rad or m/m].

    A revolute (or ball) column moves a point at most by its distance to the joint, bounded
    by the joint offsets down to the body plus the cover's reach from the body origin (with
    the travel of prismatic joints in between); a prismatic column moves it by 1 m/m.
    """
    B = chain.num_bodies
    C = len(chain.column_body)
    out = np.zeros((B + 1, chain.nv))
    bodies = sorted({int(b) for b in model.sphere_body if b >= 0})
    if not bodies or not C:
        return out
    travel = np.zeros(B)
    for b in chain.prismatic_bodies:
        qi = chain.body_q[b]
        lo, hi = chain.lower[qi], chain.upper[qi]
        mimic = chain.body_mimic[b]
        if mimic is not None:
            lo, hi = mimic[0] * lo + mimic[1], mimic[0] * hi + mimic[1]
        travel[b] = max(abs(lo), abs(hi))
    for b in bodies:
        sel = model.sphere_body == b
        extent = float(np.max(np.linalg.norm(model.centers[sel], axis=1) + model.radii[sel]))
        reach, k, acc = {}, b, 0.0
        while k >= 0:
            reach[k] = acc
            acc += float(np.linalg.norm(chain.body_offset[k])) + travel[k]
            k = chain.body_parent[k]
        rho = np.zeros(C)
        for c in range(C):
            body_c = int(chain.column_body[c])
            if body_c in reach:
                rho[c] = reach[body_c] + extent if chain.column_is_rotation[c] else 1.0
        out[b + 1] = rho @ np.abs(chain.column_scatter)
    return out


class PairTables:
    """Lower bounds of the gap of link pairs whose relative pose depends on <= 2 joints.

    For each such pair, a grid over its joints (cell width chosen so that no cover point
    moves more than ``slack`` [m] from the cell centre) holds the smallest unpadded gap at
    the cell centres (capped at ``cap`` [m]) minus that movement: a lower bound of the gap
    anywhere in the cell. ``bound(q)`` returns (N, P) bounds for every self pair (-inf where
    there is no table).

    The same sweep records which spheres of each side ever come within ``cap`` of the other
    link: spheres that never do cannot be within ``cap - margin`` anywhere, so queries whose
    padded threshold is below that use only those (``sphere_ranges``).
    """

    _FIELDS = ('pair_index', 'qcols', 'low', 'step', 'size', 'offset', 'values', 'subset_limit',
               'sphere_index', 'sphere_ranges', 'full_ranges')

    def __init__(self, robot, chain, pairs, lever, slack=0.01, cap=0.05, max_cells=8000,
                 cache_dir=None):
        self.num_pairs = len(pairs)
        key = self._key(robot, chain, pairs, lever, slack, cap, max_cells)
        if self._load(cache_dir, key):
            return
        self._build(robot, chain, pairs, lever, slack, cap, max_cells)
        self._store(cache_dir, key)

    @staticmethod
    def _key(robot, chain, pairs, lever, slack, cap, max_cells):
        import hashlib
        h = hashlib.sha256(f'smcik_ros-tables-v1:{slack!r}:{cap!r}:{max_cells!r}'.encode())
        for arr in (robot.centers, robot.radii, robot.link_sphere_start, robot.link_sphere_count,
                    robot.link_body, np.asarray(pairs, dtype=np.int64), lever, chain.lower,
                    chain.upper, chain.column_axis, chain.column_scatter,
                    np.asarray(chain.body_parent, dtype=np.int64),
                    np.asarray(chain.body_origin, dtype=float)):
            h.update(np.ascontiguousarray(arr).tobytes())
        return h.hexdigest()

    def _load(self, cache_dir, key):
        if cache_dir == '':
            return False
        import os
        from .covers import default_cache_dir
        path = os.path.join(cache_dir or default_cache_dir(), f'tables-{key}.npz')
        if not os.path.isfile(path):
            return False
        try:
            with np.load(path) as data:
                for name in self._FIELDS:
                    setattr(self, name, data[name])
        except (OSError, ValueError, KeyError):
            return False
        return True

    def _store(self, cache_dir, key):
        if cache_dir == '':
            return
        import os
        from .covers import default_cache_dir
        path = os.path.join(cache_dir or default_cache_dir(), f'tables-{key}.npz')
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f'{path}.{os.getpid()}.tmp.npz'
            np.savez(tmp, **{name: getattr(self, name) for name in self._FIELDS})
            os.replace(tmp, path)
        except OSError:
            pass

    def _build(self, robot, chain, pairs, lever, slack, cap, max_cells):
        scalar_q = {int(v): int(q) for q, v in zip(chain.scalar_q, chain.scalar_v)}
        body_mask = np.zeros((chain.num_bodies + 1, len(chain.column_body)), dtype=bool)
        for b in range(chain.num_bodies):
            body_mask[b + 1, chain.columns_of_body[b]] = True
        index, qcols, lows, steps, sizes, offsets, values = [], [], [], [], [], [], []
        total = 0
        # Sphere subsets per pair and side: (start, count) into ``sphere_index``; full link
        # ranges where there is no table. ``subset_limit``: padded thresholds up to which
        # the subsets are complete.
        subsets = []
        self.subset_limit = np.full(self.num_pairs, -np.inf)
        for p, (la, lb) in enumerate(pairs):
            full = (np.arange(robot.link_sphere_start[la],
                              robot.link_sphere_start[la] + robot.link_sphere_count[la]),
                    np.arange(robot.link_sphere_start[lb],
                              robot.link_sphere_start[lb] + robot.link_sphere_count[lb]))
            ba, bb = int(robot.link_body[la]), int(robot.link_body[lb])
            cols = np.flatnonzero(body_mask[ba + 1] ^ body_mask[bb + 1])
            vs = sorted({int(v) for c in cols for v in np.flatnonzero(chain.column_scatter[c])})
            if not 1 <= len(vs) <= 2 or not all(v in scalar_q for v in vs):
                subsets.append(full)
                continue
            qs = [scalar_q[v] for v in vs]
            rate = [lever[ba + 1, v] + lever[bb + 1, v] for v in vs]
            span = [chain.upper[q] - chain.lower[q] for q in qs]
            # Cell widths: half-width times the lever sums to slack over the table's joints.
            h = [2.0 * slack / (len(vs) * max(r, 1e-9)) for r in rate]
            n = [max(1, int(np.ceil(w / hh))) for w, hh in zip(span, h)]
            if int(np.prod(n)) > max_cells:
                scale = (np.prod(n) / max_cells) ** (1.0 / len(n))
                n = [max(1, int(np.ceil(k / scale))) for k in n]
            h = [w / k for w, k in zip(span, n)]
            margin = sum(0.5 * hh * r for hh, r in zip(h, rate))
            grid, near_a, near_b = self._tabulate(robot, chain, (la, lb), qs, n, h, cap)
            index.append(p)
            qcols.append(qs + [qs[0]] * (2 - len(qs)))
            lows.append([chain.lower[q] for q in qs] + [0.0] * (2 - len(qs)))
            steps.append(h + [1.0] * (2 - len(h)))
            sizes.append(n + [1] * (2 - len(n)))
            offsets.append(total)
            values.append(grid.ravel() - margin)
            total += grid.size
            subsets.append((near_a, near_b))
            self.subset_limit[p] = cap - margin
        self.pair_index = np.array(index, dtype=np.int64)
        self.qcols = np.array(qcols, dtype=np.int64).reshape(-1, 2)
        self.low = np.array(lows, dtype=float).reshape(-1, 2)
        self.step = np.array(steps, dtype=float).reshape(-1, 2)
        self.size = np.array(sizes, dtype=np.int64).reshape(-1, 2)
        self.offset = np.array(offsets, dtype=np.int64)
        self.values = np.concatenate(values) if values else np.zeros(0)
        self.values.setflags(write=False)
        # One flat index array: per pair the subset of each side, then (for table pairs) the
        # full links; ``sphere_ranges`` (P, 4) and ``full_ranges`` (P, 4) point into it.
        flat, ranges, fulls = [], np.zeros((self.num_pairs, 4), dtype=np.int64), \
            np.zeros((self.num_pairs, 4), dtype=np.int64)
        start = 0
        for p, (sa, sb) in enumerate(subsets):
            ranges[p] = (start, len(sa), start + len(sa), len(sb))
            flat.extend([sa, sb])
            start += len(sa) + len(sb)
            la, lb = pairs[p]
            if np.isfinite(self.subset_limit[p]):
                fa = np.arange(robot.link_sphere_start[la],
                               robot.link_sphere_start[la] + robot.link_sphere_count[la])
                fb = np.arange(robot.link_sphere_start[lb],
                               robot.link_sphere_start[lb] + robot.link_sphere_count[lb])
                fulls[p] = (start, len(fa), start + len(fa), len(fb))
                flat.extend([fa, fb])
                start += len(fa) + len(fb)
            else:
                fulls[p] = ranges[p]
        self.sphere_index = np.concatenate(flat).astype(np.int64) if flat else \
            np.zeros(0, dtype=np.int64)
        self.sphere_ranges = ranges
        self.full_ranges = fulls

    def __len__(self):
        return len(self.pair_index)

    @staticmethod
    def _tabulate(robot, chain, pair, qs, n, h, cap, chunk=1024):
        """Return ((n1, n2) smallest unpadded gaps (capped) at the cell centres, the spheres
        of each side that came within ``cap`` of the other link)."""
        axes = [chain.lower[q] + (np.arange(k) + 0.5) * hh for q, k, hh in zip(qs, n, h)]
        mesh = np.meshgrid(*axes, indexing='ij')
        cells = mesh[0].size
        q = np.tile(chain.neutral_configuration(), (cells, 1))
        for col, values in zip(qs, mesh):
            q[:, col] = values.ravel()
        out = np.full(cells, cap)
        pairs = np.array([pair], dtype=np.int64)
        near_a, near_b = set(), set()
        for start in range(0, cells, chunk):
            frames = chain.frames(q[start:start + chunk])
            leaves = query(robot, robot.world(frames), pairs, None, cap, 0.0)
            if len(leaves):
                np.minimum.at(out, start + leaves.n, leaves.d)
                near_a.update(np.unique(leaves.a).tolist())
                near_b.update(np.unique(leaves.b).tolist())
        return (out.reshape(n + [1] * (2 - len(n))), np.array(sorted(near_a), dtype=np.int64),
                np.array(sorted(near_b), dtype=np.int64))

    def ranges(self, pairs_idx, gap):
        """Return (P', 4) (a_start, a_count, b_start, b_count) into ``sphere_index`` for self
        pairs ``pairs_idx`` when looking for unpadded gaps below ``gap`` [m] (the subsets
        where they are complete, the full links elsewhere)."""
        use = gap <= self.subset_limit[pairs_idx]
        return np.where(use[:, None], self.sphere_ranges[pairs_idx], self.full_ranges[pairs_idx])

    def bound(self, q):
        """Return (N, P) lower bounds of the unpadded gap of every self pair (-inf: none)."""
        out = np.full((len(q), self.num_pairs), -np.inf)
        if not len(self.pair_index):
            return out
        cell = np.floor((q[:, self.qcols] - self.low) / self.step).astype(np.int64)
        cell = np.clip(cell, 0, self.size - 1)                  # (N, Pt, 2)
        flat = self.offset + cell[..., 0] * self.size[:, 1] + cell[..., 1]
        out[:, self.pair_index] = self.values[flat]
        return out


class Leaves:
    """Leaf pairs of a query: configuration n, object pair, robot sphere a, other b, distance.

    pair: global object-pair index (self pairs first, then link/obstacle pairs); b: a robot
    sphere for self pairs, a primitive for obstacle pairs (``is_self`` tells which).
    """

    __slots__ = ('n', 'pair', 'a', 'b', 'd', 'is_self', 'count')

    def __init__(self, n, pair, a, b, d, is_self, count):
        self.n, self.pair, self.a, self.b, self.d = n, pair, a, b, d
        self.is_self = is_self
        self.count = count

    def __len__(self):
        return len(self.d)

    def select(self, mask):
        """Return the leaves picked by a boolean mask or index array."""
        return Leaves(self.n[mask], self.pair[mask], self.a[mask], self.b[mask], self.d[mask],
                      self.is_self[mask], self.count)


def _ranges(start, count):
    """Return (row, index): for each row r, the indices start[r] .. start[r] + count[r] - 1."""
    total = int(count.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    row = np.repeat(np.arange(len(count)), count)
    shift = np.repeat(start - (np.cumsum(count) - count), count)
    return row, np.arange(total) + shift


def _expand(a_start, a_count, b_start, b_count):
    """Return (row, a, b): all child pairs of each row (ranges a and b), as flat arrays."""
    ra, a = _ranges(a_start, a_count)
    rb, b = _ranges(b_start[ra], b_count[ra])
    return ra[rb], a[rb], b


def _norm(v):
    return np.sqrt(np.einsum('...k,...k->...', v, v))


def _filter(n, a_start, a_count, radii, rows_of, world, other_center, other_radius, padding,
            threshold, index=None):
    """Expand each row into its spheres and keep those whose distance to the other side's
    bounding sphere is below the threshold. Returns (row, sphere, flat world index) of the
    kept ones (``World.xyz[:, flat]`` are their positions).

    other_center: (R, 3) per row; other_radius: (R,); index: the ranges index this array of
    sphere numbers (None: they are sphere numbers). Written with ``take`` on flat arrays
    (faster than fancy indexing of (K, 3) arrays).
    """
    row, sphere = _ranges(a_start, a_count)
    if index is not None:
        sphere = index.take(sphere)
    flat = n.take(row) * world.rows + rows_of.take(sphere)
    x, y, z = world.xyz
    dx = x.take(flat) - other_center[:, 0].take(row)
    dy = y.take(flat) - other_center[:, 1].take(row)
    dz = z.take(flat) - other_center[:, 2].take(row)
    d = np.sqrt(dx * dx + dy * dy + dz * dz) - radii.take(sphere) - other_radius.take(row)
    keep = np.flatnonzero(d < threshold + padding)
    return row.take(keep), sphere.take(keep), flat.take(keep)


def _group_ranges(row, count):
    """Return (start, count) per group for a sorted group index ``row`` over ``count`` groups."""
    sizes = np.bincount(row, minlength=count)
    return np.cumsum(sizes) - sizes, sizes


def query(robot, world, self_pairs, obstacles, threshold, padding, tables=None, q=None,
          nearest=False, per_pair=False):
    """Return the ``Leaves`` with padded distance < ``threshold`` [m] (see the module doc).

    robot: RobotGeometry; world: the ``World`` from ``robot.world``; self_pairs: (P, 2) link
    index pairs; obstacles: ObstacleGeometry or None; tables: ``PairTables`` of these
    self_pairs (with q (N, nq), the configurations of ``world``) or None; nearest: only each
    configuration's closest leaf is needed (the compiled query then prunes by branch and
    bound and returns just that one; the numpy path returns them all); per_pair: only the
    closest leaf of each (configuration, object pair), sorted by configuration then pair
    (what a check against per-pair allowances and the clearance rows need: one leaf per
    pair instead of every overlapping sphere pair of a contact; the compiled query prunes
    by branch and bound per pair, the numpy path reduces its leaves with ``min_per_pair``).

    Levels: (1) link/link and link/obstacle bounding spheres; (2) each sphere of one side
    against the other side's bounding sphere (both ways for link pairs); (3) the surviving
    spheres pairwise (for point-cloud sets: against the obstacle's parts, then primitives).
    """
    if kernels.ENABLED and world.rot is not None:
        return _query_compiled(robot, world, self_pairs, obstacles, threshold, padding, tables,
                               q, 2 if per_pair else 1 if nearest else 0)
    leaves = _query_numpy(robot, world, self_pairs, obstacles, threshold, padding, tables, q)
    if per_pair:
        leaves = leaves.select(min_per_pair(leaves)[0])
    return leaves


def _query_numpy(robot, world, self_pairs, obstacles, threshold, padding, tables, q):
    """``query`` by numpy levels: every leaf below ``threshold``."""
    n_cfg = world.n
    parts = []
    wl = world.grid(robot.link_row)                                   # (N, L, 3)
    P = len(self_pairs)
    if P:
        la, lb = self_pairs[:, 0], self_pairs[:, 1]
        d1 = _norm(wl[:, la] - wl[:, lb]) - (robot.link_radius[la] + robot.link_radius[lb]
                                             + padding)
        if tables is not None and len(tables):
            np.maximum(d1, tables.bound(q) - padding, out=d1)
        elif tables is not None and not len(tables):
            tables = None
        n1, p1 = np.nonzero(d1 < threshold)
        if len(n1):
            a1, b1 = la[p1], lb[p1]
            g = len(n1)
            if tables is not None:
                rng = tables.ranges(p1, threshold + padding)
                starts = np.concatenate([rng[:, 0], rng[:, 2]])
                counts = np.concatenate([rng[:, 1], rng[:, 3]])
                index = tables.sphere_index
            else:
                starts = robot.link_sphere_start[np.concatenate([a1, b1])]
                counts = robot.link_sphere_count[np.concatenate([a1, b1])]
                index = None
            # Both sides in one pass: rows 0..g-1 are the a-sides, g..2g-1 the b-sides.
            r, s, pts = _filter(np.concatenate([n1, n1]), starts, counts, robot.radii,
                                robot.sph_row, world, np.concatenate([wl[n1, b1], wl[n1, a1]]),
                                robot.link_radius[np.concatenate([b1, a1])], padding, threshold,
                                index)
            side_b = r >= g
            ra, sa, fa = r[~side_b], s[~side_b], pts[~side_b]
            rb, sb, fb = r[side_b] - g, s[side_b], pts[side_b]
            start_a, count_a = _group_ranges(ra, g)
            start_b, count_b = _group_ranges(rb, g)
            r, ia, ib = _expand(start_a, count_a, start_b, count_b)
            sa, sb = sa.take(ia), sb.take(ib)
            n3, p3 = n1.take(r), p1.take(r)
            fa, fb = fa.take(ia), fb.take(ib)
            x, y, z = world.xyz
            dx = x.take(fa) - x.take(fb)
            dy = y.take(fa) - y.take(fb)
            dz = z.take(fa) - z.take(fb)
            d3 = np.sqrt(dx * dx + dy * dy + dz * dz) - (
                robot.radii.take(sa) + robot.radii.take(sb) + padding)
            keep = d3 < threshold
            parts.append((n3[keep], p3[keep], sa[keep], sb[keep], d3[keep], True))
    if obstacles is not None and len(obstacles.pair_link):
        ol, oo = obstacles.pair_link, obstacles.pair_obj
        d1 = _norm(wl[:, ol] - obstacles.obj_center[oo]) - (
            robot.link_radius[ol] + obstacles.obj_radius[oo] + padding)
        n1, p1 = np.nonzero(d1 < threshold)
        if len(n1):
            l1, o1 = ol[p1], oo[p1]
            r, sa, flat = _filter(n1, robot.link_sphere_start[l1], robot.link_sphere_count[l1],
                                  robot.radii, robot.sph_row, world, obstacles.obj_center[o1],
                                  obstacles.obj_radius[o1], padding, threshold)
            n2, p2, o2 = n1[r], p1[r], o1[r]
            pts = world.xyz[:, flat].T
            single = obstacles.obj_part_count[o2] == 1
            if not single.all():
                # Sphere sets: the robot sphere against the set's parts first.
                multi = ~single
                r, q = _ranges(obstacles.obj_part_start[o2[multi]],
                               obstacles.obj_part_count[o2[multi]])
                nm, pm, sm, ptm = n2[multi][r], p2[multi][r], sa[multi][r], pts[multi][r]
                diff = ptm - obstacles.part_center[q]
                d2 = np.sqrt(np.einsum('ij,ij->i', diff, diff)) - (
                    robot.radii[sm] + obstacles.part_radius[q] + padding)
                keep = d2 < threshold
                nm, pm, sm, q, ptm = nm[keep], pm[keep], sm[keep], q[keep], ptm[keep]
                qs = obstacles.obj_part_start[o2[single]]
                n2 = np.concatenate([n2[single], nm])
                p2 = np.concatenate([p2[single], pm])
                sa = np.concatenate([sa[single], sm])
                pts = np.concatenate([pts[single], ptm])
                q = np.concatenate([qs, q])
            else:
                q = obstacles.obj_part_start[o2]
            r, m = _ranges(obstacles.part_start[q], obstacles.part_count[q])
            n3, p3, s3 = n2[r], p2[r], sa[r]
            centers = pts[r]
            d3 = shapes.point_primitive_distance(
                centers, obstacles.kind[m], obstacles.rot[m], obstacles.trans[m],
                obstacles.size[m]) - (robot.radii[s3] + padding)
            keep = d3 < threshold
            parts.append((n3[keep], p3[keep] + P, s3[keep], m[keep], d3[keep], False))
    if not parts:
        e = np.zeros(0, dtype=np.int64)
        return Leaves(e, e, e, e, np.zeros(0), np.zeros(0, dtype=bool), n_cfg)
    return Leaves(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                  np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]),
                  np.concatenate([p[4] for p in parts]),
                  np.concatenate([np.full(len(p[0]), p[5]) for p in parts]), n_cfg)


_EMPTY_I = np.zeros(0, dtype=np.int64)


def _contiguous(arr, dtype):
    """Return a writable C-contiguous copy of ``arr`` (one array type per kernel argument:
    read-only arrays would compile another specialisation)."""
    return np.array(arr, dtype=dtype, order='C', copy=True)


def _robot_arrays(robot):
    packed = getattr(robot, '_kernel_arrays', None)
    if packed is None:
        packed = tuple(_contiguous(a, t) for a, t in (
            (robot.radii, float), (robot.sph_row, np.int64), (robot.link_row, np.int64),
            (robot.link_radius, float), (robot.link_sphere_start, np.int64),
            (robot.link_sphere_count, np.int64),
            (np.repeat(np.arange(len(robot.part_count)), robot.part_count), np.int64),
            (robot.part_center.reshape(-1, 3), float), (robot.part_body, np.int64),
            (robot.part_radius, float)))
        robot._kernel_arrays = packed
    return packed


def _pair_arrays(self_pairs, tables, robot):
    """Return (pairs, table_of_pair, the PairTables arrays) for the kernel (cached on the
    tables, or on the robot without tables; empty tables when there are none)."""
    holder = tables if tables is not None else robot
    packed = getattr(holder, '_kernel_pairs', None)
    if packed is not None and packed[0] is self_pairs:
        return packed[1]
    P = len(self_pairs)
    pairs = _contiguous(np.asarray(self_pairs).reshape(-1, 2), np.int64)
    if tables is None or not len(tables):
        arrays = (pairs, np.full(P, -1, dtype=np.int64), np.zeros((0, 2), dtype=np.int64),
                  np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 2), dtype=np.int64),
                  _EMPTY_I.copy(), np.zeros(0), np.zeros(0), _EMPTY_I.copy(),
                  np.zeros((0, 4), dtype=np.int64), np.zeros((0, 4), dtype=np.int64))
    else:
        table_of_pair = np.full(P, -1, dtype=np.int64)
        table_of_pair[tables.pair_index] = np.arange(len(tables.pair_index))
        arrays = (pairs, table_of_pair, _contiguous(tables.qcols, np.int64),
                  _contiguous(tables.low, float), _contiguous(tables.step, float),
                  _contiguous(tables.size, np.int64), _contiguous(tables.offset, np.int64),
                  _contiguous(tables.values, float), _contiguous(tables.subset_limit, float),
                  _contiguous(tables.sphere_index, np.int64),
                  _contiguous(tables.sphere_ranges, np.int64),
                  _contiguous(tables.full_ranges, np.int64))
    holder._kernel_pairs = (self_pairs, arrays)
    return arrays


_NO_OBSTACLES = None


def _obstacle_arrays(obstacles):
    global _NO_OBSTACLES
    if obstacles is None:
        if _NO_OBSTACLES is None:
            _NO_OBSTACLES = (_EMPTY_I.copy(), _EMPTY_I.copy(), np.zeros((0, 3)), np.zeros(0),
                             _EMPTY_I.copy(), _EMPTY_I.copy(), np.zeros((0, 3)), np.zeros(0),
                             _EMPTY_I.copy(), _EMPTY_I.copy(), _EMPTY_I.copy(),
                             np.zeros((0, 3, 3)), np.zeros((0, 3)), np.zeros((0, 3)))
        return _NO_OBSTACLES
    packed = getattr(obstacles, '_kernel_arrays', None)
    if packed is None:
        packed = tuple(_contiguous(a, t) for a, t in (
            (obstacles.pair_link, np.int64), (obstacles.pair_obj, np.int64),
            (obstacles.obj_center.reshape(-1, 3), float), (obstacles.obj_radius, float),
            (obstacles.obj_part_start, np.int64), (obstacles.obj_part_count, np.int64),
            (obstacles.part_center.reshape(-1, 3), float), (obstacles.part_radius, float),
            (obstacles.part_start, np.int64), (obstacles.part_count, np.int64),
            (obstacles.kind, np.int64), (obstacles.rot.reshape(-1, 3, 3), float),
            (obstacles.trans.reshape(-1, 3), float), (obstacles.size.reshape(-1, 3), float)))
        obstacles._kernel_arrays = packed
    return packed


def _query_compiled(robot, world, self_pairs, obstacles, threshold, padding, tables, q,
                    mode=0, capacity=None):
    """``query`` by the compiled kernel (``kernels.collision_query``): the same leaves (mode
    1: each configuration's closest one; 2: each (configuration, pair)'s closest one).
    capacity: room for this many leaves in the first call (default 32 per configuration +
    256); the kernel is called again with room for all when more are found."""
    if q is None:          # the tables need the configurations
        tables = None
    pairs = _pair_arrays(self_pairs, tables, robot)
    if tables is None:
        q_arr = np.zeros((world.n, 1))
    else:
        q_arr = np.array(q, dtype=float, order='C').reshape(world.n, -1)   # writable
    args = (world.rot, world.pos, robot.row_body, robot.row_local, q_arr, float(threshold),
            float(padding), *_robot_arrays(robot), *pairs, *_obstacle_arrays(obstacles),
            int(mode))
    out = kernels.leaf_buffers(32 * world.n + 256 if capacity is None else int(capacity))
    count = kernels.collision_query(*args, *out)
    if count > len(out[0]):           # more leaves than room: again with room for all
        out = kernels.leaf_buffers(count)
        count = kernels.collision_query(*args, *out)
    return Leaves(*(x[:count] for x in out), world.n)


def min_per_pair(leaves):
    """Return (rows, n, pair): for each (configuration, object pair) the index of its
    smallest leaf, sorted by configuration then pair."""
    if not len(leaves):
        e = np.zeros(0, dtype=np.int64)
        return e, e, e
    order = np.lexsort((leaves.d, leaves.pair, leaves.n))
    n, pair = leaves.n[order], leaves.pair[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (n[1:] != n[:-1]) | (pair[1:] != pair[:-1])
    rows = order[first]
    return rows, leaves.n[rows], leaves.pair[rows]
