"""Unit tests of smcik_ros.constraint_schema (pure Python: no graph, no rclpy)."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from smcik_ros import constraint_schema as cs
from smcik_ros.errors import GoalError
from smcik_ros.collision import KeepOutSphere
from smcik_ros.goals import JointCoupling, PlaneContact, PosturePreference
from smcik_ros.model import Chain

URDF = Path(__file__).resolve().parents[1] / 'urdf' / 'smcik_arm.urdf'
JOINTS = [f'joint{i}' for i in range(1, 8)]
LINKS = ['base_link'] + [f'link{i}' for i in range(1, 8)] + ['flange', 'tool0']

FULL = """
- {type: keep_out_sphere, center: [0.4, 0.0, 0.3], radius: 0.1, frame: base_link}
- {type: posture, q: {joint4: -1.57, joint2: 0.3}, weights: 0.5}
- {type: joint_coupling, joint: joint7, source: joint1, ratio: -1.0, offset: 0.2}
- {type: plane_contact, link: tool0, normal: [0, 0, 2], offset: 0.05}
"""


@pytest.fixture(scope='module')
def chain():
    return Chain.from_urdf(str(URDF), 'base_link', 'tool0')


def test_parses_every_type():
    specs = cs.parse_constraints(FULL, JOINTS, LINKS)
    assert [s.type for s in specs] == ['keep_out_sphere', 'posture', 'joint_coupling',
                                       'plane_contact']
    sphere, posture, coupling, plane = specs
    assert sphere.center == (0.4, 0.0, 0.3) and sphere.radius == 0.1
    assert dict(posture.q) == {'joint4': -1.57, 'joint2': 0.3}
    assert dict(posture.weights) == {'joint4': 0.5, 'joint2': 0.5}
    assert (coupling.joint, coupling.source, coupling.ratio, coupling.offset) == \
        ('joint7', 'joint1', -1.0, 0.2)
    assert plane.normal == pytest.approx((0.0, 0.0, 1.0))   # normalised


def test_json_and_mapping_forms_are_the_same_schema():
    as_json = '{"constraints": [{"type": "keep_out_sphere", "center": [1, 2, 3], "radius": 0.5}]}'
    specs = cs.parse_constraints(as_json, JOINTS, LINKS)
    assert specs == cs.parse_constraints(yaml.safe_load(as_json)['constraints'], JOINTS, LINKS)
    assert specs[0].center == (1.0, 2.0, 3.0)


@pytest.mark.parametrize('text', ['', '[]', 'constraints: []', 'null', '   \n'])
def test_empty_texts_clear_everything(text):
    assert cs.parse_constraints(text, JOINTS, LINKS) == []


def test_round_trip_through_dump():
    specs = cs.parse_constraints(FULL, JOINTS, LINKS)
    assert cs.parse_constraints(cs.dump_constraints(specs), JOINTS, LINKS) == specs
    assert cs.dump_constraints([]).strip() == '[]'


def test_posture_list_form_needs_one_value_per_joint():
    specs = cs.parse_constraints([{'type': 'posture', 'q': [0.0] * 7, 'weights': [1.0] * 7}],
                                 JOINTS, LINKS)
    assert [name for name, _ in specs[0].q] == JOINTS
    with pytest.raises(GoalError, match=r'expected 7 values .* got 6'):
        cs.parse_constraints([{'type': 'posture', 'q': [0.0] * 6}], JOINTS, LINKS)


@pytest.mark.parametrize('text, message', [
    ('type: [', r'not valid YAML'),
    ('42', r'expected a list of entries, got int'),
    ('{other: []}', r'single key "constraints"'),
    ('- 3', r'constraints\[0\]: expected a mapping'),
    ('- {type: cube}', r"unknown type 'cube'; valid types: keep_out_sphere, posture"),
    ('- {type: keep_out_sphere, center: [0, 0, 0]}', r'missing required key\(s\) radius'),
    ('- {type: keep_out_sphere, center: [0, 0], radius: 1}',
     r'center: expected a list of 3 finite numbers'),
    ('- {type: keep_out_sphere, center: [0, 0, .nan], radius: 1}', r'3 finite numbers'),
    ('- {type: keep_out_sphere, center: [0, 0, 0], radius: -1}', r'radius: expected a number > 0'),
    ('- {type: keep_out_sphere, center: [0, 0, 0], radius: 1, colour: red}',
     r'unknown key\(s\) colour; valid keys: type, center, radius'),
    ('- {type: keep_out_sphere, center: [0, 0, 0], radius: 1, frame: world}',
     r"frame: unknown name 'world'; frames of this chain: base_link"),
    ('- {type: posture, q: {joint9: 0}}', r"q: unknown name 'joint9'; joints of this chain"),
    ('- {type: posture, q: {joint1: 0}, weights: {joint2: 1}}', r'no value in q'),
    ('- {type: joint_coupling, joint: joint1, source: joint1}', r'must differ'),
    ('- {type: joint_coupling, joint: joint1, source: joint2, ratio: abc}',
     r'ratio: expected a finite number'),
    ('- {type: plane_contact, link: tool0, normal: [0, 0, 0]}', r'non-zero 3-vector'),
    ('- {type: plane_contact, link: hand, normal: [0, 0, 1]}', r"unknown name 'hand'"),
    ('- {type: plane_contact, link: tool0, normal: [0, 0, 1], weight: 0}', r'weight'),
])
def test_malformed_input_names_the_problem(text, message):
    with pytest.raises(GoalError, match=message):
        cs.parse_constraints(text, JOINTS, LINKS)


def test_second_bad_entry_refuses_the_whole_set():
    text = FULL + '- {type: posture}\n'
    with pytest.raises(GoalError, match=r'constraints\[4\] \(posture\): missing'):
        cs.parse_constraints(text, JOINTS, LINKS)


def test_frames_unchecked_when_frame_names_is_none():
    specs = cs.parse_constraints('- {type: keep_out_sphere, center: [0, 0, 0], radius: 1, '
                                 'frame: world}', JOINTS, LINKS, frame_names=None)
    assert specs[0].frame == 'world'


def test_build_makes_core_objects(chain):
    objects = cs.build_constraints(cs.parse_constraints(FULL, chain.joint_names,
                                                        chain.link_names), chain)
    sphere, posture, coupling, plane = objects
    assert isinstance(sphere, KeepOutSphere) and isinstance(posture, PosturePreference)
    assert isinstance(coupling, JointCoupling) and isinstance(plane, PlaneContact)
    np.testing.assert_allclose(sphere.center, [0.4, 0.0, 0.3])
    q = chain.neutral_configuration()
    q[3] = -1.0
    frames = chain.frames(q)
    # Posture residual: only the listed joints count, scaled by their weight.
    residual = posture.residual(frames)[0]
    assert residual[3] == pytest.approx(0.5 * (-1.0 + 1.57))
    assert residual[0] == 0.0
    assert plane.residual(frames)[0, 0] == pytest.approx(chain.fk(q)[2, 3] - 0.05)


def test_build_moves_frames_into_the_base(chain):
    q = chain.neutral_configuration()
    link3 = chain.fk(q, link='link3')
    spec = cs.parse_constraints('- {type: keep_out_sphere, center: [0.1, 0, 0], radius: 0.05, '
                                'frame: link3}\n- {type: plane_contact, link: tool0, '
                                'normal: [0, 0, 1], offset: 0.2, frame: link3}',
                                chain.joint_names, chain.link_names)
    sphere, plane = cs.build_constraints(spec, chain, lambda f: chain.fk(q, link=f))
    np.testing.assert_allclose(sphere.center, link3[:3, :3] @ [0.1, 0, 0] + link3[:3, 3])
    # A point 0.2 m along link3's z lies on the plane.
    on_plane = link3[:3, :3] @ [0.0, 0.0, 0.2] + link3[:3, 3]
    assert plane.normal @ on_plane == pytest.approx(plane.offset)


def test_build_refuses_non_base_frame_without_lookup(chain):
    spec = cs.parse_constraints('- {type: keep_out_sphere, center: [0, 0, 0], radius: 1, '
                                'frame: link2}', chain.joint_names, chain.link_names)
    with pytest.raises(GoalError, match=r"constraints\[0\] \(keep_out_sphere\): frame 'link2'"):
        cs.build_constraints(spec, chain)


# ---------------------------------------------------------------------------- the figure's
BIPED = Path(__file__).resolve().parent / 'urdf' / 'biped.urdf'
FIGURE = """
- {type: center_of_mass, support: [l_foot, r_foot], margin: 0.02}
- {type: center_of_mass, polygon: [[0, 0], [0.2, 0], [0.2, 0.1], [0, 0.1]], frame: l_sole,
   hard: false, sigma: 0.02}
