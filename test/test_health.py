"""The node's health without ROS (smcik_ros/ros/health.py): one status from the control loop,
the collision guard and the alternatives, and the diagnostics derived from it."""

import json

import numpy as np
import pytest

from smcik_ros.collision import conventional_srdf_path
from smcik_ros.control.alternatives import AlternativesBook
from smcik_ros.control.arm_state import ArmSettings
from smcik_ros.control.collision_guard import CollisionGuard
from smcik_ros.control.limits import limits_for_chain
from smcik_ros.control.tick import ControlLoop
from smcik_ros.control.tick_timing import TickTiming
from smcik_ros.ros.health import ERROR, OK, STALE, WARN, Health, Timings
from smcik_ros.solvers import make_solver

from collision_helpers import cover_cache_dir
from conftest import ARM7_URDF

NAMES = ['smcik_node: arm', 'smcik_node: control ticks', 'smcik_node: solver',
         'smcik_node: collision', 'smcik_node: goal']


@pytest.fixture
def health(arm7):
    guard, _ = CollisionGuard.from_urdf(arm7, ARM7_URDF, urdf_path=ARM7_URDF,
                                        srdf=conventional_srdf_path(ARM7_URDF),
                                        cache_dir=cover_cache_dir())
    limits, _ = limits_for_chain(arm7, 0.5, 3.0, 1.0)
    loop = ControlLoop(arm7, make_solver('jacobian', arm7), limits, ArmSettings(),
                       validators=[guard])
    loop.set_constraints([guard.constraint])
    book = AlternativesBook(arm7.nq, limits.continuous)
    return Health(loop, guard, book, Timings(), TickTiming(100.0), lambda: 'jacobian',
                  lambda: 0, lambda: 100.0)


def test_the_status_is_json_and_says_the_arm_waits_until_it_is_measured(health):
    status = health.status(0.0)
    assert json.loads(json.dumps(status)) == status
    assert status['arm_state'] == 'waiting' and status['commanding'] is False
    assert {'position_error', 'step_cpu_ms', 'marker_cpu_s', 'late_ticks', 'solver',
            'goal_id', 'reached', 'min_distance', 'alternatives', 'pointcloud_ms'} <= set(status)
    entries = health.diagnostics(status)
    assert [e.name for e in entries] == NAMES
    levels = {e.name: e.level for e in entries}
    assert levels['smcik_node: arm'] == STALE
    assert 'waiting for joint_states' in entries[0].message
    assert levels['smcik_node: goal'] == OK and entries[4].message == 'no goal'


def test_a_measured_arm_is_active_and_late_ticks_warn_while_they_are_new(health):
    loop, q = health.loop, np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    t = 0.0
    for _ in range(3):
        loop.on_joint_states(q, None, t)
        loop.tick(t)
        health.tick_timing.tick(t)
        t += 0.01
    health.tick_timing.tick(t + 0.05)           # a tick 6 periods after the one before
    status = health.status(t)
    entries = {e.name: e for e in health.diagnostics(status)}
    assert status['arm_state'] == 'active' and entries['smcik_node: arm'].level == OK
    ticks = entries['smcik_node: control ticks']
    assert ticks.level == WARN and ticks.message.startswith('1 late control tick')
    assert ticks.values['late_ticks'] == 1 and ticks.values['rate_hz'] == 100.0
    again = {e.name: e for e in health.diagnostics(health.status(t))}
    assert again['smcik_node: control ticks'].level == OK       # nothing new since


def _status(**changes):
    status = {'arm_state': 'active', 'limited_by': 'none', 'late_ticks': 0, 'faults': 0,
              'solver': 'smc', 'branch_warning': False, 'collision_reason': '',
              'in_collision': False, 'min_distance': 0.05, 'closest_pair': 'link3 / link7',
              'goal_id': 4, 'reached': False, 'refusal': '', 'resting': False}
    status.update(changes)
    return status


