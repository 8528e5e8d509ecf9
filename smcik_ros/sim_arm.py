"""sim_arm: a kinematic stand-in for a robot driver.

Loads the same URDF as smcik_node (robot_description / urdf_path parameters, or the
/robot_description topic), follows the joint commands within the URDF velocity limits and an
``acceleration_limit``, and publishes ``joint_states`` (names, positions, velocities) of every
movable joint of the URDF (mimic joints excepted: robot_state_publisher computes them) at
``rate_hz``, as joint_state_broadcaster does on a ros2_control robot: the joints the node does
not command (off the paths to its tips, a gripper, a head) keep their start values, and the
node reads them as its passive joints.
"""

import sys

import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter
from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from .collision import conventional_srdf_path, parse_srdf
from .errors import GoalError
from .model import Chain
from .model.urdf import parse_urdf
from .ros.conversions import command_to_positions, make_joint_state
from .ros.description import load_robot_description, resolve_path
from .ros.interface import COMMAND_QOS, COMMAND_TYPES
from .ros.runner import run_node, stop_requested

__all__ = ['SimArm', 'main', 'follow', 'urdf_joints']


def follow(q, v, target, v_max, a_max, dt):
    """Return (q, v) after one step of ``dt`` [s] towards ``target``.

    Per joint: the wanted velocity brakes in time (sqrt(2 a e)) and never overshoots in one
    step (e / dt); the velocity changes by at most a_max dt and stays within v_max.
    """
    error = target - q
    v_want = np.sign(error) * np.minimum.reduce([v_max, np.sqrt(2.0 * a_max * np.abs(error)),
                                                 np.abs(error) / dt])
    v = np.clip(v + np.clip(v_want - v, -a_max * dt, a_max * dt), -v_max, v_max)
    return q + v * dt, v


