"""When the node does what, without ROS: the solver's step interval, the loop's settings from
the parameters, when markers are built or republished, how often point clouds are converted.
"""

import math

from ..solvers.base import StateKey

__all__ = ['STEP_BUDGET', 'LOOP_PARAMETERS', 'step_interval', 'step_budget',
           'apply_loop_settings', 'marker_key', 'MarkerSchedule', 'RateGate']

# A tick waits for the solver step it started at most this share of the control period
# (solver_thread) when the solver steps on every tick: a held goal's step (~0.3 ms) is taken
# in its own tick, a search step (3-8 ms) runs on beside the next ticks.
STEP_BUDGET = 0.3

# The parameters ``apply_loop_settings`` reads.
LOOP_PARAMETERS = frozenset((
    'rate_hz', 'solver_rate_hz', 'rest_step_interval', 'iterations_per_tick', 'goal_timeout',
    'position_tolerance', 'orientation_tolerance', 'collision_fallback_candidates',
    'collision_detour'))


def step_interval(rate_hz, solver_rate_hz):
    """Return every how many control ticks the solver steps: the fewest that keep it at or
    below ``solver_rate_hz`` [Hz] (0: every tick) at ``rate_hz`` [Hz]."""
    if solver_rate_hz <= 0.0 or solver_rate_hz >= rate_hz:
        return 1
    return max(1, math.ceil(rate_hz / solver_rate_hz - 1e-9))


def step_budget(rate_hz, every):
    """Return how long [s] a tick waits for the solver step it started (solver_thread):
    STEP_BUDGET of the period when the solver steps on every tick; none when the ticks
    between steps carry its answer on anyway (``every`` > 1: a step's answer one tick later
    is the design there, and waiting cost the tick its period at rate_hz 500)."""
    return STEP_BUDGET / rate_hz if every == 1 else 0.0


def apply_loop_settings(loop, values, changes=None):
    """Set the control loop's attributes from the parameter ``values`` {name: value}: the
    solver's step interval and rest interval (``rest_step_interval`` counts solver periods),
    the step budget, solver iterations per tick, the goal timeout, the goal tolerances, the
    collision fallback candidates and whether detours are planned. ``changes``: only the
    detour switch is applied when it changed (None: everything, as at start-up)."""
    every = step_interval(values['rate_hz'], values['solver_rate_hz'])
    loop.step_interval = every
    loop.rest_step_interval = int(values['rest_step_interval']) * every
    loop.step_budget = step_budget(values['rate_hz'], every)
    loop.iterations_per_tick = int(values['iterations_per_tick'])
    loop.inbox.goal_timeout = values['goal_timeout']
    loop.tolerances = (values['position_tolerance'], values['orientation_tolerance'])
    loop.fallback_candidates = int(values['collision_fallback_candidates'])
    if changes is not None and 'collision_detour' in changes:
        loop.set_detour_enabled(bool(values['collision_detour']))


def marker_key(loop, guard, drawn, listed, max_particles, cover):
    """Return what the markers are built from, as a StateKey (``MarkerSchedule``'s key).

    loop: ControlLoop (its solver, goal and command); guard: CollisionGuard (its constraint and
    scene); drawn: the constraint set's drawn obstacles; listed: the last published
    alternatives (BranchList or None); max_particles, cover: the marker parameters. While the
    solver is ``settled`` its rest steps do not change the particles: the step that settled
    it stands for it. The ghost arms count by what they show (the alternatives are
    republished every second as a new list with the same content)."""
    solver = loop.solver
    settled = bool(getattr(solver, 'settled', False))
    ghosts = (None if listed is None else
              (listed.q.tobytes(), tuple(r.within_tolerance for r in listed.records)))
    return StateKey((None if settled else solver.last_info, loop.goal, guard.constraint,
                     drawn, solver, *loop.constraints_kept),
                    (loop.q.tobytes(), None if loop.base is None else loop.base.tobytes(),
                     settled, ghosts, guard.scene.version, max_particles, cover))


class MarkerSchedule:
    """Whether a marker tick builds new messages, republishes the last ones, or does nothing.

    ``key``: anything comparable that stands for what the markers show (the node's
    ``marker_key``). A new key builds; the same key republishes the last messages, with a new
    stamp, once they are ``keepalive`` [s] old (for a late RViz: markers never expire), and
    otherwise skips (``skipped`` counts these ticks).
    """

    BUILD, REPUBLISH, SKIP = 'build', 'republish', 'skip'

    def __init__(self, keepalive=1.0):
        self.keepalive = float(keepalive)
        self.skipped = 0
        self._key = None
        self._sent = -math.inf

    def decide(self, key, now):
        """Return BUILD, REPUBLISH or SKIP for markers showing ``key`` at ``now`` [s]."""
        if self._key is None or key != self._key:
            return self.BUILD
        self.skipped += 1
        return self.REPUBLISH if now - self._sent >= self.keepalive else self.SKIP

    def sent(self, key, now):
        """Note that markers showing ``key`` were published at ``now`` [s]."""
        self._key, self._sent = key, now

    def republished(self, now):
        """Note that the last markers were published again at ``now`` [s]."""
        self._sent = now


class RateGate:
    """Let an event through at most ``rate_hz`` times a second (point-cloud conversions)."""

    def __init__(self, rate_hz):
        self.rate_hz = float(rate_hz)
        self._next = -math.inf

    def __call__(self, now):
        """Return True (and close the gate for 1 / rate_hz) when ``now`` [s] may pass."""
        if now < self._next:
            return False
        self._next = now + 1.0 / self.rate_hz
        return True
