"""One control tick, without ROS: inbox -> solver -> shaping -> guard -> the command.

The node converts messages and times to numpy and seconds and calls ``ControlLoop``:
``on_joint_states`` for each measurement, ``offer_goal`` for each goal, ``tick(now)`` on its
timer (publishing the returned Command, if any) and ``request_stop()`` on SIGINT/SIGTERM.

A tick (``ControlLoop._tick``):

1. The arm's state (``arm_state.ArmMonitor.decide``): WAITING publishes nothing; RESYNC
   restarts the command at exactly the measurement, at rest, and resets the solver there;
   STALE (and a requested stop) brakes on the validated line and holds.
2. ACTIVE: the newest goal from the inbox (``goal_inbox``); the solver's answer for it
   (``stepping.SolverStepper``: when to step, what to follow in between, the worker thread),
   mapped to the command's own coordinate (continuous joints: the nearest equivalent).
3. The next command within the position, velocity and acceleration limits and the lead box
   around the latest measurement (``shaping.CommandShaper``).
4. The guard (``guard.MotionGuard``): validators ``(q_from, q_to) -> ok`` see the motion
   from the last command to where the new one, projected onto the contacts and pinned tips
   as it is published (``base.FigureState.keep``), could stop at the latest; a refusal moves
   towards another solver candidate, or brakes and restarts the solver at the braking stop
   (a hard constraint is never entered; the collision guard plugs in the same way).
5. A detour round an obstacle that blocks the goal (``detour``) takes the place of 2-4 while
   it is planned or followed.
6. The exception policy: any exception in a tick is reported once with its traceback (then
   throttled with a count), the arm brakes, the solver is reset at the braking stop, and the
   next tick starts afresh.

A tick less than ``LANDING`` times as long as the last command's (a timer catching up after
a late tick: 3 ms after 57 ms) publishes nothing: the shaper lets a step land on a bound at
a speed the next tick can stop from only when that tick is at least that long (shaping
``allowed_speed``); Alex's shoulder, landed 0.06 mrad short of its limit at 0.04 rad/s,
took 7.2 rad/s^2 (limit 3) to stop in the 3 ms tick.
"""

from dataclasses import dataclass, replace
import math

import numpy as np

from ..solvers.base import StateKey, goal_signature
from .arm_state import ArmMonitor, ArmSettings, ArmState, initial_configuration
from .detour import DetourDrive
from .frames import FrameResolver
from .goal_inbox import GoalInbox, TipProgress, kept_goals
from .base import APPROACH, FigureState, pending
from .guard import MotionGuard
from .limits import commanded
from .reporter import never_raises
from .shaping import LANDING, CommandShaper
from .stepping import KEEP, SolverStepper

__all__ = ['Command', 'ControlLoop', 'LoopSettings', 'CLOCK_RESET']

TWO_PI = 2.0 * math.pi
# A node clock that jumps back by more than this restarts the stream [s]; smaller steps back
# skip ticks until the clock passes the last command's stamp again.
CLOCK_RESET = 0.5


@dataclass(frozen=True)
class Command:
    """A command to publish: q (n,) [rad or m], v (n,) its velocity over the tick, stamp [s]
    (the time the limits were applied for: publish it as the header stamp), state (ArmState),
    limited_by (what bounded it, see shaping.LIMITERS, or 'resync'), base: (4, 4) the pose
    of the floating base in the world frame that goes with q (None: a fixed base)."""

    q: np.ndarray
    v: np.ndarray
    stamp: float
    state: ArmState
    limited_by: str
    base: np.ndarray = None


