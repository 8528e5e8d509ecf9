"""The node's goal and joint_states inputs: messages in, plain values to the control loop.

``GoalInputs``: target_pose, target_point, /goal_pose, target_pose_with_covariance and
~/select_alternative, each converted (ros/conversions.py) and handed to
``ControlLoop.offer_goal`` or ``AlternativesBook.select``; a bad goal is refused with one
(throttled) log line and the previous goal stays. ``JointStatesInput``: joint_states mapped by
name onto the chain, handed to ``ControlLoop.on_joint_states`` with their stamp and arrival
time. ``TfFrames``: goal frames that the URDF does not place, through tf2 when installed.
"""

import re

from geometry_msgs.msg import PointStamped, PoseStamped, PoseWithCovarianceStamped
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

__all__ = ['GoalInputs', 'JointStatesInput', 'TfFrames']


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
        for kind, topic, callback in (
                (PoseStamped, 'target_pose', self._on_target_pose),
                (PointStamped, 'target_point', self._on_target_point),
                (PoseStamped, '/goal_pose', self._on_goal_pose),
                (PoseWithCovarianceStamped, 'target_pose_with_covariance',
                 self._on_pose_with_covariance),
                (UInt32, '~/select_alternative', self._on_select_alternative)):
            node.create_subscription(kind, topic, node.guarded(topic, callback), INPUT_QOS)

    def _on_target_pose(self, msg):
        self._offer('target_pose', msg.header, lambda: (
            'pose', pose_to_matrix(msg.pose, 'target_pose.pose'), None))

    def _on_target_point(self, msg):
        self._offer('target_point', msg.header, lambda: (
            'point', point_to_array(msg.point, 'target_point.point'), None))

    def _on_goal_pose(self, msg):
        height = self._values['goal_pose_height']
        self._offer('/goal_pose', msg.header, lambda: (
            'pose', goal_pose_to_matrix(msg.pose, height, '/goal_pose.pose'), None))

    def _on_pose_with_covariance(self, msg):
        topic = 'target_pose_with_covariance'
        self._offer(topic, msg.header, lambda: pose_with_covariance_to_goal(msg.pose, topic),
                    # the faults differ only at the end: keyed on the whole text
                    key=lambda text: topic + ':' + re.sub(r'[-+]?\d[\d.e+-]*', '#', text))

    def _offer(self, topic, header, convert, key=None):
        """Convert a goal and put it in the inbox; refuse it with one (throttled) log line."""
        _, now = self._time.now()
        try:
            kind, value, covariance = convert()
            self._loop.offer_goal(kind, value, header.frame_id,
                                  self._time.of_stamp(header.stamp), now, source=topic,
                                  covariance=covariance)
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
        self._names = list(loop.chain.joint_names)
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
        if extra:
            report('warn', 'joint_states:extra', (
                f'joint_states carries joint(s) {", ".join(extra)} not in the chain: ignored'),
                interval=10.0)
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
