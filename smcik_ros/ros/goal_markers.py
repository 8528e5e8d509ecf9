"""goal_markers: a 6-DoF interactive marker per tip, dragged in RViz, streamed as its goal.

    python -m smcik_ros.ros.goal_markers --ros-args -p urdf_path:=urdf/smcik_figure.urdf \
        -p base_link:=pelvis -p tip_links:="[left_hand, right_hand]" -p world_frame:=world

Each tip of ``tip_links`` gets one interactive marker (three arrows, three rings) on the
``goal_markers`` server namespace; dragging it publishes geometry_msgs/PoseStamped on
``targets/<tip>/pose`` (``inputs.tip_topic``, as the node names it: Allegro's link_3.0_tip is
``targets/link_3_0_tip/pose``; at most ``rate_hz`` per tip while dragging, and once on
release), in the marker's frame: ``world_frame`` with ``floating_base`` (the node's goals
live there), else ``base_link``. The markers start at the tips' poses: the URDF's kinematics
at the first ``joint_states`` and, with a floating base, the first ``/smcik_node/base_pose``.

It needs the ``interactive_markers`` package of a ROS install (not on PyPI); without it
``main`` logs one info line saying so and exits 0, and launch/figure.launch.py uses RViz's
Publish Point tools on ``targets/<tip>/point`` instead.
"""

import sys
import time

from geometry_msgs.msg import PoseStamped
import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from visualization_msgs.msg import InteractiveMarker, InteractiveMarkerControl, Marker
from visualization_msgs.msg import InteractiveMarkerFeedback

from ..model import Chain
from .conversions import joint_state_positions, matrix_to_pose, pose_to_matrix
from .description import load_robot_description
from .inputs import tip_topic
from .interface import INPUT_QOS, JOINT_STATES_QOS

__all__ = ['SERVER_NAMESPACE', 'interactive_markers_available', 'make_marker',
           'feedback_to_goal', 'GoalMarkers', 'main']

SERVER_NAMESPACE = 'goal_markers'


def interactive_markers_available():
    """Return True when the interactive_markers package can be imported."""
    try:
        import interactive_markers  # noqa: F401
    except ImportError:
        return False
    return True


def make_marker(tip, frame, pose, scale=0.2):
    """Return a visualization_msgs/InteractiveMarker for ``tip``: 6-DoF (move and rotate
    about x, y, z), named after the tip, at ``pose`` (geometry_msgs/Pose) in ``frame``.

    scale: marker size [m].
    """
    marker = InteractiveMarker()
    marker.header.frame_id = frame
    marker.name = tip
    marker.description = f'{tip} goal'
    marker.scale = float(scale)
    marker.pose = pose
    handle = InteractiveMarkerControl(always_visible=True)
    handle.markers.append(Marker(type=Marker.SPHERE))
    handle.markers[0].scale.x = handle.markers[0].scale.y = handle.markers[0].scale.z = \
        0.25 * scale
    handle.markers[0].color.r, handle.markers[0].color.g = 0.95, 0.5
    handle.markers[0].color.b, handle.markers[0].color.a = 0.1, 0.9
    marker.controls.append(handle)
    # The axis of a control is the x axis of its orientation quaternion (w, x, y, z below).
    for axis, (w, x, y, z) in (('x', (1.0, 1.0, 0.0, 0.0)), ('y', (1.0, 0.0, 0.0, 1.0)),
                               ('z', (1.0, 0.0, 1.0, 0.0))):
        norm = np.sqrt(w * w + x * x + y * y + z * z)
        for mode, verb in ((InteractiveMarkerControl.MOVE_AXIS, 'move'),
                           (InteractiveMarkerControl.ROTATE_AXIS, 'rotate')):
            control = InteractiveMarkerControl(name=f'{verb}_{axis}', interaction_mode=mode)
            control.orientation.w, control.orientation.x = w / norm, x / norm
            control.orientation.y, control.orientation.z = y / norm, z / norm
            marker.controls.append(control)
    return marker


def feedback_to_goal(feedback):
    """Return (tip, geometry_msgs/PoseStamped) of an InteractiveMarkerFeedback."""
    goal = PoseStamped()
    goal.header = feedback.header
    goal.pose = feedback.pose
    return feedback.marker_name, goal


