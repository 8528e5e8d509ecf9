"""The node's parameters: the table, their declaration, and how a change is checked and applied.

``NODE_PARAMETERS``: name -> (default, description with unit, options). Options: ``range``
(low, high), declared as a FloatingPointRange or IntegerRange by the default's type; ``read_only``
(fixed at start-up: ROS itself refuses a set, with the reason 'Trying to set a read-only
parameter'). ``ARRAY_PARAMETERS`` are declared typed (ROS cannot type an empty list).

A change at run time goes through ``ParameterChanges`` (plain, no ROS): every handler whose
names it touches checks the whole change first and raises SmcIkError with the reason, then all
of them apply it; a refusal applies nothing. ``NodeParameters`` declares the table and the
solvers' settings on a node, keeps their current values (``values``) and answers the node's
on-set callback with the verdict.
"""

import math

import numpy as np
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from rclpy.exceptions import ParameterUninitializedException
from rclpy.parameter import Parameter

from ..collision import DEFAULT_TOLERANCE, MIN_TOLERANCE
from ..control.collision_guard import DEFAULT_CONTACT_TOLERANCE
from ..errors import ParameterError, SmcIkError
from ..rotations import quat_to_matrix
from ..solvers import available_solvers
from .interface import COMMAND_TYPES
from .solver_parameters import solver_parameters

__all__ = ['NODE_PARAMETERS', 'ARRAY_PARAMETERS', 'check_choice', 'tips_of',
           'initial_base_pose', 'ParameterChanges', 'NodeParameters', 'descriptor']

# Arm safety settings are read-only: the invariants of the command stream hold for fixed limits.
_FIXED = {'read_only': True}

