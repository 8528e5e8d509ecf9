"""The package's ROS interface constants: command message types and QoS profiles.

Shared by smcik_node, sim_arm and robot description loading (so that sim_arm does not import
the node). Importing this module imports rclpy and the message packages.
"""

from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

__all__ = ['COMMAND_TYPES', 'COMMAND_QOS', 'BASE_POSE_QOS', 'INPUT_QOS', 'CONSTRAINTS_QOS',
           'DESCRIPTION_QOS', 'MARKER_QOS', 'JOINT_STATES_QOS', 'DIAGNOSTICS_QOS']

# command_type parameter value -> message type published on command_topic.
COMMAND_TYPES = {
    'joint_state': JointState,
    'joint_trajectory': JointTrajectory,
    'float64_multi_array': Float64MultiArray,
}

# Commands: every message matters (a controller must not miss one), no history for late joiners.
# A second of it kept for a reader that lags: with 10, a Python reader under load (the black
# box's) lost commands, and read each gap as up to 1.5x the acceleration limit.
COMMAND_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE, history=HistoryPolicy.KEEP_LAST)
# ~/base_pose: a second of history at 100 Hz, so a reader that pairs each command with its
# base pose by stamp loses none while it lags (a Python reader under load lagged > 10 ticks).
BASE_POSE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE)
# Goals, constraints, status: reliable, volatile (matches RViz tools and `ros2 topic pub`).
INPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)
# robot_state_publisher latches the URDF: transient local, depth 1.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
# The constraint set: reliable, transient local (a set latched while the node starts is kept),
# depth 1 (the newest set replaces the others).
CONSTRAINTS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
MARKER_QOS = QoSProfile(depth=2, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)
# joint_states as the node reads them: best effort (matches reliable and best-effort drivers).
JOINT_STATES_QOS = qos_profile_sensor_data
# /diagnostics as diagnostic_updater publishes it: reliable, volatile.
DIAGNOSTICS_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.VOLATILE)
