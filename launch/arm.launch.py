"""Launch the IK node with a robot: robot_state_publisher, smcik_node, sim_arm, RViz.

    ros2 launch smcik_ros arm.launch.py                      # simulated default arm + RViz
    ros2 launch smcik_ros arm.launch.py urdf_path:=/path/to/ur5.urdf tip_link:=tool0 \\
        srdf_path:=/path/to/ur5.srdf                         # your arm, simulated
    ros2 launch smcik_ros arm.launch.py urdf_path:=/path/to/ur.urdf.xacro \\
        xacro_args:='ur_type:=ur5 name:=ur' tip_link:=tool0  # a xacro with its arguments
    ros2 launch smcik_ros arm.launch.py sim:=false rviz:=false \\
        command_type:=joint_trajectory \\
        command_topic:=/joint_trajectory_controller/joint_trajectory \\
        max_acceleration:=2.0 velocity_scale:=0.3 \\
        joint_limits_path:=/path/to/moveit_config/config/joint_limits.yaml   # a real arm

Arguments (ros2 launch smcik_ros arm.launch.py --show-args; docs/node.md, "Run it"):
urdf_path (a .urdf or a .xacro, expanded with xacro_args; urdf is its old name and warns),
xacro_args, srdf_path, package_paths, base_link, tip_link, solver, params_file (every other
setting; default config/arm.yaml), command_type, command_topic, sim, rviz, rviz_config, the arm
safety settings max_acceleration, velocity_scale, joint_states_timeout, joint_limits_path,
max_lead and resync_threshold. An empty one keeps params_file's value. A
name:=value given on the command line that is none of these is an error listing them.

The URDF reaches robot_state_publisher as robot_description, and smcik_node and sim_arm both as
robot_description and as urdf_path (relative and package:// meshes, the SRDF beside it). What
the arguments decide lives in smcik_ros/launch_arguments.py (tested without launch).

When any node exits, the whole launch shuts down (nothing is left orphaned; on Ctrl-C smcik_node
brakes the arm to a stop and exits 0). When a node exits non-zero (it could not start: an
unknown solver, a missing file), ros2 launch exits non-zero, and its last line names the node
and its reason.
"""

import sys
from typing import List

from ament_index_python.packages import get_package_share_directory, PackageNotFoundError
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, LogInfo, OpaqueFunction,
                            RegisterEventHandler, Shutdown)
from launch.event_handlers import OnProcessExit, OnProcessIO, OnShutdown
import launch.logging
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from smcik_ros import launch_arguments


def rviz2_installed():
    try:
        get_package_share_directory('rviz2')
    except PackageNotFoundError:
        return False
    return True


def ros_parameters(values):
    """Return ``values`` as launch_ros parameters: strings kept as strings (a URDF, 'true' or
    '1.0' would otherwise be read as YAML)."""
    out = {}
    for name, value in values.items():
        if isinstance(value, str):
            out[name] = ParameterValue(value, value_type=str)
        elif isinstance(value, list):
            out[name] = ParameterValue(value, value_type=List[str])
        else:
            out[name] = value
    return out


def watched(node, name, watch):
    """Return ``node`` with the handlers that tell ``watch`` its output and its exit; the
    last process to exit raises the failure (launch logs it as its last line, exit code 1)."""
    watch.expect(name)

    def on_exit(event, context):
        failure = watch.exited(name, event.returncode)
        if failure:
            raise RuntimeError(failure)

    def on_output(event):
        watch.output(name, event.text)

    return [RegisterEventHandler(OnProcessIO(target_action=node, on_stdout=on_output,
                                             on_stderr=on_output)),
            RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit)),
            node]


def launch_nodes(context):
    """Build the nodes once the launch arguments are known (OpaqueFunction)."""
    values = {name: LaunchConfiguration(name).perform(context)
              for name in launch_arguments.ARGUMENT_NAMES}
    if launch_arguments.named_on_command_line(sys.argv[1:], __file__):
        # Launched as itself (not included by another launch file): every name:=value of the
        # command line is meant for it, and launch would drop a mistyped one silently.
        launch_arguments.check_names(
            launch_arguments.given_names(context.argv),
            xacro=(values['urdf_path'] or values['urdf']).strip().endswith('.xacro'))
    plan = launch_arguments.plan(values, get_package_share_directory('smcik_ros'))
    logger = launch.logging.get_logger('arm.launch.py')
    for level, text in plan.notes:
        (logger.warning if level == 'warning' else logger.info)(text)

    watch = launch_arguments.ExitWatch()
    actions = [RegisterEventHandler(OnShutdown(
        on_shutdown=lambda event, context: watch.shutdown(event.reason, event.due_to_sigint)))]
    actions += watched(Node(
        package='robot_state_publisher', executable='robot_state_publisher',
        name='robot_state_publisher', output='screen',
        parameters=[ros_parameters({'robot_description': plan.robot_description})],
        on_exit=Shutdown(reason='robot_state_publisher exited')),
        'robot_state_publisher', watch)
    # params_file first: the launch arguments given (urdf_path among them) win over it.
    actions += watched(Node(
        package='smcik_ros', executable='smcik_node', name='smcik_node', output='screen',
        parameters=[plan.params_file, ros_parameters(plan.smcik_node)],
        remappings=[('target_point', '/clicked_point')],
        on_exit=Shutdown(reason='smcik_node exited')), 'smcik_node', watch)
    if plan.sim:
        actions += watched(Node(
            package='smcik_ros', executable='sim_arm', name='sim_arm', output='screen',
            parameters=[plan.params_file, ros_parameters(plan.sim_arm)],
            on_exit=Shutdown(reason='sim_arm exited')), 'sim_arm', watch)
    if plan.rviz:
        if rviz2_installed():
            actions += watched(Node(
                package='rviz2', executable='rviz2', name='rviz2', output='log',
                arguments=['-d', plan.rviz_config],
                on_exit=Shutdown(reason='rviz2 exited')), 'rviz2', watch)
        else:
            actions.append(LogInfo(msg='rviz2 is not installed: started without it '
                                       '(rviz:=false silences this)'))
    return actions


def generate_launch_description():
    arguments = [DeclareLaunchArgument(name, default_value=default, description=text)
                 for name, default, text in launch_arguments.ARGUMENTS]
    return LaunchDescription(arguments + [OpaqueFunction(function=launch_nodes)])
