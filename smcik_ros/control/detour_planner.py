"""The detour's planner, without ROS: a certified joint-space path round an obstacle.

``DetourPlanner.plan`` is a generator that yields after each unit of work (one IK iteration,
one tree edge, one batch of clearance evaluations), so that ``Detour.plan`` can run it within
a budget per tick (see ``detour`` for when a detour is planned and how it is followed):

1. A start closer than ``margin`` first retreats (a recent command with clearance, else a
   push out along the closest pairs' distance gradients), allowed by the command stream's
   own check (``exact``).
2. Collision-free goal configurations: a private Jacobian solver from the start and from
   random seeds; while none is found, a seed whose solution collides is solved again, at
   most ``free_searches`` times per plan, by a second private Jacobian solver with the
   collision constraints as inequalities, which finds goals in narrow free pockets of their
   self-motion; kept when END_CLEARANCE clear.
3. The straight leg to each, then a small RRT-connect between the start and those
   configurations, and a greedy shortcut of the path found.
4. A leg (straight joint-space segment) is accepted when it is certified free: the padded
   clearance ``d`` of the hard collision constraints is evaluated at its ends and at
   bisection points until every piece satisfies ``d0 + d1 >= 2 delta + 2 margin`` (``delta``:
   the largest displacement of any cover point over the piece, the constraints' own lever
   bound; the factor 2 covers two moving covers of a self-collision pair). Every point of
   the leg is then at least ``margin`` clear: stricter than the guard's sub-stepped check,
   which still validates every command while the path is followed.
"""

import math
import time

import numpy as np

from ..solvers import make_solver
from .limits import nearest_equivalent

__all__ = ['DetourPlanner', 'END_CLEARANCE', 'CLEARANCE_CAP']

# Clearances beyond this [m] are not needed to certify a leg (the search stops there).
CLEARANCE_CAP = 0.2
# Most clearance evaluations for one leg before it is declared not free, and per unit of work.
MAX_LEG_SAMPLES = 2048
SAMPLES_PER_UNIT = 48
# [s] the clearance batch of a unit is sized to about this (its last measured cost per
# sample; 8 samples before the first measure): TIAGo's 7000-sphere covers took over 120 ms
# per 48 samples, in the tick.
UNIT_SECONDS = 0.003
# A leg's ends need at least this padded clearance [m]; the leg keeps min(margin, half the
# smaller end clearance) at every point (a goal configuration may lie closer than the margin).
END_CLEARANCE = 0.001
# Most iterations of one collision-constrained goal search.
FREE_ITERATIONS = 150
# Recent commands tried for the retreat.
RETREAT_TRIES = 4
# The push out of the margin: most Gauss-Newton steps, and the largest joint change of one.
PUSH_ITERATIONS = 12
PUSH_STEP = 0.05


