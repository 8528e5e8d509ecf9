"""Unit tests of smcik_ros.ros_conversions and smcik_ros.markers (messages, no graph)."""

import math
from pathlib import Path

from geometry_msgs.msg import Point, Pose, Quaternion
import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import Marker, MarkerArray

from smcik_ros import markers
from smcik_ros import ros_conversions as rc
from smcik_ros.errors import GoalError
from smcik_ros.kinematics import Chain
from smcik_ros.rotations import quat_to_matrix

URDF = Path(__file__).resolve().parents[1] / 'urdf' / 'smcik_arm.urdf'
NAMES = ['a', 'b', 'c']


def _pose(p=(0.1, 0.2, 0.3), q_xyzw=(0.0, 0.0, 0.0, 1.0)):
    return Pose(position=Point(x=p[0], y=p[1], z=p[2]),
                orientation=Quaternion(x=q_xyzw[0], y=q_xyzw[1], z=q_xyzw[2], w=q_xyzw[3]))


def _random_rotation(rng):
    q = rng.normal(size=4)
    return quat_to_matrix(q / np.linalg.norm(q))


def test_pose_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(20):
        matrix = np.eye(4)
        matrix[:3, :3] = _random_rotation(rng)
        matrix[:3, 3] = rng.uniform(-1, 1, 3)
        np.testing.assert_allclose(rc.pose_to_matrix(rc.matrix_to_pose(matrix)), matrix,
                                   atol=1e-12)


def test_quaternion_is_read_as_xyzw():
    # 90 degrees about z: (x, y, z, w) = (0, 0, sin 45, cos 45).
    s = math.sqrt(0.5)
    matrix = rc.pose_to_matrix(_pose(q_xyzw=(0.0, 0.0, s, s)))
    np.testing.assert_allclose(matrix[:3, 0], [0.0, 1.0, 0.0], atol=1e-12)


def test_non_normalised_quaternion_is_normalised():
    s = math.sqrt(0.5)
    scaled = rc.pose_to_matrix(_pose(q_xyzw=(0.0, 0.0, 3 * s, 3 * s)))
    unit = rc.pose_to_matrix(_pose(q_xyzw=(0.0, 0.0, s, s)))
    np.testing.assert_allclose(scaled, unit, atol=1e-12)


@pytest.mark.parametrize('q_xyzw, message', [
    ((0.0, 0.0, 0.0, 0.0), r'expected a unit quaternion .* norm 0'),
    ((0.0, 0.0, 0.0, 1e-4), r'norm 0.0001'),
    ((0.0, 0.0, 0.0, 1e4), r'norm 1e\+04'),
    ((0.0, 0.0, float('nan'), 1.0), r'non-finite'),
])
def test_bad_quaternions_are_refused(q_xyzw, message):
    with pytest.raises(GoalError, match=message):
        rc.pose_to_matrix(_pose(q_xyzw=q_xyzw), 'target_pose.pose')


def test_nan_position_is_refused():
    with pytest.raises(GoalError, match=r'target_pose.pose.position: expected a finite position'):
        rc.pose_to_matrix(_pose(p=(0.0, float('nan'), 0.0)), 'target_pose.pose')
    with pytest.raises(GoalError, match='finite point'):
        rc.point_to_array(Point(x=float('inf')))


