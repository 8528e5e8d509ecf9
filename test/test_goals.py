"""Goal and constraint terms: residual Jacobians against finite differences, validation."""


import numpy as np
import pytest

from smcik_ros.errors import GoalError
from smcik_ros.collision import KeepOutSphere
from smcik_ros.goals import (CenterOfMassLine, ChainSmoothness, JointCoupling,
                             OrientationTarget, PlaneContact, PoseTarget, PositionTarget,
                             PosturePreference, as_goal, task_errors)
from smcik_ros.model import ball_chain




@pytest.fixture(scope='module')
def balls():
    return ball_chain(6, 0.3, max_angle=1.2)


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
    (lambda: PoseTarget(np.diag([1.0, 1.0, 1.00001, 1.0])), r'not a rotation .*= 2\.00e-05'),
    (lambda: PoseTarget(np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0],
                                  [0.0, 0.001, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])),
     'not a rotation'),
    (lambda: PoseTarget(np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0],
                                  [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1e-6, 1.0]])),
     'bottom row'),
    (lambda: OrientationTarget(np.diag([0.99, 1.0, 1.0])), 'not a rotation'),
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


# ---------------------------------------------------------------------------- covariance
def _spd(rng, k, scale):
    a = rng.normal(size=(k, k)) * scale
    return a @ a.T + np.eye(k) * scale * scale * 0.1


def test_pose_covariance_becomes_the_mahalanobis_cost(arm7):
    """cost = r^T Sigma^-1 r (the paper's Sigma_z as a full matrix), for the SMC likelihood
    and, whitened, for every solver's stacked rows."""
    from smcik_ros.solvers.base import stack_terms
    rng = np.random.default_rng(5)
    goal = arm7.fk(arm7.random_configuration(rng))
    cov = _spd(rng, 6, 0.01)
    target = PoseTarget(goal, covariance=cov, weight=2.0).bind(arm7)
    plain = PoseTarget(goal).bind(arm7)
    frames = arm7.frames(arm7.random_configuration(rng, 5))
    r = target.residual(frames)
    expected = 2.0 * np.einsum('ni,ij,nj->n', r, np.linalg.inv(cov), r)
    np.testing.assert_allclose(target.cost(frames), expected, rtol=1e-9)
    rows, jac = stack_terms([target], frames)
    np.testing.assert_allclose(np.sum(rows ** 2, axis=1), expected, rtol=1e-9)
    # Whitened Jacobian rows are the Jacobian of the whitened residual (finite differences).
    q = frames.q[0]
    numeric = _numeric_jacobian(target, arm7, q)
    np.testing.assert_allclose(jac[0], target.whiten(numeric[None])[0], atol=1e-5)
    np.testing.assert_allclose(target.sigma, np.sqrt(np.diag(cov)))
    # A diagonal covariance equals the sigmas.
    diag = PoseTarget(goal, covariance=np.diag([1e-4] * 3 + [0.0025] * 3)).bind(arm7)
    np.testing.assert_allclose(diag.cost(frames), plain.cost(frames), rtol=1e-9)
    pos_cov = _spd(rng, 3, 0.02)
    point = PositionTarget(goal[:3, 3], covariance=pos_cov).bind(arm7)
    rp = point.residual(frames)
    np.testing.assert_allclose(point.cost(frames),
                               np.einsum('ni,ij,nj->n', rp, np.linalg.inv(pos_cov), rp),
                               rtol=1e-9)


@pytest.mark.parametrize('cov,match', [
    (np.ones((6, 6)), 'not positive definite'),
    (np.diag([1.0, 1.0, 1.0, 1.0, 1.0, -1e-6]), 'not positive definite'),
    (np.triu(np.ones((6, 6))) + 5 * np.eye(6), 'non-symmetric'),
    (np.eye(3), r'shape \(3, 3\)'),
    (np.full((6, 6), np.nan), 'NaN'),
    (np.eye(6)[:, :5], r'\(6, 6\) matrix'),
])
def test_bad_covariances_are_refused_saying_what_was_expected(cov, match):
    with pytest.raises(GoalError, match=match) as err:
        PoseTarget(np.eye(4), covariance=cov)
    assert 'symmetric positive definite (6, 6)' in str(err.value)
    assert 'x y z rx ry rz' in str(err.value)


