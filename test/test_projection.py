"""goals.projection: configurations projected back onto planted feet, a held tool and the
support polygon; checked with the constraints' own errors and an independent polygon test,
over seeded random perturbations."""

import os

import numpy as np
import pytest

from smcik_ros.errors import GoalError
from smcik_ros.goals import CenterOfMassPolygon, Contact, PlaneContact, PositionTarget, project
from smcik_ros.model import Chain

from test_goals_body import BIPED, TIPS, standing

HERE = os.path.dirname(__file__)


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(BIPED, 'pelvis', TIPS, floating_base=True)


def _inside(polygon, points):
    """Return (N,) bool: points (N, 2) inside the counter-clockwise convex polygon."""
    a, b = polygon, np.roll(polygon, -1, axis=0)
    cross = ((b - a)[:, 0] * (points[:, None, 1] - a[:, 1])
             - (b - a)[:, 1] * (points[:, None, 0] - a[:, 0]))
    return (cross >= -1e-12).all(axis=1)


def _feet(biped, q):
    """Return the two sole contacts anchored at q and the feet's support polygon there."""
    contacts = [Contact(link).bind(biped).anchor(q) for link in ('l_sole', 'r_sole')]
    corners = []
    for c in contacts:
        for x in (-0.12, 0.12):
            for y in (-0.05, 0.05):
                corners.append((c.pose @ [x, y, 0.0, 1.0])[:2])
    return contacts, np.array(corners)


def test_a_perturbed_biped_goes_back_onto_both_feet_and_its_support(biped):
    q0 = standing(biped)
    contacts, feet = _feet(biped, q0)
    support = CenterOfMassPolygon(feet, margin=0.02).bind(biped)
    rng = np.random.default_rng(41)
    q = np.tile(q0, (200, 1))
    q[:, biped.command_index] += rng.normal(0.0, 0.05, (200, len(biped.command_index)))
    q[:, biped.base_index] += rng.normal(0.0, 0.01, (200, 6))
    q = biped.clip(q)
    frames = biped.frames(q)
    assert contacts[0].violated(frames).mean() > 0.9          # the perturbation leaves them
    out, ok = project(biped, q, contacts + [support])
    frames = biped.frames(out)
    for c in contacts:
        pos, ori = c.errors(frames)
        assert pos.max() < 1e-3 and ori.max() < 0.01, (pos.max(), ori.max())
    assert _inside(support.region, frames.center_of_mass()[:, :2]).all()
    assert ok.all() and biped.within_limits(out).all()
    # Minimal change: the projection moves the joints by about the perturbation, no more.
    assert np.abs(out - q).max() < 0.5


def test_the_com_is_brought_inside_a_support_it_started_outside_of(biped):
    q0 = standing(biped)
    contacts, feet = _feet(biped, q0)
    com = biped.center_of_mass(q0)
    back = feet.copy()
    back[:, 0] = np.clip(back[:, 0], None, com[0] - 0.015)     # the support ends behind it
    support = CenterOfMassPolygon(back, margin=0.0).bind(biped)
    assert support.violated(biped.frames(q0))[0]
    out, ok = project(biped, q0, contacts + [support], iterations=10)
    frames = biped.frames(out)
    assert ok and not support.violated(frames)[0]
    assert _inside(support.region, frames.center_of_mass()[:, :2]).all()
    for c in contacts:
        pos, ori = c.errors(frames)
        assert pos[0] < 1e-3 and ori[0] < 0.01


def test_a_held_tool_stays_held_on_a_fixed_arm(arm7):
    rng = np.random.default_rng(42)
    q0 = arm7.random_configuration(rng)
    q0 = 0.5 * q0 + 0.5 * arm7.neutral_configuration()
    grip = Contact('tool0').bind(arm7).anchor(q0)
    q = arm7.clip(q0 + rng.normal(0.0, 0.03, (100, arm7.nq)))
    out, ok = project(arm7, q, [grip])
    pos, ori = grip.errors(arm7.frames(out))
    assert pos.max() < 1e-3 and ori.max() < 0.01
    assert ok.mean() == 1.0 and arm7.within_limits(out).all()