- {type: center_of_mass, point: [0, 0, 0], direction: [0, 0, 2], margin: 0.005}
- {type: contact, link: l_sole}
- {type: contact, link: r_palm, pose: {position: [0.3, -0.2, 1.0], orientation: [0, 0, 0, 1]},
   frame: l_sole}
- {type: smoothness, joints: [l_hip_pitch, l_knee, l_ankle_pitch], neighbours: 2, sigma: 0.3}
- {type: plane_contact, link: r_sole, normal: [0, 0, 1], sigma: 0.002, one_sided: true,
   hard: true}
- {type: target, link: torso, orientation: [0, 0, 0.0998, 0.995]}
- {type: target, link: l_palm, position: [0.4, 0.2, 1.0], sigma_position: 0.005}
- {type: target, link: r_palm, position: [0.4, -0.2, 1.0], orientation: [0, 0, 0, 1]}
"""


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(str(BIPED), 'pelvis', ['l_palm', 'r_palm', 'l_sole', 'r_sole'],
                           floating_base=True)


def _stand(chain):
    q = np.zeros(chain.nq)
    for side in 'lr':
        q[chain.joint_index(f'{side}_hip_pitch')] = -0.3
        q[chain.joint_index(f'{side}_knee')] = 0.6
        q[chain.joint_index(f'{side}_ankle_pitch')] = -0.3
    q[chain.joint_index('floating_base_z')] = 0.1 + 0.8 * np.cos(0.3) + 0.08
    return q


def test_the_figures_entries_parse_and_round_trip(biped):
    specs = cs.parse_constraints(FIGURE, biped.joint_names, biped.link_names)
    assert [s.type for s in specs] == ['center_of_mass'] * 3 + ['contact'] * 2 + [
        'smoothness', 'plane_contact'] + ['target'] * 3
    support, polygon, line, contact, held, smooth, plane, turn, reach, pose = specs
    assert support.support == ('l_foot', 'r_foot') and support.margin == 0.02 and support.hard
    assert polygon.polygon[2] == (0.2, 0.1) and not polygon.hard and polygon.frame == 'l_sole'
    assert line.point == (0.0, 0.0, 0.0) and line.direction == (0.0, 0.0, 2.0)
    assert contact.position is None and held.orientation == (0.0, 0.0, 0.0, 1.0)
    assert smooth.joints == ('l_hip_pitch', 'l_knee', 'l_ankle_pitch') and smooth.neighbours == 2
    assert plane.one_sided and plane.hard and plane.sigma == 0.002
    assert turn.position is None and reach.orientation is None and pose.position is not None
    assert cs.parse_constraints(cs.dump_constraints(specs), biped.joint_names,
                                biped.link_names) == specs


def test_the_figures_entries_build_core_objects(biped):
    from smcik_ros.goals import (CenterOfMassLine, CenterOfMassPolygon, ChainSmoothness,
                                 Contact, OrientationTarget, PoseTarget, PositionTarget)
    q = _stand(biped)
    specs = cs.parse_constraints(FIGURE, biped.joint_names, biped.link_names)
    sole = biped.fk(q, 'l_sole')
    objects = cs.build_constraints(specs, biped, lambda frame: biped.fk(q, frame),
                                   urdf=str(BIPED), q=q)
    support, polygon, line, contact, held, smooth, plane, turn, reach, pose = objects
    assert isinstance(support, CenterOfMassPolygon) and support.anchored
    np.testing.assert_allclose([support.region[:, 0].min(), support.region[:, 1].max()],
                               [-0.07, 0.13], atol=1e-9)
    assert not support.violated(biped.frames(q))[0]
    np.testing.assert_allclose(polygon.polygon.min(axis=0), sole[:2, 3], atol=1e-9)
    assert not polygon.hard and polygon.sigma[0] == 0.02
    assert isinstance(line, CenterOfMassLine) and line.equality and line.tolerance[0] == 0.005
    assert isinstance(contact, Contact) and contact.anchored
    np.testing.assert_allclose(contact.pose, sole, atol=1e-12)
    np.testing.assert_allclose(held.pose[:3, 3], sole[:3, :3] @ [0.3, -0.2, 1.0] + sole[:3, 3])
    assert isinstance(smooth, ChainSmoothness) and smooth.sigma.shape == (3,)
    assert plane.hard and plane.one_sided and not plane.equality
    assert isinstance(turn, OrientationTarget) and turn.link == 'torso'
    assert isinstance(reach, PositionTarget) and reach.sigma[0] == 0.005
    assert isinstance(pose, PoseTarget)
    assert cs.needs_anchor(objects) == []


def test_a_hard_support_polygon_is_kept_com_guard_inside_its_margin(biped):
    """The node keeps a hard support polygon COM_GUARD farther inside than its margin (its
    brakes and projections can pass a checked edge by a fraction of a millimetre); a soft
    one is a cost at the margin itself."""
    text = ('- {type: center_of_mass, polygon: [[0, 0], [0.2, 0], [0.2, 0.1], [0, 0.1]], '
            'margin: 0.01}\n'
            '- {type: center_of_mass, polygon: [[0, 0], [0.2, 0], [0.2, 0.1], [0, 0.1]], '
            'margin: 0.01, hard: false}')
    hard, soft = cs.build_constraints(cs.parse_constraints(text, biped.joint_names,
                                                           biped.link_names), biped)
    assert (hard.margin, hard.guard, soft.guard) == (0.01, cs.COM_GUARD, 0.0)


def test_entries_anchor_later_without_a_configuration(biped):
    specs = cs.parse_constraints('- {type: center_of_mass, support: [l_foot, r_foot]}\n'
                                 '- {type: contact, link: r_sole}', biped.joint_names,
                                 biped.link_names)
    objects = cs.build_constraints(specs, biped, urdf=BIPED.read_text(), urdf_path=str(BIPED))
    assert cs.needs_anchor(objects) == objects
    for term in objects:
        term.anchor(biped.frames(_stand(biped)))
    assert cs.needs_anchor(objects) == []
    with pytest.raises(GoalError, match=r'constraints\[0\] \(center_of_mass\): support links '
                                        r'need the URDF'):
        cs.build_constraints(specs, biped)
    bad = cs.parse_constraints('- {type: center_of_mass, support: [l_sole]}', None, None)
    with pytest.raises(GoalError, match="support link 'l_sole' has no <collision> shape"):
        cs.build_constraints(bad, biped, urdf=str(BIPED))


@pytest.mark.parametrize('text, message', [
    ('- {type: center_of_mass}', r'expected one of support .* got none of them'),
    ('- {type: center_of_mass, support: [a], polygon: [[0, 0], [1, 0], [0, 1]]}',
     r'got support, polygon'),
    ('- {type: center_of_mass, polygon: [[0, 0], [1, 0]]}', r'at least 3 points'),
    ('- {type: center_of_mass, polygon: [[0, 0], [1, 0], [0, 1, 2]]}',
     r'polygon\[2\]: expected a list of 2 finite numbers'),
    ('- {type: center_of_mass, support: [l_foot], margin: -0.1}', r'margin: expected .* >= 0'),
    ('- {type: center_of_mass, support: [l_foot], hard: yes please}', r'hard: expected true'),
    ('- {type: center_of_mass, support: [l_foot], frame: l_sole}', r'frame applies to polygon'),
    ('- {type: center_of_mass, polygon: [[0, 0], [1, 0], [0, 1]], direction: [0, 0, 1]}',
     r'direction belongs to the line form'),
    ('- {type: center_of_mass, point: [0, 0, 0], direction: [0, 0, 0]}', r'non-zero 3-vector'),
    ('- {type: contact}', r'missing required key\(s\) link'),
    ('- {type: contact, link: head}', r"unknown name 'head'"),
    ('- {type: contact, link: l_sole, pose: {position: [0, 0, 0]}}',
     r'pose: expected \{position: \[x, y, z\], orientation: \[x, y, z, w\]\}'),
    ('- {type: contact, link: l_sole, pose: {position: [0, 0, 0], orientation: [0, 0, 0, 0]}}',
     r'non-zero quaternion'),
    ('- {type: contact, link: l_sole, frame: l_sole}', r'frame applies to a given pose'),
    ('- {type: smoothness, neighbours: 0}', r'neighbours: expected an integer >= 1'),
    ('- {type: smoothness, joints: l_knee}', r'joints: expected a list of joint names'),
    ('- {type: smoothness, joints: [knee]}', r"unknown name 'knee'; joints of this chain"),
    ('- {type: target, link: torso}', r'position \[x, y, z\] and/or orientation'),
    ('- {type: plane_contact, link: l_sole, normal: [0, 0, 1], one_sided: 1}',
     r'one_sided: expected true or false'),
    ('- {type: plane_contact, link: l_sole, normal: [0, 0, 1], sigma: 0}', r'sigma: expected'),
])
def test_malformed_figure_entries_name_the_problem(biped, text, message):
    with pytest.raises(GoalError, match=message):
        cs.parse_constraints(text, biped.joint_names, biped.link_names)