def test_goal_pose_points_the_tool_down_along_the_clicked_yaw():
    yaw = 0.7
    click = _pose(p=(0.4, -0.2, 0.0), q_xyzw=(0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)))
    goal = rc.goal_pose_to_matrix(click, height=0.25)
    np.testing.assert_allclose(goal[:3, 3], [0.4, -0.2, 0.25])
    np.testing.assert_allclose(goal[:3, 2], [0.0, 0.0, -1.0], atol=1e-12)        # tool z down
    np.testing.assert_allclose(goal[:3, 0], [math.cos(yaw), math.sin(yaw), 0.0], atol=1e-12)
    rot = goal[:3, :3]
    np.testing.assert_allclose(rot @ rot.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(rot) == pytest.approx(1.0)


def test_joint_state_mapped_by_name_missing_kept_extra_ignored():
    msg = JointState(name=['c', 'x', 'a'], position=[3.0, 9.0, 1.0])
    q, missing, extra = rc.joint_state_to_positions(msg, NAMES, [np.nan, 7.0, np.nan])
    np.testing.assert_array_equal(q, [1.0, 7.0, 3.0])
    assert missing == ['b'] and extra == ['x']


@pytest.mark.parametrize('msg, message', [
    (JointState(name=['a', 'b'], position=[1.0]), r'2 names and 1 positions'),
    (JointState(name=['a'], position=[float('nan')]), r"finite position for 'a'"),
])
def test_bad_joint_states_are_refused(msg, message):
    with pytest.raises(GoalError, match=message):
        rc.joint_state_to_positions(msg, NAMES, np.zeros(3))


def test_joint_state_positions_keep_what_is_usable():
    msg = JointState(name=['b', 'x', 'a', 'c'], position=[2.0, 9.0, 1.0, float('nan')])
    q, missing, bad, extra = rc.joint_state_positions(msg, ['a', 'b', 'c', 'd'])
    assert q[:2] == pytest.approx([1.0, 2.0]) and np.isnan(q[2]) and np.isnan(q[3])
    assert (missing, bad, extra) == (['d'], ['c'], ['x'])
    with pytest.raises(GoalError, match='expected one position per name, got 2 names and 1'):
        rc.joint_state_positions(JointState(name=['a', 'b'], position=[1.0]), ['a'])


def test_stamp_to_nanoseconds_is_exact():
    msg = JointState()
    assert rc.stamp_to_nanoseconds(msg.header.stamp) == 0
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_795_668_429, 400_348_617
    assert rc.stamp_to_nanoseconds(msg.header.stamp) == 1_795_668_429_400_348_617


def test_command_messages():
    q, dq = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    js = rc.make_joint_state(NAMES, q, dq)
    assert list(js.name) == NAMES and list(js.position) == pytest.approx(q)
    traj = rc.make_joint_trajectory(NAMES, q, dq, 0.01)
    assert list(traj.joint_names) == NAMES and len(traj.points) == 1
    assert (traj.points[0].time_from_start.sec, traj.points[0].time_from_start.nanosec) == \
        (0, 10_000_000)
    array = rc.make_float64_multi_array(q)
    assert list(array.data) == pytest.approx(q) and array.layout.dim[0].size == 3
    for msg in (js, traj, array):
        np.testing.assert_allclose(rc.command_to_positions(msg, NAMES, np.zeros(3)), q)


def test_duration_rounding():
    d = rc.duration_from_seconds(1.9999999999)
    assert (d.sec, d.nanosec) == (2, 0)
    d = rc.duration_from_seconds(0.5)
    assert (d.sec, d.nanosec) == (0, 500_000_000)


def test_bad_commands_are_refused():
    with pytest.raises(GoalError, match='expected 3 values'):
        rc.command_to_positions(Float64MultiArray(data=[1.0]), NAMES, np.zeros(3))
    with pytest.raises(GoalError, match='at least one point'):
        rc.command_to_positions(JointTrajectory(joint_names=NAMES), NAMES, np.zeros(3))


def _sphere(ns, marker_id, center, diameter, action=Marker.ADD, frame='base_link'):
    m = Marker(ns=ns, id=marker_id, type=Marker.SPHERE, action=action)
    m.header.frame_id = frame
    m.pose.position = Point(x=center[0], y=center[1], z=center[2])
    m.scale.x = diameter
    return m


def test_keep_out_markers_add_delete_deleteall():
    spheres = rc.update_keep_out_spheres({}, MarkerArray(markers=[
        _sphere('obstacles', 0, (1.0, 0.0, 0.0), 0.2),
        _sphere('obstacles', 1, (0.0, 1.0, 0.0), 0.4, frame='')]), 'base_link')
    assert set(spheres) == {('obstacles', 0), ('obstacles', 1)}
    frame, center, radius = spheres[('obstacles', 1)]
    assert frame == 'base_link' and radius == pytest.approx(0.2)
    np.testing.assert_allclose(center, [0.0, 1.0, 0.0])
    fewer = rc.update_keep_out_spheres(spheres, MarkerArray(markers=[
        Marker(ns='obstacles', id=0, action=Marker.DELETE)]), 'base_link')
    assert set(fewer) == {('obstacles', 1)} and len(spheres) == 2   # input untouched
    cleared = rc.update_keep_out_spheres(fewer, MarkerArray(markers=[
        Marker(action=Marker.DELETEALL), _sphere('obstacles', 5, (0, 0, 1), 0.1)]), 'base_link')
    assert set(cleared) == {('obstacles', 5)}


@pytest.mark.parametrize('marker, message', [
    (Marker(type=Marker.CUBE, action=Marker.ADD), r'expected a SPHERE marker'),
    (_sphere('o', 0, (0, 0, 0), 0.0), r'scale.x = sphere diameter > 0'),
    (_sphere('o', 0, (0, 0, float('nan')), 0.1), r'finite point'),
])
def test_bad_keep_out_markers_apply_nothing(marker, message):
    good = _sphere('o', 1, (0, 0, 0), 0.1)
    with pytest.raises(GoalError, match=message):
        rc.update_keep_out_spheres({}, MarkerArray(markers=[good, marker]), 'base_link')


# ---------------------------------------------------------------------------- markers
@pytest.fixture(scope='module')
def chain():
    return Chain.from_urdf(str(URDF), 'base_link', 'tool0')


def test_link_segments_follow_the_urdf_tree(chain):
    segments = markers.link_segments(URDF.read_text(), chain.link_names)
    names = chain.link_names
    pairs = {(names[a], names[b]) for a, b in segments}
    assert ('base_link', 'link1') in pairs and ('flange', 'tool0') in pairs
    assert len(pairs) == len(names) - 1


def test_particle_marker_one_line_list_with_colour_per_vertex(chain):
    rng = np.random.default_rng(3)
    q = chain.random_configuration(rng, 40)
    weights = rng.random(40)
    chosen, w = markers.select_particles(q, weights, 10)
    assert len(chosen) == 10 and w.min() >= np.sort(weights)[-10]
    positions = chain.link_poses(chosen)[..., :3, 3]
    segments = markers.link_segments(URDF.read_text(), chain.link_names)
    marker = markers.particle_marker(positions, w, 'base_link', segments=segments)
    assert marker.type == Marker.LINE_LIST
    assert len(marker.points) == len(marker.colors) == 10 * len(segments) * 2
    # First vertex is the first particle's parent link of the first segment.
    first = positions[0, segments[0, 0]]
    assert [marker.points[0].x, marker.points[0].y, marker.points[0].z] == \
        pytest.approx(first.tolist())
    # Highest weight is pure green, opaque.
    best = int(np.argmax(w))
    colour = marker.colors[best * len(segments) * 2]
    assert (colour.r, colour.g, colour.a) == pytest.approx((0.0, 1.0, 1.0))


def test_marker_array_contents(chain):
    q = chain.neutral_configuration()
    target = chain.fk(q)
    array = markers.build_marker_array(
        'base_link', particle_positions=chain.link_poses(q[None])[..., :3, 3],
        weights=np.ones(1), map_positions=chain.link_poses(q)[:, :3, 3], target=target,
        spheres=[((0.3, 0, 0.2), 0.05)], clear=True)
    kinds = [(m.ns, m.type, m.action) for m in array.markers]
    assert kinds[0][2] == Marker.DELETEALL
    assert ('particles', Marker.LINE_LIST, Marker.ADD) in kinds
    assert ('map', Marker.LINE_STRIP, Marker.ADD) in kinds
    assert ('target', Marker.ARROW, Marker.ADD) in kinds
    sphere = [m for m in array.markers if m.ns == 'keep_out'][0]
    assert sphere.scale.x == pytest.approx(0.1)
    arrow = [m for m in array.markers if m.ns == 'target'][0]
    # The arrow (its x axis) points along the target's z axis.
    arrow_x = rc.pose_to_matrix(arrow.pose)[:3, 0]
    np.testing.assert_allclose(arrow_x, target[:3, 2], atol=1e-9)
    point_target = markers.target_marker(np.array([0.1, 0.2, 0.3]), 'base_link')
    assert point_target.type == Marker.SPHERE
