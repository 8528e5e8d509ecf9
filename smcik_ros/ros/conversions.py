"""Message <-> numpy conversions for the rclpy layer (no node, no graph needed).

Poses are (4, 4) homogeneous matrices [m]; quaternions in messages are (x, y, z, w), the
package's rotation helpers use (w, x, y, z). Every function that reads an incoming message
validates it and raises :class:`~smcik_ros.errors.GoalError` with a message saying what was
expected and what arrived; the node turns that into one log line.
"""

import math

from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point, Pose, Quaternion
import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker

from ..collision import obstacle_from_marker
from ..errors import GoalError
from ..goals import symmetric_positive_definite
from ..rotations import matrix_to_quat, quat_to_matrix

__all__ = [
    'QUATERNION_NORM_RANGE', 'pose_to_matrix', 'matrix_to_pose', 'point_to_array',
    'goal_pose_to_matrix', 'tool_down_rotation', 'yaw_of_quaternion', 'joint_state_to_positions',
    'joint_state_positions', 'stamp_to_nanoseconds', 'make_joint_state',
    'make_joint_trajectory', 'make_float64_multi_array', 'command_to_positions',
    'duration_from_seconds', 'POINT_FIELD_TYPES', 'pointcloud2_to_xyz', 'obstacle_updates',
    'POSITION_ONLY_VARIANCE', 'covariance_from_msg', 'pose_with_covariance_to_goal',
    'make_alternatives_trajectory', 'nanoseconds_to_stamp', 'LoopTime',
]

# Quaternions whose norm lies in this range are normalised; others are refused.
QUATERNION_NORM_RANGE = (1e-3, 1e3)


def _finite_values(where, values, expected):
    values = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(values)):
        raise GoalError(f'{where}: expected {expected}, got non-finite values '
                        f'{np.array2string(values, precision=4)}')
    return values


def quaternion_msg_to_wxyz(quaternion, where='orientation'):
    """Return the unit (w, x, y, z) of a geometry_msgs/Quaternion, normalising if needed.

    A norm outside QUATERNION_NORM_RANGE (e.g. the all-zero quaternion) is refused.
    """
    q = _finite_values(where, [quaternion.w, quaternion.x, quaternion.y, quaternion.z],
                       'a finite quaternion (x, y, z, w)')
    norm = float(np.linalg.norm(q))
    low, high = QUATERNION_NORM_RANGE
    if not low <= norm <= high:
        raise GoalError(f'{where}: expected a unit quaternion (norm 1; norms in '
                        f'[{low:g}, {high:g}] are normalised), got (x, y, z, w) = '
                        f'({quaternion.x:g}, {quaternion.y:g}, {quaternion.z:g}, '
                        f'{quaternion.w:g}) with norm {norm:.3g}')
    return q / norm


def pose_to_matrix(pose, where='pose'):
    """Return the (4, 4) matrix of a geometry_msgs/Pose [m]; see quaternion_msg_to_wxyz."""
    position = _finite_values(f'{where}.position',
                              [pose.position.x, pose.position.y, pose.position.z],
                              'a finite position [m]')
    out = np.eye(4)
    out[:3, :3] = quat_to_matrix(quaternion_msg_to_wxyz(pose.orientation,
                                                        f'{where}.orientation'))
    out[:3, 3] = position
    return out


def matrix_to_pose(matrix):
    """Return the geometry_msgs/Pose of a (4, 4) homogeneous matrix [m]."""
    matrix = np.asarray(matrix, dtype=float)
    w, x, y, z = (float(v) for v in matrix_to_quat(matrix[:3, :3]))
    p = matrix[:3, 3]
    return Pose(position=Point(x=float(p[0]), y=float(p[1]), z=float(p[2])),
                orientation=Quaternion(x=x, y=y, z=z, w=w))


def point_to_array(point, where='point'):
    """Return the (3,) array [m] of a geometry_msgs/Point, refusing non-finite values."""
    return _finite_values(where, [point.x, point.y, point.z], 'a finite point [m]')


