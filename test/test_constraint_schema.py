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
