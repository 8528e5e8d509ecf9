"""The constraint YAML's obstacle entries (``type: obstacle``); keep-out spheres as obstacles."""

import numpy as np
import pytest

from smcik_ros import constraint_schema as cs
from smcik_ros.collision import CollisionConstraint, KeepOutObstacle, KeepOutSphere, Scene
from smcik_ros.errors import GoalError

from collision_helpers import demo_model
from conftest import ARM7_URDF

JOINTS = [f'joint{i}' for i in range(1, 8)]
LINKS = ['base_link'] + [f'link{i}' for i in range(1, 8)] + ['flange', 'tool0']

OBSTACLES = """
- {type: obstacle, shape: box, size: [0.6, 0.4, 0.02], position: [0.5, 0, 0.2], id: shelf}
- {type: obstacle, shape: sphere, radius: 0.05, position: [0.1, 0, 0], frame: link3}
- {type: obstacle, shape: cylinder, radius: 0.03, height: 0.5, position: [0.3, 0.3, 0.25],
   rpy: [1.5707963267948966, 0, 0], links: [tool0, flange], weight: 2.0}
- {type: obstacle, shape: box, size: [0.1, 0.1, 0.1], position: [0, 0.5, 0.1],
   orientation: [0, 0, 0.7071067811865476, 0.7071067811865476]}
- {type: keep_out_sphere, center: [0.4, 0.0, 0.3], radius: 0.1}
"""


def test_obstacle_entries_parse_and_round_trip():
    specs = cs.parse_constraints(OBSTACLES, JOINTS, LINKS)
    assert [s.type for s in specs] == ['obstacle'] * 4 + ['keep_out_sphere']
    shelf, ball, rod, cube, _ = specs
    assert shelf.shape == 'box' and shelf.size == (0.6, 0.4, 0.02) and shelf.id == 'shelf'
    assert ball.size == (0.05,) and ball.frame == 'link3'
    assert rod.size == (0.03, 0.5) and rod.links == ('tool0', 'flange') and rod.weight == 2.0
    assert cube.orientation == pytest.approx((0, 0, 0.7071067811865476, 0.7071067811865476))
    assert cs.parse_constraints(cs.dump_constraints(specs), JOINTS, LINKS) == specs


@pytest.mark.parametrize('text,match', [
    ('- {type: obstacle, shape: cone, position: [0, 0, 0]}', 'expected one of sphere, box'),
    ('- {type: obstacle, shape: box, position: [0, 0, 0]}', 'a box needs size'),
    ('- {type: obstacle, shape: box, size: [1, 0, 1], position: [0, 0, 0]}', 'side lengths > 0'),
    ('- {type: obstacle, shape: sphere, radius: -1, position: [0, 0, 0]}', 'radius: expected'),
    ('- {type: obstacle, shape: cylinder, radius: 0.1, position: [0, 0, 0]}', 'needs height'),
    ('- {type: obstacle, shape: sphere, radius: 0.1, size: [1, 1, 1], position: [0, 0, 0]}',
     'size: not a dimension of a sphere'),
    ('- {type: obstacle, shape: sphere, radius: 0.1, position: [0, .nan, 0]}',
     '3 finite numbers'),
    ('- {type: obstacle, shape: sphere, radius: 0.1, position: [0, 0, 0], '
     'orientation: [0, 0, 0, 0]}', 'non-zero quaternion'),
    ('- {type: obstacle, shape: sphere, radius: 0.1, position: [0, 0, 0], rpy: [0, 0, 0], '
     'orientation: [0, 0, 0, 1]}', 'not both'),
    ('- {type: obstacle, shape: sphere, radius: 0.1, position: [0, 0, 0], links: [hand]}',
     "unknown name 'hand'"),
    ('- {type: obstacle, shape: sphere, radius: 0.1, position: [0, 0, 0], id: [1]}',
     'id: expected a name or an integer'),
])
def test_malformed_obstacle_entries_are_refused(text, match):
    with pytest.raises(GoalError, match=match):
        cs.parse_constraints(text, JOINTS, LINKS)


def test_build_gives_collision_constraints_with_frames_applied():
    chain, model = demo_model(ARM7_URDF)
    q = chain.neutral_configuration()
    specs = cs.parse_constraints(OBSTACLES, JOINTS, LINKS)
    objects = cs.build_constraints(specs, chain, lambda f: chain.fk(q, link=f),
                                   collision_model=model)
    assert all(isinstance(o, KeepOutObstacle) for o in objects)
    assert isinstance(objects[4], KeepOutSphere) and objects[4].model is model
    link3 = chain.fk(q, link='link3')
    np.testing.assert_allclose(objects[1].obstacle.center, link3[:3, :3] @ [0.1, 0, 0] +
                               link3[:3, 3])
    # rpy (pi/2, 0, 0): the cylinder's axis (its z) turns to -y.
    np.testing.assert_allclose(objects[2].obstacle.pose[:3, 2], [0, -1, 0], atol=1e-12)
    np.testing.assert_allclose(objects[3].obstacle.pose[:3, 0], [0, 1, 0], atol=1e-12)
    assert objects[2].links == ('tool0', 'flange')
    # The same entries go into a scene instead when the node asks for it.
    assert cs.build_constraints(specs, chain, lambda f: chain.fk(q, link=f),
                                skip_obstacles=True) == []
    obstacles = cs.build_obstacles(specs, chain, lambda f: chain.fk(q, link=f))
    assert list(obstacles) == [('constraints', 'shelf'), ('constraints', 1),
                               ('constraints', 2), ('constraints', 3), ('constraints', 4)]
    scene = Scene()
    scene.replace_source(obstacles, 'constraints')
    c = CollisionConstraint(model, scene, self_collision=False)
    assert len(c._obstacles().keys) == 5


def test_keep_out_entries_follow_the_obstacle_in_the_scene_and_as_constraints():
    chain, model = demo_model(ARM7_URDF)
    q = chain.neutral_configuration()
    tool = chain.fk(q)[:3, 3]
    text = f'- {{type: keep_out_sphere, center: {tool.tolist()}, radius: 0.04}}'
    specs = cs.parse_constraints(text, JOINTS, LINKS)
    constraint = cs.build_constraints(specs, chain, collision_model=model)[0]
    scene = Scene(cs.build_obstacles(specs, chain))
    # A keep-out constraint's clearance is its margin (0 here); a scene's is the padding.
    via_scene = CollisionConstraint(model, scene, self_collision=False, padding=0.0)
    frames = chain.frames(q)
    assert constraint.violated(frames)[0] and via_scene.violated(frames)[0]
    assert constraint.distances(frames).distance[0] == \
        pytest.approx(via_scene.distances(frames).distance[0], abs=1e-12)


def test_duplicate_obstacle_ids_are_refused():
    chain, _ = demo_model(ARM7_URDF)
    specs = cs.parse_constraints(
        '- {type: obstacle, shape: sphere, radius: 0.1, position: [0, 0, 0], id: a}\n'
        '- {type: obstacle, shape: sphere, radius: 0.1, position: [1, 0, 0], id: a}',
        JOINTS, LINKS)
    with pytest.raises(GoalError, match=r"constraints\[1\] \(obstacle\): duplicate obstacle id"):
        cs.build_obstacles(specs, chain)
