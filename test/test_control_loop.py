"""The control loop without ROS: the real SMC solver, a simulated arm played by the test,
the arm state machine end to end, continuous joints, validators, shutdown braking and the
exception policy (a solver that raises at random: fault injection, not a mock)."""

import math
import types

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from arm_urdfs import dual_panda_urdf, ur5_like_urdf
from smcik_ros.control.arm_state import ArmSettings, ArmState
from smcik_ros.control.guard import HardConstraintValidator
from smcik_ros.control.limits import limits_for_chain
from smcik_ros.control.reporter import Reporter
from smcik_ros.control.shaping import LANDING
from smcik_ros.control.tick import ControlLoop, LoopSettings
from smcik_ros.collision import KeepOutSphere
from smcik_ros.goals import CenterOfMassPolygon, Constraint, Contact
from smcik_ros.goals.projection import project
from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.base import StateKey
from smcik_ros.solvers.smc import SmcSolver
from test_command_shaping import PROPERTY

DT = 0.01
SLACK = 1e-9


class Log:
    """Collects what the loop reports (the node would log it)."""

    def __init__(self):
        self.events = []

    def __call__(self, level, key, text, exc=None, interval=None, count=True):
        self.events.append((level, key, text, exc))

    def keys(self):
        return [key for _, key, _, _ in self.events]


class Stream:
    """Ticks a loop at ~100 Hz with jitter; records the commands like a judge would."""

    def __init__(self, loop, seed=0, jitter=0.2, dt=DT):
        self.loop = loop
        self.rng = np.random.default_rng(seed)
        self.jitter = jitter
        self.dt = dt
        self.t = 0.0
        self.commands = []           # Command objects, in order
        self.measured = []           # (t, q) the loop was fed, in order

    def measure(self, q, stamp=None):
        self.loop.on_joint_states(np.asarray(q, float), stamp, self.t)
        self.measured.append((self.t, np.asarray(q, float).copy()))

    def tick(self):
        self.t += self.dt * (1.0 + self.rng.uniform(-self.jitter, self.jitter))
        command = self.loop.tick(self.t)
        if command is not None:
            self.commands.append(command)
        return command

    def run(self, ticks, arm=None):
        """Tick ``ticks`` times; ``arm(stream)`` is called before each tick (plays the arm)."""
        for _ in range(ticks):
            if arm is not None:
                arm(self)
            self.tick()

    def segments(self):
        """Split the commands at resyncs (where the stream restarts from a measurement)."""
        out, current = [], []
        for c in self.commands:
            if c.limited_by == 'resync' and current:
                out.append(current)
                current = []
            current.append(c)
        if current:
            out.append(current)
        return out

    def worst_ratios(self, limits):
        """Max |v|/vmax and |a|/amax from positions and stamps, within each segment."""
        v_worst = a_worst = 0.0
        for seg in self.segments():
            t = np.array([c.stamp for c in seg])
            q = np.array([c.q for c in seg])
            if len(seg) < 2:
                continue
            v = np.diff(q, axis=0) / np.diff(t)[:, None]
            v_prev = np.vstack([np.zeros(q.shape[1]), v[:-1]])
            a = (v - v_prev) / np.diff(t)[:, None]
            v_worst = max(v_worst, float(np.max(np.abs(v) / limits.velocity)))
            a_worst = max(a_worst, float(np.max(np.abs(a) / limits.acceleration)))
        return v_worst, a_worst


def follower(delay=1):
    """An arm that is where it was commanded ``delay`` ticks ago (perfect tracking + lag)."""
    def arm(stream):
        if len(stream.commands) > delay:
            stream.measure(stream.commands[-1 - delay].q, stamp=stream.t)
        elif stream.commands:
            stream.measure(stream.commands[0].q, stamp=stream.t)
    return arm


@pytest.fixture(scope='module')
def arm7():
    return Chain.from_urdf('urdf/smcik_arm.urdf')


def make_loop(chain, solver=None, log=None, **arm_settings):
    limits, _ = limits_for_chain(chain, velocity_scale=0.5, max_acceleration=3.0)
    solver = solver or make_solver('smc', chain, seed=5)
    return ControlLoop(chain, solver, limits, ArmSettings(**arm_settings),
                       report=log or Log()), limits


def reachable_pose(chain, seed, near=None, spread=0.6):
    rng = np.random.default_rng(seed)
    span = chain.upper - chain.lower
    center = chain.neutral_configuration() if near is None else near
    q = np.clip(center + rng.uniform(-spread, spread, chain.n), chain.lower + 0.1 * span,
                chain.upper - 0.1 * span)
    return chain.fk(q)


# ---------------------------------------------------------------------- start
def test_nothing_before_joint_states_then_exactly_the_measurement(arm7):
    loop, _ = make_loop(arm7)
    stream = Stream(loop)
    stream.run(50)
    assert stream.commands == [] and loop.arm.state is ArmState.WAITING
    q0 = np.array([0.3, -0.2, 0.1, -1.2, 0.4, 1.0, -0.5])
    stream.measure(q0)
    first = stream.tick()
    assert first.state is ArmState.RESYNC and np.array_equal(first.q, q0)
    assert not np.any(first.v)
    assert stream.tick().state is ArmState.ACTIVE


def test_a_measurement_outside_the_limits_is_commanded_inside_with_a_warning(arm7):
    log = Log()
    loop, limits = make_loop(arm7, log=log)
    q0 = np.array([3.5, 0.0, 0.0, -1.0, 0.0, 1.0, 0.0])   # joint1 limit is 2.9
    loop.on_joint_states(q0, None, 0.0)
    command = loop.tick(0.01)
    assert command.q[0] == pytest.approx(2.9) and np.all(command.q[1:] == q0[1:])
    assert 'outside_limits' in log.keys()


def test_blind_start_is_a_simulation_opt_in(arm7):
    loop, _ = make_loop(arm7, start_without_joint_states=True, joint_states_timeout=0.2)
    stream = Stream(loop)
    stream.run(10)
    assert stream.commands == [], 'started before joint_states_timeout'
    stream.run(20)
    assert stream.commands and stream.commands[0].q == pytest.approx(
        np.where((arm7.lower <= 0) & (arm7.upper >= 0), 0.0, 0.5 * (arm7.lower + arm7.upper)))


# ---------------------------------------------------------------------- following goals
@pytest.mark.parametrize('seed', [1, 2, 3])
def test_goals_are_reached_within_every_limit_and_the_lead(arm7, seed):
    loop, limits = make_loop(arm7)
    stream = Stream(loop, seed=seed, jitter=0.3)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    for k in range(3):
        pose = reachable_pose(arm7, 10 * seed + k, near=stream.commands[-1].q)
        loop.offer_goal('pose', pose, '', None, stream.t)
        for _ in range(800):
            follower(delay=2)(stream)
            stream.tick()
            if loop.goal_reached:
                break
        assert loop.goal_reached, f'goal {k} not reached: {loop.goal_errors}'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    q = np.array([c.q for c in stream.commands])
    assert np.all(q >= limits.lower - 1e-12) and np.all(q <= limits.upper + 1e-12)
    leads = [np.max(np.abs(c.q - m)) for c, (_, m) in zip(stream.commands[1:],
                                                          stream.measured[1:])]
    assert max(leads) <= loop.arm.settings.max_lead + 1e-9
    assert loop.faults == 0 and loop.arm.resyncs == 1


class LateTimer(Stream):
    """A timer that fires late now and then (40-60 ms instead of 10, at random 30 % of the
    ticks) and catches up at once (the next tick 2-4 ms later), as a ROS timer on a busy
    machine does."""

    def tick(self):
        late = getattr(self, '_late', False)
        self._late = not late and self.rng.uniform() < 0.3
        self.dt = DT * (self.rng.uniform(4.0, 6.0) if self._late else
                        self.rng.uniform(0.2, 0.4) if late else 1.0)
        self.jitter = 0.0
        return super().tick()


@pytest.mark.parametrize('seed', range(12))
def test_a_timer_catching_up_after_a_late_tick_breaks_no_limit(arm7, seed):
    """A step lands on a still target or a position limit at a speed the next tick can stop
    from when that tick is at least ``LANDING`` times as long; a timer catching up after a
    late tick fires sooner (3 ms after 57 ms: Alex's shoulder took 7.2 rad/s^2 of 3 to stop
    at its limit). Such a tick publishes nothing, and every command keeps the velocity,
    acceleration and position limits, from the stamps, over goals with a joint on its upper
    limit. (Publishing them, 3 of these 12 seeds broke the acceleration limit, by up to
    2.3 times.)"""
    loop, limits = make_loop(arm7)
    stream = LateTimer(loop, seed=seed)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    rng = np.random.default_rng(seed)
    for _ in range(4):
        q = stream.commands[-1].q + rng.uniform(-0.8, 0.8, arm7.n)
        q[rng.integers(arm7.n)] = np.inf                # clipped: on its upper limit
        loop.offer_goal('pose', arm7.fk(np.clip(q, limits.lower, limits.upper)), '', None,
                        stream.t)
        for _ in range(600):
            follower(delay=1)(stream)
            stream.tick()
            if loop.goal_reached and np.all(stream.commands[-1].v == 0.0):
                break
        assert loop.goal_reached
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK, (v_ratio, a_ratio)
    q = np.array([c.q for c in stream.commands])
    assert np.all(q >= limits.lower - 1e-12) and np.all(q <= limits.upper + 1e-12)
    dt = np.diff([c.stamp for c in stream.commands])
    assert np.all(dt[1:] >= LANDING * dt[:-1] - 1e-12)


