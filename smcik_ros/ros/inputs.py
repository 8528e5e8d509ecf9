"""The node's goal and joint_states inputs: messages in, plain values to the control loop.

``GoalInputs``: target_pose, target_point, /goal_pose, target_pose_with_covariance (the first
tip), per tip ``targets/<tip>/pose``, ``targets/<tip>/point`` and
``targets/<tip>/pose_with_covariance``, ``target_poses`` (one pose per tip) and
~/select_alternative, each converted (ros/conversions.py) and handed to
``ControlLoop.offer_goal`` / ``offer_goals`` / ``release_goal`` or ``AlternativesBook.select``;
a bad goal is refused with one (throttled) log line and the previous goals stay.
``JointStatesInput``: joint_states mapped by name onto the commanded joints (and the passive
joints' values to the model), handed to ``ControlLoop.on_joint_states`` with their stamp and
arrival time. ``TfFrames``: goal frames that the URDF does not place, through tf2 when
installed.
"""

import re

from geometry_msgs.msg import PointStamped, PoseArray, PoseStamped, PoseWithCovarianceStamped
import numpy as np
from rclpy.time import Time
from sensor_msgs.msg import JointState
from std_msgs.msg import UInt32

from ..control.reporter import Reporter
from ..errors import GoalError, SmcIkError
from ..rotations import quat_to_matrix
from .conversions import (goal_pose_to_matrix, joint_state_positions, point_to_array,
                          pose_to_matrix, pose_with_covariance_to_goal)
from .interface import INPUT_QOS, JOINT_STATES_QOS

__all__ = ['GoalInputs', 'JointStatesInput', 'TfFrames', 'tip_topic', 'is_release']


def tip_topic(tip, kind):
    """Return the relative topic ``targets/<tip>/<kind>`` of a tip link; characters a ROS name
    cannot hold become '_' (and a leading digit gets one before it)."""
    token = re.sub(r'[^A-Za-z0-9_]', '_', tip)
    if not token or token[0].isdigit():
        token = '_' + token
    return f'targets/{token}/{kind}'


def is_release(msg):
    """True for the release message of a tip: an empty frame_id with the pose left at the
    message's defaults (position 0, orientation x = y = z = 0; w = 1 as ROS 2 fills it, or 0):
    ``ros2 topic pub --once /targets/<tip>/pose geometry_msgs/msg/PoseStamped '{}'``. An empty
    frame_id with any other pose is a goal in the base frame (world_frame with a floating
    base), as on every goal topic."""
    p, o = msg.pose.position, msg.pose.orientation
    return (not msg.header.frame_id and p.x == 0.0 and p.y == 0.0 and p.z == 0.0
            and o.x == 0.0 and o.y == 0.0 and o.z == 0.0 and o.w in (0.0, 1.0))


