"""Unit tests of smcik_ros.ros.conversions and smcik_ros.ros.markers (messages, no graph)."""

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip('rclpy', reason='rclpy and the ROS message packages are needed '
                    '(./smcik installs them; or a ROS install)')

from geometry_msgs.msg import Point, Pose, Quaternion  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from smcik_ros.ros import conversions as rc  # noqa: E402
from smcik_ros.ros import markers  # noqa: E402
from smcik_ros.errors import GoalError  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.rotations import quat_to_matrix  # noqa: E402

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
    m.scale.x = m.scale.y = m.scale.z = diameter
    return m


def _frames(frame):
    """A frame lookup: base_link identity, 'up' 1 m above it, anything else unknown."""
    if frame == 'base_link':
        return np.eye(4)
    if frame == 'up':
        pose = np.eye(4)
        pose[2, 3] = 1.0
        return pose
    raise GoalError(f'unknown frame {frame!r}')


def test_obstacle_markers_become_scene_updates_in_the_base_frame():
    box = Marker(ns='o', id=2, type=Marker.CUBE, action=Marker.ADD)
    box.header.frame_id = 'up'
    box.pose.position = Point(x=0.5, y=0.0, z=0.0)
    box.pose.orientation.w = 1.0
    box.scale.x, box.scale.y, box.scale.z = 0.1, 0.2, 0.3
    cylinder = Marker(ns='o', id=3, type=Marker.CYLINDER, action=Marker.ADD)
    cylinder.pose.orientation.w = 1.0
    cylinder.scale.x = cylinder.scale.y = 0.2
    cylinder.scale.z = 0.5
    updates = rc.obstacle_updates(MarkerArray(markers=[
        _sphere('o', 1, (1.0, 0.0, 0.0), 0.2, frame=''), box, cylinder,
        Marker(ns='o', id=1, action=Marker.DELETE), Marker(ns='o', action=Marker.DELETEALL)]),
        _frames, 'base_link')
    assert [u[0] for u in updates] == ['add', 'add', 'add', 'delete', 'deleteall']
    sphere, box_obstacle, cylinder_obstacle = (u[2] for u in updates[:3])
    assert sphere.shape == 'sphere' and sphere.size == pytest.approx([0.1])
    assert box_obstacle.shape == 'box' and box_obstacle.pose[:3, 3] == pytest.approx([0.5, 0, 1])
    assert box_obstacle.size == pytest.approx([0.1, 0.2, 0.3])
    assert cylinder_obstacle.shape == 'cylinder'
    assert cylinder_obstacle.size == pytest.approx([0.1, 0.5])
    assert updates[3] == ('delete', ('o', 1)) and updates[4] == ('deleteall', 'o')


@pytest.mark.parametrize('marker, kind, message', [
    (Marker(type=Marker.ARROW, action=Marker.ADD), 'type', r'unsupported marker type'),
    (Marker(type=Marker.SPHERE, action=5), 'action', r'expected action ADD'),
    (_sphere('o', 0, (0, 0, 0), -0.1), 'shape', r'positive'),
    (_sphere('o', 0, (0, 0, float('nan')), 0.1), 'shape', r'finite'),
    (_sphere('o', 0, (0, 0, 0), 0.1, frame='nowhere'), 'frame', r'nowhere'),
])
def test_bad_obstacle_markers_are_refused_with_their_kind(marker, kind, message):
    good = _sphere('o', 1, (0, 0, 0), 0.1)
    with pytest.raises(GoalError, match=message) as info:
        rc.obstacle_updates(MarkerArray(markers=[good, marker]), _frames, 'base_link')
    assert info.value.kind == kind and 'obstacles[1]' in str(info.value)


# ---------------------------------------------------------------------------- point clouds
def _cloud(points, fields=('x', 'y', 'z'), dtype='<f4', pad=4, extra_row_bytes=0, height=1):
    """Return a PointCloud2 of (N, 3) points packed with numpy (independent of the parser)."""
    from sensor_msgs.msg import PointCloud2, PointField

    points = np.asarray(points, dtype=float)
    size = np.dtype(dtype).itemsize
    code = {('f', 4): PointField.FLOAT32, ('f', 8): PointField.FLOAT64,
            ('i', 2): PointField.INT16}[(np.dtype(dtype).kind, size)]
    # Fields in the given order, then an intensity-like padding field.
    point_step = 3 * size + pad
    width = len(points) // height
    msg = PointCloud2(height=height, width=width, point_step=point_step,
                      row_step=width * point_step + extra_row_bytes,
                      is_bigendian=np.dtype(dtype).byteorder == '>')
    offsets = {name: k * size for k, name in enumerate(fields)}
    msg.fields = [PointField(name=name, offset=offsets[name], datatype=code, count=1)
                  for name in fields]
    data = bytearray()
    for r in range(height):
        for point in points[r * width:(r + 1) * width]:
            record = bytearray(point_step)
            for axis, name in enumerate('xyz'):
                value = np.array([point[axis]], dtype=dtype).tobytes()
                record[offsets[name]:offsets[name] + size] = value
            data += record
        data += bytes(extra_row_bytes)
    msg.data = bytes(data)
    return msg


