"""Goal and constraint terms: residual Jacobians against finite differences, validation."""


import numpy as np
import pytest

from smcik_ros.errors import GoalError
from smcik_ros.goals import (CenterOfMassLine, ChainSmoothness, JointCoupling, KeepOutSphere,
                             OrientationTarget, PlaneContact, PoseTarget, PositionTarget,
                             PosturePreference, as_goal, task_errors)
from smcik_ros.kinematics import Chain




@pytest.fixture(scope='module')
def balls():
    return Chain.ball_chain(6, 0.3, max_angle=1.2)


def _numeric_jacobian(term, chain, q, h=1e-6):
    columns = []
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = h
        plus = term.residual(chain.frames(chain.integrate(q, dv)))[0]
        minus = term.residual(chain.frames(chain.integrate(q, -dv)))[0]
        columns.append((plus - minus) / (2 * h))
    return np.stack(columns, axis=-1)


def _arm_terms(chain, rng):
    goal = chain.fk(chain.random_configuration(rng))
    near = chain.fk(chain.random_configuration(rng))
    return [
        PoseTarget(goal),
        PositionTarget(goal[:3, 3], link='link5', offset=(0.01, 0.02, 0.03)),
        OrientationTarget(goal[:3, :3], link='link6'),
        CenterOfMassLine(point=(0.1, 0.0, 0.0)),
        PosturePreference(chain.neutral_configuration(), weights=np.linspace(0.5, 2.0, 7)),
        PlaneContact('tool0', normal=(0.2, 0.1, 1.0), offset=0.3),
        JointCoupling('joint7', 'joint6', ratio=2.0 / 3.0),
        KeepOutSphere(near[:3, 3], 0.3, hard=False),
        ChainSmoothness(neighbours=2),
    ]


def test_every_term_jacobian_matches_finite_differences_on_the_arm(arm7):
    rng = np.random.default_rng(0)
    for term in _arm_terms(arm7, rng):
        term.bind(arm7)
        for q in arm7.random_configuration(rng, 3):
            analytic = term.jacobian(arm7.frames(q))[0]
            numeric = _numeric_jacobian(term, arm7, q)
            np.testing.assert_allclose(analytic, numeric, atol=1e-6,
                                       err_msg=type(term).__name__)


def test_orientation_jacobian_is_exact_at_the_target(arm7):
    rng = np.random.default_rng(1)
    q = arm7.random_configuration(rng)
    term = PoseTarget(arm7.fk(q))
    np.testing.assert_allclose(term.jacobian(arm7.frames(q))[0],
                               _numeric_jacobian(term, arm7, q), atol=1e-6)


def test_ball_chain_terms_match_finite_differences(balls):
    rng = np.random.default_rng(2)
    terms = [ChainSmoothness(neighbours=2), CenterOfMassLine(),
             PosturePreference(balls.random_configuration(rng)),
             PositionTarget((0.3, 0.2, 1.2))]
    for term in terms:
        term.bind(balls)
        q = balls.random_configuration(rng)
        numeric = _numeric_jacobian(term, balls, q)
        analytic = term.jacobian(balls.frames(q))[0]
        np.testing.assert_allclose(analytic, numeric, atol=1e-6, err_msg=type(term).__name__)


def test_smoothness_jacobian_exact_when_neighbours_agree(balls):
    q = balls.neutral_configuration()
    term = ChainSmoothness().bind(balls)
    np.testing.assert_allclose(term.jacobian(balls.frames(q))[0],
                               _numeric_jacobian(term, balls, q), atol=1e-6)


def test_residuals_vanish_when_satisfied(arm7):
    rng = np.random.default_rng(3)
    q = arm7.random_configuration(rng)
    frames = arm7.frames(q)
    pose = arm7.fk(q)
    assert np.abs(PoseTarget(pose).residual(frames)).max() < 1e-12
    assert np.abs(PositionTarget(pose[:3, 3]).residual(frames)).max() < 1e-12
    coupling = JointCoupling('joint7', 'joint6', ratio=0.5, offset=q[6] - 0.5 * q[5]).bind(arm7)
    assert abs(coupling.residual(frames)[0, 0]) < 1e-12
    plane = PlaneContact('tool0', normal=(0, 0, 2.0), offset=2.0 * pose[2, 3])
    assert abs(plane.residual(frames)[0, 0]) < 1e-12
    far = KeepOutSphere(pose[:3, 3] + (5.0, 0.0, 0.0), 0.1).bind(arm7)
    assert not far.violated(frames)[0]
    inside = KeepOutSphere(pose[:3, 3], 0.05).bind(arm7)
    assert inside.violated(frames)[0]
    pos, ori = task_errors([PoseTarget(pose)], frames)
    assert pos[0] < 1e-12 and ori[0] < 1e-7


def test_task_errors_are_exact_angles(arm7):
    q = arm7.neutral_configuration()
    pose = arm7.fk(q)
    turned = pose.copy()
    angle = 0.7
    rz = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0],
                   [0, 0, 1]])
    turned[:3, :3] = rz @ pose[:3, :3]
    turned[:3, 3] += (0.03, -0.04, 0.0)
    pos, ori = PoseTarget(turned).errors(arm7.frames(q))
    assert pos[0] == pytest.approx(0.05, abs=1e-12)
    assert ori[0] == pytest.approx(angle, abs=1e-12)


@pytest.mark.parametrize('make,match', [
    (lambda: PoseTarget(np.full((4, 4), np.nan)), 'NaN'),
    (lambda: PoseTarget(np.eye(3)), r'shape \(4, 4\)'),
    (lambda: PoseTarget(np.diag([1.0, 1.0, -1.0, 1.0])), 'not a rotation'),
    (lambda: PositionTarget((0.0, 1.0)), r'shape \(3,\)'),
    (lambda: PositionTarget((0.0, 0.0, 0.0), sigma_position=-1.0), 'positive'),
    (lambda: KeepOutSphere((0, 0, 0), 0.0), 'positive'),
    (lambda: PlaneContact('tool0', normal=(0, 0, 0)), 'non-zero'),
    (lambda: ChainSmoothness(neighbours=0), '>= 1'),
])
def test_malformed_terms_raise_goal_errors(make, match):
    with pytest.raises(GoalError, match=match):
        make()


def test_terms_that_do_not_fit_the_chain_say_why(arm7):
    with pytest.raises(GoalError, match="unknown joint 'joint9'"):
        JointCoupling('joint9', 'joint1').bind(arm7)
    with pytest.raises(GoalError, match='must have 7 entries'):
        PosturePreference(np.zeros(6)).bind(arm7)
    with pytest.raises(GoalError, match="unknown link 'hand'"):
        as_goal(PositionTarget((0, 0, 1), link='hand'), arm7)


def test_as_goal_accepts_poses_positions_and_lists(arm7):
    pose = arm7.fk(arm7.neutral_configuration())
    assert isinstance(as_goal(pose, arm7)[0], PoseTarget)
    assert isinstance(as_goal(pose[:3, 3], arm7)[0], PositionTarget)
    two = as_goal([PositionTarget(pose[:3, 3]), OrientationTarget(pose[:3, :3])], arm7)
    assert len(two) == 2
    with pytest.raises(GoalError, match='holds no Target'):
        as_goal([PosturePreference(arm7.neutral_configuration())], arm7)
