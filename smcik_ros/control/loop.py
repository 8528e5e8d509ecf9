"""One control tick, without ROS: arm state + goal inbox + solver + validators + shaping.

The node converts messages and times to numpy and seconds and calls ``ControlLoop``:
``on_joint_states`` for each measurement, ``offer_goal`` for each goal, ``tick(now)`` on its
timer (publishing the returned Command, if any) and ``request_stop()`` on SIGINT/SIGTERM.

A tick:

1. ``ArmMonitor.decide``: WAITING publishes nothing; RESYNC restarts the command at exactly
   the measurement, at rest, and resets the solver there; STALE (and a requested stop) brakes
   on the current line and holds.
2. ACTIVE: the newest goal from the inbox, ``iterations_per_tick`` solver steps, the estimate
   mapped to the command's own coordinate (continuous joints: the nearest equivalent).
3. ``CommandShaper.step`` within the position, velocity, acceleration limits and the lead box
   around the latest measurement.
4. Validators ``(q_from, q_to) -> ok``: each sees the motion from the last command to where the
   new one could stop at the latest; a refusal brakes instead and restarts the solver at the
   braking stop (a hard constraint is never entered; a collision checker plugs in the same
   way).
5. The exception policy: any exception in a tick is reported once with its traceback (then
   throttled with a count), the arm brakes, the solver is reset at the braking stop, and the
   next tick starts afresh.

With ``solver_thread`` the solver steps in a worker thread (``step_worker``): a step that
outlasts its budget runs on beside the next ticks, which carry the last answer on as
between two solver steps; its answer is taken by the first tick after it ended. The tick
never waits for the worker: a reset drops a running step's answer and runs after it there.
"""

from dataclasses import dataclass
import math
import re
import threading
import time
import traceback

import numpy as np

from ..solvers.base import StateKey, goal_signature
from .arm_state import ArmMonitor, ArmSettings, ArmState
from .command_shaping import (CommandShaper, ShapedCommand, nearest_equivalent,
                              to_solver_range)
from .frames import FrameResolver
from .goal_inbox import GoalInbox
from .step_worker import StepWorker

# The worker tag of a solver reset queued behind a running step (``_reset_solver``).
_RESET = 'reset'

__all__ = ['Command', 'ControlLoop', 'HardConstraintValidator', 'Reporter',
           'initial_configuration', 'CLOCK_RESET']

TWO_PI = 2.0 * math.pi
# A continuous joint's solver value beyond +-RECENTER [rad] restarts the solver wrapped.
RECENTER = math.pi + 0.25

# A node clock that jumps back by more than this restarts the stream [s]; smaller steps back
# skip ticks until the clock passes the last command's stamp again.
CLOCK_RESET = 0.5


def initial_configuration(chain):
    """Return the assumed start without a measurement: 0 where the range holds 0, else
    mid-range (sim_arm's default start; the node's simulation-only blind start)."""
    mid = 0.5 * (chain.lower + chain.upper)
    return np.where((chain.lower <= 0.0) & (chain.upper >= 0.0), 0.0, mid)


@dataclass(frozen=True)
class Command:
    """A command to publish: q (n,) [rad or m], v (n,) its velocity over the tick, stamp [s]
    (the time the limits were applied for: publish it as the header stamp), state (ArmState),
    limited_by (what bounded it, see command_shaping.LIMITERS, or 'resync')."""

    q: np.ndarray
    v: np.ndarray
    stamp: float
    state: ArmState
    limited_by: str


class Reporter:
    """Log each kind of event (its key) in full once, then at most once per ``interval``.

    emit: callable(level, text) with level 'debug', 'info', 'warn' or 'error'. A repeated
    event within ``interval`` [s] (``clock``, monotonic) is counted, and the next report says
    how many were not logged (unless ``count`` is False). An exception's traceback is logged
    the first time only. Returns whether the event was logged.
    """

    def __init__(self, emit, interval=5.0, clock=time.monotonic, max_keys=256):
        self.emit = emit
        self.interval = float(interval)
        self.clock = clock
        self.max_keys = max_keys
        self._seen = {}            # key -> [time of the last report, events not logged since]

    def __call__(self, level, key, text, exc=None, interval=None, count=True):
        now = self.clock()
        interval = self.interval if interval is None else interval
        entry = self._seen.get(key)
        if entry is None:
            if len(self._seen) >= self.max_keys:
                self._seen.clear()
            self._seen[key] = [now, 0]
            if exc is not None:
                text = text + '\n' + ''.join(traceback.format_exception(
                    type(exc), exc, exc.__traceback__)).rstrip()
            self.emit(level, text)
            return True
        if now - entry[0] >= interval:
            if entry[1] and count:
                text = f'{text} ({entry[1]} more like this not logged)'
            entry[0], entry[1] = now, 0
            self.emit(level, text)
            return True
        entry[1] += 1
        return False

    @staticmethod
    def key_of(prefix, text):
        """Return a key for ``text`` that ignores its numbers (same message, other values)."""
        return prefix + ':' + re.sub(r'[-+]?\d[\d.e+-]*', '#', text)[:100]


