"""Chain model: FK against yourdfpy's own FK, Jacobians against finite differences, errors."""

import os

import numpy as np
import pytest
import yourdfpy

from smcik_ros.collision.model import CollisionModel
from smcik_ros.errors import ModelError
from smcik_ros.model import BODY_BALL, BODY_PRISMATIC, Chain, JointSpec, ball_chain

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
ARM7 = os.path.join(ROOT, 'urdf', 'smcik_arm.urdf')
ARM6 = os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf')
MIMIC = os.path.join(HERE, 'urdf', 'mimic_prismatic.urdf')
TWO_TIPS = os.path.join(HERE, 'urdf', 'two_tips.urdf')
BROKEN = os.path.join(HERE, 'urdf', 'broken.urdf')

CASES = [(ARM7, 'tool0'), (ARM6, 'tool0'), (MIMIC, 'tool0'),
         (TWO_TIPS, ['left_tool', 'right_tool'])]


def _reference(path):
    return yourdfpy.URDF.load(path, build_scene_graph=True, load_meshes=False)


@pytest.mark.parametrize('path,tip', CASES)
def test_fk_matches_yourdfpy_on_every_link(path, tip):
    chain = Chain.from_urdf(path, 'base_link', tip)
    ref = _reference(path)
    rng = np.random.default_rng(1)
    qs = chain.random_configuration(rng, 25)
    batched = chain.link_poses(qs)
    worst = 0.0
    for q, poses in zip(qs, batched):
        ref.update_cfg(dict(zip(chain.joint_names, q)))
        for i, link in enumerate(chain.link_names):
            expected = ref.get_transform(link, 'base_link')
            worst = max(worst, np.abs(poses[i] - expected).max(),
                        np.abs(chain.fk(q, link) - expected).max())
    assert worst < 1e-9


def test_fk_shapes_single_and_batch_agree():
    chain = Chain.from_urdf(ARM7)
    qs = chain.random_configuration(np.random.default_rng(2), 7)
    batch = chain.fk(qs)
    assert batch.shape == (7, 4, 4)
    assert chain.fk(qs[3]).shape == (4, 4)
    np.testing.assert_allclose(batch[3], chain.fk(qs[3]), atol=1e-14)
    assert chain.link_poses(qs).shape == (7, len(chain.link_names), 4, 4)
    assert chain.jacobian(qs).shape == (7, 6, chain.nv)


def test_frames_subset_by_indices_mask_or_slice_is_the_fk_of_those_rows():
    """Frames.subset picks rows by an index list or array (copies, C-contiguous), a mask or
    a slice; each is the forward kinematics of those configurations alone."""
    chain = Chain.from_urdf(ARM7)
    qs = chain.random_configuration(np.random.default_rng(4), 9)
    frames = chain.frames(qs)
    rows = [7, 2, 2]
    mask = np.zeros(9, dtype=bool)
    mask[[1, 4]] = True
    for index, picked in ((rows, rows), (np.array(rows), rows), (mask, [1, 4]),
                          (slice(3, 5), [3, 4])):
        sub = frames.subset(index)
        alone = chain.frames(qs[picked])
        assert len(sub) == len(picked)
        np.testing.assert_array_equal(sub.q, qs[picked])
        np.testing.assert_array_equal(sub.link_pose(), alone.link_pose())
    sub = frames.subset(rows)
    assert sub.rot.flags.c_contiguous and sub.pos.flags.c_contiguous
    sub.q[0] = 0.0                      # a copy: the frames it came from keep their rows
    np.testing.assert_array_equal(frames.q, qs)


def test_mimic_joint_is_not_in_the_state_and_follows_its_source():
    chain = Chain.from_urdf(MIMIC)
    assert 'mimic_rev' not in chain.joint_names
    assert {'rev1', 'prism1', 'rev2', 'cont1'} <= set(chain.joint_names)


def _finite_difference_jacobian(chain, q, link, offset, h=1e-6):
    def pose(qq):
        frames = chain.frames(qq)
        return frames.link_pose(link)[0], frames.point(link, offset)[0]
    base_pose, base_point = pose(q)
    jac = np.zeros((6, chain.nv))
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = h
        p_pose, p_point = pose(chain.integrate(q, dv))
        m_pose, m_point = pose(chain.integrate(q, -dv))
        jac[:3, i] = (p_point - m_point) / (2 * h)
        d_rot = p_pose[:3, :3] @ m_pose[:3, :3].T
        jac[3:, i] = 0.5 * np.array([d_rot[2, 1] - d_rot[1, 2], d_rot[0, 2] - d_rot[2, 0],
                                     d_rot[1, 0] - d_rot[0, 1]]) / (2 * h)
    return jac