# ---------------------------------------------------------------------- stale and resync
def test_silent_arm_stops_within_timeout_plus_one_second_then_resyncs_far_away(arm7):
    loop, limits = make_loop(arm7, joint_states_timeout=0.5)
    stream = Stream(loop, seed=4)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    loop.offer_goal('pose', reachable_pose(arm7, 7, spread=1.2), '', None, stream.t)
    stream.run(60, follower(1))          # moving
    assert np.any(stream.commands[-1].v), 'the arm should be moving when it goes silent'
    silent_at = stream.t
    last_measured = stream.measured[-1][1]
    stream.run(250)                      # no joint_states for 2.5 s
    after = [c for c in stream.commands if c.stamp > silent_at]
    assert len(after) >= 240, 'the held command must keep being published'
    at_rest = [c for c in after if c.stamp >= silent_at + 0.5 + 1.0]
    assert at_rest and all(not np.any(c.v) for c in at_rest)
    assert all(np.array_equal(c.q, at_rest[0].q) for c in at_rest)
    assert max(np.max(np.abs(c.q - last_measured)) for c in after) <= 0.15 + 1e-9
    assert loop.arm.state is ArmState.STALE
    # The arm comes back 1.5 rad away (restarted elsewhere).
    far = last_measured.copy()
    far[0] += 1.5 if far[0] + 1.5 < arm7.upper[0] else -1.5
    stream.measure(far)
    back = stream.tick()
    assert back.state is ArmState.RESYNC and np.max(np.abs(back.q - far)) <= 0.05
    stream.run(200, lambda s: s.measure(far, stamp=s.t))     # the arm stays put there
    tail = [c for c in stream.commands if c.stamp > back.stamp]
    assert max(np.max(np.abs(c.q - far)) for c in tail) <= 0.25
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


def test_arm_moved_by_hand_resyncs_without_a_step_in_the_solver(arm7):
    log = Log()
    loop, _ = make_loop(arm7, log=log)
    stream = Stream(loop)
    q0 = arm7.neutral_configuration()
    stream.measure(q0)
    stream.tick()
    stream.run(10, lambda s: s.measure(q0, stamp=s.t))
    pushed = q0.copy()
    pushed[2] += 0.5
    stream.measure(pushed, stamp=stream.t)
    command = stream.tick()
    assert command.state is ArmState.RESYNC and np.array_equal(command.q, pushed)
    assert np.allclose(loop.solver.estimate, pushed)
    assert 'resync' in log.keys()


def test_a_clock_reset_restarts_the_stream_from_the_next_measurement(arm7):
    log = Log()
    loop, _ = make_loop(arm7, log=log)
    q0 = arm7.neutral_configuration()
    loop.on_joint_states(q0, None, 100.0)
    assert loop.tick(100.01) is not None
    assert loop.tick(100.005) is None and 'clock_stalled' in log.keys()   # a small step back
    assert loop.tick(3.0) is None and 'clock_reset' in log.keys()         # sim time restarted
    assert loop.arm.state is ArmState.WAITING and loop.tick(3.01) is None
    q1 = q0 + 0.05
    loop.on_joint_states(q1, 3.02, 3.02)
    restart = loop.tick(3.03)
    assert restart.state is ArmState.RESYNC and np.array_equal(restart.q, q1)


# ---------------------------------------------------------------------- continuous joints
def test_continuous_joint_at_seven_radians_is_commanded_unwrapped_the_short_way():
    chain = Chain.from_urdf(ur5_like_urdf(continuous=(1, 4, 6)), 'base_link', 'tool0')
    loop, limits = make_loop(chain)
    stream = Stream(loop, seed=8)
    q0 = np.array([7.0, -1.2, 1.0, 0.5, 1.2, 0.3])
    stream.measure(q0)
    first = stream.tick()
    assert first.q[0] == 7.0, 'the first command must be the measurement, not wrapped'
    assert -2 * math.pi <= loop.solver.estimate[0] <= 2 * math.pi
    # A goal 1 rad round joint1 from where the arm is.
    q_goal = q0.copy()
    q_goal[0] += 1.0
    loop.offer_goal('pose', chain.fk(q_goal), '', None, stream.t)
    for _ in range(1500):
        follower(1)(stream)
        stream.tick()
        if loop.goal_reached:
            break
    assert loop.goal_reached
    joint1 = np.array([c.q[0] for c in stream.commands])
    assert np.max(np.abs(np.diff(joint1))) <= limits.velocity[0] * 1.3 * DT + 1e-12
    assert np.max(np.abs(joint1 - 7.0)) < math.pi, 'took the long way round'
    assert loop.arm.resyncs == 1, 'wrapping caused a resync'


def test_many_turns_of_a_continuous_joint_in_one_direction_never_go_back_the_long_way():
    chain = Chain.from_urdf(ur5_like_urdf(continuous=(1,)), 'base_link', 'tool0')
    loop, _ = make_loop(chain)
    stream = Stream(loop, seed=2)
    q = np.array([0.5, -1.2, 1.0, 0.5, 1.2, 0.3])
    stream.measure(q)
    stream.tick()
    for k in range(1, 6):                  # five goals, each 1.5 rad further round joint1
        q_goal = q.copy()
        q_goal[0] += 1.5 * k
        loop.offer_goal('pose', chain.fk(q_goal), '', None, stream.t)
        for _ in range(1500):
            follower(1)(stream)
            stream.tick()
            if loop.goal_reached:
                break
        assert loop.goal_reached, f'goal {k} not reached'
        assert stream.commands[-1].q[0] == pytest.approx(0.5 + 1.5 * k, abs=0.02)
    joint1 = np.array([c.q[0] for c in stream.commands])
    assert joint1[-1] > 0.5 + 7.0, 'more than a full turn in one direction'
    assert np.min(np.diff(joint1)) > -0.05, 'the command went back round'
    assert np.all(np.abs(loop.solver.estimate[0]) <= math.pi + 0.3)


def test_a_driver_that_wraps_a_continuous_joint_is_followed_without_motion():
    chain = Chain.from_urdf(ur5_like_urdf(continuous=(1,)), 'base_link', 'tool0')
    log = Log()
    loop, _ = make_loop(chain, log=log)
    q0 = np.array([3.1, -1.2, 1.0, 0.5, 1.2, 0.3])
    loop.on_joint_states(q0, None, 0.0)
    loop.tick(0.01)
    wrapped = q0.copy()
    wrapped[0] -= 2 * math.pi                          # the same angle, reported as -3.18
    loop.on_joint_states(wrapped, None, 0.015)
    command = loop.tick(0.02)
    assert command.state is ArmState.ACTIVE, 'a wrapped coordinate is not a resync'
    assert command.q[0] == pytest.approx(wrapped[0]) and 'turns' in log.keys()
    assert loop.arm.resyncs == 1


def test_a_driver_that_wraps_between_solver_steps_changes_no_motion():
    """rate 500 Hz, solver every 5th tick, a goal across pi on a continuous joint whose driver
    reports angles in [-pi, pi): the command follows the wrapped coordinate also on the ticks
    between solver steps, so the motion is that of a driver that does not wrap, tick by tick
    (the last answer is carried over into the new coordinate, not chased a turn away)."""
    chain = Chain.from_urdf(ur5_like_urdf(continuous=(1,)), 'base_link', 'tool0')
    q0 = np.array([2.9, -1.2, 1.0, 0.5, 1.2, 0.3])
    q_goal = q0 + np.array([0.5, 0.1, -0.3, 0.0, 0.0, 0.0])
    runs = {}
    for wraps in (False, True):
        loop, limits = make_loop(chain, make_solver('smc', chain, seed=3))
        loop.step_interval = 5
        stream = Stream(loop, seed=3, dt=0.002)
        stream.measure(q0)
        stream.tick()
        loop.offer_goal('pose', chain.fk(q_goal), '', None, stream.t)
        for _ in range(600):
            q = stream.commands[-1].q.copy()
            if wraps:
                q[0] = (q[0] + math.pi) % (2 * math.pi) - math.pi
            stream.measure(q, stamp=stream.t)
            stream.tick()
        assert loop.goal_reached and loop.interpolated_ticks > 400
        runs[wraps] = np.array([c.q for c in stream.commands])
        if not wraps:       # (the wrapped run's positions jump by a turn: compared below)
            v_worst, a_worst = stream.worst_ratios(limits)
            assert v_worst <= 1.0 + 1e-6 and a_worst <= 1.0 + 1e-6, (v_worst, a_worst)
    plain, wrapped = runs[False], runs[True]
    assert np.max(plain[:, 0]) > math.pi + 0.2          # the goal is across the wrap
    turns = np.round((plain[:, 0] - wrapped[:, 0]) / (2 * math.pi))
    assert set(turns) == {0.0, 1.0}
    np.testing.assert_allclose(wrapped[:, 0] + 2 * math.pi * turns, plain[:, 0], atol=1e-9)
    np.testing.assert_allclose(wrapped[:, 1:], plain[:, 1:], atol=1e-9)


# ---------------------------------------------------------------------- never die
class RaisingSmc(SmcSolver):
    """The real SMC solver with faults injected at random (seeded) into step(); ``always``:
    step numbers (from 1) that fault whatever the draw."""

    def __init__(self, chain, rate, seed, always=()):
        super().__init__(chain)
        self.fault_rng = np.random.default_rng(seed)
        self.rate = rate
        self.always = frozenset(always)
        self.calls = 0
        self.raised = 0

    def step(self, goal):
        self.calls += 1
        draw = self.fault_rng.uniform()
        if draw < self.rate or self.calls in self.always:
            self.raised += 1
            kind = self.fault_rng.integers(3)
            if kind == 0:
                raise np.linalg.LinAlgError('SVD did not converge (injected)')
            if kind == 1:
                raise RuntimeError('injected fault')
            return np.full(self.chain.nq, np.nan)       # a non-finite estimate
        return super().step(goal)