@dataclass(frozen=True)
class LoopSettings:
    """How the loop steps its solver and answers refusals (the node's parameters of the same
    names; ``stepping`` and ``guard`` say what each does).

    After construction the loop's attributes of the same names are the live values.
    """

    iterations_per_tick: int = 1        # solver steps per stepping tick
    step_interval: int = 1              # [ticks] the solver steps every this many ticks
    rest_step_interval: int = 1         # [ticks] ... while settled and at rest at its answer
    solver_thread: bool = False         # solver steps in a worker thread
    step_budget: float = None           # [s] a tick waits this long for a step (None: all)
    fallback_candidates: int = 8        # solver candidates tried when a motion is refused
    hold_reset_interval: int = 1        # [ticks] solver restarts while a hold lasts
    tolerances: tuple = (1e-3, 1e-2)    # (position [m], orientation [rad]) of goal reached

    def __post_init__(self):
        for name in ('hold_reset_interval', 'rest_step_interval', 'step_interval'):
            value = getattr(self, name)
            if int(value) < 1:
                raise ValueError(f'{name} must be >= 1 tick; got {value}')
        for name in ('iterations_per_tick', 'fallback_candidates', 'hold_reset_interval',
                     'rest_step_interval', 'step_interval'):
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.step_budget is not None:
            object.__setattr__(self, 'step_budget', max(0.0, float(self.step_budget)))
        object.__setattr__(self, 'tolerances', tuple(self.tolerances))


class _Part:
    """A loop attribute that lives on one of its parts (the node's surface, kept)."""

    def __init__(self, part, name=None):
        self.part, self.name = part, name

    def __set_name__(self, owner, name):
        self.name = self.name or name

    def __get__(self, loop, owner=None):
        return self if loop is None else getattr(getattr(loop, self.part), self.name)

    def __set__(self, loop, value):
        setattr(getattr(loop, self.part), self.name, value)


