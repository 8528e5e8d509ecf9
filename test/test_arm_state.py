"""The arm state machine: WAITING -> ACTIVE -> STALE -> RESYNC, freshness on the node clock,
header stamps, bad measurements, resync thresholds, continuous joints."""

import math

import numpy as np
import pytest

from smcik_ros.control.arm_state import ArmMonitor, ArmSettings, ArmState
from smcik_ros.errors import ParameterError

NAMES = ('j1', 'j2', 'j3')
NaN = float('nan')


def monitor(continuous=(False, False, False), **settings):
    return ArmMonitor(NAMES, continuous, ArmSettings(**settings))


def test_waits_for_a_complete_measurement_then_resyncs_to_it():
    arm = monitor()
    assert arm.decide(0.0, None).state is ArmState.WAITING
    arm.measure([0.1, NaN, 0.3], None, 0.01)          # j2 missing
    assert arm.decide(0.02, None).state is ArmState.WAITING
    arm.measure([NaN, 0.2, NaN], None, 0.03)          # now every joint has a value
    decision = arm.decide(0.04, None)
    assert decision.state is ArmState.RESYNC
    assert decision.resync_to == pytest.approx([0.1, 0.2, 0.3])
    assert any(key == 'start' for _, key, _ in decision.events)
    assert arm.decide(0.05, decision.resync_to).state is ArmState.ACTIVE


def test_nan_keeps_the_last_good_value_and_its_age():
    arm = monitor(joint_states_timeout=0.5)
    arm.measure([0.1, 0.2, 0.3], None, 0.0)
    report = arm.measure([0.4, NaN, 0.6], None, 0.3)
    assert report.updated == ('j1', 'j3')
    assert arm.measured == pytest.approx([0.4, 0.2, 0.6])
    assert arm.age(0.4) == pytest.approx(0.4)          # j2's value is from t = 0
    arm.decide(0.4, arm.measured)                       # start
    assert arm.decide(0.45, arm.measured).state is ArmState.ACTIVE
    # j2 keeps coming as NaN: its value gets stale even though messages arrive.
    arm.measure([0.4, NaN, 0.6], None, 0.55)
    assert arm.decide(0.55, arm.measured).state is ArmState.STALE


def test_stale_by_header_stamp_else_by_arrival():
    arm = monitor(joint_states_timeout=0.5)
    arm.measure([0.0, 0.0, 0.0], 10.0, 10.0)
    arm.decide(10.0, None)
    # Arrives now but was measured 0.8 s ago: stale.
    arm.measure([0.0, 0.0, 0.0], 10.2, 11.0)
    assert arm.decide(11.0, np.zeros(3)).state is ArmState.STALE
    # No stamp: judged by arrival.
    arm2 = monitor(joint_states_timeout=0.5)
    arm2.measure([0.0, 0.0, 0.0], None, 5.0)
    arm2.decide(5.0, None)
    assert arm2.decide(5.4, np.zeros(3)).state is ArmState.ACTIVE
    assert arm2.decide(5.6, np.zeros(3)).state is ArmState.STALE


def test_a_stamp_from_the_future_counts_as_its_arrival():
    arm = monitor(joint_states_timeout=0.5)
    arm.measure([0.0, 0.0, 0.0], 12.0, 10.0)            # 2 s ahead: not fresher than arrival
    arm.decide(10.0, None)
    assert arm.decide(10.6, np.zeros(3)).state is ArmState.STALE


def test_stamps_on_another_clock_are_warned_once_and_arrival_is_used():
    arm = monitor(joint_states_timeout=0.5)
    first = arm.measure([0.0, 0.0, 0.0], 3.0, 1000.0)   # e.g. sim time vs wall time
    second = arm.measure([0.0, 0.0, 0.0], 3.01, 1000.01)
    assert [key for _, key, _ in first.events] == ['clock']
    assert 'another clock' in first.events[0][2] and 'use_sim_time' in first.events[0][2]
    assert second.events == ()
    arm.decide(1000.01, None)
    assert arm.decide(1000.3, np.zeros(3)).state is ArmState.ACTIVE


def test_stale_warns_once_holds_then_resumes_with_a_resync():
    arm = monitor(joint_states_timeout=0.5)
    arm.measure([0.1, 0.2, 0.3], None, 0.0)
    q = arm.decide(0.0, None).resync_to
    stale = arm.decide(0.6, q)
    assert stale.state is ArmState.STALE
    assert [key for _, key, _ in stale.events] == ['stale']
    assert 'decelerating to a stop and holding' in stale.events[0][2]
    assert arm.decide(0.7, q).events == ()               # warned once per episode
    assert arm.decide(5.0, q).state is ArmState.STALE
    arm.measure([1.6, 0.2, 0.3], None, 5.1)              # back, 1.5 rad away
    back = arm.decide(5.1, q)
    assert back.state is ArmState.RESYNC and back.resync_to == pytest.approx([1.6, 0.2, 0.3])
    assert 'resumed after 4.50 s' in back.events[0][2]
    assert arm.stale_episodes == 1 and arm.resyncs == 2   # the start and the return