@pytest.mark.parametrize('seed', [0, 1])
def test_a_solver_raising_at_random_never_stops_the_stream(arm7, seed):
    log = Log()
    solver = RaisingSmc(arm7, rate=0.15, seed=seed)
    loop, limits = make_loop(arm7, solver=solver, log=log)
    stream = Stream(loop, seed=seed)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    for k in range(3):
        pose = reachable_pose(arm7, 40 + 3 * seed + k, near=stream.commands[-1].q)
        loop.offer_goal('pose', pose, '', None, stream.t)
        for _ in range(3000):
            follower(1)(stream)
            command = stream.tick()
            assert command is not None, 'a tick published nothing'
            if loop.goal_reached:
                break
        assert loop.goal_reached, 'faults on 15 % of the ticks should slow a goal, not stop it'
    assert solver.raised > 20 and loop.faults == solver.raised
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert all(np.all(np.isfinite(c.q)) for c in stream.commands)
    faults = [e for e in log.events if e[1].startswith('tick:')]
    assert faults and all(level == 'error' for level, *_ in faults)
    assert 'braking to a stop' in faults[0][2] and faults[0][3] is not None


def test_reporter_logs_once_with_traceback_then_throttles_with_a_count():
    lines, clock = [], [0.0]
    report = Reporter(lambda level, text: lines.append((level, text)), interval=5.0,
                      clock=lambda: clock[0])
    try:
        raise RuntimeError('boom')
    except RuntimeError as exc:
        error = exc
    assert report('error', 'k', 'tick failed', error)
    for _ in range(10):
        clock[0] += 0.1
        assert not report('error', 'k', 'tick failed', error)
    clock[0] += 5.0
    assert report('error', 'k', 'tick failed', error)
    assert len(lines) == 2
    assert 'Traceback' in lines[0][1] and 'RuntimeError: boom' in lines[0][1]
    assert 'Traceback' not in lines[1][1] and '(10 more like this not logged)' in lines[1][1]
    assert Reporter.key_of('t', 'value 1.5 at 3') == Reporter.key_of('t', 'value -2e-3 at 4')


def test_a_failing_reporter_does_not_stop_the_loop(arm7):
    def broken(*args, **kwargs):
        raise ValueError('logger broken')
    loop, _ = make_loop(arm7, log=broken)
    loop.on_joint_states(arm7.neutral_configuration(), None, 0.0)
    assert loop.tick(0.01) is not None


# ---------------------------------------------------------------------- validators
def test_a_hard_constraint_is_never_entered_and_the_stop_is_within_limits(arm7):
    loop, limits = make_loop(arm7)
    validator = HardConstraintValidator(arm7)
    loop.validators.append(validator)
    q0 = arm7.neutral_configuration()
    goal_q = np.clip(q0 + np.array([0.8, 0.5, -0.4, 0.3, 0.0, -0.4, 0.2]), arm7.lower,
                     arm7.upper)
    start, goal = arm7.fk(q0)[:3, 3], arm7.fk(goal_q)[:3, 3]
    center = 0.5 * (start + goal)
    sphere = KeepOutSphere(center, 0.05, links=('tool0',))
    loop.set_constraints([sphere])
    assert validator.constraints == [sphere]
    stream = Stream(loop, seed=3)
    stream.measure(q0)
    stream.tick()
    loop.offer_goal('point', goal, '', None, stream.t)
    stream.run(600, follower(1))
    tips = arm7.fk(np.array([c.q for c in stream.commands]))[:, :3, 3]
    assert np.min(np.linalg.norm(tips - center, axis=1)) >= 0.05 - 1e-9
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert loop.guard.holds > 0


def test_a_hard_constraint_that_arrived_violated_passes_only_motion_that_reduces_it(arm7):
    """The centre of mass 0.3 m outside its support polygon: a motion that brings it closer
    passes, one that takes it farther (at any sample) is refused; a contact (a hard
    equality, projected by the command stream) is not sampled."""
    validator = HardConstraintValidator(arm7)
    q0 = arm7.neutral_configuration()
    com = arm7.center_of_mass(q0)[:2]
    polygon = com + np.array([[0.3, -0.05], [0.4, 0.0], [0.3, 0.05]])
    support = CenterOfMassPolygon(polygon=polygon).bind(arm7)
    validator.constraints = [support]
    assert support.violated(arm7.frames(q0))[0]
    rng = np.random.default_rng(0)
    moves = [arm7.clip(q0 + rng.uniform(-0.5, 0.5, 7)) for _ in range(40)]
    depth0 = support.residual(arm7.frames(q0))[0, 0]
    path_depth = [support.residual(arm7.frames(q0 + t * (m - q0)))[:, 0].max()
                  for m in moves for t in [np.linspace(0.0, 1.0, 16)[:, None]]]
    closer = [m for m, d in zip(moves, path_depth) if d <= depth0]
    farther = [m for m, d in zip(moves, path_depth) if d > depth0 + 1e-6]
    assert closer and farther
    assert all(validator(q0, m) for m in closer)
    assert not any(validator(q0, m) for m in farther)
    assert 'deeper into a hard constraint it violates' in validator.reason
    contact = Contact('tool0', pose=np.eye(4)).bind(arm7)     # violated everywhere
    validator.constraints = [contact]
    assert all(validator(q0, m) for m in farther), 'equalities are projected, not sampled'


# ---------------------------------------------------------------------- shutdown
def test_request_stop_brakes_to_rest_within_the_limits(arm7):
    loop, limits = make_loop(arm7)
    stream = Stream(loop, seed=6)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    loop.offer_goal('pose', reachable_pose(arm7, 3, spread=1.2), '', None, stream.t)
    stream.run(50, follower(1))
    assert np.any(stream.commands[-1].v)
    loop.request_stop()
    assert loop.stopping and not loop.stopped
    ticks = 0
    while not loop.stopped:
        follower(1)(stream)
        stream.tick()
        ticks += 1
        assert ticks < 200, 'braking is not bounded'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert loop.status(stream.t)['arm_state'] == 'stopping'
    idle, _ = make_loop(arm7)
    idle.request_stop()
    assert idle.stopped, 'nothing published yet: stopping is immediate'


def test_status_reports_state_lead_and_limits(arm7):
    loop, _ = make_loop(arm7)
    status = loop.status(0.0)
    assert status['arm_state'] == 'waiting' and status['commanding'] is False
    loop.on_joint_states(arm7.neutral_configuration(), None, 0.0)
    loop.tick(0.01)
    status = loop.status(0.02)
    assert status['arm_state'] == 'resync' and status['lead'] == 0.0
    assert status['limited_by'] == 'resync' and status['max_lead'] == 0.15
    assert set(status) >= {'velocity_ratio', 'acceleration_ratio', 'joint_states_age',
                           'resyncs', 'faults', 'goals_received', 'goals_superseded'}


# ---------------------------------------------------------------------- collision validators
class RandomRefusal:
    """A validator that refuses motions at random (fault injection, seeded) and records every
    motion it accepted."""

    def __init__(self, seed, share):
        self.rng = np.random.default_rng(seed)
        self.share = share
        self.accepted = []
        self.reason = 'refused at random'

    def __call__(self, q_from, q_to):
        ok = self.rng.uniform() >= self.share
        if ok:
            self.accepted.append((np.array(q_from, float), np.array(q_to, float)))
        return ok


def _on_segment(point, a, b, tol=1e-7):
    span = b - a
    length2 = float(span @ span)
    t = 0.0 if length2 == 0.0 else float((point - a) @ span) / length2
    return -tol <= t <= 1.0 + tol and np.max(np.abs(point - a - t * span)) <= tol


@pytest.mark.parametrize('share', [0.3, 0.8])
def test_every_move_lies_on_a_validated_motion_even_when_braking(arm7, share):
    """Whatever a validator refuses, each step q_k-1 -> q_k lies on one motion a validator
    accepted (braking stays on the validated line), and the limits hold."""
    loop, limits = make_loop(arm7)
    validator = RandomRefusal(seed=int(10 * share), share=share)
    loop.validators.append(validator)
    loop.fallback_candidates = 0          # refusals brake
    stream = Stream(loop, seed=4)
    q0 = arm7.neutral_configuration()
    stream.measure(q0)
    stream.tick()
    for k in range(3):
        loop.offer_goal('pose', reachable_pose(arm7, 40 + k, near=stream.commands[-1].q),
                        '', None, stream.t)
        stream.run(200, follower(1))
    assert loop.guard.holds > 0 and len(validator.accepted) > 0
    qs = [c.q for c in stream.commands if c.limited_by != 'resync']
    moves = 0
    for a, b in zip(qs[:-1], qs[1:]):
        if np.array_equal(a, b):
            continue
        moves += 1
        assert any(_on_segment(a, s, e) and _on_segment(b, s, e)
                   for s, e in validator.accepted[::-1]), 'a move left every validated motion'
    assert moves > 50
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


def _box_in_the_way(arm7, seed):
    """Return (loop, limits, guard, stream, goal): the demo arm at q0, a point goal 1.4 rad of
    joint 1 away, a 12 cm box on the straight motion between them, the guard validating."""
    from smcik_ros.collision import CollisionModel, Obstacle, self_collision_pairs
    from smcik_ros.control.collision_guard import CollisionGuard

    model = CollisionModel.from_urdf(arm7, 'urdf/smcik_arm.urdf')
    guard = CollisionGuard(model, self_collision_pairs(model, 'urdf/smcik_arm.srdf'))
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    q_goal = q0 + np.array([1.4, 0, 0, 0, 0, 0, 0])
    center = arm7.fk(0.5 * (q0 + q_goal))[:3, 3]
    pose = np.eye(4)
    pose[:3, 3] = center
    guard.scene.apply([('add', ('test', 1), Obstacle('box', (0.12, 0.12, 0.12), pose))],
                      'obstacles')
    assert not guard.constraint.check_motion(q0, q_goal)[0], 'the set-up: the path collides'
    loop, limits = make_loop(arm7, solver=make_solver('smc', arm7, seed=seed))
    loop.validators.append(guard)
    loop.set_constraints([guard.constraint])
    stream = Stream(loop, seed=seed - 1)
    stream.measure(q0)
    stream.tick()
    goal = arm7.fk(q_goal)[:3, 3]
    loop.offer_goal('point', goal, '', None, stream.t)
    return loop, limits, guard, stream, goal