def test_ros_covariance_rows_are_accepted_flat():
    flat = np.diag([1e-4, 2e-4, 3e-4, 1e-3, 2e-3, 3e-3]).ravel()
    target = PoseTarget(np.eye(4), covariance=list(flat))
    np.testing.assert_allclose(target.covariance, flat.reshape(6, 6))


def test_covariance_to_base_rotates_each_block():
    from smcik_ros.goals import covariance_to_base
    rng = np.random.default_rng(6)
    cov = _spd(rng, 6, 0.05)
    rot = Rotation_from_rotvec((0.3, -0.7, 1.1))
    out = covariance_to_base(cov.ravel(), rot)
    for i in (0, 3):
        for j in (0, 3):
            np.testing.assert_allclose(out[i:i + 3, j:j + 3], rot @ cov[i:i + 3, j:j + 3] @ rot.T,
                                       atol=1e-15)
    # A residual expressed in the frame and rotated to the base has the same Mahalanobis
    # norm under the rotated covariance.
    r_frame = rng.normal(size=6)
    r_base = np.r_[rot @ r_frame[:3], rot @ r_frame[3:]]
    np.testing.assert_allclose(r_base @ np.linalg.solve(out, r_base),
                               r_frame @ np.linalg.solve(cov, r_frame), rtol=1e-9)
    pos = covariance_to_base(np.diag([1.0, 2.0, 3.0]), rot)
    np.testing.assert_allclose(pos, rot @ np.diag([1.0, 2.0, 3.0]) @ rot.T, atol=1e-14)
    with pytest.raises(GoalError, match='not a rotation'):
        covariance_to_base(cov, np.eye(3) * 2.0)


def Rotation_from_rotvec(v):
    from smcik_ros.rotations import rotvec_to_matrix
    return rotvec_to_matrix(np.asarray(v, dtype=float))


def test_a_goal_covariance_decides_what_the_solvers_give_up(arm7):
    """A target high above the reach: with an isotropic covariance the closest approach
    leaves errors in x and y too (the tool stretches along the line to the target); with a
    loose z variance the solvers match x and y and give up z only - the covariance is used
    (by the SMC likelihood and by the Jacobian solver's whitened rows)."""
    from smcik_ros.solvers import make_solver
    q = arm7.neutral_configuration()
    far = np.array([0.3, 0.1, 1.5])                   # reach ~0.72 m from the shoulder
    iso = np.eye(3) * 1e-4
    loose_z = np.diag([1e-6, 1e-6, 1.0])
    for name in ('smc', 'jacobian'):
        xy = []
        for cov in (iso, loose_z):
            solver = make_solver(name, arm7, seed=0)
            result = solver.solve(PositionTarget(far, covariance=cov), q, max_iters=300)
            xy.append(np.linalg.norm(arm7.fk(result.q)[:2, 3] - far[:2]))
        assert xy[0] > 0.05, name            # isotropic: x and y errors too
        assert xy[1] < 0.005, name           # loose z: x and y matched


def test_as_goal_uses_the_given_sigmas_for_arrays(arm7):
    pose = arm7.fk(arm7.neutral_configuration())
    target = as_goal(pose, arm7, sigma_position=0.002, sigma_orientation=0.02)[0]
    np.testing.assert_allclose(target.sigma, [0.002] * 3 + [0.02] * 3)
    point = as_goal(pose[:3, 3], arm7, sigma_position=0.003)[0]
    np.testing.assert_allclose(point.sigma, [0.003] * 3)
    mine = PoseTarget(pose, sigma_position=0.5)
    assert as_goal(mine, arm7, sigma_position=0.002)[0] is mine
