"""Command shaping: limits on every tick (property tests over random streams), time-optimal
still-target moves, no overshoot, straight lines, continuous joints, MoveIt limit files.

Limits are checked the way a judge would: from the published positions and their stamps,
v_k = (q_k - q_{k-1}) / (t_k - t_{k-1}) and a_k = (v_k - v_{k-1}) / (t_k - t_{k-1}).
"""

import math
import os

from hypothesis import HealthCheck, example, given, settings, strategies as st
import numpy as np
import pytest

from smcik_ros.control.limits import (
    JointLimits, limits_for_chain, nearest_equivalent, parse_joint_limits_yaml,
    read_joint_limits_yaml, to_solver_range, wrap_to_pi)
from smcik_ros.control.shaping import LANDING, LIMITERS, CommandShaper, allowed_speed, brake_speed
from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain, JointSpec

RATE_DT = 0.01      # [s] nominal tick
TIGHT = 1e-9        # relative slack for floating point in the limit checks

# No example database (no files written). Derandomized: every run, CI's included, draws the
# same examples, so a red run is the code's and reruns the same; SMCIK_HYPOTHESIS_EXPLORE=1
# draws new ones (and five times as many) to look for counterexamples by hand.
EXPLORE = bool(os.environ.get('SMCIK_HYPOTHESIS_EXPLORE'))
PROPERTY = settings(max_examples=300 if EXPLORE else 60, deadline=None, database=None,
                    derandomize=not EXPLORE, suppress_health_check=[HealthCheck.too_slow])


def make_limits(n, rng, continuous=None, span=(0.5, 3.0)):
    lower = -rng.uniform(*span, n)
    upper = rng.uniform(*span, n)
    return JointLimits(names=tuple(f'j{i}' for i in range(n)), lower=lower, upper=upper,
                       velocity=rng.uniform(0.2, 3.0, n), acceleration=rng.uniform(0.5, 10.0, n),
                       continuous=np.zeros(n, bool) if continuous is None else continuous)


def judge(times, q, limits, v0=None):
    """Return (max |v|/vmax, max |a|/amax, max position excess) of a command stream.

    times (K,), q (K, n): the published stamps and positions; v0: the velocity before the
    first (zero: the stream starts at rest).
    """
    dt = np.diff(times)
    v = np.diff(q, axis=0) / dt[:, None]
    v_prev = np.vstack([np.zeros(q.shape[1]) if v0 is None else v0, v[:-1]])
    a = (v - v_prev) / dt[:, None]
    excess = np.max(np.maximum(q - limits.upper, limits.lower - q))
    return (float(np.max(np.abs(v) / limits.velocity)),
            float(np.max(np.abs(a) / limits.acceleration)), float(excess))


def run_still_target(shaper, q0, target, dts):
    """Run from rest at q0 to a still target with tick lengths ``dts``; return (t, q, v)."""
    q, v = np.array(q0, float), np.zeros(len(q0))
    times, qs, vs = [0.0], [q.copy()], [v.copy()]
    for dt in dts:
        out = shaper.step(q, v, dt, target)
        q, v = out.q, out.v
        times.append(times[-1] + dt)
        qs.append(q.copy())
        vs.append(v.copy())
        if np.array_equal(q, target) and not np.any(v):
            break
    return np.array(times), np.array(qs), np.array(vs)


# ---------------------------------------------------------------------- basics
def test_allowed_speed_adds_an_exact_landing_and_stays_monotone():
    a, dt = 3.0, 0.01
    d = np.linspace(0.0, 0.01, 2001)
    w = allowed_speed(d, a, dt)
    assert np.all(np.diff(w) >= 0.0), 'a longer distance must never allow less speed'
    assert np.all(w >= brake_speed(d, a, dt)) and np.all(w * dt <= d + 1e-15)
    tiny = LANDING * a * dt * dt
    assert allowed_speed(tiny, a, dt) == pytest.approx(tiny / dt)   # lands in one step


def test_brake_speed_solves_the_discrete_braking_equation():
    rng = np.random.default_rng(0)
    d, a, dt = rng.uniform(0, 2, 100), rng.uniform(0.1, 10, 100), rng.uniform(1e-3, 0.05, 100)
    w = brake_speed(d, a, dt)
    assert np.allclose(w * dt + w * w / (2 * a), d, rtol=1e-12, atol=1e-15)
    assert brake_speed(0.0, 3.0, 0.01) == 0.0 and brake_speed(-1.0, 3.0, 0.01) == 0.0
    assert brake_speed(np.inf, 3.0, 0.01) > 1e6     # unbounded: far above any velocity limit
    # Tiny distances: no cancellation (the naive sqrt form returns 0 or garbage here).
    assert brake_speed(1e-14, 3.0, 0.01) == pytest.approx(1e-12, rel=1e-6)


