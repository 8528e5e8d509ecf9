"""The collision constraint every solver respects, and the keep-out obstacles built on it.

``CollisionConstraint`` is a goals ``Constraint`` over ``CollisionEvaluation``; docs/collision.md,
section 4, gives each method's rule and why. Distances are in metres and padded (robot/robot
``gap - padding``, robot/obstacle the sphere's signed distance minus the padding); the covers
contain the URDF's geometry, so d >= 0 means the real geometry is at least the padding apart.
Hard (``violated``): a distance below 0 and deeper than at the reference (``set_reference``:
the node's command, each tick), per object pair: "move out of it, slide along it or hold,
never deeper". Pairs resting in contact (self pairs, obstacles on links no joint moves) keep
the depth of the first reference that found them in contact (their allowance) until a
reference finds them ``CONTACT_RELEASE`` [m] apart: sliding along bumpy sphere covers wobbles
the depth. ``check_motion`` checks a straight joint motion at sub-steps between which no
cover point moves more than ``motion_resolution`` [m]: with the padding >= the resolution,
no two covers touch between free sub-steps.
"""

import copy
import math
import weakref

import numpy as np

from ..errors import GoalError
from ..goals import Constraint
from ..rotations import quat_conjugate, quat_multiply, quat_slerp, quat_to_rotvec
from .engine import smallest_per_group
from .evaluation import CollisionEvaluation
from .model import CollisionModel
from .pairs import self_collision_pairs
from .scene import Obstacle, Scene

__all__ = ['CollisionConstraint', 'CollisionReport', 'KeepOutObstacle', 'KeepOutSphere',
           'DEFAULT_PADDING', 'DEFAULT_CLEARANCE']

DEFAULT_PADDING = 0.002     # [m] (the covers are conservative; this is the clearance kept)
DEFAULT_CLEARANCE = 0.01    # [m]
_REFERENCE_TOLERANCE = 1e-7  # [m] "not deeper" slack (rounding of identical configurations)
# [m] a pair this far apart at a reference has left its contact: its allowance ends (the
# module doc). Above the covers' depth wobble along a contact, well below their tolerance.
CONTACT_RELEASE = 0.005
# [m] how much deeper than its allowance a pair in contact may be at a check: what a motion
# planned to the allowance itself (the detour, ``play=0``) may dip between its sub-steps
# and those of the command stream's own check. Never fed back into the allowance.
CONTACT_PLAY = 0.00025
# [m] the largest threshold of a credited ``distances`` query (all leaves below it are taken).
CREDIT_SEARCH = 0.05
_NO_PAIRS = np.zeros(0, dtype=np.int64)
_NO_SHIFT = np.zeros(0)


class CollisionReport:
    """Closest pair per configuration: distance (N,) [m] (padded; inf when nothing is near),
    names [(a, b) or None], point_a / point_b (N, 3) [m] (NaN when none)."""

    __slots__ = ('distance', 'names', 'point_a', 'point_b')

    def __init__(self, distance, names, point_a, point_b):
        self.distance, self.names, self.point_a, self.point_b = distance, names, point_a, point_b

    def __repr__(self):
        first = self.names[0] if self.names else None
        return f'CollisionReport(distance={self.distance[:3]}, closest={first})'