@pytest.mark.parametrize('path,tip', CASES)
def test_jacobian_matches_finite_differences_for_every_link(path, tip):
    chain = Chain.from_urdf(path, 'base_link', tip)
    rng = np.random.default_rng(3)
    offset = np.array([0.03, -0.02, 0.05])
    for q in chain.random_configuration(rng, 4):
        for link in chain.link_names:
            analytic = chain.jacobian(q, link, offset)
            numeric = _finite_difference_jacobian(chain, q, link, offset)
            np.testing.assert_allclose(analytic, numeric, atol=1e-7)


def test_ball_chain_jacobian_and_limits():
    chain = ball_chain(5, segment_length=0.5, max_angle=1.0)
    assert chain.nq == 20 and chain.nv == 15
    rng = np.random.default_rng(4)
    qs = chain.random_configuration(rng, 200)
    assert chain.within_limits(qs).all()
    for q in qs[:3]:
        np.testing.assert_allclose(chain.jacobian(q, 'tip'),
                                   _finite_difference_jacobian(chain, q, 'tip', None), atol=1e-7)
    # Reach at the identity: five segments of 0.5 m along z.
    np.testing.assert_allclose(chain.fk(chain.neutral_configuration())[:3, 3], [0, 0, 2.5])


def test_center_of_mass_matches_urdf_inertials():
    chain = Chain.from_urdf(ARM7)
    ref = _reference(ARM7)
    q = chain.random_configuration(np.random.default_rng(5))
    ref.update_cfg(dict(zip(chain.joint_names, q)))
    total, weighted = 0.0, np.zeros(3)
    for link in ref.robot.links:
        if link.inertial is None or link.name not in chain.link_names:
            continue
        pose = ref.get_transform(link.name, 'base_link') @ link.inertial.origin
        total += link.inertial.mass
        weighted += link.inertial.mass * pose[:3, 3]
    np.testing.assert_allclose(chain.center_of_mass(q), weighted / total, atol=1e-12)
    assert chain.total_mass == pytest.approx(total)


def test_com_jacobian_matches_finite_differences():
    chain = Chain.from_urdf(ARM7)
    q = chain.random_configuration(np.random.default_rng(6))
    analytic = chain.frames(q).com_jacobian()[0]
    numeric = np.zeros_like(analytic)
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = 1e-6
        numeric[:, i] = (chain.center_of_mass(q + dv) - chain.center_of_mass(q - dv)) / 2e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-8)


def test_limits_velocity_and_clip():
    chain = Chain.from_urdf(ARM7)
    assert chain.lower.shape == chain.upper.shape == (7,)
    assert np.all(chain.lower < chain.upper)
    assert np.all(np.isfinite(chain.velocity_limits)) and np.all(chain.velocity_limits > 0)
    q = chain.upper + 1.0
    assert not chain.within_limits(q)
    assert chain.within_limits(chain.clip(q))
    with pytest.raises(ValueError):
        chain.lower[0] = 0.0  # read-only


def test_from_xml_string_equals_from_file():
    with open(ARM6) as f:
        xml = f.read()
    a, b = Chain.from_urdf(ARM6), Chain.from_urdf(xml)
    q = a.random_configuration(np.random.default_rng(7))
    np.testing.assert_array_equal(a.fk(q), b.fk(q))
    assert a.joint_names == b.joint_names


def test_unknown_link_lists_the_links():
    with pytest.raises(ModelError) as err:
        Chain.from_urdf(ARM7, tip_link='tool1')
    message = str(err.value)
    assert "unknown tip link 'tool1'" in message and 'tool0' in message and 'link3' in message


def test_tip_not_below_base_says_so():
    with pytest.raises(ModelError, match='not below base link'):
        Chain.from_urdf(ARM7, base_link='link4', tip_link='link2')


def test_broken_urdf_gives_the_parsers_reason():
    with pytest.raises(ModelError) as err:
        Chain.from_urdf(BROKEN)
    assert 'not well-formed XML' in str(err.value)
    assert 'line' in str(err.value)  # lxml's location of the error