def yaw_of_quaternion(wxyz):
    """Return the yaw [rad] (rotation about z) of a unit (w, x, y, z) quaternion."""
    w, x, y, z = wxyz
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def tool_down_rotation(yaw):
    """Return the (3, 3) rotation with the tool z axis pointing down (-z), x along ``yaw``.

    R = Rz(yaw) Rx(pi): the tool x axis points along the clicked arrow, z points down.
    """
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, s, 0.0],
                     [s, -c, 0.0],
                     [0.0, 0.0, -1.0]])


def goal_pose_to_matrix(pose, height, where='goal_pose'):
    """Return the arm goal (4, 4) for an RViz "2D Goal Pose" click, in the click's frame.

    Position: x, y from the click, z = ``height`` [m]. Orientation: tool pointing down (tool
    z = -z of the frame), tool x along the clicked arrow (its yaw).
    """
    position = _finite_values(f'{where}.position', [pose.position.x, pose.position.y],
                              'a finite position [m]')
    yaw = yaw_of_quaternion(quaternion_msg_to_wxyz(pose.orientation, f'{where}.orientation'))
    out = np.eye(4)
    out[:3, :3] = tool_down_rotation(yaw)
    out[:3, 3] = [position[0], position[1], float(height)]
    return out


def joint_state_positions(msg, joint_names):
    """Map a sensor_msgs/JointState onto ``joint_names`` by name, keeping what is usable.

    Returns (q (n,) with NaN for joints the message lacks or carries as NaN/inf, missing names,
    non-finite names, extra names). Raises GoalError only when names and positions differ in
    length (the message cannot be read at all).
    """
    names = list(msg.name)
    positions = np.asarray(msg.position, dtype=float)
    if len(names) != len(positions):
        raise GoalError(f'joint_states: expected one position per name, got {len(names)} '
                        f'names and {len(positions)} positions')
    index = {name: i for i, name in enumerate(names)}
    q = np.full(len(joint_names), np.nan)
    missing, bad = [], []
    for j, name in enumerate(joint_names):
        i = index.get(name)
        if i is None:
            missing.append(name)
        elif not math.isfinite(positions[i]):
            bad.append(name)
        else:
            q[j] = positions[i]
    known = set(joint_names)
    extra = [name for name in names if name not in known]
    return q, missing, bad, extra


def joint_state_to_positions(msg, joint_names, previous):
    """Map a sensor_msgs/JointState onto ``joint_names`` by name.

    ``previous``: (n,) values kept for joints the message does not carry (NaN = not known yet).
    Returns (q (n,), missing names, extra names). Raises GoalError when names and positions
    differ in length or a carried position is not finite.
    """
    q, missing, bad, extra = joint_state_positions(msg, joint_names)
    if bad:
        value = msg.position[list(msg.name).index(bad[0])]
        raise GoalError(f'joint_states: expected a finite position for {bad[0]!r}, got {value}')
    return np.where(np.isnan(q), np.asarray(previous, dtype=float), q), missing, extra


