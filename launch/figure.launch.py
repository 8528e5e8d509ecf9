"""Launch the IK node on a whole figure: robot_state_publisher, smcik_node, sim_arm, goal
markers, RViz.

    ros2 launch smcik_ros figure.launch.py                   # the simulated humanoid + RViz
    ros2 launch smcik_ros figure.launch.py urdf_path:=/path/robot.urdf base_link:=base_link \
        tip_links:="[l_gripper, r_gripper, l_sole, r_sole]" params_file:=/path/params.yaml

Arguments: urdf_path (a .urdf, or a .xacro when xacro is installed; default the package's
urdf/smcik_figure.urdf), base_link (the root the floating base carries; default pelvis),
tip_links (the goal links, "[a, b]" or "a,b"; default both hands and both feet), floating_base
(true: the base pose is solved for and published on ~/base_pose and TF), world_frame (the
frame of goals, constraints and markers; gravity along its -z), params_file (default
config/figure.yaml: planted feet and the centre of mass over them from the first
joint_states), solver, sim (sim_arm plays the robot), rviz, rviz_config.

Goals per tip: with the interactive_markers package installed, goal_markers shows a 6-DoF
interactive marker at each tip (RViz's Interact tool drags it; it streams
targets/<tip>/pose); without it a log line says so and RViz's two Publish Point tools
(config/figure.rviz: the first for the left hand, the second for the right) publish
targets/<tip>/point. The 2D Goal
Pose tool (/goal_pose) addresses the first tip. The URDF is read here in Python and reaches
every node as robot_description; when any node exits, the whole launch shuts down.
"""

import importlib.util
import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, Shutdown
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare
from smcik_ros.ros.description import read_urdf_file, resolve_path

DEFAULT_TIPS = 'left_hand, right_hand, left_foot, right_foot'


def _arm_launch():
    """Return launch/arm.launch.py as a module (its RViz check)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'arm.launch.py')
    spec = importlib.util.spec_from_file_location('smcik_arm_launch', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_tip_links(text):
    """Return the tip links of a launch argument: '[a, b]', 'a,b' or 'a b'."""
    names = text.strip().strip('[]').replace(',', ' ').split()
    names = [n.strip('\'"') for n in names if n.strip('\'"')]
    if not names:
        raise RuntimeError(f'tip_links:={text!r}: expected link names, e.g. '
                           f'"[{DEFAULT_TIPS}]"')
    return names


def parse_flag(name, text):
    """Return the bool of a true/false launch argument."""
    value = text.strip().lower()
    if value not in ('true', 'false', '1', '0'):
        raise RuntimeError(f'{name}:={text!r}: expected true or false')
    return value in ('true', '1')


def interactive_markers_installed():
    """Return True when the interactive_markers Python package can be imported."""
    try:
        import interactive_markers  # noqa: F401
    except ImportError:
        return False
    return True


def launch_nodes(context):
    """Build the nodes once the launch arguments are known (OpaqueFunction)."""
    def arg(name):
        return LaunchConfiguration(name).perform(context)

    arm = _arm_launch()
    xml = read_urdf_file(resolve_path(arg('urdf_path')))
    tips = parse_tip_links(arg('tip_links'))
    floating = parse_flag('floating_base', arg('floating_base'))
    model = {
        'robot_description': ParameterValue(xml, value_type=str),
        'base_link': ParameterValue(arg('base_link'), value_type=str),
        'tip_link': ParameterValue(tips[0], value_type=str),
        'tip_links': tips,
        'floating_base': floating,
        'world_frame': ParameterValue(arg('world_frame'), value_type=str),
    }
    params_file = arg('params_file')
    actions = [
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher', output='screen',
             parameters=[{'robot_description': ParameterValue(xml, value_type=str)}],
             on_exit=Shutdown(reason='robot_state_publisher exited')),
        Node(package='smcik_ros', executable='smcik_node', name='smcik_node', output='screen',
             parameters=[params_file, model,
                         {'solver': ParameterValue(arg('solver'), value_type=str)}],
             on_exit=Shutdown(reason='smcik_node exited')),
    ]
    if parse_flag('sim', arg('sim')):
        actions.append(Node(package='smcik_ros', executable='sim_arm', name='sim_arm',
                            output='screen', parameters=[params_file, model],
                            on_exit=Shutdown(reason='sim_arm exited')))
    if interactive_markers_installed():
        actions.append(Node(package='smcik_ros', executable='goal_markers',
                            name='goal_markers', output='screen', parameters=[model]))
    else:
        actions.append(LogInfo(msg='interactive_markers is not installed: no 6-DoF goal '
                                   "markers; RViz's Publish Point tools send "
                                   'targets/<tip>/point for each hand'))
    if parse_flag('rviz', arg('rviz')):
        if arm.rviz2_installed():
            actions.append(Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
                                arguments=['-d', arg('rviz_config')],
                                on_exit=Shutdown(reason='rviz2 exited')))
        else:
            actions.append(LogInfo(msg='rviz2 is not installed: started without it '
                                       '(rviz:=false silences this)'))
    return actions


def generate_launch_description():
    share = FindPackageShare('smcik_ros')
    arguments = [
        DeclareLaunchArgument('urdf_path', default_value=PathJoinSubstitution(
            [share, 'urdf', 'smcik_figure.urdf']),
            description='URDF (or .xacro) file of the robot'),
        DeclareLaunchArgument('base_link', default_value='pelvis',
                              description='root link of the IK model (the floating base)'),
        DeclareLaunchArgument('tip_links', default_value=f'[{DEFAULT_TIPS}]',
                              description='links the goals apply to: "[a, b]" or "a,b"'),
        DeclareLaunchArgument('floating_base', default_value='true',
                              description="solve for base_link's pose in world_frame"),
        DeclareLaunchArgument('world_frame', default_value='world',
                              description='frame of the floating base, goals and constraints'),
        DeclareLaunchArgument('solver', default_value='smc',
                              description='IK solver: smc, jacobian, distance'),
        DeclareLaunchArgument('params_file', default_value=PathJoinSubstitution(
            [share, 'config', 'figure.yaml']),
            description='parameters of smcik_node and sim_arm'),
        DeclareLaunchArgument('sim', default_value='true',
                              description='start sim_arm (a kinematic robot) as the robot'),
        DeclareLaunchArgument('rviz', default_value='true',
                              description='start RViz (skipped when not installed)'),
        DeclareLaunchArgument('rviz_config', default_value=PathJoinSubstitution(
            [share, 'config', 'figure.rviz']), description='RViz configuration'),
    ]
    return LaunchDescription(arguments + [OpaqueFunction(function=launch_nodes)])
