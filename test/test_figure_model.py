"""The whole-figure humanoid (urdf/smcik_figure.urdf, .srdf): parses, masses, stance, pairs.

Independent references: yourdfpy's own forward kinematics and inertials, python-fcl on the
URDF's own shapes (test/collision_helpers.FclRobot). The documented standing base poses are
read from the URDF's header comment and config/figure.yaml, so the docs and the geometry
cannot drift apart.
"""

import itertools
from pathlib import Path
import re
import xml.etree.ElementTree as ElementTree

import fcl
import numpy as np
import pytest
import yaml
import yourdfpy

from collision_helpers import FclRobot
from smcik_ros.model import Chain

ROOT = Path(__file__).resolve().parents[1]
URDF = ROOT / 'urdf' / 'smcik_figure.urdf'
SRDF = ROOT / 'urdf' / 'smcik_figure.srdf'
CONFIG = ROOT / 'config' / 'figure.yaml'
TIPS = ['left_hand', 'right_hand', 'left_foot', 'right_foot']
SOLES = ['left_foot', 'right_foot']


@pytest.fixture(scope='module')
def robot():
    return yourdfpy.URDF.load(str(URDF), build_scene_graph=True, load_meshes=False,
                              load_collision_meshes=False)


@pytest.fixture(scope='module')
def srdf():
    return ElementTree.parse(SRDF).getroot()


@pytest.fixture(scope='module')
def fcl_robot():
    return FclRobot(str(URDF), 'pelvis')


def _movable(robot):
    return [j for j in robot.robot.joints if j.type != 'fixed']


def _documented_base_z():
    """The pelvis height at q = 0 from the URDF's header: 'initial_base_pose [0, 0, z, ...]'."""
    match = re.search(r'initial_base_pose\s*\[0, 0, ([0-9.]+), 0, 0, 0, 1\]', URDF.read_text())
    assert match, 'the URDF header documents initial_base_pose [0, 0, z, 0, 0, 0, 1]'
    return float(match.group(1))


def _state(srdf, name):
    for el in srdf.iter('group_state'):
        if el.get('name') == name:
            return {j.get('name'): float(j.get('value')) for j in el.iter('joint')}
    raise AssertionError(f'no group_state {name!r} in {SRDF}')


def _world_pose(robot, cfg, link, base_z):
    robot.update_cfg(cfg)
    pose = robot.get_transform(frame_to=link, frame_from='pelvis')
    world = np.eye(4)
    world[2, 3] = base_z
    return world @ pose


def test_parses_with_yourdfpy_and_the_chain(robot):
    movable = _movable(robot)
    assert robot.base_link == 'pelvis'
    assert len(movable) == 27                          # 12 leg, 12 arm, 2 waist, 1 neck
    chain = Chain.from_urdf(str(URDF), 'pelvis', TIPS, cache_dir='')
    assert chain.tip_links == tuple(TIPS)
    assert chain.n == 26                               # the neck is off every tip path
    assert 'neck_yaw' not in chain.joint_names
    for joint in movable:
        assert joint.limit.lower < joint.limit.upper, joint.name
        assert joint.limit.velocity > 0.0 and joint.limit.effort > 0.0, joint.name
    # Our FK agrees with yourdfpy's at a random in-limit configuration.
    rng = np.random.default_rng(3)
    q = chain.random_configuration(rng)
    robot.update_cfg(dict(zip(chain.joint_names, q)))
    for tip in TIPS:
        expected = robot.get_transform(frame_to=tip, frame_from='pelvis')
        np.testing.assert_allclose(chain.fk(q, tip), expected, atol=1e-9)


def test_masses_and_inertias_are_physical(robot):
    total = 0.0
    for link in robot.robot.links:
        has_geometry = bool(link.collisions)
        if link.inertial is None:
            assert not has_geometry, f'{link.name} has geometry but no inertial'
            continue
        mass = link.inertial.mass
        inertia = np.asarray(link.inertial.inertia)
        assert mass > 0.0, link.name
        eig = np.linalg.eigvalsh(inertia)
        assert eig.min() > 0.0, link.name
        # Triangle inequality of principal moments (a real rigid body).
        assert eig[0] + eig[1] >= eig[2] - 1e-12, link.name
        total += mass
    assert 40.0 < total < 60.0


def test_soles_flat_on_the_floor_at_the_documented_base_pose(robot):
    base_z = _documented_base_z()
    zero = {j.name: 0.0 for j in _movable(robot)}
    for sole in SOLES:
        pose = _world_pose(robot, zero, sole, base_z)
        assert abs(pose[2, 3]) < 1e-9, f'{sole} at z = {pose[2, 3]}'
        np.testing.assert_allclose(pose[:3, :3], np.eye(3), atol=1e-12)
    # About 1.5 m tall: the top of the head.
    robot.update_cfg(zero)
    head = robot.get_transform(frame_to='head', frame_from='pelvis')
    top = base_z + head[2, 3] + 0.10 + 0.10
    assert 1.4 < top < 1.6