class CollisionConstraint(CollisionEvaluation, Constraint):
    """Self- and scene-collision avoidance over a ``CollisionModel`` (see the module doc).

    Its soft clearance is a ``preference``: it weighs the SMC's particles (eq. 14) but never
    pulls one off its goal (the refinement leaves it out), so a goal whose configuration is
    free by the padding is reached however near the obstacle.

    model: the CollisionModel; scene: a Scene (shared with whoever updates it; changes are
    picked up at the next call) or None; self_collision: check the robot against itself;
    pairs: a ``SelfCollisionPairs`` (default: ``self_collision_pairs(model, padding=...)``
    without an SRDF); padding [m]: the smallest clearance accepted; clearance [m] and
    clearance_sigma [m]: the soft margin term (residual = max(0, clearance - d), divided by
    clearance_sigma; clearance 0: off); max_rows: soft rows per configuration; hard: refuse
    violating configurations (SMC, refinement, gradient solvers); motion_resolution [m]:
    sub-step spacing of ``check_motion`` (None: the padding, or 2 mm without padding).
    The distances come from ``CollisionEvaluation``.
    """

    def __init__(self, model, scene=None, self_collision=True, pairs=None,
                 padding=DEFAULT_PADDING, clearance=DEFAULT_CLEARANCE, clearance_sigma=0.01,
                 weight=1.0, max_rows=8, hard=True, motion_resolution=None, part_size=8):
        if not isinstance(model, CollisionModel):
            raise GoalError(f'CollisionConstraint needs a CollisionModel; got '
                            f'{type(model).__name__}')
        self.scene = scene if scene is not None else Scene()
        if not isinstance(self.scene, Scene):
            raise GoalError(f'scene must be a collision.Scene; got {type(scene).__name__}')
        self.padding = _positive(padding, 'padding', zero=True)
        self.clearance = _positive(clearance, 'clearance', zero=True)
        self.clearance_sigma = _positive(clearance_sigma, 'clearance_sigma')
        self.weight = _positive(weight, 'weight')
        self.max_rows = int(max_rows)
        if self.max_rows < 1:
            raise GoalError(f'max_rows must be >= 1; got {max_rows}')
        self.hard = bool(hard)
        self.preference = True
        if motion_resolution is None:
            motion_resolution = self.padding if self.padding > 0.0 else 0.002
        self.motion_resolution = _positive(motion_resolution, 'motion_resolution')
        self.sigma = np.full(self.max_rows, self.clearance_sigma)
        self.self_collision = bool(self_collision)
        if pairs is None and self.self_collision and model.has_geometry:
            pairs = self_collision_pairs(model, padding=self.padding)
        self._reference_q = None
        self._reference = None
        self._allowance = None       # (state key, pair ids, allowed distances) (module doc)
        CollisionEvaluation.__init__(self, model, self.scene,
                                     pairs if self.self_collision else None, self.padding,
                                     part_size)

    # ------------------------------------------------------------------ configuration
    def bind(self, chain):
        """Check that ``chain`` is the model's chain (same links and joints)."""
        mine = self.model.chain
        if chain is not mine and (chain.link_names != mine.link_names or
                                  chain.joint_names != mine.joint_names):
            raise GoalError('CollisionConstraint: the chain does not match the collision '
                            f'model (model links {list(mine.link_names)}, chain links '
                            f'{list(chain.link_names)})')
        return self

    def set_reference(self, q):
        """Set the configuration (nq,) whose penetrations may persist but not deepen (None:
        none may exist, and the allowances are forgotten). The node calls this with the
        current command every tick: the per-pair allowances follow the references (module
        doc): they are computed at the first reference and, while some pair has one, at
        every later one (a query of q each time), else when next needed."""
        if q is None:
            self._reference_q = None
            self._allowance = None
        else:
            q = np.asarray(q, dtype=float)
            if q.shape != (self.model.chain.nq,) or not np.all(np.isfinite(q)):
                raise GoalError(f'reference configuration must be {self.model.chain.nq} finite '
                                f'numbers; got shape {q.shape}')
            self._reference_q = q.copy()
        self._reference = None
        if self._reference_q is not None and (self._allowance is None
                                              or len(self._allowance[1])):
            self._allowance_table()

    def fork(self):
        """Return a twin of this constraint for a solver that steps in another thread.

        The twin shares what never changes after construction (the model, its geometry, the
        pair tables, the settings) and has its own caches and reference; it reads a snapshot
        of the scene (``Scene.snapshot``) taken now and again at each ``refresh()``, so the
        callbacks that change the live scene and the validators that use this constraint
        never race with the solver's step. The twin keeps this constraint's pairs and
        padding (a change of either is a new constraint object in the node).
        """
        twin = copy.copy(self)
        twin._live_scene = self.scene
        twin.scene = self.scene.snapshot()
        twin._reference_q = None if self._reference_q is None else self._reference_q.copy()
        twin._reference = None
        twin._allowance = self._allowance
        twin._obstacle_cache = (None, None)
        twin._cache = twin._rows_cache = None
        return twin

    def refresh(self):
        """A twin (``fork``): take a new snapshot of the live scene when it changed. Call it
        while no step runs, before each step."""
        live = getattr(self, '_live_scene', None)
        if live is not None and live.version != self.scene.version:
            self.scene = live.snapshot()

    @property
    def reference(self):
        """The reference configuration (nq,) or None."""
        return None if self._reference_q is None else self._reference_q.copy()

    def _eval_threshold(self):
        return max(self.clearance, 0.0) + 1e-12

    def _ensure(self, frames):
        """Get ready for ``frames`` (a keep-out volume builds itself for their chain)."""

    def _reference_table(self, q=None, play=None):
        """Return (sorted pair ids, allowed padded distances) of the pairs that may
        penetrate, for a check: the contact allowances (module doc; ``play`` [m] below
        them, default ``CONTACT_PLAY``) and, at an explicit configuration ``q``, each other
        pair's deepest penetration there."""
        play = CONTACT_PLAY if play is None else float(play)
        stored = self._allowance_table()
        if stored is not None and play:
            stored = (stored[0], stored[1] - play * self._reference[2])
        if q is None:
            return stored
        pairs, depth = self._pair_depths(q, 0.0)
        table = (pairs, depth - _REFERENCE_TOLERANCE)
        if stored is None or not len(stored[0]):
            return table
        return _union(stored, table)

    def _allowance_table(self):
        """Return the allowances (sorted pair ids, allowed padded distances) brought up to
        the stored reference, or None without one. Which of them last (``_lasting``) is
        kept with them: ``self._reference[2]``."""
        key = self.version
        if self._reference_q is None:
            return None
        if self._reference is not None and self._reference[0] == key:
            return self._reference[1]
        pairs, depth = self._pair_depths(self._reference_q, CONTACT_RELEASE)
        # Only resting contacts last (module doc): the robot's own pairs, and obstacles on
        # links no joint moves (a base on its mount); an obstacle on a moving link keeps
        # the per-reference rule (the arm moves out of it and never back).
        lasting = self._lasting(pairs)
        keep = lasting | (depth < 0.0)
        pairs, depth, lasting = pairs[keep], depth[keep], lasting[keep]
        previous = self._allowance
        allowed = depth - _REFERENCE_TOLERANCE
        if previous is not None and previous[0] == key and len(previous[1]):
            # Pairs still in contact keep their allowance, unless the reference is deeper
            # than the play allows (a measured resync); those farther apart are dropped by
            # the query's threshold. Never lowered by the commands themselves.
            known, pos = _find(previous[1], pairs)
            known &= lasting
            old = previous[2][pos[known]]
            allowed[known] = np.where(depth[known] >= old - CONTACT_PLAY, old,
                                      allowed[known])
            keep = known | (depth < 0.0)
        else:
            keep = depth < 0.0
        table = (pairs[keep], allowed[keep])
        self._allowance = (key,) + table
        self._reference = (key, table, lasting[keep])
        return table

    def allowances(self):
        """Return (pair ids, allowed padded distances [m] < 0) of the pairs resting in
        contact (self pairs, obstacles on links no joint moves) that may penetrate, brought
        up to the stored reference (empty without one). The ids are those of
        ``pair_names``; they hold while ``version`` is unchanged. An obstacle on a moving
        link is held to each reference's depth alone and is not listed."""
        table = self._allowance_table()
        if table is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        lasting = self._reference[2]
        return table[0][lasting], table[1][lasting]

    def _violating(self, leaves, reference=None, play=None):
        """Return the (K,) mask of leaves that violate: d < 0 and deeper than their pair's
        allowance (``_reference_table``: the stored reference's, or at the configuration
        ``reference``; looked up only when needed)."""
        bad = leaves.d < 0.0
        if not bad.any():
            return bad
        table = self._reference_table(reference, play)
        if table is None or not len(table[0]):
            return bad
        idx = np.flatnonzero(bad)
        found, pos = _find(table[0], leaves.pair[idx])
        bad[idx] = leaves.d[idx] < np.where(found, table[1][pos], 0.0)
        return bad

    # ------------------------------------------------------------------ hard constraint
    def violated(self, frames, reference=None):
        """Return (N,) bool: a padded distance < 0 that is deeper than at the reference.

        reference: a configuration (nq,) to compare with instead of the stored one.
        """
        self._ensure(frames)
        out = np.zeros(len(frames), dtype=bool)
        if self.hard and len(self._robot.radii):
            leaves, _ = self._query(frames, self._eval_threshold())
            if len(leaves):
                out[leaves.n[self._violating(leaves, reference)]] = True
        return out

    def in_collision(self, frames):
        """Return (N,) bool: any padded distance < 0 (ignoring the reference)."""
        out = np.zeros(len(frames), dtype=bool)
        if len(self._robot.radii):
            leaves, _ = self._query(frames, self._eval_threshold())
            out[leaves.n[leaves.d < 0.0]] = True
        return out

    # ------------------------------------------------------------------ soft clearance
    def _rows(self, frames):
        """Return (leaves, World, leaf rows (R,), config n (R,), slot (R,), residual (R,)) of
        the top rows (cached with the evaluation: residual and jacobian share it)."""
        leaves, world = self._query(frames, self._eval_threshold())
        cached = self._rows_cache
        if cached is not None and cached[0] is leaves:
            return cached[1]
        result = self._top_rows(leaves, world)
        self._rows_cache = (leaves, result)
        return result

    def _top_rows(self, leaves, world):
        if not len(leaves):
            e = np.zeros(0, dtype=np.int64)
            return leaves, world, e, e, e, np.zeros(0)
        rows = smallest_per_group(leaves.d, leaves.n, leaves.pair)     # one per object pair
        residual = self.clearance - leaves.d[rows]
        rows, residual = rows[residual > 0.0], residual[residual > 0.0]
        top, slot = smallest_per_group(-residual, leaves.n[rows], count=self.max_rows,
                                       rank=True)
        rows = rows[top]
        return leaves, world, rows, leaves.n[rows], slot, residual[top]

    def residual(self, frames):
        """Return (N, max_rows) clearance shortfalls [m], largest first (0 when clear)."""
        out = np.zeros((len(frames), self.max_rows))
        if len(self._robot.radii):
            _, _, _, n, slot, residual = self._rows(frames)
            out[n, slot] = residual
        return out

    def jacobian(self, frames):
        """Return (N, max_rows, nv): d residual / d tangent step of the ``residual`` rows."""
        out = np.zeros((len(frames), self.max_rows, self.model.chain.nv))
        if len(self._robot.radii):
            leaves, world, rows, n, slot, _ = self._rows(frames)
            if len(rows):
                out[n, slot] = -self._distance_gradients(frames, world, leaves.select(rows))
        return out

    # ------------------------------------------------------------------ gradient solvers
    def inequality_rows(self, frames, influence, per_pair=3):
        """Return (d (m,), J (m, nv)) of the first configuration's leaves within ``influence``.

        d: padded distances [m]; J: d d / d tangent step. At most ``per_pair`` leaves (the
        closest) per object pair. Used for velocity dampers J dq >= -xi (d - d_s) / (d_i - d_s).
        """
        self._ensure(frames)
        nv = self.model.chain.nv
        if not len(self._robot.radii):
            return np.zeros(0), np.zeros((0, nv))
        first = frames if len(frames) == 1 else frames.subset([0])
        world, leaves = self._run(first, float(influence))
        if not len(leaves):
            return np.zeros(0), np.zeros((0, nv))
        picked = leaves.select(smallest_per_group(leaves.d, leaves.pair, count=per_pair))
        return picked.d.copy(), self._distance_gradients(first, world, picked)

    # ------------------------------------------------------------------ reports
    def distances(self, frames, search=(0.05, 0.25, 1.0, np.inf), credit=None):
        """Return a ``CollisionReport``: per configuration the closest pair and its points.

        Distances beyond the last finite ``search`` threshold are still exact (the last
        search has no bound); configurations without geometry give inf. credit [m]: report
        the pairs that may penetrate (``allowances``) as ``credit`` plus their distance
        beyond their allowance, so that a pair held at its allowance counts as ``credit``
        away (the detour's clearance: a start resting in contact is not "inside the
        margin"). While some pair has an allowance, that takes each pair's closest leaf
        below one threshold, min(first ``search`` threshold, ``CREDIT_SEARCH``), instead of
        each configuration's nearest (which may be a shifted one hiding a nearer pair), and
        reports at most that threshold (a lower bound).
        """
        self._ensure(frames)
        n = len(frames)
        dist = np.full(n, np.inf)
        names = [None] * n
        pa = np.full((n, 3), np.nan)
        pb = np.full((n, 3), np.nan)
        if not len(self._robot.radii):
            return CollisionReport(dist, names, pa, pb)
        pairs, shift = self.allowances() if credit is not None else (_NO_PAIRS, _NO_SHIFT)
        if len(pairs):
            shift = float(credit) - shift
            search = (min(float(search[0]), CREDIT_SEARCH),)
        todo = np.arange(n)
        for threshold in search:
            if not len(todo):
                break
            sub = frames if len(todo) == n else frames.subset(todo)
            world, leaves = self._run(sub, float(threshold), nearest=not len(pairs),
                                      per_pair=bool(len(pairs)))
            if not len(leaves):
                continue
            d = leaves.d
            if len(pairs):
                found, pos = _find(pairs, leaves.pair)
                d = d + np.where(found, shift[pos], 0.0)
            pick = smallest_per_group(d, leaves.n)
            if len(pairs):
                pick = pick[d[pick] < threshold]      # the rest: at least the threshold
                if not len(pick):
                    continue
            best = leaves.select(pick)
            a_pts, b_pts = self._closest_points(world, best)
            rows = todo[best.n]
            dist[rows] = d[pick]
            pa[rows], pb[rows] = a_pts, b_pts
            for k, r in enumerate(rows):
                names[r] = self.pair_names(int(best.pair[k]))
            todo = np.setdiff1d(todo, rows)
        if len(pairs) and len(todo):
            dist[todo] = search[-1]
        return CollisionReport(dist, names, pa, pb)

    def status(self, q):
        """Return a dict for a status message at configuration q (nq,): min_distance [m],
        closest_pair 'a / b' (or ''), in_collision, points (2, 3) [m] or None."""
        report = self.distances(self.model.chain.frames(np.asarray(q, dtype=float)))
        d = float(report.distance[0])
        pair = report.names[0]
        return {'min_distance': d, 'closest_pair': '' if pair is None else ' / '.join(pair),
                'in_collision': bool(d < 0.0),
                'points': None if pair is None else np.stack([report.point_a[0],
                                                              report.point_b[0]])}

    # ------------------------------------------------------------------ the command stream
    def motion_substeps(self, q_from, q_to, resolution=None):
        """Return (count, bound [m]): sub-steps of the motion q_from -> q_to so that no cover
        point moves more than ``resolution`` (default ``motion_resolution``) between two."""
        chain = self.model.chain
        resolution = self.motion_resolution if resolution is None else float(resolution)
        dv = np.abs(_tangent_delta(chain, q_from, q_to))
        bound = float(np.max(self.lever @ dv)) if len(self.lever) else 0.0
        return max(1, int(math.ceil(bound / resolution))), bound

    def check_motion(self, q_from, q_to, resolution=None, play=None):
        """Return (ok, info) for the straight joint motion from q_from to q_to (nq,).

        The motion is checked at ``count`` evenly spaced sub-steps (q_to included) such that
        no cover point moves more than the resolution between two; ok is False when any
        sub-step violates the constraint with q_from as the reference (it may not go deeper
        into what q_from already penetrates, nor below the allowances of the pairs in
        contact, ``play`` as in ``check_motions``). info: substeps, bound [m] (largest
        cover-point displacement of the whole motion), first_bad (fraction of the motion, or
        None), distance [m] and pair (names) of the worst sub-step.
        """
        chain = self.model.chain
        q_from = np.asarray(q_from, dtype=float)
        q_to = np.asarray(q_to, dtype=float)
        count, bound = self.motion_substeps(q_from, q_to, resolution)
        info = {'substeps': count, 'bound': bound, 'first_bad': None,
                'distance': float('inf'), 'pair': None}
        if not len(self._robot.radii):
            return True, info
        s = np.arange(1, count + 1) / count
        leaves, _ = self._query(chain.frames(_interpolate(chain, q_from, q_to, s)),
                                self._eval_threshold())
        bad = self._violating(leaves, q_from, play)
        if bad.any():
            info['first_bad'] = float(s[int(leaves.n[bad].min())])
            leaves = leaves.select(np.flatnonzero(bad))
        if len(leaves):
            k = int(np.argmin(leaves.d))
            info.update(distance=float(leaves.d[k]), pair=self.pair_names(int(leaves.pair[k])))
        return not bad.any(), info

    def check_motions(self, q_from, q_tos, resolution=None, play=None):
        """Return (K,) bool: ``check_motion(q_from, q_to)`` for each row of q_tos (K, nq), in
        one batched evaluation (sub-steps of every motion together). play [m]: how far
        below their allowances the pairs in contact may go (default ``CONTACT_PLAY``; a
        planner checks its plan with 0, so the command stream's own check of the same
        motion at other sub-steps finds it allowed)."""
        chain = self.model.chain
        q_from = np.asarray(q_from, dtype=float)
        q_tos = np.atleast_2d(np.asarray(q_tos, dtype=float))
        ok = np.ones(len(q_tos), dtype=bool)
        if not len(self._robot.radii) or not len(q_tos):
            return ok
        counts = [self.motion_substeps(q_from, q_to, resolution)[0] for q_to in q_tos]
        path = np.concatenate([_interpolate(chain, q_from, q_to, np.arange(1, c + 1) / c)
                               for q_to, c in zip(q_tos, counts)])
        leaves, _ = self._query(chain.frames(path), self._eval_threshold())
        bad = self._violating(leaves, q_from, play)
        ok[np.unique(np.repeat(np.arange(len(q_tos)), counts)[leaves.n[bad]])] = False
        return ok

    def __repr__(self):
        return (f'CollisionConstraint({len(self._robot.radii)} spheres, {len(self.pairs)} self '
                f'pairs, {len(self.scene)} obstacles, padding {self.padding:g} m)')