class SimArm(Node):
    """Integrate joint commands within velocity/acceleration limits; publish joint_states."""

    def __init__(self, **kwargs):
        super().__init__('sim_arm', **kwargs)
        ro = ParameterDescriptor(read_only=True)
        self.declare_parameter('robot_description', '', ro)
        self.declare_parameter('urdf_path', '', ro)
        self.declare_parameter('base_link', 'base_link', ro)
        self.declare_parameter('tip_link', 'tool0', ro)
        self.declare_parameter('tip_links', Parameter.Type.STRING_ARRAY, ParameterDescriptor(
            description='tips of the commanded chain (initial_positions order); empty: '
                        'tip_link', read_only=True))
        self.declare_parameter('robot_description_timeout', 10.0, ParameterDescriptor(
            description='how long to wait for /robot_description at start-up [s]',
            read_only=True))
        self.declare_parameter('rate_hz', 100.0, ParameterDescriptor(
            description='integration and joint_states rate [Hz]', read_only=True,
            floating_point_range=[FloatingPointRange(from_value=1.0, to_value=1000.0)]))
        self.declare_parameter('acceleration_limit', 10.0, ParameterDescriptor(
            description='joint acceleration limit [rad/s^2 or m/s^2]',
            floating_point_range=[FloatingPointRange(from_value=0.01, to_value=1000.0)]))
        self.declare_parameter('velocity_scale', 1.0, ParameterDescriptor(
            description='share of the URDF velocity limits used',
            floating_point_range=[FloatingPointRange(from_value=0.01, to_value=1.0)]))
        self.declare_parameter('command_type', 'joint_state', ParameterDescriptor(
            description='joint_state | joint_trajectory | float64_multi_array', read_only=True))
        self.declare_parameter('command_topic', 'joint_commands', ParameterDescriptor(
            description='topic of the commands', read_only=True))
        self.declare_parameter('initial_positions', Parameter.Type.DOUBLE_ARRAY,
                               ParameterDescriptor(description='start configuration [rad or m]'
                                                   ' in chain order; empty: 0 where in limits,'
                                                   ' else mid-range', read_only=True))
        self.declare_parameter('initial_state', '', ParameterDescriptor(
            description="start at this SRDF group_state (e.g. MoveIt's 'ready'); '': "
                        'initial_positions or the default start', read_only=True))
        self.declare_parameter('srdf_path', '', ParameterDescriptor(
            description="SRDF of initial_state; '': the one beside the URDF (urdf_path)",
            read_only=True))
        xml, source = load_robot_description(
            self, self.get_parameter('robot_description_timeout').value,
            keep_waiting=lambda: not stop_requested())
        self.chain = Chain.from_urdf(xml, self.get_parameter('base_link').value,
                                     self._tips())
        self.joint_names, lower, upper, velocity = urdf_joints(xml)
        self._index = [self.joint_names.index(n) for n in self.chain.joint_names]
        command_type = self.get_parameter('command_type').value
        if command_type not in COMMAND_TYPES:
            raise GoalError(f'command_type {command_type!r} is not one of '
                            f'{", ".join(COMMAND_TYPES)}')
        self._lower, self._upper = lower, upper     # continuous joints: unbounded
        self.q = self._initial_positions()
        self.v = np.zeros(len(self.joint_names))
        self.target = self.q.copy()
        self._v_max = np.where(np.isfinite(velocity) & (velocity > 0.0), velocity, 1.0)
        self._rate = self.get_parameter('rate_hz').value
        self._publisher = self.create_publisher(JointState, 'joint_states', COMMAND_QOS)
        self.create_subscription(COMMAND_TYPES[command_type],
                                 self.get_parameter('command_topic').value,
                                 self._on_command, COMMAND_QOS)
        self.create_timer(1.0 / self._rate, self._on_tick)
        self.get_logger().info(
            f'model from {source}; {len(self.joint_names)} joints ({self.chain.n} on the '
            f'chain); following {command_type} on '
            f'{self.get_parameter("command_topic").value}; start '
            f'{np.array2string(self.q, precision=3)}')

    def _tips(self):
        try:
            tips = list(self.get_parameter('tip_links').value or ())
        except rclpy.exceptions.ParameterUninitializedException:
            tips = []
        return tips or self.get_parameter('tip_link').value

    def _initial_positions(self):
        """Return the start of every joint: 0 where the range holds it, else mid-range;
        the chain's joints from initial_positions (chain order, or every joint's) or
        initial_state."""
        try:
            values = self.get_parameter('initial_positions').value
        except rclpy.exceptions.ParameterUninitializedException:
            values = None
        state = self.get_parameter('initial_state').value.strip()
        q = np.where((self._lower <= 0.0) & (self._upper >= 0.0), 0.0,
                     0.5 * (np.maximum(self._lower, -1e9) + np.minimum(self._upper, 1e9)))
        if state:
            if values is not None and len(values):
                raise GoalError(f'initial_state {state!r} and initial_positions are both set: '
                                'give one of them')
            return self._clip(self._group_state(state, q))
        if values is None or len(values) == 0:
            return q
        given = np.asarray(values, dtype=float)
        chain = self.chain
        if given.shape == (chain.n,) and np.all(np.isfinite(given)):
            q[self._index] = given
        elif given.shape == q.shape and np.all(np.isfinite(given)):
            q = given
        else:
            raise GoalError(f'initial_positions: expected {chain.n} finite values '
                            f'({", ".join(chain.joint_names)}) or {len(q)} (every joint: '
                            f'{", ".join(self.joint_names)}), got {list(values)}')
        if np.any(self._clip(q) != q):
            self.get_logger().warn('initial_positions outside the joint limits: clipped')
        return self._clip(q)

    def _group_state(self, name, q):
        """Return ``q`` (every joint) with the values of the SRDF group_state ``name`` (it
        must hold every joint of the chain; other joints it names are taken too)."""
        srdf_path = self.get_parameter('srdf_path').value.strip()
        urdf_path = self.get_parameter('urdf_path').value.strip()
        if srdf_path:
            source = str(resolve_path(srdf_path, 'srdf_path'))
        else:
            source = conventional_srdf_path(resolve_path(urdf_path)) if urdf_path else None
            if source is None:
                raise GoalError(f'initial_state {name!r}: no SRDF found beside the URDF '
                                f'({urdf_path or "robot_description has no file"}): set '
                                'srdf_path')
        srdf = parse_srdf(source)
        joints = srdf.group_states.get(name)
        if joints is None:
            raise GoalError(f'initial_state {name!r} is not a group_state of {srdf.source}; '
                            f'it has: {", ".join(sorted(srdf.group_states)) or "none"}')
        missing = [j for j in self.chain.joint_names if j not in joints]
        if missing:
            raise GoalError(f'initial_state {name!r} of {srdf.source} has no value for '
                            f'{", ".join(missing)} (chain joints: '
                            f'{", ".join(self.chain.joint_names)})')
        self.get_logger().info(f'start: group_state {name!r} of {srdf.source}')
        q = q.copy()
        for k, joint in enumerate(self.joint_names):
            if joint in joints:
                q[k] = joints[joint]
        return q

    def _clip(self, q):
        return np.clip(q, self._lower, self._upper)

    def _on_command(self, msg):
        try:
            if isinstance(msg, Float64MultiArray):     # the chain's joints, in its order
                target = self.target.copy()
                target[self._index] = command_to_positions(msg, self.chain.joint_names,
                                                           self.target[self._index])
            else:
                target = command_to_positions(msg, self.joint_names, self.target)
        except GoalError as exc:
            self.get_logger().warn(f'command ignored: {exc}', throttle_duration_sec=2.0)
            return
        self.target = self._clip(target)

    def _on_tick(self):
        dt = 1.0 / self._rate
        a_max = self.get_parameter('acceleration_limit').value
        v_max = self._v_max * self.get_parameter('velocity_scale').value
        q, v = follow(self.q, self.v, self.target, v_max, a_max, dt)
        clipped = self._clip(q)
        v[clipped != q] = 0.0
        self.q, self.v = clipped, v
        self._publisher.publish(make_joint_state(self.joint_names, self.q, self.v,
                                                 self.get_clock().now().to_msg()))


def urdf_joints(xml):
    """Return (names, lower (J,), upper (J,), velocity (J,)) of every movable joint of the URDF
    (revolute, continuous, prismatic; mimic joints excepted), in URDF order; continuous joints
    and bounds the URDF leaves out are unbounded (-inf, inf: PR2's continuous joints have a
    ``<limit>`` with effort and velocity only); velocity is NaN where the URDF gives none."""
    joints, _, _ = parse_urdf(xml)
    movable = [j for j in joints if j.type in ('revolute', 'continuous', 'prismatic')
               and j.mimic is None]

    def bound(joint, value, unbounded):
        return unbounded if joint.type == 'continuous' or value is None else float(value)

    lower = np.array([bound(j, j.lower, -np.inf) for j in movable])
    upper = np.array([bound(j, j.upper, np.inf) for j in movable])
    velocity = np.array([float(j.velocity) if j.velocity is not None else np.nan
                         for j in movable])
    return [j.name for j in movable], lower, upper, velocity


def main(args=None):
    """Run sim_arm until SIGINT/SIGTERM (exit 0); exit 1 on an unusable model."""
    return run_node(SimArm, 'sim_arm', args)


if __name__ == '__main__':
    sys.exit(main())
