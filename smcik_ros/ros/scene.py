"""The node's scene inputs: constraints, obstacles, point clouds and the SRDF topic, and the
parameters that change them at run time.

``SceneInputs`` subscribes to ``constraints`` (the constraint YAML), ``obstacles`` and its
alias ``keep_out_markers`` (MarkerArray), ``pointcloud_topic`` (PointCloud2, at most
``pointcloud_rate_hz``) and hands what arrives to the collision guard and the control loop;
a bad message is refused with one (throttled) log line and the previous scene stays.
``SemanticTopic`` takes MoveIt's /robot_description_semantic: waited for briefly at start-up,
applied whenever it arrives later (``description.SrdfSources`` decides which SRDF wins).
"""

import importlib
import sys
import threading
import time

from rclpy.executors import SingleThreadedExecutor
try:                    # Iron and later
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:     # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from ..collision import parse_srdf
from ..control.reporter import Reporter
from ..errors import GoalError, ParameterError, SmcIkError
from .conversions import obstacle_updates, pointcloud2_to_xyz
from .description import SEMANTIC_TOPIC
from .interface import CONSTRAINTS_QOS, DESCRIPTION_QOS, INPUT_QOS, JOINT_STATES_QOS
from .runner import stop_requested
from .schedule import RateGate

__all__ = ['CLOUD_LIBRARY', 'import_beside', 'SemanticTopic', 'SceneInputs',
           'SCENE_PARAMETERS']

# The cloud conversion's KD-tree (CollisionConstraint.points_on_robot). Importing it takes
# 0.3-0.6 s with the GIL held; in the executor's thread, the first cloud would stop the
# command stream that long, so it is imported in a thread of its own when the subscription
# is made, and clouds that arrive before it is done are skipped (logged).
CLOUD_LIBRARY = 'scipy.spatial'

# [s] a constraint set that arrives through both subscriptions within this time is one.
DUPLICATE_WINDOW = 2.0

# The parameters SceneInputs checks and applies.
SCENE_PARAMETERS = frozenset((
    'constraints', 'self_collision', 'collision_clearance', 'srdf_path',
    'robot_description_semantic', 'pointcloud_topic', 'pointcloud_voxel_size',
    'pointcloud_rate_hz'))


def import_beside(module):
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


class SemanticTopic:
    """/robot_description_semantic (transient local, as MoveIt publishes it), subscribed to
    only when no SRDF parameter is set. ``text``: what arrived during start-up;
    ``on_text``: callable(text) for what arrives once the node runs (None: keep it in text).
    """

    def __init__(self, node, values, sources):
        self._node = node
        self.text = None
        self.on_text = None
        self.subscription = None
        if sources.topic_wanted(values):
            self.subscription = node.create_subscription(
                String, SEMANTIC_TOPIC, node.guarded(SEMANTIC_TOPIC, self._on_message),
                DESCRIPTION_QOS)
        self._since = time.monotonic()

    def _on_message(self, msg):
        if self.on_text is not None:
            self.on_text(msg.data)
        elif msg.data.strip():
            self.text = msg.data

    def wait(self, discovery, timeout):
        """Return the SRDF text that arrived within ``timeout`` [s] of the subscription, or
        None; gives up ``discovery`` [s] after it when no publisher is known."""
        if self.subscription is None:
            return None
        executor = SingleThreadedExecutor(context=self._node.context)
        executor.add_node(self._node)
        try:
            while self.text is None and not stop_requested():
                elapsed = time.monotonic() - self._since
                if elapsed >= timeout or (elapsed >= discovery and
                                          not self._node.count_publishers(SEMANTIC_TOPIC)):
                    break
                executor.spin_once(timeout_sec=0.05)
        finally:
            executor.remove_node(self._node)
            executor.shutdown()
        return self.text