NODE_PARAMETERS = {
    'robot_description': ('', 'URDF XML of the robot; empty: use urdf_path, else the '
                          '/robot_description topic', _FIXED),
    'urdf_path': ('', 'URDF (or .xacro, when xacro is installed) file; relative paths are tried '
                  'against the working directory, then the package share directory / '
                  'repository root', _FIXED),
    'base_link': ('base_link', 'base link of the chain: frame of commands, goals and markers',
                  _FIXED),
    'tip_link': ('tool0', 'tip link the goals apply to (tip_links, when not empty, wins)',
                 _FIXED),
    'floating_base': (False, "put base_link's 6-DOF pose in world_frame into the solver's "
                      'state (seed 000 6.3): fitted to the contact constraints given the '
                      'commanded joints, held without contacts, published on ~/base_pose '
                      'with each command; the commands stay the URDF joints', _FIXED),
    'world_frame': ('world', 'frame of the floating base (gravity along its -z): goals, '
                    'constraints and markers live in it (an empty frame_id means it)',
                    _FIXED),
    'publish_base_tf': (True, 'with floating_base: broadcast the TF world_frame -> base_link '
                        'of each command when tf2_ros is installed (false: a state '
                        'estimator owns that TF)', _FIXED),
    'robot_description_timeout': (10.0, 'how long to wait for /robot_description at start-up '
                                  'when no URDF parameter is set [s]',
                                  {'range': (0.0, 3600.0), **_FIXED}),
    'rate_hz': (100.0, 'control rate: solver ticks and published commands [Hz]',
                {'range': (1.0, 1000.0)}),
    'iterations_per_tick': (1, 'solver steps per control tick', {'range': (1, 100)}),
    'rest_step_interval': (100, 'while the solver is settled on an unchanged goal and scene and '
                           'the command rests at its answer, it steps only every this many '
                           'of its steps (solver_rate_hz periods: 1 s at 100 Hz whatever '
                           'rate_hz; 1: at solver_rate_hz)', {'range': (1, 1000)}),
    'solver_rate_hz': (100.0, 'while one goal is followed the solver steps at most this often; '
                       'the control ticks in between move towards its last answer at its '
                       'velocity (rate_hz above it: every ceil(rate_hz / solver_rate_hz)-th '
                       'tick steps) [Hz]; 0: on every tick', {'range': (0.0, 1000.0)}),
    'solver_thread': (True, 'run the solver step in a worker thread beside the control tick: '
                      'a tick waits for the step it started at most 0.3 of a period (none '
                      'when rate_hz > solver_rate_hz), then carries the last answer on (as '
                      'between solver steps) until the step is done; false: every step runs '
                      'inside its tick', _FIXED),
    'solver': ('smc', 'solver name; one of ' + ', '.join(available_solvers()), {}),
    'command_type': ('joint_state', 'command message: joint_state (sensor_msgs/JointState), '
                     'joint_trajectory (trajectory_msgs/JointTrajectory, one point) or '
                     'float64_multi_array (std_msgs/Float64MultiArray)', {}),
    'command_topic': ('joint_commands', 'topic the commands are published on', {}),
    'velocity_scale': (0.5, 'share of the velocity limits (URDF, or joint_limits_path when '
                       'lower) the commands may use', {'range': (0.01, 1.0), **_FIXED}),
    'default_velocity_limit': (1.0, 'velocity limit for joints whose URDF gives none '
                               '[rad/s or m/s]', {'range': (0.001, 100.0), **_FIXED}),
    'max_acceleration': (3.0, 'acceleration limit of every joint [rad/s^2 or m/s^2] '
                         '(joint_limits_path overrides it per joint)',
                         {'range': (0.001, 1000.0), **_FIXED}),
    'joint_limits_path': ('', "MoveIt joint_limits.yaml with per-joint max_velocity (can only "
                          'lower the URDF limit), max_acceleration, min/max_position; empty: '
                          'none', _FIXED),
    'max_lead': (0.15, 'the command is never further than this from the latest measured '
                 'joint_states [rad or m] (a braking constraint: the command slows down '
                 'instead)', {'range': (0.001, 10.0), **_FIXED}),
    'resync_threshold': (0.2, 'restart from the measured configuration when it differs from '
                         'the command by more than this on a joint [rad or m]; must be > '
                         'max_lead', {'range': (0.001, 10.0), **_FIXED}),
    'joint_states_timeout': (0.5, 'joint_states older than this (header stamp, else arrival, '
                             'on the node clock) stop the arm: decelerate and hold [s]',
                             {'range': (0.01, 60.0), **_FIXED}),
    'start_without_joint_states': (False, 'SIMULATION ONLY: command from an assumed start when '
                                   'no joint_states arrived within joint_states_timeout',
                                   _FIXED),
    'goal_timeout': (0.0, 'goals whose header stamp is older than this on the node clock are '
                     'dropped as stale [s]; 0 = off', {'range': (0.0, 3600.0)}),
    'marker_rate_hz': (10.0, 'RViz marker rate on ~/particles and ~/collision [Hz]; 0 = off',
                       {'range': (0.0, 100.0)}),
    'max_marker_particles': (30, 'most particles drawn (highest weights first)',
                             {'range': (0, 10000)}),
    'status_rate_hz': (2.0, 'rate of /diagnostics and its JSON mirror ~/status [Hz]; 0 = off',
                       {'range': (0.0, 100.0)}),
    'goal_pose_height': (0.3, 'height of /goal_pose (RViz 2D Goal Pose) goals above the '
                         "click's frame origin [m]", {'range': (-10.0, 10.0)}),
    'position_tolerance': (0.001, 'goal reached when the commanded tip is this close [m]',
                           {'range': (1e-6, 1.0)}),
    'orientation_tolerance': (0.01, 'goal reached when the commanded tip orientation is '
                              'this close [rad]', {'range': (1e-6, math.pi)}),
    'constraints': ('[]', 'constraint set as YAML text (schema: docs/node.md); replaced by '
                    'messages on the constraints topic', {}),
    'use_tf': (True, 'look up goal frames that the URDF does not make static with tf2 when '
               'tf2_ros is installed', _FIXED),
    # Collision avoidance (docs/node.md, "Collision avoidance"; docs/collision.md).
    'self_collision': (True, 'check the robot against itself (sphere covers of its URDF '
                       '<collision> geometry, the pairs its SRDF leaves enabled); ignored, with '
                       'one info line, when the URDF has no collision geometry', {}),
    'srdf_path': ('', 'SRDF of the robot (MoveIt <disable_collisions> pairs); empty: the '
                  'robot_description_semantic parameter, else the /robot_description_semantic '
                  'topic, else <urdf dir>/<urdf stem>.srdf or a MoveIt config beside the URDF '
                  'package', {}),
    'robot_description_semantic': ('', 'SRDF XML text of the robot; wins over srdf_path; '
                                   'empty: srdf_path', {}),
    'collision_padding': (0.002, 'clearance kept between the robot and itself or obstacles '
                          'beyond the conservative covers; also the sub-step bound of the '
                          'motion check [m]; fixed at start-up (the pairs and their tables '
                          'are built for it)', {'range': (0.0, 0.1), **_FIXED}),
    'collision_cover_tolerance': (DEFAULT_TOLERANCE, 'largest excess of the sphere covers of '
                                  'the collision meshes beyond the real geometry [m]; smaller: '
                                  'goals nearer obstacles are reachable, but more spheres (a '
                                  'slower tick) and a slower first start (covers are cached '
                                  'on disk); fixed at start-up',
                                  {'range': (MIN_TOLERANCE, 0.1), **_FIXED}),
    'collision_contact_tolerance': (DEFAULT_CONTACT_TOLERANCE, 'finest cover tolerance of the '
                                    'links that rest in contact at the first command, '
                                    'computed again in the background (their overlap is '
                                    "often the covers', not the meshes'; 60 % of "
                                    'collision_cover_tolerance is tried first) [m]; 0 = off, '
                                    'else >= '
                                    f'{MIN_TOLERANCE:g}; fixed at start-up',
                                    {'range': (0.0, 0.1), **_FIXED}),
    'collision_cover_wait': (40.0, 'a first start with a robot computes the covers of its '
                             'meshes (seconds to minutes; cached on disk): wait this long for '
                             'them, then start with coarse covers (their bounding boxes: the '
                             'guard refuses more, never less) and swap the fine ones in when '
                             'computed in the background [s]; fixed at start-up',
                             {'range': (0.0, 3600.0), **_FIXED}),
    'collision_clearance': (0.01, 'soft margin the solvers keep beyond the padding [m]; '
                            '0 = off', {'range': (0.0, 1.0)}),
    'collision_fallback_candidates': (8, 'solver candidates (the MAP and the heaviest '
                                      'particles) tried when the motion towards the estimate '
                                      'would collide, before braking; 0 = brake at once',
                                      {'range': (0, 100)}),
    'collision_detour': (True, 'when a still goal is blocked at the collision margin without '
                         'progress (or not reached after 3 s), plan a collision-free '
                         'joint-space path round the obstacle and follow it within the limits '
                         '(control/detour.py); false = stop at the margin', {}),
    'collision_cover_markers': (False, "draw the robot's cover spheres on ~/collision (the "
                                'obstacles and the closest pair are always drawn)', {}),
    'pointcloud_topic': ('', 'sensor_msgs/PointCloud2 topic whose points become obstacles '
                         "(voxel spheres; the robot's own points removed); empty = off", {}),
    'pointcloud_voxel_size': (0.03, 'edge of the point-cloud voxels, one obstacle sphere each '
                              '[m]', {'range': (0.005, 1.0)}),
    'pointcloud_rate_hz': (5.0, 'point clouds are converted at most this often [Hz]',
                           {'range': (0.1, 100.0)}),
    # The filter's alternatives (control/alternatives.py, docs/node.md "Alternatives").
    'max_alternatives': (5, 'most solution branches listed on ~/alternatives, in ~/status and '
                         'drawn as ghost arms in ~/particles (SMC only); 0 = off',
                         {'range': (0, 20)}),
    'alternatives_rate_hz': (5.0, 'rate the alternatives are computed at [Hz] (about 2-7 ms '
                             'each); ~/alternatives is published when they change and at '
                             'least every second; 0 = off', {'range': (0.0, 50.0)}),
}

