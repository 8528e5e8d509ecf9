"""Planted contacts and the surfaces they stand on (control/surfaces.py), without ROS: the
biped of test/urdf standing on a floor box. A contact on the left sole exempts the floor for
the left foot only (the link the sole frame is fixed to), so a motion that takes that foot a
little deeper passes the guard, where it was refused; the other foot and the rest of the
robot stay checked against the floor; the exemption ends with the contact; an obstacle the
foot comes to touch later is checked, also when its source publishes it again."""

import numpy as np
import pytest

from smcik_ros.collision import Obstacle
from smcik_ros.control.collision_guard import CollisionGuard
from smcik_ros.control.limits import limits_for_chain
from smcik_ros.control.surfaces import NO_LINK, PlantedSurfaces
from smcik_ros.goals import Contact, PlaneContact
from smcik_ros.model import Chain

from collision_helpers import cover_cache_dir

BIPED = 'test/urdf/biped.urdf'
TIPS = ['l_palm', 'r_palm', 'l_sole', 'r_sole']
HEIGHT = 0.944       # [m] the pelvis above the soles, standing
FLOOR = ('scene', 'floor')


@pytest.fixture(scope='module')
def biped():
    chain = Chain.from_urdf(BIPED, 'pelvis', TIPS, floating_base=True)
    limits, _ = limits_for_chain(chain, 0.5, 3.0)
    joints = np.zeros(limits.n)
    for side in 'lr':
        joints[limits.names.index(f'{side}_hip_pitch')] = -0.3
        joints[limits.names.index(f'{side}_knee')] = 0.6
        joints[limits.names.index(f'{side}_ankle_pitch')] = -0.3
    base = np.eye(4)
    base[2, 3] = HEIGHT
    return chain, chain.with_base(joints, base)


def _box(size, center, links=None):
    pose = np.eye(4)
    pose[:3, 3] = center
    return Obstacle('box', size, pose, links=links)


def _floor(z=-0.05):
    return _box((3.0, 3.0, 0.1), (0.0, 0.0, z))


def _guard(chain):
    guard, _ = CollisionGuard.from_urdf(chain, BIPED, urdf_path=BIPED, srdf=None,
                                        cache_dir=cover_cache_dir())
    guard.replace({FLOOR: _floor()}, 'obstacles')
    return guard


def _scene_pairs(guard, q):
    """The (link, obstacle) pairs in contact at q (self pairs left out)."""
    return {p for p, _ in guard.constraint.contacts(q) if p[1].startswith('scene/')}


def _moved(chain, q, joint, by):
    out = q.copy()
    out[chain.joint_index(joint)] += by
    return out


def _never():
    pytest.fail('the state was read: nothing changed, nothing is to be judged')


def test_a_planted_foot_is_exempt_from_the_floor_it_stands_on(biped):
    chain, q = biped
    guard = _guard(chain)
    guard.constraint.set_reference(q)
    assert {('l_foot', 'scene/floor'), ('r_foot', 'scene/floor')} <= _scene_pairs(guard, q)
    toe_down = _moved(chain, q, 'l_ankle_pitch', 0.02)     # the left toe 2-3 mm deeper
    assert not guard(q, toe_down)                            # frozen without the exemption
    surfaces = PlantedSurfaces(padding=guard.settings.padding)
    planted = [Contact('l_sole').bind(chain).anchor(q)]
    assert surfaces.update(guard.scene, guard.model, planted, lambda: None) == []
    assert guard.scene[FLOOR].links is None                  # nothing judged before a state
    lines = surfaces.update(guard.scene, guard.model, planted, lambda: q)
    assert len(lines) == 1 and 'l_foot' in lines[0] and 'scene/floor' in lines[0], lines
    assert surfaces.exempt == {FLOOR: {'l_foot'}}
    floor = guard.scene[FLOOR]
    assert 'l_foot' not in floor.links and {'r_foot', 'pelvis', 'l_shin'} <= set(floor.links)
    assert guard.scene.source_of(FLOOR) == 'obstacles'
    pairs = _scene_pairs(guard, q)
    assert ('l_foot', 'scene/floor') not in pairs and ('r_foot', 'scene/floor') in pairs
    assert guard(q, toe_down)
    assert not guard(q, _moved(chain, q, 'r_ankle_pitch', 0.02))   # the other foot
    assert not guard(q, _moved(chain, q, 'floating_base_z', -0.5))  # the rest of the robot
    version = guard.scene.version
    assert surfaces.update(guard.scene, guard.model, planted, _never) == []   # no change
    assert guard.scene.version == version and guard.scene[FLOOR] is floor
    # The contact removed: the floor applies to the left foot again, as its source gave it.
    lines = surfaces.update(guard.scene, guard.model, [], lambda: q)
    assert len(lines) == 1 and 'checked against l_foot again' in lines[0], lines
    assert guard.scene[FLOOR].links is None and surfaces.exempt == {}
    assert not guard(q, toe_down)


