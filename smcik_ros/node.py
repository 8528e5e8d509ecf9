"""smcik_node: online inverse kinematics as a ROS 2 node.

A thin adapter: it declares the parameters, converts messages to numpy and the node clock to
seconds, and wires topics and timers to the ROS-free control wing (smcik_ros/control): goals go
into a goal inbox, joint_states into the arm state machine, and a timer at ``rate_hz`` asks the
control loop for the command of the tick (solver steps, validators, command shaping within the
position, velocity and acceleration limits) and publishes it (JointState, JointTrajectory or
Float64MultiArray) with the header stamp the limits were applied for. Collision avoidance
(control/collision_guard.py): the robot's sphere covers from its URDF <collision> geometry,
self-collision pairs from its SRDF, obstacles from the ``obstacles`` topic (and its alias
``keep_out_markers``), the constraint YAML and a point cloud; every solver respects them and
every command's motion is checked before it is published. Markers show the particles, the MAP
chain, the target and the ghost arms of the filter's alternatives (``~/particles``; listed on
``~/alternatives``, selected on ``~/select_alternative``), the obstacles and the closest pair
(``~/collision``); ``~/status`` carries a compact JSON summary. ``target_pose_with_covariance``
takes a goal with its task covariance. See docs/node.md for every topic and parameter
("Driving a real arm" for the guarantees of the command stream, "Collision avoidance").

Run: ``ros2 run smcik_ros smcik_node --ros-args --params-file config/arm.yaml`` or
``python -m smcik_ros.node --ros-args --params-file config/arm.yaml``.
"""

import os

# The solvers work on tiny matrices: BLAS threads only add contention (measured 10-30x slower
# SVDs on a loaded 2-core host). Must be set before numpy is imported; an explicit setting wins.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
os.environ.setdefault('OMP_NUM_THREADS', '1')

import collections
import gc
import importlib
import json
import logging
import math
import queue
import re
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree

from geometry_msgs.msg import PointStamped, PoseStamped, PoseWithCovarianceStamped
import numpy as np
from rclpy.duration import Duration
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.time import Time
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
from sensor_msgs.msg import JointState, PointCloud2
from std_msgs.msg import String, UInt32
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from .collision import DEFAULT_TOLERANCE, MIN_TOLERANCE, parse_srdf
from .control import (ArmSettings, ControlLoop, FrameResolver, GoalInbox,
                      HardConstraintValidator, Reporter, limits_for_chain,
                      read_joint_limits_yaml)
from .control.alternatives import AlternativesBook
from .control.collision_guard import (DEFAULT_CONTACT_TOLERANCE, CollisionGuard,
                                      CollisionSettings, choose_srdf)
from .control.side_work import SideWork
from .control.step_worker import SWITCH_INTERVAL
from .control.tick_timing import TickTiming
from .control.detour import Detour, DetourSettings
from .control.constraints import ConstraintSet
from .errors import GoalError, ModelError, ParameterError, SmcIkError
from .model import Chain
from .markers import (alternative_markers, build_marker_array, collision_markers,
                      link_segments, particle_marker, particle_vertices, select_particles)
from .robot_description import load_robot_description, read_urdf_file, resolve_path
from .ros_conversions import (JointStateReader, JointStateWriter, Restamper, VertexSplicer,
                              goal_pose_to_matrix, make_alternatives_trajectory,
                              make_float64_multi_array, make_joint_trajectory,
                              nanoseconds_to_stamp, obstacle_updates, point_to_array,
                              pointcloud2_to_xyz, pose_to_matrix, pose_with_covariance_to_goal,
                              stamp_to_nanoseconds)
from .ros_interface import (COMMAND_QOS, COMMAND_TYPES, DESCRIPTION_QOS, INPUT_QOS,
                            JOINT_STATES_QOS, MARKER_QOS)
from .ros_runner import run_node, stop_requested
from .rotations import quat_to_matrix
from .solver_parameters import (make_solver_from, settings_changes, solver_parameters,
                                solver_settings_yaml)
from .solvers import available_solvers
from .solvers.base import StateKey
from .warmup import warm_up

__all__ = ['SmcIkNode', 'main', 'NODE_PARAMETERS', 'ARRAY_PARAMETERS', 'COMMAND_TYPES',
           'load_robot_description', 'resolve_path', 'solver_settings_yaml']


def _float_range(low, high, step=0.0):
    return [FloatingPointRange(from_value=float(low), to_value=float(high), step=float(step))]


def _int_range(low, high, step=1):
    return [IntegerRange(from_value=int(low), to_value=int(high), step=int(step))]


# Arm safety settings are read-only: the invariants of the command stream hold for fixed limits.
_FIXED = {'read_only': True}