def test_gazebo_tags_with_undeclared_namespace_prefixes_are_read_as_ros_reads_them():
    """Fetch's URDF writes ``<sensor:camera>`` in a <gazebo> block and never declares
    ``sensor``: urdfdom (TinyXML2) reads no namespaces, so RViz and MoveIt load it; the
    model and the collision model load it too (they stopped at 'unbound prefix'). A file
    that is really broken still fails fast."""
    text = ('''<robot name="gz"><link name="base_link"/>
      <joint name="j" type="revolute"><parent link="base_link"/><child link="tool"/>
        <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <link name="tool"><collision><geometry><box size="0.1 0.1 0.1"/></geometry>
        </collision></link>
      <gazebo reference="tool"><sensor:camera name="rgb"><sensor:imageSize>4 4</sensor:imageSize>
        </sensor:camera><controller:plugin controller:name="c"/></gazebo></robot>''')
    chain = Chain.from_urdf(text, 'base_link', 'tool', cache_dir='')
    assert list(chain.joint_names) == ['j']
    assert CollisionModel.from_urdf(chain, text, cache_dir='', coarse=True).geometry['tool']
    with pytest.raises(ModelError, match='not well-formed XML'):
        Chain.from_urdf(text.replace('</sensor:camera>', ''), 'base_link', 'tool',
                        cache_dir='')


def test_missing_file_and_non_urdf_xml():
    with pytest.raises(ModelError, match='does not exist'):
        Chain.from_urdf('/nonexistent/robot.urdf')
    with pytest.raises(ModelError, match='expected <robot>'):
        Chain.from_urdf('<launch><node/></launch>')


def test_a_robot_without_a_name_is_refused_with_how_to_fix_it():
    """yourdfpy fails on it with a bare KeyError 'name' (example-robot-data's ur3.urdf);
    the chain and the collision model say what is missing instead."""
    with open(ARM7) as f:
        text = f.read()
    nameless = text.replace('<robot name="smcik_arm"', '<robot', 1)
    assert nameless != text
    for build in (lambda: Chain.from_urdf(nameless),
                  lambda: CollisionModel.from_urdf(Chain.from_urdf(ARM7), nameless,
                                                   cache_dir='')):
        with pytest.raises(ModelError, match=r'no name attribute.*<robot name="\.\.\.">'):
            build()


def test_revolute_without_limits_is_refused():
    xml = """<robot name="r"><link name="base_link"/><link name="a"/>
      <joint name="j" type="revolute"><parent link="base_link"/><child link="a"/>
      <axis xyz="0 0 1"/></joint></robot>"""
    with pytest.raises(ModelError, match='limit'):
        Chain.from_urdf(xml, tip_link='a')


def test_bad_configuration_shape_is_reported():
    chain = Chain.from_urdf(ARM7)
    with pytest.raises(ModelError, match='7 entries'):
        chain.fk(np.zeros(6))


def test_programmatic_prismatic_and_fixed_joints():
    origin = np.eye(4)
    origin[:3, 3] = (0.0, 0.0, 0.2)
    joints = [
        JointSpec('slide', 'base_link', 'carriage', type='prismatic', axis=(1.0, 0.0, 0.0),
                  lower=-0.5, upper=0.5),
        JointSpec('mount', 'carriage', 'plate', type='fixed', origin=origin),
        JointSpec('turn', 'plate', 'tool', type='revolute', axis=(0.0, 0.0, 1.0)),
    ]
    chain = Chain.from_joints(joints, 'base_link', 'tool')
    pose = chain.fk(np.array([0.3, np.pi / 2]))
    np.testing.assert_allclose(pose[:3, 3], [0.3, 0.0, 0.2], atol=1e-12)
    np.testing.assert_allclose(pose[:3, 0], [0.0, 1.0, 0.0], atol=1e-12)


def test_floating_joint_off_the_chain_is_ignored_on_the_chain_refused():
    with open(ARM7) as f:
        xml = f.read()
    extra = ('<link name="world"/><link name="drone"/>'
             '<joint name="free" type="floating"><parent link="world"/><child link="drone"/>'
             '</joint><joint name="mount" type="fixed"><parent link="world"/>'
             '<child link="base_link"/></joint></robot>')
    xml = xml.replace('</robot>', extra)
    chain = Chain.from_urdf(xml)
    assert chain.joint_names == Chain.from_urdf(ARM7).joint_names
    with pytest.raises(ModelError, match="'free' .* is floating"):
        Chain.from_urdf(xml, base_link='world', tip_link='drone')


