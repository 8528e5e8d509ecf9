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
nothing below the threshold is missed. The levels run as one compiled kernel per query
(``kernels.collision_query``) that moves only the spheres its bounds reach to the base frame
(``World`` computes positions lazily). The robot, the scene and the pair tables come to it
as records built once (``RobotGeometry.record``, ``ObstacleGeometry.record``,
``pair_record``).

Distances are padded: ``d = gap - padding`` (robot against robot: the gap between the two
spheres; robot against obstacles: the signed distance of the sphere to the primitive).

Link pairs whose relative pose depends on one or two joints only (a forearm and the hand
two joints further on: close in most configurations) also get a table of lower bounds of
their gap over a grid of those joints (``PairTables``); level 1 uses the larger of that
bound and the bounding spheres' one.
"""

import numpy as np

from ..kernels.collision import collision_query, leaf_buffers
from ..kernels.fk import body_points_world
from ..kernels.records import OBSTACLES, PAIRS, ROBOT
from ..model import cache as model_cache
from .shapes import primitive_bounding_radius

__all__ = ['RobotGeometry', 'ObstacleGeometry', 'World', 'Leaves', 'PairTables', 'query',
           'lever_matrix', 'smallest_per_group', 'pair_record', 'split_groups']


def _bounding_spheres(centers, radii, start, count):
    """Return (Q, 3) centres and (Q,) radii of spheres, each containing a run of the spheres
    (centers (k, 3), radii (k,)): run q is start[q] .. start[q] + count[q] - 1."""
    out_center, out_radius = np.zeros((len(start), 3)), np.zeros(len(start))
    for q, (first, k) in enumerate(zip(start, count)):
        c, r = centers[first:first + k], radii[first:first + k]
        lo = np.min(c - r[:, None], axis=0)
        hi = np.max(c + r[:, None], axis=0)
        out_center[q] = 0.5 * (lo + hi)
        out_radius[q] = float(np.max(np.linalg.norm(c - out_center[q], axis=1) + r))
    return out_center, out_radius


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

    Sphere k here is model sphere ``order[k]``. Rows: the sphere centres then the link
    centres (``sph_row``, ``link_row``), each with its body and its point there;
    ``world(frames)`` moves them to the base frame. ``record``: the same for the kernels
    (``kernels.records.ROBOT``).
    """

    def __init__(self, model, part_size=8):
        order, part_start, part_count, part_link, link_part_start = [], [], [], [], []
        for link in range(len(model.link_names)):
            idx = np.arange(model.link_start[link], model.link_start[link] +
                            model.link_count[link])
            link_part_start.append(len(part_start))
            for g in split_groups(model.centers[idx], part_size):
                part_start.append(len(order))
                part_count.append(len(g))
                part_link.append(link)
                order.extend(idx[g].tolist())
        part_start, part_count, part_link, link_part_start = (
            np.array(a, dtype=np.int64) for a in (part_start, part_count, part_link,
                                                  link_part_start))
        self.order = np.array(order, dtype=np.int64)
        self.centers = model.centers[self.order]
        self.radii = model.radii[self.order]
        self.sphere_link = model.sphere_link[self.order]
        self.sphere_body = model.sphere_body[self.order]
        self.link_body = np.asarray(model.link_body, dtype=np.int64)
        self.link_sphere_start = part_start[link_part_start]
        self.link_sphere_count = np.asarray(model.link_count, dtype=np.int64)
        part_center, part_radius = _bounding_spheres(self.centers, self.radii, part_start,
                                                     part_count)
        link_center, link_radius = _bounding_spheres(self.centers, self.radii,
                                                     self.link_sphere_start,
                                                     self.link_sphere_count)
        S, L = len(self.radii), len(model.link_names)
        self.sph_row = np.arange(S)
        self.link_row = S + np.arange(L)
        self.num_rows = S + L
        self.row_body = np.concatenate([self.sphere_body, self.link_body]).astype(np.int64)
        self.row_local = np.concatenate([self.centers, link_center]).reshape(-1, 3)
        self.centers.setflags(write=False)
        self.radii.setflags(write=False)
        self.record = ROBOT.pack(
            row_body=self.row_body, row_local=self.row_local, radii=self.radii,
            sphere_row=self.sph_row, link_row=self.link_row, link_radius=link_radius,
            link_sphere_start=self.link_sphere_start, link_sphere_count=self.link_sphere_count,
            sphere_part=np.repeat(np.arange(len(part_start)), part_count),
            part_local=part_center, part_body=self.link_body[part_link],
            part_radius=part_radius)

    def world(self, frames):
        """Return the ``World`` of ``frames`` (a copy of them: later changes do not reach
        it): every sphere and link centre in the base frame, computed when asked for (the
        compiled query moves only the rows its broad phase reaches)."""
        return World(self, np.array(frames.rot, order='C'), np.array(frames.pos, order='C'))


