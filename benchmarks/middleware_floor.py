"""A stand-in for smcik_node's DDS traffic at rest, with none of its IK: the middleware floor.

What the node's CPU share at rest cannot go below on a given host, measured rather than
guessed: this process has the node's command stream (sensor_msgs/JointState on
``joint_commands`` at ``rate_hz``, the node's QoS), its joint_states subscription (the node's
QoS; the callback does nothing with the message), timers at the marker and status rates that
do nothing, and the node's executor and spin loop (``ros/runner.py``: rclpy's EventsExecutor
where it exists). It holds the arm at ``positions``. ``./smcik bench node_latency --floor``
runs it after the node, with the same sim_arm and receiver, and prints its CPU share beside
the node's.

    python -m benchmarks.middleware_floor --ros-args -p urdf_path:=urdf/smcik_arm.urdf \
        -p positions:=[0.0,...]
"""

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState

from smcik_ros.model import Chain
from smcik_ros.ros.conversions import make_joint_state, nanoseconds_to_stamp
from smcik_ros.ros.interface import COMMAND_QOS, JOINT_STATES_QOS
from smcik_ros.ros.runner import run_node


class MiddlewareFloor(Node):
    """Publish a held command at ``rate_hz`` and take joint_states, doing nothing else."""

    def __init__(self):
        super().__init__('middleware_floor')
        for name, value in (('urdf_path', ''), ('base_link', 'base_link'), ('tip_link', 'tool0'),
                            ('rate_hz', 100.0), ('marker_rate_hz', 10.0),
                            ('status_rate_hz', 2.0), ('positions', [0.0])):
            self.declare_parameter(name, value)
        value = self.get_parameter
        chain = Chain.from_urdf(value('urdf_path').value, base_link=value('base_link').value,
                                tip_link=value('tip_link').value)
        self._q = np.array(value('positions').value, dtype=float)
        if self._q.shape != (chain.n,):
            raise ValueError(f'positions: expected {chain.n} values '
                             f'({", ".join(chain.joint_names)}); got {self._q.size}')
        self._v = np.zeros(chain.n)
        self._names = chain.joint_names
        self._pub = self.create_publisher(JointState, 'joint_commands', COMMAND_QOS)
        self.create_subscription(JointState, 'joint_states', self._ignore, JOINT_STATES_QOS)
        self.create_timer(1.0 / value('rate_hz').value, self._on_tick)
        for rate in (value('marker_rate_hz').value, value('status_rate_hz').value):
            if rate > 0:
                self.create_timer(1.0 / rate, self._ignore)

    def _on_tick(self):
        stamp = nanoseconds_to_stamp(self.get_clock().now().nanoseconds)
        self._pub.publish(make_joint_state(self._names, self._q, self._v, stamp))

    @staticmethod
    def _ignore(*_):
        pass


def main(args=None):
    return run_node(MiddlewareFloor, 'middleware_floor', args=args)


if __name__ == '__main__':
    raise SystemExit(main())