def test_ready_state_and_the_config_base_pose(robot, srdf):
    """sim_arm starts at 'ready'; config/figure.yaml's initial_base_pose keeps the soles on
    z = 0, under the hips, with the centre of mass above the support polygon."""
    params = yaml.safe_load(CONFIG.read_text())['smcik_node']['ros__parameters']
    x, y, z, qx, qy, qz, qw = params['initial_base_pose']
    assert (x, y, qx, qy, qz, qw) == (0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    ready = _state(srdf, 'ready')
    assert set(ready) == {j.name for j in _movable(robot)}
    corners = []
    for sole in SOLES:
        pose = _world_pose(robot, ready, sole, z)
        assert abs(pose[2, 3]) < 1e-6, f'{sole} at z = {pose[2, 3]}'
        np.testing.assert_allclose(pose[:3, :3], np.eye(3), atol=1e-9)
        foot = _world_pose(robot, ready, sole.replace('foot', 'foot_link'), z)
        box = next(c for c in robot.link_map[sole.replace('foot', 'foot_link')].collisions)
        sx, sy, _ = box.geometry.box.size
        centre = foot @ box.origin
        corners += [centre[:2, 3] + (dx * sx / 2, dy * sy / 2)
                    for dx in (-1, 1) for dy in (-1, 1)]
    # Whole-tree centre of mass from yourdfpy's inertials (the head included).
    robot.update_cfg(ready)
    weighted, total = np.zeros(3), 0.0
    for link in robot.robot.links:
        if link.inertial is None:
            continue
        pose = robot.get_transform(frame_to=link.name, frame_from='pelvis')
        weighted += link.inertial.mass * (pose @ link.inertial.origin)[:3, 3]
        total += link.inertial.mass
    com = weighted / total
    corners = np.array(corners)
    lo, hi = corners.min(axis=0), corners.max(axis=0)
    assert np.all(com[:2] > lo + 0.03) and np.all(com[:2] < hi - 0.03), (com, lo, hi)


def _pairs(srdf, fcl_robot):
    disabled = {frozenset((e.get('link1'), e.get('link2')))
                for e in srdf.iter('disable_collisions')}
    links = sorted(fcl_robot.geometry)
    every = [frozenset(p) for p in itertools.combinations(links, 2)]
    return disabled, [p for p in every if p not in disabled], every


def _touching(fcl_robot, cfg, pairs):
    objects = fcl_robot.objects(cfg)
    request = fcl.CollisionRequest()
    return {p for p in pairs
            if any(fcl.collide(a, b, request, fcl.CollisionResult())
                   for a in objects[sorted(p)[0]] for b in objects[sorted(p)[1]])}


def test_srdf_disables_the_adjacent_pairs_only(robot, srdf, fcl_robot):
    """Disabled = links joined by one joint or through links without collision geometry."""
    disabled, _, _ = _pairs(srdf, fcl_robot)
    with_geometry = set(fcl_robot.geometry)
    parent = {j.child: j.parent for j in robot.robot.joints}

    def geometric_parent(link):
        link = parent.get(link)
        while link is not None and link not in with_geometry:
            link = parent.get(link)
        return link

    adjacent = {frozenset((link, geometric_parent(link))) for link in with_geometry
                if geometric_parent(link) is not None}
    assert disabled == adjacent


def test_no_enabled_pair_touches_at_zero_or_ready(robot, srdf, fcl_robot):
    _, enabled, _ = _pairs(srdf, fcl_robot)
    for name in ('zero', 'ready'):
        assert _touching(fcl_robot, _state(srdf, name), enabled) == set(), name


def test_always_touching_pairs_are_disabled(robot, srdf, fcl_robot):
    """Pairs in contact at every one of 200 seeded in-limit configurations are disabled,
    and the enabled pairs do meet somewhere (they are worth checking)."""
    disabled, enabled, every = _pairs(srdf, fcl_robot)
    movable = _movable(robot)
    lower = np.array([j.limit.lower for j in movable])
    upper = np.array([j.limit.upper for j in movable])
    names = [j.name for j in movable]
    rng = np.random.default_rng(11)
    always, ever = set(every), set()
    for _ in range(200):
        touching = _touching(fcl_robot, dict(zip(names, rng.uniform(lower, upper))), every)
        always &= touching
        ever |= touching
    assert always, 'the elbow and knee spheres always touch their neighbours'
    assert always <= disabled
    assert len(ever & set(enabled)) >= 10
