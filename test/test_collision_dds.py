"""Collision avoidance end to end: smcik_node as a process over real DDS, the arm played here.

The node runs with config/arm.yaml on the demo arm (urdf/smcik_arm.urdf: primitive collision
geometry, its SRDF found beside it, self-collision on by default). This process publishes
joint_states (ArmPlayer in 'follow' mode: an arm that tracks the commands), obstacles on the
``obstacles`` topic and goals, and checks every command, and sub-steps between consecutive
commands, with python-fcl on the URDF's own collision shapes (collision_helpers.FclArm:
yourdfpy's FK, FCL's exact primitives; nothing of smcik_ros' covers or kinematics), the
self-collision pairs read from the SRDF here. Waiting is on conditions with timeouts.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed for the graph-level tests')
fcl = pytest.importorskip('fcl', reason='python-fcl is the independent collision checker')

from geometry_msgs.msg import Point, PointStamped  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.parameter_client import AsyncParameterClient  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from collision_helpers import FclArm, substeps, write_two_link_urdf  # noqa: E402
from conftest import assert_in_fresh_interpreter, private_domain_id  # noqa: E402
from ros_helpers import (REPO_ROOT, ArmPlayer, dds_fixtures, read_log,  # noqa: E402
                         start_node_process, stop_process, stream_ratios, wait_for, wait_for_log)
from smcik_ros.model import Chain  # noqa: E402

pytestmark = pytest.mark.ros

DOMAIN_ID = private_domain_id(os.getpid() + 23)
URDF = REPO_ROOT / 'urdf' / 'smcik_arm.urdf'
SRDF = REPO_ROOT / 'urdf' / 'smcik_arm.srdf'
NODE_PARAMETERS = ['smcik_node:smc.seed:=3', 'smcik_node:status_rate_hz:=10.0']
SUBSTEP = 0.002       # [rad] largest joint change between two FCL-checked configurations
SLACK = 1e-6


ros_env, context, probe = dds_fixtures(DOMAIN_ID)


@pytest.fixture(scope='module')
def chain():
    return Chain.from_urdf(str(URDF), 'base_link', 'tool0')


@pytest.fixture(scope='module')
def fcl_arm():
    return FclArm(URDF, 'base_link', SRDF)


def fcl_box(center, size):
    return fcl.CollisionObject(fcl.Box(*size), fcl.Transform(np.eye(3), np.asarray(center)))


def fcl_sphere(center, radius):
    return fcl.CollisionObject(fcl.Sphere(radius), fcl.Transform(np.eye(3), np.asarray(center)))


def obstacle_marker(kind, marker_id, center, scale, frame='base_link', ns='test'):
    marker = Marker(ns=ns, id=marker_id, type=kind, action=Marker.ADD)
    marker.header.frame_id = frame
    marker.pose.position = Point(x=float(center[0]), y=float(center[1]), z=float(center[2]))
    marker.pose.orientation.w = 1.0
    marker.scale.x, marker.scale.y, marker.scale.z = (float(s) for s in scale)
    return marker


def latest_status(probe):
    items = probe.snapshot(probe.status)
    return json.loads(items[-1].data) if items else None


class Session:
    """One smcik_node process and the arm player (following the commands from q0)."""

    def __init__(self, ros_env, probe, name, q0, parameters=()):
        env, log_dir = ros_env
        self.probe = probe
        with probe.lock:
            del probe.commands[:]
            del probe.status[:]
            del probe.collision[:]
        self.log = log_dir / f'{name}.log'
        self.player = None
        self.proc = start_node_process('smcik_ros.node', env, self.log,
                                       parameters=NODE_PARAMETERS + list(parameters))
        try:
            self.player = ArmPlayer(probe, ['joint1', 'joint2', 'joint3', 'joint4', 'joint5',
                                            'joint6', 'joint7'], q0)
            self.player.set('follow', q0)
            self.obstacles = probe.publisher(MarkerArray, 'obstacles')
            self.point = probe.publisher(PointStamped, 'target_point')
            ok = wait_for(lambda: probe.commands or self.proc.poll() is not None, 30.0)
            if not ok or self.proc.poll() is not None:
                pytest.fail('smcik_node did not start:\n' + read_log(self.log))
            assert probe.wait_matched(self.obstacles) and probe.wait_matched(self.point)
        except BaseException:
            self.close()        # the fixture only closes the sessions it was given
            raise

    def publish_point(self, position):
        msg = PointStamped()
        msg.header.frame_id = 'base_link'
        msg.header.stamp = self.probe.get_clock().now().to_msg()
        msg.point = Point(x=float(position[0]), y=float(position[1]), z=float(position[2]))
        self.point.publish(msg)

    def settled(self, seconds=1.0):
        """True when the last ``seconds`` of commands are one configuration at rest."""
        received, _, q = self.probe.command_stream(time.monotonic() - seconds)
        # At least 10 commands (a loaded machine slows the node's 100 Hz timer).
        return len(q) >= 10 and np.all(q == q[-1]) and \
            not np.any(self.probe.last_command().velocity)

    def close(self):
        if self.player is not None:
            self.player.set('silent')
            self.probe.destroy_timer(self.player.timer)
            self.player = None
        return stop_process(self.proc)


@pytest.fixture
def session(ros_env, probe):
    sessions = []

    def make(name, q0, parameters=()):
        sessions.append(Session(ros_env, probe, name, q0, parameters))
        return sessions[-1]
    yield make
    for s in sessions:
        s.close()


def assert_limits(chain, stamps, q, session=None, since=0.0):
    """Check positions, velocities and accelerations from the header stamps like a judge.

    With ``session``: when the node logged a joint_states stale episode (the arm player's timer
    starved on a loaded machine), the stream restarts from the measurement by design (a resync,
    docs/node.md); it is split there (commands at rest that jump) and each part is checked from
    rest, as test_control_loop does at resyncs."""
    velocity = np.array(chain.velocity_limits) * 0.5      # config/arm.yaml velocity_scale
    assert np.all(q >= chain.lower - 1e-9) and np.all(q <= chain.upper + 1e-9)
    assert np.all(np.isfinite(q))
    cuts = [0]
    if session is not None and 'joint_states resumed after' in read_log(session.log):
        with session.probe.lock:
            items = [m for t, m in session.probe.commands if t >= since]
        at_rest = np.array([not np.any(m.velocity) for m in items[:len(q)]])   # same order
        jumps = np.r_[False, np.any(q[1:] != q[:-1], axis=1)]
        cuts += [k for k in np.flatnonzero(at_rest & jumps) if k > 0]
    cuts.append(len(q))
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a == 0:   # the window may start mid-motion: accelerations from its 2nd velocity on
            dt = np.diff(stamps[a:b]) * 1e-9
            v = np.diff(q[a:b], axis=0) / dt[:, None]
            v_ratio = float(np.max(np.abs(v) / velocity)) if len(v) else 0.0
            acc = np.diff(v, axis=0) / dt[1:, None]
            a_ratio = float(np.max(np.abs(acc) / 3.0)) if len(acc) else 0.0
        else:        # a resync: the stream restarts at rest
            v_ratio, a_ratio = stream_ratios(stamps[a:b], q[a:b], velocity, 3.0)
        assert v_ratio <= 1.0 + SLACK and a_ratio <= 1.0 + SLACK, (v_ratio, a_ratio, len(cuts))


# ---------------------------------------------------------------------------- tests
def test_obstacle_in_front_of_a_moving_arm(session, chain, fcl_arm):
    """A box appears on the tool's path while the arm moves: the arm goes around it and
    reaches the goal; no command, nor any sub-step between two, touches it (FCL).

    Reached, not merely stopped at the margin: collision_detour is on (config/arm.yaml) and
    the goal has a free path round the box (the start and goal configurations are clear of
    it, the box covers only the middle of the straight move), so a held arm plans a detour
    and follows it; stopping short would be the detour failing."""
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    q_goal = q0 + np.array([1.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    goal = chain.fk(q_goal)[:3, 3]
    center = chain.fk(0.5 * (q0 + q_goal))[:3, 3]
    size = (0.12, 0.12, 0.12)
    box = fcl_box(center, size)
    # The set-up: the straight joint motion to the goal passes through the box; the start and
    # the goal configurations are clear of it and of self-collision.
    path = substeps(np.array([q0, q_goal]), 0.02)
    assert any(fcl_arm.contacts(q, [box]) for q in path)
    assert not fcl_arm.contacts(q0, [box]) and not fcl_arm.contacts(q_goal, [box])
    s = session('in_front', q0)
    since = time.monotonic()
    s.publish_point(goal)
    assert wait_for(lambda: np.any(s.probe.last_command().velocity), 5.0), 'no motion'
    # The obstacle appears while the arm moves (the tool still well before the box).
    s.obstacles.publish(MarkerArray(markers=[obstacle_marker(Marker.CUBE, 1, center, size)]))
    assert wait_for_log(s.log, 'obstacles: 1 obstacle(s) added or changed'), read_log(s.log)

    def at_goal():
        tip = chain.fk(np.array(s.probe.last_command().position))[:3, 3]
        return np.linalg.norm(tip - goal) <= 1e-3
    reached = wait_for(at_goal, 25.0, interval=0.1)
    status = latest_status(s.probe)
    _, stamps, q = s.probe.command_stream(since)
    assert_limits(chain, stamps, q, s, since)
    checked = substeps(q, SUBSTEP)
    touching = [(k, c) for k, c in enumerate(fcl_arm.contacts(p, [box]) for p in checked) if c]
    assert not touching, (f'{len(touching)} of {len(checked)} checked configurations touch: '
                          f'first {touching[0]}')
    assert reached, (f'the goal was not reached round the box: status {status}\n'
                     + read_log(s.log)[-3000:])
    assert status['obstacles'] == 1 and status['self_collision'] is True
    assert status['fallbacks'] + status['holds'] > 0, 'the box was never in the way'
    assert fcl_arm.distance(q[-1], box) > 0.0


def test_an_obstacle_published_onto_the_arm_is_not_driven_deeper(session, chain, fcl_arm):
    """A sphere appears over the forearm's side; a goal pulls the tool into it: the arm holds
    or slides along it towards the goal, never deeper (the sphere's centre, outside the
    forearm, never gets nearer to the arm's shapes by FCL); a goal away from it: the arm moves
    out of it."""
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    elbow = chain.fk(q0, link='link4')[:3, 3]
    center, radius = elbow + np.array([0.0, 0.1, 0.0]), 0.08   # overlaps the forearm
    core = fcl_sphere(center, 1e-4)
    start_depth = fcl_arm.distance(q0, core)
    assert 0.0 < start_depth < radius - 0.01, 'the set-up: the sphere overlaps the arm'
    s = session('onto', q0)
    since = time.monotonic()
    s.obstacles.publish(MarkerArray(markers=[
        obstacle_marker(Marker.SPHERE, 7, center, (2 * radius,) * 3)]))
    assert wait_for_log(s.log, 'obstacles: 1 obstacle(s) added or changed'), read_log(s.log)
    assert wait_for(lambda: (latest_status(s.probe) or {}).get('in_collision'), 5.0)
    assert 'in collision' in latest_status(s.probe)['collision_reason']
    # A goal through the sphere (the tool swept towards and beyond its side).
    tip = chain.fk(q0)[:3, 3]
    goal = tip + np.array([0.0, 0.35, -0.1])
    s.publish_point(goal)
    # The goal lies beyond the sphere: the arm holds where going on would drive it deeper, or
    # slides along it towards the goal (a slide may step back a little on the way round).
    settled = wait_for(lambda: s.settled(1.5), 8.0, interval=0.1)
    _, _, pulled = s.probe.command_stream(since)
    to_goal = np.linalg.norm([chain.fk(p)[:3, 3] - goal for p in pulled], axis=1)
    assert settled or to_goal[-1] < to_goal[0] - 0.01, (
        f'the arm neither came to rest against the sphere nor slid along it towards the goal '
        f'({1e3 * to_goal[0]:.0f} -> {1e3 * to_goal[-1]:.0f} mm): {latest_status(s.probe)}')
    # A goal away from it: out of the sphere. (FCL runs at the end: its GIL-bound loop here
    # would starve the arm player's timer and make joint_states stale.)
    s.publish_point(tip + np.array([0.0, -0.3, 0.0]))
    assert wait_for(lambda: not (latest_status(s.probe) or {}).get('in_collision', True)
                    and s.settled(0.5), 15.0, interval=0.1), latest_status(s.probe)
    _, stamps, q = s.probe.command_stream(since)
    assert_limits(chain, stamps, q, s, since)
    depth = np.array([fcl_arm.distance(p, core) for p in substeps(pulled, 0.01)])
    assert np.all(depth > 0.0)
    assert depth.min() >= start_depth - 2e-3, (
        f'the arm was driven deeper: the centre came {1e3 * (start_depth - depth.min()):.1f} '
        'mm nearer its shapes')
    depth = np.array([fcl_arm.distance(p, core) for p in substeps(q, 0.01)])
    assert depth.min() >= start_depth - 2e-3
    assert fcl_arm.distance(q[-1], fcl_sphere(center, radius)) > 0.0, 'still in the sphere'


def test_a_base_on_a_table_gets_finer_covers_at_the_first_command(session, chain, fcl_arm):
    """The constraint YAML puts a table 7.5 mm under the base: the base's 1 cm cover reaches
    into it, so the arm rests in contact at its first command. The node says so, computes
    the base's cover again in the background (6 mm, then 4 mm while still in contact) and
    swaps it in: the contact is gone from ~/status; the command stream holds its limits
    across the swaps and a goal after them, and no command comes near the table (FCL on the
    URDF's shapes)."""
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    table = ('[{type: obstacle, shape: box, size: [1.2, 1.2, 0.1], position: [0, 0, -0.0575], '
             'id: table}]')
    since = time.monotonic()
    s = session('table', q0, [f'smcik_node:constraints:="{table}"'])
    assert wait_for_log(s.log, 'the arm rests in contact at its first command', 10.0), \
        read_log(s.log)
    text = read_log(s.log)
    assert 'base_link / constraints/table -' in text, text
    assert 'tolerance 0.006 then 0.004 m (collision_contact_tolerance' in text, text
    assert wait_for_log(s.log, 'covers of base_link computed again at tolerance 0.004 m',
                        60.0), read_log(s.log)
    assert 'the arm now rests in contact at base_link / constraints/table' in read_log(s.log)
    assert 'the arm no longer rests in contact' in read_log(s.log), read_log(s.log)
    assert wait_for(lambda: (latest_status(s.probe) or {}).get('in_collision') is False
                    and (latest_status(s.probe) or {}).get('min_distance', -1) > 0.0, 5.0), \
        latest_status(s.probe)
    tip = chain.fk(q0)[:3, 3]
    s.publish_point(tip + np.array([0.05, 0.1, -0.05]))
    assert wait_for(lambda: np.any(s.probe.last_command().velocity), 5.0), read_log(s.log)
    wait_for(lambda: s.settled(1.0), 10.0, interval=0.1)
    _, stamps, q = s.probe.command_stream(since)
    assert len(q) > 100 and np.ptp(q, axis=0).max() > 0.05, 'the arm did not move'
    assert_limits(chain, stamps, q, s, since)
    box = fcl_box((0.0, 0.0, -0.058), (1.2, 1.2, 0.1))
    clear = np.array([fcl_arm.distance(p, box) for p in substeps(q, 0.01)])
    assert clear.min() > 0.005, clear.min()


# name: (marker, what the refusal says, its log kind: refusals are logged once per kind per
# 2 s, conversions.obstacle_updates). The two 'shape' refusals are apart so that only the
# second waits.
MALFORMED = {
    'negative size': (lambda: obstacle_marker(Marker.CUBE, 2, (0.5, 0.5, 0.5),
                                              (0.1, -0.1, 0.1)), 'positive', 'shape'),
    'unknown frame': (lambda: obstacle_marker(Marker.SPHERE, 4, (0.5, 0.5, 0.5),
                                              (0.1, 0.1, 0.1), frame='nowhere'), 'nowhere',
                      'frame'),
    'unsupported type': (lambda: obstacle_marker(Marker.ARROW, 5, (0.5, 0.5, 0.5),
                                                 (0.1, 0.1, 0.1)), 'unsupported marker type',
                         'type'),
    'NaN position': (lambda: obstacle_marker(Marker.SPHERE, 3, (0.5, float('nan'), 0.5),
                                             (0.1, 0.1, 0.1)), 'finite', 'shape'),
}


def test_malformed_obstacles_are_refused_and_the_scene_kept(session, chain):
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    s = session('malformed', q0)
    good = obstacle_marker(Marker.CUBE, 1, (-0.6, -0.6, 0.3), (0.2, 0.2, 0.2))
    s.obstacles.publish(MarkerArray(markers=[good]))
    assert wait_for_log(s.log, 'obstacles: 1 obstacle(s) added or changed'), read_log(s.log)
    logged = {}                 # kind: when its last refusal was logged (monotonic)
    for name, (make, detail, kind) in MALFORMED.items():
        time.sleep(max(0.0, logged.get(kind, -10.0) + 2.1 - time.monotonic()))
        start = len(read_log(s.log))
        # A good marker in the same message is refused with it: nothing of it is applied.
        other = obstacle_marker(Marker.SPHERE, 9, (0.6, -0.6, 0.3), (0.1, 0.1, 0.1))
        s.obstacles.publish(MarkerArray(markers=[other, make()]))
        assert wait_for_log(s.log, 'obstacles refused, keeping the previous scene (1 ',
                            start=start), f'{name}: {read_log(s.log)[start:]}'
        logged[kind] = time.monotonic()
        line = [ln for ln in read_log(s.log)[start:].splitlines() if 'refused' in ln][0]
        assert 'obstacles[1]' in line and detail in line, line
        assert s.proc.poll() is None, f'smcik_node died on {name}'
    # Still one obstacle, drawn on ~/collision; still commanding.
    since = time.monotonic()
    assert wait_for(lambda: len(s.probe.command_stream(since)[0]) > 20, 5.0)
    assert wait_for(lambda: (latest_status(s.probe) or {}).get('obstacles') == 1, 5.0)

    def drawn():
        arrays = s.probe.snapshot(s.probe.collision, since=time.monotonic() - 0.5)
        return arrays and [m for m in arrays[-1].markers if m.ns == 'collision_obstacles']
    shown = wait_for(drawn, 5.0)
    assert shown and len(shown) == 1 and shown[0].type == Marker.CUBE
    assert shown[0].pose.position.x == pytest.approx(-0.6)


def test_a_point_cloud_becomes_an_obstacle_without_the_robots_own_points(session, chain):
    """PointCloud2 on pointcloud_topic (packed here with numpy, float32, a padding field):
    a cluster away from the arm becomes voxel spheres; points on the arm itself are dropped,
    so the arm is not in collision with its own image."""
    from sensor_msgs.msg import PointCloud2, PointField
    from rclpy.qos import qos_profile_sensor_data

    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    s = session('cloud', q0, ['smcik_node:pointcloud_topic:=cloud',
                              'smcik_node:pointcloud_rate_hz:=20.0'])
    rng = np.random.default_rng(0)
    cluster = rng.uniform(-0.05, 0.05, (400, 3)) + [-0.5, -0.5, 0.4]
    on_arm = np.array([chain.fk(q0, link=name)[:3, 3] for name in ('link3', 'link4', 'link5')])
    points = np.vstack([cluster, on_arm, [[np.nan, 0.0, 0.0]]]).astype('<f4')
    data = np.zeros(len(points), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                        ('intensity', '<f4')])
    data['x'], data['y'], data['z'] = points.T
    msg = PointCloud2(height=1, width=len(points), point_step=16, row_step=16 * len(points),
                      is_bigendian=False, is_dense=False, data=data.tobytes())
    msg.fields = [PointField(name=n, offset=4 * k, datatype=PointField.FLOAT32, count=1)
                  for k, n in enumerate(('x', 'y', 'z', 'intensity'))]
    msg.header.frame_id = 'base_link'
    publisher = s.probe.create_publisher(PointCloud2, 'cloud', qos_profile_sensor_data)
    assert s.probe.wait_matched(publisher)
    line = None
    for _ in range(50):      # best effort: publish until the node has taken one
        publisher.publish(msg)
        if wait_for_log(s.log, 'cloud: 403 points -> ', timeout=0.2):
            line = [ln for ln in read_log(s.log).splitlines() if 'cloud: 403 points' in ln][0]
            break
    assert line is not None, read_log(s.log)
    spheres = int(line.split('-> ')[1].split()[0])
    assert 8 <= spheres <= 125, line         # a 10 cm cluster: at most 5 voxels a side
    assert wait_for(lambda: (latest_status(s.probe) or {}).get('obstacles') == 1, 5.0)
    status = latest_status(s.probe)
    assert not status['in_collision'], status

    def drawn():
        arrays = s.probe.snapshot(s.probe.collision, since=time.monotonic() - 0.5)
        return arrays and [m for m in arrays[-1].markers if m.ns == 'collision_obstacles'
                           and m.type == Marker.SPHERE_LIST]
    shown = wait_for(drawn, 5.0)
    assert shown and len(shown[0].points) == spheres


def test_the_cloud_library_is_imported_beside_the_executor():
    """A cloud subscription imports the conversion's KD-tree library in a thread of its own
    (0.3-0.6 s with the GIL: in the executor's thread the first cloud would stop the command
    stream that long). An import hook records which thread imports it."""
    code = (
        'import sys, threading\n'
        'import smcik_ros.node\n'
        'import smcik_ros.ros.scene as scene\n'
        'assert scene.CLOUD_LIBRARY not in sys.modules, "imported with the node"\n'
        'who = []\n'
        'class Hook:\n'
        '    def find_spec(self, name, path=None, target=None):\n'
        '        if name == scene.CLOUD_LIBRARY:\n'
        '            who.append(threading.get_ident())\n'
        '        return None\n'
        'sys.meta_path.insert(0, Hook())\n'
        'done = scene.import_beside(scene.CLOUD_LIBRARY)\n'
        'assert done.wait(120) and scene.CLOUD_LIBRARY in sys.modules\n'
        'assert who and threading.get_ident() not in who, who\n'
        'assert scene.import_beside(scene.CLOUD_LIBRARY).is_set()\n')
    assert_in_fresh_interpreter(code)


def test_collision_parameters_are_declared_and_guarded(session, probe):
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    session('parameters', q0)
    client = AsyncParameterClient(probe, 'smcik_node')
    assert client.wait_for_services(timeout_sec=10.0)
    names = ['self_collision', 'srdf_path', 'package_paths', 'collision_padding',
             'robot_description_semantic', 'collision_clearance', 'pointcloud_topic',
             'pointcloud_voxel_size', 'collision_contact_tolerance']
    future = client.describe_parameters(names)
    assert wait_for(future.done, 10.0)
    types = {d.name: d.type for d in future.result().descriptors}
    assert types == {
        'self_collision': Parameter.Type.BOOL.value, 'srdf_path': Parameter.Type.STRING.value,
        'package_paths': Parameter.Type.STRING_ARRAY.value,
        'collision_padding': Parameter.Type.DOUBLE.value,
        'robot_description_semantic': Parameter.Type.STRING.value,
        'collision_clearance': Parameter.Type.DOUBLE.value,
        'pointcloud_topic': Parameter.Type.STRING.value,
        'pointcloud_voxel_size': Parameter.Type.DOUBLE.value,
        'collision_contact_tolerance': Parameter.Type.DOUBLE.value}
    descriptions = {d.name: d.description for d in future.result().descriptors}
    assert '[m]' in descriptions['collision_padding']
    fixed = {'package_paths', 'collision_padding', 'collision_contact_tolerance'}
    # What the covers and pair tables are built for is read-only (fixed at start-up) ...
    assert {d.name for d in future.result().descriptors if d.read_only} == fixed
    assert all('fixed at start-up' in descriptions[name] for name in fixed)
    # ... and ROS refuses a set of it with its reason.
    future = client.set_parameters([Parameter('collision_padding', value=0.01),
                                    Parameter('package_paths', value=['/tmp']),
                                    Parameter('collision_contact_tolerance', value=0.003)])
    assert wait_for(future.done, 10.0)
    results = future.result().results
    assert all(not r.successful and 'read-only' in r.reason for r in results), results
    future = client.set_parameters([Parameter('collision_clearance', value=0.02)])
    assert wait_for(future.done, 10.0) and future.result().results[0].successful


def test_a_missing_mesh_is_warned_about_and_the_node_runs(ros_env, tmp_path):
    """A collision mesh that cannot be found never stops the node: one warning per link
    names the link and the URI (and package_paths, the way to fix it), and the node gets
    ready without that link's geometry."""
    env, log_dir = ros_env
    uri = 'package://no_such_package/meshes/link.stl'
    urdf = write_two_link_urdf(str(tmp_path), uri, name='missing_mesh')
    log = log_dir / 'missing_mesh.log'
    proc = start_node_process('smcik_ros.node', env, log, parameters=[
        f'smcik_node:urdf_path:={urdf}', 'smcik_node:base_link:=base_link',
        'smcik_node:tip_link:=tool0', 'smcik_node:start_without_joint_states:=false'])
    try:
        assert wait_for_log(log, 'ready: solver', 60.0), read_log(log)
        assert proc.poll() is None, read_log(log)
        text = read_log(log)
        for link in ('link1', 'link2'):
            said = [line for line in text.splitlines() if f"link '{link}': collision mesh" in
                    line]
            assert len(said) == 1, text
            assert uri in said[0] and 'package_paths' in said[0] and 'WARN' in said[0], said
    finally:
        stop_process(proc)


def test_no_collision_geometry_ignores_self_collision_with_one_line(ros_env, tmp_path):
    """A URDF without <collision>: self_collision (true in config/arm.yaml) is ignored with
    one info line; the node runs."""
    env, log_dir = ros_env
    from arm_urdfs import ur5_like_urdf
    path = tmp_path / 'bare.urdf'
    text = ur5_like_urdf()
    assert '<collision' not in text
    path.write_text(text)
    log = log_dir / 'bare.log'
    proc = start_node_process('smcik_ros.node', env, log, parameters=[
        f'smcik_node:urdf_path:={path}', 'smcik_node:base_link:=base_link',
        'smcik_node:tip_link:=tool0'])
    try:
        assert wait_for_log(log, 'no <collision> geometry: self_collision is ignored', 30.0), \
            read_log(log)
        assert proc.poll() is None, read_log(log)
        assert read_log(log).count('self_collision is ignored') == 1
    finally:
        stop_process(proc)


if __name__ == '__main__':
    sys.exit(pytest.main([__file__, '-q']))
