"""smcik_node: online inverse kinematics as a ROS 2 node.

Goals (target_pose, target_point, /goal_pose) and constraints (constraints, keep_out_markers)
come in; a timer at ``rate_hz`` runs ``iterations_per_tick`` solver steps and publishes the
smoothed estimate, velocity-limited and clipped to the joint limits, as joint commands
(JointState, JointTrajectory or Float64MultiArray). Markers show the particles, the MAP chain,
the target and the keep-out spheres; ``~/status`` carries a compact JSON summary.
See docs/node.md for every topic and parameter.

Run: ``ros2 run smcik_ros smcik_node --ros-args --params-file config/arm.yaml`` or
``python -m smcik_ros.node --ros-args --params-file config/arm.yaml``.
"""

import os

# The solvers work on tiny matrices: BLAS threads only add contention (measured 10-30x slower
# SVDs on a loaded 2-core host). Must be set before numpy is imported; an explicit setting wins.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
os.environ.setdefault('OMP_NUM_THREADS', '1')

import collections
import dataclasses
import inspect
import json
import math
from pathlib import Path
import re
import sys
import time

from geometry_msgs.msg import PointStamped, PoseStamped
import numpy as np
import rclpy
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)
from rclpy.time import Time
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from . import constraint_schema
from .errors import GoalError, ModelError, ParameterError, SmcIkError
from .goals import KeepOutSphere, PoseTarget, PositionTarget
from .kinematics import Chain
from .markers import build_marker_array, link_segments, select_particles
from .ros_conversions import (goal_pose_to_matrix, joint_state_to_positions,
                              make_float64_multi_array, make_joint_state, make_joint_trajectory,
                              point_to_array, pose_to_matrix, update_keep_out_spheres)
from .ros_runner import run_node
from .rotations import quat_to_matrix
from .solvers import available_solvers, make_solver, settings_type

__all__ = ['SmcIkNode', 'main', 'COMMAND_TYPES', 'load_robot_description', 'resolve_path',
           'solver_settings_yaml']

COMMAND_TYPES = {
    'joint_state': JointState,
    'joint_trajectory': JointTrajectory,
    'float64_multi_array': Float64MultiArray,
}

# Commands: every message matters (a controller must not miss one), no history for late joiners.
COMMAND_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE, history=HistoryPolicy.KEEP_LAST)
# Goals, constraints, status: reliable, volatile (matches RViz tools and `ros2 topic pub`).
INPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)
# robot_state_publisher latches the URDF: transient local, depth 1.
DESCRIPTION_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
MARKER_QOS = QoSProfile(depth=2, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)

_REPO_ROOT = Path(__file__).resolve().parents[1]
_MEASURED_FRESH_S = 0.5  # joint_states older than this do not trigger a resync [s]


def _float_range(low, high, step=0.0):
    return [FloatingPointRange(from_value=float(low), to_value=float(high), step=float(step))]


def _int_range(low, high, step=1):
    return [IntegerRange(from_value=int(low), to_value=int(high), step=int(step))]