# ---------------------------------------------------------------------- keep-out volumes
_SKELETONS = weakref.WeakKeyDictionary()


def _skeleton_for(chain):
    model = _SKELETONS.get(chain)
    if model is None:
        model = CollisionModel.skeleton(chain)
        _SKELETONS[chain] = model
    return model


class KeepOutObstacle(CollisionConstraint):
    """Keep the robot (or some of its links) out of one obstacle.

    obstacle: an ``Obstacle`` in the base frame; margin [m]: extra clearance (the padding);
    links: restrict to these links; model: the CollisionModel to check (None, a model
    without geometry, or one lacking one of ``links``: a thin skeleton of the chain's
    segments, built when bound).
    hard=True: the SMC rejects particles that enter it, gradient solvers add dampers; the
    soft term (residual = penetration depth [m] / sigma) pushes out of it either way.
    """

    def __init__(self, obstacle, margin=0.0, hard=True, links=None, model=None, sigma=0.005,
                 weight=1.0):
        if not isinstance(obstacle, Obstacle):
            raise GoalError(f'KeepOutObstacle needs an Obstacle; got {type(obstacle).__name__}')
        if links is not None:
            obstacle = Obstacle(obstacle.shape, obstacle.size, obstacle.pose, obstacle.centers,
                                links)
        self.obstacle = obstacle
        self.links = obstacle.links
        self.margin = _positive(margin, 'margin', zero=True)
        self._settings = dict(padding=self.margin, clearance=0.0, clearance_sigma=sigma,
                              weight=weight, hard=hard, max_rows=1)
        self.hard = bool(hard)
        self.weight = _positive(weight, 'weight')
        self.sigma = np.full(1, _positive(sigma, 'sigma'))
        self._given_model = model
        self._bound_chain = None
        if model is not None:
            self._build(model)

    def _build(self, model):
        if not model.has_geometry or (self.links is not None and
                                      not all(model.has_link(n) for n in self.links)):
            model = _skeleton_for(model.chain)
        scene = Scene({('keep_out', 0): self.obstacle})
        CollisionConstraint.__init__(self, model, scene, self_collision=False,
                                     **self._settings)
        self._bound_chain = model.chain

    def bind(self, chain):
        if self.links is not None:
            unknown = [n for n in self.links if not chain.has_link(n)]
            if unknown:
                raise GoalError(f'{type(self).__name__}: unknown link {unknown[0]!r}; links of '
                                f'this chain: {", ".join(chain.link_names)}')
        if self._bound_chain is None or (self._given_model is None and
                                         self._bound_chain is not chain):
            self._build(self._given_model if self._given_model is not None
                        else _skeleton_for(chain))
        return CollisionConstraint.bind(self, chain)

    def _ensure(self, frames):
        if self._bound_chain is None or (self._given_model is None and
                                         self._bound_chain is not frames.chain):
            self.bind(frames.chain)

    def residual(self, frames):
        self._ensure(frames)
        leaves, _ = self._query(frames, 1e-12)
        out = np.zeros((len(frames), 1))
        np.maximum.at(out[:, 0], leaves.n, -leaves.d)
        return out

    def jacobian(self, frames):
        self._ensure(frames)
        out = np.zeros((len(frames), 1, frames.chain.nv))
        leaves, world = self._query(frames, 1e-12)
        if len(leaves):
            worst = leaves.select(smallest_per_group(leaves.d, leaves.n))
            out[worst.n, 0] = -self._distance_gradients(frames, world, worst)
        return out

    def check_motion(self, q_from, q_to, resolution=None, play=None):
        if self._bound_chain is None:
            raise GoalError(f'{type(self).__name__}: bind it to a chain first')
        return CollisionConstraint.check_motion(self, q_from, q_to, resolution, play)