def test_resync_beyond_the_threshold_only():
    arm = monitor(resync_threshold=0.2, max_lead=0.15)
    arm.measure([0.0, 0.0, 0.0], None, 0.0)
    arm.decide(0.0, None)
    assert arm.decide(0.01, np.array([0.19, 0.0, 0.0])).state is ArmState.ACTIVE
    decision = arm.decide(0.02, np.array([0.0, -0.21, 0.0]))
    assert decision.state is ArmState.RESYNC
    assert 'differ by 0.210 on j2' in decision.events[0][2]


def test_continuous_joints_compare_modulo_two_pi():
    arm = monitor(continuous=(True, False, False))
    arm.measure([7.0 - 2 * math.pi, 0.0, 0.0], None, 0.0)   # a driver that wraps
    arm.decide(0.0, None)
    decision = arm.decide(0.01, np.array([7.05, 0.0, 0.0]))
    assert decision.state is ArmState.ACTIVE
    assert arm.lead(np.array([7.05, 0.0, 0.0])) == pytest.approx([0.05, 0.0, 0.0])
    lo, hi = arm.lead_box(np.array([7.05, 0.0, 0.0]))
    assert lo[0] == pytest.approx(7.0 - 0.15) and hi[0] == pytest.approx(7.0 + 0.15)


def test_settings_validation():
    with pytest.raises(ParameterError, match=r'resync_threshold \(0.1\) must be larger than '
                       r'max_lead \(0.15\)'):
        ArmSettings(resync_threshold=0.1, max_lead=0.15)
    with pytest.raises(ParameterError, match='joint_states_timeout must be a finite number > 0'):
        ArmSettings(joint_states_timeout=0.0)
    with pytest.raises(ParameterError, match='start_without_joint_states must be a bool'):
        ArmSettings(start_without_joint_states='yes')
    assert ArmSettings().joint_states_timeout <= 1.0


def test_blind_start_needs_the_opt_in():
    with pytest.raises(ParameterError, match='start_without_joint_states: true'):
        monitor().start_blind()
    arm = monitor(start_without_joint_states=True)
    arm.start_blind()
    # Commanding blind: stays ACTIVE without measurements, then resyncs when one is far.
    assert arm.decide(0.1, np.zeros(3)).state is ArmState.ACTIVE
    arm.measure([1.0, 0.0, 0.0], None, 0.2)
    assert arm.decide(0.2, np.zeros(3)).state is ArmState.RESYNC


def test_measure_checks_the_shape():
    with pytest.raises(ValueError, match='expected 3 positions'):
        monitor().measure([0.0, 0.0], None, 0.0)


def test_kept_completeness_and_lead_match_their_definitions():
    """``complete`` is kept as messages arrive (not recomputed) and ``lead``/``lead_box`` take
    the measurement as it is without continuous joints: over random streams of complete,
    partial and empty messages and clock resets, they equal their definitions (every joint
    finite; the nearest equivalent of the measurement), bit for bit."""
    from smcik_ros.control.limits import nearest_equivalent
    rng = np.random.default_rng(5)
    for trial in range(200):
        continuous = tuple(bool(c) for c in rng.random(3) < (0.0 if trial % 2 else 0.4))
        arm = monitor(continuous)
        for k in range(30):
            if rng.random() < 0.05:
                arm.forget()
            positions = rng.uniform(-7.0, 7.0, 3)
            positions[rng.random(3) < rng.choice([0.0, 0.5, 1.0])] = NaN
            report = arm.measure(positions, None, 0.01 * k)
            assert report.updated == tuple(n for n, p in zip(NAMES, positions) if p == p)
            assert arm.complete == bool(np.all(np.isfinite(arm.measured))), (trial, k)
            q_cmd = rng.uniform(-7.0, 7.0, 3)
            near = nearest_equivalent(arm.measured, q_cmd, np.array(continuous))
            assert arm.lead(q_cmd).tobytes() == np.abs(near - q_cmd).tobytes()
            lo, hi = arm.lead_box(q_cmd)
            assert lo.tobytes() == (near - 0.15).tobytes()
            assert hi.tobytes() == (near + 0.15).tobytes()