def test_braking_from_any_allowed_speed_never_overshoots_whatever_the_tick_lengths():
    """The induction behind every braking constraint: a speed allowed now can be braked at
    the acceleration limit with ticks of any length and stops within the distance."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        a, d, dt = rng.uniform(0.5, 10), rng.uniform(0.0, 1.0), rng.uniform(0.002, 0.03)
        w = float(brake_speed(d, a, dt))
        left = d - w * dt
        while w > 0:
            h = rng.uniform(0.002, 0.03)
            w = max(w - a * h, 0.0)
            left -= w * h
        assert left >= -1e-12


def test_sqrt_2ad_alone_overshoots_by_a_tick():
    """Why the tick's own motion is in the braking distance: v = sqrt(2 a d) overshoots."""
    a, dt, d = 3.0, 0.01, 0.2
    naive = math.sqrt(2 * a * d)
    travelled = naive * dt + naive ** 2 / (2 * a)
    assert travelled > d + 0.5 * naive * dt
    ours = float(brake_speed(d, a, dt))
    assert ours * dt + ours ** 2 / (2 * a) == pytest.approx(d)


def test_joint_limits_validation_names_the_joint():
    with pytest.raises(ParameterError, match='acceleration limits must be finite and > 0.*j1'):
        JointLimits(names=('j0', 'j1'), lower=[-1, -1], upper=[1, 1], velocity=[1, 1],
                    acceleration=[1, 0], continuous=[False, False])
    with pytest.raises(ParameterError, match=r'lower <= upper.*j0 \[1, -1\]'):
        JointLimits(names=('j0',), lower=[1], upper=[-1], velocity=[1], acceleration=[1],
                    continuous=[False])
    with pytest.raises(ParameterError, match='one value per joint'):
        JointLimits(names=('j0',), lower=[1, 2], upper=[2], velocity=[1], acceleration=[1],
                    continuous=[False])
    limits = JointLimits(names=('c',), lower=[-6.28], upper=[6.28], velocity=[1],
                         acceleration=[1], continuous=[True])
    assert limits.lower[0] == -np.inf and limits.upper[0] == np.inf


def test_dt_must_be_positive():
    shaper = CommandShaper(make_limits(2, np.random.default_rng(0)))
    with pytest.raises(ValueError, match='dt must be a finite time > 0'):
        shaper.step(np.zeros(2), np.zeros(2), 0.0, np.ones(2))


# ---------------------------------------------------------------------- still targets
@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7),
       jitter=st.floats(0.0, 0.3))
def test_still_target_time_optimal_no_overshoot_straight(seed, n, jitter):
    """From rest to a still target: within +-10 % of the synchronized time-optimal
    trapezoid (moves of at least 25 ticks), on the straight line, never past the target,
    every limit held on every tick, whatever the timer jitter."""
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng, span=(2.0, 3.0))
    shaper = CommandShaper(limits)
    q0 = rng.uniform(limits.lower, limits.upper)
    target = rng.uniform(limits.lower, limits.upper)
    optimal = shaper.trapezoid_time(q0, target)
    if optimal < 25 * RATE_DT:     # too short for +-10 % at 100 Hz (1 tick = 4 %)
        target = q0 + (target - q0) * (25 * RATE_DT / optimal) ** 2
    # Some joints aim exactly at a position limit (targets clipped by a solver often do).
    at_limit = rng.uniform(size=n) < 0.3
    target = np.where(at_limit, np.where(target > q0, limits.upper, limits.lower), target)
    target = np.clip(target, limits.lower, limits.upper)
    optimal = shaper.trapezoid_time(q0, target)
    dts = RATE_DT * (1.0 + rng.uniform(-jitter, jitter, 100000))
    times, qs, vs = run_still_target(shaper, q0, target, dts)
    assert np.array_equal(qs[-1], target), 'target not reached exactly'
    # The simulated stamp of arrival (the shaper's own clock, not the wall clock).
    arrival = times[np.flatnonzero(np.all(qs == target, axis=1))[0]]
    if optimal >= 25 * RATE_DT:
        assert 0.9 * optimal <= arrival <= 1.1 * optimal, (arrival, optimal)
    v_ratio, a_ratio, excess = judge(times, qs, limits)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT and excess <= 0.0
    e = target - q0
    progress = (qs - q0) @ e / (e @ e)
    assert np.all(np.diff(progress) >= -1e-12), 'the command went backwards'
    assert progress.max() <= 1.0 + 1e-12, 'overshoot past the target'
    off_line = np.linalg.norm((qs - q0) - progress[:, None] * e, axis=1)
    assert off_line.max() <= 1e-9 * (1.0 + np.linalg.norm(e)), 'the path left the line'


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7),
       jitter=st.floats(0.0, 0.3))
