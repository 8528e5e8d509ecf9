"""Unit tests of smcik_ros.ros_conversions and smcik_ros.markers (messages, no graph)."""

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

from smcik_ros import markers  # noqa: E402
from smcik_ros import ros_conversions as rc  # noqa: E402
from smcik_ros.errors import GoalError  # noqa: E402
from smcik_ros.kinematics import Chain  # noqa: E402
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


def _random_joint_state(rng, chain_names, names):
    """A JointState over ``names`` (shuffled at times), sometimes with a NaN or a joint
    missing, sometimes with an extra joint."""
    names = list(names)
    if rng.random() < 0.2:
        names = list(rng.permutation(names))
    carried = [name for name in names if name in chain_names]
    if rng.random() < 0.1 and carried:
        names.remove(carried[rng.integers(len(carried))])
    if rng.random() < 0.1:
        names.append('gripper')
    position = rng.uniform(-3.0, 3.0, len(names))
    if rng.random() < 0.1:
        position[rng.integers(len(names))] = rng.choice([np.nan, np.inf])
    return JointState(name=names, position=position.tolist())


def test_joint_state_reader_reads_serialized_messages_like_messages():
    """From the bytes the middleware delivers, the reader answers what the message path
    answers (and the stamp), on streams with frame ids and names of every length modulo the
    CDR alignment, reordered, spoiled, shortened and lengthened, with and without
    velocities, from one publisher or from two that alternate (an arm and a gripper
    driver); the bytes path skips the deserialization on most of them."""
    from rclpy.serialization import serialize_message
    rng = np.random.default_rng(11)
    chain_names = ['a', 'bb', 'ccc', 'dddd', 'eeeee']
    messages, hits = 0, []
    for stream in range(30):
        reader = rc.JointStateReader(chain_names)
        publishers = []
        for _ in range(1 if stream < 20 else 2):
            names = chain_names + ['x' * int(rng.integers(1, 9))] * int(rng.integers(0, 2))
            if stream >= 20 and publishers:     # the second publisher: some joints + its own
                names = list(rng.choice(chain_names, 2, replace=False)) + ['gripper']
            publishers.append((list(rng.permutation(names)), 'f' * int(rng.integers(0, 8))))
        for k in range(100):
            stream_names, frame = publishers[k % len(publishers)]
            msg = _random_joint_state(rng, chain_names, stream_names)
            msg.header.frame_id = frame if rng.random() > 0.05 else 'other'
            msg.header.stamp.sec = int(rng.integers(0, 2**31))
            msg.header.stamp.nanosec = int(rng.integers(0, 10**9))
            if rng.random() < 0.5:
                msg.velocity = rng.normal(size=len(msg.name)).tolist()
            want = rc.joint_state_positions(msg, chain_names)
            q, missing, bad, extra, stamp = reader.read_serialized(bytes(serialize_message(msg)))
            np.testing.assert_array_equal(q, want[0])
            assert (missing, bad, extra) == want[1:]
            assert stamp == rc.stamp_to_nanoseconds(msg.header.stamp)
            messages += 1
        hits.append(reader.hits)
    assert messages == 3000
    # About 60 % of the messages are unspoiled repeats of a layout (measured 50-75 per
    # stream of 100); with two alternating publishers as many (each keeps its layout).
    assert sum(hits) > 1500 and min(hits) >= 40, hits
    assert np.mean(hits[20:]) > 50, hits
    with pytest.raises(GoalError, match='expected a serialized sensor_msgs/JointState'):
        reader.read_serialized(b'\x00\x01\x00\x00\x01')


def test_joint_state_writer_equals_make_joint_state():
    """The writer's bytes are make_joint_state's message as the middleware reads it (and
    equal to its serializer's bytes but for the alignment padding, which it leaves unset);
    the fallback, the filled message, equals that message. Names of every length modulo the
    padding, 40 writers each."""
    from rclpy.serialization import deserialize_message, serialize_message
    rng = np.random.default_rng(3)
    names = ['shoulder', 'elbow', 'wrist_1', 'wrist_2', 'wrist_3', 'a', 'b']
    for n in (1, 3, 7):
        assert all(rc.JointStateWriter([f'{name}_{k}' for name in names[:n]]).serialized
                   for k in range(40))
        writer = rc.JointStateWriter(names[:n])
        fallback = rc.JointStateWriter(names[:n])
        fallback._layout = None
        assert writer.serialized and not fallback.serialized
        for _ in range(50):
            q, dq = rng.normal(size=n), rng.normal(size=n)
            ns = int(rng.integers(0, 2**31 * 10**9))
            stamp = JointState().header.stamp
            stamp.sec, stamp.nanosec = ns // 10**9, ns % 10**9
            want = rc.make_joint_state(names[:n], q, dq, stamp)
            got = writer.fill(q, dq, ns)
            assert isinstance(got, bytes) and deserialize_message(got, JointState) == want
            assert len(got) == len(bytes(serialize_message(want)))
            message = fallback.fill(q, dq, ns)
            assert message == want and rc.stamp_to_nanoseconds(message.header.stamp) == ns
    with pytest.raises(ValueError, match=r'expected 3 positions and velocities; got shapes '
                                         r'\(2,\) and \(3,\)'):
        rc.JointStateWriter(NAMES).fill(np.zeros(2), np.zeros(3), 0)


