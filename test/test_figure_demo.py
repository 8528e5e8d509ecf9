"""The whole-figure demo (smcik_ros.figure_demo): its goals, checks, picture, and the demo
over DDS once the node has several tips and a floating base.

The goals are checked against yourdfpy's own forward kinematics and inertials (independent of
the Chain the demo uses), the hull against scipy's Qhull.
"""

import argparse
import os
import tempfile

import numpy as np
import pytest
from scipy.spatial import ConvexHull
import yaml
import yourdfpy

from smcik_ros import figure_demo
from smcik_ros.figure_demo import (COM_MARGIN, CONSTRAINTS, HANDS, SOLES, CommandCheck,
                                   Figure, convex_hull, inside_distance, make_goals)


@pytest.fixture(scope='module')
def figure():
    return Figure()


@pytest.fixture(scope='module')
def goals(figure):
    return make_goals(figure)


@pytest.fixture(scope='module')
def robot():
    return yourdfpy.URDF.load(str(figure_demo.URDF), build_scene_graph=True,
                              load_meshes=False, load_collision_meshes=False)


def _world(robot, values, base, link):
    robot.update_cfg({j: values.get(j, 0.0) for j in robot.actuated_joint_names})
    return base @ robot.get_transform(frame_to=link, frame_from='pelvis')


def _com(robot, values, base):
    robot.update_cfg({j: values.get(j, 0.0) for j in robot.actuated_joint_names})
    weighted, total = np.zeros(3), 0.0
    for link in robot.robot.links:
        if link.inertial is not None:
            pose = base @ robot.get_transform(frame_to=link.name, frame_from='pelvis')
            weighted += link.inertial.mass * (pose @ link.inertial.origin)[:3, 3]
            total += link.inertial.mass
    return weighted / total


def test_convex_hull_and_inside_distance_against_qhull():
    rng = np.random.default_rng(5)
    points = rng.normal(size=(40, 2))
    hull = convex_hull(points)
    reference = points[ConvexHull(points).vertices]          # counter-clockwise in 2-D
    assert len(hull) == len(reference)
    start = int(np.argmin(np.linalg.norm(reference - hull[0], axis=1)))
    np.testing.assert_allclose(np.roll(reference, -start, axis=0), hull, atol=1e-12)
    square = convex_hull([(0, 0), (1, 0), (1, 1), (0, 1), (0.5, 0.5)])
    assert inside_distance(square, (0.5, 0.5)) == pytest.approx(0.5)
    assert inside_distance(square, (0.9, 0.3)) == pytest.approx(0.1)
    assert inside_distance(square, (1.2, 0.5)) == pytest.approx(-0.2)


def test_goals_are_reachable_with_the_soles_planted(figure, goals, robot):
    """Each goal's configuration puts both soles where 'ready' has them (yourdfpy FK), keeps
    the whole figure's CoM inside the support polygon less the node's margin, and is within
    the joint limits; its hand targets are that configuration's hands."""
    ready, base0 = figure.ready, figure.ready_base
    anchors = {s: _world(robot, ready, base0, s) for s in SOLES}
    polygon = figure.support_polygon(ready, base0)
    limits = {j.name: (j.limit.lower, j.limit.upper) for j in robot.robot.joints
              if j.type != 'fixed'}
    assert [g.name for g in goals][2] == 'both hands low: crouch'
    for goal in goals:
        for sole in SOLES:
            np.testing.assert_allclose(_world(robot, goal.values, goal.base, sole),
                                       anchors[sole], atol=1e-9)
        com = _com(robot, goal.values, goal.base)
        assert inside_distance(polygon, com[:2]) > COM_MARGIN + 0.01, goal.name
        np.testing.assert_allclose(figure.center_of_mass(goal.values, goal.base), com,
                                   atol=1e-9)
        for joint, value in goal.values.items():
            lower, upper = limits[joint]
            assert lower <= value <= upper, (goal.name, joint)
        for hand, target in goal.targets.items():
            np.testing.assert_allclose(_world(robot, goal.values, goal.base, hand), target,
                                       atol=1e-9)


