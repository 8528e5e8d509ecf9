"""The node's outputs: commands, markers, the alternatives, and its health.

``CommandOutput``: the command of each tick as JointState (stamped with the time its limits
were applied for), JointTrajectory (one point, zero stamp: start on arrival) or
Float64MultiArray on ``command_topic``; with a floating base, ``BaseOutput``: the base pose
that goes with each command on ~/base_pose (PoseStamped in world_frame, the command's stamp)
and as the TF world_frame -> base_link when tf2_ros is installed. ``MarkerOutput``:
~/particles (particles, MAP chain, each tip's target, ghost arms, the centre of mass, support
polygons and contacts) and ~/collision (obstacles, closest pair, covers), rebuilt only when
what they show changed (``schedule.MarkerSchedule``). ``AlternativesOutput``: ~/alternatives, from
the control wing's ``AlternativesBook``. ``HealthOutput``: /diagnostics
(diagnostic_msgs/DiagnosticArray) and its JSON mirror ~/status, both from one
``health.Health.status``.
"""

import json
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, TransformStamped
import numpy as np
from rclpy.duration import Duration
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs.msg import MarkerArray

from .conversions import (make_alternatives_trajectory, make_float64_multi_array,
                          make_joint_state, make_joint_trajectory, matrix_to_pose,
                          nanoseconds_to_stamp)
from .interface import (BASE_POSE_QOS, COMMAND_QOS, COMMAND_TYPES, DIAGNOSTICS_QOS, INPUT_QOS,
                        MARKER_QOS)
from .parameters import check_choice
from ..control.base import figure_view
from .markers import (alternative_markers, build_marker_array, collision_markers,
                      figure_markers, select_particles)
from .schedule import MarkerSchedule, marker_key

__all__ = ['CommandOutput', 'BaseOutput', 'MarkerOutput', 'AlternativesOutput',
           'HealthOutput']


class CommandOutput:
    """Publish the commands on ``command_topic`` as ``command_type`` (both changeable)."""

    PARAMETERS = frozenset(('command_type', 'command_topic'))

    @staticmethod
    def check(changes, values):
        """Refuse an unknown command_type (ParameterError naming the valid ones)."""
        check_choice('command_type', values['command_type'], COMMAND_TYPES)

    def __init__(self, node, joint_names, values, base=None):
        self._node = node
        self._names = list(joint_names)
        self.publisher = None
        self.rate_hz = values['rate_hz']
        self.base = base            # BaseOutput (floating base), or None
        self.apply({}, values)

    def apply(self, changes, values):
        """(Re)create the publisher for the command_type and command_topic in ``values``."""
        if self.publisher is not None:
            self._node.destroy_publisher(self.publisher)
        self.kind = values['command_type']
        self.publisher = self._node.create_publisher(
            COMMAND_TYPES[self.kind], values['command_topic'], COMMAND_QOS)

    def publish(self, command, stamp_ns):
        """Publish a control loop Command; ``stamp_ns``: the tick's time [ns, node clock].
        A floating base's pose goes out first: whoever pairs a command with its base pose
        (by stamp) has it when the command comes."""
        if self.base is not None and command.base is not None:
            self.base.publish(command.base, stamp_ns)
        if self.kind == 'joint_state':
            msg = make_joint_state(self._names, command.q, command.v,
                                   nanoseconds_to_stamp(stamp_ns))
        elif self.kind == 'joint_trajectory':
            # Zero stamp: joint_trajectory_controller starts it on arrival.
            msg = make_joint_trajectory(self._names, command.q, command.v, 1.0 / self.rate_hz)
        else:
            msg = make_float64_multi_array(command.q)
        self.publisher.publish(msg)

    def flush(self, timeout):
        """Wait up to ``timeout`` [s] until subscribers acknowledged the published commands
        and base poses (reliable QoS delivers the last, zero-velocity one only while the
        writer lives); return True when everything was acked."""
        publishers = [self.publisher] + ([self.base.publisher] if self.base is not None else [])
        try:
            return all([bool(p.wait_for_all_acked(Duration(seconds=timeout)))
                        for p in publishers])
        except Exception:  # noqa: BLE001 - an RMW without the call: nothing to wait on
            return False