def test_public_structure_describes_the_model():
    """The structure properties agree with joint names, Jacobians and limits."""
    chain = Chain.from_urdf(MIMIC)
    B = chain.num_bodies
    assert len(chain.body_parent) == len(chain.body_kind) == len(chain.body_joint) == B
    assert chain.body_origin.shape == (B, 4, 4) and chain.body_offset.shape == (B, 3)
    assert all(p < b for b, p in enumerate(chain.body_parent))
    for b in range(B):
        assert chain.descendants[b][0] == b
        assert set(chain.columns_of_body[b]) >= {c for c in range(len(chain.column_body))
                                                 if chain.column_body[c] == b}
    mimic = [b for b in range(B) if chain.body_mimic[b] is not None]
    assert mimic, 'mimic_prismatic.urdf has a mimic joint'
    for b in mimic:
        assert chain.body_joint[b] not in chain.joint_names
    assert chain.column_scatter.shape == (len(chain.column_body), chain.nv)
    for name in chain.joint_names:
        assert chain.joint_velocity_index(name) == chain.joint_index(name)
    assert len(chain.prismatic_bodies) and all(chain.body_kind[b] == BODY_PRISMATIC
                                               for b in chain.prismatic_bodies)
    assert not chain.is_body_frame('base_link')
    with pytest.raises(ModelError, match='joints of this chain'):
        chain.joint_velocity_index('nope')
    with pytest.raises(ValueError):
        chain.scalar_q[0] = 3
    # Ball chain: index maps of the quaternions and rotation vectors.
    ball = ball_chain(3)
    assert ball.ball_q_index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert ball.ball_v_index.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(k == BODY_BALL for k in ball.body_kind)
    assert [qi for _, qi in ball.ball_bodies] == [0, 4, 8]
    assert ball.is_body_frame('seg2') and not ball.is_body_frame('tip')
    body, off = ball.link_anchor('tip')
    assert body == 2 and np.allclose(off[:3, 3], (0.0, 0.0, 1.0))


@pytest.mark.parametrize('path,tip', CASES)
def test_random_configuration_draws_generator_uniforms_numbers(path, tip):
    """The draw is Generator.uniform(lower, upper)'s, bit for bit and in the same order
    (seeded runs keep their streams): single rows, batches, and the draws after them."""
    chain = Chain.from_urdf(path, 'base_link', tip)
    for seed in range(20):
        ours, reference = np.random.default_rng(seed), np.random.default_rng(seed)
        for size in (None, 1, 7, 100):
            q = chain.random_configuration(ours, size)
            expected = reference.uniform(chain.lower, chain.upper,
                                         size=(1 if size is None else size, chain.nq))
            expected = expected[0] if size is None else expected
            assert q.shape == expected.shape
            assert q.tobytes() == expected.tobytes()
            assert np.all(chain.within_limits(q))
        assert ours.random() == reference.random()


def test_random_configuration_of_a_ball_chain_stays_on_its_own_path():
    chain = ball_chain(3, 0.1, max_angle=1.0)
    q = chain.random_configuration(np.random.default_rng(3), 50)
    assert q.shape == (50, chain.nq)
    assert chain.within_limits(q).all()


@pytest.mark.parametrize('path,tip', CASES)
def test_clip_of_one_configuration_is_np_clip_of_a_copy(path, tip):
    """One float configuration takes a shorter path through ``clip``: the same numbers as a
    batch row and as np.clip (NaN kept; other dtypes through the general path), always a
    new float array."""
    chain = Chain.from_urdf(path, 'base_link', tip)
    rng = np.random.default_rng(8)
    batch = rng.normal(0.0, 3.0, (200, chain.nq))
    batch[::17, 0] = np.nan
    rows = chain.clip(batch)
    for q, row in zip(batch, rows):
        for value in (q, q.astype(np.float32), np.round(q * 3).astype(np.int64)
                      if np.isfinite(q).all() else q):
            out = chain.clip(value)
            expected = np.clip(np.array(value, dtype=float), chain.lower, chain.upper)
            assert out.dtype == np.float64 and out.shape == (chain.nq,)
            assert out.tobytes() == expected.tobytes()
            assert not np.shares_memory(out, value)
        assert chain.clip(q).tobytes() == row.tobytes()
    with pytest.raises(ValueError):
        chain.clip(np.zeros(chain.nq + 1))
