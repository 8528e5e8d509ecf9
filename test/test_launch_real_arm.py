"""launch_testing test of launch/arm.launch.py with sim:=false: a real arm's driver is
expected to publish joint_states; until it does, nothing is commanded. The test plays that
driver: it checks silence first, then publishes joint_states and expects the first command
to be exactly the measured configuration.

Runs under ``colcon test`` on a ROS 2 install (Humble or Jazzy) with the package built; where
launch_testing / launch_ros are not installed (the PyPI-wheel venv of ./smcik) it is skipped.
"""

from pathlib import Path
import time
import unittest

import pytest

pytest.importorskip(
    'launch_testing', reason='launch_testing is not installed (it comes with a ROS 2 install, '
    'not from PyPI): run this test with colcon test')
pytest.importorskip('launch_ros', reason='launch_ros is not installed (ROS 2 install needed)')

import launch  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

LAUNCH_FILE = Path(__file__).resolve().parents[1] / 'launch' / 'arm.launch.py'
JOINTS = [f'joint{i}' for i in range(1, 8)]
MEASURED = [0.1, 0.2, -0.1, -1.2, 0.3, 0.8, -0.4]
TIMEOUT = 240.0  # [s] a fresh install compiles the kernels first (>90 s seen on 2 cores)


@pytest.mark.launch_test
def generate_test_description():
    """Start arm.launch.py for a real arm (no sim_arm) without RViz."""
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
        launch_arguments={'sim': 'false', 'rviz': 'false'}.items())
    return launch.LaunchDescription([include, launch_testing.actions.ReadyToTest()])


class TestNoCommandBeforeJointStates(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        rclpy.init()

    @classmethod
    def tearDownClass(cls):
        rclpy.shutdown()

    def setUp(self):
        self.node = rclpy.create_node('test_arm_launch_real')

    def tearDown(self):
        self.node.destroy_node()

    def _spin_until(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.05)
        return predicate()

    def test_silent_until_joint_states_then_the_measurement(self, proc_output):
        commands = []
        self.node.create_subscription(JointState, 'joint_commands', commands.append, 10)
        states = self.node.create_publisher(JointState, 'joint_states', 10)
        self.assertTrue(self._spin_until(lambda: states.get_subscription_count() > 0, TIMEOUT),
                        'smcik_node does not subscribe to joint_states')
        self.assertFalse(self._spin_until(lambda: commands, 3.0),
                         'smcik_node commanded before any joint_states (sim:=false)')

        def publish():
            msg = JointState(name=JOINTS, position=MEASURED)
            msg.header.stamp = self.node.get_clock().now().to_msg()
            states.publish(msg)
            return bool(commands)
        self.assertTrue(self._spin_until(publish, TIMEOUT), 'no command after joint_states')
        for measured, commanded in zip(MEASURED, commands[0].position):
            self.assertAlmostEqual(measured, commanded, delta=1e-3)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):

    def test_exit_codes(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
