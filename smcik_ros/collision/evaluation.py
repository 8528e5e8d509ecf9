"""Distances of a robot's sphere covers among themselves and to a scene, batched and cached.

``CollisionEvaluation`` is the engine's side of the collision constraint: the robot's
geometry (``engine.RobotGeometry``), its self-collision pairs and their lookup tables, the
scene's obstacles (rebuilt when the scene's version changes), and a cache of recent
evaluations (a call on the same configurations reuses one; a call where only some rows
changed, as when the SMC redraws rejected particles, recomputes those rows only). On top of
it ``constraint.CollisionConstraint`` adds what a solver asks of a constraint.

Distances are in metres and padded (see ``constraint``); a leaf is one sphere pair of an
object pair (link/link or link/obstacle, ``engine.Leaves``).
"""

import numpy as np

from ..errors import GoalError
from ..kernels.collision import distance_gradients
from .engine import (Leaves, ObstacleGeometry, PairTables, RobotGeometry, lever_matrix, query,
                     smallest_per_group)
from .pairs import SelfCollisionPairs
from .shapes import point_primitive_distance, point_primitive_gradient

__all__ = ['CollisionEvaluation']


class CollisionEvaluation:
    """The distance engine over a ``CollisionModel``, a ``Scene`` and self-collision pairs.

    model: the CollisionModel; scene: a Scene (its changes are picked up at the next call);
    pairs: a SelfCollisionPairs, (P, 2) link indices or names, or None; padding [m]:
    subtracted from every distance; part_size: spheres per part of the robot's hierarchy.
    """

    def __init__(self, model, scene, pairs, padding, part_size=8):
        self.model = model
        self.scene = scene
        self.padding = padding
        self._robot = RobotGeometry(model, part_size)
        self._body_lever = lever_matrix(model.chain, model)
        # (B, nv): per body, the largest speed of any of its cover points per unit of each
        # tangent coordinate [m/rad or m/m]: a joint step dv moves no cover point of body b
        # more than ``(lever @ |dv|)[b]`` (``engine.lever_matrix``).
        self.lever = self._body_lever[1:]
        self._obstacle_cache = (None, None)
        self._rows_cache = None
        self.set_pairs(pairs)          # (and the evaluation cache)

    def set_pairs(self, pairs):
        """Replace the self-collision pairs (a SelfCollisionPairs, (P, 2) indices or names)."""
        if pairs is None:
            arr = np.zeros((0, 2), dtype=np.int64)
        elif isinstance(pairs, SelfCollisionPairs):
            arr = pairs.pairs
        else:
            rows = []
            for a, b in pairs:
                a = self.model.link_index(a) if isinstance(a, str) else int(a)
                b = self.model.link_index(b) if isinstance(b, str) else int(b)
                if a == b:
                    raise GoalError(f'self-collision pair ({a}, {b}) names one link twice')
                rows.append((min(a, b), max(a, b)))
            arr = np.array(sorted(set(rows)), dtype=np.int64).reshape(-1, 2)
        self.pairs = arr
        self.pairs.setflags(write=False)
        self._tables = PairTables(self._robot, self.model.chain, arr, self._body_lever,
                                  cache_dir=getattr(self.model, 'cache_dir', '')) \
            if len(arr) else None
        self._pairs_version = getattr(self, '_pairs_version', 0) + 1
        self._cache = None

    def _obstacles(self):
        version = self.scene.version
        cached_version, geometry = self._obstacle_cache
        if cached_version != version or geometry is None:
            geometry = ObstacleGeometry(self.scene.items(), self.model.link_names)
            self._obstacle_cache = (version, geometry)
        return geometry

    @property
    def version(self):
        """What a check depends on besides the configuration: (scene version, pairs version,
        padding); equal versions of the same object give the same verdicts."""
        return (self.scene.version, self._pairs_version, self.padding)

    def _query(self, frames, threshold):
        """Return (leaves with d < threshold, World) of ``frames``, cached: only each
        (configuration, object pair)'s closest leaf, which is all that the checks (per-pair
        allowances), the clearance rows and the keep-out terms read.

        A few recent evaluations are kept: a call on the same configurations reuses one,
        and a call where only some rows changed (the SMC redraws rejected particles, then
        asks for the cost of the whole set) recomputes those rows only.
        """
        q = frames.q
        state = (id(frames.chain), self.version)
        entries = [e for e in (self._cache or []) if e[0] == state]
        for k, entry in enumerate(entries):
            if entry[1] < threshold or entry[2].shape != q.shape:
                continue
            changed = np.any(entry[2] != q, axis=1)
            if not changed.any():
                leaves, world = entry[3], entry[4]
            elif 2 * np.count_nonzero(changed) <= len(changed):
                leaves, world = self._update_rows(frames, entry, changed, entries)
                entries[k] = (state, entry[1], q.copy(), leaves, world)
            else:
                continue
            entries.insert(0, entries.pop(k))
            self._cache = entries
            if entry[1] > threshold:
                leaves = leaves.select(leaves.d < threshold)
            return leaves, world
        world, leaves = self._run(frames, threshold, per_pair=True)
        # Keep the newest entries, and always the largest batch (the SMC's particle set,
        # whose rejected rows are redrawn through several smaller calls in between, and
        # whose rows come back when a particle falls back to its previous state).
        entries = [(state, threshold, q.copy(), leaves, world)] + entries
        keep = entries[:6]
        largest = sorted(entries, key=lambda e: -e[2].shape[0])[:3]
        keep += [e for e in largest if not any(e is k for k in keep)]
        self._cache = keep
        return leaves, world

    def _update_rows(self, frames, entry, changed, others=()):
        """Return the cached evaluation ``entry`` with the ``changed`` rows replaced: taken
        from other cached evaluations holding the same configurations (the SMC's redraws
        were just evaluated), computed for the rest."""
        _, threshold, _, old, _ = entry
        rows = np.flatnonzero(changed)
        q = frames.q
        parts = [old.select(~changed[old.n])]
        todo = rows
        for other in others:
            if not len(todo) or other is entry or other[1] < threshold or \
                    other[2].shape[1] != q.shape[1]:
                continue
            found, source = _match_rows(q[todo], other[2])
            if not found.any():
                continue
            src_rows, dst_rows = source[found], todo[found]
            parts.append(_leaves_of_rows(other, src_rows, dst_rows, threshold))
            todo = todo[~found]
        if len(todo):
            _, new = self._run(frames.subset(todo), threshold, per_pair=True)
            new.n = todo[new.n]
            parts.append(new)
        leaves = Leaves(*(np.concatenate([getattr(p, f) for p in parts])
                          for f in ('n', 'pair', 'a', 'b', 'd', 'is_self')))
        # The World of ``frames`` itself (positions computed only when asked for).
        return leaves, self._robot.world(frames)

    def _run(self, frames, threshold, nearest=False, per_pair=False):
        """Return (World, leaves below ``threshold``) of ``frames`` (no cache; ``nearest``:
        at least each configuration's closest leaf; ``per_pair``: only each (configuration,
        object pair)'s closest leaf; see ``engine.query``)."""
        world = self._robot.world(frames)
        leaves = query(self._robot, world, self.pairs, self._obstacles(), threshold,
                       self.padding, self._tables, frames.q, nearest, per_pair)
        return world, leaves

    def _pair_depths(self, q, threshold):
        """Return (sorted pair ids, smallest padded distance) of the object pairs closer
        than ``threshold`` [m] at the configuration q (nq,)."""
        _, leaves = self._run(self.model.chain.frames(np.asarray(q, dtype=float)), threshold,
                              per_pair=True)
        rows = smallest_per_group(leaves.d, leaves.pair)
        return leaves.pair[rows], leaves.d[rows]

    def _lasting(self, pairs):
        """Return (K,) bool: which object pairs (ids) may rest in contact: self pairs, and
        obstacle pairs whose link no joint moves."""
        out = pairs < len(self.pairs)
        rest = np.flatnonzero(~out)
        if len(rest):
            links = self._obstacles().pair_link[pairs[rest] - len(self.pairs)]
            out[rest] = self.model.link_body[links] < 0
        return out

    def pair_names(self, pair):
        """Return the (name a, name b) of a global object-pair index."""
        P = len(self.pairs)
        links = self.model.link_names
        if pair < P:
            return links[self.pairs[pair, 0]], links[self.pairs[pair, 1]]
        obs = self._obstacles()
        k = pair - P
        ns, oid = obs.keys[obs.pair_obj[k]]
        return links[obs.pair_link[k]], f'{ns}/{oid}'

    def _closest_points(self, world, leaves):
        robot = self._robot
        ca = world.points(leaves.n, robot.sph_row[leaves.a])
        ra = robot.radii[leaves.a]
        pa, pb = np.empty_like(ca), np.empty_like(ca)
        s = leaves.is_self
        if s.any():
            cb = world.points(leaves.n[s], robot.sph_row[leaves.b[s]])
            u = ca[s] - cb
            u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
            pa[s] = ca[s] - ra[s, None] * u
            pb[s] = cb + robot.radii[leaves.b[s], None] * u
        o = ~s
        if o.any():
            obs = self._obstacles()
            m = leaves.b[o]
            args = (obs.kind[m], obs.rot[m], obs.trans[m], obs.size[m])
            g = point_primitive_gradient(ca[o], *args)
            phi = point_primitive_distance(ca[o], *args)
            pa[o] = ca[o] - ra[o, None] * g
            pb[o] = ca[o] - phi[:, None] * g
        return pa, pb

    def _distance_gradients(self, frames, world, leaves):
        """Return (R, nv): d distance / d tangent step of each leaf."""
        robot = self._robot
        ca = world.points(leaves.n, robot.sph_row[leaves.a])
        grad = np.zeros((len(leaves), 3))
        cb = np.zeros((len(leaves), 3))
        s = leaves.is_self
        if s.any():
            cb[s] = world.points(leaves.n[s], robot.sph_row[leaves.b[s]])
            diff = ca[s] - cb[s]
            norm = np.linalg.norm(diff, axis=1, keepdims=True)
            grad[s] = np.where(norm > 1e-12, diff / np.maximum(norm, 1e-300), (0.0, 0.0, 1.0))
        o = ~s
        if o.any():
            obs = self._obstacles()
            m = leaves.b[o]
            grad[o] = point_primitive_gradient(ca[o], obs.kind[m], obs.rot[m], obs.trans[m],
                                               obs.size[m])
        body_b = np.full(len(leaves), -2, dtype=np.int64)      # < -1: an obstacle (no b term)
        body_b[s] = robot.sphere_body[leaves.b[s]]
        # grad . (J_a - J_b) a leaf at a time, in one compiled loop.
        return distance_gradients(
            frames.chain.records.columns, np.ascontiguousarray(frames.rot),
            np.ascontiguousarray(frames.pos),
            (np.ascontiguousarray(leaves.n, dtype=np.int64),
             np.ascontiguousarray(robot.sphere_body[leaves.a], dtype=np.int64),
             np.ascontiguousarray(ca), body_b, cb, grad))

    def contacts(self, q, within=0.0):
        """Return [((name a, name b), padded distance [m] < within)] of the object pairs that
        penetrate (or come closer than ``within`` [m]) at the configuration q (nq,), deepest
        first."""
        pairs, depth = self._pair_depths(q, within)
        order = np.argsort(depth, kind='stable')
        return [(self.pair_names(int(pairs[k])), float(depth[k])) for k in order]

    def cover_spheres(self, q, padded=False):
        """Return (centres (S, 3) [m] in the base frame, radii (S,), link names (S,)) at q."""
        frames = self.model.chain.frames(np.asarray(q, dtype=float))
        robot = self._robot
        world = robot.world(frames).grid(robot.sph_row)[0]
        links = np.array(self.model.link_names, dtype=object)[robot.sphere_link]
        return (world, robot.radii + (self.padding if padded else 0.0), links)

    def points_on_robot(self, points, q, margin=0.0, point_radius=0.0):
        """Return (P,) bool: points within the robot's cover + padding + margin at q.

        point_radius [m] treats each point as a sphere of that radius.
        """
        points = np.asarray(points, dtype=float).reshape(-1, 3)
        out = np.zeros(len(points), dtype=bool)
        if not len(points) or not len(self._robot.radii):
            return out
        from scipy.spatial import cKDTree

        centers, radii, _ = self.cover_spheres(q)
        reach = radii + self.padding + float(margin) + float(point_radius)
        tree = cKDTree(points)
        for hits in tree.query_ball_point(centers, reach):
            out[hits] = True
        return out