class World:
    """Base-frame positions of a RobotGeometry's rows at N configurations.

    From the body frames (rot (B, N, 3, 3), pos (B, N, 3)) and the ``geometry``: ``points``
    computes only the rows asked for, ``grid`` all rows at every configuration.
    """

    __slots__ = ('rows', 'n', 'rot', 'pos', 'geometry')

    def __init__(self, geometry, rot, pos):
        self.geometry, self.rot, self.pos = geometry, rot, pos
        self.rows, self.n = geometry.num_rows, rot.shape[1]

    def points(self, n, rows):
        """Return (K, 3) positions of rows (K,) at configurations n (K,)."""
        g = self.geometry
        body, local = g.row_body[rows], g.row_local[rows]
        out = local.astype(float, copy=True).reshape(-1, 3)
        moving = body >= 0
        if moving.any():
            b, m = body[moving], np.asarray(n)[moving]
            out[moving] = np.einsum('kij,kj->ki', self.rot[b, m], local[moving]) + \
                self.pos[b, m]
        return out

    def grid(self, rows):
        """Return (N, R, 3) positions of ``rows`` (R,) at every configuration."""
        xyz = np.empty((3, self.n * self.rows))     # row r of configuration n: n * T + r
        record = self.geometry.record
        body_points_world(self.rot, self.pos, record[0], record[1], xyz)
        return xyz.reshape(3, self.n, self.rows)[:, :, rows].transpose(1, 2, 0)


