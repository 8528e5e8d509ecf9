"""Robot description loading: the robot_description parameter, a URDF/xacro file, or the
/robot_description topic (robot_state_publisher's, transient local).

Used by smcik_node and sim_arm. ``read_urdf_file`` and ``resolve_path`` need no ROS graph.
"""

from pathlib import Path
import time

from .errors import ModelError

__all__ = ['resolve_path', 'read_urdf_file', 'load_robot_description']

_REPO_ROOT = Path(__file__).resolve().parents[1]


def resolve_path(path, what='urdf_path'):
    """Return an existing Path for ``path`` (ModelError naming parameter ``what`` if none).

    Absolute, or relative to the cwd, the package share directory or the repository root
    (in that order).
    """
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.is_file():
            return candidate
        raise ModelError(f'{what} {str(path)!r} does not exist')
    tried = [Path.cwd() / candidate]
    try:
        from ament_index_python.packages import get_package_share_directory
        tried.append(Path(get_package_share_directory('smcik_ros')) / candidate)
    except Exception:  # not installed as a ROS package (ImportError, PackageNotFoundError)
        pass
    tried.append(_REPO_ROOT / candidate)
    for option in tried:
        if option.is_file():
            return option
    raise ModelError(f'{what} {str(path)!r} not found; tried: '
                     f'{", ".join(str(t) for t in tried)}')


def read_urdf_file(path):
    """Return the URDF XML of a file: a ``.xacro`` file goes through xacro's Python API.

    Raises ModelError when the file cannot be read, or when it is a .xacro and xacro is not
    installed (with how to fix it).
    """
    path = Path(path)
    if path.suffix == '.xacro':
        try:
            import xacro
        except ImportError:
            raise ModelError(f'{str(path)!r} is a .xacro file and the xacro package is not '
                             'installed: install it (apt install ros-$ROS_DISTRO-xacro, or pip '
                             'install xacro) or expand it first (xacro robot.urdf.xacro > '
                             'robot.urdf)') from None
        try:
            return xacro.process_file(str(path)).toxml()
        except Exception as exc:
            raise ModelError(f'xacro failed on {str(path)!r}: {exc}') from exc
    try:
        return path.read_text()
    except OSError as exc:
        raise ModelError(f'urdf_path {str(path)!r} cannot be read: {exc}') from None


def load_robot_description(node, timeout, keep_waiting=lambda: True):
    """Return (urdf_xml, source) from the parameters or the /robot_description topic.

    node: an rclpy Node with the robot_description and urdf_path parameters declared;
    timeout: how long to wait for /robot_description [s]; keep_waiting: callable, False
    stops the wait early (a shutdown signal).
    """
    import rclpy
    from std_msgs.msg import String

    from .ros_interface import DESCRIPTION_QOS

    xml = node.get_parameter('robot_description').value
    if xml.strip():
        return xml, 'the robot_description parameter'
    path = node.get_parameter('urdf_path').value
    if path.strip():
        resolved = resolve_path(path)
        return read_urdf_file(resolved), f'urdf_path {str(resolved)!r}'
    received = []
    sub = node.create_subscription(String, '/robot_description',
                                   lambda msg: received.append(msg.data), DESCRIPTION_QOS)
    node.get_logger().info(f'no robot_description or urdf_path parameter: waiting up to '
                           f'{timeout:g} s for /robot_description (transient local)')
    deadline = time.monotonic() + timeout
    try:
        while not received and time.monotonic() < deadline and rclpy.ok(
                context=node.context) and keep_waiting():
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_subscription(sub)
    if not received:
        raise ModelError(f'no URDF: robot_description and urdf_path parameters are empty and '
                         f'nothing arrived on /robot_description within {timeout:g} s; set one '
                         'of them (e.g. -p urdf_path:=urdf/smcik_arm.urdf)')
    return received[-1], 'the /robot_description topic'
