"""The floating base (model.floating): six 1-DOF joints between the world and the base link,
checked against yourdfpy's FK with the base pose applied and against finite differences."""

import math
import os

import numpy as np
import pytest
import yourdfpy

from smcik_ros.collision.model import CollisionModel, _model_key
from smcik_ros.errors import GoalError, ModelError
from smcik_ros.model import (FLOATING_JOINTS, FLOATING_PITCH_LIMIT, FLOATING_RANGE, Chain,
                             JointSpec, ball_chain)
from smcik_ros.rotations import rotvec_to_matrix

from arm_urdfs import ur5_like_urdf

HERE = os.path.dirname(__file__)
BIPED = os.path.join(HERE, 'urdf', 'biped.urdf')
TWO_TIPS = os.path.join(HERE, 'urdf', 'two_tips.urdf')
BIPED_TIPS = ['l_palm', 'r_palm', 'l_sole', 'r_sole']


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS, floating_base=True)


def _random_pose(rng):
    pose = np.eye(4)
    pose[:3, :3] = (rotvec_to_matrix(np.array([0, 0, rng.uniform(-3, 3)]))
                    @ rotvec_to_matrix(np.array([0, rng.uniform(-1.3, 1.3), 0]))
                    @ rotvec_to_matrix(np.array([rng.uniform(-3, 3), 0, 0])))
    pose[:3, 3] = rng.uniform(-2, 2, 3)
    return pose


@pytest.mark.parametrize('path,base,tips', [(BIPED, 'pelvis', BIPED_TIPS),
                                            (TWO_TIPS, 'base_link', ['left_tool', 'right_tool'])])
def test_fk_is_yourdfpy_fk_with_the_base_pose_applied(path, base, tips):
    chain = Chain.from_urdf(path, base, tips, floating_base=True)
    ref = yourdfpy.URDF.load(path, build_scene_graph=True, load_meshes=False)
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(12):
        pose = _random_pose(rng)
        q_joints = chain.random_configuration(rng)[chain.command_index]
        q = chain.with_base(q_joints, pose)
        ref.update_cfg({chain.joint_names[i]: q[i] for i in chain.command_index})
        poses = chain.link_poses(q)
        for k, link in enumerate(chain.link_names):
            if link in chain.floating_links:
                continue
            expected = pose @ ref.get_transform(link, base)
            worst = max(worst, np.abs(poses[k] - expected).max(),
                        np.abs(chain.fk(q, link) - expected).max())
        np.testing.assert_allclose(chain.base_pose(q), pose, atol=1e-12)
    assert worst < 1e-9


def test_the_base_joints_come_first_and_are_never_commanded(biped):
    assert biped.floating and biped.floating_link == 'pelvis' and biped.base_link == 'world'
    assert biped.joint_names[:6] == FLOATING_JOINTS
    assert biped.base_index.tolist() == list(range(6))
    assert biped.command_index.tolist() == list(range(6, biped.nq))
    assert set(biped.joint_names[i] for i in biped.command_index) == {
        j.name for j in yourdfpy.URDF.load(BIPED, load_meshes=False).robot.joints
        if j.type != 'fixed'} - set(biped.passive_joint_names)
    np.testing.assert_allclose(biped.upper[:6], [FLOATING_RANGE] * 3
                               + [math.pi, FLOATING_PITCH_LIMIT, math.pi])
    np.testing.assert_allclose(biped.lower[:6], -biped.upper[:6])
    assert math.degrees(FLOATING_PITCH_LIMIT) == pytest.approx(80.0)
    assert np.isinf(biped.velocity_limits[:6]).all()
    assert biped.floating_links[0] == 'world' and len(biped.floating_links) == 6
    fixed = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS)
    assert not fixed.floating and fixed.base_index.size == 0
    assert fixed.command_index.tolist() == list(range(fixed.nq))
    assert fixed.nq == biped.nq - 6 and biped.total_mass == pytest.approx(fixed.total_mass)


