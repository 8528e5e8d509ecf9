"""When the node does what (smcik_ros/ros/schedule.py), without ROS: the solver's step
interval, the loop's settings from the parameters, when markers are rebuilt or republished,
how often clouds are converted."""

import types

import numpy as np
import pytest

from smcik_ros.control.limits import limits_for_chain
from smcik_ros.control.detour import Detour, DetourSettings
from smcik_ros.control.tick import ControlLoop
from smcik_ros.ros.schedule import (STEP_BUDGET, MarkerSchedule, RateGate, apply_loop_settings,
                                    marker_key, step_budget, step_interval)
from smcik_ros.solvers import make_solver

VALUES = {'rate_hz': 500.0, 'solver_rate_hz': 100.0, 'rest_step_interval': 40,
          'iterations_per_tick': 2, 'goal_timeout': 1.5, 'position_tolerance': 2e-3,
          'orientation_tolerance': 0.02, 'collision_fallback_candidates': 3,
          'collision_detour': True}


def test_step_interval_keeps_the_solver_at_or_below_its_rate():
    assert [step_interval(100.0, r) for r in (0.0, 100.0, 150.0, 60.0, 50.0, 33.0)] == \
        [1, 1, 1, 2, 2, 4]
    assert [step_interval(500.0, 100.0), step_interval(1000.0, 100.0),
            step_interval(250.0, 100.0)] == [5, 10, 3]


def test_a_tick_waits_for_its_step_only_when_the_solver_steps_every_tick():
    assert step_budget(100.0, 1) == pytest.approx(STEP_BUDGET / 100.0)
    assert step_budget(500.0, 5) == 0.0


def test_loop_settings_follow_the_parameters(arm7):
    """rest_step_interval counts solver periods: 40 of them are 200 ticks at 500 Hz with the
    solver at 100 Hz; a change of the rates gives the loop new intervals; the detour switch
    goes through the loop (which cancels a detour in progress)."""
    limits, _ = limits_for_chain(arm7, 0.5, 3.0, 1.0)
    loop = ControlLoop(arm7, make_solver('jacobian', arm7), limits,
                       detour=Detour(arm7, limits, DetourSettings(enabled=True)))
    apply_loop_settings(loop, VALUES)
    assert (loop.step_interval, loop.rest_step_interval, loop.iterations_per_tick) == (5, 200, 2)
    assert loop.step_budget == 0.0 and loop.inbox.goal_timeout == 1.5
    assert loop.tolerances == (2e-3, 0.02) and loop.fallback_candidates == 3
    values = dict(VALUES, rate_hz=100.0, solver_rate_hz=25.0, rest_step_interval=3,
                  collision_detour=False)
    apply_loop_settings(loop, values, {'collision_detour': False})
    assert (loop.step_interval, loop.rest_step_interval) == (4, 12)
    assert loop.detour.settings.enabled is False
    apply_loop_settings(loop, dict(values, solver_rate_hz=100.0))
    assert (loop.step_interval, loop.rest_step_interval) == (1, 3)
    assert loop.step_budget == pytest.approx(STEP_BUDGET / 100.0)


def test_markers_are_built_on_change_and_republished_once_a_second():
    schedule = MarkerSchedule(keepalive=1.0)
    assert schedule.decide('a', 0.0) == MarkerSchedule.BUILD
    schedule.sent('a', 0.0)
    decisions = [schedule.decide('a', t) for t in (0.1, 0.5, 0.99)]
    assert decisions == [MarkerSchedule.SKIP] * 3 and schedule.skipped == 3
    assert schedule.decide('a', 1.0) == MarkerSchedule.REPUBLISH
    schedule.republished(1.0)
    assert schedule.decide('a', 1.5) == MarkerSchedule.SKIP
    assert schedule.decide('b', 1.6) == MarkerSchedule.BUILD and schedule.skipped == 5


def _state(settled, info, q):
    solver = types.SimpleNamespace(settled=settled, last_info=info)
    loop = types.SimpleNamespace(solver=solver, goal=object(), q=np.array(q, dtype=float),
                                 base=None, constraints_kept=[])
    guard = types.SimpleNamespace(constraint=object(), scene=types.SimpleNamespace(version=3))
    return loop, guard


def test_marker_key_ignores_a_settled_solvers_rest_steps_only():
    """A settled solver's rest step gives a new step record (last_info), not new markers; a
    moving solver's does; so do the command, the scene and the drawing parameters."""
    loop, guard = _state(True, {'step': 1}, [0.1, 0.2])
    drawn = []                       # the constraint set's drawn obstacles (by identity)
    key = marker_key(loop, guard, drawn, None, 30, False)
    loop.solver.last_info = {'step': 2}                 # a rest step of the settled filter
    assert marker_key(loop, guard, drawn, None, 30, False) == key
    loop.solver.settled = False
    moving = marker_key(loop, guard, drawn, None, 30, False)
    assert moving != key
    loop.solver.last_info = {'step': 3}
    assert marker_key(loop, guard, drawn, None, 30, False) != moving
    loop.solver.settled = True
    assert marker_key(loop, guard, drawn, None, 30, False) == key
    assert marker_key(loop, guard, drawn, None, 10, False) != key
    assert marker_key(loop, guard, drawn, None, 30, True) != key
    guard.scene.version = 4
    assert marker_key(loop, guard, drawn, None, 30, False) != key
    loop.q = np.array([0.1, 0.2000001])
    guard.scene.version = 3
    assert marker_key(loop, guard, drawn, None, 30, False) != key
    listed = types.SimpleNamespace(q=np.zeros((1, 2)), records=[
        types.SimpleNamespace(within_tolerance=True)])
    loop.q = np.array([0.1, 0.2])
    shown = marker_key(loop, guard, drawn, listed, 30, False)
    again = types.SimpleNamespace(q=np.zeros((1, 2)), records=[       # republished, same
        types.SimpleNamespace(within_tolerance=True)])
    assert shown != key and marker_key(loop, guard, drawn, again, 30, False) == shown
    assert marker_key(loop, guard, [], again, 30, False) != shown      # new drawn obstacles
    loop.constraints_kept = [object()]                                  # a new constraint set
    assert marker_key(loop, guard, drawn, again, 30, False) != shown
    loop.constraints_kept, loop.base = [], np.eye(4)                    # the base moved alone
    assert marker_key(loop, guard, drawn, again, 30, False) != shown


def test_rate_gate_lets_through_at_most_its_rate():
    gate = RateGate(5.0)
    passed = [t for t in (k / 100 for k in range(100)) if gate(t)]
    assert np.allclose(passed, [0.0, 0.2, 0.4, 0.6, 0.8], atol=0.011)
    gate.rate_hz = 1.0
    assert gate(1.5) and not gate(2.4) and gate(2.5)