def test_a_refused_estimate_falls_back_to_a_free_candidate_never_farther_from_the_goal(arm7):
    """The collision guard refuses the straight motion through a box; the loop moves towards
    another of the SMC's candidates instead of holding, and no move collides: after 400
    ticks the tool has made progress. Over seeded runs held at the box's margin: on every
    tick that took a fallback, the commanded tool is not farther from the goal than the
    command before it. (One set of runs for both: the same scenario, seeds 2-5.)"""
    fallbacks = 0
    for seed in range(2, 6):
        loop, limits, guard, stream, goal = _box_in_the_way(arm7, seed)
        for tick in range(500):
            before, previous = loop.guard.fallbacks, stream.commands[-1].q
            stream.run(1, follower(1))
            if loop.guard.fallbacks > before:
                fallbacks += 1
                was = np.linalg.norm(arm7.fk(previous)[:3, 3] - goal)
                now = np.linalg.norm(arm7.fk(stream.commands[-1].q)[:3, 3] - goal)
                assert now <= max(was, loop.guard.FALLBACK_NEAR) + loop.guard.FALLBACK_SLACK, \
                    (seed, loop.ticks, was, now)
            if tick == 399:
                _fell_back_freely(arm7, loop, limits, guard, stream, goal, seed)
    assert fallbacks >= 10, f'only {fallbacks} fallback ticks: the set-up did not test the rule'


def _fell_back_freely(arm7, loop, limits, guard, stream, goal, seed):
    """No move collides, the limits hold, fallbacks were taken and the tool got nearer."""
    qs = np.array([c.q for c in stream.commands])
    for a, b in zip(qs[:-1], qs[1:]):
        assert guard.constraint.check_motion(a, b)[0], f'seed {seed}: a move collides'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK, (seed, v_ratio, a_ratio)
    assert loop.guard.fallbacks > 0, (seed, loop.guard.fallbacks, loop.guard.holds)
    tips = arm7.fk(qs)[:, :3, 3]
    assert np.linalg.norm(tips[-1] - goal) < 0.8 * np.linalg.norm(tips[0] - goal), seed


@pytest.mark.parametrize('interval', [1, 10])
def test_a_long_hold_restarts_the_solver_every_interval_ticks(arm7, interval):
    loop, limits = make_loop(arm7)
    loop.hold_reset_interval = interval
    loop.fallback_candidates = 0
    loop.validators.append(RandomRefusal(seed=0, share=1.0))     # refuses every motion
    resets = []
    original = loop.solver.reset
    loop.solver.reset = lambda q: (resets.append(loop.ticks), original(q))
    stream = Stream(loop, seed=2)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    loop.offer_goal('pose', reachable_pose(arm7, 3), '', None, stream.t)
    before = len(resets)
    stream.run(50, follower(1))
    assert loop.guard.holds == 50
    assert len(resets) - before == math.ceil(50 / interval)
    assert all(np.array_equal(c.q, stream.commands[0].q) for c in stream.commands)


# ---------------------------------------------------------------------- settled at rest
def _settle_run(arm7, interval, ticks=400, constraints=()):
    loop, _ = make_loop(arm7)
    loop.rest_step_interval = interval
    if constraints:
        loop.set_constraints(list(constraints))
    steps = []
    original = loop.solver.step
    loop.solver.step = lambda goal: (steps.append(loop.ticks), original(goal))[1]
    stream = Stream(loop, seed=4)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    loop.offer_goal('pose', reachable_pose(arm7, 7), '', None, stream.t)
    stream.run(ticks, follower(1))
    return loop, stream, steps


def test_a_settled_solver_at_rest_steps_every_rest_step_interval_ticks_same_commands(arm7):
    every, stream_every, steps_every = _settle_run(arm7, 1)
    loop, stream, steps = _settle_run(arm7, 10)
    assert loop.goal_reached and loop.solver.settled and loop.skipped_steps > 100
    assert every.skipped_steps == 0 and len(steps_every) == every.ticks - 1
    # The skipped steps could not have changed the answer: the same commands, tick by tick.
    assert len(stream.commands) == len(stream_every.commands)
    for a, b in zip(stream.commands, stream_every.commands):
        assert np.array_equal(a.q, b.q) and np.array_equal(a.v, b.v)
    rest = stream.commands[-100:]
    assert all(np.array_equal(c.q, rest[0].q) and not np.any(c.v) for c in rest)
    recent = [t for t in steps if t > loop.ticks - 100]
    assert 9 <= len(recent) <= 11, recent
    # A new constraint set (or a scene change: its version), then a new goal: the next
    # ticks step the solver again.
    n = len(steps)
    far = arm7.fk(arm7.neutral_configuration())[:3, 3] + np.array([0.0, 0.0, 5.0])
    loop.set_constraints([KeepOutSphere(far, 0.01)])
    stream.run(1, follower(1))
    assert len(steps) == n + 1
    n = len(steps)
    loop.offer_goal('pose', reachable_pose(arm7, 8, near=stream.commands[-1].q), '', None,
                    stream.t)
    stream.run(5, follower(1))
    assert len(steps) == n + 5 and not loop.solver.settled


class _UnmetSoftTerm(Constraint):
    """A soft term no configuration can lower: it stands for a clearance the goal pose
    cannot keep (sphere covers within the clearance band at every solution of the goal)."""

    def __init__(self, value=0.3):
        self.value = value

    def bind(self, chain):
        self.sigma = np.ones(1)
        self._nv = chain.nv
        return self

    def residual(self, frames):
        return np.full((len(frames), 1), self.value)

    def jacobian(self, frames):
        return np.zeros((len(frames), 1, self._nv))

    @property
    def version(self):
        return self.value


def test_a_soft_cost_above_the_floor_still_lets_the_arm_rest(arm7):
    """The held particle's cost stays above the refinement's floor (an unmet soft term; the
    node's collision clearance near an obstacle or on conservative covers, say). Once its
    refinement moves it by rounding only, the filter has settled: the estimate stays put
    (before: it wandered by ~1e-7 rad a step, a solver step every tick, forever), the arm at
    rest skips solver steps, and the skipped steps could not have changed the answer: the
    same commands, tick by tick. A change of that cost wakes the refinement."""
    every, stream_every, _ = _settle_run(arm7, 1, constraints=[_UnmetSoftTerm()])
    term = _UnmetSoftTerm()
    loop, stream, steps = _settle_run(arm7, 10, constraints=[term])
    solver = loop.solver
    held = solver.state.particles[solver.state.estimate]
    cost = solver._model(solver._targets).cost(arm7.frames(held[None]))[0]
    assert cost > solver.settings.refine_min_cost
    assert loop.goal_reached and solver.settled and loop.skipped_steps > 100
    recent = [t for t in steps if t > loop.ticks - 100]
    assert 9 <= len(recent) <= 11, recent
    assert every.skipped_steps == 0 and every.solver.settled
    assert len(stream.commands) == len(stream_every.commands)
    for a, b in zip(stream.commands, stream_every.commands):
        assert np.array_equal(a.q, b.q) and np.array_equal(a.v, b.v)
    rest = stream.commands[-100:]
    assert all(np.array_equal(c.q, rest[0].q) and not np.any(c.v) for c in rest)
    # The soft cost changes (its version too, as a scene change would): the next tick steps
    # the solver, whose refinement runs on the new cost (not idle on the old one).
    term.value = 0.2
    n = len(steps)
    stream.run(1, follower(1))
    assert len(steps) == n + 1
    assert solver.policies.refinement.settled_cost == pytest.approx(0.04, abs=1e-6)


def test_goal_errors_kept_at_rest_are_those_of_the_published_command(arm7):
    """The goal errors are recomputed only when the goal or the command changed (a held goal
    at rest skips the forward kinematics): after every tick they are the errors of the
    command, bit for bit, through an approach, the rest, the same pose sent again, a point
    goal at the tool (same command, other errors) and a new pose."""
    loop, _ = make_loop(arm7)
    loop.rest_step_interval = 10
    stream = Stream(loop, seed=6)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    goals = {0: ('pose', reachable_pose(arm7, 7)), 300: ('pose', reachable_pose(arm7, 7)),
             350: ('point', None),    # at the tool: the command stays, the errors change
             400: ('pose', reachable_pose(arm7, 9, near=stream.commands[-1].q))}
    held = 0
    for k in range(600):
        if k in goals:
            kind, value = goals[k]
            value = arm7.fk(loop.q)[:3, 3] if value is None else value
            loop.offer_goal(kind, value, '', None, stream.t)
        before = loop.q.copy()
        stream.run(1, follower(1))
        frames = arm7.frames(loop.q)
        expected = tuple(float(v[0]) for v in loop.goal.terms[0].errors(frames))
        assert loop.goal_errors == expected, k
        held += bool(np.array_equal(before, loop.q))
    assert loop.goal_reached and held > 100, held


def test_state_key_compares_objects_by_identity_and_values_by_equality():
    """The key the rest skipping (and the markers and alternatives) rely on: an equal but
    different object, another value, or a constraint's new version is a change."""
    a, b = [1.0], [1.0]
    assert StateKey((a,), (1,)) == StateKey((a,), (1,))
    assert StateKey((a,), (1,)) != StateKey((b,), (1,))
    assert StateKey((a,), (1,)) != StateKey((a,), (2,))
    assert StateKey((a,), (1,)) != StateKey((a, a), (1,))
    constraint = types.SimpleNamespace(version=1)     # a constraint's version, changed
    key = StateKey(constraints=[constraint])
    assert key == StateKey(constraints=[constraint])
    constraint.version = 2
    assert key != StateKey(constraints=[constraint])