def test_an_approach_share_brakes_onto_a_still_target_at_that_share(seed, n, jitter):
    """``approach`` 0.5 (the loop's while commands are projected onto contacts): from rest to
    a still target, the stream speeds up at the full acceleration and brakes at half of it:
    within +-10 % of that trapezoid's time, never past the target, every limit held."""
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng, span=(2.0, 3.0))
    shaper = CommandShaper(limits)
    shaper.approach = 0.5
    q0 = rng.uniform(limits.lower, limits.upper)
    e = rng.uniform(limits.lower, limits.upper) - q0
    alpha = float(np.min(limits.acceleration / np.abs(e)))     # path units, distance 1
    cruise = float(np.min(limits.velocity / np.abs(e)))
    peak = min(cruise, math.sqrt(2.0 * alpha * 0.5 / 1.5))
    expected = peak / alpha + peak / (0.5 * alpha) + (1.0 - peak ** 2 / (2.0 * alpha)
                                                      - peak ** 2 / alpha) / peak
    if expected < 25 * RATE_DT:
        return                      # too short for +-10 % at 100 Hz
    dts = RATE_DT * (1.0 + rng.uniform(-jitter, jitter, 100000))
    times, qs, _ = run_still_target(shaper, q0, q0 + e, dts)
    assert np.array_equal(qs[-1], q0 + e), 'target not reached exactly'
    arrival = times[np.flatnonzero(np.all(qs == q0 + e, axis=1))[0]]
    assert 0.9 * expected <= arrival <= 1.1 * expected, (arrival, expected)
    v_ratio, a_ratio, excess = judge(times, qs, limits)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT and excess <= 0.0
    progress = (qs - q0) @ e / (e @ e)
    assert np.all(np.diff(progress) >= -1e-12) and progress.max() <= 1.0 + 1e-12


def test_trapezoid_and_triangle_times_match_the_closed_forms():
    limits = JointLimits(names=('a', 'b'), lower=[-10, -10], upper=[10, 10],
                         velocity=[1.0, 1.0], acceleration=[2.0, 2.0], continuous=[0, 0])
    shaper = CommandShaper(limits)
    # Trapezoid: d = 3 at v 1, a 2: accel 0.5 s each way over 0.25 m, cruise 2.5 s.
    assert shaper.trapezoid_time([0, 0], [3, 1]) == pytest.approx(3.5)
    # Triangle: d = 0.25 < v^2 / a = 0.5: 2 sqrt(d / a).
    assert shaper.trapezoid_time([0, 0], [0.25, 0]) == pytest.approx(2 * math.sqrt(0.125))


def test_target_outside_the_limits_stops_at_the_limit_within_the_acceleration():
    limits = JointLimits(names=('a',), lower=[-1.0], upper=[1.0], velocity=[2.0],
                         acceleration=[3.0], continuous=[False])
    shaper = CommandShaper(limits)
    times, qs, _ = run_still_target(shaper, [0.0], np.array([5.0]), [RATE_DT] * 400)
    v_ratio, a_ratio, excess = judge(times, qs, limits)
    assert excess <= 0.0 and a_ratio <= 1 + TIGHT and v_ratio <= 1 + TIGHT
    assert qs[-1, 0] == pytest.approx(1.0, abs=1e-9)


# ---------------------------------------------------------------------- random streams
def _follow(m, v_arm, target, v_max, a_max, dt, overshoot=True):
    """A simulated arm: follows its target within its own velocity/acceleration limits.

    overshoot=False: it never moves past its target (a well-tuned position controller);
    True: it may (the target moves while it brakes), like a sloppy one.
    """
    error = target - m
    want = np.sign(error) * np.minimum.reduce([v_max, np.sqrt(2 * a_max * np.abs(error)),
                                               np.abs(error) / dt])
    v_arm = np.clip(v_arm + np.clip(want - v_arm, -a_max * dt, a_max * dt), -v_max, v_max)
    m_new = m + v_arm * dt
    if not overshoot:
        past = np.sign(target - m_new) != np.sign(error)
        m_new = np.where(past, target, m_new)
        v_arm = np.where(past, 0.0, v_arm)
    return m_new, v_arm