class SceneInputs:
    """Constraints, obstacles, clouds and the SRDF -> the collision guard and the loop.

    node: the Node; loop: ControlLoop; guard: CollisionGuard; constraints: ConstraintSet;
    sources: description.SrdfSources; semantic: SemanticTopic; values: the node's parameter
    values; frame_to_base: callable frame -> (4, 4) [m]; report: Reporter; log:
    callable(level, text); time: conversions.LoopTime; timings: health.Timings.
    """

    def __init__(self, node, loop, guard, constraints, sources, semantic, values,
                 frame_to_base, report, log, time, timings):
        self._node, self._loop, self._guard = node, loop, guard
        self._constraints, self._sources = constraints, sources
        self._values, self._frame_to_base = values, frame_to_base
        self._report, self._log, self._time, self._timings = report, log, time, timings
        self._specs = None                  # constraint specs checked, not yet applied
        self._srdf = None                   # (source, description) checked, not yet applied
        self.set_constraint_specs(constraints.parse(values['constraints']))
        # Transient local, so that a set latched while the node starts is not lost; and
        # volatile, for publishers that are (ros2 topic pub, RViz tools): a transient-local
        # reader does not match a volatile writer. A latched set reaches both: the second
        # copy is dropped (``_on_constraints``).
        self._last_set = (None, None, -1.0)      # (subscription, text, monotonic time)
        for durable in (True, False):
            node.create_subscription(
                String, 'constraints', node.guarded('constraints', lambda msg, d=durable:
                                                    self._on_constraints(msg, d)),
                CONSTRAINTS_QOS if durable else INPUT_QOS,
                event_callbacks=SubscriptionEventCallbacks(incompatible_qos=lambda _: None)
                if durable else None)
        # keep_out_markers: the obstacles topic of earlier versions, its own scene source (a
        # DELETEALL on one topic leaves the other's obstacles).
        for topic in ('obstacles', 'keep_out_markers'):
            node.create_subscription(MarkerArray, topic, node.guarded(
                topic, lambda msg, topic=topic: self._on_obstacles(msg, topic)), INPUT_QOS)
        self._cloud_sub = None
        self._cloud_ready = None            # Event: CLOUD_LIBRARY imported
        self._cloud_gate = RateGate(values['pointcloud_rate_hz'])
        self._subscribe_cloud(values['pointcloud_topic'])
        semantic.on_text = self._on_semantic

    def solver_constraints(self):
        """The constraint objects the solver respects: the YAML's and the collision guard's."""
        return list(self._constraints.objects) + [self._guard.constraint]

    def set_constraint_specs(self, specs):
        """Apply schema entries: objects to the solver, obstacles to the scene (GoalError:
        nothing changes)."""
        objects, obstacles, drawn = self._constraints.build(specs)
        self._loop.set_constraints(objects + [self._guard.constraint])
        self._guard.replace(obstacles, 'constraints')
        constraints = self._constraints
        constraints.objects, constraints.obstacles = objects, obstacles
        constraints.drawn, constraints.specs = drawn, list(specs)

    # ------------------------------------------------------------------ parameters
    def check(self, changes, values):
        """Refuse (SmcIkError) a scene parameter change that cannot be applied."""
        if changes.get('self_collision') and not self._guard.has_geometry:
            raise ParameterError('self_collision: the URDF has no <collision> geometry, so the '
                                 'robot cannot be checked against itself')
        self._srdf = self._specs = None
        if {'srdf_path', 'robot_description_semantic'} & set(changes):
            source, where, _ = self._sources.choose(values)
            if source is not None:
                parse_srdf(source)              # ModelError: refused with its reason
            self._srdf = (source, where)
        if 'constraints' in changes:
            specs = self._constraints.parse(changes['constraints'])
            self._constraints.build(specs)                  # frames, links: GoalError
            self._specs = specs

    def apply(self, changes, values):
        """Apply a checked scene parameter change."""
        guard = self._guard
        if self._specs is not None:
            self.set_constraint_specs(self._specs)
        changed = []
        if 'self_collision' in changes and changes['self_collision'] != guard.self_collision:
            guard.set_self_collision(changes['self_collision'])
            changed.append(f'self-collision {"on" if guard.self_collision else "off"}')
        if 'collision_clearance' in changes:
            guard.update_settings(clearance=changes['collision_clearance'])
            changed.append(f'clearance {guard.settings.clearance:g} m')
        if changed:
            self._loop.set_constraints(self.solver_constraints())
            self._log('info', 'collision settings changed: ' + ', '.join(changed))
        if self._srdf is not None and self._srdf[0] != self._sources.applied:
            self._sources.applied = self._srdf[0]
            guard.start_srdf_update(*self._srdf)
            self._log('info', f'recomputing the self-collision pairs for {self._srdf[1]} '
                      '(applied when ready)')
        if 'pointcloud_voxel_size' in changes:
            guard.update_settings(voxel_size=changes['pointcloud_voxel_size'])
        if 'pointcloud_rate_hz' in changes:
            self._cloud_gate.rate_hz = values['pointcloud_rate_hz']
        if 'pointcloud_topic' in changes:
            self._subscribe_cloud(changes['pointcloud_topic'])

    # ------------------------------------------------------------------ messages
    def _on_constraints(self, msg, durable=False):
        via, text, when = self._last_set
        if via is not None and via != durable and text == msg.data and \
                time.monotonic() - when < DUPLICATE_WINDOW:
            return          # the same latched message through the other subscription
        self._last_set = (durable, msg.data, time.monotonic())
        constraints = self._constraints
        try:
            self.set_constraint_specs(constraints.parse(msg.data))
        except SmcIkError as exc:
            self._log('error', f'constraints refused, keeping the previous '
                      f'{len(constraints.specs)} entr(ies): {exc}')
            return
        self._log('info', f'constraints applied: {constraints.summary()}')

    def _on_obstacles(self, msg, topic):
        """Apply a MarkerArray of obstacles (``topic`` is also the scene source)."""
        guard = self._guard
        try:
            updates = obstacle_updates(msg, self._frame_to_base, self._loop.chain.base_link,
                                       topic)
            added, removed = guard.apply(updates, topic)
        except GoalError as exc:
            kind = getattr(exc, 'kind', 'update')
            self._report('error', f'{topic}:{kind}', (
                f'{topic} refused, keeping the previous scene ({len(guard.scene)} '
                f'obstacle(s)): {exc}'), interval=2.0)
            return
        self._report('info', f'{topic}:applied', (
            f'{topic}: {added} obstacle(s) added or changed, {removed} removed; the scene holds '
            f'{len(guard.scene)} ({guard.count(topic)} from {topic})'), interval=1.0,
            count=False)

    def _subscribe_cloud(self, topic):
        node = self._node
        if self._cloud_sub is not None:
            node.destroy_subscription(self._cloud_sub)
            self._cloud_sub = None
            self._guard.replace({}, 'pointcloud')
        if topic:
            self._cloud_ready = import_beside(CLOUD_LIBRARY)
            self._cloud_sub = node.create_subscription(
                PointCloud2, topic, node.guarded(topic, self._on_cloud), JOINT_STATES_QOS)

    def _on_cloud(self, msg):
        """Turn a PointCloud2 into the 'pointcloud' obstacle (at most pointcloud_rate_hz)."""
        topic = self._values['pointcloud_topic']
        if not self._cloud_ready.is_set():
            self._report('info', 'pointcloud:loading', (
                f'{topic}: cloud skipped while {CLOUD_LIBRARY} is imported beside the control '
                'tick (once, 0.3-0.6 s)'), interval=1.0)
            return
        if not self._cloud_gate(self._time.now()[1]):
            return
        started = time.perf_counter()
        try:
            points = pointcloud2_to_xyz(msg, topic)
            frame = self._frame_to_base(msg.header.frame_id or self._loop.chain.base_link)
        except GoalError as exc:
            self._report('error', f'pointcloud:{Reporter.key_of("", str(exc))}', (
                f'{topic} refused, keeping the previous cloud obstacle: {exc}'), interval=5.0)
            return
        points = points @ frame[:3, :3].T + frame[:3, 3]
        spheres = self._guard.set_pointcloud(points, self._loop.current_state())
        took = time.perf_counter() - started
        self._timings.add('cloud', took)
        self._report('info', 'pointcloud', (
            f'{topic}: {len(points)} points -> {spheres} voxel sphere(s) of '
            f'{self._values["pointcloud_voxel_size"]:g} m (the robot\'s own removed) in '
            f'{1e3 * took:.1f} ms'), interval=10.0, count=False)

    def _on_semantic(self, text):
        """An SRDF on /robot_description_semantic while the node runs."""
        if not self._sources.take_topic(text, self._values):
            return
        try:
            started = self._guard.start_srdf_update(text, f'the {SEMANTIC_TOPIC} topic')
        except SmcIkError as exc:
            self._log('error', f'{SEMANTIC_TOPIC} refused: {exc}')
            return
        if started:
            self._sources.applied = text
            self._log('info', f'{SEMANTIC_TOPIC} arrived: recomputing the self-collision '
                      'pairs (applied when ready)')