# name: (default, description with unit, extra descriptor fields)
NODE_PARAMETERS = {
    'robot_description': ('', 'URDF XML of the robot; empty: use urdf_path, else the '
                          '/robot_description topic', {'read_only': True}),
    'urdf_path': ('', 'URDF (or .xacro, when xacro is installed) file; relative paths are tried '
                  'against the working directory, then the package share directory / '
                  'repository root', {'read_only': True}),
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
    'rest_step_interval': (100, 'while the solver is settled on an unchanged goal and scene and '
                           'the command rests at its answer, it steps only every this many '
                           'of its steps (solver_rate_hz periods: 1 s at 100 Hz whatever '
                           'rate_hz; 1: at solver_rate_hz)',
                           {'integer_range': _int_range(1, 1000)}),
    'solver_rate_hz': (100.0, 'while one goal is followed the solver steps at most this often; '
                       'the control ticks in between move towards its last answer at its '
                       'velocity (rate_hz above it: every ceil(rate_hz / solver_rate_hz)-th '
                       'tick steps) [Hz]; 0: on every tick',
                       {'floating_point_range': _float_range(0.0, 1000.0)}),
    'solver_thread': (True, 'run the solver step in a worker thread beside the control tick: '
                      'a tick waits for the step it started at most 0.3 of a period (none '
                      'when rate_hz > solver_rate_hz), then '
                      'carries the last answer on (as between solver steps) until the step '
                      'is done; false: every step runs inside its tick', {'read_only': True}),
    'thread_priority': (0, 'Linux SCHED_FIFO priority (1-99) of the thread that runs the '
                        "control tick and of the executor's own threads, as ros2_control's "
                        'controller_manager thread_priority; needs CAP_SYS_NICE or an rtprio '
                        'limit (else a warning, and normal priority); the solver thread and '
                        'the other threads keep the normal policy; 0 = normal scheduling',
                        {'integer_range': _int_range(0, 99), **_FIXED}),
    'solver': ('smc', 'solver name; one of ' + ', '.join(available_solvers()), {}),
    'command_type': ('joint_state', 'command message: joint_state (sensor_msgs/JointState), '
                     'joint_trajectory (trajectory_msgs/JointTrajectory, one point) or '
                     'float64_multi_array (std_msgs/Float64MultiArray)', {}),
    'command_topic': ('joint_commands', 'topic the commands are published on', {}),
    'velocity_scale': (0.5, 'share of the velocity limits (URDF, or joint_limits_path when '
                       'lower) the commands may use',
                       {'floating_point_range': _float_range(0.01, 1.0), **_FIXED}),
    'default_velocity_limit': (1.0, 'velocity limit for joints whose URDF gives none '
                               '[rad/s or m/s]',
                               {'floating_point_range': _float_range(0.001, 100.0), **_FIXED}),
    'max_acceleration': (3.0, 'acceleration limit of every joint [rad/s^2 or m/s^2] '
                         '(joint_limits_path overrides it per joint)',
                         {'floating_point_range': _float_range(0.001, 1000.0), **_FIXED}),
    'joint_limits_path': ('', "MoveIt joint_limits.yaml with per-joint max_velocity (can only "
                          'lower the URDF limit), max_acceleration, min/max_position; empty: '
                          'none', _FIXED),
    'max_lead': (0.15, 'the command is never further than this from the latest measured '
                 'joint_states [rad or m] (a braking constraint: the command slows down '
                 'instead)', {'floating_point_range': _float_range(0.001, 10.0), **_FIXED}),
    'resync_threshold': (0.2, 'restart from the measured configuration when it differs from '
                         'the command by more than this on a joint [rad or m]; must be > '
                         'max_lead', {'floating_point_range': _float_range(0.001, 10.0),
                                      **_FIXED}),
    'joint_states_timeout': (0.5, 'joint_states older than this (header stamp, else arrival, '
                             'on the node clock) stop the arm: decelerate and hold [s]',
                             {'floating_point_range': _float_range(0.01, 60.0), **_FIXED}),
    'start_without_joint_states': (False, 'SIMULATION ONLY: command from an assumed start when '
                                   'no joint_states arrived within joint_states_timeout',
                                   _FIXED),
    'goal_timeout': (0.0, 'goals whose header stamp is older than this on the node clock are '
                     'dropped as stale [s]; 0 = off',
                     {'floating_point_range': _float_range(0.0, 3600.0)}),
    'marker_rate_hz': (10.0, 'RViz marker rate on ~/particles [Hz]; 0 = off',
                       {'floating_point_range': _float_range(0.0, 100.0)}),
    'max_marker_particles': (30, 'most particles drawn (highest weights first)',
                             {'integer_range': _int_range(0, 10000)}),
    'status_rate_hz': (2.0, 'rate of the ~/status JSON [Hz]; 0 = off',
                       {'floating_point_range': _float_range(0.0, 100.0)}),
    'goal_pose_height': (0.3, 'height of /goal_pose (RViz 2D Goal Pose) goals above the '
                         "click's frame origin [m]",
                         {'floating_point_range': _float_range(-10.0, 10.0)}),
    'position_tolerance': (0.001, 'goal reached when the commanded tip is this close [m]',
                           {'floating_point_range': _float_range(1e-6, 1.0)}),
    'orientation_tolerance': (0.01, 'goal reached when the commanded tip orientation is '
                              'this close [rad]',
                              {'floating_point_range': _float_range(1e-6, math.pi)}),
    'constraints': ('[]', 'constraint set as YAML text (schema: docs/node.md); replaced by '
                    'messages on the constraints topic', {}),
    'use_tf': (True, 'look up goal frames that the URDF does not make static with tf2 when '
               'tf2_ros is installed', {'read_only': True}),
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
                          'motion check [m]; fixed at start-up',
                          {'floating_point_range': _float_range(0.0, 0.1)}),
    'collision_cover_tolerance': (DEFAULT_TOLERANCE, 'largest excess of the sphere covers of '
                                  'the collision meshes beyond the real geometry [m]; smaller: '
                                  'goals nearer obstacles are reachable, but more spheres (a '
                                  'slower tick) and a slower first start (covers are cached '
                                  'on disk); fixed at start-up',
                                  {'floating_point_range': _float_range(MIN_TOLERANCE, 0.1)}),
    'collision_contact_tolerance': (DEFAULT_CONTACT_TOLERANCE, 'cover tolerance of the links '
                                    'that rest in contact at the first command, computed '
                                    'again in the background (their overlap is often the '
                                    "covers', not the meshes') [m]; 0 = off, else >= "
                                    f'{MIN_TOLERANCE:g}; fixed at start-up',
                                    {'floating_point_range': _float_range(0.0, 0.1)}),
    'collision_clearance': (0.01, 'soft margin the solvers keep beyond the padding [m]; '
                            '0 = off', {'floating_point_range': _float_range(0.0, 1.0)}),
    'collision_fallback_candidates': (8, 'solver candidates (the MAP and the heaviest '
                                      'particles) tried when the motion towards the estimate '
                                      'would collide, before braking; 0 = brake at once',
                                      {'integer_range': _int_range(0, 100)}),
    'collision_detour': (True, 'when a still goal is blocked at the collision margin without '
                         'progress (or not reached after 3 s), plan a collision-free '
                         'joint-space path round the obstacle and follow it within the limits '
                         '(control/detour.py); false = stop at the margin', {}),
    'collision_cover_markers': (False, "draw the robot's cover spheres on ~/collision (the "
                                'obstacles and the closest pair are always drawn)', {}),
    'pointcloud_topic': ('', 'sensor_msgs/PointCloud2 topic whose points become obstacles '
                         "(voxel spheres; the robot's own points removed); empty = off", {}),
    'pointcloud_voxel_size': (0.03, 'edge of the point-cloud voxels, one obstacle sphere each '
                              '[m]', {'floating_point_range': _float_range(0.005, 1.0)}),
    'pointcloud_rate_hz': (5.0, 'point clouds are converted at most this often [Hz]',
                           {'floating_point_range': _float_range(0.1, 100.0)}),
}
# The filter's alternatives (control/alternatives.py, docs/node.md "Alternatives").
NODE_PARAMETERS.update({
    'max_alternatives': (5, 'most solution branches listed on ~/alternatives, in ~/status and '
                         'drawn as ghost arms in ~/particles (SMC only); 0 = off',
                         {'integer_range': _int_range(0, 20)}),
    'alternatives_rate_hz': (5.0, 'rate the alternatives are computed at [Hz] (about 2-7 ms '
                             'each); ~/alternatives is published when they change and at '
                             'least every second; 0 = off',
                             {'floating_point_range': _float_range(0.0, 50.0)}),
})

# Array parameters, declared typed (ROS cannot type an empty list from YAML or a default):
# name: (type, default, description).
ARRAY_PARAMETERS = {
    'package_paths': (Parameter.Type.STRING_ARRAY, [],
                      'directories holding ROS packages, for package://NAME/... mesh URIs '
                      '(DIR/NAME/..., after the ament index); empty: the ament index and the '
                      "URDF file's own directory tree; fixed at start-up"),
}

# Changing these at runtime would need the collision model or its pair tables rebuilt.
_START_UP_ONLY = {
    'package_paths': 'package_paths is fixed at start-up (the covers of the meshes are built '
                     'then); restart the node to change it',
    'collision_cover_tolerance': 'collision_cover_tolerance is fixed at start-up (the covers '
                                 'are built then); restart the node to change it',
    'collision_contact_tolerance': 'collision_contact_tolerance is fixed at start-up (the '
                                   'finer covers are computed at the first command); restart '
                                   'the node to change it',
    'collision_padding': 'collision_padding is fixed at start-up (the self-collision pairs, '
                         "their tables and the motion check's sub-step bound depend on it); "
                         'restart the node to change it',
}


# The cloud conversion's KD-tree (CollisionConstraint.points_on_robot). Importing it takes
# 0.3-0.6 s with the GIL held; in the executor's thread, the first cloud would stop the
# command stream that long, so it is imported in a thread of its own when the subscription
# is made, and clouds that arrive before it is done are skipped (logged).
CLOUD_LIBRARY = 'scipy.spatial'


def _import_beside(module):
    """Return an Event set once ``module`` is imported by a daemon thread (at once if it
    already is). An import error is left to the first real use to report."""
    done = threading.Event()
    if module in sys.modules:
        done.set()
        return done

    def run():
        try:
            importlib.import_module(module)
        except Exception:       # noqa: BLE001 - reported where the module is used
            pass
        finally:
            done.set()
    threading.Thread(target=run, name=f'import {module}', daemon=True).start()
    return done


class _LogBridge(logging.Handler):
    """Route the pure core's Python log records ('smcik_ros.collision': SRDF entries naming
    unknown links, links left out of the model) to the node's logger, once each."""

    LOGGER = 'smcik_ros.collision'

    def __init__(self, emit):
        super().__init__(logging.INFO)
        self._emit = emit
        self._logger = logging.getLogger(self.LOGGER)
        self._logger.addHandler(self)
        if self._logger.level == logging.NOTSET or self._logger.level > logging.INFO:
            self._logger.setLevel(logging.INFO)

    def emit(self, record):
        level = ('error' if record.levelno >= logging.ERROR else
                 'warn' if record.levelno >= logging.WARNING else 'info')
        try:
            self._emit(level, record.getMessage())
        except Exception:   # a destroyed node: nothing to log to
            pass

    def close(self):
        self._logger.removeHandler(self)
        super().close()


class _LogThread:
    """The node's log calls in a thread of their own, in order.

    An rclpy log call costs 1-10 ms in this node (rclpy finds its caller's source line
    through ``inspect``, which walks ``sys.modules`` and stats files): at ``rate_hz`` 500 a
    tick that logs (a new goal, the status line every 5 s) lost control periods to it.
    ``close()`` writes what is queued, then ends the thread.
    """

    def __init__(self, write):
        self._write = write
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name='smcik_log', daemon=True)
        self._thread.start()

    def put(self, level, text):
        self._queue.put((level, text))

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._write(*item)
            except Exception:   # a destroyed node: nothing to log to
                pass

    def close(self, timeout=5.0):
        self._queue.put(None)
        self._thread.join(timeout)


