"""Graph-level tests of several end effectors: smcik_node and sim_arm as real processes over
real DDS, on a torso with two arms (test/urdf/two_tips.urdf, tip_links [left_tool,
right_tool]). Both tips reach a target_poses goal, a goal on one tip leaves the other where it
was, target_poses of another count is refused whole, a release holds the tip; every command
within the limits. Waiting is on conditions with timeouts, never fixed sleeps."""

import json
import os
import time

from geometry_msgs.msg import PoseArray, PoseStamped
import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed for the graph-level tests')

from conftest import private_domain_id  # noqa: E402
from ros_helpers import (REPO_ROOT, Probe, dds_fixtures, read_log,  # noqa: E402
                         start_node_process, stop_process, stream_ratios, wait_for,
                         wait_for_log)
from smcik_ros.collision import CollisionConstraint, CollisionModel  # noqa: E402
from smcik_ros.collision import self_collision_pairs  # noqa: E402
from smcik_ros.control.limits import limits_for_chain  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.ros.conversions import matrix_to_pose  # noqa: E402

pytestmark = pytest.mark.ros

DOMAIN_ID = private_domain_id(os.getpid() + 67)
URDF = REPO_ROOT / 'test' / 'urdf' / 'two_tips.urdf'
TIPS = ['left_tool', 'right_tool']
POSITION_TOL, ORIENTATION_TOL = 1e-3, 1e-2     # [m], [rad]
REACH_TIMEOUT = 10.0                            # [s]
with open(REPO_ROOT / 'config' / 'arm.yaml') as _f:
    _NODE_YAML = yaml.safe_load(_f)['smcik_node']['ros__parameters']
MODEL = [f'urdf_path:={URDF}', 'base_link:=base_link', f'tip_links:=[{",".join(TIPS)}]']

ros_env, context, probe = dds_fixtures(DOMAIN_ID)


@pytest.fixture(scope='module')
def chain():
    return Chain.from_urdf(str(URDF), 'base_link', TIPS)


@pytest.fixture(scope='module')
def free(chain):
    """Return a predicate: q is 2 cm clear of self-collision (the node's own pairs)."""
    model = CollisionModel.from_urdf(chain, str(URDF))
    constraint = CollisionConstraint(model, pairs=self_collision_pairs(model, None))
    return lambda q: constraint.status(q)['min_distance'] is None or \
        constraint.status(q)['min_distance'] >= 0.02


@pytest.fixture(scope='module')
def system(ros_env, context):
    """smcik_node + sim_arm on the two-armed torso; yields (node process, probe)."""
    env, log_dir = ros_env
    node = start_node_process('smcik_ros.node', env, log_dir / 'smcik_node.log', parameters=[
        f'smcik_node:{p}' for p in MODEL] + ['smcik_node:smc.seed:=3'])
    sim = start_node_process('smcik_ros.sim_arm', env, log_dir / 'sim_arm.log',
                             parameters=[f'sim_arm:{p}' for p in MODEL])
    probe = Probe(context)
    try:
        started = wait_for(lambda: probe.commands and probe.joint_states
                           or node.poll() is not None or sim.poll() is not None, 60.0)
        if node.poll() is not None or sim.poll() is not None or not started:
            pytest.fail('smcik_node / sim_arm did not start:\n' + read_log(node.log_path)
                        + read_log(sim.log_path))
        yield node, probe
    finally:
        probe.close()
        stop_process(node)
        stop_process(sim)


@pytest.fixture(scope='module')
def publishers(system):
    _, probe = system
    pubs = {'poses': probe.publisher(PoseArray, 'target_poses'),
            'left': probe.publisher(PoseStamped, 'targets/left_tool/pose')}
    for pub in pubs.values():
        assert probe.wait_matched(pub), f'smcik_node does not subscribe to {pub.topic_name}'
    return pubs


def commanded(probe, chain, since=0.0):
    """Return (stamps [ns], positions (K, n)) of the commands received after ``since``."""
    _, stamps, positions = probe.command_stream(since)
    assert positions.shape[1] == chain.n, 'the commands carry the chain joints only'
    return stamps, positions


def measured(probe, chain):
    msg = probe.snapshot(probe.joint_states)[-1]
    index = {n: i for i, n in enumerate(msg.name)}
    assert set(chain.joint_names) <= set(index), 'sim_arm plays every joint'
    return np.array([msg.position[index[n]] for n in chain.joint_names])


def errors(chain, q, tip, pose):
    now = chain.fk(q, tip)
    cos = 0.5 * (np.trace(now[:3, :3].T @ pose[:3, :3]) - 1.0)
    return (float(np.linalg.norm(now[:3, 3] - pose[:3, 3])),
            float(np.arccos(np.clip(cos, -1.0, 1.0))))