def stamp_to_nanoseconds(stamp):
    """Return a builtin_interfaces/Time as integer nanoseconds (0 for an unset stamp)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def nanoseconds_to_stamp(ns):
    """Return the builtin_interfaces/Time of integer nanoseconds ``ns`` >= 0."""
    sec, nanosec = divmod(int(ns), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


class LoopTime:
    """The control loop's time: seconds of the node clock (ROS time: /clock under
    use_sim_time) since the node started, from integer nanoseconds (float seconds since 1970
    would carry 0.2 us of rounding). ``clock``: an rclpy Clock."""

    def __init__(self, clock):
        self._clock = clock
        self.epoch_ns = clock.now().nanoseconds

    def now(self):
        """Return (nanoseconds of the node clock, the loop's seconds)."""
        ns = self._clock.now().nanoseconds
        return ns, (ns - self.epoch_ns) * 1e-9

    def of_stamp(self, stamp):
        """Return a header stamp in the loop's seconds, or None for an unset (zero) stamp."""
        ns = stamp_to_nanoseconds(stamp)
        return None if ns == 0 else (ns - self.epoch_ns) * 1e-9


def make_joint_state(joint_names, q, dq=None, stamp=None):
    """Return a sensor_msgs/JointState with names, positions [rad or m] and velocities."""
    msg = JointState()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.name = list(joint_names)
    msg.position = np.asarray(q, dtype=float).tolist()
    if dq is not None:
        msg.velocity = np.asarray(dq, dtype=float).tolist()
    return msg


def duration_from_seconds(seconds):
    """Return the builtin_interfaces/Duration of ``seconds`` >= 0."""
    sec = int(math.floor(seconds))
    nanosec = int(round((seconds - sec) * 1e9))
    if nanosec >= 1_000_000_000:
        sec, nanosec = sec + 1, nanosec - 1_000_000_000
    return Duration(sec=sec, nanosec=nanosec)


def make_joint_trajectory(joint_names, q, dq, time_from_start, stamp=None):
    """Return a one-point JointTrajectory reaching ``q`` at ``time_from_start`` [s].

    A zero header stamp means "start now" for ros2_control's joint_trajectory_controller.
    """
    msg = JointTrajectory()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    point = JointTrajectoryPoint()
    point.positions = np.asarray(q, dtype=float).tolist()
    if dq is not None:
        point.velocities = np.asarray(dq, dtype=float).tolist()
    point.time_from_start = duration_from_seconds(time_from_start)
    msg.points = [point]
    return msg


def make_float64_multi_array(q):
    """Return a std_msgs/Float64MultiArray of ``q`` (forward_command_controller, chain order)."""
    msg = Float64MultiArray()
    q = np.asarray(q, dtype=float)
    msg.layout.dim = [MultiArrayDimension(label='joints', size=len(q), stride=len(q))]
    msg.data = q.tolist()
    return msg


def command_to_positions(msg, joint_names, previous):
    """Return the (n,) commanded positions of a JointState, JointTrajectory or Float64MultiArray.

    JointState / JointTrajectory are mapped by name (joints not carried keep ``previous``; the
    trajectory's last point is used); Float64MultiArray must carry one value per joint in
    ``joint_names`` order. Raises GoalError on a malformed or non-finite command.
    """
    if isinstance(msg, JointState):
        q, _, _ = joint_state_to_positions(msg, joint_names, previous)
        return q
    if isinstance(msg, JointTrajectory):
        if not msg.points:
            raise GoalError('joint_trajectory: expected at least one point, got none')
        fake = JointState(name=list(msg.joint_names), position=list(msg.points[-1].positions))
        q, _, _ = joint_state_to_positions(fake, joint_names, previous)
        return q
    if isinstance(msg, Float64MultiArray):
        if len(msg.data) != len(joint_names):
            raise GoalError(f'float64_multi_array: expected {len(joint_names)} values '
                            f'({", ".join(joint_names)}), got {len(msg.data)}')
        return _finite_values('float64_multi_array', msg.data, 'finite joint positions')
    raise GoalError(f'command: unsupported message type {type(msg).__name__}')


# sensor_msgs/PointField datatype -> numpy type code (INT8 .. FLOAT64).
POINT_FIELD_TYPES = {1: 'i1', 2: 'u1', 3: 'i2', 4: 'u2', 5: 'i4', 6: 'u4', 7: 'f4', 8: 'f8'}


def pointcloud2_to_xyz(msg, where='pointcloud'):
    """Return the (N, 3) float64 x, y, z [m] of a sensor_msgs/PointCloud2, NaN points dropped.

    Plain numpy (sensor_msgs_py is not needed): the x, y and z fields are read at their
    ``offset`` with their ``datatype`` (FLOAT32, FLOAT64 or an integer type) in the cloud's
    byte order (``is_bigendian``), every ``point_step`` bytes; ``row_step`` may pad the rows of
    an organised cloud (``height`` > 1 rows of ``width`` points). Points with a non-finite
    coordinate (invalid returns of a dense or organised cloud) are dropped. Raises GoalError
    when the fields are missing or malformed, or the data is shorter than the layout says.
    """
    fields = {f.name: f for f in msg.fields}
    missing = [name for name in 'xyz' if name not in fields]
    if missing:
        raise GoalError(f'{where}: expected fields x, y and z; got fields '
                        f'{", ".join(fields) or "none"}')
    height, width = int(msg.height), int(msg.width)
    point_step, row_step = int(msg.point_step), int(msg.row_step)
    if height == 0 or width == 0:
        return np.zeros((0, 3))
    endian = '>' if msg.is_bigendian else '<'
    formats, offsets = [], []
    for name in 'xyz':
        field = fields[name]
        code = POINT_FIELD_TYPES.get(int(field.datatype))
        if code is None:
            raise GoalError(f'{where}: field {name}: expected a PointField datatype 1..8 '
                            f'(INT8 .. FLOAT64), got {field.datatype}')
        size = np.dtype(code).itemsize
        if field.offset < 0 or field.offset + size > point_step:
            raise GoalError(f'{where}: field {name} ({size} bytes at offset {field.offset}) '
                            f'does not fit in point_step {point_step}')
        formats.append(endian + code)
        offsets.append(int(field.offset))
    row_bytes = width * point_step
    if row_step < row_bytes:
        raise GoalError(f'{where}: row_step {row_step} is shorter than width x point_step '
                        f'= {width} x {point_step}')
    data = np.frombuffer(msg.data, dtype=np.uint8)
    needed = (height - 1) * row_step + row_bytes
    if data.size < needed:
        raise GoalError(f'{where}: expected at least {needed} bytes of data for {height} x '
                        f'{width} points (point_step {point_step}, row_step {row_step}); got '
                        f'{data.size}')
    if row_step == row_bytes:
        packed = data[:height * row_bytes]
    else:   # padded rows: take each row's points (the last row may lack its padding)
        rows = np.lib.stride_tricks.as_strided(data, shape=(height, row_bytes),
                                               strides=(row_step, 1))
        packed = np.ascontiguousarray(rows).reshape(-1)
    layout = np.dtype({'names': ['x', 'y', 'z'], 'formats': formats, 'offsets': offsets,
                       'itemsize': point_step})
    points = np.frombuffer(packed, dtype=layout)
    xyz = np.empty((len(points), 3))
    xyz[:, 0], xyz[:, 1], xyz[:, 2] = points['x'], points['y'], points['z']
    return xyz[np.isfinite(xyz).all(axis=1)]


def obstacle_updates(marker_array, frame_pose, default_frame, topic='obstacles'):
    """Return the collision scene updates of a visualization_msgs/MarkerArray of obstacles.

    Each marker as RViz draws it: SPHERE (scale.x = diameter, x = y = z), CUBE (scale = side
    lengths), CYLINDER (scale.x = scale.y = diameter, scale.z = height along its z), with
    ``pose`` in ``header.frame_id`` (empty = ``default_frame``); ADD (= MODIFY) sets (ns, id),
    DELETE removes it, DELETEALL removes what this topic added (in ``ns`` when given).
    frame_pose: callable frame -> (4, 4) pose in the base frame (GoalError when unknown).
    Returns [('add', key, Obstacle) | ('delete', key) | ('deleteall', ns)] for
    ``Scene.apply``. Raises GoalError naming the marker, with a ``kind`` attribute ('action',
    'type', 'frame', 'shape') for throttling the log per kind; nothing is applied then.
    """
    updates = []
    for k, marker in enumerate(marker_array.markers):
        where = f'{topic}[{k}] (ns {marker.ns!r}, id {marker.id})'
        action, kind = int(marker.action), int(marker.type)
        if action not in (Marker.ADD, Marker.DELETE, Marker.DELETEALL):
            raise _refusal('action', f'{where}: expected action ADD ({Marker.ADD}), DELETE '
                                     f'({Marker.DELETE}) or DELETEALL ({Marker.DELETEALL}), got '
                                     f'{action}')
        frame_to_base = None
        if action == Marker.ADD:
            if kind not in (Marker.SPHERE, Marker.CUBE, Marker.CYLINDER):
                raise _refusal('type', f'{where}: unsupported marker type {kind}; obstacles are '
                                       f'SPHERE ({Marker.SPHERE}), CUBE ({Marker.CUBE}) or '
                                       f'CYLINDER ({Marker.CYLINDER})')
            try:
                frame_to_base = frame_pose(marker.header.frame_id or default_frame)
            except GoalError as exc:
                raise _refusal('frame', f'{where}: {exc}') from None
        p, o, s = marker.pose.position, marker.pose.orientation, marker.scale
        try:
            updates.append(obstacle_from_marker(
                kind, action, marker.ns, marker.id, (p.x, p.y, p.z), (o.x, o.y, o.z, o.w),
                (s.x, s.y, s.z), frame_pose=frame_to_base, where=where))
        except GoalError as exc:
            raise _refusal('shape', str(exc)) from None
    return updates


def _refusal(kind, text):
    exc = GoalError(text)
    exc.kind = kind
    return exc


# ---------------------------------------------------------------------- goals with uncertainty
# A PoseWithCovariance whose three rotational variances are all at least this [rad^2] carries
# no orientation information (a std of 30 rad and more; drivers write 1e3..1e9 for "unknown"):
# it becomes a position-only goal with the position block of the covariance.
POSITION_ONLY_VARIANCE = 1e3


def covariance_from_msg(values, where='covariance'):
    """Return the (6, 6) covariance of a PoseWithCovariance's 36 floats (row-major, ROS order
    x y z rot_x rot_y rot_z, in the message's frame).

    Refused with GoalError naming what was wrong: not 36 values, NaN/inf, the ROS "unknown"
    marker (-1 first), all zero (an unfilled message: send target_pose instead), not
    symmetric, not positive definite.
    """
    arr = np.asarray(values, dtype=float).ravel()
    expected = (f'{where}: expected a symmetric positive definite 6 x 6 matrix (row-major, '
                'x y z rot_x rot_y rot_z, in the header frame)')
    if arr.shape != (36,):
        raise GoalError(f'{expected}, got {arr.size} values')
    if not np.all(np.isfinite(arr)):
        bad = [int(i) for i in np.flatnonzero(~np.isfinite(arr))]
        raise GoalError(f'{expected}, got NaN/inf at entries {bad}')
    if arr[0] == -1.0:
        raise GoalError(f'{expected}, got -1 as the first entry (the ROS marker for an unknown '
                        'covariance); send a goal without uncertainty on target_pose instead')
    if not np.any(arr):
        raise GoalError(f'{expected}, got all 36 entries zero (an unfilled covariance); send a '
                        'goal without uncertainty on target_pose instead')
    return symmetric_positive_definite(arr.reshape(6, 6), f'{expected},')


def pose_with_covariance_to_goal(msg, where='target_pose_with_covariance'):
    """Return (kind, value, covariance) of a geometry_msgs/PoseWithCovariance, in its frame.

    kind 'pose': value (4, 4) [m], covariance (6, 6) [m^2, rad^2]; kind 'point' (all three
    rotational variances >= POSITION_ONLY_VARIANCE: the orientation is unknown): value (3,)
    [m], covariance (3, 3), the position block (the marginal covariance of the position).
    Raises GoalError (see pose_to_matrix, covariance_from_msg).
    """
    pose = pose_to_matrix(msg.pose, f'{where}.pose.pose')
    covariance = covariance_from_msg(msg.covariance, f'{where}.pose.covariance')
    if np.all(np.diag(covariance)[3:] >= POSITION_ONLY_VARIANCE):
        return 'point', pose[:3, 3].copy(), covariance[:3, :3].copy()
    return 'pose', pose, covariance


def make_alternatives_trajectory(joint_names, configurations, stamp=None):
    """Return the ~/alternatives JointTrajectory: one point per branch (K, n), best first.

    Positions only; every point has time_from_start 0: the message lists alternatives, it is
    not a motion (a trajectory controller refuses points that are not strictly increasing in
    time, so it cannot be executed by mistake). K = 0 gives an empty trajectory (the list was
    cleared). ``stamp``: builtin_interfaces/Time of the computation.
    """
    msg = JointTrajectory()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    configurations = np.asarray(configurations, dtype=float).reshape(-1, len(joint_names))
    msg.points = [JointTrajectoryPoint(positions=q, time_from_start=Duration())
                  for q in configurations.tolist()]
    return msg
