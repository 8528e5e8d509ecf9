"""sim_arm's start: initial_state (an SRDF group_state), with real rclpy nodes in their own
context (no other process), and the fail-fast exit of a bad one."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed to build sim_arm nodes')

from rclpy.parameter import Parameter  # noqa: E402

from conftest import private_domain_id  # noqa: E402
from ros_helpers import REPO_ROOT  # noqa: E402
from smcik_ros.control.arm_state import initial_configuration  # noqa: E402
from smcik_ros.errors import GoalError, SmcIkError  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.sim_arm import SimArm, urdf_joints  # noqa: E402

DOMAIN_ID = private_domain_id(os.getpid() + 53)
URDF = REPO_ROOT / 'urdf' / 'smcik_arm.urdf'
HOME = [0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.0]      # urdf/smcik_arm.srdf's group_state 'home'


@pytest.fixture
def context():
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=DOMAIN_ID)
    yield ctx
    rclpy.try_shutdown(context=ctx)


def _sim_arm(context, **params):
    overrides = [Parameter(name, value=value) for name, value in params.items()]
    node = SimArm(context=context, parameter_overrides=overrides)
    q = node.q.copy()
    node.destroy_node()
    return q


def _srdf_with_state(path, values):
    joints = ''.join(f'<joint name="joint{k + 1}" value="{v}"/>' for k, v in values.items())
    path.write_text(f'<robot name="x"><group_state name="tucked" group="arm">{joints}'
                    '</group_state></robot>')
    return str(path)


def test_initial_state_starts_at_the_srdf_group_state(context, tmp_path):
    """'home' of the SRDF beside the URDF; a state of srdf_path, clipped into the limits;
    without initial_state the default start (0 where the range holds it, else mid-range)."""
    np.testing.assert_array_equal(_sim_arm(context, urdf_path=str(URDF), initial_state='home'),
                                  HOME)
    chain = Chain.from_urdf(str(URDF), 'base_link', 'tool0')
    mid = 0.5 * (chain.lower + chain.upper) + 0.01 * np.arange(7)
    values = {k: float(mid[k]) for k in range(7)}
    values[1] = 50.0                                # beyond joint2's upper limit
    srdf = _srdf_with_state(tmp_path / 'other.srdf', values)
    q = _sim_arm(context, urdf_path=str(URDF), initial_state='tucked', srdf_path=srdf)
    assert q[1] == chain.upper[1]
    np.testing.assert_allclose(np.delete(q, 1), np.delete([values[k] for k in range(7)], 1))
    np.testing.assert_array_equal(_sim_arm(context, urdf_path=str(URDF)),
                                  initial_configuration(chain))


@pytest.mark.parametrize('case', ['unknown', 'incomplete', 'both', 'no_srdf'])
def test_a_bad_initial_state_is_refused_with_what_to_do(context, tmp_path, case):
    params = dict(urdf_path=str(URDF), initial_state='home')
    if case == 'unknown':
        params['initial_state'] = 'nope'
        match = (r"initial_state 'nope' is not a group_state of SRDF file '.*smcik_arm.srdf'; "
                 r'it has: home')
    elif case == 'incomplete':
        params.update(initial_state='tucked', srdf_path=_srdf_with_state(
            tmp_path / 'short.srdf', {k: 0.0 for k in range(6)}))
        match = r"initial_state 'tucked' of SRDF file .* has no value for joint7 \(chain joints"
    elif case == 'both':
        params['initial_positions'] = HOME
        match = "initial_state 'home' and initial_positions are both set: give one of them"
    else:
        params['urdf_path'] = str(shutil.copy(URDF, tmp_path / 'alone.urdf'))
        match = r"initial_state 'home': no SRDF found beside the URDF .*: set srdf_path"
    with pytest.raises(GoalError, match=match):
        _sim_arm(context, **params)


def test_sim_arm_exits_1_on_an_unknown_initial_state(tmp_path):
    """The process fails fast (exit 1) and says which states the SRDF has."""
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), ROS_LOG_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, '-m', 'smcik_ros.sim_arm', '--ros-args', '-p',
         f'urdf_path:={URDF}', '-p', 'initial_state:=ready'],
        env=env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "initial_state 'ready' is not a group_state" in done.stderr + done.stdout
    assert 'it has: home' in done.stderr + done.stdout
    assert issubclass(GoalError, SmcIkError)


def test_every_movable_joint_of_the_urdf_is_played(context, tmp_path):
    """Joints off the chain (a gripper finger, the other arm) are published too, at their
    start values; initial_positions in chain order fills the chain's joints."""
    from arm_urdfs import JOINTS, ur5_like_urdf
    path = tmp_path / 'ur5.urdf'
    path.write_text(ur5_like_urdf())
    node = SimArm(context=context, parameter_overrides=[
        Parameter('urdf_path', value=str(path)), Parameter('tip_link', value='tool0'),
        Parameter('initial_positions', value=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6])])
    try:
        assert node.joint_names == JOINTS + ['finger_joint']
        np.testing.assert_allclose(node.q, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.0])
    finally:
        node.destroy_node()
    two = REPO_ROOT / 'test' / 'urdf' / 'two_tips.urdf'
    node = SimArm(context=context, parameter_overrides=[
        Parameter('urdf_path', value=str(two)), Parameter('tip_link', value='left_tool')])
    try:
        chain = Chain.from_urdf(str(two), 'base_link', ['left_tool', 'right_tool'])
        assert node.joint_names == list(chain.joint_names), 'the right arm is played too'
        assert node.chain.joint_names == chain.joint_names[:4]
    finally:
        node.destroy_node()


def test_continuous_joints_without_bounds_are_played_unbounded(context, tmp_path):
    """PR2 (example-robot-data) writes its continuous joints' <limit> with effort and
    velocity only: sim_arm stopped at start-up on them (float(None))."""
    from arm_urdfs import ur5_like_urdf
    path = tmp_path / 'ur5.urdf'
    path.write_text(ur5_like_urdf(continuous=(4, 6)))
    node = SimArm(context=context, parameter_overrides=[
        Parameter('urdf_path', value=str(path)), Parameter('tip_link', value='tool0')])
    try:
        names, lower, upper, _ = urdf_joints(path.read_text())
        assert np.isneginf(lower[[3, 5]]).all() and np.isposinf(upper[[3, 5]]).all()
        assert np.isfinite(lower[[0, 1, 2, 4]]).all() and names == list(node.joint_names)
        np.testing.assert_array_equal(node._clip(np.full(len(names), 100.0))[[3, 5]], 100.0)
    finally:
        node.destroy_node()