def wait_reached(probe, chain, goals):
    """Wait until the latest command puts every tip of ``goals`` {tip: (4, 4)} on its pose."""
    def reached():
        q = np.array(probe.last_command().position)
        return all(p <= POSITION_TOL and o <= ORIENTATION_TOL
                   for p, o in (errors(chain, q, tip, pose) for tip, pose in goals.items()))
    return wait_for(reached, REACH_TIMEOUT, interval=0.02)


def near(chain, q, joints, free, rng, spread=0.5):
    """Return a configuration of ``q`` with ``joints`` moved by up to ``spread`` [rad], inside
    the limits and clear of self-collision."""
    index = [chain.joint_index(j) for j in joints]
    span = chain.upper - chain.lower
    for _ in range(500):
        out = q.copy()
        out[index] += rng.uniform(-spread, spread, len(index))
        out = np.clip(out, chain.lower + 0.05 * span, chain.upper - 0.05 * span)
        if free(out):
            return out
    raise AssertionError('no free configuration found')


def assert_within_limits(chain, probe):
    """Every command since the node's first (a stream that starts at rest: one cut at a
    test's start, where the arm may still be settling from the test before, would read its
    first velocity as a jump from rest)."""
    limits, _ = limits_for_chain(chain, _NODE_YAML['velocity_scale'],
                                 _NODE_YAML['max_acceleration'])
    stamps, positions = commanded(probe, chain)
    v_ratio, a_ratio = stream_ratios(stamps, positions, limits.velocity, limits.acceleration)
    assert v_ratio <= 1.0 + 1e-6 and a_ratio <= 1.0 + 1e-6, (v_ratio, a_ratio)


def test_both_tips_reach_one_target_poses_goal_within_the_limits(system, publishers, chain,
                                                                 free):
    _, probe = system
    q_goal = near(chain, measured(probe, chain), chain.joint_names, free,
                  np.random.default_rng(4))
    goals = {tip: chain.fk(q_goal, tip) for tip in TIPS}
    since = time.monotonic()
    msg = PoseArray(poses=[matrix_to_pose(goals[tip]) for tip in TIPS])
    msg.header.frame_id = 'base_link'
    publishers['poses'].publish(msg)
    assert wait_reached(probe, chain, goals), 'both tips not reached within 10 s'
    assert_within_limits(chain, probe)


def test_a_goal_on_one_tip_moves_the_other_less_than_2_mm(system, publishers, chain, free):
    _, probe = system
    q = measured(probe, chain)
    left = [j for j in chain.joint_names if j.startswith('left_')]
    q_goal = near(chain, q, left, free, np.random.default_rng(5))
    goal = chain.fk(q_goal, 'left_tool')
    since = time.monotonic()
    msg = PoseStamped(pose=matrix_to_pose(goal))
    msg.header.frame_id = 'base_link'
    publishers['left'].publish(msg)
    assert wait_reached(probe, chain, {'left_tool': goal}), 'left tip not reached in 10 s'
    stamps, positions = commanded(probe, chain, since)
    right = chain.fk(positions, 'right_tool')[:, :3, 3]
    drift = np.linalg.norm(right - right[0], axis=1).max()
    assert drift < 2e-3, f'the right tool moved {1e3 * drift:.2f} mm'
    assert_within_limits(chain, probe)


def test_target_poses_of_another_count_are_refused_whole(system, publishers, chain):
    node, probe = system
    start = len(read_log(node.log_path))
    before = np.array(probe.last_command().position)
    msg = PoseArray(poses=[matrix_to_pose(chain.fk(before, 'left_tool'))] * 3)
    publishers['poses'].publish(msg)
    assert wait_for_log(node.log_path, 'target_poses refused whole', start=start)
    text = read_log(node.log_path)[start:]
    assert 'expected 2 poses, one per tip (left_tool, right_tool); got 3' in text


def test_a_default_pose_message_releases_the_tip(system, publishers):
    node, probe = system
    start = len(read_log(node.log_path))
    since = time.monotonic()
    publishers['left'].publish(PoseStamped())       # empty frame_id, the default pose
    assert wait_for_log(node.log_path, 'left_tool released', start=start)

    def left_released():
        for msg in reversed(probe.snapshot(probe.status, since)):
            tips = json.loads(msg.data)['tips']
            return not tips[0]['goal'] and tips[1]['goal']
        return False
    assert wait_for(left_released, 5.0), 'status: the left tip still has a goal'