class DetourPlanner:
    """Plans detours for one chain (see the module doc).

    chain: the Chain; limits: its JointLimits; settings: DetourSettings; ik_solver: a Solver
    for the goal configurations (default: a private 'jacobian' one, so the loop's solver and
    its random streams are untouched); rng: a numpy Generator for the sampling (default: from
    ``settings.seed``). ``prepare`` gives it what a plan respects before each plan.
    """

    def __init__(self, chain, limits, settings, ik_solver=None, rng=None):
        self.chain = chain
        self.limits = limits
        self.settings = settings
        self.ik_solver = ik_solver if ik_solver is not None else make_solver('jacobian', chain)
        seed = None if settings.seed < 0 else settings.seed
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        # The collision-constrained goal search: a private 'jacobian' whose dampers keep the
        # margin (its constraints are set when a plan starts; its restarts seeded apart).
        self.free_solver = make_solver(
            'jacobian', chain, collision_security_distance=settings.margin,
            seed=-1 if seed is None else (seed + 1) % 2 ** 31)
        self.sample_seconds = 0.0   # the last measured clearance cost per sample [s]
        self.constraints = ()       # the hard constraints a plan keeps clear of
        self.exact = None           # the command stream's own check of a straight motion
        self.history = ()           # recent commands (oldest first), for the retreat
        self.held = None            # (n,) bool: joints every configuration keeps at the start
        self._rest = None           # the start of the plan (the held joints' values)

    def prepare(self, constraints, exact, history, held=None):
        """Plan against ``constraints`` (hard ones), retreat along ``history`` ((K, n) recent
        commands) where ``exact(q_from, q_to) -> bool`` allows it; ``held`` (n,) bool: the
        joints every configuration of the plan keeps where the arm rests (the arms of tips
        pinned there: they then stay exactly; None or none: all free)."""
        self.constraints = tuple(constraints)
        self.free_solver.set_constraints(self.constraints)
        self.exact = exact
        self.history = history
        self.held = np.array(held, dtype=bool) if held is not None and np.any(held) else None

    def _hold(self, q):
        """Return q (..., n) with the held joints (``prepare``) at the plan's start."""
        if self.held is None:
            return q
        q = np.array(q, dtype=float)
        q[..., self.held] = self._rest[self.held]
        return q

    def plan(self, start, terms, tolerances):
        """Generator: yield after each unit of work; return (path (K, n) or None, reason).

        start: (n,) where the arm rests; terms: the goal's targets; tolerances: (position
        [m], orientation [rad]) of the goal (the goal configurations are solved to half)."""
        s = self.settings
        prefix = []
        self._rest = np.array(start, dtype=float)
        if self.clearance(start[None])[0] < s.margin:
            retreat = yield from self._retreat(start)
            if retreat is None:
                return None, (f'the start is closer than the margin ({1e3 * s.margin:g} mm) '
                              'to a hard constraint and no way back along the recent commands '
                              'is free')
            prefix, start = [start], retreat
        goals = []
        span = self.chain.upper - self.chain.lower
        tol = (0.5 * tolerances[0], 0.5 * tolerances[1])
        searched = 0
        for k in range(s.goal_seeds):
            seed = start if k == 0 else (self.chain.lower + span * (
                0.05 + 0.9 * self.rng.uniform(size=self.chain.n)))
            result = yield from self.ik_solver.solve_steps(list(terms), seed, max_iters=100,
                                                           tol=tol)
            yield
            found = self._goal_configuration(result, start, goals)
            if found is None and not goals and searched < s.free_searches:
                # The nearest solution collides (a goal in a narrow free pocket of its
                # self-motion): search again from the same seed with the collision
                # constraints as inequalities (one iteration per unit of work).
                searched += 1
                result = yield from self.free_solver.solve_steps(
                    list(terms), seed, max_iters=FREE_ITERATIONS, tol=tol)
                found = self._goal_configuration(result, start, goals)
            if found is not None:
                goals.append(found)
        if not goals:
            return None, (f'no collision-free configuration of the goal found from '
                          f'{s.goal_seeds} IK seeds ({searched} of them searched with the '
                          'collision constraints)')
        goals.sort(key=lambda g: float(np.max(np.abs(g - start))))
        goals = goals[:s.goal_configurations]
        for g in goals:                              # the straight line first
            free = yield from self._leg(start, g)
            if free:
                return np.array(prefix + [start, g]), ''
        path = yield from self._rrt_connect(start, goals)
        if path is None:
            return None, (f'no collision-free path found in {s.max_iterations} iterations '
                          f'to {len(goals)} goal configuration(s)')
        path = yield from self._shortcut(path)
        return np.array(prefix + path), ''

    def _goal_configuration(self, result, start, goals):
        """Return the IK result as a new collision-free goal configuration (n,), or None
        (not solved, a duplicate of one in ``goals``, or closer than END_CLEARANCE)."""
        if result is None or not result.success:
            return None
        q = nearest_equivalent(np.asarray(result.q, dtype=float), start, self.limits.continuous)
        q = self._hold(self.limits.clip(q))     # held: only pinned tips, resting there
        if any(np.max(np.abs(q - g)) < 0.05 for g in goals):
            return None
        return q if self.clearance(q[None])[0] >= END_CLEARANCE else None

    def _retreat(self, start):
        """Generator: a configuration with at least twice the margin of clearance that the
        exact check lets the arm go to from ``start`` in a straight line, or None.

        The arm stopped at the margin comes from where it was free: the most recent such
        commands are tried, nearest first; then the push out (``_push_out``).
        """
        if self.exact is None:
            return None
        history = np.array(self.history)[::-1] if self.history else np.zeros((0, len(start)))
        history = history[np.max(np.abs(history - start), axis=1) > 1e-6][::5]
        if self.held is not None:           # only commands that held those joints as well
            history = history[np.all(history[:, self.held] == start[self.held], axis=1)]
        if len(history):
            clear = self.clearance(history) >= 2.0 * self.settings.margin + 0.004
            yield
            for q in history[clear][:RETREAT_TRIES]:
                if self.exact(start, q):
                    return q.copy()
                yield
        return (yield from self._push_out(start))

    def _push_out(self, start):
        """Generator: a configuration a short straight motion from ``start`` with at least
        twice the margin of clearance, found by Gauss-Newton steps that raise the distance of
        each object pair closer than the margin + 6 mm towards that (its closest leaf:
        least-norm steps on their gradients, at most PUSH_STEP per joint each), and allowed
        by the exact check; or None.

        The recent commands offer no way back when the arm came to the margin along a
        detour's leg or a goal that sits near an obstacle: the way out is then away from
        the closest pairs, whatever the goal.
        """
        collision = [c for c in self.constraints if hasattr(c, 'inequality_rows')]
        if self.exact is None or not collision:
            return None
        chain = self.chain
        want = 2.0 * self.settings.margin        # accepted: clear of the plan's start check
        aim = want + 0.006                       # Gauss-Newton nears its aim from below
        q = start.copy()
        for _ in range(PUSH_ITERATIONS):
            frames = chain.frames(q[None])
            rows = [c.inequality_rows(frames, aim, per_pair=1) for c in collision]
            d = np.concatenate([r[0] for r in rows])
            if not len(d) or d.min() >= aim - 0.001:
                break
            jac = np.vstack([r[1] for r in rows])
            if self.held is not None:
                jac[:, self.held] = 0.0         # least norm: the held joints stay
            dv = np.linalg.lstsq(jac, aim - d, rcond=1e-6)[0]
            largest = float(np.max(np.abs(dv)))
            if not math.isfinite(largest) or largest <= 0.0:
                return None
            dv *= min(1.0, PUSH_STEP / largest)
            q = self.limits.clip(chain.clip(chain.integrate(q, dv)))
            yield
        if self.clearance(q[None])[0] >= want and self.exact(start, q):
            return q
        return None

    def _rrt_connect(self, start, goals):
        """Generator: a path [start, ..., goal configuration] or None (RRT-connect)."""
        s = self.settings
        trees = [([start], [-1]), ([g for g in goals], [-1] * len(goals))]
        span = self.chain.upper - self.chain.lower
        low, high = self.chain.lower + 0.02 * span, self.chain.upper - 0.02 * span
        for it in range(s.max_iterations):
            grow, other = trees[it % 2], trees[1 - it % 2]
            if self.rng.uniform() < 0.3:
                sample = low + (high - low) * self.rng.uniform(size=self.chain.n)
            else:
                g = goals[self.rng.integers(len(goals))]
                sample = start + self.rng.uniform() * (g - start) + self.rng.normal(
                    0.0, 0.5, self.chain.n)
            sample = self._hold(np.clip(sample, low, high))
            nodes, parents = grow
            k = _nearest(nodes, sample)
            delta = sample - nodes[k]
            largest = float(np.max(np.abs(delta)))
            new = nodes[k] + delta * min(1.0, s.step / largest) if largest > 0 else sample
            if self.clearance(new[None])[0] < s.margin:
                yield
                continue
            free = yield from self._leg(nodes[k], new)
            if not free:
                continue
            nodes.append(new)
            parents.append(k)
            j = _nearest(other[0], new)
            free = yield from self._leg(new, other[0][j])
            if free:
                a = _branch(nodes, parents, len(nodes) - 1)
                b = _branch(other[0], other[1], j)
                path = a[::-1] + b if grow is trees[0] else b[::-1] + a
                return path
        return None

    def _shortcut(self, path):
        """Generator: the path with waypoints dropped where a straight leg skips them."""
        out, i = [path[0]], 0
        while i < len(path) - 1:
            j = len(path) - 1
            while j > i + 1:
                free = yield from self._leg(path[i], path[j])
                if free:
                    break
                j -= 1
            out.append(path[j])
            i = j
        return out

    def certify(self, points):
        """Return whether the straight legs between consecutive points (K, n) are all
        certified free (each run to the end)."""
        for a, b in zip(points[:-1], points[1:]):
            work = self._leg(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
            try:
                while True:
                    next(work)
            except StopIteration as result:
                if not result.value:
                    return False
        return True

    def _leg(self, a, b):
        """Generator: return whether the straight leg a -> b is certified free (module doc);
        while the arm rests in contact (``clearance``), the pairs in contact are also held
        to their allowances at the collision check's sub-steps, without its play (so that
        the command stream's own check, at other sub-steps, allows the leg too)."""
        free = yield from self._keeps_margin(a, b)
        for c in self.constraints:
            if free and hasattr(c, 'allowances') and len(c.allowances()[0]):
                yield
                free = bool(c.check_motions(a, b[None], play=0.0)[0])
        return free

    def _keeps_margin(self, a, b):
        """Generator: return whether the leg a -> b keeps the margin by the Lipschitz
        bound of the covers' motion (module doc)."""
        s = self.settings
        collision = [c for c in self.constraints if hasattr(c, 'motion_substeps')]
        bound = max((c.motion_substeps(a, b)[1] for c in collision), default=0.0)
        others = [c for c in self.constraints if not hasattr(c, 'motion_substeps')]
        if others:   # joint-space constraints: sampled 0.05 apart on any joint
            count = max(2, int(math.ceil(np.max(np.abs(b - a)) / 0.05)) + 1)
            t = np.linspace(0.0, 1.0, count)[:, None]
            if self.clearance(a + t * (b - a), others).min() < 0.0:
                return False
        if not collision:
            return True
        ends = self.clearance(np.array([a, b]), collision)
        yield
        if ends.min() < END_CLEARANCE:
            return False
        margin = min(s.margin, 0.5 * float(ends.min()))
        pending = [(0.0, 1.0, ends[0], ends[1])]
        used = 2
        while pending:
            split = [p for p in pending
                     if p[2] + p[3] < 2.0 * bound * (p[1] - p[0]) + 2.0 * margin
                     and bound * (p[1] - p[0]) > 1e-5]
            if not split:
                return True
            used += len(split)
            if used > MAX_LEG_SAMPLES:
                return False
            pending = []
            while split:
                size = 8 if self.sample_seconds <= 0.0 else \
                    int(np.clip(UNIT_SECONDS / self.sample_seconds, 1, SAMPLES_PER_UNIT))
                chunk, split = split[:size], split[size:]
                mids = np.array([0.5 * (p[0] + p[1]) for p in chunk])
                started = time.perf_counter()
                d = self.clearance(a + mids[:, None] * (b - a), collision)
                self.sample_seconds = (time.perf_counter() - started) / len(chunk)
                yield
                if d.min() < margin:
                    return False
                for (s0, s1, d0, d1), m, dm in zip(chunk, mids, d):
                    pending.append((s0, m, d0, dm))
                    pending.append((m, s1, dm, d1))
        return True

    def clearance(self, qs, constraints=None):
        """Return (K,) the smallest padded clearance [m] of the hard constraints at qs (K, n)
        (capped at CLEARANCE_CAP; -inf where a constraint without distances is violated).

        A pair that may penetrate (the arm rests in contact: the collision constraint's
        ``allowances``) does not count here: a start resting in contact is not "inside the
        margin" (a push out to twice the margin may be out of reach for a pair the joints
        barely move: Unitree Z1 folded at its zero pose); ``_leg`` holds such pairs to their
        allowances instead."""
        constraints = self.constraints if constraints is None else constraints
        qs = np.atleast_2d(qs)
        out = np.full(len(qs), CLEARANCE_CAP)
        if not constraints:
            return out
        frames = self.chain.frames(qs)
        for c in constraints:
            if hasattr(c, 'distances'):
                d = c.distances(frames, search=(CLEARANCE_CAP,),
                                credit=CLEARANCE_CAP).distance
                out = np.minimum(out, d)
            else:
                out[np.asarray(c.violated(frames), dtype=bool)] = -np.inf
        return out


def _nearest(nodes, q):
    return int(np.argmin(np.max(np.abs(np.asarray(nodes) - q), axis=1)))


def _branch(nodes, parents, k):
    out = []
    while k >= 0:
        out.append(nodes[k])
        k = parents[k]
    return out