class ObstacleGeometry:
    """Scene obstacles compiled to primitives, parts and objects, with bounding spheres.

    keys: the (ns, id) of each object; kind (G,), rot (G, 3, 3), trans (G, 3), size (G, 3):
    the primitives in the base frame (``Obstacle.primitives``), part after part; pair_link,
    pair_obj (K,): the link/object pairs, link-major (an object applies to its ``links``);
    record: the same for the kernels (``kernels.records.OBSTACLES``).
    """

    def __init__(self, items, link_names, part_size=16):
        prims = [(np.zeros(0, dtype=np.int64), np.zeros((0, 3, 3)), np.zeros((0, 3)),
                  np.zeros((0, 3)))]
        part_start, part_count, obj_part_start, obj_part_count = [], [], [], []
        self.keys, masks = [], []
        total = 0
        for key, obstacle in items:
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
                prims.append((kind[g], rot[g], trans[g], size[g]))
                total += len(g)
            names = link_names if obstacle.links is None else obstacle.links
            masks.append([name in names for name in link_names])
            self.keys.append(key)
        self.kind, self.rot, self.trans, self.size = (np.concatenate(a) for a in zip(*prims))
        self.part_start, self.part_count, self.obj_part_start, self.obj_part_count = (
            np.array(a, dtype=np.int64) for a in (part_start, part_count, obj_part_start,
                                                  obj_part_count))
        part_center, part_radius = _bounding_spheres(
            self.trans, primitive_bounding_radius(self.kind, self.size), part_start,
            part_count)
        obj_center, obj_radius = _bounding_spheres(part_center, part_radius, obj_part_start,
                                                   obj_part_count)
        link_mask = np.array(masks, dtype=bool).reshape(len(self.keys), len(link_names))
        self.pair_link, self.pair_obj = (a.astype(np.int64) for a in np.nonzero(link_mask.T))
        self.record = OBSTACLES.pack(
            pair_link=self.pair_link, pair_obj=self.pair_obj, obj_center=obj_center,
            obj_radius=obj_radius, obj_part_start=self.obj_part_start,
            obj_part_count=self.obj_part_count, part_center=part_center,
            part_radius=part_radius, part_start=self.part_start, part_count=self.part_count,
            kind=self.kind, rot=self.rot, trans=self.trans, size=self.size)


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
    anywhere in the cell (the kernel looks it up).

    The same sweep records which spheres of each side ever come within ``cap`` of the other
    link: spheres that never do cannot be within ``cap - margin`` anywhere, so queries whose
    padded threshold is below that use only those (``sphere_ranges``).
    """

    _FIELDS = ('pair_index', 'qcols', 'low', 'step', 'size', 'offset', 'values', 'subset_limit',
               'sphere_index', 'sphere_ranges', 'full_ranges')
    # The last build's tables of each pair, keyed by what they depend on: an update that
    # changes some links' covers or the pairs tabulates only what it changed (a TIAGo first
    # start built all 850 pairs' tables five times, 6 s each, with the node running).
    _last = {}

    def __init__(self, robot, chain, pairs, lever, slack=0.01, cap=0.05, max_cells=8000,
                 cache_dir=None):
        self.num_pairs = len(pairs)
        key = model_cache.digest(
            'tables', slack, cap, max_cells, robot.centers, robot.radii,
            robot.link_sphere_start, robot.link_sphere_count, robot.link_body,
            np.asarray(pairs, dtype=np.int64), lever, chain.lower, chain.upper,
            chain.column_axis, chain.column_scatter, np.asarray(chain.body_parent, dtype=np.int64),
            np.asarray(chain.body_origin, dtype=float))
        hit = model_cache.load(cache_dir, 'tables', key)
        if hit is not None:
            for name in self._FIELDS:
                setattr(self, name, hit[1][name])
            return
        self._build(robot, chain, pairs, lever, slack, cap, max_cells)
        model_cache.store(cache_dir, 'tables', key, {},
                          {name: getattr(self, name) for name in self._FIELDS})

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
        start, count = robot.link_sphere_start, robot.link_sphere_count
        fulls = [tuple(np.arange(start[k], start[k] + count[k]) for k in pair) for pair in pairs]
        subsets = list(fulls)
        self.subset_limit = np.full(self.num_pairs, -np.inf)
        same_chain = model_cache.digest(
            chain.lower, chain.upper, chain.column_axis, chain.column_scatter,
            np.asarray(chain.body_parent, dtype=np.int64),
            np.asarray(chain.body_origin, dtype=float), chain.neutral_configuration())
        tabulated = {}
        for p, (la, lb) in enumerate(pairs):
            ba, bb = int(robot.link_body[la]), int(robot.link_body[lb])
            cols = np.flatnonzero(body_mask[ba + 1] ^ body_mask[bb + 1])
            vs = sorted({int(v) for c in cols for v in np.flatnonzero(chain.column_scatter[c])})
            if not 1 <= len(vs) <= 2 or not all(v in scalar_q for v in vs):
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
            grid, near_a, near_b = self._reused(robot, chain, (la, lb), qs, n, h, cap,
                                                same_chain, tabulated)
            index.append(p)
            qcols.append(qs + [qs[0]] * (2 - len(qs)))
            lows.append([chain.lower[q] for q in qs] + [0.0] * (2 - len(qs)))
            steps.append(h + [1.0] * (2 - len(h)))
            sizes.append(n + [1] * (2 - len(n)))
            offsets.append(total)
            values.append(grid.ravel() - margin)
            total += grid.size
            subsets[p] = (near_a, near_b)
            self.subset_limit[p] = cap - margin
        PairTables._last = tabulated
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
        flat = []
        self.sphere_ranges = np.zeros((self.num_pairs, 4), dtype=np.int64)
        self.full_ranges = np.zeros((self.num_pairs, 4), dtype=np.int64)
        first = 0
        for p, (sa, sb) in enumerate(subsets):
            self.sphere_ranges[p] = self.full_ranges[p] = (first, len(sa), first + len(sa),
                                                           len(sb))
            flat.extend([sa, sb])
            first += len(sa) + len(sb)
            if np.isfinite(self.subset_limit[p]):
                fa, fb = fulls[p]
                self.full_ranges[p] = (first, len(fa), first + len(fa), len(fb))
                flat.extend([fa, fb])
                first += len(fa) + len(fb)
        self.sphere_index = np.concatenate(flat).astype(np.int64) if flat else \
            np.zeros(0, dtype=np.int64)

    def __len__(self):
        return len(self.pair_index)

    def _reused(self, robot, chain, pair, qs, n, h, cap, same_chain, tabulated):
        """Return ``_tabulate``'s answer, from the last build when every input it depends
        on is the same (``same_chain``: the chain's digest); noted in ``tabulated``."""
        start, count = robot.link_sphere_start, robot.link_sphere_count
        (la, lb), (ba, bb) = pair, (int(robot.link_body[k]) for k in pair)
        ra, rb = (slice(start[k], start[k] + count[k]) for k in pair)
        key = model_cache.digest(same_chain, qs, n, h, cap, ba, bb, robot.centers[ra],
                                 robot.radii[ra], robot.centers[rb], robot.radii[rb])
        found = self._last.get(key)
        if found is None:           # spheres that came near, counted from their link's first
            grid, near_a, near_b = self._tabulate(robot, chain, pair, qs, n, h, cap)
            found = (grid, near_a - start[la], near_b - start[lb])
        tabulated[key] = found
        return found[0], found[1] + start[la], found[2] + start[lb]

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
        near = np.zeros((2, len(robot.radii)), dtype=bool)
        for start in range(0, cells, chunk):
            frames = chain.frames(q[start:start + chunk])
            leaves = query(robot, robot.world(frames), pairs, None, cap, 0.0)
            if len(leaves):
                np.minimum.at(out, start + leaves.n, leaves.d)
                near[0, leaves.a] = near[1, leaves.b] = True
        return (out.reshape(n + [1] * (2 - len(n))), np.flatnonzero(near[0]),
                np.flatnonzero(near[1]))


class Leaves:
    """Leaf pairs of a query: configuration n, object pair, robot sphere a, other b, distance.

    pair: global object-pair index (self pairs first, then link/obstacle pairs); b: a robot
    sphere for self pairs, a primitive for obstacle pairs (``is_self`` tells which).
    """

    __slots__ = ('n', 'pair', 'a', 'b', 'd', 'is_self')

    def __init__(self, n, pair, a, b, d, is_self):
        self.n, self.pair, self.a, self.b, self.d, self.is_self = n, pair, a, b, d, is_self

    def __len__(self):
        return len(self.d)

    def select(self, mask):
        """Return the leaves picked by a boolean mask or index array."""
        return Leaves(self.n[mask], self.pair[mask], self.a[mask], self.b[mask], self.d[mask],
                      self.is_self[mask])


def query(robot, world, self_pairs, obstacles, threshold, padding, tables=None, q=None,
          nearest=False, per_pair=False, capacity=None):
    """Return the ``Leaves`` with padded distance < ``threshold`` [m] (see the module doc).

    robot: RobotGeometry; world: the ``World`` from ``robot.world``; self_pairs: (P, 2) link
    index pairs; obstacles: ObstacleGeometry or None; tables: ``PairTables`` of these
    self_pairs (with q (N, nq), the configurations of ``world``) or None; nearest: only each
    configuration's closest leaf (the query prunes by branch and bound); per_pair: only the
    closest leaf of each (configuration, object pair), sorted by configuration then pair
    (what a check against per-pair allowances and the clearance rows need: one leaf per
    pair instead of every overlapping sphere pair of a contact). capacity: room for this
    many leaves in the kernel's first call (default 32 per configuration + 256); it is
    called again with room for all when more are found.

    Ties keep the first leaf found, as a stable sort of all leaves by distance would
    (``kernels.collision_query`` runs the levels).
    """
    if q is None:          # the tables need the configurations
        tables = None
    if tables is None:
        q_arr = np.zeros((world.n, 1))
    else:
        q_arr = np.array(q, dtype=float, order='C').reshape(world.n, -1 if world.n else
                                                             np.shape(q)[-1])   # writable
    args = (robot.record, pair_record(self_pairs, tables, robot),
            _NO_OBSTACLES if obstacles is None else obstacles.record, world.rot, world.pos,
            q_arr, float(threshold), float(padding), 2 if per_pair else 1 if nearest else 0)
    out = leaf_buffers(32 * world.n + 256 if capacity is None else int(capacity))
    count = collision_query(*args, out)
    if count > len(out[0]):           # more leaves than room: again with room for all
        out = leaf_buffers(count)
        count = collision_query(*args, out)
    return Leaves(*(x[:count] for x in out))


_NO_OBSTACLES = ObstacleGeometry((), ()).record
_NO_I, _NO_F = np.zeros(0, dtype=np.int64), np.zeros(0)
_NO_TABLES = dict(qcols=_NO_I.reshape(0, 2), low=_NO_F.reshape(0, 2), step=_NO_F.reshape(0, 2),
                  size=_NO_I.reshape(0, 2), offset=_NO_I, values=_NO_F, subset_limit=_NO_F,
                  sphere_index=_NO_I, sphere_ranges=_NO_I.reshape(0, 4),
                  full_ranges=_NO_I.reshape(0, 4))


def pair_record(self_pairs, tables, robot):
    """Return the kernels' record of the self pairs (P, 2) and their ``PairTables`` (or None:
    no tables; ``kernels.records.PAIRS``), cached on the tables (or on the robot without
    them) while the pairs are the same array."""
    holder = tables if tables is not None else robot
    packed = getattr(holder, '_pair_record', None)
    if packed is not None and packed[0] is self_pairs:
        return packed[1]
    pairs = np.asarray(self_pairs).reshape(-1, 2)
    table_of_pair = np.full(len(pairs), -1, dtype=np.int64)
    if tables is None or not len(tables):
        fields = _NO_TABLES
    else:
        table_of_pair[tables.pair_index] = np.arange(len(tables.pair_index))
        fields = {name: getattr(tables, name) for name in PairTables._FIELDS[1:]}
    record = PAIRS.pack(pairs=pairs, table_of_pair=table_of_pair, **fields)
    holder._pair_record = (self_pairs, record)
    return record


def smallest_per_group(d, *keys, count=1, rank=False):
    """Return the indices of the ``count`` smallest values of d (K,) in each group of equal
    ``keys`` ((K,) arrays), sorted by the keys (the first major) then by d, ties in index
    order; with ``rank``, also each one's place in its group (0: the smallest)."""
    order = np.lexsort((d,) + keys[::-1])
    start = np.zeros(len(order), dtype=bool)
    start[:1] = True
    for key in keys:
        key = key[order]
        start[1:] |= key[1:] != key[:-1]
    if count == 1 and not rank:
        return order[start]
    place = np.arange(len(order))
    place -= np.maximum.accumulate(np.where(start, place, 0))
    keep = place < count
    return (order[keep], place[keep]) if rank else order[keep]