class GoalMarkers(Node):
    """One 6-DoF interactive marker per tip; dragging one publishes its goal."""

    def __init__(self, **kwargs):
        super().__init__('goal_markers', **kwargs)
        from interactive_markers import InteractiveMarkerServer

        ro = ParameterDescriptor(read_only=True)
        for name, default in (('robot_description', ''), ('urdf_path', ''),
                              ('base_link', 'base_link'), ('tip_link', 'tool0'),
                              ('world_frame', 'world')):
            self.declare_parameter(name, default, ro)
        self.declare_parameter('tip_links', Parameter.Type.STRING_ARRAY, ro)
        self.declare_parameter('floating_base', False, ro)
        self.declare_parameter('rate_hz', 10.0, ParameterDescriptor(
            description='goals per tip per second while dragging [Hz]', read_only=True))
        self.declare_parameter('scale', 0.2, ParameterDescriptor(
            description='marker size [m]', read_only=True))
        value = self.get_parameter
        try:
            tips = list(value('tip_links').value or ())
        except ParameterUninitializedException:     # not given: the one-tip shorthand
            tips = []
        self.tips = tips or [value('tip_link').value]
        floating = value('floating_base').value
        self.frame = value('world_frame').value if floating else value('base_link').value
        xml, _ = load_robot_description(self, 10.0)
        self.chain = Chain.from_urdf(xml, value('base_link').value, self.tips)
        self.period = 1.0 / max(value('rate_hz').value, 1e-3)
        self.scale = value('scale').value
        self.base = None if floating else np.eye(4)
        self.joints = None
        self.last_sent = {}
        self.server = InteractiveMarkerServer(self, SERVER_NAMESPACE)
        self.publishers_ = {tip: self.create_publisher(PoseStamped, tip_topic(tip, 'pose'),
                                                       INPUT_QOS) for tip in self.tips}
        self.subscriptions_ = [
            self.create_subscription(JointState, 'joint_states', self._on_joints,
                                     JOINT_STATES_QOS)]
        if floating:
            self.subscriptions_.append(self.create_subscription(
                PoseStamped, '/smcik_node/base_pose', self._on_base, INPUT_QOS))
        self.get_logger().info(f'interactive goal markers for {", ".join(self.tips)} in '
                               f'{self.frame!r} (server {SERVER_NAMESPACE!r}): they '
                               'appear at the tips once joint_states arrive')

    def _on_base(self, msg):
        self.base = pose_to_matrix(msg.pose)
        self._place()

    def _on_joints(self, msg):
        q, missing, _, _ = joint_state_positions(msg, self.chain.joint_names)
        if not missing and np.all(np.isfinite(q)):
            self.joints = q
            self._place()

    def _place(self):
        """Put the markers at the tips once, then leave them where the user drags them."""
        if self.joints is None or self.base is None or self.subscriptions_ is None:
            return
        for tip in self.tips:
            pose = matrix_to_pose(self.base @ self.chain.fk(self.joints, tip))
            self.server.insert(make_marker(tip, self.frame, pose, self.scale),
                               feedback_callback=self._on_feedback)
        self.server.applyChanges()
        for sub in self.subscriptions_:
            self.destroy_subscription(sub)
        self.subscriptions_ = None

    def _on_feedback(self, feedback):
        kinds = (InteractiveMarkerFeedback.POSE_UPDATE, InteractiveMarkerFeedback.MOUSE_UP)
        if feedback.event_type not in kinds or feedback.marker_name not in self.tips:
            return
        now = time.monotonic()
        tip, goal = feedback_to_goal(feedback)
        released = feedback.event_type == InteractiveMarkerFeedback.MOUSE_UP
        if released or now - self.last_sent.get(tip, -1e9) >= self.period:
            self.last_sent[tip] = now
            self.publishers_[tip].publish(goal)


def main(args=None):
    """Run goal_markers until SIGINT; without interactive_markers say so and exit 0."""
    if not interactive_markers_available():
        print('[INFO] [goal_markers]: the interactive_markers package is not installed (it '
              'comes with a ROS install: ros-$ROS_DISTRO-interactive-markers): no 6-DoF goal '
              "markers; use RViz's Publish Point tools on targets/<tip>/point instead",
              flush=True)
        return 0
    from .runner import run_node
    return run_node(GoalMarkers, 'goal_markers', args)


if __name__ == '__main__':
    sys.exit(main())