def test_a_goal_out_of_reach_comes_to_rest_like_a_reached_one(arm7):
    """A point 2 m away (the arm reaches 0.9 m): after the filter's online restarts on it
    (``online_restart_limit``) it rests, ``settled``, and the loop steps it only every
    ``rest_step_interval`` ticks while the command holds still at the best estimate; before
    the limit it was stepped (and re-seeded) on every tick for as long as the goal stood."""
    for seed, target in enumerate(([2.0, 0.0, 0.5], [-0.4, 1.6, 1.0])):
        loop, _ = make_loop(arm7, make_solver('smc', arm7, seed=seed, online_restart_limit=5))
        loop.rest_step_interval = 10
        stream = Stream(loop, seed=seed)
        stream.measure(arm7.neutral_configuration())
        stream.tick()
        loop.offer_goal('point', np.array(target), '', None, stream.t)
        stream.run(700, follower(1))
        assert loop.solver.resting and loop.solver.settled and not loop.goal_reached
        assert loop.skipped_steps > 100
        rest = stream.commands[-100:]
        assert all(np.array_equal(c.q, rest[0].q) and not np.any(c.v) for c in rest)


def test_rest_step_interval_is_validated(arm7):
    limits, _ = limits_for_chain(arm7, velocity_scale=0.5, max_acceleration=3.0)
    with pytest.raises(ValueError, match='rest_step_interval must be >= 1'):
        ControlLoop(arm7, make_solver('smc', arm7, seed=1), limits, rest_step_interval=0)
    with pytest.raises(ValueError, match='step_interval must be >= 1'):
        ControlLoop(arm7, make_solver('smc', arm7, seed=1), limits, step_interval=0)


# ---------------------------------------------------------------------- step_interval
def _interval_loop(arm7, seed, interval):
    """A loop at 500 Hz whose solver steps every ``interval`` ticks, its steps recorded."""
    loop, limits = make_loop(arm7, make_solver('smc', arm7, seed=seed))
    loop.step_interval = interval
    steps = []
    original = loop.solver.step
    loop.solver.step = lambda goal: (steps.append(loop.ticks), original(goal))[1]
    stream = Stream(loop, seed=seed, dt=0.002)
    stream.measure(arm7.neutral_configuration())
    stream.tick()
    return loop, limits, stream, steps


@pytest.mark.slow
def test_step_interval_steps_every_interval_ticks_within_the_limits(arm7):
    """rate 500 Hz, solver every 5th tick: one goal is followed with a step every 5 ticks
    exactly, a new goal and a new constraint set step at once, the commands keep the
    limits, and every goal is reached (4 seeds)."""
    for seed in range(4):
        loop, limits, stream, steps = _interval_loop(arm7, seed, 5)
        loop.offer_goal('pose', reachable_pose(arm7, 10 + seed), '', None, stream.t)
        stream.run(1500, follower(1))
        assert loop.goal_reached, seed
        assert set(np.diff(steps)) == {5}, (seed, steps[:20])
        assert loop.interpolated_ticks == 4 * (len(steps) - 1) + (loop.ticks - steps[-1]), seed
        n = len(steps)
        loop.offer_goal('pose', reachable_pose(arm7, 20 + seed, near=stream.commands[-1].q),
                        '', None, stream.t)
        stream.run(1, follower(1))
        assert steps[n:] == [loop.ticks], seed           # the new goal: stepped at once
        stream.run(2, follower(1))
        far = arm7.fk(arm7.neutral_configuration())[:3, 3] + np.array([0.0, 0.0, 5.0])
        loop.set_constraints([KeepOutSphere(far, 0.01)])
        stream.run(1, follower(1))
        assert steps[-1] == loop.ticks, seed             # the constraint change: at once
        stream.run(1500, follower(1))
        assert loop.goal_reached, seed
        v_worst, a_worst = stream.worst_ratios(limits)
        assert v_worst <= 1.0 + 1e-6 and a_worst <= 1.0 + 1e-6, (seed, v_worst, a_worst)


@pytest.mark.slow
def test_step_interval_follows_a_moving_target_at_its_velocity(arm7):
    """A pose goal moving at 5 cm/s, sent at 100 Hz to a 500 Hz loop: with the solver on
    every 5th tick the ticks in between carry its answer on at its velocity; the tool
    follows no worse than with a step on every tick (which sees the goal stand still for
    four ticks, then jump)."""
    lag = {1: [], 5: []}
    for interval in lag:
        for seed in range(4):
            loop, limits, stream, _ = _interval_loop(arm7, seed, interval)
            loop.offer_goal('pose', reachable_pose(arm7, 10 + seed), '', None, stream.t)
            stream.run(1500, follower(1))
            assert loop.goal_reached, (interval, seed)
            start = arm7.fk(stream.commands[-1].q)
            errors = []
            for k in range(1500):
                goal = start.copy()
                goal[:3, 3] += np.array([0.05, 0.0, 0.0]) * (0.002 * k)
                if k % 5 == 0:
                    loop.offer_goal('pose', goal, '', None, stream.t)
                stream.run(1, follower(1))
                if k >= 500:
                    tool = arm7.fk(stream.commands[-1].q)[:3, 3]
                    errors.append(np.linalg.norm(tool - goal[:3, 3]))
            lag[interval].append(float(np.median(errors)))
            v_worst, a_worst = stream.worst_ratios(limits)
            assert v_worst <= 1.0 + 1e-6 and a_worst <= 1.0 + 1e-6, (interval, seed)
    # Measured: every tick 2.5-4.1 mm; every 5th 0.03-0.35 mm (0.25-0.48 mm when the ticks
    # in between hold the last answer instead of carrying it on).
    assert np.median(lag[5]) <= min(np.median(lag[1]), 0.25e-3), lag


@pytest.mark.parametrize('seed', range(4))
def test_answers_under_a_still_goal_get_no_velocity(arm7, seed):
    """The damped 'jacobian' solver's answers move a step at a time towards a goal. While
    the goal changed within STILL_GOAL they are followed as a moving target (a tracked
    goal); once it is older, their motion is the solver converging and gets no velocity:
    carried on, it took TIAGo dual's tool 3.8 mm past a still goal at 120 mm/s. A goal that
    changes again (``goal_changes``, as the tick counts it) is followed as moving again."""
    from smcik_ros.control.goal_inbox import Goal
    from smcik_ros.control.stepping import STILL_GOAL
    from smcik_ros.goals import PoseTarget
    loop, _ = make_loop(arm7, solver=make_solver('jacobian', arm7, seed=seed))
    stepper = loop.stepper
    stepper.meets = None    # no answer kept: the velocities of converging answers are tested
    q = arm7.clip(0.5 * arm7.random_configuration(np.random.default_rng(seed)))
    pose = reachable_pose(arm7, seed + 200, near=q, spread=0.8)

    def goal(received):
        return Goal(terms=(PoseTarget(pose).bind(arm7),), display=None, source='test',
                    stamp=None, received=received, sequence=1, tips=('tool0',))

    stepper.reset(q)
    stepper.goal_changes += 1
    still = goal(0.0)
    moving, resting, dt = [], [], 0.01
    for tick in range(int(2 * STILL_GOAL / dt)):
        now = tick * dt
        desired, velocity = stepper.follow(q, np.zeros_like(q), still, now, tick, tick == 0)
        if tick and desired is not None:
            (moving if now <= STILL_GOAL else resting).append(velocity)
    assert sum(v is not None and np.any(v) for v in moving) > len(moving) // 2
    assert resting and all(v is None for v in resting)
    stepper.goal_changes += 1
    again = goal(2 * STILL_GOAL)
    seen = [stepper.follow(q, np.zeros_like(q), again, again.received + k * dt, 1000 + k,
                           k == 0)[1] for k in range(5)]
    assert any(v is not None and np.any(v) for v in seen[1:])


@pytest.mark.parametrize('seed', range(4))
def test_an_answer_that_meets_its_goal_is_kept_until_the_goal_or_solver_changes(arm7, seed):
    """The filter's later answers of a goal differ in the null space of a redundant arm;
    turning towards one late in the approach carried talos's hand through its goal and
    9.9 mm away (black box). Once an answer meets the goal within KEEP of the tolerances,
    the ticks follow it for the rest of the goal while the filter's own answer moves on; a
    reset, a new goal and a changed constraint set each end it."""
    from smcik_ros.control.goal_inbox import Goal
    from smcik_ros.control.stepping import KEEP
    from smcik_ros.goals import PoseTarget
    loop, _ = make_loop(arm7, solver=make_solver('smc', arm7, seed=seed))
    stepper = loop.stepper
    own = []
    stepper.step_observers.append(lambda solver, goal, now: own.append(solver.estimate.copy()))
    q = arm7.clip(0.5 * arm7.random_configuration(np.random.default_rng(seed)))
    pose = reachable_pose(arm7, seed + 300, near=q, spread=0.6)
    goal = Goal(terms=(PoseTarget(pose).bind(arm7),), display=None, source='test',
                stamp=None, received=0.0, sequence=1, tips=('tool0',))
    stepper.reset(q)
    stepper.goal_changes += 1

    def follow(ticks, start):
        return [stepper.follow(q, np.zeros_like(q), goal, 0.01 * k, k, k == start)[0]
                for k in range(start, start + ticks)]

    answers = follow(300, 0)
    meets = [bool(stepper.meets(goal, a)) for a in answers]
    assert any(meets), 'the filter never met the goal'
    first = meets.index(True)
    kept = answers[first]
    pos, ori = (float(e[0]) for e in goal.terms[0].errors(arm7.frames(kept)))
    assert pos <= KEEP * loop.tolerances[0] and ori <= KEEP * loop.tolerances[1]
    assert all(np.array_equal(a, kept) for a in answers[first:])
    assert any(np.max(np.abs(e - kept)) > 1e-9 for e in own[first + 1:]), \
        'the filter\'s own answer never moved on: nothing was kept'
    for release in (lambda: stepper.reset(q), lambda: setattr(
            stepper, 'goal_changes', stepper.goal_changes + 1),
            lambda: loop.set_constraints([KeepOutSphere([5.0, 5.0, 5.0], 0.1)])):
        release()
        fresh = follow(3, 1000)
        assert not np.array_equal(fresh[-1], kept)
        own.clear()