@pytest.mark.parametrize('changes, name, level, text', [
    ({'arm_state': 'stale'}, 'arm', ERROR, 'joint_states are stale'),
    ({'arm_state': 'resync'}, 'arm', WARN, 'restarting from the measured'),
    ({'arm_state': 'stopping'}, 'arm', WARN, 'stopping'),
    ({'faults': 2}, 'solver', ERROR, '2 control tick(s) failed'),
    ({'branch_warning': True}, 'solver', WARN, 'held branch is about to be lost'),
    ({'in_collision': True, 'collision_reason': 'in collision: x'}, 'collision', ERROR,
     'in collision: x'),
    ({'collision_reason': 'at the margin: y'}, 'collision', WARN, 'at the margin: y'),
    ({}, 'collision', OK, 'clear: link3 / link7 at 50.0 mm'),
    ({'reached': True}, 'goal', OK, 'goal 4 reached'),
    ({}, 'goal', OK, 'moving to goal 4'),
    ({'refusal': 'holding: z'}, 'goal', WARN, 'goal 4 not reached: holding: z'),
    ({'resting': True}, 'goal', WARN, 'out of reach'),
])
def test_diagnostic_levels(health, changes, name, level, text):
    entries = {e.name: e for e in health.diagnostics(_status(**changes))}
    entry = entries[f'smcik_node: {name}']
    assert entry.level == level and text in entry.message, entry


def test_a_whole_figure_reports_each_tip_the_contacts_and_the_com_margin():
    """The biped (floating base, four tips, both feet planted, the CoM over them): a sixth
    entry, 'smcik_node: figure', OK while the contacts hold and the CoM is inside; ERROR when
    a contact is not held."""
    from smcik_ros.goals import CenterOfMassPolygon, Contact
    from smcik_ros.model import Chain
    tips = ['l_palm', 'r_palm', 'l_sole', 'r_sole']
    chain = Chain.from_urdf('test/urdf/biped.urdf', 'pelvis', tips, floating_base=True)
    limits, _ = limits_for_chain(chain, 0.5, 3.0, 1.0)
    base = np.eye(4)
    base[2, 3] = 0.944
    loop = ControlLoop(chain, make_solver('jacobian', chain), limits, ArmSettings(), base=base)
    feet = [Contact('l_sole').bind(chain), Contact('r_sole').bind(chain)]
    polygon = [[-0.1, -0.15], [0.15, -0.15], [0.15, 0.15], [-0.1, 0.15]]
    loop.set_constraints(feet + [CenterOfMassPolygon(polygon=polygon, margin=0.01)
                                 .bind(chain)])
    q = np.zeros(limits.n)
    for side in 'lr':
        for joint, value in (('hip_pitch', -0.3), ('knee', 0.6), ('ankle_pitch', -0.3)):
            q[limits.names.index(f'{side}_{joint}')] = value
    loop.on_joint_states(q, None, 0.0)
    loop.tick(0.0)
    figure = Health.figure(loop)
    assert [t['tip'] for t in figure['tips']] == tips and not any(t['goal']
                                                                   for t in figure['tips'])
    assert [c['link'] for c in figure['contacts']] == ['l_sole', 'r_sole']
    assert all(c['held'] and c['position_error'] < 1e-9 for c in figure['contacts'])
    assert 0.0 < figure['com_margin'] < 0.15
    assert figure['base_pose'] == pytest.approx([0, 0, 0.944, 0, 0, 0, 1], abs=1e-9)
    status = dict(figure)
    entry = Health.figure_entry(status)
    assert entry.name == 'smcik_node: figure' and entry.level == OK
    assert 'CoM' in entry.message and '2 contact(s) held' in entry.message
    status['contacts'][0] = dict(status['contacts'][0], held=False)
    assert Health.figure_entry(status).level == ERROR
    status['contacts'][0]['held'] = True
    status['com_margin'] = -0.02
    assert 'outside its support polygon' in Health.figure_entry(status).message
