"""Graph-level tests of the filter's alternatives and of goals with uncertainty: smcik_node and
sim_arm as real processes over real DDS (config/arm.yaml, the default 7-DOF arm).

- a pose goal on the 7-DOF arm has several distinct IK branches: ~/alternatives lists them
  (one JointTrajectory point each) and ~/status describes the same list; selecting
  alternative 1 on ~/select_alternative moves the commands there within every limit;
- target_pose_with_covariance: a covariance that is not symmetric positive definite (or NaN)
  is refused with one log line and the previous goal stays; a good one is followed (also in a
  link frame, and position-only);
- a single-answer solver publishes an empty list once and its status says why.
"""

import json
import math
import os
import time

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed for the graph-level tests')

from geometry_msgs.msg import PoseWithCovarianceStamped  # noqa: E402

from geometry_msgs.msg import PoseStamped  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import UInt32  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402
from visualization_msgs.msg import Marker  # noqa: E402

from goal_helpers import free_configuration_near  # noqa: E402
from conftest import private_domain_id  # noqa: E402
from ros_helpers import (REPO_ROOT, Probe, dds_fixtures, read_log,  # noqa: E402
                         start_node_process, stop_process, wait_for, wait_for_log)
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.ros.conversions import matrix_to_pose  # noqa: E402

pytestmark = pytest.mark.ros

DOMAIN_ID = private_domain_id(os.getpid() + 89)
PARAMS = REPO_ROOT / 'config' / 'arm.yaml'
URDF = REPO_ROOT / 'urdf' / 'smcik_arm.urdf'
POSITION_TOL = 1e-3     # [m]
ORIENTATION_TOL = 1e-2  # [rad]
NODE = '/smcik_node'
with open(PARAMS) as _f:
    _NODE_YAML = yaml.safe_load(_f)['smcik_node']['ros__parameters']
VELOCITY_SCALE = _NODE_YAML['velocity_scale']
MAX_ACCELERATION = _NODE_YAML['max_acceleration']


@pytest.fixture(scope='module')
def chain():
    return Chain.from_urdf(str(URDF), 'base_link', 'tool0')


ros_env, context, probe = dds_fixtures(DOMAIN_ID)


@pytest.fixture(scope='module')
def system(ros_env, context):
    """smcik_node (seeded) + sim_arm; yields (node process, probe, alternatives list)."""
    env, log_dir = ros_env
    node = start_node_process('smcik_ros.node', env, log_dir / 'smcik_node.log',
                              parameters=['smcik_node:smc.seed:=5'])
    sim = start_node_process('smcik_ros.sim_arm', env, log_dir / 'sim_arm.log')
    probe = Probe(context)
    alternatives = []
    reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    probe.create_subscription(JointTrajectory, f'{NODE}/alternatives',
                              lambda m: probe._record(alternatives, m), reliable)
    try:
        started = wait_for(lambda: probe.commands and probe.joint_states
                           or node.poll() is not None or sim.poll() is not None, 30.0)
        if node.poll() is not None or sim.poll() is not None or not started:
            pytest.fail('smcik_node / sim_arm did not start:\n' + read_log(node.log_path)
                        + read_log(sim.log_path))
        yield node, probe, alternatives
    finally:
        probe.close()
        stop_process(node)
        stop_process(sim)


@pytest.fixture(scope='module')
def pubs(system):
    _, probe, _ = system
    out = {'pose': probe.publisher(PoseStamped, 'target_pose'),
           'covariance': probe.publisher(PoseWithCovarianceStamped,
                                         'target_pose_with_covariance'),
           'select': probe.publisher(UInt32, f'{NODE}/select_alternative')}
    for pub in out.values():
        assert probe.wait_matched(pub), f'smcik_node does not subscribe to {pub.topic_name}'
    return out


# ---------------------------------------------------------------------------- helpers
def command_q(probe):
    return np.array(probe.last_command().position)


def latest_status(probe):
    items = probe.snapshot(probe.status)
    return json.loads(items[-1].data) if items else None


def tip_errors(chain, q, pose):
    tip = chain.fk(q)
    if pose.shape != (4, 4):
        return float(np.linalg.norm(tip[:3, 3] - pose)), 0.0
    pos = float(np.linalg.norm(tip[:3, 3] - pose[:3, 3]))
    cos = 0.5 * (np.trace(tip[:3, :3].T @ pose[:3, :3]) - 1.0)
    return pos, float(np.arccos(np.clip(cos, -1.0, 1.0)))


