"""launch_testing test of launch/figure.launch.py with the simulated humanoid (no RViz).

Runs under ``colcon test`` on a ROS 2 install (Humble or Jazzy) with the package built; where
launch_testing / launch_ros are not installed (the PyPI-wheel venv of ./smcik) it is skipped.
test_figure_launch_file.py checks the file itself without importing launch.
"""

from pathlib import Path
import time
import unittest
import xml.etree.ElementTree as ElementTree

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
from geometry_msgs.msg import PoseStamped  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILE = ROOT / 'launch' / 'figure.launch.py'
URDF_JOINTS = {j.get('name') for j in ElementTree.parse(ROOT / 'urdf' / 'smcik_figure.urdf')
               .getroot().iter('joint') if j.get('type') != 'fixed'}
TIMEOUT = 240.0  # [s] three nodes start; a fresh install compiles the kernels first (>90 s seen)


@pytest.mark.launch_test
def generate_test_description():
    """Start figure.launch.py with the simulated humanoid and without RViz."""
    include = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
        launch_arguments={'sim': 'true', 'rviz': 'false'}.items())
    return launch.LaunchDescription([include, launch_testing.actions.ReadyToTest()])


class TestFigure(unittest.TestCase):
    """While the launch runs: commands, joint states and the base pose flow."""

    @classmethod
    def setUpClass(cls):
        rclpy.init()

    @classmethod
    def tearDownClass(cls):
        rclpy.shutdown()

    def setUp(self):
        self.node = rclpy.create_node('test_figure_launch')

    def tearDown(self):
        self.node.destroy_node()

    def _first_message(self, kind, topic):
        received = []
        sub = self.node.create_subscription(kind, topic, received.append, 10)
        deadline = time.monotonic() + TIMEOUT
        while not received and time.monotonic() < deadline:
            rclpy.spin_once(self.node, timeout_sec=0.1)
        self.node.destroy_subscription(sub)
        return received[0] if received else None

    def test_sim_arm_plays_every_joint_of_the_figure(self, proc_output):
        msg = self._first_message(JointState, 'joint_states')
        self.assertIsNotNone(msg, f'no message on joint_states within {TIMEOUT} s')
        self.assertEqual(set(msg.name), URDF_JOINTS)

    def test_commands_cover_the_tip_paths(self, proc_output):
        msg = self._first_message(JointState, 'joint_commands')
        self.assertIsNotNone(msg, f'no message on joint_commands within {TIMEOUT} s')
        self.assertLessEqual(URDF_JOINTS - {'neck_yaw'}, set(msg.name))

    def test_base_pose_in_the_world_frame(self, proc_output):
        msg = self._first_message(PoseStamped, '/smcik_node/base_pose')
        self.assertIsNotNone(msg, f'no message on /smcik_node/base_pose within {TIMEOUT} s')
        self.assertEqual(msg.header.frame_id, 'world')
        self.assertAlmostEqual(msg.pose.position.z, 0.876373, delta=1e-3)   # config/figure.yaml


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    """After the launch is shut down (SIGINT): every process exited cleanly."""

    def test_exit_codes(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)