class ControlLoop:
    """The command stream of one arm: what to publish at each tick (see module doc).

    chain: the Chain (1-DOF joints); solver: a Solver on that chain; limits:
    limits.JointLimits; arm_settings: ArmSettings; inbox: GoalInbox (default: one on the
    robot's own frames); validators: callables (q_from, q_to) -> ok (``guard``); report:
    callable(level, key, text, exc=None, ...) (a Reporter; default: discard); detour: a
    ``detour.Detour`` (None: off); settings: LoopSettings, or its fields as keywords.

    Parts: ``arm`` (ArmMonitor), ``inbox``, ``stepper`` (SolverStepper), ``shaper``
    (CommandShaper), ``guard`` (MotionGuard), ``detours`` (DetourDrive). The attributes below
    that name a part are that part's (read and set through the loop, as the node does).
    """

    # The solver and when it steps (stepping.SolverStepper).
    solver = _Part('stepper')
    solver_idle = _Part('stepper', 'idle')
    solver_held = _Part('stepper', 'held')
    estimate = _Part('stepper')
    constraints = _Part('stepper')
    step_observers = _Part('stepper')
    iterations_per_tick = _Part('stepper')
    step_interval = _Part('stepper')
    rest_step_interval = _Part('stepper')
    step_budget = _Part('stepper')
    skipped_steps = _Part('stepper')
    interpolated_ticks = _Part('stepper')
    steps_in_thread = _Part('stepper')
    beside = _Part('stepper')
    settle = _Part('stepper')
    close = _Part('stepper')
    # What refused motions do (guard.MotionGuard); the detour (detour.DetourDrive).
    validators = _Part('guard')
    fallback_candidates = _Part('guard')
    hold_reset_interval = _Part('guard')
    detour = _Part('detours')

    def __init__(self, chain, solver, limits, arm_settings=None, inbox=None, validators=(),
                 report=None, detour=None, settings=None, base=None, **fields):
        if chain.nq != chain.nv:
            raise ValueError('ControlLoop needs a chain of 1-DOF joints (no ball joints)')
        settings = replace(settings or LoopSettings(), **fields)
        self.chain = chain
        self.limits = limits
        self._wraps = bool(limits.continuous.any())   # any continuous joint (limits: frozen)
        self._report = report       # as given (the tests read what it collected)
        self.report = never_raises(report)
        self.arm = ArmMonitor(limits.names, limits.continuous, arm_settings or ArmSettings())
        self.inbox = inbox or GoalInbox(FrameResolver(chain), chain.tip_links)
        self.shaper = CommandShaper(limits)
        self.stepper = SolverStepper(
            chain, solver, limits, self.shaper, self.report, settings.iterations_per_tick,
            settings.step_interval, settings.rest_step_interval, settings.solver_thread,
            settings.step_budget)
        self.guard = MotionGuard(chain, limits, self.shaper, self.stepper, self.report,
                                 validators, settings.fallback_candidates,
                                 settings.hold_reset_interval)
        self.detours = DetourDrive(detour, self.shaper, self.guard, self.stepper, self.report)
        # The solver's state: the floating base, the hard equalities kept by projection.
        self.figure = self.stepper.figure = self.guard.figure = FigureState(
            chain, limits, base, self.report)
        self.constraints_kept = []  # the constraint set and the figure's terms (solver's)
        self.tolerances = settings.tolerances
        self.stepper.meets = lambda goal, q: meets(
            self.chain, self.figure, goal, q, tuple(KEEP * t for t in self.tolerances))
        self.q = None               # last published command (n,)
        self.v = None               # its velocity (n,)
        self.stamp = None           # its stamp [s]
        self.last_dt = 0.0          # its tick's length [s] (0: from rest)
        self.base = None            # the floating base's pose (4, 4) that goes with q
        self.last = None            # last Command
        self.goal = None            # Goal being followed
        self.goal_errors = (math.nan, math.nan)     # worst of the tips with a goal
        self.tip_errors = ()        # per tip: (position [m], orientation [rad]) error
        self.goal_reached = False
        self.goal_done = False      # the goal was reached at some tick since it arrived
        self.progress = TipProgress()   # when each tip last came nearer its goal
        self._errors_of = None      # StateKey (goal, command bytes) goal_errors belong to
        self._last_acceleration = 0.0   # max_j |dv_j| / (a_j dt) of the last tick
        self.stopping = False       # request_stop was called
        self.first_tick = None      # time [s] of the first tick (the mean tick period is
        #                             (last.stamp - first_tick) / (ticks - 1))
        self.ticks = 0
        self.faults = 0             # ticks that raised
        if self.figure.floating:    # the solver holds the base until a contact places it
            self.set_constraints([])

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
        return self.chain.neutral_configuration()[commanded(self.chain)]

    @property
    def state(self):
        """The solver's state (nq,) of the last command (its base included), or None."""
        return None if self.q is None else self.figure.state(self.q, self.base)

    def current_state(self):
        """Return the solver's state (nq,) of ``current_configuration`` (the base fitted)."""
        if self.q is not None and not self.arm.complete:
            return self.state
        return self.figure.state(self.current_configuration())

    def offer_goal(self, kind, value, frame, stamp, now, source='goal', covariance=None,
                   tip=None):
        """Put a goal for ``tip`` (None: the first) into the inbox (see GoalInbox.offer);
        GoalError when refused."""
        return self.inbox.offer(kind, value, frame, stamp, now, self.current_state(),
                                source, covariance=covariance, tip=tip)

    def release_goal(self, tip, now, source='release'):
        """Release ``tip``'s goal: it holds its pose at the current command from now on."""
        q = self.state if self.q is not None else self.current_state()
        return self.inbox.release(tip, now, q, source)

    def request_stop(self):
        """Stop following goals: brake to a stop within the limits and hold (shutdown)."""
        self.stopping = True

    @property
    def stopped(self):
        """True once a requested stop is complete (at rest, or nothing was ever published)."""
        return self.stopping and (self.q is None or not np.any(self.v))

    def set_solver(self, solver):
        """Switch to ``solver`` with the loop's constraints, started at the current command
        (the stream does not jump). GoalError (nothing changed) if a constraint does not fit."""
        self.stepper.set_solver(solver)
        self.detours.cancel('the solver was switched', self.stamp, self.q, self.v)
        self.stepper.reset(self.q if self.q is not None else self.current_configuration())

    def set_constraints(self, constraints):
        """Hand the constraint set to the solver (now and on every switch) and to the
        validators that take one; its hard equalities to the projection (``base``).

        Contacts and support polygons without a pose of their own are anchored at the last
        command (before the first: at the first joint_states); a hard constraint already
        violated there is accepted with a warning (the guard then passes only motion that
        reduces the violation)."""
        constraints = list(constraints)
        self.stepper.settle()           # the solver reads the constraints: not mid-step
        figure = self.figure
        extra = figure.set_constraints(constraints)
        if self.q is not None:
            figure.anchor(constraints, self.q)
        self.shaper.limits = figure.shaper_limits(self.limits)
        self.constraints_kept = constraints + extra
        self.stepper.set_constraints(self.constraints_kept)
        self.guard.set_constraints(self.constraints_kept)
        if self.q is not None:
            figure.arrivals(self.constraints_kept, self.q)

    def set_detour_enabled(self, enabled):
        """Switch the detour on or off; off cancels one in progress (the arm brakes at the next
        tick's solver step from the stop, as after any cancel)."""
        self.detours.set_enabled(enabled, self.stamp, self.q, self.v)

    def replan_detour(self, reason):
        """The collision model was replaced: at the next tick a detour being planned plans
        again on the new constraints; one being followed (certified on the old model) is
        cancelled, the solver restarts at the braking stop and a still-blocked goal plans
        afresh."""
        self.detours.replan_later(reason)

    # ------------------------------------------------------------------ the tick
    def tick(self, now):
        """Return the Command to publish at ``now`` [s] (node clock), or None (publish nothing).

        Never raises: a failing tick is reported and turned into a braking command.
        """
        self.ticks += 1
        self.stepper.report_errors()
        self.figure.apply_passive()
        try:
            return self._tick(now)
        except Exception as exc:   # never die: report, brake, reset, carry on
            self.faults += 1
            self.report('error', f'tick:{type(exc).__name__}',
                        f'control tick failed ({type(exc).__name__}: {exc}): braking to a '
                        'stop, the solver restarts at the stop; the node keeps running', exc)
            return self._hold(now)

    def _tick(self, now):
        """The tick's pipeline (module doc): the clock, the arm's state, the goal, then the
        detour or solver -> shaper -> guard, and the command."""
        if self.first_tick is None:
            self.first_tick = now
        dt = None if self.q is None else now - self.stamp
        if dt is not None and not dt > 0.0:
            self._clock_back(now, dt)
            return None
        if dt is not None and dt < LANDING * self.last_dt:
            return None                 # a catch-up tick (module doc)
        decision = self.arm.decide(now, self.q)
        for level, key, text in decision.events:
            self.report(level, key, text)
        state = decision.state
        if state is ArmState.WAITING:
            return self._start_blind(now)
        if state is ArmState.RESYNC:
            self.detours.cancel('the stream restarted from the measurement (resync)', now,
                                self.q, self.v)
            return self._restart(decision.resync_to, now, state)
        self._follow_measured_turns()
        q, v = self.q, self.v
        lead_box = self.arm.lead_box(q) if self.arm.complete else None
        if self.stopping or state is ArmState.STALE:
            self.detours.cancel('stopping' if self.stopping else 'joint_states are stale',
                                now, q, v)
            return self._commit(self.guard.brake(q, v, dt, lead_box), now, state, lead_box)
        new_goal = self._take_goal(now)
        self.detours.replan_requested(now, q, v)
        if self.detours.active:
            shaped = self.detours.command(q, v, dt, lead_box, now, self.goal, self.ticks)
            return self._commit(shaped, now, state, lead_box)
        desired, velocity = self.stepper.follow(q, v, self.goal, now, self.ticks, new_goal)
        if self.figure.pins:
            self.shaper.limits = self.figure.shaper_limits(self.limits, q)
        self.shaper.approach = APPROACH if self.figure.kept else 1.0
        ahead = self.figure.toward(q, desired)
        if ahead is not desired:
            velocity = None
        shaped = self.shaper.step(q, v, dt, ahead, lead_box, velocity)
        # The guard judges the command as it is published: projected onto the contacts (H1:
        # a projection of 0.005 rad a tick turned the velocity, and the stop judged from the
        # shaped command lay 10 mm short of where the CoM stopped, past its margin).
        landed = self.figure.keep(q, v, dt, shaped, lead_box=lead_box, answer=desired)
        if landed is not None:
            shaped = landed[0]
        admitted = self.guard.admit(q, v, dt, lead_box, shaped, desired, self.goal,
                                    self.ticks)
        command = self._commit(admitted, now, state, lead_box,
                               landed if admitted is shaped else None)
        self.detours.observe(self, now)
        return command

    def _take_goal(self, now):
        """Take the newest goal from the inbox; return True when there was one (a goal with
        other targets than the one followed cancels a detour and drops a running step). A
        goal without any tip's goal (all released) ends the following: the arm rests. With
        several tips, the tips the goal leaves as they were are pinned (``FigureState``)."""
        goal = self.inbox.take(now)
        if goal is None:
            return False
        previous = self.goal
        fresh = previous is None or goal.sequence != previous.sequence   # not a resync's
        kept = [] if goal.empty or self.goal_done or not fresh else kept_goals(
            goal, previous, self.tip_errors, self.tolerances)
        stalled = self.progress.stalled(goal, kept, now)
        if stalled:
            # Retired, they may leave no tip a goal (a release of the other tip): then too
            # the arm rests (a goal of holds only failed every tick, nothing published).
            goal = self.inbox.retire(goal, stalled, self.state)
            kept = [tip for tip in kept if tip not in stalled]
        held = [f'{tip} {why}: it holds where it is during goal {goal.sequence} (that goal '
                'is dropped; send it again to resume)' for tip, why in stalled.items()]
        if goal.empty:
            for text in held:
                self.report('info', 'goal_stalled', text, interval=0.5)
            if previous is not None:
                self.report('info', 'goal', f'no tip has a goal ({goal.source}): holding '
                            'still', interval=0.5)
                self.detours.cancel('every goal was released', now, self.q, self.v)
                self.stepper.goal_changes += 1
            goal, self.goal_errors, self.tip_errors = None, (math.nan, math.nan), ()
        else:
            if previous is None or \
                    goal_signature(goal.terms) != goal_signature(previous.terms):
                self.stepper.goal_changes += 1
                self.detours.cancel(f'a new goal ({goal.sequence}) arrived', now, self.q,
                                    self.v)
            if not fresh:
                goal = replace(goal, received=previous.received)   # new holds (resync)
            else:
                self.report('info', 'goal', f'goal {goal.sequence} from {goal.source}: '
                            f'{goal.summary(self.chain.base_link)}', interval=0.5)
                for text in held:
                    self.report('info', 'goal_stalled', text, interval=0.5)
                if kept:
                    self.report('info', 'goal_kept', (
                        f'{", ".join(kept)} keep(s) an earlier goal, not reached yet, and '
                        f'move(s) on towards it during goal {goal.sequence}; an empty '
                        'PoseStamped on targets/<tip>/pose releases a tip (it then holds '
                        'where it is)'), interval=0.5)
        # The previous goal reached at some tick: the tips a new goal leaves stay where they
        # are (not on a resync's new holds for the same goal: the arm may have been moved).
        reached = self.goal_done and fresh and goal is not None and previous is not None
        self.goal, self.goal_reached, self.goal_done = goal, False, False
        if len(self.inbox.tip_links) > 1:
            self.figure.pin_tips(goal, previous, self.q, self.tolerances, reached)
            self.shaper.limits = self.figure.shaper_limits(self.limits)
        return goal is not None

    def _start_blind(self, now):
        """WAITING: command from the assumed start once ``joint_states_timeout`` passed
        without a measurement, if ``start_without_joint_states`` (simulation only)."""
        settings = self.arm.settings
        if not settings.start_without_joint_states or self.stopping or \
                now - self.first_tick < settings.joint_states_timeout:
            return None
        self.arm.start_blind()
        start = initial_configuration(self.chain)
        self.report('warn', 'blind', (
            'start_without_joint_states: no joint_states within '
            f'{settings.joint_states_timeout:g} s: commanding from the assumed start '
            f'{np.array2string(start, precision=3)} (simulation only)'))
        return self._restart(start, now, ArmState.ACTIVE)

    def _hold(self, now):
        """Brake after a failed tick; reset the solver at the stop. Never raises."""
        if self.q is None:
            return None
        try:
            dt = now - self.stamp
            if not (dt > 0.0 and dt >= LANDING * self.last_dt):
                return None
            lead_box = self.arm.lead_box(self.q) if self.arm.complete else None
            command = self._commit(self.guard.brake(self.q, self.v, dt, lead_box,
                                                    validate=False), now, self.arm.state,
                                   lead_box)
        except Exception as exc:
            self.report('error', f'hold:{type(exc).__name__}',
                        f'braking after a failed tick failed too ({type(exc).__name__}: {exc}):'
                        ' nothing published this tick', exc)
            return None
        try:
            self.stepper.reset(self.shaper.stopping_point(command.q, command.v))
        except Exception as exc:
            self.report('error', f'reset:{type(exc).__name__}',
                        f'solver reset failed ({type(exc).__name__}: {exc})', exc)
        return command

    # ------------------------------------------------------------------ the command
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
        figure = self.figure
        if pending(self.constraints_kept):     # contacts given before the first
            self.stepper.settle()                     # joint_states anchor there
            figure.anchor(self.constraints_kept, clipped)
        self.base = figure.fit(clipped) if figure.floating else None
        if self.base is not None:
            figure.set_base(self.base)
        self.q, self.v, self.stamp, self.last_dt = clipped, np.zeros_like(clipped), now, 0.0
        self.guard.validated = (clipped.copy(), clipped.copy())
        self._last_acceleration = 0.0
        self.stepper.reset(clipped)
        self.inbox.hold_at(self.state)
        figure.arrivals(self.constraints_kept, clipped)
        self.last = Command(clipped.copy(), self.v.copy(), now, state, 'resync', self.base)
        self._update_goal_errors(now)
        return self.last

    def _commit(self, shaped, now, state, lead_box, landed=None):
        """Make the ShapedCommand the published command at ``now``, projected onto the hard
        equalities within the limits and ``lead_box`` (the tick's, or None;
        ``FigureState.keep_within``: else the brake, projected as far as the limits allow;
        ``landed``: (command, base), already projected); return its Command."""
        if not (np.isfinite(shaped.q).all() and np.isfinite(shaped.v).all()):
            raise FloatingPointError('the shaped command is not finite')
        dt = now - self.stamp
        q, v = self.q, self.v
        shaped, base = landed or self.figure.keep_within(
            q, v, dt, shaped, lambda: self.guard.brake(q, v, dt, lead_box), lead_box)
        accel = np.abs(shaped.v - self.v) / (self.limits.acceleration * dt)
        self._last_acceleration = float(accel.max()) if accel.size else 0.0
        self.q, self.v, self.stamp, self.base = shaped.q, shaped.v, now, base
        self.last_dt = dt
        if base is not None:
            self.figure.set_base(base)
        self.last = Command(shaped.q.copy(), shaped.v.copy(), now, state, shaped.limited_by,
                            base)
        self._update_goal_errors(now)
        return self.last

    def _clock_back(self, now, dt):
        """The node clock did not advance since the last command (dt [s] <= 0): a small step
        back skips the tick; a jump back by more than CLOCK_RESET (a simulation restarted
        under use_sim_time) carries no time-based guarantee over, so the stream starts again
        like at start-up, from the next fresh measurement."""
        if not dt < -CLOCK_RESET:
            self.report('warn', 'clock_stalled', f'the node clock did not advance since '
                        f'the last command (dt = {dt:.6f} s): tick skipped')
            return
        self.report('warn', 'clock_reset', (
            f'the node clock jumped back by {-dt:.3f} s (simulation time reset?): commands stop '
            'and restart from the next joint_states, as at start-up'))
        self.detours.cancel('the node clock jumped back', now, self.q, self.v, reset=False)
        self.q = self.v = self.stamp = None
        self.guard.validated = None
        self.arm.forget()

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
            if self.guard.validated is not None:
                self.guard.validated = tuple(p + TWO_PI * turns for p in self.guard.validated)
            j = int(np.argmax(np.abs(turns)))
            self.report('info', 'turns', (
                f'{self.chain.joint_names[j]} is measured {turns[j]:+.0f} turn(s) from the '
                'command (continuous joint, coordinate wrapped or re-homed by the driver): the '
                'command follows the measured coordinate'))

    def _update_goal_errors(self, now):
        """The errors of every tip to its target at the command (``tip_errors``), the worst
        of the tips with a goal (``goal_errors``); reached when each of those is within the
        tolerances."""
        goal = self.goal
        if goal is None:
            return
        # The errors of the same goal at the same command (bit for bit) are the same: a held
        # goal at rest skips the forward kinematics. (A Goal is frozen, its targets' arrays
        # read-only; a new goal is a new object.)
        key = StateKey((goal,), (self.q.tobytes(),
                                 None if self.base is None else self.base.tobytes()))
        if key != self._errors_of:
            frames = self.chain.frames(self.state)
            self.tip_errors = tip_errors(goal, frames)
            self.progress.note(goal, self.tip_errors, self.tolerances, now)
            self.goal_errors = worst_errors(goal, self.tip_errors, self.figure.pins)
            self._errors_of = key
        pos, ori = self.goal_errors
        reached = pos <= self.tolerances[0] and ori <= self.tolerances[1]
        self.goal_done = self.goal_done or reached
        if reached and not self.goal_reached:
            self.report('info', 'reached', (
                f'goal {goal.sequence} reached in {now - goal.received:.2f} s: '
                f'position error {pos * 1e3:.2f} mm, orientation error {ori:.4f} rad'
                + (f' (worst of {len(goal.goal_tips)} tips)' if len(goal.goal_tips) > 1
                   else '')),
                interval=0.5)
        self.goal_reached = reached

    # ------------------------------------------------------------------ status
    def refusal(self, within=None):
        """Return the last validator refusal {'tick', 'validator', 'reason', 'outcome'
        ('hold' or 'fallback'), 'ticks_ago'} (None if none, or older than ``within`` ticks)."""
        return self.guard.refusal(self.ticks, within)

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
        worker = self.stepper.worker
        return {
            'arm_state': self.arm.state.value if not self.stopping else 'stopping',
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
            'holds': self.guard.holds,
            'fallbacks': self.guard.fallbacks,
            'line_brakes': self.guard.line_brakes,
            'solver_thread_cpu_s': None if worker is None else round(worker.cpu_time, 4),
            'refusal': self.guard.refusal_text(self.ticks),
            'goals_received': self.inbox.received,
            'goals_superseded': self.inbox.superseded,
            'goals_stale': self.inbox.stale,
            **self.figure.status(),
            **self.detours.status(),
        }


