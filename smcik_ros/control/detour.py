"""A detour when the arm is blocked at the collision margin: plan a joint-space path round the
obstacle and follow it through the command stream (issue 9). Pure numpy, no ROS.

The collision avoidance of the command stream is local: the solver rejects colliding
particles and the validators hold rather than command a colliding move, so an obstacle
between the arm and a still goal stops the arm at the margin. ``Detour`` is what
``ControlLoop`` does then:

1. Trigger (``observe``, after every normal tick): a goal is followed and not reached, its
   error has not decreased by ``progress`` for ``trigger_time`` (or the goal has been
   followed for ``patience`` without being reached: a filter that keeps switching branches
   round an obstacle lowers its error in small steps for many seconds), and the arm is
   blocked: a validator refused a motion within ``trigger_time``, or the solver's answer is
   outside the goal's tolerance with the command within ``near`` of a hard collision
   constraint (the solvers keep out of collision, so they often hold the arm at the margin
   themselves). At most ``max_attempts`` detours per goal, ``retry_interval`` apart.
2. Plan (``plan``, a budget of ``budget`` seconds per tick; the arm brakes and holds at the
   plan's start meanwhile): a start closer than ``margin`` first retreats (a recent command
   with clearance, else a push out along the closest pairs' distance gradients);
   collision-free goal configurations (a private Jacobian solver from the start and from
   random seeds; while none is found, a seed whose solution collides is solved again, at most
   ``free_searches`` times per plan, by a second private Jacobian solver with the collision
   constraints as inequalities, which finds goals in narrow free pockets of their
   self-motion; kept when END_CLEARANCE clear), the straight leg to each, then a small
   RRT-connect between the start and those configurations, and a greedy shortcut of the path
   found. Solves run one iteration per unit of work (``Solver.solve_steps``), so no tick
   overruns its budget by more than one.
3. A leg (straight joint-space segment) is accepted when it is certified free: the padded
   clearance ``d`` of the hard collision constraints is evaluated at its ends and at
   bisection points until every piece satisfies ``d0 + d1 >= 2 delta + 2 margin`` (``delta``:
   the largest displacement of any cover point over the piece, the constraints' own lever
   bound; the factor 2 covers two moving covers of a self-collision pair). Every point of
   the leg is then at least ``margin`` clear: stricter than the guard's sub-stepped check,
   which still validates every command while the path is followed.
4. Follow (``target``/``advance``): the loop shapes each command towards the next waypoint
   within its limits and validates it as always; the arm comes to rest at each waypoint
   (so it stays on the certified straight legs), and the solver restarts at the goal
   configuration when it is reached. A new goal, a refused command, a changed scene whose
   remaining path is no longer free, stale joint_states, a stop, a resync or a solver
   switch cancel the detour (the loop brakes and the solver restarts at the stop).
"""

import collections
from dataclasses import dataclass, fields, replace
import math
import time

import numpy as np

from ..errors import ParameterError
from ..solvers.base import StateKey, goal_signature
from .command_shaping import nearest_equivalent

__all__ = ['Detour', 'DetourSettings', 'DETOUR_STATES']

DETOUR_STATES = ('idle', 'planning', 'following', 'done', 'failed', 'cancelled', 'off')
# An orientation error counts this much [m/rad] in the progress measure.
ORIENTATION_WEIGHT = 0.1
# Clearances beyond this [m] are not needed to certify a leg (the search stops there).
CLEARANCE_CAP = 0.2
# Most clearance evaluations for one leg before it is declared not free, and per unit of work.
MAX_LEG_SAMPLES = 2048
SAMPLES_PER_UNIT = 48
# A leg's ends need at least this padded clearance [m]; the leg keeps min(margin, half the
# smaller end clearance) at every point (a goal configuration may lie closer than the margin).
END_CLEARANCE = 0.001
# Most iterations of one collision-constrained goal search.
FREE_ITERATIONS = 150
# Recent commands remembered for the retreat (ticks), and how many are tried.
HISTORY = 400
RETREAT_TRIES = 4
# The push out of the margin: most Gauss-Newton steps, and the largest joint change of one.
PUSH_ITERATIONS = 12
PUSH_STEP = 0.05