class BaseOutput:
    """~/base_pose (PoseStamped in ``world_frame``) and the TF world_frame -> ``base_link`` of
    each command's floating base, stamped with the command's stamp (the tick's time: the
    JointState command's header stamp). The TF needs tf2_ros and ``publish_base_tf``;
    otherwise one info line says why there is none."""

    def __init__(self, node, world_frame, base_link, publish_tf, log):
        self._world, self._base_link = world_frame, base_link
        self.publisher = node.create_publisher(PoseStamped, '~/base_pose', BASE_POSE_QOS)
        self._tf = None
        if not publish_tf:
            log('info', 'publish_base_tf is false: no TF of the floating base (a state '
                'estimator owns it); ~/base_pose carries it')
            return
        try:
            import tf2_ros  # optional: a ROS install has it, PyPI does not
        except ImportError:
            log('info', f'tf2_ros not installed: no TF {world_frame} -> {base_link}; '
                '~/base_pose carries the base pose of each command')
            return
        self._tf = tf2_ros.TransformBroadcaster(node)

    def publish(self, base, stamp_ns):
        """Publish the (4, 4) base pose [m] that goes with the command stamped ``stamp_ns``."""
        stamp = nanoseconds_to_stamp(stamp_ns)
        msg = PoseStamped(pose=matrix_to_pose(base))
        msg.header.stamp, msg.header.frame_id = stamp, self._world
        self.publisher.publish(msg)
        if self._tf is not None:
            tf = TransformStamped()
            tf.header.stamp, tf.header.frame_id = stamp, self._world
            tf.child_frame_id = self._base_link
            p, o = msg.pose.position, msg.pose.orientation
            tf.transform.translation.x, tf.transform.translation.y = p.x, p.y
            tf.transform.translation.z = p.z
            tf.transform.rotation = o
            self._tf.sendTransform(tf)


class MarkerOutput:
    """~/particles and ~/collision at ``marker_rate_hz`` (see the module doc).

    chain, segments (markers.link_segments), loop, guard, constraints (ConstraintSet),
    alternatives (AlternativesOutput: its ghost arms), values (parameter values, read live),
    time (conversions.LoopTime), timings (health.Timings).
    """

    def __init__(self, node, chain, segments, loop, guard, constraints, alternatives, values,
                 time, timings):
        self._chain, self._segments, self._loop, self._guard = chain, segments, loop, guard
        self._constraints, self._alternatives = constraints, alternatives
        self._values, self._time, self._timings = values, time, timings
        self.schedule = MarkerSchedule()
        self._messages = ()              # the last (particles, collision) MarkerArrays
        self._shown = (0, 0, 0, False)   # targets, polygons, contacts, CoM drawn last
        self._particles = node.create_publisher(MarkerArray, '~/particles', MARKER_QOS)
        self._collision = node.create_publisher(MarkerArray, '~/collision', MARKER_QOS)

    def key(self):
        """Return what the markers are built from (``schedule.marker_key``)."""
        values = self._values
        return marker_key(self._loop, self._guard, self._constraints.drawn,
                          self._alternatives.book.published, values['max_marker_particles'],
                          values['collision_cover_markers'])

    def unchanged(self):
        """True when the markers would show nothing new (then the last ones are published
        again, restamped, once they are a second old); also while nothing is commanded."""
        return self._key_to_build() is None

    def _key_to_build(self):
        """Return the key of new markers to build, or None (see ``unchanged``)."""
        if self._loop.q is None:
            return None
        started, cpu = time.perf_counter(), time.thread_time()
        key = self.key()
        decision = self.schedule.decide(key, started)
        if decision == MarkerSchedule.BUILD:
            return key
        if decision == MarkerSchedule.REPUBLISH:
            stamp = nanoseconds_to_stamp(self._time.now()[0])
            particles, collision = self._messages
            for marker in particles.markers + collision.markers:
                marker.header.stamp = stamp
            self._publish()
            self.schedule.republished(started)
        self._timings.add('markers', time.perf_counter() - started, time.thread_time() - cpu)
        return None

    def tick(self):
        """Build and publish the markers, unless nothing changed since the last ones."""
        started, cpu = time.perf_counter(), time.thread_time()
        key = self._key_to_build()
        if key is None:
            return
        loop, chain, frame = self._loop, self._chain, self._chain.base_link
        info = loop.solver.last_info
        stamp = nanoseconds_to_stamp(self._time.now()[0])
        particles, weights = info.get('particles'), None
        positions = None
        if particles is not None and self._values['max_marker_particles'] > 0:
            chosen, weights = select_particles(particles, info.get('weights'),
                                               self._values['max_marker_particles'])
            positions = chain.link_poses(chosen)[..., :3, 3]
        map_q = info.get('map')
        state = loop.state
        goal = loop.goal
        targets = [None if tip is None else tip.display for tip in goal.tips] \
            if goal is not None else []
        view = figure_view(chain, loop.constraints_kept, state, loop.figure.floating)
        shown = (len([t for t in targets if t is not None]), len(view.polygons),
                 len(view.contacts), view.com is not None)
        array = build_marker_array(
            frame, stamp, particle_positions=positions, weights=weights,
            segments=self._segments,
            map_positions=chain.link_poses(state if map_q is None else map_q)[:, :3, 3],
            target=targets, clear=any(a > b for a, b in zip(self._shown, shown)))
        self._shown = shown
        array.markers.extend(figure_markers(
            frame, stamp, view.com, view.ground, view.polygons,
            [(p, c['held']) for p, c in zip(view.contact_poses, view.contacts)],
            view.com_margin is None or view.com_margin >= 0.0))
        array.markers.extend(self._alternatives.ghost_markers(frame, stamp))
        inputs = self._guard.marker_inputs(state,
                                           cover=self._values['collision_cover_markers'])
        inputs['obstacles'] = inputs['obstacles'] + self._constraints.drawn
        self._messages = (array, collision_markers(frame, stamp, **inputs))
        self._publish()
        self.schedule.sent(key, started)
        self._timings.add('markers', time.perf_counter() - started, time.thread_time() - cpu)

    def _publish(self):
        particles, collision = self._messages
        self._particles.publish(particles)
        self._collision.publish(collision)