def test_the_low_goal_needs_a_crouch(figure, goals):
    """Standing at the ready height, no hand gets below the shoulders' lowest point minus the
    arm's length; the crouch goal's hands are lower, its pelvis ~20 cm lower, and the other
    goals keep the ready height (the side goals only move the arms)."""
    ready_z = figure.ready_base[2, 3]
    shoulder_low = ready_z + 0.10 + 0.28 * np.cos(0.9)       # waist pitch at its limit
    reach = 0.27 + 0.24 + 0.09
    crouch = goals[2]
    assert all(t[2, 3] < shoulder_low - reach - 0.05 for t in crouch.targets.values())
    assert crouch.base[2, 3] < ready_z - 0.15
    assert set(crouch.targets) == set(HANDS)
    for goal in (goals[0], goals[1], goals[3]):
        assert goal.base[2, 3] == pytest.approx(ready_z, abs=1e-9)
    assert [len(g.targets) for g in goals] == [1, 1, 2, 2]


def test_command_check_flags_each_broken_guarantee(figure):
    ready, base = figure.ready, figure.ready_base
    anchors = {s: figure.world(ready, base, s) for s in SOLES}
    check = CommandCheck(figure, anchors, figure.support_polygon(ready, base))
    check(ready, base)
    assert check.failures() == []
    assert check.com_inside > COM_MARGIN
    moved = base.copy()
    moved[0, 3] += 0.002                       # the whole figure slides 2 mm
    check(ready, moved)
    assert any('soles moved 2.00 mm' in line for line in check.failures())
    check = CommandCheck(figure, anchors, figure.support_polygon(ready, base))
    leaning = dict(ready, waist_pitch=0.9, left_shoulder_pitch=-1.6, right_shoulder_pitch=-1.6)
    check(leaning, base)                       # feet in place, CoM ahead of the toes
    assert any('CoM left the support polygon' in line for line in check.failures())
    check = CommandCheck(figure, anchors, figure.support_polygon(ready, base))
    check(dict(ready, left_knee=-0.1), base)
    assert any('joint limit' in line for line in check.failures())
    assert CommandCheck(figure, anchors, check.polygon).failures() == [
        'no command was checked (none paired with ~/base_pose)']


def test_constraints_text_names_the_soles_and_their_links():
    entries = yaml.safe_load(CONSTRAINTS)
    assert entries[:2] == [{'type': 'contact', 'link': s} for s in SOLES]
    assert entries[2] == {'type': 'center_of_mass', 'support': list(figure_demo.SUPPORT),
                          'margin': COM_MARGIN}
    from smcik_ros import constraint_schema
    if 'contact' in getattr(constraint_schema, 'CONSTRAINT_TYPES', ()):
        assert len(constraint_schema.parse_constraints(CONSTRAINTS)) == 3


def test_plot_writes_the_picture(figure, goals, tmp_path):
    ready, base = figure.ready, figure.ready_base
    anchors = {s: figure.world(ready, base, s) for s in SOLES}
    check = CommandCheck(figure, anchors, figure.support_polygon(ready, base))
    results = []
    for goal in goals:
        check(goal.values, goal.base)
        results.append({'name': goal.name, 'goal': goal, 'ok': True, 'time': 1.0,
                        'errors': {}, 'values': goal.values, 'base': goal.base, 'held': 0.0})
    path = tmp_path / 'figure_demo.png'
    figure_demo.plot({'figure': figure, 'goals': results, 'check': check, 'failures': []},
                     path)
    assert path.stat().st_size > 20000
    assert check.failures() == []


@pytest.mark.ros
def test_figure_demo_over_dds_reaches_every_goal_with_the_feet_planted(capsys):
    """The whole demo, as `./smcik demo --figure` runs it: exit 0 means every goal reached
    with the soles within 1 mm / 0.01 rad and the CoM inside the polygon on every command."""
    from smcik_ros import demo
    out = tempfile.mkdtemp(prefix='smcik-figure-demo-')
    code = demo.main(['--figure', '--out', out, '--timeout', '20'])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert os.path.getsize(os.path.join(out, 'figure_demo.png')) > 20000
    assert '4/4 goals reached' in printed