def test_an_obstacle_the_foot_comes_to_touch_later_is_checked(biped):
    """A plane contact on the left sole; a step 4 cm beside the left foot. The foot slides
    into the step: the step stays checked, also when its source publishes it again
    unchanged (the floor's exemption survives that too); moved by its source, the step is
    judged again where the foot is now."""
    chain, q = biped
    guard = _guard(chain)
    foot = chain.fk(q, link='l_foot')[:3, 3]
    step = ('scene', 'step')
    width = 0.2

    def the_step(y):
        return _box((0.4, width, 0.1), (foot[0], y, 0.05))
    beside = foot[1] + 0.04 + 0.5 * width + 0.06      # 4 cm from the foot's 6 cm half width
    guard.apply([('add', step, the_step(beside))], 'obstacles')
    surfaces = PlantedSurfaces(padding=guard.settings.padding)
    planted = [PlaneContact('l_sole', hard=True)]
    surfaces.update(guard.scene, guard.model, planted, lambda: q)
    assert surfaces.exempt == {FLOOR: {'l_foot'}}
    slid = _moved(chain, q, 'floating_base_y', 0.1)
    assert ('l_foot', 'scene/step') in _scene_pairs(guard, slid)
    guard.apply([('add', step, the_step(beside)), ('add', FLOOR, _floor())], 'obstacles')
    assert surfaces.update(guard.scene, guard.model, planted, lambda: slid) == []
    assert surfaces.exempt == {FLOOR: {'l_foot'}}
    assert guard.scene[step].links is None and 'l_foot' not in guard.scene[FLOOR].links
    guard.apply([('add', step, the_step(beside + 0.01))], 'obstacles')
    lines = surfaces.update(guard.scene, guard.model, planted, lambda: slid)
    assert len(lines) == 1 and 'scene/step' in lines[0], lines
    assert surfaces.exempt == {FLOOR: {'l_foot'}, step: {'l_foot'}}


def test_a_changed_obstacle_is_judged_again_and_one_for_the_feet_alone_applies_to_none(
        biped):
    chain, q = biped
    guard = _guard(chain)
    surfaces = PlantedSurfaces(padding=guard.settings.padding)
    planted = [PlaneContact('r_sole', hard=True), Contact('l_sole').bind(chain).anchor(q)]
    surfaces.update(guard.scene, guard.model, planted, lambda: q)
    assert surfaces.exempt == {FLOOR: {'l_foot', 'r_foot'}}
    # The source moves its floor 10 cm down: nothing touches it, both feet are checked.
    guard.apply([('add', FLOOR, _floor(-0.15))], 'obstacles')
    lines = surfaces.update(guard.scene, guard.model, planted, lambda: q)
    assert len(lines) == 2 and guard.scene[FLOOR].links is None, lines
    # A floor for the feet alone, back under them: it applies to no link while they stand.
    guard.apply([('add', FLOOR, _box((3.0, 3.0, 0.1), (0.0, 0.0, -0.05),
                                     links=['l_foot', 'r_foot']))], 'obstacles')
    surfaces.update(guard.scene, guard.model, planted, lambda: q)
    assert guard.scene[FLOOR].links == (NO_LINK,)
    assert not _scene_pairs(guard, q)
    # Deleted by its source: forgotten (no stale exemption when another floor comes).
    guard.apply([('delete', FLOOR)], 'obstacles')
    assert surfaces.update(guard.scene, guard.model, planted, lambda: q) == []
    assert surfaces.exempt == {}
    # Unanchored contacts and contacts on links the chain lacks exempt nothing.
    guard.apply([('add', FLOOR, _floor())], 'obstacles')
    assert surfaces.update(guard.scene, guard.model, [Contact('l_sole'),
                                                       PlaneContact('nowhere')],
                           lambda: q) == []
    assert guard.scene[FLOOR].links is None and surfaces.exempt == {}
