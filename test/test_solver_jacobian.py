"""Tests of the Jacobian IK solver ('jacobian'): methods, null space, FD Jacobians, limits.

Statistics over seeded trials, not one lucky run. Thresholds were set from measurements
(docs/solvers.md) with a margin: nearby targets (goal = seed + N(0, 0.3 rad) per joint)
were solved 98-100 % by pinv/dls/sr, 96-100 % of position targets and 62-70 % of pose
targets (300 iterations) by the transpose method.
"""

import numpy as np
import pytest

from smcik_ros.errors import ParameterError
from smcik_ros.goals import (JointCoupling, OrientationTarget, PoseTarget, PositionTarget,
                             PosturePreference, task_errors)
from smcik_ros.model import ball_chain
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.base import stack_terms
from smcik_ros.solvers.jacobian import (JacobianSettings, finite_difference_jacobian,
                                        limit_push, nullspace_projector)


@pytest.fixture(params=['arm7', 'arm6'])
def chain(request):
    """Each demo arm (the session fixtures of conftest.py)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def arm(arm7):
    return arm7


def nearby_problems(chain, trials, seed=1, spread=0.3):
    """Yield (seed configuration, goal configuration) pairs, the goal near the seed."""
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        q0 = chain.random_configuration(rng)
        yield q0, chain.clip(q0 + rng.normal(0.0, spread, q0.shape))


def success_rate(solver, chain, kind, trials, max_iters=300):
    ok = 0
    for q0, q1 in nearby_problems(chain, trials):
        pose = chain.fk(q1)
        goal = pose if kind == 'pose' else PositionTarget(pose[:3, 3])
        res = solver.solve(goal, q0, max_iters=max_iters, tol=1e-3)
        assert chain.within_limits(res.q)
        assert np.all(np.isfinite(res.q))
        ok += res.success
    return ok / trials


# ---------------------------------------------------------------------------- convergence
@pytest.mark.parametrize('method', ['pinv', 'dls', 'sr'])
def test_inverse_methods_converge_on_nearby_pose_targets(chain, method):
    solver = make_solver('jacobian', chain, method=method, restart_after=0)
    assert success_rate(solver, chain, 'pose', 50) >= 0.9


def test_transpose_converges_on_nearby_position_targets(chain):
    solver = make_solver('jacobian', chain, method='transpose', restart_after=0)
    assert success_rate(solver, chain, 'position', 50) >= 0.9


def test_transpose_reaches_some_pose_targets(chain):
    # Linear convergence: the transpose method is the slow one (seed 000 section 3).
    solver = make_solver('jacobian', chain, method='transpose', restart_after=0)
    assert success_rate(solver, chain, 'pose', 30) >= 0.35


def test_restarts_solve_far_targets(arm):
    """From the neutral posture with random restarts on stalls, far targets get solved too."""
    rng = np.random.default_rng(3)
    solver = make_solver('jacobian', arm, method='dls', seed=0)
    ok = 0
    for _ in range(30):
        goal = arm.fk(arm.random_configuration(rng))
        ok += solver.solve(goal, arm.neutral_configuration(), max_iters=500, tol=1e-3).success
    assert ok / 30 >= 0.85


def test_seeded_solve_is_reproducible(arm):
    goal = arm.fk(arm.random_configuration(np.random.default_rng(5)))
    results = [make_solver('jacobian', arm, seed=7).solve(goal, arm.neutral_configuration(),
                                                          max_iters=200) for _ in range(2)]
    np.testing.assert_array_equal(results[0].q, results[1].q)


def test_finite_difference_option_converges(arm):
    solver = make_solver('jacobian', arm, method='dls', finite_difference=True, restart_after=0)
    assert success_rate(solver, arm, 'pose', 20) >= 0.9


# ---------------------------------------------------------------------------- null space
def test_projector_annihilates_the_task_jacobian(chain):
    rng = np.random.default_rng(0)
    for _ in range(20):
        q = chain.random_configuration(rng)
        jac = chain.jacobian(q)
        _, sv, vt = np.linalg.svd(jac, full_matrices=False)
        proj = nullspace_projector(vt, sv, 1e-4)
        z = rng.normal(size=chain.nv)
        # Exact zero, up to the singular values the cut-off treats as zero.
        dropped = sv[sv <= 1e-4 * sv[0]]
        bound = (dropped.max() if dropped.size else 0.0) + 1e-10 * sv[0]
        assert np.linalg.norm(jac @ proj @ z) <= bound * np.linalg.norm(z)
        np.testing.assert_allclose(proj @ proj, proj, atol=1e-12)


def test_secondary_step_changes_task_error_to_second_order(arm):
    """A null-space step of size eps moves the task residual by O(eps^2), a free one by O(eps)."""
    rng = np.random.default_rng(2)
    for _ in range(10):
        q = arm.random_configuration(rng)
        q = 0.8 * q + 0.2 * arm.neutral_configuration()       # away from the limits
        target = PoseTarget(arm.fk(arm.clip(q + rng.normal(0.0, 0.1, q.shape))))
        jac = arm.jacobian(q)
        _, sv, vt = np.linalg.svd(jac, full_matrices=False)
        direction = nullspace_projector(vt, sv, 1e-6) @ rng.normal(size=arm.nv)
        direction /= np.linalg.norm(direction)
        r0 = target.residual(arm.frames(q))[0]
        changes = []
        for eps in (1e-2, 1e-3):
            changes.append(np.linalg.norm(target.residual(arm.frames(q + eps * direction))[0]
                                          - r0))
        assert changes[1] < 1e-4
        # Ten times smaller step: about a hundred times smaller change (second order).
        assert changes[1] < changes[0] / 30.0
        free = rng.normal(size=arm.nv)
        free /= np.linalg.norm(free)
        moved = np.linalg.norm(target.residual(arm.frames(q + 1e-3 * free))[0] - r0)
        assert moved > 10.0 * changes[1]


def test_posture_task_moves_in_the_null_space_only(arm):
    """With the goal reached, posture steps move the arm but keep the tool where it is."""
    rng = np.random.default_rng(4)
    for _ in range(5):
        q0 = 0.7 * arm.random_configuration(rng) + 0.3 * arm.neutral_configuration()
        goal = arm.fk(q0)
        solver = make_solver('jacobian', arm, method='pinv', posture_gain=0.2, limit_gain=0.0,
                             max_step=0.05)
        solver.reset(q0)
        for _ in range(30):
            q = solver.step(goal)
        pos, ori = task_errors([PoseTarget(goal)], arm.frames(q))
        assert np.linalg.norm(q - q0) > 0.01
        assert pos[0] < 2e-3 and ori[0] < 5e-3


def test_posture_preference_replaces_the_neutral_posture(arm):
    """A PosturePreference constraint pulls the redundant arm towards its reference."""
    rng = np.random.default_rng(6)
    q0 = 0.7 * arm.random_configuration(rng) + 0.3 * arm.neutral_configuration()
    goal = arm.fk(q0)
    solver = make_solver('jacobian', arm, method='pinv', posture_gain=0.3, limit_gain=0.0)
    distances = []
    for ref in (q0 + 0.3, q0 - 0.3):
        ref = arm.clip(ref)
        solver.set_constraints([PosturePreference(ref)])
        solver.reset(q0)
        for _ in range(60):
            q = solver.step(goal)
        distances.append((np.linalg.norm(q - ref), np.linalg.norm(q0 - ref)))
    for final, start in distances:
        assert final < start


def test_soft_constraint_enters_as_secondary_task(arm):
    """A soft JointCoupling gets closer to satisfied while the target stays reached."""
    rng = np.random.default_rng(8)
    better = 0
    for _ in range(10):
        q0 = 0.7 * arm.random_configuration(rng) + 0.3 * arm.neutral_configuration()
        goal = arm.fk(q0)
        coupling = JointCoupling('joint3', 'joint1', ratio=0.0, offset=0.0)
        solver = make_solver('jacobian', arm, method='pinv', posture_gain=0.0, limit_gain=0.0)
        solver.set_constraints([coupling])
        solver.reset(q0)
        for _ in range(40):
            q = solver.step(goal)
        before = abs(coupling.residual(arm.frames(q0))[0, 0])
        after = abs(coupling.residual(arm.frames(q))[0, 0])
        pos, ori = task_errors([PoseTarget(goal)], arm.frames(q))
        assert pos[0] < 2e-3 and ori[0] < 5e-3
        better += after < before - 1e-3
    assert better >= 8


# ---------------------------------------------------------------------------- Jacobians
def test_finite_difference_matches_analytic_jacobian(chain):
    rng = np.random.default_rng(9)
    for _ in range(10):
        q = chain.random_configuration(rng)
        goal = chain.fk(chain.random_configuration(rng))
        terms = [PoseTarget(goal), PositionTarget(goal[:3, 3], offset=(0.02, -0.01, 0.05)),
                 OrientationTarget(goal[:3, :3], link=chain.link_names[-2])]
        _, analytic = stack_terms(terms, chain.frames(q))
        numeric = finite_difference_jacobian(chain, q, terms)
        scale = np.abs(analytic[0]).max()
        np.testing.assert_allclose(numeric, analytic[0], atol=1e-5 * scale)


def test_finite_difference_matches_analytic_on_ball_joints():
    chain = ball_chain(4, 0.3)
    rng = np.random.default_rng(10)
    for _ in range(5):
        q = chain.random_configuration(rng)
        terms = [PoseTarget(chain.fk(chain.random_configuration(rng)))]
        _, analytic = stack_terms(terms, chain.frames(q))
        numeric = finite_difference_jacobian(chain, q, terms)
        np.testing.assert_allclose(numeric, analytic[0], atol=1e-5 * np.abs(analytic).max())


# ---------------------------------------------------------------------------- limits
def test_limit_push_acts_only_inside_the_margin(arm):
    settings = JacobianSettings(limit_gain=0.5, limit_margin=0.1)
    span = arm.upper - arm.lower
    q = 0.5 * (arm.lower + arm.upper)
    q[1] = arm.lower[1] + 0.04 * span[1]          # inside the lower margin: pushed up by m - d
    q[2] = arm.upper[2] - 0.07 * span[2]          # inside the upper margin: pushed down
    q[3] = arm.lower[3] + 0.2 * span[3]           # outside the margins: no push
    expected = np.zeros(arm.nv)
    expected[1], expected[2] = 0.5 * 0.06 * span[1], -0.5 * 0.03 * span[2]
    np.testing.assert_allclose(limit_push(arm, q, settings), expected, atol=1e-12)
    assert not limit_push(arm, q, settings.replace(limit_gain=0.0)).any()


@pytest.mark.parametrize('method', ['transpose', 'pinv', 'dls', 'sr'])
def test_every_online_iterate_stays_in_limits(chain, method):
    rng = np.random.default_rng(11)
    solver = make_solver('jacobian', chain, method=method)
    far = np.eye(4)
    far[:3, 3] = (0.0, 0.0, 3.0)                                 # out of reach
    goals = [chain.fk(chain.random_configuration(rng)) for _ in range(3)] + [far]
    solver.reset(chain.neutral_configuration())
    for goal in goals:
        for _ in range(40):
            q = solver.step(goal)
            assert chain.within_limits(q)
            assert np.all(np.isfinite(q))


def test_saturated_joint_is_dropped_not_pushed(arm):
    """Goal beyond joint2's limit: joint2 sits on the limit and the step stays finite."""
    solver = make_solver('jacobian', arm, method='pinv', restart_after=0)
    q = arm.neutral_configuration()
    q[1] = arm.upper[1]
    goal = arm.fk(np.where(np.arange(arm.nq) == 1, arm.upper[1] + 0.4, q))
    res = solver.solve(goal, q, max_iters=50, tol=1e-3)
    assert arm.within_limits(res.q)
    assert abs(res.q[1] - arm.upper[1]) < 1e-9 or res.q[1] < arm.upper[1]


