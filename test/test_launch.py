"""launch_testing test of launch/arm.launch.py with the simulated arm (sim:=true, no RViz).

Runs under ``colcon test`` on a ROS 2 install (Humble or Jazzy) with the package built; where
launch_testing / launch_ros are not installed (the PyPI-wheel venv of ./smcik) it is skipped.
test_launch_real_arm.py checks sim:=false (nothing commanded before joint_states).
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
TIMEOUT = 240.0  # [s] three nodes start; a fresh install compiles the kernels first (>90 s seen)


@pytest.mark.launch_test
def generate_test_description():
    """Start arm.launch.py with the simulated arm and without RViz."""
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
        launch_arguments={'sim': 'true', 'rviz': 'false', 'max_acceleration': '2.5',
                          'max_lead': '0.12'}.items())
    return launch.LaunchDescription([include, launch_testing.actions.ReadyToTest()])


class TestJointCommands(unittest.TestCase):
    """While the launch runs: commands and joint states flow."""

    @classmethod
    def setUpClass(cls):
        rclpy.init()

    @classmethod
    def tearDownClass(cls):
        rclpy.shutdown()

    def setUp(self):
        self.node = rclpy.create_node('test_arm_launch')

    def tearDown(self):
        self.node.destroy_node()

    def _first_message(self, topic):
        received = []
        sub = self.node.create_subscription(JointState, topic, received.append, 10)
        deadline = time.monotonic() + TIMEOUT
        while not received and time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.1)
        self.node.destroy_subscription(sub)
        return received[0] if received else None

    def test_joint_commands_are_published(self, proc_output):
        msg = self._first_message('joint_commands')
        self.assertIsNotNone(msg, f'no message on joint_commands within {TIMEOUT} s')
        self.assertEqual(list(msg.name), JOINTS)
        self.assertEqual(len(msg.position), len(JOINTS))
        self.assertNotEqual(msg.header.stamp.sec + msg.header.stamp.nanosec, 0,
                            'commands carry the stamp their limits were applied for')

    def test_sim_arm_publishes_joint_states(self, proc_output):
        msg = self._first_message('joint_states')
        self.assertIsNotNone(msg, f'no message on joint_states within {TIMEOUT} s')
        self.assertEqual(list(msg.name), JOINTS)

    def test_safety_launch_argument_reaches_the_node(self, proc_output):
        from rcl_interfaces.srv import GetParameters
        client = self.node.create_client(GetParameters, '/smcik_node/get_parameters')
        self.assertTrue(client.wait_for_service(timeout_sec=TIMEOUT))
        future = client.call_async(GetParameters.Request(
            names=['max_acceleration', 'velocity_scale', 'max_lead']))
        rclpy.spin_until_future_complete(self.node, future, timeout_sec=TIMEOUT)
        values = future.result().values
        self.assertEqual(values[0].double_value, 2.5)        # the launch argument
        self.assertEqual(values[1].double_value, 0.5)        # params_file (config/arm.yaml)
        self.assertEqual(values[2].double_value, 0.12)       # another launch argument
        self.node.destroy_client(client)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    """After the launch is shut down (SIGINT): every process exited cleanly."""

    def test_exit_codes(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