def wait_reached(probe, chain, pose, orientation=True, timeout=15.0):
    def reached():
        pos, ori = tip_errors(chain, command_q(probe), pose)
        return pos <= POSITION_TOL and (not orientation or ori <= ORIENTATION_TOL)
    return wait_for(reached, timeout, interval=0.02)


def wait_still(probe, timeout=10.0):
    """Wait until the commands stopped moving (velocity 0 on every joint)."""
    return wait_for(lambda: not np.any(np.array(probe.last_command().velocity)), timeout)


def publish_pose(probe, publisher, pose):
    msg = PoseStamped()
    msg.header.frame_id = 'base_link'
    msg.header.stamp = probe.get_clock().now().to_msg()
    msg.pose = matrix_to_pose(pose)
    publisher.publish(msg)


def publish_covariance_goal(probe, publisher, pose, covariance, frame='base_link'):
    msg = PoseWithCovarianceStamped()
    msg.header.frame_id = frame
    msg.header.stamp = probe.get_clock().now().to_msg()
    msg.pose.pose = matrix_to_pose(pose)
    msg.pose.covariance = [float(v) for v in np.asarray(covariance, dtype=float).ravel()]
    publisher.publish(msg)


def matching_list(probe, alternatives):
    """Return (trajectory, status) of the newest ~/alternatives message that the newest
    status describes (same stamp, same goal), or None."""
    status = latest_status(probe)
    if not status or status.get('alternatives_stamp') is None:
        return None
    with probe.lock:
        msgs = [m for _, m in alternatives]
    for msg in reversed(msgs):
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        if stamp == status['alternatives_stamp']:
            if status['alternatives_goal_id'] == status['goal_id']:
                return msg, status
            return None
    return None


def assert_commands_sane(probe, chain, since, resyncs=0):
    """Every command since ``since``: finite, inside the limits, velocity and acceleration
    within the limits computed from the header stamps. ``resyncs``: how many restarts from
    the measurement (~/status ``resyncs``; on a starved machine sim_arm's joint_states can go
    stale) the window may hold: the stream is checked in pieces split at them (a restart
    command is at rest and is the only place a jump is allowed). Returns the positions."""
    with probe.lock:
        msgs = [m for t, m in probe.commands if t >= since]
    assert len(msgs) > 2, 'no commands received'
    q = np.array([list(m.position) for m in msgs])
    at_rest = np.array([not np.any(m.velocity) for m in msgs])
    stamps = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
                       for m in msgs], dtype=np.int64)
    assert np.all(np.isfinite(q)), 'a command carried NaN/inf'
    assert np.all(q >= chain.lower - 1e-9) and np.all(q <= chain.upper + 1e-9), \
        'a command left the joint limits'
    limit = np.array(chain.velocity_limits) * VELOCITY_SCALE
    dt = np.diff(stamps) * 1e-9
    v = np.diff(q, axis=0) / dt[:, None]
    jumps = np.flatnonzero(np.max(np.abs(v) / limit, axis=1) > 1.0 + 1e-6)
    assert len(jumps) <= resyncs and all(at_rest[k + 1] for k in jumps), (
        f'{len(jumps)} command(s) beyond the velocity limit '
        f'({np.max(np.abs(v) / limit):.3f} x), {resyncs} resync(s) reported; at '
        f'{[(int(k), bool(at_rest[k + 1]), round(float(dt[k]), 4)) for k in jumps]}')
    cuts = [0] + [k + 1 for k in jumps] + [len(q)]
    for a, b in zip(cuts[:-1], cuts[1:]):
        if b - a < 3:
            continue
        vs = v[a:b - 1]
        acc = np.diff(vs, axis=0) / dt[a + 1:b - 1, None]
        ratio = np.max(np.abs(acc) / MAX_ACCELERATION) if len(acc) else 0.0
        assert ratio <= 1.0 + 1e-6, f'command acceleration {ratio:.4f} x the limit'
    return q


def resyncs_now(probe):
    return (latest_status(probe) or {}).get('resyncs', 0)


def ghost_namespaces(probe, since):
    """Return {ns: last action} of the alternative_* markers received since ``since``."""
    out = {}
    for array in probe.snapshot(probe.markers, since):
        for marker in array.markers:
            if marker.ns.startswith('alternative_') and marker.id == 0:
                out[marker.ns] = marker.action
    return out