@pytest.mark.parametrize('dtype', ['<f4', '>f4', '<f8', '>f8'])
def test_pointcloud_fields_offsets_and_byte_order(dtype):
    rng = np.random.default_rng(3)
    points = rng.uniform(-2.0, 2.0, size=(50, 3))
    # Field order z, x, y: the offsets, not the order, say where each is.
    xyz = rc.pointcloud2_to_xyz(_cloud(points, fields=('z', 'x', 'y'), dtype=dtype))
    np.testing.assert_allclose(xyz, points, rtol=1e-6, atol=1e-6)


def test_organised_cloud_with_row_padding_and_nan_points():
    points = np.arange(24, dtype=float).reshape(8, 3) / 10.0
    points[2, 1] = np.nan
    points[5] = np.inf
    xyz = rc.pointcloud2_to_xyz(_cloud(points, height=2, extra_row_bytes=6))
    np.testing.assert_allclose(xyz, np.delete(points, [2, 5], axis=0), rtol=1e-6)
    assert rc.pointcloud2_to_xyz(_cloud(np.zeros((0, 3)))).shape == (0, 3)


def test_integer_fields_are_read():
    points = np.array([[1, -2, 3], [400, 5, -6]], dtype=float)
    np.testing.assert_allclose(rc.pointcloud2_to_xyz(_cloud(points, dtype='<i2')), points)


def test_malformed_clouds_are_refused():
    good = _cloud(np.ones((4, 3)))
    no_z = _cloud(np.ones((4, 3)))
    no_z.fields = no_z.fields[:2]
    with pytest.raises(GoalError, match='expected fields x, y and z'):
        rc.pointcloud2_to_xyz(no_z)
    short = _cloud(np.ones((4, 3)))
    short.data = bytes(good.data)[:-5]
    with pytest.raises(GoalError, match='expected at least'):
        rc.pointcloud2_to_xyz(short)
    outside = _cloud(np.ones((4, 3)))
    outside.fields[2].offset = outside.point_step - 2
    with pytest.raises(GoalError, match='does not fit in point_step'):
        rc.pointcloud2_to_xyz(outside)
    bad_type = _cloud(np.ones((4, 3)))
    bad_type.fields[0].datatype = 9
    with pytest.raises(GoalError, match='datatype'):
        rc.pointcloud2_to_xyz(bad_type)


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
    # The vertex arrays are the marker's lists.
    points, colors = markers.particle_vertices(positions, w, segments)
    np.testing.assert_array_equal([[p.x, p.y, p.z] for p in marker.points], points)
    np.testing.assert_array_equal([[c.r, c.g, c.b, c.a] for c in marker.colors], colors)


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


def test_loop_time_counts_integer_nanoseconds_from_the_start():
    """The loop's seconds are the node clock's nanoseconds since the start (exact integers
    first, then one conversion); an unset (zero) stamp is None."""
    class Clock:
        ns = 1_795_668_429_400_348_617

        def now(self):
            return type('Time', (), {'nanoseconds': self.ns})()
    clock = Clock()
    time = rc.LoopTime(clock)
    clock.ns += 2_500_000_001
    ns, seconds = time.now()
    assert ns == 1_795_668_431_900_348_618 and seconds == pytest.approx(2.500000001, abs=1e-12)
    assert time.of_stamp(rc.nanoseconds_to_stamp(clock.ns + 10**9)) == \
        pytest.approx(3.500000001, abs=1e-12)
    assert time.of_stamp(JointState().header.stamp) is None


def test_a_release_is_an_empty_frame_with_the_default_pose_only():
    from geometry_msgs.msg import PoseStamped
    from smcik_ros.ros.inputs import is_release, tip_topic
    msg = PoseStamped()
    assert is_release(msg), 'ros2 topic pub ... {} releases'
    msg.pose.orientation.w = 0.0
    assert is_release(msg)
    msg.pose.position.z = 0.3
    assert not is_release(msg), 'a pose goal in the base frame'
    msg = PoseStamped()
    msg.header.frame_id = 'world'
    assert not is_release(msg)
    assert tip_topic('l-hand.1', 'pose') == 'targets/l_hand_1/pose'
    assert tip_topic('3rd_finger', 'point') == 'targets/_3rd_finger/point'