@pytest.mark.parametrize('method', ['transpose', 'pinv', 'dls', 'sr'])
def test_unreachable_target_gives_best_effort(chain, method):
    solver = make_solver('jacobian', chain, method=method, seed=0)
    far = np.eye(4)
    far[:3, 3] = (2.5, 0.5, 1.0)
    res = solver.solve(far, chain.neutral_configuration(), max_iters=100, tol=1e-3)
    assert not res.success
    assert np.all(np.isfinite(res.q)) and chain.within_limits(res.q)
    reach = np.linalg.norm(chain.fk(res.q)[:3, 3] - far[:3, 3])
    start = np.linalg.norm(chain.fk(chain.neutral_configuration())[:3, 3] - far[:3, 3])
    assert reach < start


def test_sr_damping_grows_near_singularities(arm):
    solver = make_solver('jacobian', arm, method='sr', sr_threshold=5.0, sr_max_damping=4.0)
    assert solver._sr_damping(np.array([50.0, 20.0, 10.0])) == 0.0
    assert 0.0 < solver._sr_damping(np.array([50.0, 20.0, 2.0])) < 4.0
    assert solver._sr_damping(np.array([50.0, 20.0, 0.0])) == pytest.approx(4.0)
    manip = make_solver('jacobian', arm, method='sr', sr_measure='manipulability')
    assert manip._sr_damping(np.array([50.0, 20.0, 1e-9])) > 0.0