# ---------------------------------------------------------------------------- tests
def test_alternatives_are_listed_and_selecting_one_moves_the_arm_there(system, pubs, chain):
    node, probe, alternatives = system
    rng = np.random.default_rng(21)
    found = None
    for _ in range(4):
        q_goal = free_configuration_near(chain, command_q(probe), rng, margin=0.1)
        goal = chain.fk(q_goal)
        publish_pose(probe, pubs['pose'], goal)
        assert wait_reached(probe, chain, goal), 'the pose goal was not reached'
        assert wait_still(probe)

        def listed():
            pair = matching_list(probe, alternatives)
            if pair is None or len(pair[0].points) < 2:
                return None
            return pair if pair[1]['alternatives'][1]['reached'] else None
        found = wait_for(listed, 5.0, interval=0.05)
        if found:
            break
    assert found, ('no goal gave >= 2 alternatives with a reachable second one; the last '
                   f'status: {latest_status(probe)}')
    msg, status = found
    assert list(msg.joint_names) == list(chain.joint_names)
    points = np.array([list(p.positions) for p in msg.points])
    entries = status['alternatives']
    assert len(entries) == len(points) <= _NODE_YAML['max_alternatives']
    assert all(p.time_from_start.sec == 0 and p.time_from_start.nanosec == 0
               for p in msg.points)
    held = [i for i, e in enumerate(entries) if e['held']]
    assert len(held) == 1
    q_now = command_q(probe)
    assert np.max(np.abs(points[held[0]] - q_now)) < 0.05, 'the held branch is not the arm'
    for point, entry in zip(points, entries):
        pos, ori = tip_errors(chain, point, goal)
        if entry['reached']:
            assert pos <= POSITION_TOL * 1.01 and ori <= ORIENTATION_TOL * 1.01, entry
        else:
            assert pos > 0.9 * POSITION_TOL or ori > 0.9 * ORIENTATION_TOL, entry
        # distance: from the current estimate (the arm, standing still), unit weights.
        assert entry['distance'] == pytest.approx(np.linalg.norm(point - q_now), abs=0.02)
    assert 0.0 <= status['confidence'] <= 1.0
    assert status['branch_warning'] is False
    # Ghost arms: one namespace per listed branch.
    assert wait_for(lambda: {f'alternative_{k}' for k in range(len(points))}
                    <= set(ghost_namespaces(probe, time.monotonic() - 1.0)), 3.0)

    # Select alternative 1: the commands go there within every limit, the goal stays reached.
    # The index means "in the last published list" (it may have been republished since the
    # one read above): ~/status names the list (stamp) and configuration it resolved to.
    since = time.monotonic()
    resyncs = resyncs_now(probe)
    switches = status['branch_switches']
    pubs['select'].publish(UInt32(data=1))
    assert wait_for(lambda: (latest_status(probe) or {}).get('selected_alternative'), 5.0)
    selected = latest_status(probe)['selected_alternative']
    with probe.lock:
        lists = {m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec: m
                 for _, m in alternatives}
    chosen = lists[selected['alternatives_stamp']]
    target = np.array(chosen.points[1].positions)
    np.testing.assert_allclose(selected['q'], target, atol=1e-5)
    assert selected['index'] == 1 and selected['goal_id'] == status['goal_id']
    assert np.max(np.abs(target - q_now)) > 0.5, 'alternative 1 is not another branch'
    assert wait_for(lambda: np.max(np.abs(command_q(probe) - target)) < 0.02, 20.0,
                    interval=0.02), (f'the commands did not reach alternative 1: '
                                     f'{command_q(probe)} vs {target} (held before: '
                                     f'{q_now}); status: {latest_status(probe)}')
    assert wait_reached(probe, chain, goal, timeout=5.0)
    assert wait_still(probe)
    q = assert_commands_sane(probe, chain, since, resyncs_now(probe) - resyncs)
    assert np.max(np.abs(q[-1] - q[0])) > 0.5
    assert wait_for_log(node.log_path, 'alternative 1 selected'), read_log(node.log_path)
    assert wait_for(lambda: (latest_status(probe) or {}).get('branch_switches', 0)
                    > switches, 3.0)
    switch = latest_status(probe)['branch_switch']
    assert switch['reason'] == 'selected' and switch['distance'] > 0.5

    # An index out of range is refused with a log line; nothing moves, the node lives on.
    start = len(read_log(node.log_path))
    before = command_q(probe)
    pubs['select'].publish(UInt32(data=99))
    assert wait_for_log(node.log_path, 'select_alternative 99 refused: out of range',
                        start=start), read_log(node.log_path)[start:]
    time.sleep(0.3)
    assert np.max(np.abs(command_q(probe) - before)) < 0.01
    assert node.poll() is None