class HardConstraintValidator:
    """Refuse motions that go deeper into a hard constraint (keep-out volumes, ...).

    ``validator(q_from, q_to)`` checks the straight joint-space segment: constraints with a
    ``check_motion(q_from, q_to)`` (the collision constraints, keep-out obstacles) check it at
    their own sub-step bound with q_from as the reference (a motion may leave what q_from
    penetrates, never go deeper); others are sampled at most ``resolution`` [rad or m] apart
    on any joint (``max_samples``) and refused when the start is outside and a later sample
    inside. ``constraints``: the solver's constraint objects (``hard`` ones are checked);
    skip: predicate constraint -> True for constraints another validator checks (the
    collision guard's own constraint).
    """

    def __init__(self, chain, resolution=0.05, max_samples=16, skip=None):
        self.chain = chain
        self.resolution = float(resolution)
        self.max_samples = int(max_samples)
        self.skip = skip
        self.constraints = []
        self.reason = ''

    def __call__(self, q_from, q_to):
        hard = [c for c in self.constraints if c.hard and not (self.skip and self.skip(c))]
        if not hard:
            return True
        q_from = np.asarray(q_from, dtype=float)
        q_to = np.asarray(q_to, dtype=float)
        sampled = [c for c in hard if not hasattr(c, 'check_motion')]
        for constraint in hard:
            if constraint in sampled:
                continue
            ok, info = constraint.check_motion(q_from, q_to)
            if not ok:
                pair = info.get('pair')
                self.reason = (f'the motion would go deeper into a hard constraint '
                               f'({type(constraint).__name__}'
                               + (f': {" / ".join(pair)}' if pair else '') + ')')
                return False
        if not sampled:
            return True
        span = float(np.max(np.abs(q_to - q_from))) if q_from.size else 0.0
        count = min(self.max_samples, max(2, int(math.ceil(span / self.resolution)) + 1))
        t = np.linspace(0.0, 1.0, count)[:, None]
        frames = self.chain.frames(q_from + t * (q_to - q_from))
        for constraint in sampled:
            bad = np.asarray(constraint.violated(frames), dtype=bool)
            if not bad[0] and np.any(bad[1:]):
                self.reason = (f'the motion would enter a hard constraint '
                               f'({type(constraint).__name__})')
                return False
        return True


def _set_references(constraints, q):
    """Give constraints that compare with a reference (never deeper) the command q."""
    for constraint in constraints:
        set_reference = getattr(constraint, 'set_reference', None)
        if set_reference is not None:
            set_reference(q)