def _random_stream(seed, n, jitter, delay, arm_speed, max_lead, overshoot, ticks=300):
    """Run the shaper on a random desired stream against a lagging, freezing arm.

    Returns (limits, times (K,), commands (K, n), leads (K-1,), limiters used).
    """
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng)
    shaper = CommandShaper(limits)
    q = rng.uniform(limits.lower, limits.upper)
    v = np.zeros(n)
    arm_q, arm_v = q.copy(), np.zeros(n)
    history = [q.copy()] * (delay + 1)
    desired = q.copy()
    times, qs, leads, used = [0.0], [q.copy()], [], set()
    frozen = 0
    for _ in range(ticks):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        if rng.uniform() < 0.05:        # a new goal: anywhere, sometimes beyond the limits
            desired = rng.uniform(limits.lower - 1.0, limits.upper + 1.0)
        elif rng.uniform() < 0.3:       # a drifting goal
            desired = desired + rng.normal(0.0, 0.02, n)
        if frozen == 0 and rng.uniform() < 0.01:
            frozen = rng.integers(10, 60)   # the arm stops answering for a while
        measured = arm_q.copy()
        out = shaper.step(q, v, dt, desired, (measured - max_lead, measured + max_lead))
        used.add(out.limited_by)
        leads.append(float(np.max(np.abs(out.q - measured))))
        q, v = out.q, out.v
        times.append(times[-1] + dt)
        qs.append(q.copy())
        history.append(q.copy())
        if frozen:
            frozen -= 1
        else:
            arm_q, arm_v = _follow(arm_q, arm_v, history[-1 - delay],
                                   arm_speed * limits.velocity, 2.0 * limits.acceleration, dt,
                                   overshoot)
    return limits, np.array(times), np.array(qs), np.array(leads), used


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7),
       jitter=st.floats(0.0, 0.5), delay=st.integers(0, 5),
       arm_speed=st.floats(0.3, 1.5), max_lead=st.floats(0.02, 0.3), overshoot=st.booleans())
def test_random_target_streams_never_exceed_a_limit(seed, n, jitter, delay, arm_speed,
                                                    max_lead, overshoot):
    """Random desired configurations (jumps, drifts, far outside the limits), random tick
    lengths, random limits, an arm that lags, overshoots and freezes at random: positions,
    velocities and accelerations computed from the stamps stay within the limits on every
    tick."""
    limits, times, qs, _, used = _random_stream(seed, n, jitter, delay, arm_speed, max_lead,
                                                overshoot)
    v_ratio, a_ratio, excess = judge(times, qs, limits)
    assert v_ratio <= 1 + TIGHT, f'velocity {v_ratio:.6f} x the limit'
    assert a_ratio <= 1 + TIGHT, f'acceleration {a_ratio:.6f} x the limit'
    assert excess <= 1e-12, f'position limit exceeded by {excess}'
    assert used <= set(LIMITERS)


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7),
       jitter=st.floats(0.0, 0.5), delay=st.integers(0, 5),
       arm_speed=st.floats(0.3, 1.5), max_lead=st.floats(0.02, 0.3))
def test_random_target_streams_stay_near_max_lead_of_a_lagging_arm(seed, n, jitter, delay,
                                                                   arm_speed, max_lead):
    """The same streams against an arm that lags (delay, its own speed), freezes, and never
    runs past what it was commanded: the command never runs away from it. The lead is a
    braking constraint on a box that moves with the arm, so it holds exactly while the arm
    stands still or follows (test below); when the command reverses, a lagging arm still
    moves the old way for a moment and can carry the box past the command by at most its
    own stopping distance plus what it replays of the delay."""
    limits, _, _, leads, _ = _random_stream(seed, n, jitter, delay, arm_speed, max_lead,
                                            False)
    v_arm = arm_speed * limits.velocity
    own_motion = np.max(v_arm ** 2 / (2 * 2.0 * limits.acceleration)
                        + (delay + 1) * 1.5 * RATE_DT * v_arm)
    assert leads.max() <= max_lead + own_motion + 1e-9, \
        f'lead {leads.max():.4f} > max_lead {max_lead} + {own_motion:.4f}'


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 6), jitter=st.floats(0.0, 0.5))
def test_a_frozen_arm_keeps_the_command_within_max_lead(seed, n, jitter):
    """The arm stops dead while the command cruises: the command brakes inside the lead box
    (a braking constraint, not a clip) and holds there, within the acceleration limit."""
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng, span=(3.0, 4.0))
    shaper = CommandShaper(limits)
    max_lead = 0.15
    q = np.zeros(n)
    v = np.zeros(n)
    arm = q.copy()
    desired = rng.uniform(-3.0, 3.0, n)
    times, qs, freeze_at = [0.0], [q.copy()], int(rng.integers(5, 80))
    for k in range(300):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        if k < freeze_at:
            arm = q.copy()       # following closely until it freezes
        out = shaper.step(q, v, dt, desired, (arm - max_lead, arm + max_lead))
        q, v = out.q, out.v
        times.append(times[-1] + dt)
        qs.append(q.copy())
        assert np.max(np.abs(q - arm)) <= max_lead + 1e-9
    v_ratio, a_ratio, _ = judge(np.array(times), np.array(qs), limits)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT
    assert not np.any(v), 'the command did not come to rest against the lead bound'


