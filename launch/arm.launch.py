"""Launch the IK node with a robot: robot_state_publisher, smcik_node, sim_arm, RViz.

    ros2 launch smcik_ros arm.launch.py                      # simulated default arm + RViz
    ros2 launch smcik_ros arm.launch.py sim:=false rviz:=false \
        command_type:=joint_trajectory \
        command_topic:=/joint_trajectory_controller/joint_trajectory   # a ros2_control arm

Arguments: urdf (path, default the package's urdf/smcik_arm.urdf), base_link, tip_link,
solver, params_file (default config/arm.yaml), command_type, command_topic, sim, rviz.
RViz's Publish Point tool (/clicked_point) is remapped to smcik_node's target_point; the
2D Goal Pose tool publishes /goal_pose, which smcik_node reads directly.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import Command, LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare('smcik_ros')
    arguments = [
        DeclareLaunchArgument('urdf', default_value=PathJoinSubstitution(
            [share, 'urdf', 'smcik_arm.urdf']), description='URDF file of the robot'),
        DeclareLaunchArgument('base_link', default_value='base_link',
                              description='base link of the IK chain (frame of the commands)'),
        DeclareLaunchArgument('tip_link', default_value='tool0',
                              description='tip link the goals apply to'),
        DeclareLaunchArgument('solver', default_value='smc',
                              description='IK solver: smc, jacobian, distance, ccd, ...'),
        DeclareLaunchArgument('params_file', default_value=PathJoinSubstitution(
            [share, 'config', 'arm.yaml']), description='parameters of smcik_node and sim_arm'),
        DeclareLaunchArgument('command_type', default_value='joint_state',
                              description='joint_state | joint_trajectory | '
                                          'float64_multi_array'),
        DeclareLaunchArgument('command_topic', default_value='joint_commands',
                              description='topic of the joint commands'),
        DeclareLaunchArgument('sim', default_value='true',
                              description='start sim_arm (a kinematic arm) as the robot'),
        DeclareLaunchArgument('rviz', default_value='true', description='start RViz'),
    ]
    params_file = LaunchConfiguration('params_file')
    # The URDF as a string parameter (use Command(['xacro ', ...]) for a .xacro file).
    robot_description = ParameterValue(Command(['cat ', LaunchConfiguration('urdf')]),
                                       value_type=str)
    model = {
        'robot_description': robot_description,
        'base_link': ParameterValue(LaunchConfiguration('base_link'), value_type=str),
        'tip_link': ParameterValue(LaunchConfiguration('tip_link'), value_type=str),
    }
    wiring = {
        'command_type': ParameterValue(LaunchConfiguration('command_type'), value_type=str),
        'command_topic': ParameterValue(LaunchConfiguration('command_topic'), value_type=str),
    }
    return LaunchDescription(arguments + [
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher', output='screen',
             parameters=[{'robot_description': robot_description}]),
        Node(package='smcik_ros', executable='smcik_node', name='smcik_node', output='screen',
             parameters=[params_file, model, wiring, {
                 'solver': ParameterValue(LaunchConfiguration('solver'), value_type=str)}],
             remappings=[('target_point', '/clicked_point')]),
        Node(package='smcik_ros', executable='sim_arm', name='sim_arm', output='screen',
             parameters=[params_file, model, wiring],
             condition=IfCondition(LaunchConfiguration('sim'))),
        Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
             arguments=['-d', PathJoinSubstitution([share, 'config', 'arm.rviz'])],
             condition=IfCondition(LaunchConfiguration('rviz'))),
    ])