def _finite_difference(chain, q, link, h=1e-6):
    jac = np.zeros((6, chain.nv))
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = h
        p, m = chain.fk(q + dv, link), chain.fk(q - dv, link)
        jac[:3, i] = (p[:3, 3] - m[:3, 3]) / (2 * h)
        d = p[:3, :3] @ m[:3, :3].T
        jac[3:, i] = 0.5 * np.array([d[2, 1] - d[1, 2], d[0, 2] - d[2, 0],
                                     d[1, 0] - d[0, 1]]) / (2 * h)
    return jac


def test_jacobians_and_com_jacobian_match_finite_differences(biped):
    rng = np.random.default_rng(12)
    for _ in range(3):
        q = biped.with_base(biped.random_configuration(rng)[biped.command_index],
                            _random_pose(rng))
        for link in BIPED_TIPS + ['pelvis', 'torso', 'l_thigh']:
            np.testing.assert_allclose(biped.jacobian(q, link),
                                       _finite_difference(biped, q, link), atol=1e-7)
        numeric = np.zeros((3, biped.nv))
        for i in range(biped.nv):
            dv = np.zeros(biped.nv)
            dv[i] = 1e-6
            numeric[:, i] = (biped.center_of_mass(q + dv) - biped.center_of_mass(q - dv)) / 2e-6
        np.testing.assert_allclose(biped.frames(q).com_jacobian()[0], numeric, atol=1e-8)
    # Translating the base translates the centre of mass (the base columns: identity).
    np.testing.assert_allclose(biped.frames(q).com_jacobian()[0, :, :3], np.eye(3), atol=1e-12)


def test_with_base_and_base_pose_round_trip_batched(biped):
    rng = np.random.default_rng(13)
    poses = np.array([_random_pose(rng) for _ in range(5)])
    q_joints = biped.random_configuration(rng, 5)[:, biped.command_index]
    q = biped.with_base(q_joints, poses)
    assert q.shape == (5, biped.nq)
    np.testing.assert_allclose(biped.base_pose(q), poses, atol=1e-12)
    np.testing.assert_array_equal(q[:, biped.command_index], q_joints)
    # One pose for every row; whole configurations get their base entries replaced.
    q1 = biped.with_base(q, poses[0])
    np.testing.assert_allclose(biped.base_pose(q1), np.broadcast_to(poses[0], (5, 4, 4)),
                               atol=1e-12)
    np.testing.assert_array_equal(q1[:, biped.command_index], q_joints)
    assert biped.with_base(q_joints[0], poses[0]).shape == (biped.nq,)
    assert biped.base_pose(q[0]).shape == (4, 4)
    assert biped.within_limits(q).all()


def test_with_base_refuses_a_pose_beyond_the_base_joints_limits(biped):
    q_joints = np.zeros(len(biped.command_index))
    tilted = np.eye(4)
    tilted[:3, :3] = rotvec_to_matrix(np.array([0.0, math.radians(85.0), 0.0]))
    with pytest.raises(GoalError, match=r'pitch 85\.0 deg is beyond .* \+-80 deg .*'
                                        'floating_base_pitch'):
        biped.with_base(q_joints, tilted)
    far = np.eye(4)
    far[0, 3] = 12.0
    with pytest.raises(GoalError, match=r'12\.000 m .* beyond .* \+-10 m'):
        biped.with_base(q_joints, far)
    skew = np.eye(4)
    skew[0, 1] = 0.3
    with pytest.raises(GoalError, match='not a rotation matrix'):
        biped.with_base(q_joints, skew)
    with pytest.raises(ModelError, match=f'{len(biped.command_index)} entries'):
        biped.with_base(q_joints[:-1], np.eye(4))
    fixed = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS)
    with pytest.raises(ModelError, match='fixed base'):
        fixed.with_base(np.zeros(fixed.nq), np.eye(4))
    np.testing.assert_array_equal(fixed.base_pose(np.zeros((2, fixed.nq))), np.tile(np.eye(4),
                                                                                    (2, 1, 1)))