def test_lead_limits_the_cruise_speed_as_documented():
    """Cruising behind an arm that tracks exactly: speed <= sqrt(2 a max_lead) (about)."""
    limits = JointLimits(names=('a',), lower=[-100.0], upper=[100.0], velocity=[5.0],
                         acceleration=[3.0], continuous=[False])
    shaper = CommandShaper(limits)
    q, v, peak = np.zeros(1), np.zeros(1), 0.0
    for _ in range(300):
        out = shaper.step(q, v, RATE_DT, np.array([50.0]), (q - 0.15, q + 0.15))
        q, v = out.q, out.v
        peak = max(peak, abs(v[0]))
    assert out.limited_by == 'lead'
    assert 0.8 * math.sqrt(2 * 3.0 * 0.15) <= peak <= math.sqrt(2 * 3.0 * 0.15)


def test_brake_stops_on_the_current_line_within_the_acceleration():
    limits = make_limits(4, np.random.default_rng(3), span=(5.0, 6.0))
    shaper = CommandShaper(limits)
    q = np.zeros(4)
    v = 0.8 * limits.velocity * np.array([1, -1, 0.5, 0.2])
    stop_bound = shaper.stopping_point(q, v)
    times, qs = [0.0], [q.copy()]
    while np.any(v):
        out = shaper.brake(q, v, RATE_DT)
        assert out.limited_by == 'stop'
        q, v = out.q, out.v
        times.append(times[-1] + RATE_DT)
        qs.append(q.copy())
        assert len(times) < 1000
    _, a_ratio, _ = judge(np.array(times), np.array(qs), limits,
                          v0=0.8 * limits.velocity * np.array([1, -1, 0.5, 0.2]))
    assert a_ratio <= 1 + TIGHT
    direction = stop_bound - 0.0
    travelled = qs[-1]
    assert np.all(np.abs(travelled) <= np.abs(direction) + 1e-12), 'braked past the bound'
    cos = travelled @ direction / (np.linalg.norm(travelled) * np.linalg.norm(direction))
    assert cos == pytest.approx(1.0, abs=1e-9), 'the stop left the line'


def _rest_state(rng, limits):
    """A command at or near rest on (or near) a still target: q on a limit, a lead box edge
    or exactly 0 at times, inside or outside them, v and the target velocity zero (either
    sign) or not, desired at q or a hair away, with and without a lead box."""
    n = limits.n
    lower = np.where(limits.continuous, -4.0, limits.lower)
    upper = np.where(limits.continuous, 4.0, limits.upper)
    q = rng.uniform(lower - 0.05, upper + 0.05)
    pick = rng.integers(0, 6, n)
    q = np.where(pick == 0, lower, np.where(pick == 1, upper, np.where(pick == 2, 0.0, q)))
    q = np.where(rng.random(n) < 0.1, -0.0, q)
    measured = q + rng.choice([0.0, 0.15, -0.15, 0.2, rng.uniform(-0.3, 0.3)], n)
    lead_box = None if rng.random() < 0.3 else (measured - 0.15, measured + 0.15)
    v = rng.choice([np.zeros(n), -np.zeros(n), rng.uniform(-1e-9, 1e-9, n)], p=[0.6, 0.2, 0.2])
    desired = q.copy() if rng.random() < 0.8 else q + rng.uniform(-1e-12, 1e-12, n)
    desired_velocity = [None, np.zeros(n), rng.uniform(-0.1, 0.1, n)][rng.integers(0, 3)]
    return q, v, desired, lead_box, desired_velocity


def test_the_rest_path_gives_exactly_the_stages_result():
    """``step`` takes a short path at rest on a still target inside the position limits and
    the lead box (the held goal of most ticks): the same command, bit for bit (zeros' signs
    included), limiter included, as the three stages, over random rest and near-rest states
    of random chains."""
    rng = np.random.default_rng(11)
    rest = 0
    for trial in range(3000):
        n = int(rng.integers(1, 8))
        limits = make_limits(n, rng, continuous=rng.random(n) < 0.2)
        shaper = CommandShaper(limits)
        q, v, desired, lead_box, desired_velocity = _rest_state(rng, limits)
        dt = float(rng.uniform(0.002, 0.03))
        fast = shaper.step(q, v, dt, desired, lead_box, desired_velocity)
        slow = shaper._shape(q, v, dt, desired, shaper.feedforward(desired_velocity),
                             shaper._boxes(lead_box))
        assert fast.q.tobytes() == slow.q.tobytes(), trial
        assert fast.v.tobytes() == slow.v.tobytes(), trial
        assert fast.limited_by == slow.limited_by, trial
        lo, hi = (limits.lower, limits.upper) if lead_box is None else (
            np.maximum(limits.lower, lead_box[0]), np.minimum(limits.upper, lead_box[1]))
        rest += (not np.any(v) and np.array_equal(desired, q) and
                 shaper.feedforward(desired_velocity) is None and
                 bool(np.all((q >= lo) & (q <= hi))))
    assert rest > 500, rest     # the short path was taken often enough to mean something


