"""Passive (off-path) joints (model.passive): the whole tree's centre of mass against
yourdfpy's mass-weighted link centres, its Jacobian against finite differences."""

import os

import numpy as np
import pytest
import yourdfpy

from smcik_ros.errors import ModelError
from smcik_ros.model import Chain, JointSpec

HERE = os.path.dirname(__file__)
BIPED = os.path.join(HERE, 'urdf', 'biped.urdf')
TWO_TIPS = os.path.join(HERE, 'urdf', 'two_tips.urdf')
BIPED_TIPS = ['l_palm', 'r_palm', 'l_sole', 'r_sole']


def _whole_tree_com(ref, base, values):
    """Return yourdfpy's centre of mass of every link below ``base`` at joint ``values``."""
    ref.update_cfg(values)
    below, stack = set(), [base]
    while stack:
        link = stack.pop()
        below.add(link)
        stack.extend(j.child for j in ref.robot.joints if j.parent == link)
    total, weighted = 0.0, np.zeros(3)
    for link in ref.robot.links:
        if link.inertial is None or link.name not in below:
            continue
        centre = ref.get_transform(link.name, base) @ link.inertial.origin
        total += link.inertial.mass
        weighted += link.inertial.mass * centre[:3, 3]
    return weighted / total, total


def _random_passive(chain, ref, rng):
    joints = {j.name: j for j in ref.robot.joints}
    return {name: rng.uniform(joints[name].limit.lower, joints[name].limit.upper)
            for name in chain.passive_joint_names}


@pytest.mark.parametrize('path,base,tips,floating', [
    (BIPED, 'pelvis', BIPED_TIPS, False), (BIPED, 'pelvis', BIPED_TIPS, True),
    (BIPED, 'pelvis', ['l_palm'], False),
    (TWO_TIPS, 'base_link', 'left_tool', False)])
def test_com_counts_the_whole_tree_at_the_passive_values(path, base, tips, floating):
    chain = Chain.from_urdf(path, base, tips, floating_base=floating)
    ref = yourdfpy.URDF.load(path, build_scene_graph=True, load_meshes=False)
    assert chain.passive_joint_names, 'the case has joints off the tip paths'
    rng = np.random.default_rng(21)
    worst = 0.0
    for trial in range(6):
        q = chain.random_configuration(rng)
        if floating:
            q[chain.base_index] = (0.3, -0.2, 0.9, 0.4, 0.2, -0.1)
        values = {name: 0.0 for name in chain.passive_joint_names}
        if trial:
            values = _random_passive(chain, ref, rng)
            chain.set_passive(values)
        values.update({chain.joint_names[i]: q[i] for i in chain.command_index})
        expected, total = _whole_tree_com(ref, base, values)
        expected = chain.base_pose(q)[:3, :3] @ expected + chain.base_pose(q)[:3, 3]
        worst = max(worst, np.abs(chain.center_of_mass(q) - expected).max())
        assert chain.total_mass == pytest.approx(total)
        frames = chain.frames(q)
        for link, (body, offset) in chain.passive_anchors.items():   # the off-path links
            pose = np.eye(4)
            if body >= 0:
                pose[:3, :3], pose[:3, 3] = frames.rot[body, 0], frames.pos[body, 0]
            np.testing.assert_allclose(pose @ offset, chain.base_pose(q)
                                       @ ref.get_transform(link, base), atol=1e-9)
    assert worst < 1e-9


def test_com_jacobian_matches_finite_differences_after_set_passive():
    chain = Chain.from_urdf(BIPED, 'pelvis', ['l_palm', 'l_sole'], floating_base=True)
    rng = np.random.default_rng(22)
    ref = yourdfpy.URDF.load(BIPED, load_meshes=False)
    chain.set_passive(_random_passive(chain, ref, rng))
    assert np.abs(chain.passive_values).max() > 0.1
    q = chain.random_configuration(rng)
    analytic = chain.frames(q).com_jacobian()[0]
    numeric = np.zeros_like(analytic)
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = 1e-6
        numeric[:, i] = (chain.center_of_mass(q + dv) - chain.center_of_mass(q - dv)) / 2e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-8)


def test_set_passive_takes_a_mapping_or_an_array_and_says_what_it_expects():
    chain = Chain.from_urdf(BIPED, 'pelvis', BIPED_TIPS)
    assert chain.passive_joint_names == ('neck', 'l_finger_joint', 'r_finger_joint')
    q = chain.neutral_configuration()
    before = chain.center_of_mass(q)
    chain.set_passive({'neck': 0.7, 'l_hip_yaw': 3.0, 'torso_yaw': 1.0})   # state joints: ignored
    assert chain.passive_values.tolist() == [0.7, 0.0, 0.0]
    after = chain.center_of_mass(q)
    assert after[0] > before[0] + 1e-3          # the head leans forwards (pitch about +y)
    chain.set_passive(np.zeros(3))
    np.testing.assert_allclose(chain.center_of_mass(q), before, atol=1e-15)
    with pytest.raises(ModelError, match="unknown joint 'nose'; passive joints of this chain: "
                                         'neck, l_finger_joint, r_finger_joint'):
        chain.set_passive({'nose': 1.0})
    with pytest.raises(ModelError, match=r'expected 3 values .* got shape \(2,\)'):
        chain.set_passive([0.0, 1.0])
    with pytest.raises(ModelError, match='finite'):
        chain.set_passive({'neck': float('nan')})
    with pytest.raises(ValueError):
        chain.passive_values[0] = 1.0


def test_passive_defaults_are_zero_clipped_into_the_limits():
    joints = [JointSpec('a', 'base', 'l1', origin=np.eye(4), mass=1.0),
              JointSpec('side', 'base', 's1', origin=np.eye(4), lower=0.2, upper=1.0,
                        mass=1.0, com=(1.0, 0.0, 0.0)),
              JointSpec('slide', 's1', 's2', type='prismatic', origin=np.eye(4), lower=-0.5,
                        upper=-0.1, axis=(1.0, 0.0, 0.0), mass=2.0),
              JointSpec('mimic', 's1', 's3', origin=np.eye(4), mimic=('side', 2.0, 0.0),
                        mass=1.0, com=(1.0, 0.0, 0.0))]
    chain = Chain.from_joints(joints, 'base', 'l1')
    assert chain.passive_joint_names == ('side', 'slide')       # the mimic follows 'side'
    assert chain.passive_values.tolist() == [0.2, -0.1]
    assert chain.total_mass == pytest.approx(5.0)
    com = chain.center_of_mass(np.zeros(1))
    # l1 at the origin; s1's centre at (cos .2, sin .2); s2 at -0.1 x turned by 0.2;
    # s3's centre at 0.2 + 2 * 0.2 = 0.6 rad about z.
    expected = (np.array([np.cos(0.2), np.sin(0.2), 0.0])
                + 2.0 * np.array([-0.1 * np.cos(0.2), -0.1 * np.sin(0.2), 0.0])
                + np.array([np.cos(0.6), np.sin(0.6), 0.0])) / 5.0
    np.testing.assert_allclose(com, expected, atol=1e-12)