# name: (default, description with unit, extra descriptor fields)
NODE_PARAMETERS = {
    'robot_description': ('', 'URDF XML of the robot; empty: use urdf_path, else the '
                          '/robot_description topic', {'read_only': True}),
    'urdf_path': ('', 'URDF file; relative paths are tried against the working directory, '
                  'then the package share directory / repository root', {'read_only': True}),
    'base_link': ('base_link', 'base link of the chain: frame of commands, goals and markers',
                  {'read_only': True}),
    'tip_link': ('tool0', 'tip link the goals apply to', {'read_only': True}),
    'robot_description_timeout': (10.0, 'how long to wait for /robot_description when no '
                                  'URDF parameter is set [s]',
                                  {'floating_point_range': _float_range(0.0, 3600.0)}),
    'rate_hz': (100.0, 'control rate: solver ticks and published commands [Hz]',
                {'floating_point_range': _float_range(1.0, 1000.0)}),
    'iterations_per_tick': (1, 'solver steps per control tick',
                            {'integer_range': _int_range(1, 100)}),
    'solver': ('smc', 'solver name; one of ' + ', '.join(available_solvers()), {}),
    'command_type': ('joint_state', 'command message: joint_state (sensor_msgs/JointState), '
                     'joint_trajectory (trajectory_msgs/JointTrajectory, one point) or '
                     'float64_multi_array (std_msgs/Float64MultiArray)', {}),
    'command_topic': ('joint_commands', 'topic the commands are published on', {}),
    'velocity_scale': (0.5, 'share of the URDF velocity limits allowed between ticks',
                       {'floating_point_range': _float_range(0.01, 1.0)}),
    'default_velocity_limit': (1.0, 'velocity limit for joints whose URDF gives none '
                               '[rad/s or m/s]',
                               {'floating_point_range': _float_range(0.001, 100.0)}),
    'marker_rate_hz': (10.0, 'RViz marker rate on ~/particles [Hz]; 0 = off',
                       {'floating_point_range': _float_range(0.0, 100.0)}),
    'max_marker_particles': (30, 'most particles drawn (highest weights first)',
                             {'integer_range': _int_range(0, 10000)}),
    'status_rate_hz': (2.0, 'rate of the ~/status JSON [Hz]; 0 = off',
                       {'floating_point_range': _float_range(0.0, 100.0)}),
    'goal_pose_height': (0.3, 'height of /goal_pose (RViz 2D Goal Pose) goals above the '
                         "click's frame origin [m]",
                         {'floating_point_range': _float_range(-10.0, 10.0)}),
    'resync_threshold': (0.5, 'largest |measured - commanded| joint difference before the '
                         'filter is reset to the measured joint_states [rad or m]; 0 = never',
                         {'floating_point_range': _float_range(0.0, 10.0)}),
    'joint_states_timeout': (2.0, 'how long to wait for the first joint_states before '
                             'starting from the mid-range configuration [s]; 0 = wait forever',
                             {'floating_point_range': _float_range(0.0, 3600.0)}),
    'position_tolerance': (0.001, 'goal reached when the commanded tip is this close [m]',
                           {'floating_point_range': _float_range(1e-6, 1.0)}),
    'orientation_tolerance': (0.01, 'goal reached when the commanded tip orientation is '
                              'this close [rad]',
                              {'floating_point_range': _float_range(1e-6, math.pi)}),
    'constraints': ('[]', 'constraint set as YAML text (schema: docs/node.md); replaced by '
                    'messages on the constraints topic', {}),
    'max_goal_rate_hz': (50.0, 'goals arriving faster than this are coalesced: only the '
                         'latest is used [Hz]',
                         {'floating_point_range': _float_range(0.1, 10000.0)}),
    'use_tf': (True, 'look up goal frames outside the model with tf2 when tf2_ros is '
               'installed', {}),
}


def resolve_path(path):
    """Return an existing Path for ``path`` (ModelError if there is none).

    Absolute, or relative to the cwd, the package share directory or the repository root
    (in that order).
    """
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if candidate.is_file():
            return candidate
        raise ModelError(f'urdf_path {str(path)!r} does not exist')
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
    raise ModelError(f'urdf_path {str(path)!r} not found; tried: '
                     f'{", ".join(str(t) for t in tried)}')


def load_robot_description(node, timeout):
    """Return (urdf_xml, source) from the parameters or the /robot_description topic."""
    xml = node.get_parameter('robot_description').value
    if xml.strip():
        return xml, 'the robot_description parameter'
    path = node.get_parameter('urdf_path').value
    if path.strip():
        resolved = resolve_path(path)
        return resolved.read_text(), f'urdf_path {str(resolved)!r}'
    received = []
    sub = node.create_subscription(String, '/robot_description',
                                   lambda msg: received.append(msg.data), DESCRIPTION_QOS)
    node.get_logger().info(f'no robot_description or urdf_path parameter: waiting up to '
                           f'{timeout:g} s for /robot_description (transient local)')
    deadline = time.monotonic() + timeout
    try:
        while not received and time.monotonic() < deadline and rclpy.ok():
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_subscription(sub)
    if not received:
        raise ModelError(f'no URDF: robot_description and urdf_path parameters are empty and '
                         f'nothing arrived on /robot_description within {timeout:g} s; set one '
                         'of them (e.g. -p urdf_path:=urdf/smcik_arm.urdf)')
    return received[-1], 'the /robot_description topic'


def _settings_comments(cls):
    """Return {field: comment} from the ``name: type = default  # comment`` lines of ``cls``."""
    comments = {}
    for klass in reversed(cls.__mro__):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for match in re.finditer(r'^\s+(\w+)\s*:[^=\n]*=[^#\n]*#\s*(.+)$', source, re.M):
            comments[match.group(1)] = match.group(2).strip()
    return comments


def solver_settings_yaml(indent=4):
    """Return the YAML block of every solver's settings with defaults (for config files)."""
    pad = ' ' * indent
    lines = []
    for solver in available_solvers():
        cls = settings_type(solver)
        comments = _settings_comments(cls)
        lines.append(f'{pad}{solver}:')
        for field in dataclasses.fields(cls):
            default = field.default
            if isinstance(default, bool):
                text = 'true' if default else 'false'
            elif isinstance(default, tuple):
                text = '[' + ', '.join(repr(float(v)) for v in default) + ']'
            else:
                text = repr(default)
                if isinstance(default, float) and 'e' in text and '.' not in text:
                    text = text.replace('e', '.0e')   # YAML 1.1 reads 1e-06 as a string
            entry = f'{field.name}: {text}'
            if text == '[]':   # ROS YAML cannot type an empty list: leave it commented out
                entry = f'# {entry}'
            comment = comments.get(field.name, '')
            lines.append(f'{pad}  {entry}'.ljust(indent + 34)
                         + (f'  # {comment}' if comment else ''))
    return '\n'.join(lines) + '\n'


