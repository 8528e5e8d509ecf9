"""Message <-> numpy conversions for the rclpy layer (no node, no graph needed).

Poses are (4, 4) homogeneous matrices [m]; quaternions in messages are (x, y, z, w), the
package's rotation helpers use (w, x, y, z). Every function that reads an incoming message
validates it and raises :class:`~smcik_ros.errors.GoalError` with a message saying what was
expected and what arrived; the node turns that into one log line.
"""

import math
import struct

from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point, Pose, Quaternion
import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import ColorRGBA, Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker

from .errors import GoalError
from .rotations import matrix_to_quat, quat_to_matrix

__all__ = [
    'QUATERNION_NORM_RANGE', 'pose_to_matrix', 'matrix_to_pose', 'point_to_array',
    'goal_pose_to_matrix', 'tool_down_rotation', 'yaw_of_quaternion', 'joint_state_to_positions',
    'joint_state_positions', 'stamp_to_nanoseconds', 'make_joint_state',
    'make_joint_trajectory', 'make_float64_multi_array', 'command_to_positions',
    'duration_from_seconds', 'POINT_FIELD_TYPES', 'pointcloud2_to_xyz', 'obstacle_updates',
    'POSITION_ONLY_VARIANCE', 'covariance_from_msg', 'pose_with_covariance_to_goal',
    'rotate_covariance', 'make_alternatives_trajectory', 'Restamper', 'VertexSplicer',
    'fill_vertices', 'nanoseconds_to_stamp',
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


def joint_state_to_positions(msg, joint_names, previous):
    """Map a sensor_msgs/JointState onto ``joint_names`` by name.

    ``previous``: (n,) values kept for joints the message does not carry (NaN = not known yet).
    Returns (q (n,), missing names, extra names). Raises GoalError when names and positions
    differ in length or a carried position is not finite.
    """
    names = list(msg.name)
    positions = np.asarray(msg.position, dtype=float)
    if len(names) != len(positions):
        raise GoalError(f'joint_states: expected one position per name, got {len(names)} '
                        f'names and {len(positions)} positions')
    index = {name: i for i, name in enumerate(names)}
    q = np.array(previous, dtype=float, copy=True)
    missing = []
    for j, name in enumerate(joint_names):
        i = index.get(name)
        if i is None:
            missing.append(name)
            continue
        if not math.isfinite(positions[i]):
            raise GoalError(f'joint_states: expected a finite position for {name!r}, got '
                            f'{positions[i]}')
        q[j] = positions[i]
    known = set(joint_names)
    extra = [name for name in names if name not in known]
    return q, missing, extra


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


class JointStateReader:
    """``joint_state_positions`` of joint_states as the middleware delivers them, serialized
    (a subscription with ``raw=True``).

    When the bytes before the positions (frame id, names, position count; not the
    alignment padding) are those of a message seen before, the positions are read from
    their place in the bytes, without building a Python message (that conversion was the
    largest cost of a joint_states message in the node); otherwise the message is
    deserialized and read by name. Up to MAX_LAYOUTS layouts are kept, so that several
    publishers on one topic (an arm and a gripper driver) each keep theirs. The place is
    found by walking the encoding (plain CDR, either byte order) and kept only when the
    values read there equal the deserialized message's; non-finite values take the general
    path, which names them.
    """

    MAX_LAYOUTS = 8              # distinct serialized layouts kept (one per publisher)

    def __init__(self, joint_names):
        self.joint_names = list(joint_names)
        self._layouts = []       # serialized layouts seen, latest first
        self.hits = 0            # messages read without deserializing them

    def read_serialized(self, data):
        """Return (q, missing, bad, extra, stamp [ns, 0: unset]) of a serialized JointState
        (bytes); GoalError as the message path, also for bytes that are no JointState."""
        for k, layout in enumerate(self._layouts):
            order, fields, offset, count, index, have, missing, extra = layout
            if len(data) < offset + 8 * count or not _same_fields(data, fields):
                continue
            values = np.frombuffer(data, order + 'f8', count, offset)[index]
            if not np.isfinite(values).all():
                break                   # the general path names the non-finite joints
            if have is None:
                q = values.astype(float, copy=False)
            else:                       # a message that carries only some of the joints
                q = np.full(len(self.joint_names), np.nan)
                q[have] = values
            if k:                       # several publishers: the latest first
                self._layouts.insert(0, self._layouts.pop(k))
            self.hits += 1
            sec, nanosec = struct.unpack_from(order + 'iI', data, 4)
            return q, list(missing), [], list(extra), sec * 1_000_000_000 + nanosec
        from rclpy.serialization import deserialize_message
        try:
            msg = deserialize_message(data, JointState)
        except Exception as exc:   # noqa: BLE001 - the middleware's error types vary
            raise GoalError(f'joint_states: expected a serialized sensor_msgs/JointState; '
                            f'{len(data)} bytes could not be read ({exc})') from exc
        q, missing, bad, extra = joint_state_positions(msg, self.joint_names)
        self._remember(data, msg, missing, extra)
        return q, missing, bad, extra, stamp_to_nanoseconds(msg.header.stamp)

    def _remember(self, data, msg, missing, extra):
        """Keep the layout of ``data`` (the latest first, at most MAX_LAYOUTS)."""
        place = _position_layout(data, msg)
        if place is None:
            return
        position = {name: i for i, name in enumerate(msg.name)}   # the last of a repeated name
        present = [j for j, name in enumerate(self.joint_names) if name in position]
        index = np.array([position[self.joint_names[j]] for j in present], dtype=np.intp)
        have = np.array(present, dtype=np.intp) if missing else None
        self._layouts.insert(0, (*place, index, have, tuple(missing), tuple(extra)))
        del self._layouts[self.MAX_LAYOUTS:]


def _position_layout(data, msg):
    """Return (byte order, fields, position offset, count) of a serialized JointState
    ``data`` (plain CDR, encapsulation 0x0000 big or 0x0001 little endian), or None when the
    walk fails or does not find ``msg``'s positions there.

    fields: ((start, stop, bytes), ...), the bytes from the frame id to the position count
    without the alignment padding between them (serializers leave padding unset: two
    messages with the same names can differ there).
    """
    if len(data) < 16 or data[0] != 0 or data[1] not in (0, 1):
        return None
    order = '<' if data[1] == 1 else '>'

    def u32(at):
        return struct.unpack_from(order + 'I', data, at)[0]

    def align(at, size):                 # CDR aligns relative to the end of the header
        return at + (-(at - 4)) % size
    spans = []

    def field(start, stop):              # merged with the previous one when adjacent
        if spans and spans[-1][1] == start:
            spans[-1][1] = stop
        else:
            spans.append([start, stop])
        return stop
    try:
        at = field(12, 16 + u32(12))     # after the stamp (8 bytes): the frame id
        at = align(at, 4)
        names = u32(at)
        at = field(at, at + 4)
        for _ in range(names):
            at = align(at, 4)
            at = field(at, at + 4 + u32(at))
        at = align(at, 4)
        count = u32(at)
        end = field(at, at + 4)
        offset = align(end, 8) if count else end
        if count != len(msg.position) or len(data) < offset + 8 * count:
            return None
        values = np.frombuffer(data, order + 'f8', count, offset)
    except struct.error:
        return None
    if not np.array_equal(values, np.asarray(msg.position, dtype=float), equal_nan=True):
        return None
    fields = tuple((a, b, bytes(data[a:b])) for a, b in spans)
    return order, fields, offset, count


def _same_fields(data, fields):
    """True when ``data`` holds ``fields`` ((start, stop, bytes), ...) at their places."""
    for start, stop, value in fields:
        if data[start:stop] != value:
            return False
    return True


def stamp_to_nanoseconds(stamp):
    """Return a builtin_interfaces/Time as integer nanoseconds (0 for an unset stamp)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def nanoseconds_to_stamp(ns):
    """Return the builtin_interfaces/Time of integer nanoseconds ``ns`` >= 0."""
    sec, nanosec = divmod(int(ns), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


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


class _SerializedTemplate:
    """A message kind published as serialized bytes written into a template (the subclasses:
    what changes is written at places found with probe values). ``_find_layout`` returns
    the layout, or None where the middleware's serialization cannot be reproduced; then the
    subclass publishes the message itself."""

    PROBE_STAMP = (0x1234_5678, 0x0ABC_DEF1)     # (sec, nanosec) no real stamp carries

    def _init_layout(self):
        try:
            self._layout = self._find_layout()
        except (ImportError, ValueError, TypeError):
            self._layout = None

    @property
    def serialized(self):
        """True when the bytes are published (False: the message itself)."""
        return self._layout is not None

    @staticmethod
    def _byte_order(data):
        """Return the struct byte order of CDR ``data`` (None: too short to be a message)."""
        if len(data) < 4:
            return None
        return '<' if data[1] & 1 else '>'      # the encapsulation's endianness bit


class JointStateWriter(_SerializedTemplate):
    """The commands of a stream as serialized sensor_msgs/JointState messages.

    Names (and the empty effort) are the same in every command: the message is serialized
    once by the middleware's own serializer (``rclpy.serialization``) with marker values, and
    each command then writes its stamp, positions and velocities into a copy of those bytes
    at the places the markers were found; publishing bytes skips the conversion of a Python
    message on every tick. The layout is checked at construction: the bytes written for
    random commands must deserialize to ``make_joint_state``'s message (compared as
    messages: the serializer leaves alignment padding unset, so bytes may differ there);
    where anything differs (another encoding, a marker found twice) ``fill`` returns
    ``make_joint_state``'s message instead (``serialized`` False). Either way it returns what
    ``Publisher.publish`` takes.
    """

    def __init__(self, joint_names):
        self.names = list(joint_names)
        self._n = len(self.names)
        self._init_layout()

    def _find_layout(self):
        """Return (template bytearray, byte order, stamp offset, position offset, velocity
        offset), or None when the serializer's layout cannot be reproduced."""
        from rclpy.serialization import deserialize_message, serialize_message
        n = self._n
        probe = JointState(name=self.names)
        probe.header.stamp.sec, probe.header.stamp.nanosec = self.PROBE_STAMP
        probe.position = (np.pi * 1e3 + np.arange(n)).tolist()
        probe.velocity = (-np.e * 1e3 - np.arange(n)).tolist()
        data = bytes(serialize_message(probe))
        order = self._byte_order(data)
        if order is None:
            return None
        found = []
        for block in (struct.pack(order + 'iI', probe.header.stamp.sec,
                                  probe.header.stamp.nanosec),
                      struct.pack(f'{order}{n}d', *probe.position),
                      struct.pack(f'{order}{n}d', *probe.velocity)):
            at = data.find(block)
            if at < 0 or (n and data.find(block, at + 1) >= 0):
                return None
            found.append(at)
        layout = (bytearray(data), order, *found)
        rng = np.random.default_rng(0)
        for _ in range(3):          # the written bytes read back as the intended message
            q, dq = rng.normal(size=n), rng.normal(size=n)
            ns = int(rng.integers(0, 2 ** 31 * 10**9))
            if deserialize_message(self._write(layout, q, dq, ns), JointState) != \
                    make_joint_state(self.names, q, dq, nanoseconds_to_stamp(ns)):
                return None
        return layout

    def _write(self, layout, q, dq, stamp_ns):
        template, order, at_stamp, at_position, at_velocity = layout
        out = bytearray(template)
        struct.pack_into(order + 'iI', out, at_stamp, *divmod(int(stamp_ns), 1_000_000_000))
        dtype = np.dtype(float).newbyteorder(order)
        size = 8 * self._n
        out[at_position:at_position + size] = q.astype(dtype).tobytes()
        out[at_velocity:at_velocity + size] = dq.astype(dtype).tobytes()
        return bytes(out)

    def fill(self, q, dq, stamp_ns):
        """Return the command with positions ``q`` (n,), velocities ``dq`` (n,) and the header
        stamp ``stamp_ns`` [ns, >= 0]: serialized bytes, or the JointState message."""
        q = np.ascontiguousarray(q, dtype=float)
        dq = np.ascontiguousarray(dq, dtype=float)
        if q.shape != (self._n,) or dq.shape != (self._n,):
            raise ValueError(f'expected {self._n} positions and velocities; got shapes '
                             f'{q.shape} and {dq.shape}')
        if self._layout is not None:
            return self._write(self._layout, q, dq, stamp_ns)
        return make_joint_state(self.names, q, dq, nanoseconds_to_stamp(stamp_ns))