class ControlLoop:
    """The command stream of one arm: what to publish at each tick (see module doc).

    chain: the Chain; solver: a Solver on that chain; limits: command_shaping.JointLimits;
    arm_settings: ArmSettings; inbox: GoalInbox (default: one on the robot's own frames);
    iterations_per_tick: solver steps per tick; validators: callables (q_from, q_to) -> ok
    (optionally with ``check_many(q_from, q_tos) -> (K,) bool`` for a batch of motions and a
    ``reason`` text); report: callable(level, key, text, exc=None) (a Reporter; default:
    discard); tolerances: (position [m], orientation [rad]) of "goal reached";
    fallback_candidates: how many of the solver's heaviest particles (plus its MAP) are tried
    when a validator refuses the estimate's motion (0: brake at once; none that would take the
    tool farther from the goal than the current command is); hold_reset_interval
    [ticks]: while a hold lasts, the solver restarts at the stop on its first tick and then
    every this many ticks (1: every tick); detour: a ``detour.Detour`` that plans and follows
    a path round an obstacle when the arm is blocked (None: off); rest_step_interval [ticks]:
    while the solver is ``settled`` on the same goal and constraints and the command rests at
    its answer, the solver steps only every this many ticks (its answer cannot change in
    between; the shaper and the validators still run every tick; 1: every tick);
    step_interval [ticks]: while the same goal is followed, the solver steps on every this
    many ticks (a new goal or a constraint change steps at once); the ticks in between move
    the command towards the solver's last answer carried on at that answer's own velocity (a
    tracked target is followed without a stop), shaped, limited and validated like any tick:
    a control rate above the solver's rate without its cost on every tick (1: every tick);
    solver_thread: run each solver step in a worker thread (``step_worker``): the tick that
    starts a step waits for it at most ``step_budget`` [s] (None: as long as it takes), and
    while it runs on, the ticks carry the last answer on as between steps; the answer is
    taken at the first tick after it finished (a step on a goal that was replaced meanwhile
    is dropped and the new goal stepped at once). The solver then works on twins of the
    constraints (``fork``), and every other use of ``solver`` waits for the running step.
    With ``iterations_per_tick`` > 1 the steps run in the tick (the step observers see each).
    """

    FALLBACK_SLACK = 1e-6   # [m] a fallback's tool may be this much farther from the goal

    def __init__(self, chain, solver, limits, arm_settings=None, inbox=None,
                 iterations_per_tick=1, validators=(), report=None, tolerances=(1e-3, 1e-2),
                 fallback_candidates=8, hold_reset_interval=1, detour=None,
                 rest_step_interval=1, step_interval=1, solver_thread=False,
                 step_budget=None):
        if chain.nq != chain.nv:
            raise ValueError('ControlLoop needs a chain of 1-DOF joints (no ball joints)')
        self.chain = chain
        self._solver = solver
        self._worker = StepWorker() if solver_thread else None
        self._reset_lock = threading.Lock()
        self._reset_to = None       # the configuration of a queued reset (solver_thread)
        self._step_info = {}        # the solver's info of the last answer taken
        self.queued_resets = 0      # solver resets run in the worker (solver_thread)
        self.step_budget = None if step_budget is None else max(0.0, float(step_budget))
        self.steps_in_thread = 0      # steps that ran on beyond the tick that started them
        self._goal_changes = 0        # goals with another signature than the one before
        self._twins = []              # the solver's constraint objects (thread: the forks)
        self.shaper = CommandShaper(limits)
        self.limits = limits
        self._wraps = bool(limits.continuous.any())   # any continuous joint (limits: frozen)
        self.arm = ArmMonitor(chain.joint_names, limits.continuous, arm_settings or ArmSettings())
        self.inbox = inbox or GoalInbox(FrameResolver(chain), chain.tip_link)
        self.iterations_per_tick = int(iterations_per_tick)
        self.validators = list(validators)
        self.fallback_candidates = int(fallback_candidates)
        if int(hold_reset_interval) < 1:
            raise ValueError(f'hold_reset_interval must be >= 1 tick; got {hold_reset_interval}')
        self.hold_reset_interval = int(hold_reset_interval)
        if int(rest_step_interval) < 1:
            raise ValueError(f'rest_step_interval must be >= 1 tick; got {rest_step_interval}')
        self.rest_step_interval = int(rest_step_interval)
        if int(step_interval) < 1:
            raise ValueError(f'step_interval must be >= 1 tick; got {step_interval}')
        self.step_interval = int(step_interval)
        self.interpolated_ticks = 0  # ticks between solver steps (step_interval)
        self._stepped = (-1, None)  # (tick, constraint key) of the last solver step
        self.skipped_steps = 0      # solver steps skipped at rest (rest_step_interval)
        self.detour = detour
        self._hold_streak = 0
        self._last_hold = -2
        self._report = report or (lambda *args, **kwargs: None)
        self.tolerances = tuple(tolerances)
        self.constraints = []       # what the solver respects (also on a solver switch)
        self.q = None               # last published command (n,)
        self.v = None               # its velocity (n,)
        self.stamp = None           # its stamp [s]
        self.last = None            # last Command
        self.goal = None            # Goal being followed
        self.goal_errors = (math.nan, math.nan)
        self._errors_of = None      # StateKey (goal, command bytes) goal_errors belong to
        self.goal_reached = False
        self._first_tick = None
        self._stopping = False
        self._detour_cancel = None   # a reason to cancel the detour at the next tick
        self._desired = None        # (desired (n,), time [s], its velocity or None), last tick
        self._last_acceleration = 0.0   # max_j |dv_j| / (a_j dt) of the last tick
        # (start, end) of the last validated motion: the previous command to the braking
        # point of the current one. Every brake stays on it.
        self.validated = None
        self.faults = 0             # ticks that raised
        self.holds = 0              # ticks a validator made brake (no free fallback)
        self.fallbacks = 0          # ticks that moved towards another solver candidate
        self.line_brakes = 0        # brakes forced back onto the validated line
        self.last_refusal = None    # {'tick', 'validator', 'reason', 'outcome'}
        self.ticks = 0
        # Callables (solver, goal, now) run after every solver step (e.g. the alternatives'
        # bookkeeping, which latches the step's branch-switch record).
        self.step_observers = []

    def report(self, *args, **kwargs):
        """Pass an event to the reporter; a failing reporter never stops the loop."""
        try:
            self._report(*args, **kwargs)
        except Exception:
            pass

    # ------------------------------------------------------------------ inputs
    def on_joint_states(self, positions, stamp, now):
        """Take one measurement: positions (n,) (NaN = missing or bad), stamp [s] or None."""
        report = self.arm.measure(positions, stamp, now)
        for level, key, text in report.events:
            self.report(level, key, text)
        return report

    def current_configuration(self):
        """Return the best known configuration (n,): measured, else commanded, else mid."""
        if self.arm.complete:
            return self.arm.measured
        if self.q is not None:
            return self.q.copy()
        return self.chain.neutral_configuration()

    def offer_goal(self, kind, value, frame, stamp, now, source='goal', covariance=None):
        """Put a goal into the inbox (see GoalInbox.offer); GoalError when refused."""
        return self.inbox.offer(kind, value, frame, stamp, now, self.current_configuration(),
                                source, covariance=covariance)

    def request_stop(self):
        """Stop following goals: brake to a stop within the limits and hold (shutdown)."""
        self._stopping = True

    @property
    def first_tick(self):
        """Time [s] of the first tick, or None before it (the mean tick period is
        (last.stamp - first_tick) / (ticks - 1))."""
        return self._first_tick

    @property
    def stopping(self):
        return self._stopping

    @property
    def stopped(self):
        """True once a requested stop is complete (at rest, or nothing was ever published)."""
        return self._stopping and (self.q is None or not np.any(self.v))

    @property
    def solver(self):
        """The solver; with ``solver_thread``, once the worker thread is idle (a finished
        step's answer is still taken by the next tick). From the worker itself: at once."""
        if self._worker is not None:
            self._worker.settle()
        return self._solver

    @property
    def solver_idle(self):
        """True unless a solver step or side work runs in the worker thread."""
        return self._worker is None or self._worker.idle

    def beside(self, fn):
        """Run ``fn()`` in the solver's worker thread, after a running step (side work that
        reads the solver: markers, alternatives). Returns False without ``solver_thread``
        or while the last batch has not finished (run it later)."""
        return self._worker is not None and self._worker.beside(fn)

    def settle(self):
        """Wait until the worker thread is idle (before changing what side work reads)."""
        if self._worker is not None:
            self._worker.settle()

    def close(self):
        """Wait for the worker thread's work and end the thread (shutdown)."""
        if self._worker is not None:
            self._worker.close()

    def set_solver(self, solver):
        """Switch to ``solver`` with the loop's constraints, started at the current command
        (the stream does not jump). GoalError (nothing changed) if a constraint does not fit."""
        self._drop_step()
        solver.set_constraints(self._twins)
        self._solver = solver
        self._cancel_detour('the solver was switched', self.stamp)
        self._reset_solver(self.q if self.q is not None else self.current_configuration())

    @property
    def estimate(self):
        """The solver's answer of the last normal tick in the command's coordinates (n,), or
        None (no goal, or a tick that did not step the solver)."""
        return None if self._desired is None else self._desired[0]

    def set_detour_enabled(self, enabled):
        """Switch the detour on or off; off cancels one in progress (the arm brakes at the next
        tick's solver step from the stop, as after any cancel)."""
        if self.detour is None:
            return
        if not enabled:
            self._cancel_detour('collision_detour was switched off', self.stamp)
        self.detour.set_enabled(enabled)

    def set_constraints(self, constraints):
        """Hand the constraint set to the solver (now and on every switch) and to the
        validators that take one."""
        constraints = list(constraints)
        self._drop_step()
        twins = constraints
        if self._worker is not None:   # bound here: the validators use these, not the twins
            twins = [c.bind(self.chain).fork() if hasattr(c, 'fork') else c
                     for c in constraints]
        self._solver.set_constraints(twins)
        self.constraints, self._twins = constraints, twins
        for validator in self.validators:
            if hasattr(validator, 'constraints'):
                validator.constraints = list(constraints)

    def cancel_detour(self, reason):
        """Cancel a detour in progress at the next tick (e.g. its plan was made against a
        collision model that has since been replaced); the solver then restarts at the
        braking stop and a still-blocked goal plans afresh."""
        self._detour_cancel = str(reason)

    # ------------------------------------------------------------------ the tick
    def tick(self, now):
        """Return the Command to publish at ``now`` [s] (node clock), or None (publish nothing).

        Never raises: a failing tick is reported and turned into a braking command.
        """
        self.ticks += 1
        if self._worker is not None:
            for exc in self._worker.side_errors():
                self.report('error', f'side:{type(exc).__name__}', (
                    f'side work in the solver thread failed ({type(exc).__name__}: {exc}); '
                    'the node keeps running'), exc)
            for exc in self._worker.dropped_errors():
                self._report_dropped(exc)
        try:
            return self._tick(now)
        except Exception as exc:   # never die: report, brake, reset, carry on
            self.faults += 1
            self.report('error', f'tick:{type(exc).__name__}',
                        f'control tick failed ({type(exc).__name__}: {exc}): braking to a '
                        'stop, the solver restarts at the stop; the node keeps running', exc)
            return self._hold(now)

    def _tick(self, now):
        if self._first_tick is None:
            self._first_tick = now
        dt = None if self.q is None else now - self.stamp
        if dt is not None and not dt > 0.0:
            if dt < -CLOCK_RESET:
                self._clock_reset(now, dt)
            else:
                self.report('warn', 'clock_stalled', f'the node clock did not advance since '
                            f'the last command (dt = {dt:.6f} s): tick skipped')
            return None
        decision = self.arm.decide(now, self.q)
        for level, key, text in decision.events:
            self.report(level, key, text)
        state = decision.state
        if state is ArmState.WAITING:
            settings = self.arm.settings
            if settings.start_without_joint_states and not self._stopping and \
                    now - self._first_tick >= settings.joint_states_timeout:
                self.arm.start_blind()
                start = initial_configuration(self.chain)
                self.report('warn', 'blind', (
                    'start_without_joint_states: no joint_states within '
                    f'{settings.joint_states_timeout:g} s: commanding from the assumed start '
                    f'{np.array2string(start, precision=3)} (simulation only)'))
                return self._restart(start, now, ArmState.ACTIVE)
            return None
        if state is ArmState.RESYNC:
            self._cancel_detour('the stream restarted from the measurement (resync)', now)
            return self._restart(decision.resync_to, now, state)
        self._follow_measured_turns()
        lead_box = self._lead_box()
        if self._stopping or state is ArmState.STALE:
            self._cancel_detour('stopping' if self._stopping else 'joint_states are stale',
                                now)
            return self._commit(self._brake(dt, lead_box), now, state)
        goal = self.inbox.take(now)
        if goal is not None:
            if self.goal is None or \
                    goal_signature(goal.terms) != goal_signature(self.goal.terms):
                self._goal_changes += 1
                self._cancel_detour(f'a new goal ({goal.sequence}) arrived', now)
            self._set_goal(goal, now)
        if self._detour_cancel is not None:
            reason, self._detour_cancel = self._detour_cancel, None
            self._cancel_detour(reason, now)
        if self.detour is not None and self.detour.active:
            return self._detour_tick(now, dt, lead_box, state)
        desired = desired_velocity = None
        previous, self._desired = self._desired, None
        if self.goal is not None:
            desired, desired_velocity = self._follow(previous, goal is not None, now)
        shaped = self.shaper.step(self.q, self.v, dt, desired, lead_box, desired_velocity)
        stop = self.shaper.stopping_point(shaped.q, shaped.v)
        if self.validators:
            refused = self._refusal(self.q, stop)
            if refused is not None:
                shaped, stop = self._after_refusal(refused, desired, dt, lead_box)
        if stop is not None:
            self.validated = (self.q.copy(), stop)
        command = self._commit(shaped, now, state)
        if self.detour is not None and self.detour.observe(self, now):
            self.detour.start(self, None, now, exact=lambda a, b: self._refusal(a, b) is None)
            self.report('info', 'detour:start', (
                f'goal {self.goal.sequence}: blocked at the collision margin '
                f'({self.detour.trigger_text()}): planning a detour'), interval=1.0)
        return command

    def _follow(self, previous, new_goal, now):
        """Return (desired, its velocity or None) of a tick that follows the goal: the
        solver's new answer, or its last one (at rest, between steps, while a step runs on
        in the worker thread), or (None, None) when there is none yet (the shaper brakes)."""
        worker = self._worker
        if worker is not None and worker.pending:
            if not worker.done:
                return self._carry(previous, now)
            tag, result = worker.take()
            if tag is not _RESET and tag[1] == self._goal_changes:
                return self._answer(result, previous, tag[0])
            new_goal = True      # a reset, or a step for a goal replaced meanwhile: step now
        if not new_goal and self._resting(previous):
            self.skipped_steps += 1
            self._desired = previous
            return previous[0], None
        if not new_goal and self._between_steps(previous):
            self.interpolated_ticks += 1
            return self._carry(previous, now)
        self._stepped = (self.ticks, StateKey(constraints=self.constraints))
        _set_references(self.constraints, self.q)
        if worker is None or self.iterations_per_tick > 1:
            self.settle()
            if self._twins is not self.constraints:
                _set_references(self._twins, self.q)
            result = None
            for _ in range(self.iterations_per_tick):
                result = self._step_job(self._solver, self.goal, now)
            return self._answer(result, previous, now)
        worker.start((now, self._goal_changes), self._step_job, self._solver, self.goal, now,
                     self.q)
        if worker.wait(self.step_budget):
            _, result = worker.take()
            return self._answer(result, previous, now)
        self.steps_in_thread += 1
        return self._carry(previous, now)

    def _step_job(self, solver, goal, now, reference=None):
        """One solver step and its observers (in the worker thread with ``solver_thread``);
        return (estimate, a copy of the solver's ``last_info`` after it). ``reference``: the
        command the solver's constraint twins compare with (set here, in the worker, with a
        new snapshot of the scene, where side work cannot be reading them)."""
        if reference is not None:
            for twin in self._twins:
                refresh = getattr(twin, 'refresh', None)
                if refresh is not None:
                    refresh()
            _set_references(self._twins, reference)
        estimate = solver.step(goal.terms)
        for observe in self.step_observers:
            observe(solver, goal, now)
        return estimate, dict(getattr(solver, 'last_info', None) or {})

    def _answer(self, result, previous, stamp):
        """Return (desired, velocity) from the (estimate, info) of a solver step started at
        ``stamp`` [s], and keep it as the last answer (its info: the fallback candidates)."""
        estimate, self._step_info = result
        estimate = np.asarray(estimate, dtype=float)
        if estimate.shape != self.q.shape or not np.all(np.isfinite(estimate)):
            raise FloatingPointError(f'the solver returned a non-finite or misshapen '
                                     f'configuration {np.array2string(estimate, precision=3)}')
        desired = nearest_equivalent(estimate, self.q, self.limits.continuous)
        self._recenter_solver(estimate)
        desired_velocity = None
        if previous is not None:
            # How fast the solver's answer moves (a tracked target): the shaper follows
            # it without braking onto it every tick (jumps are ignored by the shaper).
            desired_velocity = self.shaper.target_velocity(
                desired, nearest_equivalent(previous[0], desired, self.limits.continuous),
                stamp - previous[1], previous[2])
        self._desired = (desired, stamp, desired_velocity)
        return desired, desired_velocity

    def _carry(self, previous, now):
        """Return (desired, velocity): the last answer carried on at its own velocity to
        ``now`` (between solver steps), or (None, None) without one."""
        if previous is None:
            return None, None
        self._desired = previous
        desired, stamp, desired_velocity = previous
        if desired_velocity is not None:
            desired = desired + desired_velocity * (now - stamp)
        if self._wraps:      # the command may have followed a re-homed coordinate
            desired = nearest_equivalent(desired, self.q, self.limits.continuous)
        return desired, desired_velocity

    def _drop_step(self):
        """Wait for a step running in the worker thread and drop its answer (the solver is
        reset or changed); an exception it raised is reported."""
        worker = self._worker
        if worker is None:
            return
        worker.settle()
        if not worker.pending:
            return
        try:
            worker.take()
        except Exception as exc:
            self._report_dropped(exc)

    def _report_dropped(self, exc):
        self.report('error', f'step:{type(exc).__name__}', (
            f'a solver step that was dropped (reset or change) had failed '
            f'({type(exc).__name__}: {exc}); the node keeps running'), exc)

    def _resting(self, previous):
        """Return True when this tick's solver step may be skipped (``rest_step_interval``):
        the solver is settled (its step cannot change the answer), on the goal, solver and
        constraints of its last step, at most ``rest_step_interval - 1`` ticks ago, and the
        command rests exactly at that answer."""
        if self.rest_step_interval <= 1 or previous is None:
            return False
        tick, key = self._stepped
        if self.ticks - tick >= self.rest_step_interval or self.v.any() or \
                not np.array_equal(self.q, previous[0]):
            return False
        # The solver itself: side work in the worker thread only reads it.
        return (bool(getattr(self._solver, 'settled', False))
                and key == StateKey(constraints=self.constraints))

    def _between_steps(self, previous):
        """Return True when this tick falls between two solver steps (``step_interval``):
        the last tick followed the solver's answer, whose step was less than
        ``step_interval`` ticks ago on the same constraints."""
        if self.step_interval <= 1 or previous is None:
            return False
        tick, key = self._stepped
        return (self.ticks - tick < self.step_interval
                and key == StateKey(constraints=self.constraints))

    # ------------------------------------------------------------------ detour
    def _detour_tick(self, now, dt, lead_box, state):
        """Return the Command of a tick while a detour is planned or followed.

        Planning: the arm brakes (on the validated line); the plan starts where it rests.
        Following: the command is shaped towards the next waypoint and validated like any
        other; a refusal, or a scene change whose remaining path is no longer free, cancels
        the detour (brake, the solver restarts at the stop). At the goal configuration the
        solver restarts there and takes over.
        """
        detour = self.detour
        if detour.state == 'planning':
            detour.plan(now, None if np.any(self.v) else self.q)
            if detour.state == 'failed':
                self.report('warn', 'detour:failed', (
                    f'goal {self.goal.sequence}: detour failed ({detour.reason}); holding, '
                    'the solver carries on from the stop'), interval=1.0)
                shaped = self._brake(dt, lead_box)
                self._reset_solver(self.shaper.stopping_point(shaped.q, shaped.v))
                return self._commit(shaped, now, state)
            if detour.state != 'following':
                return self._commit(self._brake(dt, lead_box), now, state)
            self.report('info', 'detour:planned', (
                f'goal {self.goal.sequence}: following a detour ({detour.reason})'),
                interval=1.0)
        if detour.scene_changed() and not detour.remaining_free(self.q):
            return self._detour_abort('the obstacles changed and the detour is no longer free',
                                      now, dt, lead_box, state)
        target = detour.target(self.q, self.v)
        if target is None:
            detour.complete(now)
            self._reset_solver(self.q)
            self.report('info', 'detour:done', (
                f'goal {self.goal.sequence}: detour complete, the solver takes over at the '
                'goal configuration'), interval=1.0)
            return self._commit(ShapedCommand(self.q.copy(), np.zeros_like(self.q), 'target'),
                                now, state)
        shaped = self.shaper.step(self.q, self.v, dt, target, lead_box)
        stop = self.shaper.stopping_point(shaped.q, shaped.v)
        refused = self._refusal(self.q, stop) if self.validators else None
        if refused is not None:
            reason = getattr(refused, 'reason', '') or type(refused).__name__
            self.holds += 1
            self.last_refusal = {'tick': self.ticks, 'validator': type(refused).__name__,
                                 'reason': reason, 'outcome': 'hold'}
            return self._detour_abort(f'a validator refused the path ({reason})', now, dt,
                                      lead_box, state)
        self.validated = (self.q.copy(), stop)
        return self._commit(shaped, now, state)

    def _detour_abort(self, reason, now, dt, lead_box, state):
        """Cancel the detour, brake on the validated line, restart the solver at the stop."""
        self.detour.cancel(reason, now)
        self.report('warn', 'detour:cancelled', f'detour cancelled: {reason}; braking',
                    interval=1.0)
        shaped = self._brake(dt, lead_box)
        self._reset_solver(self.shaper.stopping_point(shaped.q, shaped.v))
        return self._commit(shaped, now, state)

    def _cancel_detour(self, reason, now, reset=True):
        """Cancel a detour in progress (a new goal, stop, stale, resync, solver switch); the
        solver restarts at the command's braking stop (``reset``)."""
        if self.detour is None or not self.detour.active:
            return
        self.detour.cancel(reason, now if now is not None else 0.0)
        self.report('info', 'detour:cancelled', f'detour cancelled: {reason}', interval=1.0)
        if reset and self.q is not None:
            self._reset_solver(self.shaper.stopping_point(self.q, self.v))

    # ------------------------------------------------------------------ validation
    def _refusal(self, q_from, q_to):
        """Return the first validator that refuses the motion q_from -> q_to, or None."""
        for validator in self.validators:
            if not validator(q_from, q_to):
                return validator
        return None

    def _after_refusal(self, validator, desired, dt, lead_box):
        """Return (shaped, stop or None) after ``validator`` refused the estimate's motion:
        a free fallback candidate, else a brake (and the solver restarts at its stop)."""
        reason = getattr(validator, 'reason', '') or type(validator).__name__
        name = type(validator).__name__
        alternative = self._fallback(desired, dt, lead_box) if desired is not None else None
        if alternative is not None:
            self.fallbacks += 1
            self.last_refusal = {'tick': self.ticks, 'validator': name, 'reason': reason,
                                 'outcome': 'fallback'}
            self.report('info', f'fallback:{name}', (
                f'{reason}: moving towards another of the solver\'s candidates instead'))
            return alternative
        self.holds += 1
        self.last_refusal = {'tick': self.ticks, 'validator': name, 'reason': reason,
                             'outcome': 'hold'}
        self.report('warn', f'validator:{name}', (
            f'{reason}: braking instead, the solver restarts at the stop'))
        shaped = self._brake(dt, lead_box)
        self._desired = None
        # Restart the solver at the stop on the first hold of an episode, then every
        # ``hold_reset_interval`` ticks while holding (default 1: every tick, docs/collision.md
        # section 6). A restart re-seeds the SMC, its dearest step: on the demo arm a long hold
        # costs ~25 ms CPU per tick at 1 and ~5 ms at 'first tick only', but larger intervals
        # did not reach more goals in the by-hand Panda runs (a held filter deadlocks).
        if self.ticks - self._last_hold > 1 or self._hold_streak % self.hold_reset_interval == 0:
            self._hold_streak = 0
            self._reset_solver(self.shaper.stopping_point(shaped.q, shaped.v))
        self._hold_streak += 1
        self._last_hold = self.ticks
        return shaped, None

    def _fallback(self, desired, dt, lead_box):
        """Return (shaped, stop) towards the first free fallback candidate, or None.

        Candidates: the MAP and the heaviest particles of the last answer's solver info
        (``last_info`` after that step; the tick does not wait for a running one), mapped to
        the command's coordinate, each shaped within the limits from the current command; the
        first whose motion to its braking point every validator accepts (one batched check
        per validator that has ``check_many``).
        """
        if self.fallback_candidates <= 0:
            return None
        info = self._step_info      # the last answer's, without waiting for a running step
        rows = []
        if info.get('map') is not None:
            rows.append(np.atleast_2d(np.asarray(info['map'], dtype=float)))
        particles = info.get('particles')
        if particles is not None and len(particles):
            particles = np.asarray(particles, dtype=float)
            weights = info.get('weights')
            order = np.argsort(-np.asarray(weights)) if weights is not None \
                else np.arange(len(particles))
            rows.append(particles[order[:4 * self.fallback_candidates]])
        if not rows:
            return None
        candidates = np.concatenate(rows)
        if candidates.ndim != 2 or candidates.shape[1] != self.q.shape[0]:
            return None
        candidates = nearest_equivalent(candidates, self.q, self.limits.continuous)
        # Distinct candidates, in order, other than the refused estimate.
        _, first = np.unique(np.round(candidates, 9), axis=0, return_index=True)
        candidates = candidates[np.sort(first)]
        candidates = candidates[np.any(np.abs(candidates - desired) > 1e-9, axis=1)]
        candidates = candidates[:self.fallback_candidates + 1]
        if not len(candidates):
            return None
        shaped = [self.shaper.step(self.q, self.v, dt, c, lead_box) for c in candidates]
        stops = np.array([self.shaper.stopping_point(s.q, s.v) for s in shaped])
        ok = np.ones(len(stops), dtype=bool)
        if self.goal is not None:
            # No fallback command takes the tool farther from the goal than the current
            # command is (the branch hold's rule for the estimate): at the margin of an
            # obstacle that blocks the goal, the arm holds instead of wandering along it.
            pos, _ = self.goal.terms[0].errors(
                self.chain.frames(np.vstack([self.q] + [s.q for s in shaped])))
            ok &= pos[1:] <= pos[0] + self.FALLBACK_SLACK
            if not ok.any():
                return None
        for validator in self.validators:
            check_many = getattr(validator, 'check_many', None)
            if check_many is not None:
                idx = np.flatnonzero(ok)
                ok[idx] = np.asarray(check_many(self.q, stops[idx]), dtype=bool)
            else:
                for k in np.flatnonzero(ok):
                    ok[k] = bool(validator(self.q, stops[k]))
            if not ok.any():
                return None
        k = int(np.argmax(ok))
        return shaped[k], stops[k]

    def _on_validated_line(self, shaped):
        """Return True when the command and its braking point lie on the validated motion."""
        if self.validated is None:
            return True
        start, end = self.validated
        span = end - start
        length2 = float(span @ span)
        tol = 1e-9 * (1.0 + math.sqrt(length2))
        for point in (shaped.q, self.shaper.stopping_point(shaped.q, shaped.v)):
            offset = point - start
            t = float(offset @ span) / length2 if length2 > 0.0 else 0.0
            if t < -tol or t > 1.0 + tol or np.max(np.abs(offset - t * span)) > tol:
                return False
        return True

    def _brake(self, dt, lead_box, validate=True):
        """Return a braking ShapedCommand that stays on the validated line.

        The shaper's brake (synchronized on the current line) is taken when it and its
        braking point lie on the last validated motion; when the per-joint safety net bent
        it (a joint at its position or lead bound), the bent motion is validated
        (``validate``); otherwise the brake follows the validated line exactly.
        """
        braked = self.shaper.brake(self.q, self.v, dt, lead_box)
        if self._on_validated_line(braked):
            return braked
        if validate and self.validators:
            stop = self.shaper.stopping_point(braked.q, braked.v)
            if self._refusal(self.q, stop) is None:
                self.validated = (self.q.copy(), stop)
                return braked
        return self._line_brake(dt)

    def _line_brake(self, dt):
        """Return the synchronized brake at the largest deceleration, exactly on the line of
        the current velocity (inside the validated motion: its braking point moves back).

        Velocity and acceleration limits hold; positions are clipped into the limits; the lead
        bound may be exceeded (a collision-free line beats the lead)."""
        self.line_brakes += 1
        self.report('warn', 'line_brake', (
            'the limiter\'s brake left the validated motion and its own path was refused: '
            'braking exactly on the validated line (the lead bound may be exceeded briefly)'))
        speed = np.abs(self.v)
        moving = speed > 0.0
        if not moving.any():
            return ShapedCommand(self.q.copy(), np.zeros_like(self.q), 'stop')
        factor = max(0.0, 1.0 - float(np.min(self.limits.acceleration[moving] * dt
                                             / speed[moving])))
        q_new = self.limits.clip(self.q + factor * self.v * dt)
        return ShapedCommand(q_new, (q_new - self.q) / dt, 'stop')

    # ------------------------------------------------------------------ stream state
    def _clock_reset(self, now, dt):
        """The node clock jumped backwards (a simulation restarted under use_sim_time): no
        time-based guarantee carries over, so the stream starts again like at start-up, from
        the next fresh measurement."""
        self.report('warn', 'clock_reset', (
            f'the node clock jumped back by {-dt:.3f} s (simulation time reset?): commands stop '
            'and restart from the next joint_states, as at start-up'))
        self._cancel_detour('the node clock jumped back', now, reset=False)
        self.q = self.v = self.stamp = None
        self.validated = None
        self.arm.forget()

    def _hold(self, now):
        """Brake after a failed tick; reset the solver at the stop. Never raises."""
        if self.q is None:
            return None
        try:
            dt = now - self.stamp
            if not dt > 0.0:
                return None
            command = self._commit(self._brake(dt, self._lead_box(), validate=False),
                                   now, self.arm.state)
        except Exception as exc:
            self.report('error', f'hold:{type(exc).__name__}',
                        f'braking after a failed tick failed too ({type(exc).__name__}: {exc}):'
                        ' nothing published this tick', exc)
            return None
        try:
            self._reset_solver(self.shaper.stopping_point(command.q, command.v))
        except Exception as exc:
            self.report('error', f'reset:{type(exc).__name__}',
                        f'solver reset failed ({type(exc).__name__}: {exc})', exc)
        return command

    def _recenter_solver(self, estimate):
        """Restart the solver at the same configuration, continuous joints wrapped into
        [-pi, pi), once one drifts past pi: the solver's +-2 pi working range then always
        leaves at least a half turn each way (it would stop at 2 pi, or come back the long
        way round, after many turns in one direction)."""
        continuous = self.limits.continuous
        if self._wraps and np.any(continuous & (np.abs(estimate) > RECENTER)):
            self._reset_solver(estimate)

    def _follow_measured_turns(self):
        """Keep continuous joints in the measured joint's own coordinate.

        A measurement that differs from the command by whole turns (a driver that wrapped or
        re-homed the coordinate; the arm cannot turn 2 pi in a tick) moves the command by the
        same turns: the same physical angle, no motion, the velocity carries on.
        """
        if self.q is None or not self._wraps or not self.arm.complete:
            return
        continuous = self.limits.continuous
        turns = np.where(continuous, np.round((self.arm.measured - self.q) / TWO_PI), 0.0)
        if turns.any():
            self.q = self.q + TWO_PI * turns
            if self.validated is not None:
                self.validated = tuple(p + TWO_PI * turns for p in self.validated)
            j = int(np.argmax(np.abs(turns)))
            self.report('info', 'turns', (
                f'{self.chain.joint_names[j]} is measured {turns[j]:+.0f} turn(s) from the '
                'command (continuous joint, coordinate wrapped or re-homed by the driver): the '
                'command follows the measured coordinate'))

    def _lead_box(self):
        if not self.arm.complete:
            return None
        return self.arm.lead_box(self.q)

    def _restart(self, q_measured, now, state):
        """Command exactly the measurement (inside the position limits), at rest."""
        q = np.asarray(q_measured, dtype=float)
        clipped = self.limits.clip(q)
        if np.any(np.abs(clipped - q) > 1e-9):
            j = int(np.argmax(np.abs(clipped - q)))
            self.report('warn', 'outside_limits', (
                f'measured {self.chain.joint_names[j]} = {q[j]:.4f} is outside its limits '
                f'[{self.limits.lower[j]:.4f}, {self.limits.upper[j]:.4f}]: commanding the '
                'nearest position inside'))
        self.q, self.v, self.stamp = clipped, np.zeros_like(clipped), now
        self.validated = (clipped.copy(), clipped.copy())
        self._last_acceleration = 0.0
        self._reset_solver(clipped)
        self.last = Command(clipped.copy(), self.v.copy(), now, state, 'resync')
        self._update_goal_errors(now)
        return self.last

    def _reset_solver(self, q):
        """Restart the solver at ``q``. With ``solver_thread`` the tick does not wait for a
        step that runs (a search step behind an obstacle can take a third of a second): its
        answer is dropped and the reset runs in the worker right after it; a newer reset asked
        for before that one started replaces its configuration. Until it is done the ticks
        have no answer to follow (the arm brakes, as after any reset)."""
        self._desired = None
        q = self.chain.clip(to_solver_range(q, self.limits.continuous))
        worker = self._worker
        if worker is None:
            self._solver.reset(q)
            return
        with self._reset_lock:
            queued, self._reset_to = self._reset_to is not None, q
        if not queued:
            worker.discard()
            worker.start(_RESET, self._reset_job)
            self.queued_resets += 1

    def _reset_job(self):
        """A queued reset, in the worker: to the latest configuration asked for."""
        with self._reset_lock:
            q, self._reset_to = self._reset_to, None
        if q is not None:
            self._solver.reset(q)

    def _commit(self, shaped, now, state):
        if not (np.isfinite(shaped.q).all() and np.isfinite(shaped.v).all()):
            raise FloatingPointError('the shaped command is not finite')
        dt = now - self.stamp
        accel = np.abs(shaped.v - self.v) / (self.limits.acceleration * dt)
        self._last_acceleration = float(accel.max()) if accel.size else 0.0
        self.q, self.v, self.stamp = shaped.q, shaped.v, now
        self.last = Command(shaped.q.copy(), shaped.v.copy(), now, state, shaped.limited_by)
        self._update_goal_errors(now)
        return self.last

    # ------------------------------------------------------------------ goals
    def _set_goal(self, goal, now):
        self.goal = goal
        self.goal_reached = False
        display = np.asarray(goal.display)
        where = display[:3, 3] if display.shape == (4, 4) else display
        self.report('info', 'goal', (
            f'goal {goal.sequence} from {goal.source}: position '
            f'{np.array2string(where, precision=3)} m in {self.chain.base_link}'), interval=0.5)

    def _update_goal_errors(self, now):
        if self.goal is None:
            return
        # The errors of the same goal at the same command (bit for bit) are the same: a held
        # goal at rest skips the forward kinematics. (A Goal is frozen, its targets' arrays
        # read-only; a new goal is a new object.)
        key = StateKey((self.goal,), (self.q.tobytes(),))
        if key != self._errors_of:
            frames = self.chain.frames(self.q)
            self.goal_errors = tuple(float(v[0]) for v in self.goal.terms[0].errors(frames))
            self._errors_of = key
        pos, ori = self.goal_errors
        reached = pos <= self.tolerances[0] and ori <= self.tolerances[1]
        if reached and not self.goal_reached:
            self.report('info', 'reached', (
                f'goal {self.goal.sequence} reached in {now - self.goal.received:.2f} s: '
                f'position error {pos * 1e3:.2f} mm, orientation error {ori:.4f} rad'),
                interval=0.5)
        self.goal_reached = reached

    # ------------------------------------------------------------------ status
    def refusal(self, within=None):
        """Return the last validator refusal {'tick', 'validator', 'reason', 'outcome'
        ('hold' or 'fallback'), 'ticks_ago'} (None if none, or older than ``within`` ticks)."""
        if self.last_refusal is None:
            return None
        ago = self.ticks - self.last_refusal['tick']
        if within is not None and ago > within:
            return None
        return dict(self.last_refusal, ticks_ago=ago)

    def refusal_text(self, within=50):
        """Return what the last validator refusal (within ``within`` ticks) did, or ''."""
        refusal = self.refusal(within)
        if refusal is None:
            return ''
        if refusal['outcome'] == 'hold':
            return f'holding: {refusal["reason"]}'
        return f'detour: {refusal["reason"]}; moving towards another solver candidate'

    def status(self, now):
        """Return the command-stream part of ~/status (JSON-ready values)."""
        def number(value, digits):
            return None if value is None or not math.isfinite(value) else round(value, digits)
        lead = None
        if self.q is not None and self.arm.complete:
            lead = float(np.max(self.arm.lead(self.q)))
        velocity = None
        if self.v is not None:
            velocity = float(np.max(np.abs(self.v) / self.limits.velocity))
        age = self.arm.age(now) if self.arm.complete else None
        return {
            'arm_state': self.arm.state.value if not self._stopping else 'stopping',
            'commanding': self.q is not None,
            'lead': number(lead, 4),
            'max_lead': self.arm.settings.max_lead,
            'limited_by': self.last.limited_by if self.last is not None else None,
            'velocity_ratio': number(velocity, 3),
            'acceleration_ratio': number(self._last_acceleration, 3),
            'joint_states_age': number(age, 3),
            'resyncs': self.arm.resyncs,
            'stale_episodes': self.arm.stale_episodes,
            'faults': self.faults,
            'holds': self.holds,
            'fallbacks': self.fallbacks,
            'line_brakes': self.line_brakes,
            'solver_thread_cpu_s': (None if self._worker is None
                                    else round(self._worker.cpu_time, 4)),
            'refusal': self.refusal_text(),
            'goals_received': self.inbox.received,
            'goals_superseded': self.inbox.superseded,
            'goals_stale': self.inbox.stale,
            **(self.detour.status() if self.detour is not None else {
                'detour': 'off', 'detour_text': '', 'detour_waypoints': None,
                'detour_plan_ms': None, 'detour_plan_tick_ms': None, 'detours': None}),
        }