# ---------------------------------------------------------------------- continuous joints
def test_wrap_helpers():
    assert wrap_to_pi(7.0) == pytest.approx(7.0 - 2 * math.pi)
    assert wrap_to_pi(-math.pi) == pytest.approx(-math.pi)
    cont = np.array([True, False])
    # The solver says 0.717 + 0.3 (its own range), the command is at 7.0: take 7.3, not 1.017.
    near = nearest_equivalent([7.0 - 2 * math.pi + 0.3, 0.5], [7.0, 0.4], cont)
    assert near == pytest.approx([7.3, 0.5])
    # Across the wrap: from 3.1 to the solver's -3.1 is +0.083 the short way.
    assert nearest_equivalent([-3.1], [3.1], [True])[0] == pytest.approx(2 * math.pi - 3.1)
    assert to_solver_range([7.0, 7.0], cont) == pytest.approx([7.0 - 2 * math.pi, 7.0])


def test_continuous_joint_moves_the_short_way_and_never_snaps():
    limits = JointLimits(names=('c',), lower=[-2 * math.pi], upper=[2 * math.pi],
                         velocity=[1.0], acceleration=[3.0], continuous=[True])
    shaper = CommandShaper(limits)
    q, v, qs = np.array([7.0]), np.zeros(1), [7.0]
    solver_goal = wrap_to_pi(7.0 + 2.5)      # what a solver in +-pi would say: -3.28 + ...
    for _ in range(600):
        desired = nearest_equivalent([solver_goal], q, [True])
        out = shaper.step(q, v, RATE_DT, desired)
        q, v = out.q, out.v
        qs.append(q[0])
    qs = np.array(qs)
    assert qs[-1] == pytest.approx(9.5), 'not the short way (+2.5 rad)'
    assert np.max(np.abs(np.diff(qs))) <= 1.0 * RATE_DT + 1e-12, 'the command snapped'
    assert qs.min() >= 7.0 - 1e-12 and qs.max() <= 9.5 + 1e-12


# ---------------------------------------------------------------------- limits from a chain
def _chain(continuous=False):
    joints = [JointSpec('j1', 'base_link', 'l1', lower=-2.0, upper=2.0, velocity=2.0),
              JointSpec('j2', 'l1', 'l2', type='continuous' if continuous else 'revolute',
                        lower=-1.0, upper=1.0, velocity=np.inf),
              JointSpec('tool', 'l2', 'tool0', type='fixed')]
    return Chain.from_joints(joints, 'base_link', 'tool0')


def test_limits_for_chain_scales_velocity_and_fills_defaults():
    limits, notes = limits_for_chain(_chain(), velocity_scale=0.5, max_acceleration=3.0,
                                     default_velocity_limit=1.5)
    assert limits.velocity == pytest.approx([1.0, 0.75])
    assert limits.acceleration == pytest.approx([3.0, 3.0])
    assert any('no velocity limit for j2' in note for note in notes)
    cont, _ = limits_for_chain(_chain(continuous=True), 1.0, 3.0)
    assert list(cont.continuous) == [False, True] and cont.upper[1] == np.inf


MOVEIT_YAML = """
# MoveIt form
default_velocity_scaling_factor: 0.1
joint_limits:
  j1:
    has_velocity_limits: true
    max_velocity: 1.2
    has_acceleration_limits: true
    max_acceleration: 1.5
    has_jerk_limits: true
    max_jerk: 300.0
  j2:
    has_velocity_limits: true
    max_velocity: 5.0
    has_acceleration_limits: false
    max_acceleration: 0.0
    has_position_limits: true
    min_position: -0.5
    max_position: 2.0
  gripper_finger:
    has_velocity_limits: true
    max_velocity: 0.1
"""