class Restamper(_SerializedTemplate):
    """A message published again and again with only its stamps new, as serialized bytes.

    ``headers``: the std_msgs/Header objects inside ``message`` that carry the stamp (every
    marker of a MarkerArray, say). The message is serialized once by the middleware's own
    serializer with a probe stamp in every header, and ``at(ns)`` writes the stamp into a copy
    of those bytes at the probes' places: a copy instead of converting the whole Python
    message again (3-6 ms for the node's markers). Checked at construction: the bytes for a
    stamp must deserialize to what the middleware makes of the message with that stamp
    (compared as messages: the serializer leaves alignment padding unset, and float32
    fields hold doubles in Python); where anything differs (the probe found other than once
    per header, another encoding) ``at`` sets the stamps in the message and returns the
    message itself. The message must not change otherwise afterwards.
    """

    def __init__(self, message, headers):
        self.message = message
        self._headers = list(headers)
        self._init_layout()

    def _stamp(self, stamp):
        for header in self._headers:
            header.stamp = stamp

    def _find_layout(self):
        """Return (template bytes, byte order, stamp offsets) or None (see the class doc)."""
        from rclpy.serialization import deserialize_message, serialize_message
        saved = [header.stamp for header in self._headers]
        try:
            self._stamp(Time(sec=self.PROBE_STAMP[0], nanosec=self.PROBE_STAMP[1]))
            data = bytes(serialize_message(self.message))
            order = self._byte_order(data)
            if order is None:
                return None
            block = struct.pack(order + 'iI', *self.PROBE_STAMP)
            places, at = [], data.find(block)
            while at >= 0:
                places.append(at)
                at = data.find(block, at + 1)
            if len(places) != len(self._headers):
                return None
            layout = (data, order, places)
            ns = 1_700_000_000_123_456_789
            self._stamp(nanoseconds_to_stamp(ns))
            kind = type(self.message)
            if deserialize_message(self._write(layout, ns), kind) != \
                    deserialize_message(serialize_message(self.message), kind):
                return None
            return layout
        finally:
            for header, stamp in zip(self._headers, saved):
                header.stamp = stamp

    @staticmethod
    def _write(layout, ns):
        template, order, places = layout
        out = bytearray(template)
        stamp = struct.pack(order + 'iI', *divmod(int(ns), 1_000_000_000))
        for at in places:
            out[at:at + 8] = stamp
        return bytes(out)

    def at(self, ns):
        """Return the message stamped ``ns`` [integer ns >= 0]: its serialized bytes, or (not
        ``serialized``) the message itself with every header's stamp set. Either way what
        ``Publisher.publish`` takes."""
        if self._layout is not None:
            return self._write(self._layout, ns)
        self._stamp(nanoseconds_to_stamp(ns))
        return self.message


