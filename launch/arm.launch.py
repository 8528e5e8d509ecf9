"""Launch the IK node with a robot: robot_state_publisher, smcik_node, sim_arm, RViz.

    ros2 launch smcik_ros arm.launch.py                      # simulated default arm + RViz
    ros2 launch smcik_ros arm.launch.py sim:=false rviz:=false \
        command_type:=joint_trajectory \
        command_topic:=/joint_trajectory_controller/joint_trajectory \
        max_acceleration:=2.0 velocity_scale:=0.3 \
        joint_limits_path:=/path/to/moveit_config/config/joint_limits.yaml   # a real arm

Arguments: urdf (a .urdf, or a .xacro when xacro is installed; default the package's
urdf/smcik_arm.urdf), base_link, tip_link, solver, params_file (default config/arm.yaml),
command_type, command_topic, sim, rviz, and the arm safety settings max_acceleration,
velocity_scale, joint_states_timeout, joint_limits_path, max_lead, resync_threshold (empty: the
value in params_file). With sim:=false nothing is commanded before the arm's own joint_states
arrive (smcik_node logs every 5 s what it waits for). RViz's Publish Point tool
(/clicked_point) is remapped to smcik_node's target_point; the 2D Goal Pose tool publishes
/goal_pose, which smcik_node reads directly.

The URDF file is read here in Python (no shell: any path works, spaces included) and reaches
every node as the robot_description parameter. rviz2 is skipped with a log line when it is not
installed. When any node exits, the whole launch shuts down (nothing is left orphaned; on
Ctrl-C smcik_node brakes the arm to a stop and exits 0).
"""

import os

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, Shutdown
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

# What a real arm needs set (docs/node.md, "Driving a real arm"): the arm safety settings;
# name -> (type, description). Empty = keep params_file's value.
REAL_ARM_ARGUMENTS = {
    'max_acceleration': (float, 'acceleration limit of every joint [rad/s^2 or m/s^2]'),
    'velocity_scale': (float, 'share of the velocity limits used (0..1]'),
    'joint_states_timeout': (float, 'older joint_states stop the arm [s]'),
    'joint_limits_path': (str, "MoveIt joint_limits.yaml with per-joint limits"),
    'max_lead': (float, 'largest |command - measured| [rad or m]'),
    'resync_threshold': (float, 'restart from the measurement beyond this [rad or m]'),
}


def read_robot_description(path):
    """Return the URDF XML of ``path`` (.xacro through xacro's Python API)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise RuntimeError(f'urdf:={path!r}: no such file; give the path of a .urdf or .xacro')
    if path.endswith('.xacro'):
        try:
            import xacro
        except ImportError:
            raise RuntimeError(f'urdf:={path!r} is a .xacro file and xacro is not installed: '
                               'sudo apt install ros-$ROS_DISTRO-xacro (or expand it first: '
                               'xacro robot.urdf.xacro > robot.urdf)') from None
        return xacro.process_file(path).toxml()
    with open(path, encoding='utf-8') as handle:
        return handle.read()


def rviz2_installed():
    try:
        from ament_index_python.packages import get_package_prefix, PackageNotFoundError
    except ImportError:
        return False
    try:
        get_package_prefix('rviz2')
    except PackageNotFoundError:
        return False
    return True


def launch_nodes(context):
    """Build the nodes once the launch arguments are known (OpaqueFunction)."""
    def arg(name):
        return LaunchConfiguration(name).perform(context)

    def flag(name):
        value = arg(name).strip().lower()
        if value not in ('true', 'false', '1', '0'):
            raise RuntimeError(f'{name}:={value!r}: expected true or false')
        return value in ('true', '1')

    xml = read_robot_description(arg('urdf'))
    model = {
        'robot_description': ParameterValue(xml, value_type=str),
        'base_link': ParameterValue(arg('base_link'), value_type=str),
        'tip_link': ParameterValue(arg('tip_link'), value_type=str),
    }
    wiring = {'command_type': ParameterValue(arg('command_type'), value_type=str),
              'command_topic': ParameterValue(arg('command_topic'), value_type=str)}
    real_arm = {}
    for name, (kind, _) in REAL_ARM_ARGUMENTS.items():
        text = arg(name).strip()
        if not text:
            continue
        try:
            real_arm[name] = kind(text)
        except ValueError:
            raise RuntimeError(f'{name}:={text!r}: expected a number') from None
    params_file = arg('params_file')
    actions = [
        Node(package='robot_state_publisher', executable='robot_state_publisher',
             name='robot_state_publisher', output='screen',
             parameters=[{'robot_description': ParameterValue(xml, value_type=str)}],
             on_exit=Shutdown(reason='robot_state_publisher exited')),
        Node(package='smcik_ros', executable='smcik_node', name='smcik_node', output='screen',
             parameters=[params_file, model, wiring,
                         {'solver': ParameterValue(arg('solver'), value_type=str)}]
             + ([real_arm] if real_arm else []),
             remappings=[('target_point', '/clicked_point')],
             on_exit=Shutdown(reason='smcik_node exited')),
    ]
    if flag('sim'):
        actions.append(Node(package='smcik_ros', executable='sim_arm', name='sim_arm',
                            output='screen', parameters=[params_file, model, wiring],
                            on_exit=Shutdown(reason='sim_arm exited')))
    if flag('rviz'):
        if rviz2_installed():
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
        DeclareLaunchArgument('urdf', default_value=PathJoinSubstitution(
            [share, 'urdf', 'smcik_arm.urdf']), description='URDF (or .xacro) file of the robot'),
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
                              description='start sim_arm (a kinematic arm) as the robot; '
                                          'false: a real arm publishes joint_states'),
        DeclareLaunchArgument('rviz', default_value='true',
                              description='start RViz (skipped when not installed)'),
        DeclareLaunchArgument('rviz_config', default_value=PathJoinSubstitution(
            [share, 'config', 'arm.rviz']), description='RViz configuration'),
    ]
    arguments += [DeclareLaunchArgument(name, default_value='',
                                        description=f'{text}; empty: from params_file')
                  for name, (_, text) in REAL_ARM_ARGUMENTS.items()]
    return LaunchDescription(arguments + [OpaqueFunction(function=launch_nodes)])