@pytest.mark.parametrize('seed', range(8))
def test_answers_far_apart_are_not_carried_on_past_the_goal(arm7, seed):
    """The solver answers only every 0.3 s (a slow step; here step_interval 30 at 100 Hz):
    a jump of its answer between two such steps is no motion to carry on. Taken as one (the
    jump over the gap), the ticks in between carried the answer past the goal and the tool
    went up to 23 mm beyond it after reaching it (4 of these 8 seeds past 1 mm); talos's
    hand went 9 mm past its goal when a step under load took a second."""
    loop, limits = make_loop(arm7, solver=make_solver('smc', arm7, seed=seed))
    loop.step_interval = 30
    stream = Stream(loop, seed=seed)
    rng = np.random.default_rng(seed)
    start = arm7.clip(0.5 * arm7.random_configuration(rng))
    stream.measure(start)
    stream.tick()
    goal = reachable_pose(arm7, seed + 100, near=start, spread=0.8)
    loop.offer_goal('pose', goal, '', None, stream.t)
    first = len(stream.commands)
    stream.run(600, follower(1))
    q = np.array([c.q for c in stream.commands[first:]])
    errors = np.linalg.norm(arm7.fk(q)[:, :3, 3] - goal[:3, 3], axis=1)
    reached = np.flatnonzero(errors <= 1e-3)
    assert len(reached) and errors[-1] <= 1e-3, 'not reached'
    assert errors[reached[0]:].max() <= 1e-3, \
        f'{1e3 * errors[reached[0]:].max():.2f} mm off the goal after reaching it'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


# ---------------------------------------------------------------------- every tick
class Arm:
    """A simulated arm: at the command ``delay`` ticks ago, never before the last restart
    (resync) of the stream, unless pushed by hand; ``silent``: its joint_states are lost."""

    def __init__(self, delay):
        self.delay = delay
        self.silent = False
        self.pushed = None
        self.measured = None          # (time, q) of the last joint_states sent

    def __call__(self, stream):
        if self.silent or not stream.commands:
            return
        start = max(i for i, c in enumerate(stream.commands) if c.limited_by == 'resync')
        q = stream.commands[max(start, len(stream.commands) - 1 - self.delay)].q
        if self.pushed is not None:
            q, self.pushed = self.pushed, None
        stream.measure(q, stamp=stream.t)
        self.measured = (stream.t, np.asarray(q, float).copy())


# (what happens, its value, then this many ticks: the arm follows, or is silent)
ACTIONS = st.tuples(st.sampled_from(['goal', 'goal', 'silence', 'push', 'solver', 'constraints']),
                    st.integers(0, 2 ** 16), st.integers(1, 60))


@pytest.fixture(scope='module')
def ur5c():
    return Chain.from_urdf(ur5_like_urdf(continuous=(1, 4, 6)), 'base_link', 'tool0')