# name: (ROS type, default, description, read-only)
ARRAY_PARAMETERS = {
    'tip_links': (Parameter.Type.STRING_ARRAY, [],
                  'links the goals apply to, one goal slot each (targets/<tip>/...); the '
                  'first is the tip of target_pose, target_point, /goal_pose; empty: '
                  'tip_link', True),
    'initial_base_pose': (Parameter.Type.DOUBLE_ARRAY, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
                          'with floating_base: the base pose in world_frame at start, '
                          '[x, y, z, qx, qy, qz, qw] [m]', True),
    'package_paths': (Parameter.Type.STRING_ARRAY, [],
                      'directories holding ROS packages, for package://NAME/... mesh URIs '
                      '(DIR/NAME/..., after the ament index); empty: the ament index and the '
                      "URDF file's own directory tree; fixed at start-up (the covers of the "
                      'meshes are built then)', True),
}


def check_choice(name, value, choices):
    """Raise ParameterError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ParameterError(f'{name} {value!r} is not one of {", ".join(choices)}')


def tips_of(values):
    """Return the tip links of the parameter ``values``: a non-empty ``tip_links`` wins over
    ``tip_link`` (ParameterError for an empty or repeated name)."""
    tips = [str(t) for t in values.get('tip_links') or ()] or [values['tip_link']]
    bad = [t for t in tips if not t.strip()]
    repeated = sorted({t for t in tips if tips.count(t) > 1})
    if bad or repeated:
        raise ParameterError(f'tip_links must name distinct links; got {tips!r}')
    return tips


def initial_base_pose(values):
    """Return the (4, 4) pose of ``initial_base_pose`` [x, y, z, qx, qy, qz, qw]
    (ParameterError for another length, a non-finite value or a zero quaternion)."""
    raw = [float(v) for v in values['initial_base_pose']]
    norm = math.sqrt(sum(v * v for v in raw[3:])) if len(raw) == 7 else 0.0
    if len(raw) != 7 or not all(math.isfinite(v) for v in raw) or not 1e-3 < norm < 1e3:
        raise ParameterError('initial_base_pose must be [x, y, z, qx, qy, qz, qw] (finite, a '
                             f'non-zero quaternion); got {raw}')
    pose = np.eye(4)
    pose[:3, :3] = quat_to_matrix([raw[6] / norm] + [v / norm for v in raw[3:6]])
    pose[:3, 3] = raw[:3]
    return pose


def descriptor(default, description, options):
    """Return the ParameterDescriptor of a NODE_PARAMETERS entry."""
    extra = {'read_only': bool(options.get('read_only', False))}
    if 'range' in options:
        low, high = options['range']
        if isinstance(default, float):
            extra['floating_point_range'] = [FloatingPointRange(
                from_value=float(low), to_value=float(high), step=0.0)]
        else:
            extra['integer_range'] = [IntegerRange(from_value=int(low), to_value=int(high),
                                                   step=1)]
    return ParameterDescriptor(description=description, **extra)


class ParameterChanges:
    """Route a parameter change to the handlers that own its names: all check, then all apply.

    A handler is (names, check, apply): ``check(changes, values)`` raises SmcIkError to refuse
    (nothing applied), ``apply(changes, values)`` acts; ``changes`` {name: new value},
    ``values`` every parameter's value after the change. Handlers run in the order added.
    """

    def __init__(self):
        self._handlers = []

    def add(self, names, check=None, apply=None):
        """Register a handler for ``names`` (a set of names, or a callable name -> bool)."""
        owns = names if callable(names) else frozenset(names).__contains__
        self._handlers.append((owns, check, apply))

    def touched(self, changes):
        """Return the handlers (owns, check, apply) that own a name of ``changes``."""
        return [h for h in self._handlers if any(h[0](name) for name in changes)]

    def __call__(self, changes, values):
        """Check then apply ``changes``; SmcIkError (with the reason) when one refuses."""
        handlers = self.touched(changes)
        for _, check, _ in handlers:
            if check is not None:
                check(changes, values)
        for _, _, apply in handlers:
            if apply is not None:
                apply(changes, values)


class NodeParameters:
    """Declare the node's parameters and the solvers' ``<solver>.<field>`` settings; keep their
    values; answer the on-set callback (``ParameterChanges``, after ``before()``)."""

    def __init__(self, node, report):
        self._node = node
        self._report = report
        self.changes = ParameterChanges()
        self.setting_fields = {}          # solver name -> [declared setting fields]
        for name, (default, description, options) in NODE_PARAMETERS.items():
            node.declare_parameter(name, default, descriptor(default, description, options))
        for name, (ptype, default, description, read_only) in ARRAY_PARAMETERS.items():
            self._declare_typed(name, ptype, default, ParameterDescriptor(
                description=description))
            if read_only:   # after the default is set: ROS refuses to set it from then on
                node.set_descriptor(name, ParameterDescriptor(
                    description=description, read_only=True, type=ptype.value))
        declared, skipped = solver_parameters()
        for name, default in skipped:
            report('warn', f'solver setting {name} (default {default!r}) has no ROS parameter '
                   'type; it stays at its default')
        for item in declared:
            described = ParameterDescriptor(description=item.description)
            if item.kind is tuple:
                self._declare_typed(item.name, Parameter.Type.DOUBLE_ARRAY,
                                    [float(v) for v in item.default], described)
            else:
                node.declare_parameter(item.name, item.default, described)
            self.setting_fields.setdefault(item.solver, []).append(item.field)
        self.values = {p.name: p.value for p in node.get_parameters(self.names())}
        check_choice('command_type', self.values['command_type'], COMMAND_TYPES)

    def _declare_typed(self, name, ptype, default, described):
        """Declare ``name`` typed, then set ``default`` unless it was given (an empty list has
        no ROS type of its own)."""
        self._node.declare_parameter(name, ptype, described)
        try:
            self._node.get_parameter(name)
        except ParameterUninitializedException:
            self._node.set_parameters([Parameter(name, ptype, list(default))])

    def names(self):
        """Return the names of the node's own parameters (not use_sim_time)."""
        return list(NODE_PARAMETERS) + list(ARRAY_PARAMETERS) + [
            f'{solver}.{field}' for solver, fields in self.setting_fields.items()
            for field in fields]

    def start(self, before=lambda: None):
        """Answer set requests from now on; ``before()`` runs before a change is applied."""
        self._before = before
        self._node.add_on_set_parameters_callback(self._on_set)

    def _on_set(self, params):
        changes = {p.name: p.value for p in params}
        values = dict(self.values)
        values.update(changes)
        self._before()
        try:
            self.changes(changes, values)
        except SmcIkError as exc:
            self._report('warn', f'parameter change refused: {exc}')
            return SetParametersResult(successful=False, reason=str(exc))
        except Exception as exc:   # never die: a bug here must not take the node down
            self._report('error', f'parameter change failed ({type(exc).__name__}: {exc}); '
                         'refused')
            return SetParametersResult(successful=False, reason=f'{type(exc).__name__}: {exc}')
        self.values.update((k, v) for k, v in changes.items() if k in self.values)
        return SetParametersResult(successful=True)