class GoalInputs:
    """Goal topics -> the control loop's goal inbox (and the alternatives' selection).

    node: the Node (subscriptions, ``guarded``); loop: ControlLoop; alternatives:
    AlternativesBook; values: the node's parameter values (read live: goal_pose_height);
    report: Reporter; time: conversions.LoopTime.
    """

    def __init__(self, node, loop, alternatives, values, report, time):
        self._loop = loop
        self._alternatives = alternatives
        self._values = values
        self._report = report
        self._time = time
        self.topics = {}          # tip -> its pose topic (relative)
        subscriptions = [
            (PoseStamped, 'target_pose', self._on_target_pose),
            (PointStamped, 'target_point', self._on_target_point),
            (PoseStamped, '/goal_pose', self._on_goal_pose),
            (PoseWithCovarianceStamped, 'target_pose_with_covariance',
             self._on_pose_with_covariance),
            (PoseArray, 'target_poses', self._on_target_poses),
            (UInt32, '~/select_alternative', self._on_select_alternative)]
        for tip in loop.inbox.tip_links:
            self.topics[tip] = tip_topic(tip, 'pose')
            subscriptions += [
                (PoseStamped, tip_topic(tip, 'pose'),
                 lambda msg, tip=tip: self._on_target_pose(msg, tip)),
                (PointStamped, tip_topic(tip, 'point'),
                 lambda msg, tip=tip: self._on_target_point(msg, tip)),
                (PoseWithCovarianceStamped, tip_topic(tip, 'pose_with_covariance'),
                 lambda msg, tip=tip: self._on_pose_with_covariance(msg, tip))]
        for kind, topic, callback in subscriptions:
            node.create_subscription(kind, topic, node.guarded(topic, callback), INPUT_QOS)

    def _on_target_pose(self, msg, tip=None):
        topic = 'target_pose' if tip is None else self.topics[tip]
        if tip is not None and is_release(msg):
            _, now = self._time.now()
            self._loop.release_goal(tip, now, source=topic)
            self._report('info', f'release:{tip}', f'{topic}: {tip} released, it holds its '
                         'pose', interval=1.0)
            return
        self._offer(topic, msg.header, lambda: (
            'pose', pose_to_matrix(msg.pose, f'{topic}.pose'), None), tip=tip)

    def _on_target_point(self, msg, tip=None):
        topic = 'target_point' if tip is None else tip_topic(tip, 'point')
        self._offer(topic, msg.header, lambda: (
            'point', point_to_array(msg.point, f'{topic}.point'), None), tip=tip)

    def _on_goal_pose(self, msg):
        height = self._values['goal_pose_height']
        self._offer('/goal_pose', msg.header, lambda: (
            'pose', goal_pose_to_matrix(msg.pose, height, '/goal_pose.pose'), None))

    def _on_pose_with_covariance(self, msg, tip=None):
        topic = 'target_pose_with_covariance' if tip is None else \
            tip_topic(tip, 'pose_with_covariance')
        self._offer(topic, msg.header, lambda: pose_with_covariance_to_goal(msg.pose, topic),
                    # the faults differ only at the end: keyed on the whole text
                    key=lambda text: topic + ':' + re.sub(r'[-+]?\d[\d.e+-]*', '#', text),
                    tip=tip)

    def _on_target_poses(self, msg):
        """One pose per tip, in tip_links order: all applied at once, or none."""
        _, now = self._time.now()
        try:
            poses = [pose_to_matrix(p, f'target_poses.poses[{k}]')
                     for k, p in enumerate(msg.poses)]
            loop = self._loop
            loop.inbox.offer_poses(poses, msg.header.frame_id,
                                   self._time.of_stamp(msg.header.stamp), now,
                                   loop.current_state(), 'target_poses')
        except SmcIkError as exc:
            self._report('error', Reporter.key_of('target_poses', str(exc)),
                         f'target_poses refused whole, keeping the previous goals: {exc}',
                         interval=2.0)

    def _offer(self, topic, header, convert, key=None, tip=None):
        """Convert a goal and put it in the inbox; refuse it with one (throttled) log line."""
        _, now = self._time.now()
        try:
            kind, value, covariance = convert()
            self._loop.offer_goal(kind, value, header.frame_id,
                                  self._time.of_stamp(header.stamp), now, source=topic,
                                  covariance=covariance, tip=tip)
        except SmcIkError as exc:
            text = f'{topic} refused, keeping the previous goal: {exc}'
            key = key(str(exc)) if key is not None else Reporter.key_of(topic, str(exc))
            self._report('error', key, text, interval=2.0)

    def _on_select_alternative(self, msg):
        _, now = self._time.now()
        loop = self._loop
        goal_id = loop.goal.sequence if loop.goal is not None else 0
        try:
            self._alternatives.select(msg.data, loop.solver, goal_id, now)
        except SmcIkError as exc:
            self._report('error', Reporter.key_of('select_alternative', str(exc)), str(exc),
                         interval=2.0)