@dataclass(frozen=True)
class DetourSettings:
    """Settings of the detour (see the module doc); times in s, lengths in m, joints in rad.

    enabled: plan detours at all (the node's ``collision_detour``).
    """

    enabled: bool = True
    trigger_time: float = 0.5       # [s] blocked without progress this long before a detour
    patience: float = 3.0           # [s] blocked and not reached this long: a detour even
    #                                 while the error still decreases
    progress: float = 0.002         # [m] goal-error decrease that counts as progress
    near: float = 0.01              # [m] padded clearance below which a held arm is blocked
    margin: float = 0.003           # [m] padded clearance kept along the planned path
    goal_seeds: int = 32            # IK solves (the start, then random seeds) per plan
    goal_configurations: int = 4    # most collision-free goal configurations planned to
    free_searches: int = 8          # seeds searched again with the collision constraints
    max_iterations: int = 300       # RRT-connect iterations before the plan fails
    step: float = 0.8               # [rad or m] largest joint change of one tree edge
    budget: float = 0.006           # [s] planning work per tick (at least one unit runs)
    max_attempts: int = 3           # detours per goal
    retry_interval: float = 1.0     # [s] after a failed or cancelled detour
    seed: int = -1                  # random seed of the sampling; -1: fresh entropy

    def __post_init__(self):
        object.__setattr__(self, 'enabled', bool(self.enabled))
        for name, low, high in (('trigger_time', 0.0, 60.0), ('patience', 0.0, 600.0),
                                ('progress', 0.0, 1.0),
                                ('near', 0.0, 0.1), ('margin', 0.0, 0.1),
                                ('step', 1e-3, 10.0), ('budget', 1e-4, 1.0),
                                ('retry_interval', 0.0, 600.0)):
            value = getattr(self, name)
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f'detour {name} must be a number; got {value!r}') from None
            if not (math.isfinite(value) and low <= value <= high):
                raise ParameterError(f'detour {name} must be in [{low:g}, {high:g}]; got '
                                     f'{value}')
            object.__setattr__(self, name, value)
        for name, low in (('goal_seeds', 1), ('goal_configurations', 1), ('free_searches', 0),
                          ('max_iterations', 0), ('max_attempts', 0), ('seed', -1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or value < low:
                raise ParameterError(f'detour {name} must be an integer >= {low}; got '
                                     f'{value!r}')
            object.__setattr__(self, name, int(value))

    def replace(self, **changes):
        """Return a copy with ``changes`` applied (validated)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ParameterError(f'unknown detour setting(s) {", ".join(unknown)}; expected '
                                 f'one of {", ".join(sorted(known))}')
        return replace(self, **changes)


class Detour:
    """Plans and follows one detour at a time for a ``ControlLoop`` (see the module doc).

    chain: the loop's Chain; limits: its JointLimits; settings: DetourSettings;
    ik_solver: a Solver used for the goal configurations (default: a private 'jacobian'
    one, so the loop's solver and its random streams are untouched); rng: a
    numpy Generator for the sampling (default: from ``settings.seed``).
    """

    def __init__(self, chain, limits, settings=None, ik_solver=None, rng=None):
        from ..solvers import make_solver      # the solvers import control helpers
        self.chain = chain
        self.limits = limits
        self.settings = settings if settings is not None else DetourSettings()
        self.ik_solver = ik_solver if ik_solver is not None else make_solver('jacobian', chain)
        seed = None if self.settings.seed < 0 else self.settings.seed
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        # The collision-constrained goal search: a private 'jacobian' whose dampers keep the
        # margin (its constraints are set when a plan starts; its restarts seeded apart).
        self._free_solver = make_solver(
            'jacobian', chain, collision_security_distance=self.settings.margin,
            seed=-1 if seed is None else (seed + 1) % 2 ** 31)
        self.state = 'idle' if self.settings.enabled else 'off'
        self.reason = ''
        self.path = None             # (K, n) waypoints, command coordinate (start first)
        self.index = 0               # waypoint being approached
        self.goal_sequence = None    # goal the detour is for
        self.counts = {'planned': 0, 'completed': 0, 'failed': 0, 'cancelled': 0}
        self.last_plan_time = None   # [s] CPU spent on the last plan
        self.last_plan_ticks = 0
        self.longest_tick = 0.0      # [s] longest planning work in one tick (last plan)
        self._terms = self._tolerances = None
        self._constraints = ()
        self._scene_version = None
        self._work = None
        self._goal_key = None        # goal_signature of the goal observed last
        self._goal_seen = None       # that Goal object
        self._best = math.inf        # smallest goal error of this goal [m]
        self._best_time = None       # when it was last improved by ``progress`` [s]
        self._since = None           # when this goal (or the last detour's end) began [s]
        self._trigger = ''
        self._attempts = 0
        self._next_allowed = -math.inf
        self._history = collections.deque(maxlen=HISTORY)
        self._exact = None

    # ------------------------------------------------------------------ settings
    def set_enabled(self, enabled):
        """Switch detours on or off (off cancels the one in progress: call ``cancel``)."""
        self.settings = self.settings.replace(enabled=bool(enabled))
        if not self.settings.enabled:
            self.state = 'off'
        elif self.state == 'off':
            self.state = 'idle'

    @property
    def active(self):
        """True while a detour is planned or followed (the loop does not follow the solver)."""
        return self.state in ('planning', 'following')

    # ------------------------------------------------------------------ trigger
    def observe(self, loop, now):
        """Track progress towards the loop's goal after a normal tick; return True when a
        detour should start now (the loop then calls ``start``)."""
        goal = loop.goal
        if loop.q is None:
            return False
        if not self._history or (self._history[-1] != loop.q).any():
            self._history.append(loop.q.copy())
        if goal is None:
            return False
        # The same Goal object has the same signature (frozen, read-only targets): computed
        # once per goal object, not on every tick.
        key = self._goal_key if goal is self._goal_seen else goal_signature(goal.terms)
        self._goal_seen = goal
        if key != self._goal_key:
            self._goal_key = key
            self._best, self._best_time = math.inf, now
            self._since = now
            self._attempts = 0
            self._next_allowed = -math.inf
            if self.state in ('done', 'failed', 'cancelled'):
                self.state, self.reason = 'idle', ''
        error = loop.goal_errors[0] + ORIENTATION_WEIGHT * loop.goal_errors[1]
        if not math.isfinite(error):
            return False
        if error < self._best - self.settings.progress:
            self._best, self._best_time = error, now
        if (not self.settings.enabled or loop.goal_reached or loop.stopping
                or self._attempts >= self.settings.max_attempts
                or now < self._next_allowed
                or (now - self._best_time < self.settings.trigger_time
                    and now - self._since < self.settings.patience)):
            return False
        within = max(1, int(round(self.settings.trigger_time / max(self._tick_period(loop),
                                                                    1e-3))))
        blocked = loop.refusal(within=within) is not None or self._held_at_margin(loop)
        if blocked:
            stalled = now - self._best_time >= self.settings.trigger_time
            self._trigger = (f'without progress for {self.settings.trigger_time:g} s' if stalled
                             else f'not reached after {now - self._since:.1f} s')
        return blocked

    def trigger_text(self):
        """Return why the last detour started (for the loop's log line)."""
        return self._trigger

    def _held_at_margin(self, loop):
        """Return whether the solver itself holds the arm at the collision margin: its answer
        is outside the goal's tolerance and the command is within ``near`` [m] (padded) of a
        hard collision constraint. The solvers keep out of collision, so an obstacle between
        the arm and the goal often stops the answer at the margin with no validator refusal;
        an answer within tolerance (a selected alternative, a goal being reached) is motion,
        not a block."""
        estimate = loop.estimate
        hard = tuple(c for c in loop.constraints if c.hard and hasattr(c, 'distances'))
        if estimate is None or not hard:
            return False
        # A pure function of these: an arm held short of a goal (out of reach, or blocked
        # while no detour is allowed) asks it every tick with the same command and answer,
        # and a distance query per tick cost ~0.6 ms there.
        key = (np.asarray(loop.q, dtype=float).tobytes(), estimate.tobytes(),
               tuple(loop.tolerances), StateKey(objects=(loop.goal,), constraints=hard),
               tuple(None if getattr(c, 'reference', None) is None else c.reference.tobytes()
                     for c in hard))
        memo = self._margin_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        pos, ori = (float(v[0]) for v in loop.goal.terms[0].errors(self.chain.frames(estimate)))
        if pos <= loop.tolerances[0] and ori <= loop.tolerances[1]:
            held = False
        else:
            held = bool(self._clearance(loop.q, hard)[0] < self.settings.near)
        self._margin_memo = (key, held)
        return held

    _margin_memo = None     # (what _held_at_margin's verdict depends on, the verdict)

    @staticmethod
    def _tick_period(loop):
        last = loop.last
        if last is None or loop.first_tick is None or loop.ticks < 2:
            return 0.01
        return max(1e-3, (last.stamp - loop.first_tick) / max(1, loop.ticks - 1))

    # ------------------------------------------------------------------ planning
    def start(self, loop, q_start, now, exact=None):
        """Start planning from ``q_start`` (n,) to the goal (None: from where the arm comes
        to rest, see ``plan``).

        exact: callable (q_from, q_to) -> bool, the command stream's own validation of a
        straight motion (the loop's validators), used for the retreat from a start closer
        than the margin to an obstacle (the rest of the path is certified, module doc).
        """
        self._attempts += 1
        self._exact = exact
        self.goal_sequence = loop.goal.sequence
        self.state, self.reason = 'planning', ''
        self.path, self.index = None, 0
        self._constraints = tuple(c for c in loop.constraints if c.hard)
        self._free_solver.set_constraints(self._constraints)
        self._scene_version = self._version()
        self.last_plan_time, self.last_plan_ticks, self.longest_tick = 0.0, 0, 0.0
        self._terms, self._tolerances = loop.goal.terms, loop.tolerances
        self._work = None if q_start is None else self._plan(
            np.array(q_start, dtype=float), self._terms, self._tolerances)

    def plan(self, now, q_rest=None):
        """Run planning work for up to ``budget`` seconds; return the state afterwards.

        q_rest: (n,) the command once the arm is at rest, when ``start`` was given no start
        (the plan then starts there; None: not at rest yet, nothing is done).
        """
        if self.state != 'planning':
            return self.state
        if self._work is None:
            if q_rest is None:
                return self.state
            self._work = self._plan(np.array(q_rest, dtype=float), self._terms,
                                    self._tolerances)
        started = time.perf_counter()
        self.last_plan_ticks += 1
        try:
            while time.perf_counter() - started < self.settings.budget:
                next(self._work)
        except StopIteration as result:
            path, reason = result.value
            if path is None:
                self._finish('failed', reason, now)
                self.counts['failed'] += 1
            else:
                self.path, self.index = path, 0
                self.state = 'following'
                self.reason = (f'{len(path) - 1} leg(s), {self.last_plan_ticks} tick(s) of '
                               'planning')
                self.counts['planned'] += 1
        finally:
            spent = time.perf_counter() - started
            self.last_plan_time += spent
            self.longest_tick = max(self.longest_tick, spent)
        return self.state

    def _plan(self, start, terms, tolerances):
        """Generator: yield after each unit of work; return (path or None, reason)."""
        s = self.settings
        prefix = []
        if self._clearance(start[None])[0] < s.margin:
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
                result = yield from self._free_solve(terms, seed, tol)
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
        q = self.limits.clip(q)
        if any(np.max(np.abs(q - g)) < 0.05 for g in goals):
            return None
        return q if self._clearance(q[None])[0] >= END_CLEARANCE else None

    def _free_solve(self, terms, seed, tol):
        """Generator: the collision-constrained solve of ``terms`` from ``seed``, one
        iteration per unit of work; return its IKResult."""
        result = yield from self._free_solver.solve_steps(list(terms), seed,
                                                          max_iters=FREE_ITERATIONS, tol=tol)
        return result

    def _retreat(self, start):
        """Generator: a configuration with at least twice the margin of clearance that the
        exact check lets the arm go to from ``start`` in a straight line, or None.

        The arm stopped at the margin comes from where it was free: the most recent such
        commands are tried, nearest first; then the push out (``_push_out``).
        """
        if self._exact is None:
            return None
        history = np.array(self._history)[::-1] if self._history else np.zeros((0, len(start)))
        history = history[np.max(np.abs(history - start), axis=1) > 1e-6][::5]
        if len(history):
            clear = self._clearance(history) >= 2.0 * self.settings.margin + 0.004
            yield
            for q in history[clear][:RETREAT_TRIES]:
                if self._exact(start, q):
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
        collision = [c for c in self._constraints if hasattr(c, 'inequality_rows')]
        if self._exact is None or not collision:
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
            dv = np.linalg.lstsq(jac, aim - d, rcond=1e-6)[0]
            largest = float(np.max(np.abs(dv)))
            if not math.isfinite(largest) or largest <= 0.0:
                return None
            dv *= min(1.0, PUSH_STEP / largest)
            q = self.limits.clip(chain.clip(chain.integrate(q, dv)))
            yield
        if self._clearance(q[None])[0] >= want and self._exact(start, q):
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
            sample = np.clip(sample, low, high)
            nodes, parents = grow
            k = _nearest(nodes, sample)
            delta = sample - nodes[k]
            largest = float(np.max(np.abs(delta)))
            new = nodes[k] + delta * min(1.0, s.step / largest) if largest > 0 else sample
            if self._clearance(new[None])[0] < s.margin:
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

    def _leg(self, a, b):
        """Generator: return whether the straight leg a -> b is certified free (module doc);
        while the arm rests in contact (``_clearance``), the pairs in contact are also held
        to their allowances at the collision check's sub-steps, without its play (so that
        the command stream's own check, at other sub-steps, allows the leg too)."""
        free = yield from self._certified(a, b)
        for c in self._constraints:
            if free and hasattr(c, 'allowances') and len(c.allowances()[0]):
                yield
                free = bool(c.check_motions(a, b[None], play=0.0)[0])
        return free

    def _certified(self, a, b):
        """Generator: return whether the leg a -> b keeps the margin by the Lipschitz
        bound of the covers' motion (module doc)."""
        s = self.settings
        collision = [c for c in self._constraints if hasattr(c, 'motion_substeps')]
        bound = max((c.motion_substeps(a, b)[1] for c in collision), default=0.0)
        others = [c for c in self._constraints if not hasattr(c, 'motion_substeps')]
        if others:   # joint-space constraints: sampled 0.05 apart on any joint
            count = max(2, int(math.ceil(np.max(np.abs(b - a)) / 0.05)) + 1)
            t = np.linspace(0.0, 1.0, count)[:, None]
            if self._clearance(a + t * (b - a), others).min() < 0.0:
                return False
        if not collision:
            return True
        ends = self._clearance(np.array([a, b]), collision)
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
            for first in range(0, len(split), SAMPLES_PER_UNIT):
                chunk = split[first:first + SAMPLES_PER_UNIT]
                mids = np.array([0.5 * (p[0] + p[1]) for p in chunk])
                d = self._clearance(a + mids[:, None] * (b - a), collision)
                yield
                if d.min() < margin:
                    return False
                for (s0, s1, d0, d1), m, dm in zip(chunk, mids, d):
                    pending.append((s0, m, d0, dm))
                    pending.append((m, s1, dm, d1))
        return True

    def _clearance(self, qs, constraints=None):
        """Return (K,) the smallest padded clearance [m] of the hard constraints at qs (K, n)
        (capped at CLEARANCE_CAP; -inf where a constraint without distances is violated).

        A pair that may penetrate (the arm rests in contact: the collision constraint's
        ``allowances``) does not count here: a start resting in contact is not "inside
        the margin", and the legs are held to the allowances by the sub-stepped motion
        check instead (``_leg``). Before, such a start needed a push out to
        twice the margin that a pair the joints barely move (two links meeting near a
        joint axis) could never reach: Unitree Z1 folded at its zero pose."""
        constraints = self._constraints if constraints is None else constraints
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

    def _version(self):
        versions = []
        for c in self._constraints:
            scene = getattr(c, 'scene', None)
            versions.append(None if scene is None else getattr(scene, 'version', None))
        return tuple(versions)

    # ------------------------------------------------------------------ following
    def target(self, q, v):
        """Return the waypoint (n,) to move towards from the command q with velocity v, or
        None when the goal configuration is reached at rest (the detour is done)."""
        while self.index < len(self.path):
            waypoint = self.path[self.index]
            if np.max(np.abs(q - waypoint)) > 1e-9 or np.any(v):
                return waypoint
            self.index += 1
        return None

    def scene_changed(self):
        """Return True once after the obstacles changed since the plan (re-check it)."""
        version = self._version()
        if version == self._scene_version:
            return False
        self._scene_version = version
        return True

    def remaining_free(self, q):
        """Return whether the rest of the path from the command q is still certified free
        (runs to completion: called once after a scene change)."""
        legs = [(q, self.path[self.index])] + [
            (self.path[k], self.path[k + 1]) for k in range(self.index, len(self.path) - 1)]
        for a, b in legs:
            work = self._leg(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
            try:
                while True:
                    next(work)
            except StopIteration as result:
                if not result.value:
                    return False
        return True

    def complete(self, now):
        """Mark the detour done (the goal configuration is reached; the solver takes over)."""
        self.counts['completed'] += 1
        self._finish('done', f'reached the goal configuration after {len(self.path) - 1} '
                     'leg(s)', now, retry=False)

    def cancel(self, reason, now):
        """Cancel the detour in progress (no-op when none is)."""
        if not self.active:
            return False
        self.counts['cancelled'] += 1
        self._finish('cancelled', reason, now)
        return True

    def _finish(self, state, reason, now, retry=True):
        self.state, self.reason = state, reason
        self._work = None
        if retry:
            self._next_allowed = now + self.settings.retry_interval
        self._best, self._best_time = math.inf, now      # progress is measured afresh
        self._since = now

    # ------------------------------------------------------------------ status
    def text(self):
        """Return one line for ~/status: what the detour does ('' when nothing)."""
        if self.state == 'planning':
            return f'planning a detour round the obstacle (goal {self.goal_sequence})'
        if self.state == 'following':
            return (f'following a detour: waypoint {self.index} of {len(self.path) - 1} '
                    f'({self.reason})')
        if self.state in ('done', 'failed', 'cancelled'):
            return f'detour {self.state}: {self.reason}'
        return ''

    def status(self):
        """Return the detour's part of ~/status (JSON-ready)."""
        return {
            'detour': self.state,
            'detour_text': self.text(),
            'detour_waypoints': None if self.path is None else int(len(self.path)),
            'detour_plan_ms': (None if self.last_plan_time is None
                               else round(1e3 * self.last_plan_time, 1)),
            'detour_plan_tick_ms': round(1e3 * self.longest_tick, 2),
            'detours': dict(self.counts),
        }


def _nearest(nodes, q):
    return int(np.argmin(np.max(np.abs(np.asarray(nodes) - q), axis=1)))


def _branch(nodes, parents, k):
    out = []
    while k >= 0:
        out.append(nodes[k])
        k = parents[k]
    return out