class KeepOutSphere(KeepOutObstacle):
    """Keep the chain out of a sphere: centre (3,) [m] in the base frame, radius [m].

    The same mechanism as every obstacle (a sphere ``Obstacle`` checked against the robot's
    cover); ``margin`` [m] is added clearance; ``links`` restricts which links are kept out;
    ``model``: the robot's CollisionModel (None: a thin skeleton of the chain's segments).
    """

    def __init__(self, center, radius, margin=0.0, hard=True, sigma=0.005, links=None,
                 weight=1.0, model=None):
        sphere = Obstacle.sphere(center, radius)          # validated there
        self.center, self.radius = sphere.pose[:3, 3], sphere.radius     # read-only centre
        super().__init__(sphere, margin=margin, hard=hard, links=links, model=model,
                         sigma=sigma, weight=weight)


# ---------------------------------------------------------------------- helpers
def _positive(value, what, zero=False):
    """Return ``value`` as a finite float > 0 (>= 0 [m] with ``zero``); GoalError else."""
    expected = 'a number >= 0 [m]' if zero else 'a positive number'
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise GoalError(f'{what} must be {expected}; got {value!r}') from None
    if not math.isfinite(value) or value < 0.0 or (value == 0.0 and not zero):
        raise GoalError(f'{what} must be {expected}; got {value}')
    return value