@pytest.mark.parametrize('kind, expected', [
    ('not_positive_definite', 'not positive definite'),
    ('nan', 'NaN/inf'),
    ('unknown', 'unknown covariance'),
])
def test_bad_covariance_is_refused_and_the_previous_goal_kept(system, pubs, chain, kind,
                                                              expected):
    node, probe, _ = system
    assert wait_for(lambda: latest_status(probe) is not None, 5.0)
    goal_id = latest_status(probe)['goal_id']
    start = len(read_log(node.log_path))
    q = command_q(probe)
    covariance = np.diag([1e-4, 1e-4, 1e-4, 1e-2, 1e-2, 1e-2])
    if kind == 'not_positive_definite':
        covariance[2, 2] = -1e-4
    elif kind == 'nan':
        covariance[4, 4] = float('nan')
    else:
        covariance = np.r_[-1.0, np.zeros(35)]
    publish_covariance_goal(probe, pubs['covariance'], chain.fk(q + 0.2), covariance)
    assert wait_for_log(node.log_path, 'target_pose_with_covariance refused, keeping the '
                        'previous goal', start=start), read_log(node.log_path)[start:]
    line = [ln for ln in read_log(node.log_path)[start:].splitlines()
            if 'target_pose_with_covariance refused' in ln][0]
    assert expected in line
    seen = len(probe.snapshot(probe.status))
    assert wait_for(lambda: len(probe.snapshot(probe.status)) > seen + 1, 5.0)
    assert latest_status(probe)['goal_id'] == goal_id
    assert np.max(np.abs(command_q(probe) - q)) < 0.01, 'the arm moved for a refused goal'
    assert node.poll() is None


def test_covariance_goals_are_followed_in_link_frames_and_position_only(system, pubs, chain):
    node, probe, _ = system
    rng = np.random.default_rng(9)
    q = command_q(probe)
    since = time.monotonic()
    resyncs = resyncs_now(probe)
    goal = chain.fk(free_configuration_near(chain, q, rng, spread=0.3, margin=0.0))
    link2 = chain.fk(q, link='link2')     # the node uses the same (measured, still) q
    rot = rng.normal(size=(6, 6))
    covariance = 1e-4 * (rot @ rot.T + np.eye(6))
    goal_id = latest_status(probe)['goal_id']
    publish_covariance_goal(probe, pubs['covariance'], np.linalg.inv(link2) @ goal,
                            covariance, frame='link2')
    assert wait_reached(probe, chain, goal), 'covariance goal in link2 not reached'
    assert wait_for(lambda: latest_status(probe)['goal_id'] > goal_id
                    and latest_status(probe)['goal_covariance'] is True, 3.0)
    # Position only: the rotational variances say "unknown" (>= 1e3 rad^2).
    q = command_q(probe)
    point = chain.fk(free_configuration_near(chain, q, rng, spread=0.3, margin=0.0))
    loose = np.diag([1e-4, 2e-4, 1e-4, 1e6, 1e6, 1e6])
    publish_covariance_goal(probe, pubs['covariance'], point, loose)
    assert wait_reached(probe, chain, point[:3, 3], orientation=False), \
        'position-only covariance goal not reached'
    assert wait_for(lambda: latest_status(probe)['goal_covariance'] is True, 3.0)
    assert_commands_sane(probe, chain, since, resyncs_now(probe) - resyncs)
    assert node.poll() is None


def test_a_single_answer_solver_lists_no_alternatives(system, pubs, chain):
    node, probe, alternatives = system
    client = AsyncParameterClient(probe, 'smcik_node')
    assert client.wait_for_services(timeout_sec=10.0)
    since = time.monotonic()
    future = client.set_parameters([Parameter('solver', value='jacobian')])
    assert wait_for(future.done, 10.0) and future.result().results[0].successful
    try:
        def emptied():
            with probe.lock:
                return any(not m.points for t, m in alternatives if t >= since)
        assert wait_for(emptied, 5.0), 'no empty ~/alternatives after the switch'
        assert wait_for(lambda: (latest_status(probe) or {}).get('alternatives', 0) is None,
                        5.0)
        assert 'single answer' in latest_status(probe)['alternatives_note']
        # The ghost arms are deleted.
        assert wait_for(lambda: ghost_namespaces(probe, since).get('alternative_0')
                        == Marker.DELETE, 3.0)
        start = len(read_log(node.log_path))
        pubs['select'].publish(UInt32(data=0))
        assert wait_for_log(node.log_path, 'select_alternative 0 refused: solver jacobian',
                            start=start)
        assert node.poll() is None and math.isfinite(command_q(probe)[0])
    finally:
        future = client.set_parameters([Parameter('solver', value='smc')])
        wait_for(future.done, 10.0)