def test_moveit_joint_limits_override_per_joint(tmp_path):
    path = tmp_path / 'joint_limits.yaml'
    path.write_text(MOVEIT_YAML)
    overrides = read_joint_limits_yaml(path)
    assert overrides['j1'] == {'velocity': 1.2, 'acceleration': 1.5}
    limits, notes = limits_for_chain(_chain(), 1.0, 3.0, 4.0, overrides)
    assert limits.velocity == pytest.approx([1.2, 4.0])       # j2: 5.0 > URDF-default 4.0
    assert limits.acceleration == pytest.approx([1.5, 3.0])   # j2: has_acceleration false
    assert limits.lower[1] == pytest.approx(-0.5) and limits.upper[1] == pytest.approx(1.0)
    assert any('gripper_finger' in note for note in notes)
    assert any('above the URDF limit' in note and 'j2' in note for note in notes)
    same = parse_joint_limits_yaml('joint_limits: {j1: {has_velocity_limits: true, '
                                   'max_velocity: 2.0}}')
    _, notes = limits_for_chain(_chain(), 1.0, 3.0, 4.0, same)
    assert not any('above' in note for note in notes), 'an equal limit is not worth a note'
    namespaced = parse_joint_limits_yaml('robot_description_planning:\n' + '\n'.join(
        '  ' + line for line in MOVEIT_YAML.splitlines()))
    assert namespaced == overrides


@pytest.mark.parametrize('text, message', [
    ('joint_limits: [1, 2]', 'expected a mapping with a joint_limits: key'),
    ('nothing: 1', "expected a mapping with a joint_limits: key.*keys \\['nothing'\\]"),
    ('joint_limits: {j1: {has_velocity_limits: true}}', 'has_velocity_limits: true but no '
     'max_velocity'),
    ('joint_limits: {j1: {has_acceleration_limits: true, max_acceleration: -2}}',
     r'joint_limits.j1.max_acceleration must be a finite number > 0; got -2'),
    ('joint_limits: {j1: {has_velocity_limits: yes please}}', 'must be true or false'),
    ('joint_limits: {j1: [', 'not valid YAML'),
])
def test_bad_joint_limits_yaml_says_what_is_wrong(text, message):
    with pytest.raises(ParameterError, match=message):
        parse_joint_limits_yaml(text)


def test_missing_joint_limits_file_says_how_to_fix(tmp_path):
    with pytest.raises(ParameterError, match='cannot be read.*MoveIt joint_limits.yaml'):
        read_joint_limits_yaml(tmp_path / 'nope.yaml')


def _track(limits, speed_share, feedforward, ticks=400, seed=0, accel_share=0.5):
    """Track a target moving on a sinusoid in every joint within shares of the limits, with
    the velocity estimated from the desired stream as ControlLoop does.
    Returns (times, commands, desired (K, n))."""
    rng = np.random.default_rng(seed)
    shaper = CommandShaper(limits)
    mid = 0.5 * (limits.lower + limits.upper)
    amp = 0.25 * (limits.upper - limits.lower)
    # Speed at speed_share of the velocity limits, acceleration at accel_share of the
    # acceleration limits, whichever is lower.
    omega = min(speed_share * np.min(limits.velocity / amp),
                np.sqrt(accel_share * np.min(limits.acceleration / amp)))
    phase = rng.uniform(0, 2 * np.pi, limits.n)
    # Start on the target, moving with it (the tracking phase, not the catch-up).
    q, v, t = mid + amp * np.sin(phase), amp * omega * np.cos(phase), 0.0
    times, qs, ds, previous, w = [t], [q.copy()], [q.copy()], None, None
    for _ in range(ticks):
        dt = RATE_DT * (1.0 + rng.uniform(-0.2, 0.2))
        t += dt
        desired = mid + amp * np.sin(omega * t + phase)
        w = shaper.target_velocity(desired, previous, dt, w) if feedforward else None
        out = shaper.step(q, v, dt, desired, None, w)
        q, v, previous = out.q, out.v, desired
        times.append(t)
        qs.append(q.copy())
        ds.append(desired)
    return np.array(times), np.array(qs), np.array(ds)


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7), share=st.floats(0.2, 0.8))
def test_a_moving_target_is_tracked_without_lag_and_within_the_limits(seed, n, share):
    """With the target's velocity, the command follows a target moving within the limits to
    within a small fraction of the braking lag it has without (w^2 / 2a), and every limit
    holds on every tick computed from the stamps."""
    limits = make_limits(n, np.random.default_rng(seed))
    times, qs, ds = _track(limits, share, True, seed=seed)
    times_lag, qs_lag, ds_lag = _track(limits, share, False, seed=seed)
    assert np.array_equal(times, times_lag)             # the same ticks, with and without
    v0 = (qs[1] - qs[0]) / (times[1] - times[0])
    v_ratio, a_ratio, excess = judge(times[1:], qs[1:], limits, v0=v0)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT and excess <= 1e-12
    settled = slice(len(times) // 2, None)
    error = np.max(np.abs(qs[settled] - ds[settled]))
    lag = np.max(np.abs(qs_lag[settled] - ds_lag[settled]))
    assert error <= 0.25 * lag + 1e-9, f'tracking error {error:.5f} vs braking lag {lag:.5f}'


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7), share=st.floats(0.1, 1.0),
       jitter=st.floats(0.0, 0.3))