def tip_errors(goal, frames):
    """Return per term of ``goal`` its (position [m], orientation [rad]) error at the first
    configuration of ``frames``."""
    return tuple(tuple(float(v[0]) for v in term.errors(frames)) for term in goal.terms)


def worst_errors(goal, tip_errors, pins):
    """Return the worst (position [m], orientation [rad]) of ``tip_errors`` (per term of
    ``goal``) over the tips with a goal. A tip pinned (``pins``) at its position only (a
    reached goal kept while another tip's goal runs) counts by its position: its orientation
    is left free (``FigureState.pin_tips``)."""
    free = {pin.link for pin in pins if pin.position_only}
    chosen = [(tip_errors[k][0], 0.0) if goal.terms[k].link in free else tip_errors[k]
              for k in goal.goal_tips]
    return max(e[0] for e in chosen), max(e[1] for e in chosen)


def meets(chain, figure, goal, q, tolerances):
    """Return whether the command q (n,) meets ``goal`` within ``tolerances`` (position,
    orientation), the FigureState ``figure`` giving its state (the stepper keeps such an
    answer for the goal, ``stepping.KEEP``)."""
    frames = chain.frames(figure.state(q))
    pos, ori = worst_errors(goal, tip_errors(goal, frames), figure.pins)
    return pos <= tolerances[0] and ori <= tolerances[1]
