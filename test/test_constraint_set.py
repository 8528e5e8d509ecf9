"""The node's constraint set without ROS: schema entries + marker spheres, frames, refusals."""

import numpy as np
import pytest

from smcik_ros.control.constraints import ConstraintSet
from smcik_ros.control.frames import FrameResolver
from smcik_ros.errors import GoalError
from smcik_ros.goals import KeepOutSphere
from smcik_ros.kinematics import Chain

from arm_urdfs import ur5_like_urdf


@pytest.fixture
def constraint_set():
    chain = Chain.from_urdf(ur5_like_urdf(), 'base_link', 'tool0')
    resolver = FrameResolver(chain)
    q = np.zeros(chain.n)
    return ConstraintSet(chain, lambda frame: resolver.pose(frame, q), resolver.links), \
        resolver


def test_schema_and_markers_make_one_set_in_the_base_frame(constraint_set):
    constraints, resolver = constraint_set
    specs = constraints.parse('- {type: keep_out_sphere, center: [1.0, 0.0, 1.0], radius: 0.1,'
                              ' frame: world}\n- {type: posture, q: {joint2: -1.0}}')
    objects = constraints.replace_specs(specs)
    world = resolver.pose('world', None)
    assert len(objects) == 2 and constraints.summary() == '1 keep_out_sphere, 1 posture'
    assert objects[0].center == pytest.approx(world[:3, :3] @ [1.0, 0.0, 1.0] + world[:3, 3])
    objects = constraints.replace_markers({('obst', 1): ('world', np.array([0.5, 0.5, 1.0]),
                                                         0.2)})
    assert len(objects) == 3 and isinstance(objects[-1], KeepOutSphere)
    assert len(constraints.spheres) == 2
    assert constraints.marker_frames()[('obst', 1)][0] == 'base_link'
    # Replacing the schema keeps the markers, and the other way round.
    assert len(constraints.replace_specs([])) == 1 and constraints.summary() == 'none'


def test_a_refused_replacement_keeps_the_whole_set(constraint_set):
    constraints, _ = constraint_set
    constraints.replace_specs(constraints.parse('- {type: posture, q: {joint2: -1.0}}'))
    before = list(constraints.objects)
    with pytest.raises(GoalError, match='nowhere'):
        constraints.replace_markers({('x', 0): ('nowhere', np.zeros(3), 0.1)})
    with pytest.raises(GoalError):
        constraints.parse('- {type: cube}')
    assert constraints.objects == before and constraints.markers == {}