class JointStatesInput:
    """joint_states -> ``ControlLoop.on_joint_states`` (a standard subscription).

    Each message is mapped by name onto the chain's joints when it arrives: joints it lacks
    or carries as NaN/inf keep their last value (warned, throttled), extra joints are
    ignored, a message with names and positions of different lengths is dropped. The
    executor serves a ready timer before a ready subscription, so a tick may decide on a
    measurement up to one tick older than the newest one (docs/node.md, "The tick").
    """

    def __init__(self, node, loop, report, time):
        self._loop = loop
        self._names = list(loop.arm.joint_names)
        self._passive = frozenset(getattr(loop.chain, 'passive_joint_names', ()))
        self._report = report
        self._time = time
        self.subscription = node.create_subscription(
            JointState, 'joint_states', node.guarded('joint_states', self._on_message),
            JOINT_STATES_QOS)

    @property
    def topic(self):
        """The resolved topic name (e.g. '/joint_states')."""
        return self.subscription.topic_name

    def _on_message(self, msg):
        _, now = self._time.now()
        report = self._report
        try:
            q, missing, bad, extra = joint_state_positions(msg, self._names)
        except GoalError as exc:
            report('warn', 'joint_states:malformed', f'{exc}; message ignored', interval=2.0)
            return
        if missing:
            report('warn', 'joint_states:missing', (
                f'joint_states lacks joint(s) {", ".join(missing)} (expected all of '
                f'{", ".join(self._names)}): keeping their last known values'), interval=2.0)
        if bad:
            report('warn', 'joint_states:non_finite', (
                f'joint_states carries non-finite positions for {", ".join(bad)}: keeping '
                'their last good values'), interval=2.0)
        passive = [name for name in extra if name in self._passive]
        if passive:
            index = {name: i for i, name in enumerate(msg.name)}
            values = {name: float(msg.position[index[name]]) for name in passive}
            self._loop.figure.set_passive({k: v for k, v in values.items() if np.isfinite(v)})
            extra = [name for name in extra if name not in self._passive]
        if extra:
            report('warn', 'joint_states:extra:' + ','.join(extra), (
                f'joint_states carries joint(s) {", ".join(extra)} that are neither commanded '
                'nor passive (off-path below the base): ignored'), interval=3600.0)
        self._loop.on_joint_states(q, self._time.of_stamp(msg.header.stamp), now)


class TfFrames:
    """Goal frames through tf2 (``lookup(frame)`` -> (4, 4) pose in the base frame [m]), or
    None from ``make`` when tf2_ros is not installed (then only the URDF's frames resolve)."""

    def __init__(self, node, base_link, links, tf2_ros):
        self._base = base_link
        self._links = links
        self._tf2 = tf2_ros
        self._buffer = tf2_ros.Buffer()
        self._listener = tf2_ros.TransformListener(self._buffer, node)

    @classmethod
    def make(cls, node, base_link, links, log):
        """Return TfFrames, or None (logged) when tf2_ros is not installed."""
        try:
            import tf2_ros  # optional: a ROS install has it, PyPI does not
        except ImportError:
            log('info', 'tf2_ros not installed: goal frames must be links of the URDF that its '
                'fixed joints or the chain place (or empty = base)')
            return None
        return cls(node, base_link, links, tf2_ros)

    def lookup(self, frame):
        """Return the (4, 4) pose of ``frame`` in the base frame [m] (GoalError if unknown)."""
        try:
            tf = self._buffer.lookup_transform(self._base, frame, Time())
        except self._tf2.TransformException as exc:
            raise GoalError(f'unknown frame {frame!r}: not a static link of the model '
                            f'({", ".join(self._links)}) and no TF from {self._base}: '
                            f'{exc}') from None
        t, r = tf.transform.translation, tf.transform.rotation
        out = np.eye(4)
        out[:3, :3] = quat_to_matrix([r.w, r.x, r.y, r.z])
        out[:3, 3] = [t.x, t.y, t.z]
        return out