def test_restamper_bytes_are_the_restamped_message():
    """Restamper's bytes are the message with every header stamped anew, as the middleware
    reads them, for the node's marker arrays of several sizes (DELETEALL first, particles,
    text of every alignment, an empty array, the collision markers); the fallback sets the
    stamps in the message; the message's own stamps are left as they were."""
    from rclpy.serialization import deserialize_message, serialize_message
    rng = np.random.default_rng(5)
    chain = Chain.from_urdf(URDF)
    segments = markers.link_segments(URDF.read_text(), chain.link_names)
    arrays = [MarkerArray()]
    for count in (1, 4, 20):
        q = chain.random_configuration(rng, count)
        positions = chain.link_poses(q)[..., :3, 3]
        arrays.append(markers.build_marker_array(
            'base_link', None, particle_positions=positions, weights=rng.random(count),
            segments=segments, map_positions=positions[0], target=rng.normal(size=3),
            spheres=[(rng.normal(size=3), 0.1)], clear=True))
    arrays.append(markers.collision_markers(
        'base_link', None, cover=(rng.normal(size=(30, 3)), rng.uniform(0.01, 0.1, 30)),
        closest=(rng.normal(size=3), rng.normal(size=3), 0.01)))
    for k, array in enumerate(arrays[1:]):
        array.markers[-1].text = 'x' * k          # strings of every length modulo 4
    for array in arrays:
        before = [rc.stamp_to_nanoseconds(m.header.stamp) for m in array.markers]
        restamper = rc.Restamper(array, [m.header for m in array.markers])
        fallback = rc.Restamper(array, [m.header for m in array.markers])
        fallback._layout = None
        assert restamper.serialized
        assert [rc.stamp_to_nanoseconds(m.header.stamp) for m in array.markers] == before
        for _ in range(5):
            ns = int(rng.integers(0, 2**31 * 10**9))
            data = restamper.at(ns)
            got = deserialize_message(data, MarkerArray)
            assert isinstance(data, bytes)
            assert [rc.stamp_to_nanoseconds(m.header.stamp) for m in got.markers] == \
                [ns] * len(array.markers)
            message = fallback.at(ns)
            assert message is array
            assert got == deserialize_message(serialize_message(message), MarkerArray)


def test_vertex_splicer_bytes_are_the_message_with_its_vertices():
    """VertexSplicer's bytes are the MarkerArray with the marker's vertices as objects, as
    the middleware reads them: the particles' marker first, between others or last, after
    strings of every length modulo 8 and other markers' points, with 0 to 200 vertices; the
    marker's own lists stay empty. The fallback (no layout) fills the lists and returns the
    message itself; a colour count that differs from the points' is refused."""
    from rclpy.serialization import deserialize_message, serialize_message
    rng = np.random.default_rng(11)
    splicer = rc.VertexSplicer()
    fallback = rc.VertexSplicer()
    fallback._layout = None
    assert splicer.serialized and not fallback.serialized
    chain = Chain.from_urdf(URDF)
    for case in range(48):
        count = int(rng.choice([0, 1, 2, 3, 17, 200]))
        points, colors = rng.normal(size=(count, 3)), rng.random((count, 4))
        others = markers.build_marker_array(
            'base' + 'x' * (case % 8), None, map_positions=chain.link_poses(
                chain.random_configuration(rng))[:, :3, 3], target=rng.normal(size=3),
            clear=bool(case % 2))
        others.markers[-1].text = 'y' * (case // 8)
        marker = markers.particle_marker(None, None, 'b' * (case % 5), fill=False)
        marker.header.stamp.sec = int(rng.integers(0, 2**31))
        others.markers.insert(int(rng.integers(0, len(others.markers) + 1)), marker)
        data = splicer.serialize(others, marker, points, colors)
        assert isinstance(data, bytes)
        assert len(marker.points) == len(marker.colors) == 0
        got = deserialize_message(data, MarkerArray)
        message = fallback.serialize(others, marker, points, colors)
        assert message is others and len(marker.points) == len(marker.colors) == count
        assert got == deserialize_message(serialize_message(message), MarkerArray)
        spliced = got.markers[others.markers.index(marker)]
        np.testing.assert_array_equal(
            np.reshape([[p.x, p.y, p.z] for p in spliced.points], (-1, 3)), points)
        np.testing.assert_array_equal(
            np.reshape([[c.r, c.g, c.b, c.a] for c in spliced.colors], (-1, 4)),
            colors.astype(np.float32))
    with pytest.raises(ValueError, match='expected one colour per vertex; got 3 points and '
                                         '2 colours'):
        splicer.serialize(MarkerArray(markers=[marker]), marker, np.zeros((3, 3)),
                          np.zeros((2, 4)))


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
    # The vertex arrays (what the node splices into the bytes) are the marker's lists.
    points, colors = markers.particle_vertices(positions, w, segments)
    np.testing.assert_array_equal([[p.x, p.y, p.z] for p in marker.points], points)
    np.testing.assert_array_equal([[c.r, c.g, c.b, c.a] for c in marker.colors], colors)
    empty = markers.particle_marker(positions, w, 'base_link', segments=segments, fill=False)
    assert empty.type == Marker.LINE_LIST and not empty.points and not empty.colors


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