def _leaves_of_rows(entry, src, dst, threshold):
    """Return the leaves below ``threshold`` of the rows ``src`` of a cached evaluation
    ``entry``, renumbered as rows ``dst``. A source row may be taken for several rows:
    the particle set holds copies of one configuration (resampling, fallbacks)."""
    leaves = entry[3]
    order = np.argsort(leaves.n, kind='stable')
    count = np.bincount(leaves.n, minlength=len(entry[2]))
    start = np.cumsum(count) - count
    count = count[src]
    row = np.repeat(np.arange(len(count)), count)      # each source row's leaves, in order
    index = np.arange(len(row)) + np.repeat(start[src] - (np.cumsum(count) - count), count)
    leaves = leaves.select(order[index])
    leaves.n = np.asarray(dst)[row]
    return leaves.select(leaves.d < threshold) if entry[1] > threshold else leaves


def _match_rows(rows, table):
    """Return (found (R,), index (R,)): where each row of ``rows`` occurs in ``table``."""
    if not len(table):          # an evaluation of no configurations is cached too
        return np.zeros(len(rows), dtype=bool), np.zeros(len(rows), dtype=np.int64)
    width = rows.shape[1] * rows.dtype.itemsize
    key = np.ascontiguousarray(rows).view(np.dtype((np.void, width))).ravel()
    ref = np.ascontiguousarray(table).view(np.dtype((np.void, width))).ravel()
    order = np.argsort(ref)
    pos = np.searchsorted(ref[order], key)
    pos = np.minimum(pos, len(ref) - 1)
    found = ref[order][pos] == key
    return found, order[pos]
