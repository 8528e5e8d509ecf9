"""When the solver steps, and what the tick follows in between, without ROS.

``SolverStepper`` owns the solver for the control loop and answers one question per tick:
which configuration (and at which velocity) should the command move towards?

- A new goal or a constraint change steps the solver at once.
- ``step_interval`` [ticks]: while the same goal is followed, the solver steps on every
  this many ticks; the ticks in between carry its last answer on at that answer's own
  velocity (a tracked target is followed without a stop): a control rate above the
  solver's rate without its cost on every tick.
- An answer's velocity (a tracked target's, ``CommandShaper.target_velocity``) is taken
  only while the goal's values changed (``goal_changes``) in the last ``STILL_GOAL``
  seconds; under a still goal (sent once, or the same pose sent again) the answers move
  because the solver converges, and following that motion carried TIAGo dual's tool 3.8 mm
  past its goal at 120 mm/s (black box).
- ``rest_step_interval`` [ticks]: while the solver is ``settled`` on the same goal and
  constraints and the command rests at its answer, the solver steps only every this many
  ticks (its answer cannot change in between).
- ``iterations_per_tick``: solver steps per stepping tick (the step observers see each).
- ``solver_thread``: each step runs in a worker thread (``step_worker``): the tick that
  starts a step waits for it at most ``step_budget`` [s] (None: as long as it takes), and
  while it runs on, the ticks carry the last answer on as between steps; the answer is taken
  at the first tick after it finished (a step on a goal that was replaced meanwhile is
  dropped and the new goal stepped at once). The solver then works on twins of the
  constraints (``fork``), and every other use of ``solver`` waits for the running step. The
  tick never waits for the worker: a reset drops a running step's answer and runs after it.
  ``held``: while something waits for the worker to be idle (a new collision model, applied
  between two steps: ``scene_upkeep``), no step or side work starts; the ticks carry the
  last answer on, and the first step after the hold counts as a new goal's when it owes one.

- An answer that meets its goal (``meets``: every tip within ``KEEP`` of the tolerances) is
  kept for the rest of that goal, on the same constraints and pins, until the solver is
  reset or switches branch (its own switch, ``~/select_alternative``): later answers of the
  same goal differ from it in the null space only (a redundant arm, a torso), and turning
  towards one late in the approach carried talos's hand through its goal at 144 mm/s and
  9.9 mm away (black box), so the goal counted as reached on a pass while the hand moved on.

An answer is mapped to the command's own coordinate (continuous joints: the equivalent
nearest the command); a continuous joint that drifts past pi restarts the solver wrapped.
"""

import math
import threading

import numpy as np

from ..solvers.base import StateKey
from .limits import nearest_equivalent, to_solver_range
from .shaping import FOLLOW_GAP
from .step_worker import StepWorker

__all__ = ['SolverStepper', 'RECENTER']

# A continuous joint's solver value beyond +-RECENTER [rad] restarts the solver wrapped.
RECENTER = math.pi + 0.25
# The worker tag of a solver reset queued behind a running step (``reset``).
_RESET = 'reset'
# [s] a goal unchanged this long is still: its answers get no velocity (the module doc).
STILL_GOAL = 0.5
# Share of the goal's tolerances within which an answer is kept for its goal (module doc).
KEEP = 0.5


def set_references(constraints, q):
    """Give constraints that compare with a reference (never deeper) the command q (n,)."""
    for constraint in constraints:
        set_reference = getattr(constraint, 'set_reference', None)
        if set_reference is not None:
            set_reference(q)