class SmcIkNode(Node):
    """Online IK node: goals + constraints + joint_states in, joint commands out."""

    def __init__(self, **kwargs):
        super().__init__('smcik_node', **kwargs)
        self._ros_clock = self.get_clock()
        self._override, self._override_checked = False, 0    # /clock overrides ROS time?
        self._epoch_ns = self._ros_clock.now().nanoseconds
        self._log_thread = None          # started once the node runs (start-up logs directly)
        self._reporter = Reporter(self._emit)
        self._setting_fields = {}  # solver name -> [declared setting fields]
        self._log_bridge = _LogBridge(self._emit)   # smcik_ros.collision warnings -> ROS log
        self._declare_parameters()
        self._semantic_text = None       # SRDF XML from /robot_description_semantic
        self._semantic_sub = None
        # Subscribe first: discovery of a /robot_description_semantic publisher (waited for
        # below, up to 0.5 s when none is known) runs while the URDF is read and parsed and
        # the kernels load.
        self._subscribe_semantic()
        self.urdf_xml, source = load_robot_description(
            self, self.get_parameter('robot_description_timeout').value,
            keep_waiting=lambda: not stop_requested())
        self.chain = Chain.from_urdf(self.urdf_xml, base_link=self._param('base_link'),
                                     tip_link=self._param('tip_link'))
        self.get_logger().info(
            f'model from {source}: {self.chain.robot_name} {self.chain.base_link} -> '
            f'{self.chain.tip_link}, joints {", ".join(self.chain.joint_names)}')
        # Compile the kernels (first run) or load them from the on-disk cache now, before
        # any solver or timer exists: no tick pays for it, and a cold cache says so.
        warm_up(self.chain, self.get_logger().info)
        self._segments = link_segments(self.urdf_xml, self.chain.link_names)
        self._tf_buffer = self._make_tf_buffer() if self._param('use_tf') else None
        self._urdf_file = self._urdf_file_of(source)
        self._guard = self._make_collision_guard()

        # The command stream: limits, arm state machine, goal inbox, control loop (fail fast).
        limits = self._make_limits()
        arm_settings = ArmSettings(
            joint_states_timeout=self._param('joint_states_timeout'),
            resync_threshold=self._param('resync_threshold'),
            max_lead=self._param('max_lead'),
            start_without_joint_states=self._param('start_without_joint_states'))
        self._resolver = FrameResolver(self.chain)
        inbox = GoalInbox(self._resolver, self.chain.tip_link, self._param('goal_timeout'),
                          lookup=self._tf_lookup if self._tf_buffer is not None else None)
        self._solver_name = self._param('solver')
        solver = self._make_solver(self._solver_name, self._all_values())
        # Hard constraints other than the collision guard's own (keep-out volumes the
        # collision model has no geometry for) keep their validator.
        self._validator = HardConstraintValidator(
            self.chain, skip=lambda c: c is self._guard.constraint)
        every = step_interval(self._param('rate_hz'), self._param('solver_rate_hz'))
        self.loop = ControlLoop(
            self.chain, solver, limits, arm_settings, inbox,
            iterations_per_tick=self._param('iterations_per_tick'),
            validators=[self._validator, self._guard], report=self._reporter,
            tolerances=(self._param('position_tolerance'),
                        self._param('orientation_tolerance')),
            fallback_candidates=self._param('collision_fallback_candidates'),
            rest_step_interval=self._param('rest_step_interval') * every,
            step_interval=every,
            solver_thread=self._param('solver_thread'),
            step_budget=step_budget(self._param('rate_hz'), every),
            detour=Detour(self.chain, limits,
                          DetourSettings(enabled=self._param('collision_detour'))))
        self._beside = None       # side work in the solver's thread (else between ticks)
        if self._param('solver_thread'):
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
            self._beside = self.loop.beside
        self._constraints = ConstraintSet(
            self.chain, self._frame_to_base,
            frame_names=None if self._tf_buffer is not None else self._resolver.links,
            model=self._guard.model)
        self._set_constraint_specs(self._constraints.parse(self._param('constraints')))
        self._markers_shown = False                # the target was in the last marker message
        self._marker_key = None                    # what the last marker messages showed
        self._marker_messages = None               # them: (particles, its vertices, collision)
        self._splicer = VertexSplicer()            # the particles' vertices as bytes
        self._marker_sent = -math.inf              # when they were published [s, monotonic]
        self.markers_skipped = 0                   # marker ticks with nothing new to show
        self._check_choice('command_type', self._param('command_type'), COMMAND_TYPES)

        self._tick_times = collections.deque(maxlen=200)     # [s] control tick durations
        self._tick_cpu = collections.deque(maxlen=200)       # [s] their CPU time (thread)
        self._timing = TickTiming(self._param('rate_hz'))    # late ticks, tick periods
        self._marker_times = collections.deque(maxlen=50)    # [s] marker tick durations
        self._marker_cpu = collections.deque(maxlen=50)
        # [s] their CPU time, all in all, per thread (the executor's skip checks and the
        # solver thread's marker ticks add to it: each only to its own entry, no lost adds)
        self._marker_cpu_s = collections.defaultdict(float)
        self._cloud_times = collections.deque(maxlen=20)     # [s] point-cloud conversions
        self._priority = 0          # the SCHED_FIFO priority set (thread_priority; 0: none)
        self._command_pub = None
        self._make_command_publisher()
        self._marker_pub = self.create_publisher(MarkerArray, '~/particles', MARKER_QOS)
        self._collision_pub = self.create_publisher(MarkerArray, '~/collision', MARKER_QOS)
        self._status_pub = self.create_publisher(String, '~/status', INPUT_QOS)

        guard = self._guarded
        self.create_subscription(PoseStamped, 'target_pose',
                                 guard('target_pose', self._on_target_pose), INPUT_QOS)
        self.create_subscription(PointStamped, 'target_point',
                                 guard('target_point', self._on_target_point), INPUT_QOS)
        self.create_subscription(PoseStamped, '/goal_pose',
                                 guard('/goal_pose', self._on_goal_pose), INPUT_QOS)
        self.create_subscription(String, 'constraints',
                                 guard('constraints', self._on_constraints), INPUT_QOS)
        self.create_subscription(MarkerArray, 'obstacles', guard(
            'obstacles', lambda msg: self._on_obstacles(msg, 'obstacles')), INPUT_QOS)
        # The keep-out markers of earlier versions: an alias of obstacles (its own source, so
        # that a DELETEALL on one topic leaves the other's obstacles).
        self.create_subscription(MarkerArray, 'keep_out_markers', guard(
            'keep_out_markers', lambda msg: self._on_obstacles(msg, 'keep_out_markers')),
            INPUT_QOS)
        self._cloud_sub = None
        self._cloud_next = 0.0
        self._cloud_library = None      # set once CLOUD_LIBRARY is imported (_import_beside)
        self._make_pointcloud_subscription(self._param('pointcloud_topic'))
        self._joint_state_reader = JointStateReader(self.chain.joint_names)
        # Taken serialized (raw): the reader finds the positions in the bytes instead of
        # having rclpy build a Python message for each (docs/node.md, "The tick").
        self._joint_states_sub = self.create_subscription(
            JointState, 'joint_states', guard('joint_states', self._on_joint_states),
            JOINT_STATES_QOS, raw=True)
        self._drain = True
        # joint_states delivered between ticks, with their arrival time: read by the next
        # tick (see _on_joint_states); bounded like the tick's own drain.
        self._arrived = collections.deque(maxlen=1000)

        # Everything built at start-up (the model, covers, pair tables, compiled kernels) lives
        # for the whole run: move it out of the garbage collector's view, so that a full
        # collection inside a tick does not walk it (69 ms measured with numba's objects,
        # 0 ms frozen).
        gc.collect()
        gc.freeze()
        self._timer = None
        self._marker_timer = None
        self._status_timer = None
        # Markers, alternatives and ~/status run between control ticks (their timers request
        # them): a status tick (~1 ms, ~3 ms with its log line) landing just before a control
        # tick made it miss its period at rate_hz 500.
        self._side = SideWork()
        # With solver_thread they run in the solver's worker thread, between its steps (they
        # read the solver; what they read of the tick's state is replaced, never edited).
        self._side.add('markers', self._guarded('marker_rate_hz', self._on_marker_tick),
                       beside=True)
        self._side.add('alternatives', self._guarded('alternatives_rate_hz',
                                                     self._on_alternatives_tick), beside=True)
        self._side.add('status', self._guarded('status_rate_hz', self._on_status_tick),
                       beside=True)
        self._make_timers(('rate_hz', 'marker_rate_hz', 'status_rate_hz'))
        self._setup_alternatives()
        self._values = self._all_values()   # read on every tick: cached, kept up to date
        self.add_on_set_parameters_callback(self._on_set_parameters)
        lim = self.loop.limits
        self.get_logger().info(
            f'ready: solver {self._solver_name}, {self._param("rate_hz"):g} Hz x '
            f'{self._param("iterations_per_tick")} iteration(s), commands '
            f'({self._param("command_type")}) on {self._command_pub.topic_name}; limits: '
            f'velocity {np.array2string(lim.velocity, precision=3)}, acceleration '
            f'{np.array2string(lim.acceleration, precision=3)}, max_lead '
            f'{arm_settings.max_lead:g}; waiting for joint_states before commanding'
            + (' (start_without_joint_states: simulation only)'
               if arm_settings.start_without_joint_states else ''))
        self._log_thread = _LogThread(self._write_log)

    def priority_applied(self, priority, problem):
        """Told by ``ros_runner.run_node``, which applies ``thread_priority`` before it
        spins: the priority set (0: none) and why not, if not."""
        self._priority = int(priority)
        if problem is not None:
            self._emit('warn', f'thread_priority: {problem}')
        else:
            self._emit('info', f'control tick and executor threads at SCHED_FIFO priority '
                       f'{priority}')

    def destroy_node(self):
        """Wait for the solver's thread, write the queued log lines, detach the collision
        log bridge, then destroy the node."""
        loop = getattr(self, 'loop', None)
        if loop is not None:
            loop.close()
        if self._log_thread is not None:
            self._log_thread.close()
            self._log_thread = None
        self._log_bridge.close()
        return super().destroy_node()

    # ------------------------------------------------------------------ logging and time
    def _emit(self, level, text):
        if self._log_thread is not None:
            self._log_thread.put(level, text)
        else:
            self._write_log(level, text)

    def _write_log(self, level, text):
        # One call site per severity: rclpy refuses a severity change at the same call site.
        logger = self.get_logger()
        if level == 'error':
            logger.error(text)
        elif level == 'warn':
            logger.warn(text)
        elif level == 'debug':
            logger.debug(text)
        else:
            logger.info(text)

    def _guarded(self, name, callback):
        """Return ``callback`` wrapped so that an exception is reported, never raised."""
        def run(*args):
            try:
                callback(*args)
            except Exception as exc:   # never die: report once with traceback, continue
                try:
                    self._reporter('error', f'callback:{name}:{type(exc).__name__}',
                                   f'{name} callback failed ({type(exc).__name__}: {exc}); '
                                   'the message is dropped and the node continues', exc)
                except Exception:      # the logger itself failed: nothing more to do
                    pass
        return run

    def _now(self):
        """Return (nanoseconds, seconds since start) of the node clock (ROS time).

        Without a /clock override (use_sim_time false) ROS time is the system clock: read
        directly, without building an rclpy Time (called twice per tick and per joint_states
        message). Whether /clock overrides it is looked up at most every 0.1 s.
        """
        clock = self._ros_clock
        checked = time.monotonic_ns()
        if checked >= self._override_checked:
            self._override = clock.ros_time_is_active
            self._override_checked = checked + 100_000_000
        ns = clock.now().nanoseconds if self._override else time.time_ns()
        return ns, (ns - self._epoch_ns) * 1e-9

    def _seconds(self, stamp):
        """Return a header stamp in the loop's seconds, or None for an unset (zero) stamp."""
        return self._seconds_of(stamp_to_nanoseconds(stamp))

    def _seconds_of(self, ns):
        """Return a stamp of ``ns`` nanoseconds in the loop's seconds (None for 0: unset)."""
        return None if ns == 0 else (ns - self._epoch_ns) * 1e-9

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
        for name, (ptype, default, description) in ARRAY_PARAMETERS.items():
            # An empty list has no ROS type: declare typed, then set the default.
            self.declare_parameter(name, ptype, ParameterDescriptor(description=description))
            try:
                self.get_parameter(name)
            except ParameterUninitializedException:
                self.set_parameters([Parameter(name, ptype, list(default))])
        declared, skipped = solver_parameters()
        for name, default in skipped:
            self.get_logger().warn(f'solver setting {name} (default {default!r}) has no ROS '
                                   'parameter type; it stays at its default')
        for item in declared:
            descriptor = ParameterDescriptor(description=item.description)
            if item.kind is tuple:
                # An empty list has no ROS type: declare typed, then set the default.
                ptype = Parameter.Type.DOUBLE_ARRAY
                self.declare_parameter(item.name, ptype, descriptor)
                try:
                    self.get_parameter(item.name)
                except ParameterUninitializedException:
                    self.set_parameters([Parameter(item.name, ptype,
                                                   [float(v) for v in item.default])])
            else:
                self.declare_parameter(item.name, item.default, descriptor)
            self._setting_fields.setdefault(item.solver, []).append(item.field)

    def parameter_names(self):
        """Return the names of the node's own parameters (not use_sim_time etc.)."""
        return list(NODE_PARAMETERS) + list(ARRAY_PARAMETERS) + [
            f'{solver}.{field}' for solver, fields in self._setting_fields.items()
            for field in fields]

    def _all_values(self):
        return {p.name: p.value for p in self.get_parameters(self.parameter_names())}

    def _make_solver(self, name, values):
        return make_solver_from(self._setting_fields, name, self.chain, values)

    def _make_limits(self):
        path = self._param('joint_limits_path')
        overrides = (read_joint_limits_yaml(resolve_path(path, 'joint_limits_path'))
                     if path.strip() else None)
        limits, notes = limits_for_chain(
            self.chain, self._param('velocity_scale'), self._param('max_acceleration'),
            self._param('default_velocity_limit'), overrides)
        for note in notes:
            self.get_logger().warn(note)
        return limits

    @staticmethod
    def _check_choice(name, value, choices):
        if value not in choices:
            raise ParameterError(f'{name} {value!r} is not one of {", ".join(choices)}')

    def _on_set_parameters(self, params):
        changes = {p.name: p.value for p in params}
        self.loop.settle()      # nothing runs in the solver's thread while they change
        try:
            self._apply_parameter_changes(changes)
        except SmcIkError as exc:
            self.get_logger().warn(f'parameter change refused: {exc}')
            return SetParametersResult(successful=False, reason=str(exc))
        except Exception as exc:   # never die: a bug here must not take the node down
            self._reporter('error', f'callback:parameters:{type(exc).__name__}',
                           f'parameter change failed ({type(exc).__name__}: {exc}); refused',
                           exc)
            return SetParametersResult(successful=False,
                                       reason=f'{type(exc).__name__}: {exc}')
        self._values.update((k, v) for k, v in changes.items() if k in self._values)
        return SetParametersResult(successful=True)

    def _apply_parameter_changes(self, changes):
        """Validate every change first, then apply them all (nothing applied on refusal)."""
        values = self._all_values()
        values.update(changes)
        name = values['solver']
        for key, reason in _START_UP_ONLY.items():
            if key in changes and changes[key] != self._param(key):
                raise ParameterError(reason)
        if 'command_type' in changes:
            self._check_choice('command_type', changes['command_type'], COMMAND_TYPES)
        if 'goal_timeout' in changes and not changes['goal_timeout'] >= 0.0:
            raise ParameterError(f'goal_timeout must be >= 0; got {changes["goal_timeout"]}')
        guard = self._guard
        if changes.get('self_collision') and not guard.has_geometry:
            raise ParameterError('self_collision: the URDF has no <collision> geometry, so the '
                                 'robot cannot be checked against itself')
        srdf = None
        if {'srdf_path', 'robot_description_semantic'} & set(changes):
            source, where, _ = choose_srdf(
                values['robot_description_semantic'], values['srdf_path'], self._urdf_file,
                resolve=lambda path: resolve_path(path, 'srdf_path'))
            if source is not None:
                parse_srdf(source)              # ModelError: refused with its reason
            srdf = (source, where)
        specs = None
        if 'constraints' in changes:
            specs = self._constraints.parse(changes['constraints'])
            self._constraints.build(specs)                  # frames, links: GoalError
        touched = {key.split('.', 1)[0] for key in changes if '.' in key}
        candidates = {}
        for solver in touched | ({name} if 'solver' in changes else set()):
            if solver in self._setting_fields or solver == name:
                candidates[solver] = self._make_solver(solver, values)  # ParameterError
        if name != self._solver_name:
            candidates[name].set_constraints(self._solver_constraints())   # GoalError
        # Everything is valid: apply.
        if name != self._solver_name:
            self._switch_solver(name, candidates[name])
        elif name in touched:
            diff = settings_changes(self._setting_fields, name, self._all_values(), values)
            if diff:
                self.loop.solver.update_settings(**diff)
                self.get_logger().info(f'solver {name} settings changed: '
                                       + ', '.join(f'{k}={v!r}' for k, v in diff.items()))
        if specs is not None:
            self._set_constraint_specs(specs)
        collision = []
        if 'self_collision' in changes and changes['self_collision'] != guard.self_collision:
            guard.set_self_collision(changes['self_collision'])
            collision.append(f'self-collision {"on" if guard.self_collision else "off"}')
        if 'collision_clearance' in changes:
            guard.set_clearance(changes['collision_clearance'])
            collision.append(f'clearance {guard.settings.clearance:g} m')
        if collision:
            self.loop.set_constraints(self._solver_constraints())
            self.get_logger().info('collision settings changed: ' + ', '.join(collision))
        if srdf is not None and srdf[0] != self._applied_srdf:
            self._applied_srdf = srdf[0]
            guard.start_srdf_update(srdf[0], srdf[1])
            self.get_logger().info(f'recomputing the self-collision pairs for {srdf[1]} '
                                   '(applied when ready)')
        if 'pointcloud_voxel_size' in changes:
            guard.set_pointcloud_settings(voxel_size=changes['pointcloud_voxel_size'])
        if 'pointcloud_topic' in changes:
            self._make_pointcloud_subscription(changes['pointcloud_topic'])
        if 'collision_fallback_candidates' in changes:
            self.loop.fallback_candidates = int(changes['collision_fallback_candidates'])
        if 'collision_detour' in changes:
            self.loop.set_detour_enabled(bool(changes['collision_detour']))
        if 'command_type' in changes or 'command_topic' in changes:
            self._make_command_publisher(values)
        rates = [k for k in ('rate_hz', 'marker_rate_hz', 'status_rate_hz') if k in changes]
        if rates:
            self._make_timers(rates, values)
        if 'iterations_per_tick' in changes:
            self.loop.iterations_per_tick = int(values['iterations_per_tick'])
        if {'rest_step_interval', 'rate_hz', 'solver_rate_hz'} & set(changes):
            every = step_interval(values['rate_hz'], values['solver_rate_hz'])
            self.loop.step_interval = every
            self.loop.rest_step_interval = int(values['rest_step_interval']) * every
            self.loop.step_budget = step_budget(values['rate_hz'], every)
        if 'goal_timeout' in changes:
            self.loop.inbox.goal_timeout = values['goal_timeout']
        if 'position_tolerance' in changes or 'orientation_tolerance' in changes:
            self.loop.tolerances = (values['position_tolerance'],
                                    values['orientation_tolerance'])
        self._apply_alternatives_changes(changes, values)

    def _switch_solver(self, name, solver):
        self.loop.set_solver(solver)        # with the YAML and collision constraints
        old = self._solver_name
        self._solver_name = name
        self.get_logger().info(f'solver switched from {old} to {name}, started at the current '
                               'command (no jump)')

    # ------------------------------------------------------------------ set-up helpers
    def _make_tf_buffer(self):
        try:
            import tf2_ros  # lazy: optional; not available from PyPI
        except ImportError:
            self.get_logger().info('tf2_ros not installed: goal frames must be links of the '
                                   'URDF that its fixed joints or the chain place (or empty = '
                                   'base)')
            return None
        buffer = tf2_ros.Buffer()
        self._tf_listener = tf2_ros.TransformListener(buffer, self)
        return buffer

    def _urdf_file_of(self, source):
        """Return the URDF file the model came from (relative mesh paths, the SRDF beside it),
        or None: urdf_path when the XML was read from it, or when robot_description is set
        and urdf_path names a file of the same robot (e.g. the launch file passes both)."""
        text = self._param('urdf_path').strip()
        if not text:
            return None
        try:
            path = str(resolve_path(text))
        except ModelError:
            return None
        if source.startswith('urdf_path'):
            return path
        try:
            same = _robot_name(read_urdf_file(path)) == _robot_name(self.urdf_xml)
        except (ModelError, ElementTree.ParseError):
            same = False
        if not same:
            self.get_logger().warn(
                f'urdf_path {path!r} describes another robot than the XML from {source}: not '
                'used for relative mesh paths or to find the SRDF beside it')
            return None
        return path

    def _make_collision_guard(self):
        """Build the collision model, self-collision pairs and scene (ModelError: exit 1)."""
        settings = CollisionSettings(
            self_collision=self._param('self_collision'),
            padding=self._param('collision_padding'),
            clearance=self._param('collision_clearance'),
            cover_tolerance=self._param('collision_cover_tolerance'),
            contact_tolerance=self._param('collision_contact_tolerance'),
            voxel_size=self._param('pointcloud_voxel_size'))
        semantic, srdf_path = self._param('robot_description_semantic'), self._param('srdf_path')
        description = None
        if self._semantic_sub is not None:
            # MoveIt publishes the SRDF transient local: take it if it is already there (a
            # short wait, counted from the subscription), else apply it whenever it arrives.
            self._wait_for_semantic(0.5, 2.0)
            if self._semantic_text is not None:
                semantic = self._semantic_text
                description = 'the /robot_description_semantic topic'
        source, where, explicit = choose_srdf(
            semantic, srdf_path, self._urdf_file,
            resolve=lambda path: resolve_path(path, 'srdf_path'))
        guard, notes = CollisionGuard.from_urdf(
            self.chain, self.urdf_xml, urdf_path=self._urdf_file,
            package_paths=self._param('package_paths'), srdf=source,
            srdf_description=description or where, settings=settings, explicit_srdf=explicit)
        for level, text in notes:
            self._emit(level, text)
        self._applied_srdf = source
        return guard

    def _subscribe_semantic(self):
        """Subscribe to /robot_description_semantic unless an SRDF parameter is set."""
        if self._param('robot_description_semantic').strip() or \
                self._param('srdf_path').strip():
            return
        self._semantic_sub = self.create_subscription(
            String, '/robot_description_semantic', self._guarded(
                '/robot_description_semantic', self._on_semantic), DESCRIPTION_QOS)
        self._semantic_since = time.monotonic()

    def _wait_for_semantic(self, discovery, timeout):
        """Spin until ``timeout`` [s] after the subscription for /robot_description_semantic,
        giving up ``discovery`` [s] after it when no publisher of it is known."""
        from rclpy.executors import SingleThreadedExecutor

        executor = SingleThreadedExecutor(context=self.context)   # the node's own context
        executor.add_node(self)
        start = self._semantic_since
        try:
            while self._semantic_text is None and not stop_requested():
                elapsed = time.monotonic() - start
                if elapsed >= timeout or (elapsed >= discovery and not self.count_publishers(
                        '/robot_description_semantic')):
                    return
                executor.spin_once(timeout_sec=0.05)
        finally:
            executor.remove_node(self)
            executor.shutdown()

    def _on_semantic(self, msg):
        text = msg.data
        if not text.strip():
            return
        guard = getattr(self, '_guard', None)
        if guard is None:                 # still starting: _make_collision_guard takes it
            self._semantic_text = text
            return
        if self._param('robot_description_semantic').strip() or \
                self._param('srdf_path').strip() or text == self._applied_srdf:
            return
        try:
            started = guard.start_srdf_update(text, 'the /robot_description_semantic topic')
        except SmcIkError as exc:
            self.get_logger().error(f'/robot_description_semantic refused: {exc}')
            return
        if started:
            self._applied_srdf = text
            self.get_logger().info('/robot_description_semantic arrived: recomputing the '
                                   'self-collision pairs (applied when ready)')

    def _solver_constraints(self):
        """The constraint objects the solver respects: the YAML's and the collision guard's."""
        return list(self._constraints.objects) + [self._guard.constraint]

    def _set_constraint_specs(self, specs):
        """Apply schema entries: objects to the solver, obstacles to the scene (GoalError:
        nothing changes)."""
        objects, obstacles, drawn = self._constraints.build(specs)
        self.loop.set_constraints(objects + [self._guard.constraint])
        self._guard.replace(obstacles, 'constraints')
        self._constraints.objects, self._constraints.obstacles = objects, obstacles
        self._constraints.drawn, self._constraints.specs = drawn, list(specs)

    def _make_pointcloud_subscription(self, topic):
        if self._cloud_sub is not None:
            self.destroy_subscription(self._cloud_sub)
            self._cloud_sub = None
            self._guard.replace({}, 'pointcloud')
        if topic:
            self._cloud_library = _import_beside(CLOUD_LIBRARY)
            self._cloud_sub = self.create_subscription(
                PointCloud2, topic, self._guarded(topic, self._on_pointcloud), JOINT_STATES_QOS)

    def _make_command_publisher(self, values=None):
        values = values or self._all_values()
        msg_type = COMMAND_TYPES[values['command_type']]
        if self._command_pub is not None:
            self.destroy_publisher(self._command_pub)
        self._command_pub = self.create_publisher(msg_type, values['command_topic'], COMMAND_QOS)
        self._command_type = values['command_type']
        self._joint_state_writer = JointStateWriter(self.chain.joint_names)

    def _make_timers(self, which, values=None):
        values = values or self._all_values()
        if 'rate_hz' in which:
            if self._timer is not None:
                self.destroy_timer(self._timer)
            self._rate = values['rate_hz']
            self._timing.rate = self._rate
            self._timer = self.create_timer(1.0 / self._rate,
                                            self._guarded('tick', self._on_tick))
        for key, attr, callback, job in (
                ('marker_rate_hz', '_marker_timer', self._request_markers, 'markers'),
                ('status_rate_hz', '_status_timer', lambda: self._side.request('status'),
                 'status')):
            if key in which:
                if getattr(self, attr) is not None:
                    self.destroy_timer(getattr(self, attr))
                rate = values[key]
                setattr(self, attr, self.create_timer(1.0 / rate, self._guarded(key, callback))
                        if rate > 0 else None)
                if rate <= 0:
                    self._side.cancel(job)

    # ------------------------------------------------------------------ frames
    def _frame_to_base(self, frame):
        """Return the (4, 4) pose of ``frame`` in the base frame [m] (GoalError if unknown)."""
        return self.loop.inbox.to_base(frame, self.loop.current_configuration())

    def _tf_lookup(self, frame):
        import tf2_ros
        try:
            tf = self._tf_buffer.lookup_transform(self.chain.base_link, frame, Time())
        except tf2_ros.TransformException as exc:
            raise GoalError(f'unknown frame {frame!r}: not a static link of the model '
                            f'({", ".join(self._resolver.links)}) and no TF from '
                            f'{self.chain.base_link}: {exc}') from None
        t, r = tf.transform.translation, tf.transform.rotation
        out = np.eye(4)
        out[:3, :3] = quat_to_matrix([r.w, r.x, r.y, r.z])
        out[:3, 3] = [t.x, t.y, t.z]
        return out

    # ------------------------------------------------------------------ goals
    def _on_target_pose(self, msg):
        self._offer_goal('target_pose', msg.header, 'pose',
                         lambda: pose_to_matrix(msg.pose, 'target_pose.pose'))

    def _on_target_point(self, msg):
        self._offer_goal('target_point', msg.header, 'point',
                         lambda: point_to_array(msg.point, 'target_point.point'))

    def _on_goal_pose(self, msg):
        height = self._param('goal_pose_height')
        self._offer_goal('/goal_pose', msg.header, 'pose',
                         lambda: goal_pose_to_matrix(msg.pose, height, '/goal_pose.pose'))

    def _offer_goal(self, topic, header, kind, convert):
        """Convert a goal and put it in the inbox; refuse it with one (throttled) log line."""
        _, now = self._now()
        try:
            self.loop.offer_goal(kind, convert(), header.frame_id, self._seconds(header.stamp),
                                 now, source=topic)
        except SmcIkError as exc:
            text = f'{topic} refused, keeping the previous goal: {exc}'
            self._reporter('error', Reporter.key_of(topic, str(exc)), text, interval=2.0)

    # ------------------------------------------------------------------ constraints
    def _on_constraints(self, msg):
        constraints = self._constraints
        try:
            self._set_constraint_specs(constraints.parse(msg.data))
        except SmcIkError as exc:
            self.get_logger().error(f'constraints refused, keeping the previous '
                                    f'{len(constraints.specs)} entr(ies): {exc}')
            return
        self.get_logger().info(f'constraints applied: {constraints.summary()}')

    # ------------------------------------------------------------------ obstacles
    def _on_obstacles(self, msg, topic):
        """Apply a MarkerArray of obstacles (``topic`` is also the scene source)."""
        guard = self._guard
        try:
            updates = obstacle_updates(msg, self._frame_to_base, self.chain.base_link, topic)
            added, removed = guard.apply(updates, topic)
        except GoalError as exc:
            kind = getattr(exc, 'kind', 'update')
            self._reporter('error', f'{topic}:{kind}', (
                f'{topic} refused, keeping the previous scene ({len(guard.scene)} '
                f'obstacle(s)): {exc}'), interval=2.0)
            return
        self._reporter('info', f'{topic}:applied', (
            f'{topic}: {added} obstacle(s) added or changed, {removed} removed; the scene holds '
            f'{len(guard.scene)} ({guard.count(topic)} from {topic})'), interval=1.0,
            count=False)

    def _on_pointcloud(self, msg):
        """Turn a PointCloud2 into the 'pointcloud' obstacle (at most pointcloud_rate_hz)."""
        _, now = self._now()
        if now < self._cloud_next:
            return
        if not self._cloud_library.is_set():
            self._reporter('info', 'pointcloud:loading', (
                f'{self._param("pointcloud_topic")}: cloud skipped while {CLOUD_LIBRARY} is '
                'imported beside the control tick (once, 0.3-0.6 s)'), interval=1.0)
            return
        self._cloud_next = now + 1.0 / self._param('pointcloud_rate_hz')
        started = time.perf_counter()
        topic = self._param('pointcloud_topic')
        try:
            points = pointcloud2_to_xyz(msg, topic)
            frame = self._frame_to_base(msg.header.frame_id or self.chain.base_link)
        except GoalError as exc:
            self._reporter('error', f'pointcloud:{Reporter.key_of("", str(exc))}', (
                f'{topic} refused, keeping the previous cloud obstacle: {exc}'), interval=5.0)
            return
        points = points @ frame[:3, :3].T + frame[:3, 3]
        spheres = self._guard.set_pointcloud(points, self.loop.current_configuration())
        self._cloud_times.append(time.perf_counter() - started)
        self._reporter('info', 'pointcloud', (
            f'{topic}: {len(points)} points -> {spheres} voxel sphere(s) of '
            f'{self._param("pointcloud_voxel_size"):g} m (the robot\'s own removed) in '
            f'{1e3 * self._cloud_times[-1]:.1f} ms'), interval=10.0, count=False)

    # ------------------------------------------------------------------ joint states
    def _on_joint_states(self, data):
        """A joint_states message, serialized (the subscription is raw), delivered by the
        executor between ticks: kept with its arrival time for the next tick, which reads it
        before it decides (``_drain_joint_states``). Reading it here, in a wake-up of its
        own, cost the node more than the reading itself: each wake-up of this VM's process
        starts with cold caches (docs/node.md, "The tick")."""
        self._arrived.append((data, self._now()[1]))

    def _read_joint_states(self, data, now):
        """Apply one serialized joint_states message that arrived at ``now`` [s]."""
        try:
            q, missing, bad, extra, stamp_ns = self._joint_state_reader.read_serialized(data)
        except GoalError as exc:
            self._reporter('warn', 'joint_states:malformed', f'{exc}; message ignored',
                           interval=2.0)
            return
        if missing:
            self._reporter('warn', 'joint_states:missing', (
                f'joint_states lacks joint(s) {", ".join(missing)} (expected all of '
                f'{", ".join(self.chain.joint_names)}): keeping their last known values'),
                interval=2.0)
        if bad:
            self._reporter('warn', 'joint_states:non_finite', (
                f'joint_states carries non-finite positions for {", ".join(bad)}: keeping '
                'their last good values'), interval=2.0)
        if extra:
            self._reporter('warn', 'joint_states:extra', (
                f'joint_states carries joint(s) {", ".join(extra)} not in the chain: ignored'),
                interval=10.0)
        self.loop.on_joint_states(q, self._seconds_of(stamp_ns), now)

    # ------------------------------------------------------------------ control tick
    def _drain_joint_states(self):
        """Take the joint_states already delivered before the tick decides.

        rclpy's executors serve ready timers before ready subscriptions, so without this a
        tick would decide on a measurement one tick old (and publish a held command although
        the arm's return is already waiting). Uses the subscription handle's take_message,
        as the executors do (Humble and Jazzy); any failure switches it off, logged once.
        """
        arrived = self._arrived
        while arrived:
            self._guarded('joint_states', self._read_joint_states)(*arrived.popleft())
        if not self._drain:
            return
        sub = self._joint_states_sub
        try:
            for _ in range(1000):
                with sub.handle:
                    taken = sub.handle.take_message(sub.msg_type, sub.raw)
                if taken is None:
                    return
                self._guarded('joint_states', self._read_joint_states)(taken[0],
                                                                       self._now()[1])
        except Exception as exc:
            self._drain = False
            self._reporter('warn', 'drain', f'joint_states cannot be taken from the tick '
                           f'({type(exc).__name__}: {exc}): the executor delivers them', exc)

    def _on_tick(self):
        started, cpu_started = time.perf_counter(), time.thread_time()
        # Late ticks (control/tick_timing.py): counted for ~/status, a warning when they pile up.
        late = self._timing.tick(started)
        if late is not None:
            self._reporter('warn', 'late_ticks', late, interval=10.0)
        self._drain_joint_states()
        event = self._guard.poll()      # an SRDF or cover update computed in the background
        if event is not None:
            level, text, changed = event
            if changed:
                self.loop.set_constraints(self._solver_constraints())
                self.loop.cancel_detour('the collision model changed')
            self._emit(level, text)
        ns, now = self._now()
        command = self.loop.tick(now)
        if command is not None:
            self._publish_command(command, ns)
            if not self._contact_noted:
                self._contact_noted = True
                self._note_contact(command.q)
        self._tick_times.append(time.perf_counter() - started)
        self._tick_cpu.append(time.thread_time() - cpu_started)
        if self._side.pending:      # markers, alternatives, status: when they fit
            self._side.run(self._time_to_next_tick, self._beside)

    _contact_noted = False

    def _note_contact(self, q):
        """Log once, at the first command, the pairs the arm rests in contact with, and
        start computing finer covers of their links (``collision_contact_tolerance``)."""
        try:
            refining = self._guard.start_contact_refinement(q)
            note = self._guard.contact_note(q, refining)
        except Exception as exc:      # never in the way of the command stream
            self._reporter('warn', 'contact_note', f'contact check failed ({exc})', exc)
            return
        if note is not None:
            self._emit('warn', note)

    def _time_to_next_tick(self):
        """Return the seconds until the control timer fires next (None: unknown)."""
        ns = self._timer.time_until_next_call() if self._timer is not None else None
        return None if ns is None else ns * 1e-9

    def _publish_command(self, command, stamp_ns):
        names = self.chain.joint_names
        if self._command_type == 'joint_state':
            msg = self._joint_state_writer.fill(command.q, command.v, stamp_ns)
        elif self._command_type == 'joint_trajectory':
            # Zero stamp: joint_trajectory_controller starts it on arrival.
            msg = make_joint_trajectory(names, command.q, command.v, 1.0 / self._rate)
        else:
            msg = make_float64_multi_array(command.q)
        self._command_pub.publish(msg)

    # ------------------------------------------------------------------ shutdown
    def begin_shutdown(self):
        """SIGINT/SIGTERM: stop following goals and brake to a stop (timers keep running)."""
        if not self.loop.stopping:
            self.loop.request_stop()
            self.get_logger().info('shutdown requested: braking to a stop within the limits, '
                                   'then exiting')

    @property
    def shutdown_complete(self):
        """True once the braking after begin_shutdown is complete."""
        return self.loop.stopped

    def flush(self, timeout=0.5):
        """Wait up to ``timeout`` [s] until subscribers acknowledged the last commands.

        The final, zero-velocity command is published on the tick that completes the brake;
        destroying the publisher right after it could lose it on the wire (reliable QoS
        delivers it only while the writer lives). Returns True when everything was acked.
        """
        if self._command_pub is None:
            return True
        try:
            return bool(self._command_pub.wait_for_all_acked(Duration(seconds=timeout)))
        except Exception as exc:  # noqa: BLE001 - an RMW without the call: nothing to wait on
            self.get_logger().debug(f'wait_for_all_acked unavailable: {exc}')
            return False

    # ------------------------------------------------------------------ markers and status
    MARKER_KEEPALIVE = 1.0   # [s] unchanged markers are published again this often

    def _marker_inputs_key(self, q_cmd, info):
        """Return the StateKey of what the marker messages are built from.

        While the solver is settled (its rest steps keep the estimate's particle as it is),
        its step record stands for the settled filter: the markers keep showing the particles
        of the step that settled it instead of being rebuilt after every rest step. The ghost
        arms are compared by what they show (the alternatives list is republished every
        second as a new object with the same content)."""
        guard = self._guard
        solver = self.loop.solver
        settled = bool(getattr(solver, 'settled', False))
        listed = self._alternatives.published
        ghosts = (None if listed is None else
                  (listed.q.tobytes(), tuple(r.within_tolerance for r in listed.records)))
        return StateKey((None if settled else info, self.loop.goal, guard.constraint,
                         self._constraints.drawn, solver),
                        (q_cmd.tobytes(), settled, ghosts, guard.scene.version,
                         self._param('max_marker_particles'),
                         self._param('collision_cover_markers')))

    def _request_markers(self):
        """The marker timer: ask for a marker tick between control ticks, unless nothing
        changed since the last markers (the arm rests on a settled goal): then the last
        messages are published again, with a new stamp, once they are MARKER_KEEPALIVE s
        old (for a late RViz; markers never expire), and nothing is sent before."""
        if self.loop.q is None:
            return
        if self.loop.solver_idle and self._markers_unchanged():
            return
        self._side.request('markers')

    def _markers_unchanged(self):
        """If nothing the markers show changed since the last ones, publish those again when
        they are MARKER_KEEPALIVE s old, count a (cheap) marker tick and return True."""
        last = self._marker_key
        if last is None:
            return False
        started, cpu_started = time.perf_counter(), time.thread_time()
        if self._marker_inputs_key(self.loop.q, self.loop.solver.last_info) != last:
            return False
        if started - self._marker_sent >= self.MARKER_KEEPALIVE:
            self._republish_markers(started)
        self.markers_skipped += 1
        self._marker_times.append(time.perf_counter() - started)
        self._note_marker_cpu(time.thread_time() - cpu_started)
        return True

    def _note_marker_cpu(self, seconds):
        self._marker_cpu.append(seconds)
        self._marker_cpu_s[threading.get_ident()] += seconds

    def _republish_markers(self, started):
        """Publish the last marker messages again with the current stamp: the particles'
        array spliced again with its stamps set (a small message), the others serialized
        once (Restamper), afterwards only their stamps are written."""
        array, vertices, collision = self._marker_messages
        if not isinstance(collision, Restamper):
            if vertices is None:
                array = Restamper(array, [m.header for m in array.markers])
            collision = Restamper(collision, [m.header for m in collision.markers])
            self._marker_messages = (array, vertices, collision)
        ns = self._now()[0]
        if vertices is None:
            self._marker_pub.publish(array.at(ns))
        else:
            stamp = nanoseconds_to_stamp(ns)
            for marker in array.markers:
                marker.header.stamp = stamp
            self._marker_pub.publish(self._splicer.serialize(array, *vertices))
        self._collision_pub.publish(collision.at(ns))
        self._marker_sent = started

    def _on_marker_tick(self):
        q_cmd = self.loop.q
        if q_cmd is None or self._markers_unchanged():
            return
        started, cpu_started = time.perf_counter(), time.thread_time()
        info = self.loop.solver.last_info
        key = self._marker_inputs_key(q_cmd, info)
        particles, vertices = info.get('particles'), None
        if particles is not None and self._param('max_marker_particles') > 0:
            chosen, weights = select_particles(particles, info.get('weights'),
                                               self._param('max_marker_particles'))
            vertices = particle_vertices(self.chain.link_poses(chosen)[..., :3, 3], weights,
                                         self._segments)
        map_q = info.get('map')
        map_q = q_cmd if map_q is None else map_q
        goal_display = self.loop.goal.display if self.loop.goal is not None else None
        shown = goal_display is not None
        clear = self._markers_shown and not shown
        self._markers_shown = shown
        stamp = self.get_clock().now().to_msg()
        array = build_marker_array(
            self.chain.base_link, stamp,
            map_positions=self.chain.link_poses(map_q)[:, :3, 3], target=goal_display,
            clear=clear)
        array.markers.extend(self._ghost_markers(stamp))
        if vertices is not None:        # its vertices go in as bytes (VertexSplicer)
            marker = particle_marker(None, None, self.chain.base_link, stamp, fill=False)
            array.markers.append(marker)
            vertices = (marker, *vertices)
            self._marker_pub.publish(self._splicer.serialize(array, *vertices))
        else:
            self._marker_pub.publish(array)
        inputs = self._guard.marker_inputs(q_cmd, cover=self._param('collision_cover_markers'))
        inputs['obstacles'] = inputs['obstacles'] + self._constraints.drawn
        collision = collision_markers(self.chain.base_link, stamp, **inputs)
        self._collision_pub.publish(collision)
        self._marker_messages = (array, vertices, collision)
        self._marker_key, self._marker_sent = key, started
        self._marker_times.append(time.perf_counter() - started)
        self._note_marker_cpu(time.thread_time() - cpu_started)

    def status(self):
        """Return the status dictionary published on ~/status."""
        def number(value, digits):
            return None if value is None or not math.isfinite(value) else round(value, digits)

        def mean_ms(values):        # deques of floats: no array for a mean of 20-100
            return number(1e3 * math.fsum(values) / len(values), 3) if values else None
        _, now = self._now()
        ess = self.loop.solver.last_info.get('ess')
        loop = self.loop
        out = {
            'position_error': number(loop.goal_errors[0], 6),
            'orientation_error': number(loop.goal_errors[1], 6),
            'ess': number(ess, 2) if ess is not None else None,
            'step_time_ms': mean_ms(self._tick_times),
            'marker_time_ms': mean_ms(self._marker_times),
            'step_cpu_ms': mean_ms(self._tick_cpu),
            'late_ticks': self._timing.late_ticks,
            'tick_period_max_ms': number(1e3 * self._timing.max_period, 2),
            'marker_cpu_ms': mean_ms(self._marker_cpu),
            'marker_cpu_s': round(sum(list(self._marker_cpu_s.values())), 6),
            'steps_skipped': loop.skipped_steps,
            'ticks_between_steps': loop.interpolated_ticks,
            'steps_beside_tick': loop.steps_in_thread,
            'markers_skipped': self.markers_skipped,
            'solver': self._solver_name,
            'goal_id': loop.goal.sequence if loop.goal is not None else 0,
            'reached': bool(loop.goal_reached),
        }
        out.update(loop.status(now))
        out.update(self._alternatives_status(now))
        q = loop.q if loop.q is not None else loop.current_configuration()
        blocked = loop.goal is not None and not loop.goal_reached
        out.update(self._guard.status(q, loop.refusal(within=int(self._rate) + 1), blocked))
        out['pointcloud_ms'] = mean_ms(self._cloud_times)
        out['thread_priority'] = self._priority
        return out

    def _on_status_tick(self):
        status = self.status()
        self._status_pub.publish(String(data=json.dumps(status, separators=(',', ':'))))
        if self.loop.goal is not None:
            self._reporter('info', 'status', (
                f'goal {status["goal_id"]}: position error '
                f'{self.loop.goal_errors[0] * 1e3:.2f} mm, orientation error '
                f'{self.loop.goal_errors[1]:.4f} rad, ESS {status["ess"]}, '
                f'{status["step_time_ms"]} ms/tick ({self._solver_name}), arm '
                f'{status["arm_state"]}, lead {status["lead"]}, limited by '
                f'{status["limited_by"]}'), interval=5.0, count=False)

    # ------------------------------------------------------------------ alternatives
    def _setup_alternatives(self):
        """~/alternatives, the ghost arms, ~/select_alternative, target_pose_with_covariance
        (the bookkeeping is control/alternatives.py; docs/node.md "Alternatives")."""
        self._alternatives = AlternativesBook(
            self.chain.nq, self.loop.limits.continuous, self._param('max_alternatives'),
            report=self._reporter)
        self.loop.step_observers.append(self._alternatives.observe)
        self._ghosts_shown = 0
        self._alternatives_times = collections.deque(maxlen=20)   # [s] per refresh
        self._alternatives_pub = self.create_publisher(JointTrajectory, '~/alternatives',
                                                       INPUT_QOS)
        self.create_subscription(UInt32, '~/select_alternative', self._guarded(
            '~/select_alternative', self._on_select_alternative), INPUT_QOS)
        self.create_subscription(PoseWithCovarianceStamped, 'target_pose_with_covariance',
                                 self._guarded('target_pose_with_covariance',
                                               self._on_target_pose_with_covariance),
                                 INPUT_QOS)
        self._alternatives_timer = None
        self._make_alternatives_timer(self._param('alternatives_rate_hz'))
        if self._param('alternatives_rate_hz') <= 0.0:
            self._alternatives.switch_off(0.0, 'alternatives_rate_hz is 0 (off)')

    def _make_alternatives_timer(self, rate):
        if self._alternatives_timer is not None:
            self.destroy_timer(self._alternatives_timer)
        self._alternatives_timer = (self.create_timer(1.0 / rate, self._guarded(
            'alternatives_rate_hz', lambda: self._side.request('alternatives')))
            if rate > 0 else None)
        if rate <= 0:
            self._side.cancel('alternatives')

    def _apply_alternatives_changes(self, changes, values):
        if 'max_alternatives' in changes:
            self._alternatives.max_alternatives = values['max_alternatives']
        if 'alternatives_rate_hz' in changes:
            rate = values['alternatives_rate_hz']
            self._make_alternatives_timer(rate)
            if rate <= 0.0:
                _, now = self._now()
                off = self._alternatives.switch_off(now, 'alternatives_rate_hz is 0 (off)')
                self._publish_alternatives(off)

    def _on_alternatives_tick(self):
        loop = self.loop
        _, now = self._now()
        goal_id = loop.goal.sequence if loop.goal is not None else 0
        started = time.perf_counter()
        needed = self._alternatives.refresh(loop.solver, goal_id, loop.q, now)
        self._alternatives_times.append(time.perf_counter() - started)
        self._publish_alternatives(needed)

    def _publish_alternatives(self, needed):
        """Publish the book's current list on ~/alternatives when ``needed``."""
        if not needed:
            return
        ns, now = self._now()
        self._alternatives_pub.publish(make_alternatives_trajectory(
            self.chain.joint_names, self._alternatives.current.q,
            Time(nanoseconds=ns).to_msg()))
        self._alternatives.mark_published(now, ns)

    def _ghost_markers(self, stamp):
        """Return the ghost arms of the last published alternatives (markers.py)."""
        listed = self._alternatives.published
        count = 0 if listed is None else len(listed)
        if count == 0 and self._ghosts_shown == 0:
            return []
        positions = (self.chain.link_poses(listed.q)[..., :3, 3] if count
                     else np.zeros((0, 0, 3)))
        ok = [r.within_tolerance for r in listed.records] if count else []
        markers = alternative_markers(positions, ok, self.chain.base_link, stamp,
                                      self._ghosts_shown)
        self._ghosts_shown = count
        return markers

    def _on_select_alternative(self, msg):
        _, now = self._now()
        loop = self.loop
        goal_id = loop.goal.sequence if loop.goal is not None else 0
        try:
            self._alternatives.select(msg.data, loop.solver, goal_id, now)
        except SmcIkError as exc:
            self._reporter('error', Reporter.key_of('select_alternative', str(exc)), str(exc),
                           interval=2.0)

    def _on_target_pose_with_covariance(self, msg):
        topic = 'target_pose_with_covariance'
        _, now = self._now()
        try:
            kind, value, covariance = pose_with_covariance_to_goal(msg.pose, topic)
            self.loop.offer_goal(kind, value, msg.header.frame_id,
                                 self._seconds(msg.header.stamp), now, source=topic,
                                 covariance=covariance)
        except SmcIkError as exc:
            text = f'{topic} refused, keeping the previous goal: {exc}'
            # Keyed on the whole text (without numbers): the faults differ only at the end.
            key = topic + ':' + re.sub(r'[-+]?\d[\d.e+-]*', '#', str(exc))
            self._reporter('error', key, text, interval=2.0)

    def _alternatives_status(self, now):
        out = self._alternatives.status(now)
        goal = self.loop.goal
        out['goal_covariance'] = goal is not None and goal.covariance is not None
        times = self._alternatives_times
        out['alternatives_time_ms'] = (round(1e3 * math.fsum(times) / len(times), 3) if times
                                       else None)
        return out