def test_the_joint_above_the_base_is_replaced():
    """A URDF with world -fixed-> base_link and a camera on the world: the floating base
    replaces the mount; the camera stays fixed in the world."""
    xml = ur5_like_urdf()
    chain = Chain.from_urdf(xml, 'base_link', 'tool0', floating_base=True)
    q = chain.with_base(np.full(6, 0.3), np.eye(4))
    # The base sits at the world origin, not at the mount's 0.5 -0.2 0.8.
    np.testing.assert_allclose(chain.fk(q, 'base_link'), np.eye(4), atol=1e-12)
    camera = chain.fk(q, 'camera')
    np.testing.assert_allclose(camera[:3, 3], [1.5, 0.3, 1.6], atol=1e-9)
    moved = chain.with_base(np.full(6, 0.3), _random_pose(np.random.default_rng(3)))
    np.testing.assert_allclose(chain.fk(moved, 'camera'), camera, atol=1e-12)
    assert 'world_joint' not in {j.name for j in chain.tree_joints}


def test_bad_world_frames_and_taken_names_are_refused():
    with pytest.raises(ModelError, match="world_frame 'pelvis' is 'pelvis' or a link below"):
        Chain.from_urdf(BIPED, 'pelvis', 'l_palm', floating_base=True, world_frame='pelvis')
    with pytest.raises(ModelError, match="world_frame 'torso'"):
        Chain.from_urdf(BIPED, 'pelvis', 'l_palm', floating_base=True, world_frame='torso')
    joints = [JointSpec('floating_base_x', 'base', 'a', origin=np.eye(4)),
              JointSpec('j2', 'a', 'tip', type='fixed', origin=np.eye(4))]
    with pytest.raises(ModelError, match='already has floating_base_x'):
        Chain.from_joints(joints, 'base', 'tip', floating_base=True)


def test_from_joints_builds_a_floating_figure():
    chain = ball_chain(3, segment_length=0.5)
    joints = list(chain.tree_joints)
    figure = Chain.from_joints(joints, 'base_link', 'tip', floating_base=True, world_frame='map')
    assert figure.base_link == 'map' and figure.nq == chain.nq + 6
    q = figure.neutral_configuration()
    pose = _random_pose(np.random.default_rng(4))
    q = figure.with_base(q, pose)
    np.testing.assert_allclose(figure.fk(q, 'tip'), pose @ chain.fk(chain.neutral_configuration(),
                                                                     'tip'), atol=1e-12)


def test_the_collision_model_rides_on_the_base_and_its_cache_key_includes_the_option():
    fixed = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS)
    floating = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS, floating_base=True)
    with open(BIPED, 'rb') as f:
        text = f.read()
    keys = [_model_key(c, text, HERE, (), 0.01, None) for c in (fixed, floating)]
    assert None not in keys and keys[0] != keys[1]
    model = CollisionModel.from_urdf(floating, BIPED, cache_dir='')
    assert set(model.link_names) >= {'pelvis', 'l_foot', 'head', 'l_finger'}
    rng = np.random.default_rng(5)
    q_joints = fixed.random_configuration(rng)
    pose = _random_pose(rng)
    q = floating.with_base(q_joints, pose)
    still = CollisionModel.from_urdf(fixed, BIPED, cache_dir='')
    ours = model.world_spheres(floating.frames(q))[0]
    theirs = still.world_spheres(fixed.frames(q_joints))[0]
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs @ pose[:3, :3].T + pose[:3, 3], atol=1e-9)


def test_the_parse_cache_serves_fixed_and_floating_chains_alike(tmp_path):
    """The parsed joints are cached by the URDF's bytes; the floating base is added after the
    cache, so one entry serves both, each built right."""
    fixed = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS, cache_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 1
    floating = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS, cache_dir=str(tmp_path),
                               floating_base=True)
    again = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS, cache_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 1
    assert floating.joint_names == FLOATING_JOINTS + fixed.joint_names
    assert again.joint_names == fixed.joint_names and not again.floating
