"""Robot description loading: the robot_description parameter, a URDF/xacro file, or the
/robot_description topic (robot_state_publisher's, transient local); and which SRDF the
collision model uses.

Used by smcik_node and sim_arm. Everything but ``load_robot_description`` needs no ROS graph.
"""

from pathlib import Path
import time
import xml.etree.ElementTree as ElementTree

from ..control.collision_guard import choose_srdf
from ..errors import ModelError
from ..model.urdf import declare_prefixes

__all__ = ['resolve_path', 'read_urdf_file', 'load_robot_description', 'urdf_file_of',
           'waiting_notice', 'SrdfSources', 'SEMANTIC_TOPIC', 'WAIT_LOG_PERIOD']

_REPO_ROOT = Path(__file__).resolve().parents[2]


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


def read_urdf_file(path, xacro_args=None):
    """Return the URDF XML of a file: a ``.xacro`` file goes through xacro's Python API.

    xacro_args: {name: value} of the xacro's ``<xacro:arg>``s (``xacro file.xacro name:=value``
    on the command line). Raises ModelError when the file cannot be read, or when it is a
    .xacro and xacro is not installed (with how to fix it) or fails (with xacro's reason).
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
            return xacro.process_file(str(path), mappings=dict(xacro_args or {})).toxml()
        except Exception as exc:
            given = ' '.join(f'{k}:={v}' for k, v in (xacro_args or {}).items())
            raise ModelError(f'xacro failed on {str(path)!r} '
                             f'({f"arguments {given}" if given else "no arguments"}): '
                             f'{exc}') from exc
    try:
        return path.read_text()
    except OSError as exc:
        raise ModelError(f'urdf_path {str(path)!r} cannot be read: {exc}') from None


WAIT_LOG_PERIOD = 3.0   # [s] a wait says what it waits for this often


def waiting_notice(topic, elapsed, timeout):
    """Return the line a node logs while it waits for the robot description on ``topic``
    (the subscription's resolved name), ``elapsed`` [s] of ``timeout`` [s] into the wait."""
    return (f'still waiting for the robot description on {topic} ({elapsed:.0f} s of '
            f'{timeout:g} s; robot_state_publisher publishes it, transient local): is it '
            'running, on this topic and ROS_DOMAIN_ID? Or set the robot_description or '
            'urdf_path parameter')


def load_robot_description(node, timeout, keep_waiting=lambda: True,
                           log_period=WAIT_LOG_PERIOD):
    """Return (urdf_xml, source) from the parameters or the /robot_description topic.

    node: an rclpy Node with the robot_description and urdf_path parameters declared;
    timeout: how long to wait for /robot_description [s]; keep_waiting: callable, False
    stops the wait early (a shutdown signal); log_period [s]: while waiting, an info line
    names the topic this often (``waiting_notice``).
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import String

    from .interface import DESCRIPTION_QOS

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
    topic = getattr(sub, 'topic_name', None) or '/robot_description'
    node.get_logger().info(f'no robot_description or urdf_path parameter: waiting up to '
                           f'{timeout:g} s for the robot description on {topic} (transient '
                           'local)')
    start = time.monotonic()
    deadline = start + timeout
    next_notice = start + log_period
    executor = SingleThreadedExecutor(context=node.context)    # the node's own context
    executor.add_node(node)
    try:
        while not received and time.monotonic() < deadline and rclpy.ok(
                context=node.context) and keep_waiting():
            executor.spin_once(timeout_sec=min(0.1, log_period))
            now = time.monotonic()
            if not received and now >= next_notice and now < deadline:
                node.get_logger().info(waiting_notice(topic, now - start, timeout))
                next_notice = now + log_period
    finally:
        executor.remove_node(node)
        executor.shutdown()
        node.destroy_subscription(sub)
    if not received:
        raise ModelError(f'no URDF: robot_description and urdf_path parameters are empty and '
                         f'nothing arrived on {topic} within {timeout:g} s; set one '
                         'of them (e.g. -p urdf_path:=urdf/smcik_arm.urdf)')
    return received[-1], 'the /robot_description topic'


def _robot_name(urdf_xml):
    return ElementTree.fromstring(declare_prefixes(urdf_xml)).get('name') or ''


def urdf_file_of(urdf_path, urdf_xml, source):
    """Return (the URDF file the model came from, or None; a warning, or None).

    The file gives relative mesh paths and the SRDF beside it: ``urdf_path`` (the parameter)
    when the XML was read from it (``source`` starts with 'urdf_path'), or when the XML came
    from elsewhere (e.g. the launch file passes both) and the file describes the same robot
    (a ``.xacro`` whose robot name is a xacro expression, such as ``$(arg name)``, is taken
    to: its arguments are the launch file's, not known here).
    """
    text = urdf_path.strip()
    if not text:
        return None, None
    try:
        path = str(resolve_path(text))
    except ModelError:
        return None, None
    if source.startswith('urdf_path'):
        return path, None
    try:
        if path.endswith('.xacro'):     # its name read unexpanded: no xacro arguments here
            name = _robot_name(Path(path).read_text())
            same = '$' in name or name == _robot_name(urdf_xml)
        else:
            same = _robot_name(read_urdf_file(path)) == _robot_name(urdf_xml)
    except (ModelError, OSError, ElementTree.ParseError):
        same = False
    if not same:
        return None, (f'urdf_path {path!r} describes another robot than the XML from {source}: '
                      'not used for relative mesh paths or to find the SRDF beside it')
    return path, None


SEMANTIC_TOPIC = '/robot_description_semantic'


class SrdfSources:
    """Which SRDF the collision model uses, in order: the robot_description_semantic parameter,
    srdf_path, the /robot_description_semantic topic (MoveIt's), the SRDF found beside the URDF
    file ``urdf_file`` by convention. ``applied``: the SRDF (text or path) in use."""

    def __init__(self, urdf_file=None):
        self.urdf_file = urdf_file
        self.applied = None

    @staticmethod
    def topic_wanted(values):
        """True when no SRDF parameter is set (the topic may give one)."""
        return not (values['robot_description_semantic'].strip()
                    or values['srdf_path'].strip())

    def choose(self, values, topic_text=None):
        """Return (source, description, explicit) of ``choose_srdf`` for the parameter
        ``values``, with ``topic_text`` (the topic's SRDF) in place of the parameter text
        when no parameter is set. ModelError: srdf_path names no file."""
        semantic, description = values['robot_description_semantic'], None
        if topic_text is not None and self.topic_wanted(values):
            semantic, description = topic_text, f'the {SEMANTIC_TOPIC} topic'
        source, where, explicit = choose_srdf(
            semantic, values['srdf_path'], self.urdf_file,
            resolve=lambda path: resolve_path(path, 'srdf_path'))
        return source, description or where, explicit

    def take_topic(self, text, values):
        """True when an SRDF ``text`` that arrived on the topic replaces the one in use: it
        is not empty, no parameter names an SRDF, and it is not the one applied."""
        return bool(text.strip()) and self.topic_wanted(values) and text != self.applied