def fill_vertices(marker, points, colors):
    """Set a Marker's ``points`` (V, 3) [m] and per-vertex ``colors`` (V, 4) rgba as message
    objects (what ``VertexSplicer`` writes as bytes instead)."""
    marker.points = [Point(x=x, y=y, z=z)
                     for x, y, z in np.asarray(points, dtype=float).reshape(-1, 3).tolist()]
    marker.colors = [ColorRGBA(r=r, g=g, b=b, a=a)
                     for r, g, b, a in np.asarray(colors, dtype=float).reshape(-1, 4).tolist()]


class VertexSplicer(_SerializedTemplate):
    """MarkerArrays serialized with one marker's vertices written from numpy arrays.

    The particles' LINE_LIST has ~500 vertices: as Point and ColorRGBA objects they take
    ~1 ms to build and as long again for the middleware to convert. Here the message is
    serialized by the middleware's own serializer with two probe vertices in that marker,
    and the vertices' bytes are written in their place with both sequence lengths: the
    layout of the message type is the middleware's, whatever the distribution adds to a
    Marker. A vertex is 24 bytes of points and 16 of colors, multiples of 8, so every field
    after them keeps its alignment. Each call checks that the probes are where a sequence
    of points and one of colors must put them, and the technique is checked at construction
    on arrays of every alignment (the bytes must deserialize to the message with the
    vertices as objects); where either fails, the marker's lists are filled and the message
    itself is returned (``serialized`` False after a failed construction check).
    """

    PROBE_POINTS = ((-7.123456789e101, 5.5e-123, 3.25e88), (1.5e-200, -9.75e150, 2.0e-111))
    PROBE_COLORS = ((0.125, 0.5625, 0.90625, 0.34375), (0.78125, 0.234375, 0.671875, 0.0078125))

    def __init__(self):
        self._init_layout()

    def _find_layout(self):
        """Return True when spliced bytes read back as the filled messages, else None."""
        from rclpy.serialization import deserialize_message, serialize_message
        from visualization_msgs.msg import MarkerArray
        rng = np.random.default_rng(0)
        for count, text in ((0, ''), (1, 'a'), (7, 'ab'), (40, 'abc')):
            first = Marker(action=Marker.DELETEALL)
            first.header.frame_id = 'base' + text
            marker = Marker(ns='particles' + text, type=Marker.LINE_LIST)
            marker.header.stamp.sec, marker.header.stamp.nanosec = self.PROBE_STAMP
            last = Marker(text=text, type=Marker.TEXT_VIEW_FACING)
            array = MarkerArray(markers=[first, marker, last][len(text) % 2:])
            points, colors = rng.normal(size=(count, 3)), rng.random((count, 4))
            data = self._splice(array, marker, points, colors)
            if data is None:
                return None
            fill_vertices(marker, points, colors)
            want = deserialize_message(serialize_message(array), MarkerArray)
            try:
                got = deserialize_message(data, MarkerArray)
            except Exception:       # bytes the middleware cannot read: the fallback
                return None
            if got != want:
                return None
        return True

    def _splice(self, message, marker, points, colors):
        """Return the bytes of ``message`` with ``marker``'s vertices, or None where the
        probes are not where the two sequences must put them."""
        from rclpy.serialization import serialize_message
        fill_vertices(marker, self.PROBE_POINTS, self.PROBE_COLORS)
        try:
            data = bytes(serialize_message(message))
        finally:
            marker.points, marker.colors = [], []
        order = self._byte_order(data)
        if order is None:
            return None
        probe = struct.pack(order + '6d', *np.ravel(self.PROBE_POINTS))
        at = data.find(probe)
        if at < 8 or data.find(probe, at + 1) >= 0:
            return None
        two = struct.pack(order + 'I', 2)
        # The length is right before the points or before 4 bytes of alignment padding
        # (left unset by the serializer): exactly one of the two places must read 2.
        lengths = [c for c in (at - 4, at - 8) if data[c:c + 4] == two]
        colors_at = at + 48
        if len(lengths) != 1 or data[colors_at:colors_at + 4] != two or \
                data[colors_at + 4:colors_at + 36] != \
                struct.pack(order + '8f', *np.ravel(self.PROBE_COLORS)):
            return None
        count = struct.pack(order + 'I', len(points))
        return b''.join((
            data[:lengths[0]], count, data[lengths[0] + 4:at],
            np.ascontiguousarray(points, dtype=np.dtype('f8').newbyteorder(order)).tobytes(),
            count,
            np.ascontiguousarray(colors, dtype=np.dtype('f4').newbyteorder(order)).tobytes(),
            data[colors_at + 36:]))

    def serialize(self, message, marker, points, colors):
        """Return ``message`` (a MarkerArray) with ``marker``, one of its markers, carrying
        the vertices ``points`` (V, 3) [m] and ``colors`` (V, 4) rgba in [0, 1]: serialized
        bytes, or the message with the marker's lists filled. Either way what
        ``Publisher.publish`` takes. The marker's own lists are left empty on success."""
        points = np.asarray(points, dtype=float).reshape(-1, 3)
        colors = np.asarray(colors, dtype=float).reshape(-1, 4)
        if len(points) != len(colors):
            raise ValueError(f'expected one colour per vertex; got {len(points)} points and '
                             f'{len(colors)} colours')
        if self._layout is not None:
            data = self._splice(message, marker, points, colors)
            if data is not None:
                return data
        fill_vertices(marker, points, colors)
        return message


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
    from .collision import obstacle_from_marker   # the pure core (no ROS import)

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
    from .goals import symmetric_positive_definite
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


def rotate_covariance(covariance, rotation):
    """Return a (6, 6) or (3, 3) covariance given in a frame with rotation ``rotation``
    (3, 3) in the base frame, expressed in the base frame: each 3 x 3 block S_ij becomes
    R S_ij R^T (ROS's rotational rows are rotations about the fixed axes of the header frame,
    which turn like the translational ones). See smcik_ros.goals.covariance_to_base."""
    from .goals import covariance_to_base
    return np.array(covariance_to_base(covariance, rotation))


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