class AlternativesOutput:
    """~/alternatives (JointTrajectory, one point per branch) and the ghost arms of the last
    published list; ``book``: the control wing's AlternativesBook."""

    def __init__(self, node, chain, book, time, timings):
        self._chain, self.book, self._time, self._timings = chain, book, time, timings
        self._shown = 0              # ghost arms drawn last time
        self._publisher = node.create_publisher(JointTrajectory, '~/alternatives', INPUT_QOS)

    def refresh(self, loop):
        """Compute the alternatives of the loop's solver; publish them when they changed."""
        _, now = self._time.now()
        goal_id = loop.goal.sequence if loop.goal is not None else 0
        started = time.perf_counter()
        needed = self.book.refresh(loop.solver, goal_id, loop.state, now)
        self._timings.add('alternatives', time.perf_counter() - started)
        self.publish(needed)

    def switch_off(self, note):
        """Stop computing them (publishing the empty list once if one was listed)."""
        _, now = self._time.now()
        self.publish(self.book.switch_off(now, note))

    def publish(self, needed):
        """Publish the book's current list when ``needed``."""
        if not needed:
            return
        ns, now = self._time.now()
        self._publisher.publish(make_alternatives_trajectory(
            self._chain.joint_names, self.book.current.q, nanoseconds_to_stamp(ns)))
        self.book.mark_published(now, ns)

    def ghost_markers(self, frame, stamp):
        """Return the ghost arms of the last published alternatives (markers.py)."""
        listed = self.book.published
        count = 0 if listed is None else len(listed)
        if count == 0 and self._shown == 0:
            return []
        positions = (self._chain.link_poses(listed.q)[..., :3, 3] if count
                     else np.zeros((0, 0, 3)))
        ok = [r.within_tolerance for r in listed.records] if count else []
        markers = alternative_markers(positions, ok, frame, stamp, self._shown)
        self._shown = count
        return markers


def _text(value):
    if isinstance(value, float):
        return f'{value:g}'
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(',', ':'))
    return 'null' if value is None else str(value)


class HealthOutput:
    """/diagnostics and ~/status from one ``health.Health.status`` at ``status_rate_hz``;
    while a goal is active, the main figures are logged every 5 s."""

    def __init__(self, node, health, hardware_id, time, report):
        self.health, self._time, self._report = health, time, report
        self._hardware_id = hardware_id
        self._status = node.create_publisher(String, '~/status', INPUT_QOS)
        self._diagnostics = node.create_publisher(DiagnosticArray, '/diagnostics',
                                                  DIAGNOSTICS_QOS)
        self.published = 0           # status ticks so far

    def tick(self):
        ns, now = self._time.now()
        status = self.health.status(now)
        self._status.publish(String(data=json.dumps(status, separators=(',', ':'))))
        array = DiagnosticArray()
        array.header.stamp = nanoseconds_to_stamp(ns)
        array.status = [DiagnosticStatus(
            level=bytes([entry.level]), name=entry.name, message=entry.message,
            hardware_id=self._hardware_id,
            values=[KeyValue(key=k, value=_text(v)) for k, v in entry.values.items()])
            for entry in self.health.diagnostics(status)]
        self._diagnostics.publish(array)
        self.published += 1
        if status['goal_id']:
            self._report('info', 'status', (
                f'goal {status["goal_id"]}: position error '
                f'{1e3 * (status["position_error"] or 0.0):.2f} mm, orientation error '
                f'{status["orientation_error"] or 0.0:.4f} rad, ESS {status["ess"]}, '
                f'{status["step_time_ms"]} ms/tick ({status["solver"]}), arm '
                f'{status["arm_state"]}, lead {status["lead"]}, limited by '
                f'{status["limited_by"]}'), interval=5.0, count=False)