def _find(ids, keys):
    """Return (found (K,) bool, position (K,)): where each of ``keys`` is in the sorted,
    non-empty ``ids``."""
    pos = np.minimum(np.searchsorted(ids, keys), len(ids) - 1)
    return ids[pos] == keys, pos


def _union(first, second):
    """Return the union of two (sorted pair ids, values) tables, ``first``'s value where a
    pair is in both."""
    pairs = np.concatenate([first[0], second[0]])
    rows = smallest_per_group(np.arange(len(pairs)), pairs)
    return pairs[rows], np.concatenate([first[1], second[1]])[rows]


def _tangent_delta(chain, qa, qb):
    dv = np.zeros(chain.nv)
    dv[chain.scalar_v] = qb[chain.scalar_q] - qa[chain.scalar_q]
    if chain.has_ball_joints:
        bq = chain.ball_q_index
        dv[chain.ball_v_index] = quat_to_rotvec(quat_multiply(quat_conjugate(qa[bq]), qb[bq]))
    return dv


def _interpolate(chain, qa, qb, s):
    """Return (K, nq): the straight joint-space path qa -> qb at fractions s (K,)."""
    out = qa[None] + s[:, None] * (qb - qa)[None]
    if chain.has_ball_joints:
        bq = chain.ball_q_index
        for k, t in enumerate(s):
            out[k, bq] = quat_slerp(qa[bq], qb[bq], float(t))
    return out