def _parameter_type_of(default):
    if isinstance(default, bool):
        return Parameter.Type.BOOL
    if isinstance(default, int):
        return Parameter.Type.INTEGER
    if isinstance(default, float):
        return Parameter.Type.DOUBLE
    if isinstance(default, str):
        return Parameter.Type.STRING
    if isinstance(default, tuple):
        return Parameter.Type.DOUBLE_ARRAY
    return None


def _to_setting(value):
    """Return a ROS parameter value as a solver setting value (arrays -> tuple of float)."""
    if isinstance(value, (list, tuple)) or hasattr(value, 'typecode'):
        return tuple(float(v) for v in value)
    return value


class SmcIkNode(Node):
    """Online IK node: goals + constraints + joint_states in, joint commands out."""

    def __init__(self, **kwargs):
        super().__init__('smcik_node', **kwargs)
        self._setting_fields = {}  # solver name -> {field name: default}
        self._declare_parameters()
        self.urdf_xml, source = load_robot_description(
            self, self.get_parameter('robot_description_timeout').value)
        self.chain = Chain.from_urdf(self.urdf_xml, base_link=self._param('base_link'),
                                     tip_link=self._param('tip_link'))
        self.get_logger().info(
            f'model from {source}: {self.chain.robot_name} {self.chain.base_link} -> '
            f'{self.chain.tip_link}, joints {", ".join(self.chain.joint_names)}')
        self._segments = link_segments(self.urdf_xml, self.chain.link_names)
        self._velocity_limits = self._velocity_limits_of(self.chain)
        self._tf_buffer = self._make_tf_buffer() if self._param('use_tf') else None

        n = self.chain.n
        self._q_cmd = None                       # last published command (n,)
        self._q_measured = np.full(n, np.nan)    # last measured joint positions (n,)
        self._measured_stamp = None              # time.monotonic() of the last joint_states
        self._start_time = time.monotonic()
        self._goal_terms = None                  # [Target] handed to solver.step
        self._goal_display = None                # (4, 4) or (3,) in the base frame, for markers
        self._goal_id = 0
        self._goal_time = None
        self._goal_reached = False
        self._pending_goal = None                # (terms, display, description)
        self._newest_goal_stamp = 0              # header stamp [ns] of the newest goal
        self._last_goal_applied = -math.inf
        self._coalesced = 0
        self._errors = (math.nan, math.nan)
        self._tick_times = collections.deque(maxlen=200)     # [s] control tick durations
        self._tick_cpu = collections.deque(maxlen=200)       # [s] their CPU time (thread)
        self._marker_times = collections.deque(maxlen=50)    # [s] marker tick durations
        self._marker_cpu = collections.deque(maxlen=50)
        self._constraint_specs = []
        self._marker_spheres = {}                # (ns, id) -> (center in base (3,), radius)
        self._constraint_objects = []
        self._sphere_display = []
        self._markers_shown = (0, False)         # (spheres, target) in the last marker message

        # The solver and the constraints from the parameters (both fail fast on bad values).
        self._solver_name = self._param('solver')
        self.solver = self._make_solver(self._solver_name, self._all_values())
        self._constraint_specs = self._parse_constraints(self._param('constraints'))
        self._set_constraints(self._constraint_specs, self._marker_spheres)
        self._check_choice('command_type', self._param('command_type'), COMMAND_TYPES)

        self._command_pub = None
        self._make_command_publisher()
        self._marker_pub = self.create_publisher(MarkerArray, '~/particles', MARKER_QOS)
        self._status_pub = self.create_publisher(String, '~/status', INPUT_QOS)

        self.create_subscription(PoseStamped, 'target_pose', self._on_target_pose, INPUT_QOS)
        self.create_subscription(PointStamped, 'target_point', self._on_target_point,
                                 INPUT_QOS)
        self.create_subscription(PoseStamped, '/goal_pose', self._on_goal_pose, INPUT_QOS)
        self.create_subscription(String, 'constraints', self._on_constraints, INPUT_QOS)
        self.create_subscription(MarkerArray, 'keep_out_markers', self._on_keep_out_markers,
                                 INPUT_QOS)
        self.create_subscription(JointState, 'joint_states', self._on_joint_states,
                                 qos_profile_sensor_data)

        self._timer = None
        self._marker_timer = None
        self._status_timer = None
        self._make_timers(('rate_hz', 'marker_rate_hz', 'status_rate_hz'))
        self._values = self._all_values()   # read on every tick: cached, kept up to date
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(
            f'ready: solver {self._solver_name}, {self._param("rate_hz"):g} Hz x '
            f'{self._param("iterations_per_tick")} iteration(s), commands '
            f'({self._param("command_type")}) on {self._command_pub.topic_name}; waiting for '
            'joint_states before commanding')

    # ------------------------------------------------------------------ parameters
    def _param(self, name):
        """Return a parameter value (from the cache kept by _on_set_parameters once built)."""
        values = getattr(self, '_values', None)
        if values is not None and name in values:
            return values[name]
        return self.get_parameter(name).value

    def _declare_parameters(self):
        for name, (default, description, extra) in NODE_PARAMETERS.items():
            self.declare_parameter(name, default,
                                   ParameterDescriptor(description=description, **extra))
        for solver in available_solvers():
            cls = settings_type(solver)
            comments = _settings_comments(cls)
            fields = {}
            for field in dataclasses.fields(cls):
                ptype = _parameter_type_of(field.default)
                if ptype is None:
                    self.get_logger().warn(f'solver setting {solver}.{field.name} (default '
                                           f'{field.default!r}) has no ROS parameter type; '
                                           'it stays at its default')
                    continue
                name = f'{solver}.{field.name}'
                descriptor = ParameterDescriptor(
                    description=f'{solver} solver: {comments.get(field.name, field.name)} '
                                f'(default {field.default!r})')
                if ptype == Parameter.Type.DOUBLE_ARRAY:
                    # An empty list has no ROS type: declare typed, then set the default.
                    self.declare_parameter(name, ptype, descriptor)
                    try:
                        self.get_parameter(name)
                    except ParameterUninitializedException:
                        self.set_parameters([Parameter(name, ptype,
                                                       [float(v) for v in field.default])])
                else:
                    self.declare_parameter(name, field.default, descriptor)
                fields[field.name] = field.default
            self._setting_fields[solver] = fields

    def parameter_names(self):
        """Return the names of the node's own parameters (not use_sim_time etc.)."""
        return list(NODE_PARAMETERS) + [f'{solver}.{field}' for solver, fields in
                                        self._setting_fields.items() for field in fields]

    def _all_values(self):
        return {p.name: p.value for p in self.get_parameters(self.parameter_names())}

    def _settings_from(self, solver, values):
        return {field: _to_setting(values[f'{solver}.{field}'])
                for field in self._setting_fields.get(solver, {})}

    def _make_solver(self, name, values):
        if name not in available_solvers():
            raise ParameterError(f'unknown solver {name!r}; available solvers: '
                                 f'{", ".join(available_solvers())}')
        return make_solver(name, self.chain, **self._settings_from(name, values))

    @staticmethod
    def _check_choice(name, value, choices):
        if value not in choices:
            raise ParameterError(f'{name} {value!r} is not one of {", ".join(choices)}')

    def _on_set_parameters(self, params):
        changes = {p.name: p.value for p in params}
        try:
            self._apply_parameter_changes(changes)
        except SmcIkError as exc:
            self.get_logger().warn(f'parameter change refused: {exc}')
            return SetParametersResult(successful=False, reason=str(exc))
        self._values.update((k, v) for k, v in changes.items() if k in self._values)
        return SetParametersResult(successful=True)

    def _apply_parameter_changes(self, changes):
        """Validate every change first, then apply them all (nothing applied on refusal)."""
        values = self._all_values()
        values.update(changes)
        name = values['solver']
        if 'command_type' in changes:
            self._check_choice('command_type', changes['command_type'], COMMAND_TYPES)
        specs = None
        if 'constraints' in changes:
            specs = self._parse_constraints(changes['constraints'])
            self._build_constraints(specs, self._marker_spheres)   # validates frames/links
        touched = {key.split('.', 1)[0] for key in changes if '.' in key}
        candidates = {}
        for solver in touched | ({name} if 'solver' in changes else set()):
            if solver in self._setting_fields or solver == name:
                candidates[solver] = self._make_solver(solver, values)  # ParameterError
        # Everything is valid: apply.
        if name != self._solver_name:
            self._switch_solver(name, candidates[name])
        elif name in touched:
            current = self._settings_from(name, self._all_values())
            wanted = self._settings_from(name, values)
            diff = {k: v for k, v in wanted.items() if current[k] != v}
            if diff:
                self.solver.update_settings(**diff)
                self.get_logger().info(f'solver {name} settings changed: '
                                       + ', '.join(f'{k}={v!r}' for k, v in diff.items()))
        if specs is not None:
            self._set_constraints(specs, self._marker_spheres)
            self._constraint_specs = specs
        if 'command_type' in changes or 'command_topic' in changes:
            self._make_command_publisher(values)
        rates = [k for k in ('rate_hz', 'marker_rate_hz', 'status_rate_hz') if k in changes]
        if rates:
            self._make_timers(rates, values)
        if 'velocity_scale' in changes:
            self._max_step = self._velocity_limits * values['velocity_scale'] / self._rate

    def _switch_solver(self, name, solver):
        start = self._q_cmd if self._q_cmd is not None else self._current_q()
        solver.reset(start)
        solver.set_constraints(self._constraint_objects)
        old = self._solver_name
        self.solver, self._solver_name = solver, name
        self.get_logger().info(f'solver switched from {old} to {name}, started at the current '
                               'command (no jump)')

    # ------------------------------------------------------------------ set-up helpers
    def _velocity_limits_of(self, chain):
        limits = np.array(chain.velocity_limits, dtype=float)
        bad = ~np.isfinite(limits) | (limits <= 0.0)
        if np.any(bad):
            fallback = self._param('default_velocity_limit')
            names = [n for n, b in zip(chain.joint_names, bad) if b]
            self.get_logger().warn(f'URDF gives no velocity limit for {", ".join(names)}: '
                                   f'using default_velocity_limit = {fallback:g}')
            limits[bad] = fallback
        return limits

    def _make_tf_buffer(self):
        try:
            import tf2_ros  # lazy: optional; not available from PyPI
        except ImportError:
            self.get_logger().info('tf2_ros not installed: goal frames must be links of the '
                                   'model (or empty = base)')
            return None
        buffer = tf2_ros.Buffer()
        self._tf_listener = tf2_ros.TransformListener(buffer, self)
        return buffer

    def _make_command_publisher(self, values=None):
        values = values or self._all_values()
        msg_type = COMMAND_TYPES[values['command_type']]
        if self._command_pub is not None:
            self.destroy_publisher(self._command_pub)
        self._command_pub = self.create_publisher(msg_type, values['command_topic'], COMMAND_QOS)
        self._command_type = values['command_type']

    def _make_timers(self, which, values=None):
        values = values or self._all_values()
        if 'rate_hz' in which:
            if self._timer is not None:
                self.destroy_timer(self._timer)
            self._rate = values['rate_hz']
            self._max_step = self._velocity_limits * values['velocity_scale'] / self._rate
            self._timer = self.create_timer(1.0 / self._rate, self._on_tick)
        for key, attr, callback in (('marker_rate_hz', '_marker_timer', self._on_marker_tick),
                                    ('status_rate_hz', '_status_timer', self._on_status_tick)):
            if key in which:
                if getattr(self, attr) is not None:
                    self.destroy_timer(getattr(self, attr))
                rate = values[key]
                setattr(self, attr, self.create_timer(1.0 / rate, callback) if rate > 0 else None)

    # ------------------------------------------------------------------ frames
    def _current_q(self):
        """Return the best known configuration: measured, else commanded, else mid-range."""
        if np.all(np.isfinite(self._q_measured)):
            return self._q_measured
        if self._q_cmd is not None:
            return self._q_cmd
        return self.chain.neutral_configuration()

    def _frame_to_base(self, frame):
        """Return the (4, 4) pose of ``frame`` in the base frame [m] (GoalError if unknown)."""
        if not frame or frame == self.chain.base_link:
            return np.eye(4)
        if self.chain.has_link(frame):
            return self.chain.fk(self._current_q(), link=frame)
        if self._tf_buffer is not None:
            return self._tf_lookup(frame)
        raise GoalError(f'unknown frame {frame!r}: expected an empty frame_id (= '
                        f'{self.chain.base_link}) or a link of the model: '
                        f'{", ".join(self.chain.link_names)}')

    def _tf_lookup(self, frame):
        import tf2_ros
        try:
            tf = self._tf_buffer.lookup_transform(self.chain.base_link, frame,
                                                  Time())
        except tf2_ros.TransformException as exc:
            raise GoalError(f'unknown frame {frame!r}: not a link of the model '
                            f'({", ".join(self.chain.link_names)}) and no TF from '
                            f'{self.chain.base_link}: {exc}') from None
        t, r = tf.transform.translation, tf.transform.rotation
        out = np.eye(4)
        out[:3, :3] = quat_to_matrix([r.w, r.x, r.y, r.z])
        out[:3, 3] = [t.x, t.y, t.z]
        return out

    # ------------------------------------------------------------------ goals
    def _on_target_pose(self, msg):
        self._accept_goal('target_pose', msg.header,
                          lambda: pose_to_matrix(msg.pose, 'target_pose.pose'))

    def _on_target_point(self, msg):
        self._accept_goal('target_point', msg.header,
                          lambda: point_to_array(msg.point, 'target_point.point'))

    def _on_goal_pose(self, msg):
        height = self._param('goal_pose_height')
        self._accept_goal('/goal_pose', msg.header,
                          lambda: goal_pose_to_matrix(msg.pose, height, '/goal_pose.pose'))

    def _accept_goal(self, topic, header, convert):
        """Convert a goal to the base frame and queue it; refuse it with one log line.

        Goals with a header stamp older than the newest goal so far are dropped: with several
        goal topics a backlog on one must not override a newer goal on another.
        """
        frame = header.frame_id
        stamp = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
        if 0 < stamp < self._newest_goal_stamp:
            self.get_logger().warn(
                f'{topic} goal stamped {(self._newest_goal_stamp - stamp) * 1e-9:.3f} s before '
                'the newest goal: dropped as out of order', throttle_duration_sec=2.0)
            return
        try:
            value = convert()
            to_base = self._frame_to_base(frame)
            if value.shape == (4, 4):
                display = to_base @ value
                terms = [PoseTarget(display, link=self.chain.tip_link)]
            else:
                display = to_base[:3, :3] @ value + to_base[:3, 3]
                terms = [PositionTarget(display, link=self.chain.tip_link)]
        except SmcIkError as exc:
            self.get_logger().error(f'{topic} refused, keeping the previous goal: {exc}')
            return
        if self._pending_goal is not None:
            self._coalesced += 1
            self.get_logger().warn(
                f'goals arrive faster than max_goal_rate_hz = '
                f'{self._param("max_goal_rate_hz"):g} Hz: coalesced {self._coalesced} so far '
                '(only the latest is used)', throttle_duration_sec=2.0)
        self._newest_goal_stamp = max(self._newest_goal_stamp, stamp)
        self._pending_goal = (terms, display, f'{topic} in {frame or self.chain.base_link!r}')

    def _apply_pending_goal(self, now):
        if self._pending_goal is None:
            return
        if now - self._last_goal_applied < 1.0 / self._param('max_goal_rate_hz'):
            return
        terms, display, description = self._pending_goal
        self._pending_goal = None
        self._last_goal_applied = now
        self._goal_terms, self._goal_display = terms, display
        self._goal_id += 1
        self._goal_time = now
        self._goal_reached = False
        where = np.array2string(np.asarray(display)[..., :3, 3] if display.shape == (4, 4)
                                else display, precision=3)
        self.get_logger().info(f'goal {self._goal_id} from {description}: '
                               f'position {where} m in {self.chain.base_link}',
                               throttle_duration_sec=0.5)

    # ------------------------------------------------------------------ constraints
    def _parse_constraints(self, text):
        link_names = self.chain.link_names
        return constraint_schema.parse_constraints(
            text, joint_names=self.chain.joint_names, link_names=link_names,
            frame_names=None if self._tf_buffer is not None else link_names)

    def _build_constraints(self, specs, marker_spheres):
        objects = constraint_schema.build_constraints(specs, self.chain, self._frame_to_base)
        spheres = []
        for spec, obj in zip(specs, objects):
            if isinstance(spec, constraint_schema.KeepOutSphereSpec):
                spheres.append((obj.center, obj.radius))
        for center, radius in marker_spheres.values():
            objects.append(KeepOutSphere(center, radius))
            spheres.append((center, radius))
        return objects, spheres

    def _set_constraints(self, specs, marker_spheres):
        """Replace the constraint set; GoalError leaves the previous set in place."""
        objects, spheres = self._build_constraints(specs, marker_spheres)
        self.solver.set_constraints(objects)
        self._constraint_objects, self._sphere_display = objects, spheres
        self._marker_spheres = marker_spheres

    def _on_constraints(self, msg):
        try:
            specs = self._parse_constraints(msg.data)
            self._set_constraints(specs, self._marker_spheres)
        except SmcIkError as exc:
            self.get_logger().error(f'constraints refused, keeping the previous '
                                    f'{len(self._constraint_objects)} constraint(s): {exc}')
            return
        self._constraint_specs = specs
        kinds = collections.Counter(spec.type for spec in specs)
        self.get_logger().info('constraints applied: '
                               + (', '.join(f'{v} {k}' for k, v in kinds.items()) or 'none'))

    def _on_keep_out_markers(self, msg):
        try:
            spheres = update_keep_out_spheres(
                {k: (self.chain.base_link, c, r) for k, (c, r) in self._marker_spheres.items()},
                msg, self.chain.base_link)
            in_base = {}
            for key, (frame, center, radius) in spheres.items():
                to_base = self._frame_to_base(frame)
                in_base[key] = (to_base[:3, :3] @ center + to_base[:3, 3], radius)
            self._set_constraints(self._constraint_specs, in_base)
        except SmcIkError as exc:
            self.get_logger().error(f'keep_out_markers refused, keeping the previous '
                                    f'{len(self._marker_spheres)} sphere(s): {exc}')
            return
        self.get_logger().info(f'keep_out_markers: {len(in_base)} keep-out sphere(s) applied')

    # ------------------------------------------------------------------ joint states
    def _on_joint_states(self, msg):
        try:
            q, missing, extra = joint_state_to_positions(msg, self.chain.joint_names,
                                                         self._q_measured)
        except GoalError as exc:
            self.get_logger().warn(f'{exc}; message ignored', throttle_duration_sec=2.0)
            return
        if missing:
            self.get_logger().warn(
                f'joint_states lacks joint(s) {", ".join(missing)} (expected all of '
                f'{", ".join(self.chain.joint_names)}): keeping their last known values',
                throttle_duration_sec=2.0)
        if extra:
            self.get_logger().warn(
                f'joint_states carries joint(s) {", ".join(extra)} not in the chain: ignored',
                throttle_duration_sec=10.0)
        if missing and len(missing) == self.chain.n:
            return
        self._q_measured = q
        self._measured_stamp = time.monotonic()

    def _try_start(self, now):
        """Start commanding from the measured configuration (or mid-range after a timeout)."""
        if np.all(np.isfinite(self._q_measured)):
            q = self.chain.clip(self._q_measured)
            self.get_logger().info('first joint_states received: starting from the measured '
                                   f'configuration {np.array2string(q, precision=3)}')
        else:
            timeout = self._param('joint_states_timeout')
            if timeout <= 0.0 or now - self._start_time < timeout:
                return False
            q = np.where(np.isfinite(self._q_measured), self._q_measured,
                         self.chain.neutral_configuration())
            q = self.chain.clip(q)
            self.get_logger().warn(f'no complete joint_states within joint_states_timeout = '
                                   f'{timeout:g} s: starting from '
                                   f'{np.array2string(q, precision=3)} (mid-range for joints '
                                   'never measured)')
        self._q_cmd = q
        self.solver.reset(q)
        return True

    def _maybe_resync(self, now):
        threshold = self._param('resync_threshold')
        if (threshold <= 0.0 or self._measured_stamp is None
                or now - self._measured_stamp > _MEASURED_FRESH_S
                or not np.all(np.isfinite(self._q_measured))):
            return
        diff = np.abs(self._q_measured - self._q_cmd)
        worst = int(np.argmax(diff))
        if diff[worst] > threshold:
            self.get_logger().warn(
                f'measured and commanded configurations differ by {diff[worst]:.3f} on '
                f'{self.chain.joint_names[worst]} (> resync_threshold = {threshold:g}): '
                'resetting the filter to the measured joint_states')
            self._q_cmd = self.chain.clip(self._q_measured)
            self.solver.reset(self._q_cmd)

    # ------------------------------------------------------------------ control tick
    def _on_tick(self):
        started, cpu_started = time.perf_counter(), time.thread_time()
        now = time.monotonic()
        if self._q_cmd is None and not self._try_start(now):
            return
        self._apply_pending_goal(now)
        self._maybe_resync(now)
        q_prev = self._q_cmd
        q_hat = q_prev
        if self._goal_terms is not None:
            try:
                for _ in range(self._param('iterations_per_tick')):
                    q_hat = self.solver.step(self._goal_terms)
            except SmcIkError as exc:
                self.get_logger().error(f'solver step failed, holding the command: {exc}',
                                        throttle_duration_sec=2.0)
                q_hat = q_prev
        # Velocity limits between ticks, then joint limits; never publish non-finite values.
        q_new = self.chain.clip(q_prev + np.clip(q_hat - q_prev, -self._max_step,
                                                 self._max_step))
        if not np.all(np.isfinite(q_new)):
            self.get_logger().error(f'solver produced a non-finite configuration '
                                    f'{np.array2string(q_hat, precision=3)}: publishing the '
                                    'last good command and resetting the solver there',
                                    throttle_duration_sec=1.0)
            q_new = q_prev
            self.solver.reset(q_prev)
        if self._violates_hard_constraint(q_new, q_prev):
            q_new = q_prev
        self._q_cmd = q_new
        self._publish_command(q_new, (q_new - q_prev) * self._rate)
        self._update_goal_errors(now)
        self._tick_times.append(time.perf_counter() - started)
        self._tick_cpu.append(time.thread_time() - cpu_started)

    def _violates_hard_constraint(self, q_new, q_prev):
        """Return True (and re-anchor the filter at q_prev) when q_new enters a hard constraint.

        The filter's particles respect hard constraints, but its smoothed estimate interpolates
        between them in joint space and can cut through a keep-out sphere; such a command is
        not published: the arm holds and the filter restarts from the held command.
        """
        hard = [c for c in self._constraint_objects if c.hard]
        if not hard:
            return False
        frames = self.chain.frames(np.stack([q_new, q_prev]))
        for constraint in hard:
            new_bad, prev_bad = constraint.violated(frames)
            if new_bad and not prev_bad:
                self.get_logger().warn(
                    f'the next command would enter a hard constraint '
                    f'({type(constraint).__name__}): holding and restarting the filter at the '
                    'current command', throttle_duration_sec=2.0)
                self.solver.reset(q_prev)
                return True
        return False

    def _publish_command(self, q, dq):
        names = self.chain.joint_names
        if self._command_type == 'joint_state':
            msg = make_joint_state(names, q, dq, self.get_clock().now().to_msg())
        elif self._command_type == 'joint_trajectory':
            msg = make_joint_trajectory(names, q, dq, 1.0 / self._rate)
        else:
            msg = make_float64_multi_array(q)
        self._command_pub.publish(msg)

    def _update_goal_errors(self, now):
        if self._goal_terms is None:
            return
        frames = self.chain.frames(self._q_cmd)
        target = self._goal_terms[0]
        pos, ori = (float(v[0]) for v in target.errors(frames))
        self._errors = (pos, ori)
        reached = (pos <= self._param('position_tolerance')
                   and ori <= self._param('orientation_tolerance'))
        if reached and not self._goal_reached:
            self.get_logger().info(f'goal {self._goal_id} reached in {now - self._goal_time:.2f}'
                                   f' s: position error {pos * 1e3:.2f} mm, orientation error '
                                   f'{ori:.4f} rad', throttle_duration_sec=0.5)
        self._goal_reached = reached

    # ------------------------------------------------------------------ markers and status
    def _on_marker_tick(self):
        if self._q_cmd is None:
            return
        started, cpu_started = time.perf_counter(), time.thread_time()
        info = self.solver.last_info
        particles, positions, weights = info.get('particles'), None, None
        if particles is not None and self._param('max_marker_particles') > 0:
            chosen, weights = select_particles(particles, info.get('weights'),
                                               self._param('max_marker_particles'))
            positions = self.chain.link_poses(chosen)[..., :3, 3]
        map_q = info.get('map')
        map_q = self._q_cmd if map_q is None else map_q
        shown = (len(self._sphere_display), self._goal_display is not None)
        clear = shown[0] < self._markers_shown[0] or shown[1] < self._markers_shown[1]
        self._markers_shown = shown
        self._marker_pub.publish(build_marker_array(
            self.chain.base_link, self.get_clock().now().to_msg(),
            particle_positions=positions, weights=weights, segments=self._segments,
            map_positions=self.chain.link_poses(map_q)[:, :3, 3], target=self._goal_display,
            spheres=self._sphere_display, clear=clear))
        self._marker_times.append(time.perf_counter() - started)
        self._marker_cpu.append(time.thread_time() - cpu_started)

    def status(self):
        """Return the status dictionary published on ~/status."""
        def number(value, digits):
            return None if value is None or not math.isfinite(value) else round(value, digits)
        ess = self.solver.last_info.get('ess')
        step_ms = 1e3 * float(np.mean(self._tick_times)) if self._tick_times else None
        marker_ms = 1e3 * float(np.mean(self._marker_times)) if self._marker_times else None
        step_cpu = 1e3 * float(np.mean(self._tick_cpu)) if self._tick_cpu else None
        marker_cpu = 1e3 * float(np.mean(self._marker_cpu)) if self._marker_cpu else None
        return {
            'position_error': number(self._errors[0], 6),
            'orientation_error': number(self._errors[1], 6),
            'ess': number(ess, 2) if ess is not None else None,
            'step_time_ms': number(step_ms, 3),
            'marker_time_ms': number(marker_ms, 3),
            'step_cpu_ms': number(step_cpu, 3),
            'marker_cpu_ms': number(marker_cpu, 3),
            'solver': self._solver_name,
            'goal_id': self._goal_id,
            'reached': bool(self._goal_reached),
            'commanding': self._q_cmd is not None,
        }

    def _on_status_tick(self):
        status = self.status()
        self._status_pub.publish(String(data=json.dumps(status, separators=(',', ':'))))
        if self._goal_terms is not None:
            self.get_logger().info(
                f'goal {status["goal_id"]}: position error {self._errors[0] * 1e3:.2f} mm, '
                f'orientation error {self._errors[1]:.4f} rad, ESS {status["ess"]}, '
                f'{status["step_time_ms"]} ms/tick ({self._solver_name})',
                throttle_duration_sec=5.0)


def main(args=None):
    """Run the node until SIGINT/SIGTERM; exit 1 when the model or a parameter is unusable.

    Set SMCIK_PROFILE=/path/file.prof to profile the node with cProfile (written at exit).
    ``--solver-settings-yaml`` prints the solver settings block of config/arm.yaml and exits.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ['--solver-settings-yaml']:
        print(solver_settings_yaml(), end='')
        return 0
    return run_node(SmcIkNode, 'smcik_node', args, os.environ.get('SMCIK_PROFILE'))


if __name__ == '__main__':
    sys.exit(main())