# A tick waits for the solver step it started at most this share of the control period
# (solver_thread) when the solver steps on every tick: a held goal's step (~0.3 ms) is taken
# in its own tick, a search step (3-8 ms) runs on beside the next ticks.
STEP_BUDGET = 0.3


def step_budget(rate_hz, every):
    """Return how long [s] a tick waits for the solver step it started (solver_thread):
    STEP_BUDGET of the period when the solver steps on every tick; none when the ticks
    between steps carry its answer on anyway (``every`` > 1: a step's answer one tick later
    is the design there, and waiting cost the tick its period at rate_hz 500)."""
    return STEP_BUDGET / rate_hz if every == 1 else 0.0


def step_interval(rate_hz, solver_rate_hz):
    """Return every how many control ticks the solver steps: the fewest that keep it at or
    below ``solver_rate_hz`` [Hz] (0: every tick) at ``rate_hz`` [Hz]."""
    if solver_rate_hz <= 0.0 or solver_rate_hz >= rate_hz:
        return 1
    return max(1, math.ceil(rate_hz / solver_rate_hz - 1e-9))


def _robot_name(urdf_xml):
    return ElementTree.fromstring(urdf_xml).get('name')


def main(args=None):
    """Run the node until SIGINT/SIGTERM (exit 0); exit 1 when the model or a parameter is
    unusable.

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