def test_joint_limits_hold_and_blocked_joints_stay_put(arm7):
    """A joint at its limit whose free step would pass it is blocked; the others close the
    contact."""
    rng = np.random.default_rng(43)
    hits = 0
    for _ in range(20):
        q0 = arm7.random_configuration(rng)
        q0[3] = arm7.upper[3]
        grip = Contact('tool0').bind(arm7).anchor(q0)
        q = q0 + rng.normal(0.0, 0.03, arm7.nq)
        q[3] = arm7.upper[3]
        out, ok = project(arm7, q, [grip])
        assert arm7.within_limits(out)
        hits += ok
    assert hits >= 18


def test_configurations_that_keep_everything_are_not_touched(biped):
    q0 = standing(biped)
    contacts, feet = _feet(biped, q0)
    constraints = contacts + [CenterOfMassPolygon(feet).bind(biped),
                              PositionTarget((1.0, 0.0, 1.0), link='l_palm')]   # soft: ignored
    out, ok = project(biped, q0, constraints)
    assert ok is True and out.shape == (biped.nq,)
    np.testing.assert_array_equal(out, q0)
    out, ok = project(biped, np.tile(q0, (3, 1)), [])
    assert ok.tolist() == [True] * 3


def test_one_sided_hard_planes_and_tolerance_override(biped):
    q0 = standing(biped)
    floor = PlaneContact('l_sole', offset=0.02, hard=True, one_sided=True)
    out, ok = project(biped, q0, [floor])
    height = biped.fk(out, 'l_sole')[2, 3]
    assert ok and 0.02 <= height < 0.021
    planted = PlaneContact('r_sole', offset=0.0, hard=True)
    out, ok = project(biped, q0 + 0.02, [planted], tolerance=1e-6)
    assert ok and abs(biped.fk(out, 'r_sole')[2, 3]) <= 1e-6


def test_misuse_says_what_was_expected(biped):
    q0 = standing(biped)
    with pytest.raises(GoalError, match="Contact on 'l_sole' has no pose yet"):
        project(biped, q0, [Contact('l_sole').bind(biped)])
    with pytest.raises(GoalError, match=f'weights must be {biped.nv} positive numbers'):
        project(biped, q0, [], weights=np.zeros(biped.nv))


def test_near_singular_rows_are_reached_by_damped_steps(biped):
    """Both soles and both palms held (24 rows on the 26 joints that move them: 4-DOF arms,
    like Unitree H1's): rows that some directions of a radian barely move. Over 200 seeded
    perturbations of 0.03 rad, the damped steps (the default) reach more configurations
    than the minimal-norm steps within their five iterations, and wander less on the way
    (the 90th percentile of the largest joint change)."""
    rng = np.random.default_rng(11)
    q0 = standing(biped)
    arms = ['torso_yaw'] + [f'{side}_{j}' for side in 'lr'
                            for j in ('shoulder_pitch', 'shoulder_roll', 'elbow', 'wrist')]
    reached, moved = {0.0: 0, None: 0}, {0.0: [], None: []}
    for _ in range(200):
        q = q0.copy()
        for joint in arms:
            q[biped.joint_index(joint)] = rng.uniform(-0.8, 0.8)
        q = biped.clip(q)
        held = [Contact(link).bind(biped).anchor(q) for link in TIPS]
        start = q.copy()
        start[biped.command_index] += rng.normal(0.0, 0.03, len(biped.command_index))
        for damping in reached:
            out, ok = project(biped, start, held) if damping is None else \
                project(biped, start, held, damping=damping)
            reached[damping] += ok
            moved[damping].append(np.abs(out - start).max())
    assert reached[None] > reached[0.0], reached
    wander = {damping: np.quantile(moved[damping], 0.9) for damping in moved}
    assert wander[None] < 0.8 * wander[0.0], wander