def test_run_reports_what_is_missing_without_a_node():
    """Without smcik_node the sequence stops after the start-up wait and says what it lacked."""
    pytest.importorskip('rclpy', reason='rclpy is needed for the DDS side of the demo')
    import rclpy
    from rclpy.node import Node

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=1 + (os.getpid() + 57) % 100)
    node = Node('figure_demo_probe', context=context)
    args = argparse.Namespace(startup_timeout=0.5, timeout=1.0, settle=0.0,
                              position_tolerance=1e-3, orientation_tolerance=1e-2)
    try:
        ok, report = figure_demo.run(node, args)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert not ok
    assert 'no subscriber on targets/<hand>/pose' in report['failures'][0]
    assert 'no joint_states' in report['failures'][0]


class _FakeFigureNode:
    """Plays smcik_node and sim_arm for run(): answers each hand goal with the goal's own
    configuration (a perfect solver), publishing joint_commands with ~/base_pose under the
    same stamp and joint_states, at 50 Hz. ``slide`` [m] moves the whole figure sideways
    from the crouch on (soles off their anchors)."""

    def __init__(self, context, figure, slide=0.0):
        from geometry_msgs.msg import PoseStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from smcik_ros.ros.conversions import make_joint_state, matrix_to_pose, pose_to_matrix

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.node = Node('fake_smcik_node', context=context)
        self.goals = make_goals(figure)
        self.values, self.base = dict(figure.ready), figure.ready_base.copy()
        self.names = [n for n in figure.chain.joint_names if n != 'neck_yaw']

        def on_target(msg):
            target = pose_to_matrix(msg.pose)[:3, 3]
            for k, goal in enumerate(self.goals):
                if any(np.allclose(t[:3, 3], target, atol=1e-6) for t in goal.targets.values()):
                    self.values, self.base = dict(goal.values), goal.base.copy()
                    if slide and k >= 2:
                        self.base[1, 3] += slide

        def tick():
            stamp = self.node.get_clock().now().to_msg()
            q = [self.values.get(n, 0.0) for n in self.names]
            commands.publish(make_joint_state(self.names, q, stamp=stamp))
            states.publish(make_joint_state(self.names + ['neck_yaw'], q + [0.0], stamp=stamp))
            msg = PoseStamped()
            msg.header.stamp, msg.header.frame_id = stamp, 'world'
            msg.pose = matrix_to_pose(self.base)
            base.publish(msg)

        commands = self.node.create_publisher(JointState, 'joint_commands', reliable)
        states = self.node.create_publisher(JointState, 'joint_states', reliable)
        base = self.node.create_publisher(PoseStamped, '/smcik_node/base_pose', reliable)
        for hand in HANDS:
            self.node.create_subscription(PoseStamped, f'targets/{hand}/pose', on_target,
                                          reliable)
        self.node.create_timer(0.02, tick)
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)

    def __enter__(self):
        import threading
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.executor.shutdown()
        self.thread.join(10.0)     # its timer may be publishing: not onto a destroyed node
        self.node.destroy_node()


def _run_against_fake(figure, slide):
    pytest.importorskip('rclpy', reason='rclpy is needed for the DDS side of the demo')
    import rclpy
    from rclpy.node import Node

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=1 + (os.getpid() + 61 + int(slide * 1e4)) % 100)
    node = Node('figure_demo_probe', context=context)
    args = argparse.Namespace(startup_timeout=20.0, timeout=5.0, settle=0.1,
                              position_tolerance=1e-3, orientation_tolerance=1e-2)
    try:
        with _FakeFigureNode(context, figure, slide):
            return figure_demo.run(node, args, figure)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


@pytest.mark.ros
def test_run_over_dds_against_a_perfect_fake_node(figure):
    """The sequence, the stamp pairing and the checks over real DDS: every goal reached,
    every command checked, nothing broken, the crouch lowers the pelvis."""
    ok, report = _run_against_fake(figure, 0.0)
    assert ok, report['failures']
    assert [r['ok'] for r in report['goals']] == [True] * 4
    check = report['check']
    assert check.count > 50 and check.sole_position < 1e-9 and check.com_inside > COM_MARGIN
    assert report['goals'][2]['base'][2, 3] < figure.ready_base[2, 3] - 0.15
    assert all(r['held'] < 1e-9 for r in report['goals'][:2])


@pytest.mark.ros
def test_run_over_dds_reports_feet_that_slide(figure):
    ok, report = _run_against_fake(figure, 0.003)
    assert not ok
    assert any('soles moved 3.00 mm' in line for line in report['failures'])