@example(seed=59183, n=1, share=1.0, jitter=0.0)     # a = 0.57 rad/s^2: a long way back
def test_a_target_that_stops_is_overshot_by_at_most_the_stopping_distance(seed, n, share,
                                                                          jitter):
    """The price of following without lag: a target moving at w that stops dead is passed by
    at most the command's synchronized stopping distance plus the ticks it takes to see the
    stop, then reached again, and every limit holds throughout."""
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng)
    shaper = CommandShaper(limits)
    w = share * limits.velocity * rng.choice([-1.0, 1.0], n)
    # Slow enough that all joints can stop together within the last 10 % of their range
    # (a target the command can follow: a synchronized stop from w covers |w_j| T / 2).
    span = limits.upper - limits.lower
    reach = np.abs(w) * np.max(np.abs(w) / limits.acceleration) / 2
    w = w * min(1.0, float(np.sqrt(np.min(0.1 * span / reach))))
    start = np.where(w > 0, limits.lower + 0.1 * (limits.upper - limits.lower),
                     limits.upper - 0.1 * (limits.upper - limits.lower))
    # Already following: the command moves with the target (no catch-up phase).
    q, v, t, previous, wv = start.copy(), w.copy(), 0.0, start - w * RATE_DT, w.copy()
    times, qs = [0.0], [q.copy()]
    stop_time = float(np.min(0.6 * (limits.upper - limits.lower) / np.abs(w)))
    # Long enough to brake (T = max |w| / a), come back the overshoot d = |w| T / 2 (at most
    # 2 sqrt(d / a) + d / v_max) and land: 3 s were too short for a = 0.57 rad/s^2.
    brake = np.max(np.abs(w) / limits.acceleration)
    back = np.abs(w) * brake / 2
    settle = brake + np.max(2 * np.sqrt(back / limits.acceleration) + back / limits.velocity)
    for _ in range(int((stop_time + settle) / RATE_DT) + 100):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        t += dt
        desired = start + w * min(t, stop_time)
        wv = shaper.target_velocity(desired, previous, dt, wv)
        out = shaper.step(q, v, dt, desired, None, wv)
        q, v, previous = out.q, out.v, desired
        times.append(t)
        qs.append(q.copy())
    qs = np.array(qs)
    v_ratio, a_ratio, excess = judge(np.array(times), qs, limits, v0=w)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT and excess <= 1e-12
    final = start + w * stop_time
    overshoot = np.max(np.sign(w) * (qs - final), axis=0)
    # All joints stop together (the acceleration is scaled by one factor): in the time the
    # slowest needs, T = max |w| / a, each covers |w| T / 2; plus the ticks of detection.
    stop_time = np.max(np.abs(w) / limits.acceleration)
    bound = np.abs(w) * stop_time / 2 + 2 * np.abs(w) * RATE_DT * (1 + jitter)
    assert np.all(overshoot <= bound + 1e-9), f'overshoot {overshoot} > {bound}'
    assert np.allclose(qs[-1], final, atol=1e-9), 'the stopped target is not reached'


def test_a_jump_gets_no_feedforward_and_a_still_target_keeps_the_trapezoid():
    limits = make_limits(3, np.random.default_rng(3))
    shaper = CommandShaper(limits)
    assert shaper.feedforward(None) is None
    assert shaper.feedforward(np.zeros(3)) is None
    assert shaper.feedforward(np.array([np.nan, 0.0, 0.0])) is None
    assert shaper.feedforward(2.5 * limits.velocity) is None            # a jump
    wanted = 1.5 * limits.velocity * np.array([1.0, -0.5, 0.2])
    fast = shaper.feedforward(wanted)
    assert np.max(np.abs(fast) / limits.velocity) == pytest.approx(1.0)  # scaled, one factor
    assert np.allclose(fast / wanted, fast[0] / wanted[0])
    # A goal jump reported as a huge "velocity" behaves exactly like a still target.
    q, v = limits.lower + 0.1, np.zeros(3)
    target = limits.upper - 0.1
    a = shaper.step(q, v, RATE_DT, target)
    b = shaper.step(q, v, RATE_DT, target, None, (target - q) / RATE_DT)
    assert np.array_equal(a.q, b.q)
