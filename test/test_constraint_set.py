"""The node's constraint set without ROS: schema entries, obstacles to the scene, refusals."""

import numpy as np
import pytest

from smcik_ros.collision import KeepOutSphere
from smcik_ros.control.constraints import ConstraintSet
from smcik_ros.control.frames import FrameResolver
from smcik_ros.errors import GoalError
from smcik_ros.goals import PosturePreference
from smcik_ros.model import Chain

from arm_urdfs import ur5_like_urdf
from collision_helpers import demo_model
from conftest import ARM7_URDF


@pytest.fixture
def constraint_set():
    chain = Chain.from_urdf(ur5_like_urdf(), 'base_link', 'tool0')
    resolver = FrameResolver(chain)
    q = np.zeros(chain.n)
    return ConstraintSet(chain, lambda frame: resolver.pose(frame, q), resolver.links), \
        resolver


def test_without_a_model_obstacles_are_constraint_objects_in_the_base_frame(constraint_set):
    constraints, resolver = constraint_set
    specs = constraints.parse('- {type: keep_out_sphere, center: [1.0, 0.0, 1.0], radius: 0.1,'
                              ' frame: world}\n- {type: posture, q: {joint2: -1.0}}')
    objects = constraints.replace_specs(specs)
    world = resolver.pose('world', None)
    assert len(objects) == 2 and constraints.summary() == '1 keep_out_sphere, 1 posture'
    assert isinstance(objects[0], PosturePreference) and isinstance(objects[1], KeepOutSphere)
    expected = world[:3, :3] @ [1.0, 0.0, 1.0] + world[:3, 3]
    assert objects[1].center == pytest.approx(expected)
    # Drawn on ~/collision, not in the scene (there is no model to check it against).
    assert constraints.obstacles == {}
    (key, obstacle), = constraints.drawn
    assert key == ('constraints', 0) and obstacle.pose[:3, 3] == pytest.approx(expected)
    assert constraints.replace_specs([]) == [] and constraints.summary() == 'none'
    assert constraints.drawn == []


def test_with_a_model_obstacles_go_to_the_scene():
    chain, model = demo_model(ARM7_URDF)
    resolver = FrameResolver(chain)
    constraints = ConstraintSet(chain, lambda frame: resolver.pose(frame, np.zeros(chain.n)),
                                resolver.links, model=model)
    specs = constraints.parse(
        '- {type: obstacle, id: table, shape: box, size: [1.0, 1.0, 0.1], '
        'position: [0.6, 0.0, -0.1]}\n'
        '- {type: keep_out_sphere, center: [0.5, 0.5, 0.5], radius: 0.1}\n'
        '- {type: posture, q: {joint2: -1.0}}')
    objects = constraints.replace_specs(specs)
    assert len(objects) == 1 and isinstance(objects[0], PosturePreference)
    assert set(constraints.obstacles) == {('constraints', 'table'), ('constraints', 1)}
    table = constraints.obstacles[('constraints', 'table')]
    assert table.shape == 'box' and table.pose[:3, 3] == pytest.approx([0.6, 0.0, -0.1])
    assert constraints.drawn == []


def test_a_refused_replacement_keeps_the_whole_set(constraint_set):
    constraints, _ = constraint_set
    constraints.replace_specs(constraints.parse('- {type: posture, q: {joint2: -1.0}}'))
    before = list(constraints.objects)
    with pytest.raises(GoalError, match='nowhere'):
        constraints.replace_specs(constraints.parse(
            '- {type: keep_out_sphere, center: [0, 0, 0], radius: 0.1, frame: nowhere}'))
    with pytest.raises(GoalError):
        constraints.parse('- {type: cube}')
    assert constraints.objects == before and constraints.summary() == '1 posture'