@settings(PROPERTY, max_examples=PROPERTY.max_examples // 2)
@given(seed=st.integers(0, 2 ** 31 - 1), continuous=st.booleans(), delay=st.integers(0, 3),
       jitter=st.floats(0.0, 0.4), share=st.sampled_from([0.0, 0.3, 1.0]),
       actions=st.lists(ACTIONS, max_size=6))
def test_every_tick_keeps_the_limits_the_lead_and_the_validated_motions(
        arm7, ur5c, seed, continuous, delay, jitter, share, actions):
    """Random streams of goals, lost joint_states, hand pushes, solver switches and
    constraint changes, a validator refusing at random, then a stop: from the published
    positions and stamps, every command keeps the position, velocity and acceleration
    limits (the stream restarts only at a resync, exactly at the measurement); within the
    lead of the latest measurement unless a line brake was needed; every step on the last
    validated motion, which a validator accepted (or a resync set at the measurement); at
    rest once joint_states have been stale for the timeout plus the braking time; and at
    rest within the braking time after a stop."""
    chain = ur5c if continuous else arm7
    limits, _ = limits_for_chain(chain, velocity_scale=0.5, max_acceleration=3.0)
    arm_settings = ArmSettings()
    loop = ControlLoop(chain, make_solver('jacobian', chain, seed=seed % 997), limits,
                       arm_settings, report=Log(), settings=LoopSettings(fallback_candidates=4))
    validator = RandomRefusal(seed, share)
    loop.validators.append(validator)
    stream, arm = Stream(loop, seed=seed, jitter=jitter), Arm(delay)
    braking = float(np.max(limits.velocity / limits.acceleration))
    longest = 1.5 * DT * (1.0 + jitter)
    rng = np.random.default_rng(seed)
    stream.measure(chain.neutral_configuration())
    arm.measured = (stream.t, chain.neutral_configuration())

    def tick():
        segment, accepted, line_brakes = loop.guard.validated, len(validator.accepted), \
            loop.guard.line_brakes
        command = stream.tick()
        if command is None:
            return
        k = len(stream.commands) - 1
        seg = loop.guard.validated
        if command.limited_by == 'resync':
            assert np.array_equal(command.q, limits.clip(arm.measured[1])) and \
                not np.any(command.v), 'a restart not at rest at the measurement'
            assert np.array_equal(seg[0], command.q) and np.array_equal(seg[1], command.q)
            return
        previous = stream.commands[k - 1].q
        assert seg is segment or any(
            np.array_equal(seg[0], a) and np.array_equal(seg[1], b)
            for a, b in validator.accepted[accepted:]), 'validated without a check'
        assert _on_segment(previous, *seg) and _on_segment(command.q, *seg), \
            'a step left the validated motion'
        if loop.guard.line_brakes == line_brakes and loop.arm.complete:
            lead = np.max(loop.arm.lead(command.q))
            assert lead <= arm_settings.max_lead + 1e-9, f'lead {lead}'
        if stream.t - arm.measured[0] > arm_settings.joint_states_timeout + braking + \
                3 * longest:
            assert not np.any(command.v), 'moving on stale joint_states'

    tick()
    for kind, value, ticks in [('goal', seed % 2 ** 16, 60)] + actions:
        if kind == 'goal':
            loop.offer_goal('pose', reachable_pose(chain, value, near=stream.commands[-1].q),
                            '', None, stream.t)
        elif kind == 'push':
            pushed = stream.commands[-1].q.copy()
            pushed[value % chain.n] += 0.3 * rng.choice([-1.0, 1.0])
            arm.pushed = pushed
        elif kind == 'solver':
            loop.set_solver(make_solver(('jacobian', 'smc')[value % 2], chain, seed=value))
        elif kind == 'constraints':
            far = chain.fk(chain.neutral_configuration())[:3, 3] + np.array([0.0, 0.0, 5.0])
            loop.set_constraints([KeepOutSphere(far, 0.01)] if value % 2 else [])
        arm.silent = kind == 'silence'
        for _ in range(ticks):
            arm(stream)
            tick()
    arm.silent = False
    loop.request_stop()
    for _ in range(int(math.ceil(braking / (DT * (1.0 - jitter)))) + 3):
        arm(stream)
        tick()
        if loop.stopped:
            break
    assert loop.stopped, 'not at rest within the braking time after a stop'
    assert loop.faults == 0
    for segment in stream.segments():
        times = np.array([c.stamp for c in segment])
        q = np.array([c.q for c in segment])
        assert np.all(q >= limits.lower - 1e-12) and np.all(q <= limits.upper + 1e-12)
        if len(segment) > 1:
            v = np.diff(q, axis=0) / np.diff(times)[:, None]
            a = np.diff(np.vstack([np.zeros(chain.n), v]), axis=0) / np.diff(times)[:, None]
            assert np.max(np.abs(v) / limits.velocity) <= 1 + SLACK
            assert np.max(np.abs(a) / limits.acceleration) <= 1 + SLACK


# ---------------------------------------------------------------------- several tips
TWO_TIPS = 'test/urdf/two_tips.urdf'
TIPS = ('left_tool', 'right_tool')


@pytest.fixture(scope='module')
def two_tips():
    return Chain.from_urdf(TWO_TIPS, 'base_link', list(TIPS))


def _tip_positions(chain, commands):
    q = np.array([c.q for c in commands])
    return {tip: chain.fk(q, tip)[:, :3, 3] for tip in TIPS}


def _left_goal(chain, tip, seed, scale):
    """Run a loop from a random start (``scale`` of the range) to a goal on the left ``tip``
    whose new pose the left arm's joints alone reach (no torso); return (loop, limits,
    stream, start) once it is reached."""
    loop, limits = make_loop(chain, solver=make_solver('smc', chain, seed=seed))
    stream = Stream(loop, seed=seed)
    rng = np.random.default_rng(seed)
    start = chain.clip(scale * chain.random_configuration(rng))
    stream.measure(start)
    stream.tick()
    left = [chain.joint_index(n) for n in chain.joint_names if n.startswith('left_')]
    q_goal = start.copy()
    q_goal[left] = chain.clip(scale * chain.random_configuration(rng))[left]
    loop.offer_goal('pose', chain.fk(q_goal, tip), '', None, stream.t, tip=tip)
    for _ in range(1000):
        follower(1)(stream)
        stream.tick()
        if loop.goal_reached:
            break
    assert loop.goal_reached, f'left goal not reached: {loop.tip_errors}'
    return loop, limits, stream, start


def _started_at_random(chain, seed):
    """Return (loop, limits, stream, rng, start): an SMC loop on ``chain`` commanding from a
    random start (half the range), after its first tick."""
    loop, limits = make_loop(chain, solver=make_solver('smc', chain, seed=seed))
    stream = Stream(loop, seed=seed)
    rng = np.random.default_rng(seed)
    start = chain.clip(0.5 * chain.random_configuration(rng))
    stream.measure(start)
    stream.tick()
    return loop, limits, stream, rng, start


@pytest.mark.parametrize('seed', [1, 2])
def test_a_goal_on_one_tip_leaves_the_other_where_it_was(two_tips, seed):
    chain = two_tips
    loop, limits, stream, _ = _left_goal(chain, 'left_tool', seed, 0.6)
    right = _tip_positions(chain, stream.commands)['right_tool']
    drift = np.linalg.norm(right - right[0], axis=1)
    assert drift.max() < 2e-3, f'the right tool moved {1e3 * drift.max():.2f} mm'
    assert loop.figure.frozen is None, 'the torso moves both tools: no arm is held still'
    assert [round(e[0], 6) <= 1e-3 for e in loop.tip_errors] == [True, True]
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


@pytest.mark.parametrize('seed', [1, 2, 3, 4, 5, 6])
def test_the_solver_holds_a_pinned_tip_exactly_through_a_shared_torso(two_tips, seed):
    """A goal on the left tool that the torso must turn for, the right tool pinned: every
    answer of the solver keeps the right tool on its pin (to the projection's 0.01 of the
    tolerance), not only within the goal's 1 mm. Held to 1 mm, the command stream's
    projection back onto the pin turned the torso and moved the left tool off its goal for
    good (a simple humanoid stopped 1.39 mm short, issue 32)."""
    chain = two_tips
    loop, limits, stream, rng, start = _started_at_random(chain, seed)
    pin = Contact('right_tool', pose=chain.fk(start, 'right_tool')).bind(chain)
    q_goal, kept = project(chain, chain.clip(start + rng.uniform(-0.3, 0.3, chain.n)), [pin],
                           iterations=30)
    assert kept, 'no goal configuration keeps the right tool'
    loop.offer_goal('pose', chain.fk(q_goal, 'left_tool'), '', None, stream.t,
                    tip='left_tool')
    gaps = []
    for _ in range(1500):
        follower(1)(stream)
        stream.tick()
        if loop.stepper.estimate is not None:
            gaps.append(pin.errors(chain.frames(loop.stepper.estimate))[0][0])
        if loop.goal_reached:
            break
    assert loop.goal_reached, f'not reached: {loop.tip_errors}'
    assert max(gaps) <= 1e-5, f'an answer left the pin by {1e3 * max(gaps):.3f} mm'
    right = _tip_positions(chain, stream.commands)['right_tool']
    assert np.linalg.norm(right - right[0], axis=1).max() < 2e-3


@pytest.mark.parametrize('seed', [1, 2, 4, 7])
def test_a_tip_pinned_at_its_position_leaves_its_orientation_to_the_other_goal(two_tips,
                                                                               seed):
    """Both tools reach their goals, then a goal on the left tool that keeps the right
    tool's position but turns it (0.13-0.26 rad): the right tool, a 3-DOF arm, is pinned at
    its position only. The solver is not given the right tool's own goal term, and the goal
    counts as reached by the right tool's position: asked for its orientation too, the
    answers stopped 4-44 mm short of the left goal (0 of 8 seeds reached; Unitree H1's
    other hand 4-5 mm offline)."""
    chain = two_tips
    loop, limits, stream, rng, start = _started_at_random(chain, seed)
    for tip in TIPS:
        loop.offer_goal('pose', chain.fk(start, tip), '', None, stream.t, tip=tip)
    for _ in range(300):
        follower(1)(stream)
        stream.tick()
        if loop.goal_reached:
            break
    assert loop.goal_reached
    since = len(stream.commands)
    pin = Contact('right_tool', pose=chain.fk(start, 'right_tool'),
                  position_only=True).bind(chain)
    q_goal, kept = project(chain, chain.clip(start + rng.uniform(-0.5, 0.5, chain.n)), [pin],
                           iterations=30)
    assert kept
    loop.offer_goal('pose', chain.fk(q_goal, 'left_tool'), '', None, stream.t,
                    tip='left_tool')
    for _ in range(600):
        follower(1)(stream)
        stream.tick()
        if loop.goal_reached:
            break
    assert [(p.link, p.position_only) for p in loop.figure.pins] == [('right_tool', True)]
    assert loop.goal_reached, f'not reached: {loop.tip_errors}'
    assert loop.tip_errors[0][0] <= 1e-3 and loop.tip_errors[0][1] <= 1e-2
    assert loop.tip_errors[1][1] > 0.05, 'the right tool did not turn: not the case tested'
    right = _tip_positions(chain, stream.commands[since:])['right_tool']
    assert np.linalg.norm(right - right[0], axis=1).max() < 1e-3
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


@pytest.mark.parametrize('seed', [0, 3])
def test_an_arm_that_serves_only_a_held_tip_stays_still(seed):
    """Two independent 6-DOF arms (smcik_figure from its torso: a fixed-base dual arm): a
    goal on the left hand holds the right arm's joints exactly, not only the right hand
    within the pin's tolerance. Commanding the solver's drift in a held arm made the pin's
    projection pull it back every tick (baxter's 7-DOF arm: 3e-4 rad a tick, at the
    acceleration bound, so that the robot braked for seconds on its first goal; here the
    drift is micro-radians)."""
    chain = Chain.from_urdf('urdf/smcik_figure.urdf', 'torso', ['left_hand', 'right_hand'])
    loop, limits, stream, start = _left_goal(chain, 'left_hand', seed, 0.5)
    right = [chain.joint_index(n) for n in chain.joint_names if n.startswith('right_')]
    q = np.array([c.q for c in stream.commands])
    assert np.abs(q[:, right] - start[right]).max() == 0.0, 'the held arm moved'
    np.testing.assert_array_equal(np.flatnonzero(loop.figure.frozen), right)
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


@pytest.mark.parametrize('solver', ['jacobian', 'smc'])
def test_goals_on_alternate_hands_below_a_shared_torso_are_reached(solver):
    """A TIAGo-dual-like robot (a torso lift under two 7-DOF arms): six goals per seed, the
    hands in turn, each drawn by moving only that hand's arm (so the torso may stay). Every
    goal is reached within 10 s, the other hand stays within 2 mm, every command within the
    limits. Before, the held arm's answers drifted along its null space (the jacobian
    solver: 0.8 rad), and a held hand at rest within its pin's tolerance, but off it, on a
    near-singular arm asked more than the acceleration limit to correct in one tick: each
    step braked to rest, for the goal's whole 10 s (on that code, 3 of these 36 jacobian
    goals and 2 of the smc ones; TIAGo dual in the black box with the jacobian and distance
    solvers, and offline with smc)."""
    chain = Chain.from_urdf(dual_panda_urdf(), 'base_link', ['left_panda_hand',
                                                             'right_panda_hand'])
    tips = chain.tip_links
    limits = limits_for_chain(chain, velocity_scale=0.5, max_acceleration=3.0)[0]
    span = limits.upper - limits.lower
    inner = (limits.lower + 0.05 * span, limits.upper - 0.05 * span)
    missed = []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        loop = ControlLoop(chain, make_solver(solver, chain, seed=seed), limits,
                           ArmSettings(), report=Log())
        stream = Stream(loop, seed=seed)
        stream.measure(limits.clip(np.zeros(limits.n)))
        stream.tick()
        for goal in range(6):
            tip, other = tips[goal % 2], tips[1 - goal % 2]
            own = chain.moving(tip) & ~chain.moving(other)
            q = stream.commands[-1].q
            q_goal = q.copy()
            q_goal[own] = np.clip(q[own] + rng.uniform(-0.8, 0.8, own.sum()),
                                  inner[0][own], inner[1][own])
            loop.offer_goal('pose', chain.fk(q_goal, tip), '', None, stream.t, tip=tip)
            since = len(stream.commands)
            for _ in range(1000):
                follower(1)(stream)
                stream.tick()
                if loop.goal_reached:
                    break
            if not loop.goal_reached:
                missed.append((seed, goal, loop.tip_errors))
            held = chain.fk(np.array([c.q for c in stream.commands[since - 1:]]), other)[:, :3, 3]
            assert np.linalg.norm(held - held[0], axis=1).max() < 2e-3, (seed, goal)
        v_ratio, a_ratio = stream.worst_ratios(limits)
        assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert not missed, f'{len(missed)} of 36 goals not reached: {missed}'


def _two_tips_at_neutral(chain, seed):
    """A logged SMC loop on ``chain`` whose first command is at its neutral configuration:
    (log, loop, limits, stream, start)."""
    log = Log()
    loop, limits = make_loop(chain, solver=make_solver('smc', chain, seed=seed), log=log)
    stream = Stream(loop, seed=seed)
    start = chain.neutral_configuration()
    stream.measure(start)
    stream.tick()
    return log, loop, limits, stream, start


def test_a_new_goal_says_which_tips_move_on_to_an_earlier_goal_not_reached(two_tips):
    """Each tip keeps its goal until it is reached or released, also while a goal for
    another tip runs: the node says which ones move on (a judge or a user watching that
    hand sees it move during the other's goal), and nothing for a tip already there."""
    chain = two_tips
    log, loop, _, stream, start = _two_tips_at_neutral(chain, 4)
    left = [chain.joint_index(n) for n in chain.joint_names if n.startswith('left_')]
    far = start.copy()
    far[left] += 0.8                               # the left arm's own joints reach it
    far = chain.clip(far)
    loop.offer_goal('pose', chain.fk(far, 'left_tool'), '', None, stream.t, tip='left_tool')
    stream.run(5, follower(1))                     # left on its way, far from its goal
    assert not loop.goal_reached and loop.tip_errors[0][0] > 0.01
    loop.offer_goal('pose', chain.fk(start, 'right_tool'), '', None, stream.t,
                    tip='right_tool')
    stream.run(2, follower(1))
    kept = [text for _, key, text, _ in log.events if key == 'goal_kept']
    assert len(kept) == 1 and kept[0].startswith('left_tool keep(s) an earlier goal'), kept
    assert 'during goal 2' in kept[0] and 'targets/<tip>/pose releases' in kept[0]
    for _ in range(1500):
        stream.run(1, follower(1))
        if loop.goal_reached:
            break
    assert loop.goal_reached, loop.tip_errors
    loop.offer_goal('pose', chain.fk(start, 'right_tool'), '', None, stream.t,
                    tip='right_tool')               # left is there now: nothing to say
    stream.run(2, follower(1))
    assert len([key for key in log.keys() if key == 'goal_kept']) == 1


def _left_out_of_reach(chain, seed):
    """``_two_tips_at_neutral`` with the left tool sent 3 m out (out of reach)."""
    log, loop, limits, stream, start = _two_tips_at_neutral(chain, seed)
    away = chain.fk(start, 'left_tool')
    away[:3, 3] += (3.0, 0.0, 0.0)
    loop.offer_goal('pose', away, '', None, stream.t, tip='left_tool')
    return log, loop, limits, stream, start


def test_a_release_that_leaves_only_stalled_goals_rests_the_arm(two_tips):
    """The left tool stalled out of reach; the right one, holding, is released (an empty
    PoseStamped): the left is retired too (it holds where it is), so no tip has a goal and
    the arm rests. Before, that goal of holds only failed every tick (max() of no goal
    tips) and nothing was published (test_figure_dds, under load)."""
    from smcik_ros.control.goal_inbox import STALL_TIME
    chain = two_tips
    log, loop, limits, stream, start = _left_out_of_reach(chain, 5)
    stream.run(int(3 * STALL_TIME / stream.dt), follower(1))
    loop.release_goal('right_tool', stream.t)
    mark = len(stream.commands)
    stream.run(100, follower(1))
    assert len(stream.commands) - mark == 100, 'a command on every tick'
    assert not [e for e in log.events if e[0] == 'error'], log.events
    assert loop.goal is None
    stalled = [text for _, key, text, _ in log.events if key == 'goal_stalled']
    assert len(stalled) == 1 and stalled[0].startswith('left_tool came no nearer'), stalled
    assert all(np.isfinite(c.q).all() for c in stream.commands)
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert np.abs(stream.commands[-1].v).max() == 0.0, 'at rest'


def test_a_tip_stalled_short_of_its_goal_holds_when_another_tips_goal_comes(two_tips):
    """A tip that has come no nearer its goal for STALL_TIME (out of reach) holds where it
    is when another tip's goal arrives, instead of being dragged about by that goal's
    motion (40-55 mm on Talos in the black box); the node says so. A tip still closing in
    on its goal keeps it (the test above), and one stalled for less than STALL_TIME too."""
    from smcik_ros.control.goal_inbox import STALL_TIME
    chain = two_tips
    log, loop, limits, stream, start = _left_out_of_reach(chain, 5)
    stream.run(int(0.5 * STALL_TIME / stream.dt), follower(1))
    right_goal = chain.fk(start, 'right_tool')
    right_goal[:3, 3] += (0.0, 0.0, 0.02)
    loop.offer_goal('pose', right_goal, '', None, stream.t, tip='right_tool')
    stream.run(2, follower(1))
    assert loop.goal.tips[0] is not None, 'stalled for less than STALL_TIME: kept'
    assert not [key for key in log.keys() if key == 'goal_stalled']
    stream.run(int(3 * STALL_TIME / stream.dt), follower(1))
    assert loop.tip_errors[0][0] > 1.0
    loop.offer_goal('pose', chain.fk(stream.commands[-1].q, 'right_tool'), '', None,
                    stream.t, tip='right_tool')
    mark = len(stream.commands)
    stream.run(2, follower(1))
    stalled = [text for _, key, text, _ in log.events if key == 'goal_stalled']
    assert len(stalled) == 1 and stalled[0].startswith('left_tool came no nearer'), stalled
    assert loop.goal.tips[0] is None and loop.goal.tips[1] is not None
    assert [p.link for p in loop.figure.pins] == ['left_tool']
    for _ in range(1500):
        stream.run(1, follower(1))
        if loop.goal_reached:
            break
    assert loop.goal_reached, loop.tip_errors
    left = _tip_positions(chain, stream.commands[mark - 1:])['left_tool']
    drift = np.linalg.norm(left - left[0], axis=1).max()
    assert drift < 2e-3, f'the stalled left tool moved {1e3 * drift:.2f} mm'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


def test_both_tips_reach_then_a_release_rests_the_tree(two_tips):
    chain = two_tips
    loop, limits = make_loop(chain, solver=make_solver('smc', chain, seed=3))
    stream = Stream(loop, seed=3)
    rng = np.random.default_rng(11)
    start = chain.clip(0.5 * chain.random_configuration(rng))
    stream.measure(start)
    stream.tick()
    q_goal = chain.clip(start + rng.uniform(-0.4, 0.4, chain.n))
    poses = np.array([chain.fk(q_goal, tip) for tip in TIPS])
    loop.inbox.offer_poses(poses, '', None, stream.t, loop.current_state())
    for _ in range(1500):
        follower(1)(stream)
        stream.tick()
        if loop.goal_reached:
            break
    assert loop.goal_reached, f'not reached: {loop.tip_errors}'
    assert loop.goal.goal_tips == (0, 1)
    loop.release_goal('left_tool', stream.t)
    loop.release_goal('right_tool', stream.t)
    stream.run(100, follower(1))
    assert loop.goal is None and not np.any(stream.commands[-1].v), 'released: at rest'
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK


# ---------------------------------------------------------------------- floating base
@pytest.fixture(scope='module')
def biped():
    chain = Chain.from_urdf('test/urdf/biped.urdf', 'pelvis',
                            ['l_palm', 'r_palm', 'l_sole', 'r_sole'], floating_base=True)
    limits, _ = limits_for_chain(chain, velocity_scale=0.5, max_acceleration=3.0)
    return chain, limits


def _stance(limits, crouch=0.0):
    q = np.zeros(limits.n)
    for side in 'lr':
        for joint, value in (('hip_pitch', -0.3 - crouch), ('knee', 0.6 + 2 * crouch),
                             ('ankle_pitch', -0.3 - crouch)):
            q[limits.names.index(f'{side}_{joint}')] = value
    return q


def test_contacts_anchor_at_the_first_joint_states_and_a_resync_refits_the_base(biped):
    """The commands are the URDF joints, the base goes with each (Command.base); contacts set
    before any measurement wait, anchor at the first one (the base at initial_base_pose),
    and after a resync far away (a crouch measured) the base is fitted so that the feet are
    where they were."""
    chain, limits = biped
    start = np.eye(4)
    start[2, 3] = 0.944
    loop = ControlLoop(chain, make_solver('smc', chain, seed=2), limits,
                       ArmSettings(), report=Log(), base=start)
    feet = [Contact('l_sole').bind(chain), Contact('r_sole').bind(chain)]
    loop.set_constraints(feet)
    assert not any(f.anchored for f in feet), 'nothing measured yet'
    stream = Stream(loop, seed=2)
    stream.measure(_stance(limits))
    first = stream.tick()
    assert first.q.shape == (limits.n,) and np.array_equal(first.base, start)
    assert all(f.anchored for f in feet)
    anchored = [f.pose.copy() for f in feet]
    np.testing.assert_allclose(anchored[0], chain.fk(chain.with_base(first.q, start),
                                                    'l_sole'), atol=1e-12)
    stream.run(5, follower(1))
    stream.measure(_stance(limits, crouch=0.3))        # moved by hand: resync
    stream.tick()
    resync = stream.commands[-1]
    assert resync.limited_by == 'resync' and resync.base[2, 3] < 0.944 - 0.05
    state = chain.with_base(resync.q, resync.base)
    for foot, pose in zip(feet, anchored):
        np.testing.assert_allclose(chain.fk(state, foot.link), pose, atol=1e-9)


class _Recorded(HardConstraintValidator):
    """The real validator, recording the end of every motion it judges (by tick)."""

    def __init__(self, chain, loop):
        super().__init__(chain)
        self.loop, self.ends = loop, {}

    def __call__(self, q_from, q_to):
        self.ends.setdefault(self.loop.ticks, []).append(self.loop.figure.command(q_to))
        return super().__call__(q_from, q_to)


@pytest.mark.parametrize('seed', [1, 2, 3])
def test_the_guard_judges_the_command_as_it_is_published_onto_the_feet(biped, seed):
    """With two planted feet every command is projected onto them, which turns its velocity;
    the guard judges the motion to where the *published* command would stop (its straight
    end among the ends judged), so that a brake from it stays on what was judged (Unitree
    H1: judged from the command before its projection, the CoM stopped 10 mm past the end
    judged, beyond its margin). Every published command within the limits, the feet within
    their tolerance."""
    chain, limits = biped
    start = np.eye(4)
    start[2, 3] = 0.944
    loop = ControlLoop(chain, make_solver('smc', chain, seed=seed), limits, ArmSettings(),
                       report=Log(), base=start)
    recorded = _Recorded(chain, loop)
    loop.guard.validators.append(recorded)
    feet = [Contact('l_sole').bind(chain), Contact('r_sole').bind(chain)]
    loop.set_constraints(feet)
    stream = Stream(loop, seed=seed)
    stance = _stance(limits, crouch=0.1)
    stream.measure(stance)
    stream.tick()
    rng = np.random.default_rng(seed)
    q_goal = stance.copy()
    arm = [limits.names.index(n) for n in limits.names if n.startswith('l_') and
           ('shoulder' in n or 'elbow' in n)]
    q_goal[arm] += rng.uniform(-0.8, 0.8, len(arm))
    target = chain.fk(chain.with_base(limits.clip(q_goal), start), 'l_palm')
    loop.offer_goal('pose', target, '', None, stream.t, tip='l_palm')
    judged = turned = 0
    for _ in range(150):
        follower(1)(stream)
        command = stream.tick()
        if command is None or command.limited_by in ('resync', 'stop'):
            continue
        stop = loop.shaper.stopping_point(command.q, command.v)
        ends = recorded.ends.get(loop.ticks, [])
        assert any(np.allclose(end, stop, atol=1e-9) for end in ends), \
            f'tick {loop.ticks}: the published command\'s stop was not judged'
        judged += 1
        state = chain.with_base(command.q, command.base)
        assert max(float(np.abs(f.residual(chain.frames(state))).max()) for f in feet) < 1e-3
    v_worst, a_worst = stream.worst_ratios(limits)
    assert judged >= 50 and v_worst <= 1.0 + SLACK and a_worst <= 1.0 + SLACK