# ---------------------------------------------------------------------------- settings
@pytest.mark.parametrize('changes, words', [
    ({'method': 'newton'}, 'transpose, pinv, dls, sr'),
    ({'gain': 0.0}, '(0, 1]'),
    ({'online_gain': 1.5}, '(0, 1]'),
    ({'max_step': -0.1}, '> 0'),
    ({'damping': -1.0}, '>= 0'),
    ({'singular_value_cutoff': 1.0}, '[0, 1)'),
    ({'limit_margin': 0.7}, '[0, 0.5]'),
    ({'posture_gain': 2.0}, '[0, 1]'),
    ({'sr_measure': 'condition'}, 'singular_value, manipulability'),
    ({'fd_step': 0.5}, '(0, 0.01]'),
    ({'restart_after': -1}, '>= 0'),
    ({'dampng': 1.0}, 'valid settings'),
])
def test_bad_settings_raise_parameter_error(arm, changes, words):
    with pytest.raises(ParameterError, match=None) as info:
        make_solver('jacobian', arm, **changes)
    assert words in str(info.value)


@pytest.mark.parametrize('name', ['jacobian', 'smc'])
def test_solve_steps_is_solve_spread_over_calls(arm, name):
    """The generator form gives the very answer of ``solve`` (same seeds), one yield between
    two iterations: a caller with a budget per tick can spread a solve over ticks."""
    for q0, q1 in nearby_problems(arm, 5, seed=3, spread=0.6):
        goal = arm.fk(q1)
        whole = make_solver(name, arm, seed=7).solve(goal, q0, max_iters=60, tol=1e-4)
        work = make_solver(name, arm, seed=7).solve_steps(goal, q0, max_iters=60, tol=1e-4)
        yields = 0
        try:
            while True:
                next(work)
                yields += 1
        except StopIteration as done:
            spread = done.value
        np.testing.assert_array_equal(spread.q, whole.q)
        assert spread.success == whole.success and spread.iterations == whole.iterations
        assert yields == max(whole.iterations - 1, 0)