class SolverStepper:
    """The solver's steps for one control loop (see the module doc).

    chain: the Chain; solver: a Solver on it; limits: JointLimits; shaper: the loop's
    CommandShaper (how fast an answer moves); report: callable(level, key, text, exc=None);
    the other arguments: the ``LoopSettings`` fields of the same names (settable).
    """

    def __init__(self, chain, solver, limits, shaper, report, iterations_per_tick=1,
                 step_interval=1, rest_step_interval=1, solver_thread=False, step_budget=None):
        self.chain = chain
        self.limits = limits
        self.shaper = shaper
        self.report = report
        self.iterations_per_tick = iterations_per_tick
        self.step_interval = step_interval
        self.rest_step_interval = rest_step_interval
        self.step_budget = step_budget
        self.worker = StepWorker() if solver_thread else None
        self._solver = solver
        self.constraints = []       # what the solver respects (also on a solver switch)
        self.twins = []             # the solver's constraint objects (thread: the forks)
        self._pins = ()             # the pinned tips the solver holds besides (``_step_job``)
        # Callables (solver, goal, now) run after every solver step (e.g. the alternatives'
        # bookkeeping, which latches the step's branch-switch record).
        self.step_observers = []
        self.step_info = {}         # the solver's info of the last answer taken
        self.goal_changes = 0       # goals with another signature than the one before
        self.skipped_steps = 0      # solver steps skipped at rest (rest_step_interval)
        self.interpolated_ticks = 0     # ticks between solver steps (step_interval)
        self.steps_in_thread = 0    # steps that ran on beyond the tick that started them
        self.held = False           # start no step nor side work (see the module doc)
        self._owed = False          # a new goal's step that a hold put off
        self.queued_resets = 0      # solver resets run in the worker (solver_thread)
        self._stepped = (-1, None)  # (tick, constraint key) of the last solver step
        self._answer = None         # (desired (n,), time [s], its velocity or None): followed
        #                             by the last tick
        self._changes_seen = None   # goal_changes when the goal last changed, at:
        self._changed_at = -math.inf        # [s]
        self._reset_lock = threading.Lock()
        self._reset_to = None       # the configuration of a queued reset (solver_thread)
        self._wraps = bool(limits.continuous.any())
        # The solver's state of a command (the floating base: base.FigureState; the loop
        # sets it): commands (C,) <-> solver states (nq,). None: the same.
        self.figure = None
        # Callable (goal, desired (n,)) -> bool: the answer meets the goal within KEEP of
        # its tolerances (the loop sets it). None: no answer is kept.
        self.meets = None
        self._kept = None           # ((goal_changes, branch switches), constraint key, pins,
        #                             answer (n,)): the answer kept for its goal

    # ------------------------------------------------------------------ the solver
    @property
    def solver(self):
        """The solver; with ``solver_thread``, once the worker thread is idle (a finished
        step's answer is still taken by the next tick). From the worker itself: at once."""
        self.settle()
        return self._solver

    @property
    def idle(self):
        """True unless a solver step or side work runs in the worker thread."""
        return self.worker is None or self.worker.idle

    @property
    def estimate(self):
        """The solver's answer the last tick followed, in the command's coordinates (n,), or
        None (no goal, or a tick without one: a hold, a reset)."""
        return None if self._answer is None else self._answer[0]

    def beside(self, fn):
        """Run ``fn()`` in the worker thread, after a running step (side work that reads the
        solver: markers, alternatives). Returns False without ``solver_thread``, while the
        last batch has not finished, or while the solver searches (not ``settled``) and side
        work had its share (``step_worker.SIDE_SHARE``): run it later."""
        searching = not self.step_info.get('settled', False)    # of the last answer taken
        return self.worker is not None and not self.held and self.worker.beside(fn, searching)

    def settle(self):
        """Wait until the worker thread is idle (before changing what side work reads)."""
        if self.worker is not None:
            self.worker.settle()

    def close(self):
        """Wait for the worker thread's work and end the thread (shutdown)."""
        if self.worker is not None:
            self.worker.close()

    def set_solver(self, solver):
        """Switch to ``solver`` with the stepper's constraints (GoalError, nothing changed, if
        one does not fit); the caller resets it where the command is."""
        self.drop_step()
        solver.set_constraints(self.twins)
        self._solver, self._pins, self._kept = solver, (), None

    def set_constraints(self, constraints):
        """Hand ``constraints`` to the solver (now and on every switch); with the thread, as
        twins (``fork``, bound here) while the originals stay with the validators."""
        constraints = list(constraints)
        self.drop_step()
        twins = constraints
        if self.worker is not None:
            twins = [c.bind(self.chain).fork() if hasattr(c, 'fork') else c
                     for c in constraints]
        self._solver.set_constraints(twins)
        self.constraints, self.twins, self._pins, self._kept = constraints, twins, (), None

    def reset(self, q):
        """Restart the solver at ``q`` (n,). With ``solver_thread`` the tick does not wait for
        a step that runs (a search step behind an obstacle can take a third of a second): its
        answer is dropped and the reset runs in the worker right after it; a newer reset
        asked for before that one started replaces its configuration. Until it is done the
        ticks have no answer to follow (the arm brakes, as after any reset)."""
        self._answer = self._kept = None
        q = self.chain.clip(self._state(to_solver_range(q, self.limits.continuous)))
        worker = self.worker
        if worker is None:
            self._solver.reset(q)
            return
        with self._reset_lock:
            queued, self._reset_to = self._reset_to is not None, q
        if not queued:
            worker.discard()
            worker.start(_RESET, self._reset_job)
            self.queued_resets += 1

    def forget_answer(self):
        """Follow no answer until the next step (a hold brakes instead)."""
        self._answer = None

    # ------------------------------------------------------------------ one tick
    def follow(self, q, v, goal, now, tick, new_goal):
        """Return (desired (n,), its velocity (n,) or None) for the tick ``tick`` at ``now``
        [s] from the command q, v (n,): the solver's new answer, or its last one (at rest,
        between steps, while a step runs on in the worker), or (None, None) without a goal
        or an answer yet (the shaper brakes). new_goal: a goal was taken this tick."""
        previous, self._answer = self._answer, None
        if goal is None:
            return None, None
        if self.goal_changes != self._changes_seen:     # the goal's values changed
            self._changes_seen, self._changed_at = self.goal_changes, now
        worker = self.worker
        if worker is not None and worker.pending:
            if not worker.done:
                return self._carry(previous, q, now)
            tag, result = worker.take()
            if tag is not _RESET and tag[1] == self.goal_changes:
                return self._take(result, q, previous, tag[0], goal)
            new_goal = True      # a reset, or a step for a goal replaced meanwhile: step now
        new_goal, self._owed = new_goal or self._owed, False
        if not new_goal and self._resting(previous, q, v, tick):
            self.skipped_steps += 1
            self._answer = previous
            return previous[0], None
        if not new_goal and self._between_steps(previous, tick):
            self.interpolated_ticks += 1
            return self._carry(previous, q, now)
        if self.held:           # only ever with a worker: without one it is always idle
            self._owed = new_goal
            return self._carry(previous, q, now)
        return self._step(q, goal, now, tick, previous)

    def _step(self, q, goal, now, tick, previous):
        """Step the solver now, in the tick or in the worker (``follow``)."""
        self._stepped = (tick, StateKey(constraints=self.constraints))
        state = self._state(q)
        set_references(self.constraints, state)
        worker = self.worker
        pins = tuple(getattr(self.figure, 'pins', ()))
        if worker is None or self.iterations_per_tick > 1:
            self.settle()
            if self.twins is not self.constraints:
                set_references(self.twins, state)
            result = None
            for _ in range(self.iterations_per_tick):
                result = self._step_job(self._solver, goal, now, pins=pins)
            return self._take(result, q, previous, now, goal)
        worker.start((now, self.goal_changes), self._step_job, self._solver, goal, now, state,
                     pins)
        if worker.wait(self.step_budget):
            _, result = worker.take()
            return self._take(result, q, previous, now, goal)
        self.steps_in_thread += 1
        return self._carry(previous, q, now)

    def _step_job(self, solver, goal, now, reference=None, pins=()):
        """One solver step and its observers (in the worker thread with ``solver_thread``);
        return (estimate, a copy of the solver's ``last_info`` after it, with ``settled``: the
        solver's own after the step, read here where it cannot change). ``reference``: the
        command the solver's constraint twins compare with (set here, in the worker, with a
        new snapshot of the scene, where side work cannot be reading them). ``pins``: the
        figure's pinned tips (hard Contacts), which the solver holds as the commands do: held
        to the goal's tolerance only, a pinned hand pulled back onto its pin by the command
        stream moved the other hand off its goal through a shared torso (issue 32)."""
        if pins != self._pins:
            solver.set_constraints(list(self.twins) + list(pins))
            self._pins = pins
        terms = goal.terms
        if pins:
            # A pinned tip's own term (its hold, or the goal it reached) goes: the pin keeps
            # it. Kept, a position-only pin's 4-DOF hand (Unitree H1) still asked for its
            # orientation too, and the other hand's answer stalled 4-5 mm off its goal.
            pinned = {pin.link for pin in pins}
            terms = tuple(term for term in terms
                          if getattr(term, 'link', None) not in pinned) or terms
        if reference is not None:
            for twin in self.twins:
                refresh = getattr(twin, 'refresh', None)
                if refresh is not None:
                    refresh()
            set_references(self.twins, reference)
        estimate = solver.step(terms)
        for observe in self.step_observers:
            observe(solver, goal, now)
        return estimate, dict(getattr(solver, 'last_info', None) or {},
                              settled=bool(getattr(solver, 'settled', False)))

    def _take(self, result, q, previous, stamp, goal):
        """Return (desired, velocity) from the (estimate, info) of a solver step for ``goal``
        started at ``stamp`` [s], and keep it as the answer (its info: the fallback
        candidates); an answer kept for the goal instead of it (module doc)."""
        estimate, self.step_info = result
        estimate = self.command(estimate)
        if estimate.shape != q.shape or not np.all(np.isfinite(estimate)):
            raise FloatingPointError(f'the solver returned a non-finite or misshapen '
                                     f'configuration {np.array2string(estimate, precision=3)}')
        continuous = self.limits.continuous
        desired = nearest_equivalent(estimate, q, continuous)
        if self.figure is not None and self.figure.active:
            # On what the commands keep (contacts, pinned tips): reached exactly, at rest;
            # an arm that serves pinned tips only is held where it is.
            desired = self.figure.on_manifold(desired, q)
        if self._wraps and np.any(continuous & (np.abs(estimate) > RECENTER)):
            # Restart the solver at the same configuration, wrapped into [-pi, pi): its
            # +-2 pi working range then always leaves at least a half turn each way (it
            # would stop at 2 pi, or come back the long way, after many turns one way).
            self.reset(estimate)
        desired = self._keep(goal, desired)
        desired_velocity = None
        if previous is not None and stamp - self._changed_at <= STILL_GOAL:
            # How fast the solver's answer moves (a tracked target): the shaper follows
            # it without braking onto it every tick (jumps are ignored by the shaper).
            desired_velocity = self.shaper.target_velocity(
                desired, nearest_equivalent(previous[0], desired, continuous),
                stamp - previous[1], previous[2])
        self._answer = (desired, stamp, desired_velocity)
        return desired, desired_velocity

    def _keep(self, goal, desired):
        """Return the answer kept for ``goal`` (same goal values, constraints and pins, no
        reset since), else ``desired`` (n,), kept from now on when it ``meets`` the goal."""
        key = (self.goal_changes, self.step_info.get('branch_switches'))
        constraints = StateKey(constraints=self.constraints)
        kept = self._kept
        if kept is not None and kept[0] == key and kept[1] == constraints and \
                kept[2] == self._pins:
            # (continuous joints: in the command's coordinate, which may have turned since)
            return nearest_equivalent(kept[3], desired, self.limits.continuous) \
                if self._wraps else kept[3]
        meets = self.meets is not None and self.meets(goal, desired)
        self._kept = (key, constraints, self._pins, desired) if meets else None
        return desired

    def _carry(self, previous, q, now):
        """Return (desired, velocity): the last answer carried on at its own velocity to
        ``now``, for ``FOLLOW_GAP`` at most (between solver steps), or (None, None) without
        one."""
        if previous is None:
            return None, None
        self._answer = previous
        desired, stamp, desired_velocity = previous
        if desired_velocity is not None:
            desired = desired + desired_velocity * min(now - stamp, FOLLOW_GAP)
        if self._wraps:      # the command may have followed a re-homed coordinate
            desired = nearest_equivalent(desired, q, self.limits.continuous)
        return desired, desired_velocity

    def _resting(self, previous, q, v, tick):
        """Return True when this tick's solver step may be skipped (``rest_step_interval``):
        the solver is settled (its step cannot change the answer), on the goal, solver and
        constraints of its last step, at most ``rest_step_interval - 1`` ticks ago, and the
        command rests exactly at that answer."""
        if self.rest_step_interval <= 1 or previous is None:
            return False
        stepped, key = self._stepped
        if tick - stepped >= self.rest_step_interval or v.any() or \
                not np.array_equal(q, previous[0]):
            return False
        # The solver itself: side work in the worker thread only reads it.
        return (bool(getattr(self._solver, 'settled', False))
                and key == StateKey(constraints=self.constraints))

    def _between_steps(self, previous, tick):
        """Return True when this tick falls between two solver steps (``step_interval``):
        the last tick followed the solver's answer, whose step was less than
        ``step_interval`` ticks ago on the same constraints."""
        if self.step_interval <= 1 or previous is None:
            return False
        stepped, key = self._stepped
        return (tick - stepped < self.step_interval
                and key == StateKey(constraints=self.constraints))

    def _state(self, q):
        """Return the solver's state (nq,) of the command q (C,)."""
        return np.asarray(q, dtype=float) if self.figure is None else self.figure.state(q)

    def command(self, q):
        """Return the commanded joints (..., C) of solver states (..., nq)."""
        q = np.asarray(q, dtype=float)
        return q if self.figure is None else self.figure.command(q)

    # ------------------------------------------------------------------ the worker
    def _reset_job(self):
        """A queued reset, in the worker: to the latest configuration asked for."""
        with self._reset_lock:
            q, self._reset_to = self._reset_to, None
        if q is not None:
            self._solver.reset(q)

    def drop_step(self):
        """Wait for a step running in the worker thread and drop its answer (the solver is
        reset or changed); an exception it raised is reported."""
        worker = self.worker
        if worker is None:
            return
        worker.settle()
        if not worker.pending:
            return
        try:
            worker.take()
        except Exception as exc:
            self._report_dropped(exc)

    def report_errors(self):
        """Report what side work and dropped steps raised in the worker since the last call."""
        if self.worker is None:
            return
        for exc in self.worker.side_errors():
            self.report('error', f'side:{type(exc).__name__}', (
                f'side work in the solver thread failed ({type(exc).__name__}: {exc}); '
                'the node keeps running'), exc)
        for exc in self.worker.dropped_errors():
            self._report_dropped(exc)

    def _report_dropped(self, exc):
        self.report('error', f'step:{type(exc).__name__}', (
            f'a solver step that was dropped (reset or change) had failed '
            f'({type(exc).__name__}: {exc}); the node keeps running'), exc)
