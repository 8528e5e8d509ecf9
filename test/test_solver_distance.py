"""Tests of the distance solver (seed 002): joint-space 'distance' (the free-point form of
the paper's experiments: test_free_point.py).

Thresholds come from measurements with a margin: on nearby targets (goal = seed +
N(0, 0.3 rad) per joint) the joint-space solver reached 92-98 % without restarts.
"""

import numpy as np
import pytest

from smcik_ros.errors import GoalError, ParameterError
from smcik_ros.goals import (OrientationTarget, PoseTarget, PositionTarget, as_goal,
                             task_errors)
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.distance import PointDistance, reference_anchors
from smcik_ros.solvers.jacobian import finite_difference_jacobian


@pytest.fixture(params=['arm7', 'arm6'])
def chain(request):
    """Each demo arm (the session fixtures of conftest.py)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def arm(arm7):
    return arm7


def nearby_problems(chain, trials, seed=1, spread=0.3):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        q0 = chain.random_configuration(rng)
        yield q0, chain.clip(q0 + rng.normal(0.0, spread, q0.shape))


# ---------------------------------------------------------------------------- joint space
@pytest.mark.parametrize('soft_reference', ['anchors', 'points', 'none'])
def test_converges_on_nearby_pose_targets(chain, soft_reference):
    solver = make_solver('distance', chain, soft_reference=soft_reference, restart_after=0)
    ok = 0
    for q0, q1 in nearby_problems(chain, 40):
        res = solver.solve(chain.fk(q1), q0, max_iters=200, tol=1e-3)
        assert chain.within_limits(res.q) and np.all(np.isfinite(res.q))
        ok += res.success
    assert ok / 40 >= 0.85


def test_position_targets_and_restarts(chain):
    solver = make_solver('distance', chain, seed=0)
    ok = 0
    for q0, q1 in nearby_problems(chain, 30, seed=2):
        ok += solver.solve(PositionTarget(chain.fk(q1)[:3, 3]), q0, max_iters=200,
                           tol=1e-3).success
    assert ok / 30 >= 0.95


def test_hard_constraints_are_driven_to_zero(chain):
    """The Newton steps on the hard rows (tool point + axis points) reach ~0, not ~tol."""
    solver = make_solver('distance', chain, restart_after=0)
    small = 0
    for q0, q1 in nearby_problems(chain, 20, seed=3):
        targets = as_goal(chain.fk(q1), chain)
        res = solver.solve(targets, q0, max_iters=200, tol=1e-9)
        hard, _ = solver.hard_terms(targets, chain.frames(res.q))
        small += np.abs(hard).max() < 1e-6
    assert small / 20 >= 0.85


def test_pose_becomes_point_targets(arm):
    """Tool point + axis points coincide exactly when the pose does, and not otherwise."""
    rng = np.random.default_rng(4)
    solver = make_solver('distance', arm, orientation_points=2, point_offset=0.2)
    q = arm.random_configuration(rng)
    frames = arm.frames(q)
    same = solver.hard_terms([PoseTarget(arm.fk(q))], frames)[0]
    assert same.shape == (9,) and np.abs(same).max() < 1e-12
    turned = arm.fk(q)
    c, s = np.cos(0.1), np.sin(0.1)
    turned[:3, :3] = turned[:3, :3] @ np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    moved = solver.hard_terms([PoseTarget(turned)], frames)[0]
    # Turning by 0.1 rad about z moves the x- and y-axis points by about 0.2 * 0.1 m.
    assert np.abs(moved[:3]).max() < 1e-12
    assert np.linalg.norm(moved[3:6]) == pytest.approx(0.2 * 2 * np.sin(0.05), rel=1e-9)
    only = solver.hard_terms([OrientationTarget(turned[:3, :3])], frames)[0]
    assert only.shape == (6,)


def test_hard_rows_jacobian_matches_finite_differences(chain):
    """Analytic point-row Jacobians (eq. 10 chained with the kinematics) vs FK differences."""
    rng = np.random.default_rng(5)
    solver = make_solver('distance', chain)
    for _ in range(5):
        q = chain.random_configuration(rng)
        targets = [PoseTarget(chain.fk(chain.random_configuration(rng)))]
        _, analytic = solver.hard_terms(targets, chain.frames(q))
        numeric = np.zeros_like(analytic)
        h = 1e-6
        for j in range(chain.nv):
            dq = np.zeros(chain.nv)
            dq[j] = h
            up = solver.hard_terms(targets, chain.frames(q + dq))[0]
            down = solver.hard_terms(targets, chain.frames(q - dq))[0]
            numeric[:, j] = (up - down) / (2 * h)
        np.testing.assert_allclose(numeric, analytic, atol=1e-6)
        g_num = np.zeros((len(solver.soft_terms(chain.frames(q))[0]), chain.nv))
        for j in range(chain.nv):
            dq = np.zeros(chain.nv)
            dq[j] = h
            g_num[:, j] = (solver.soft_terms(chain.frames(q + dq))[0]
                           - solver.soft_terms(chain.frames(q - dq))[0]) / (2 * h)
        np.testing.assert_allclose(g_num, solver.soft_terms(chain.frames(q))[1], atol=1e-5)


def test_point_distance_jacobian_matches_finite_differences(arm):
    rng = np.random.default_rng(6)
    terms = [PointDistance('tool0', 0.3, point=(0.2, 0.1, 0.5)),
             PointDistance('tool0', 0.0, point=(0.2, 0.1, 0.5), offset=(0.0, 0.0, 0.05)),
             PointDistance('tool0', 0.25, other_link='link3')]
    for t in terms:
        t.bind(arm)
    for _ in range(5):
        q = arm.random_configuration(rng)
        frames = arm.frames(q)
        analytic = np.concatenate([t.jacobian(frames)[0] * (np.sqrt(t.weight) / t.sigma)[:, None]
                                   for t in terms])
        np.testing.assert_allclose(finite_difference_jacobian(arm, q, terms), analytic,
                                   atol=1e-5 * np.abs(analytic).max())


def test_hard_point_distance_contact_is_met(arm):
    """A contact (tool at 0.15 m from a world point) and a wrist position, both hard."""
    rng = np.random.default_rng(7)
    met = 0
    for _ in range(10):
        q = 0.7 * arm.random_configuration(rng) + 0.3 * arm.neutral_configuration()
        frames = arm.frames(q)
        tool = frames.point('tool0')[0]
        direction = rng.normal(size=3)
        centre = tool + 0.15 * direction / np.linalg.norm(direction)
        contact = PointDistance('tool0', 0.15, point=centre)
        wrist = PositionTarget(frames.point('link5')[0], link='link5')
        solver = make_solver('distance', arm, seed=0)
        solver.set_constraints([contact])
        start = arm.clip(q + rng.normal(0.0, 0.2, q.shape))
        res = solver.solve(wrist, start, max_iters=200, tol=1e-4)
        dist = np.linalg.norm(arm.frames(res.q).point('tool0')[0] - centre)
        # solve() accepts a hard PointDistance within its 1 mm violation threshold.
        met += res.success and res.constraints_ok and abs(dist - 0.15) < 1e-3
    assert met >= 8


def test_soft_reference_keeps_the_reference_style(arm):
    """With the target reached, the 'points' soft task pulls link origins to the reference
    (7-DOF arm: a one-dimensional null space, so the pull is often small)."""
    rng = np.random.default_rng(8)
    closer = worse = 0
    for _ in range(10):
        q0 = 0.7 * arm.random_configuration(rng) + 0.3 * arm.neutral_configuration()
        goal = arm.fk(q0)
        solver = make_solver('distance', arm, soft_reference='points', limit_gain=0.0,
                             restart_after=0)
        solver.reset(q0)
        start = np.linalg.norm(solver._link_points(arm.frames(q0)) - solver._ref_points)
        for _ in range(60):
            q = solver.step(goal)
        assert arm.within_limits(q)
        pos, ori = task_errors([PoseTarget(goal)], arm.frames(q))
        assert pos[0] < 2e-3 and ori[0] < 5e-3
        gap = np.linalg.norm(solver._link_points(arm.frames(q)) - solver._ref_points)
        closer += gap < start - 1e-3
        worse += gap > start + 1e-3
    # The task-priority step is a descent direction of the soft error.
    assert closer >= 5 and worse == 0


def test_reference_anchors_are_origin_and_scaled_basis():
    np.testing.assert_allclose(reference_anchors(2.0, (1.0, 0.0, 0.0)),
                               [[1, 0, 0], [3, 0, 0], [1, 2, 0], [1, 0, 2]])


def test_unreachable_target_gives_best_effort(chain):
    solver = make_solver('distance', chain, seed=0)
    far = np.eye(4)
    far[:3, 3] = (2.5, 0.5, 1.0)
    res = solver.solve(far, chain.neutral_configuration(), max_iters=60, tol=1e-3)
    assert not res.success
    assert np.all(np.isfinite(res.q)) and chain.within_limits(res.q)
    solver.reset(chain.neutral_configuration())
    for _ in range(30):
        q = solver.step(far)
        assert chain.within_limits(q) and np.all(np.isfinite(q))


@pytest.mark.parametrize('changes, words', [
    ({'soft_reference': 'springs'}, 'anchors, points, none'),
    ({'reference_posture': 'home'}, 'neutral, reset'),
    ({'orientation_points': 4}, '2 or 3'),
    ({'point_offset': 0.0}, '> 0'),
    ({'gain': 1.5}, '(0, 1]'),
    ({'soft_gain': -0.1}, '[0, 1]'),
    ({'soft_max_step': 0.0}, '> 0'),
    ({'reference_sigma': 0.0}, '> 0'),
])
def test_bad_settings_raise_parameter_error(arm, changes, words):
    with pytest.raises(ParameterError) as info:
        make_solver('distance', arm, **changes)
    assert words in str(info.value)


def test_bad_point_distance_raises_goal_error():
    with pytest.raises(GoalError, match='either a world point'):
        PointDistance('tool0', 0.1)
    with pytest.raises(GoalError, match='>= 0'):
        PointDistance('tool0', -0.1, point=(0.0, 0.0, 0.0))
