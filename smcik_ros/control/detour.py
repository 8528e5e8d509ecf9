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
2. Plan (``plan``, a budget of ``budget`` seconds per tick, from where the braking arm comes
   to rest): ``detour_planner.DetourPlanner``, a generator that yields after each unit of
   work (one IK iteration, one tree edge), so no tick overruns its budget by more than one.
3. Follow (``target``): the loop shapes each command towards the next waypoint within its
   limits and validates it as always (``DetourDrive``, the loop's side); the arm comes to
   rest at each waypoint (so it stays on the certified straight legs), and the solver
   restarts at the goal configuration when it is reached. A new goal, a refused command, a
   changed scene whose remaining path is no longer free, stale joint_states, a stop, a
   resync or a solver switch cancel the detour (the loop brakes and the solver restarts at
   the stop). A collision model replaced while the detour is planned (finer covers) starts
   its plan again on the new model; while it is followed, it cancels the detour.
"""

import collections
from dataclasses import dataclass, fields, replace
import math
import time

import numpy as np

from ..errors import ParameterError
from ..goals import task_errors
from ..solvers.base import StateKey, goal_signature
from .detour_planner import DetourPlanner
from .shaping import ShapedCommand

__all__ = ['Detour', 'DetourDrive', 'DetourSettings', 'detour_hold']

# An orientation error counts this much [m/rad] in the progress measure.
ORIENTATION_WEIGHT = 0.1
# Recent commands remembered for the retreat (ticks).
HISTORY = 400


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
    """Triggers, plans and follows one detour at a time for a ``ControlLoop`` (module doc).

    chain: the loop's Chain; limits: its JointLimits; settings: DetourSettings;
    ik_solver, rng: see ``DetourPlanner``.
    """

    def __init__(self, chain, limits, settings=None, ik_solver=None, rng=None):
        self.chain = chain
        self.settings = settings if settings is not None else DetourSettings()
        self.planner = DetourPlanner(chain, limits, self.settings, ik_solver, rng)
        # idle, planning, following, done, failed, cancelled or off
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
        self._scene_version = None
        self._work = None
        self._goal_key = None        # goal_signature of the goal observed last
        self._goal_seen = None       # that Goal object
        self._best = math.inf        # smallest goal error of this goal [m]
        self._best_time = None       # when it was last improved by ``progress`` [s]
        self._since = None           # when this goal (or the last detour's end) began [s]
        self.trigger = ''            # why the last detour started (for the log line)
        self._attempts = 0
        self._next_allowed = -math.inf
        self._history = collections.deque(maxlen=HISTORY)

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
            self._restart_progress(now)
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
            self.trigger = (f'without progress for {self.settings.trigger_time:g} s' if stalled
                            else f'not reached after {now - self._since:.1f} s')
        return blocked

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
        pos, ori = (float(v[0]) for v in task_errors(loop.goal.terms,
                                                     self.chain.frames(estimate)))
        if pos <= loop.tolerances[0] and ori <= loop.tolerances[1]:
            held = False
        else:
            held = bool(self.planner.clearance(loop.q, hard)[0] < self.settings.near)
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
    def start(self, loop, exact, held=None):
        """Start planning for the loop's goal (from where the arm comes to rest, ``plan``).

        exact: callable (q_from, q_to) -> bool, the command stream's own validation of a
        straight motion (the loop's validators), used for the retreat from a start closer
        than the margin to an obstacle (the rest of the path is certified, module doc).
        held: (nq,) bool, joints the path keeps where the arm rests (pinned tips' arms).
        """
        self._attempts += 1
        self.goal_sequence = loop.goal.sequence
        self.state, self.reason = 'planning', ''
        self.path, self.index, self._work = None, 0, None
        self.planner.prepare((c for c in loop.constraints if c.hard), exact, self._history,
                             held)
        self._scene_version = self._version()
        self.last_plan_time, self.last_plan_ticks, self.longest_tick = 0.0, 0, 0.0
        self._terms, self._tolerances = loop.goal.terms, loop.tolerances

    def plan(self, now, q_rest=None):
        """Run planning work for up to ``budget`` seconds; return the state afterwards.

        q_rest: (n,) the command once the arm is at rest (the plan starts there; None: not
        at rest yet, nothing is done until it is).
        """
        if self.state != 'planning':
            return self.state
        if self._work is None:
            if q_rest is None:
                return self.state
            self._work = self.planner.plan(np.array(q_rest, dtype=float), self._terms,
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

    def replan(self, constraints):
        """Plan again from the start against ``constraints`` (hard ones: the collision model
        was replaced while planning); the attempt, the retreat and the held joints stay."""
        planner = self.planner
        planner.prepare(constraints, planner.exact, self._history, planner.held)
        self._work = None
        self._scene_version = self._version()

    def _version(self):
        return tuple(getattr(getattr(c, 'scene', None), 'version', None)
                     for c in self.planner.constraints)

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

    def still_free(self, q):
        """Return whether the rest of the path from the command q is still free: certified
        again (to the end) when the obstacles changed since the plan or the last check."""
        version = self._version()
        if version == self._scene_version:
            return True
        self._scene_version = version
        return self.planner.certify([q] + list(self.path[self.index:]))

    def complete(self, now):
        """Mark the detour done (the goal configuration is reached; the solver takes over)."""
        self._finish('done', f'reached the goal configuration after {len(self.path) - 1} '
                     'leg(s)', now, retry=False)

    def cancel(self, reason, now):
        """Cancel the detour in progress (no-op when none is)."""
        if self.active:
            self._finish('cancelled', reason, now)

    def _finish(self, state, reason, now, retry=True):
        self.counts['completed' if state == 'done' else state] += 1
        self.state, self.reason = state, reason
        self._work = None
        if retry:
            self._next_allowed = now + self.settings.retry_interval
        self._restart_progress(now)

    def _restart_progress(self, now):
        """Measure the progress towards the goal afresh from ``now`` [s]."""
        self._best, self._best_time, self._since = math.inf, now, now

    # ------------------------------------------------------------------ status
    def status(self):
        """Return the detour's part of ~/status (JSON-ready)."""
        if self.state == 'planning':
            text = f'planning a detour round the obstacle (goal {self.goal_sequence})'
        elif self.state == 'following':
            text = (f'following a detour: waypoint {self.index} of {len(self.path) - 1} '
                    f'({self.reason})')
        elif self.state in ('done', 'failed', 'cancelled'):
            text = f'detour {self.state}: {self.reason}'
        else:
            text = ''
        return {
            'detour': self.state,
            'detour_text': text,
            'detour_waypoints': None if self.path is None else int(len(self.path)),
            'detour_plan_ms': (None if self.last_plan_time is None
                               else round(1e3 * self.last_plan_time, 1)),
            'detour_plan_tick_ms': round(1e3 * self.longest_tick, 2),
            'detours': dict(self.counts),
        }


def detour_hold(figure):
    """Return (nq,) bool: the joints a joint-space detour must hold where they are (none when
    nothing binds; ``FigureState`` ``figure``), or None when its legs would leave what the
    commands keep. Only pinned tips bind (no contact, no plane, a fixed base): every joint on
    their paths is held, so they stay exactly where they are; a torso they share with the
    goal's tip is held too, and the detour moves the goal's arm alone (Kinova Movo's first
    goal, held at the margin against the other gripper, was never detoured: 13 mm short).
    A planted foot gives None."""
    chain = figure.chain
    if not figure.binds:
        return np.zeros(chain.nq, dtype=bool)
    if figure.floating or figure.equalities or not figure.pins:
        return None
    held = np.zeros(chain.nq, dtype=bool)
    for pin in figure.pins:
        held |= chain.moving(pin.link)
    return held


class DetourDrive:
    """The control loop's side of a detour: what to command while one is planned or followed.

    detour: a Detour (None: off; settable); shaper, guard, stepper: the loop's
    CommandShaper, MotionGuard and SolverStepper; report: callable(level, key, text, ...).
    Every cancel brakes (the caller) and restarts the solver at the braking stop.
    """

    _OFF = {'detour': 'off', 'detour_text': '', 'detour_waypoints': None,
            'detour_plan_ms': None, 'detour_plan_tick_ms': None, 'detours': None}

    def __init__(self, detour, shaper, guard, stepper, report):
        self.detour = detour
        self.shaper = shaper
        self.guard = guard
        self.stepper = stepper
        self.report = report
        self._replan = None         # why the detour plans again at the next tick

    @property
    def active(self):
        """True while a detour is planned or followed (the loop does not follow the solver)."""
        return self.detour is not None and self.detour.active

    def replan_later(self, reason):
        """At the next tick (``replan_requested``), a detour being planned starts its plan
        again on the loop's constraints; one being followed is cancelled."""
        self._replan = str(reason)

    def replan_requested(self, now, q, v):
        """Plan again, or cancel, for the reason ``replan_later`` gave, if any. A plan under
        way when the collision model is replaced starts again on the new one, with the arm
        where it rests: cancelling it braked, let the solver move the arm for a second
        (``retry_interval``) and then planned from scratch anyway."""
        if self._replan is None:
            return
        reason, self._replan = self._replan, None
        if self.active and self.detour.state == 'planning':
            self.detour.replan(c for c in self.stepper.constraints if c.hard)
            self.report('info', 'detour:replan', f'planning the detour again: {reason}',
                        interval=1.0)
        else:
            self.cancel(reason, now, q, v)

    def cancel(self, reason, now, q, v, reset=True):
        """Cancel a detour in progress (a new goal, stop, stale, resync, solver switch); the
        solver restarts at the braking stop of the command q, v (n,) (``reset``)."""
        if not self.active:
            return
        self.detour.cancel(reason, now if now is not None else 0.0)
        self.report('info', 'detour:cancelled', f'detour cancelled: {reason}', interval=1.0)
        if reset and q is not None:
            self.stepper.reset(self.shaper.stopping_point(q, v))

    def set_enabled(self, enabled, now, q, v):
        """Switch the detour on or off; off cancels one in progress."""
        if self.detour is None:
            return
        if not enabled:
            self.cancel('collision_detour was switched off', now, q, v)
        self.detour.set_enabled(enabled)

    def observe(self, loop, now):
        """After a normal tick of ``loop``: start planning when the arm is blocked."""
        detour = self.detour
        if detour is None or not detour.observe(loop, now):
            return
        held = detour_hold(loop.figure)
        if held is None:
            # Its joint-space legs leave the contacts: every command's projection back onto
            # them was refused, and PR2 braked for the rest of the goal (pinned tips are held
            # with their whole paths instead: ``detour_hold``).
            self.report('info', 'detour:projected', (
                f'goal {loop.goal.sequence}: blocked at the collision margin; no detour '
                'while the commands keep contacts (its path would leave them): holding at '
                'the margin'), interval=5.0)
            return
        detour.start(loop, exact=lambda a, b: self.guard.refuses(a, b) is None, held=held)
        self.report('info', 'detour:start', (
            f'goal {loop.goal.sequence}: blocked at the collision margin '
            f'({detour.trigger}): planning a detour'), interval=1.0)

    def command(self, q, v, dt, lead_box, now, goal, tick):
        """Return the ShapedCommand of tick ``tick`` at ``now`` [s] while the detour is
        planned or followed, from the command q, v (n,) over dt [s].

        Planning: the arm brakes (on the validated line); the plan starts where it rests.
        Following: the command is shaped towards the next waypoint and validated like any
        other; a refusal, or a scene change whose remaining path is no longer free, cancels
        the detour (brake, the solver restarts at the stop). At the goal configuration the
        solver restarts there and takes over.
        """
        detour = self.detour
        if detour.state == 'planning':
            detour.plan(now, None if np.any(v) else q)
            if detour.state == 'failed':
                self.report('warn', 'detour:failed', (
                    f'goal {goal.sequence}: detour failed ({detour.reason}); holding, '
                    'the solver carries on from the stop'), interval=1.0)
                return self._brake(q, v, dt, lead_box)
            if detour.state != 'following':
                return self.guard.brake(q, v, dt, lead_box)
            self.report('info', 'detour:planned', (
                f'goal {goal.sequence}: following a detour ({detour.reason})'), interval=1.0)
        if not detour.still_free(q):
            return self._abort('the obstacles changed and the detour is no longer free',
                               q, v, dt, lead_box, now)
        target = detour.target(q, v)
        if target is None:
            detour.complete(now)
            self.stepper.reset(q)
            self.report('info', 'detour:done', (
                f'goal {goal.sequence}: detour complete, the solver takes over at the '
                'goal configuration'), interval=1.0)
            return ShapedCommand(q.copy(), np.zeros_like(q), 'target')
        shaped = self.shaper.step(q, v, dt, target, lead_box)
        stop = self.shaper.stopping_point(shaped.q, shaped.v)
        refused = self.guard.refuses(q, stop)
        if refused is not None:
            reason = self.guard.note_hold(refused, tick)
            return self._abort(f'a validator refused the path ({reason})', q, v, dt,
                               lead_box, now)
        self.guard.validated = (q.copy(), stop)
        return shaped

    def _abort(self, reason, q, v, dt, lead_box, now):
        """Cancel the detour, brake on the validated line, restart the solver at the stop."""
        self.detour.cancel(reason, now)
        self.report('warn', 'detour:cancelled', f'detour cancelled: {reason}; braking',
                    interval=1.0)
        return self._brake(q, v, dt, lead_box)

    def _brake(self, q, v, dt, lead_box):
        shaped = self.guard.brake(q, v, dt, lead_box)
        self.stepper.reset(self.shaper.stopping_point(shaped.q, shaped.v))
        return shaped

    def status(self):
        """Return the detour's part of ~/status (JSON-ready)."""
        return self._OFF if self.detour is None else self.detour.status()
