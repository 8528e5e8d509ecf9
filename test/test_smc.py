"""The SMC IK filter: QuTem statistics, reproducibility, limits, success rates over seeds."""


import numpy as np
import pytest

from smcik_ros.errors import GoalError, ParameterError
from smcik_ros.goals import KeepOutSphere, PoseTarget, PositionTarget, PosturePreference
from smcik_ros.kinematics import Chain
from smcik_ros.rotations import quat_conjugate, quat_multiply, quat_to_rotvec, quat_from_rotvec
from smcik_ros.solvers import available_solvers, make_solver
from smcik_ros.solvers.smc_policies import sample_qutem as _qutem





def test_smc_is_registered():
    assert 'smc' in available_solvers()


@pytest.mark.parametrize('mean_rotvec', [(0.0, 0.0, 0.0), (0.4, -1.2, 0.7)])
def test_qutem_samples_have_the_requested_covariance(mean_rotvec):
    rng = np.random.default_rng(0)
    sigma = np.array([0.3, 0.1, 0.05])
    mean = quat_from_rotvec(np.array(mean_rotvec))
    n = 40000
    samples = _qutem(np.tile(mean, (n, 1)), np.tile(sigma, (n, 1)), rng)
    np.testing.assert_allclose(np.linalg.norm(samples, axis=1), 1.0, atol=1e-12)
    tangent = quat_to_rotvec(quat_multiply(quat_conjugate(mean), samples))
    cov = np.cov(tangent.T)
    # Diagonal within 3 % (sampling error ~ sqrt(2/n) = 0.7 %), off-diagonal ~ 0.
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), sigma, rtol=0.03)
    off = cov - np.diag(np.diag(cov))
    assert np.abs(off).max() < 0.03 * sigma.max() ** 2
    np.testing.assert_allclose(tangent.mean(axis=0), 0.0, atol=4 * sigma.max() / np.sqrt(n))


def _targets(chain, n, seed):
    rng = np.random.default_rng(seed)
    return [chain.fk(chain.random_configuration(rng)) for _ in range(n)]


def test_same_seed_same_result_different_seed_different_path(arm7):
    target = _targets(arm7, 1, 10)[0]
    seed_q = arm7.neutral_configuration()
    a = make_solver('smc', arm7, seed=5).solve(target, seed_q, max_iters=30)
    b = make_solver('smc', arm7, seed=5).solve(target, seed_q, max_iters=30)
    np.testing.assert_array_equal(a.q, b.q)
    assert a.iterations == b.iterations
    online = []
    for seed in (5, 5, 6):
        solver = make_solver('smc', arm7, seed=seed, refine_count=0)
        solver.reset(seed_q)
        online.append(np.array([solver.step(target) for _ in range(20)]))
    np.testing.assert_array_equal(online[0], online[1])
    assert not np.array_equal(online[0], online[2])


@pytest.mark.parametrize('settings', [
    {},
    {'joint_noise': 3.0, 'max_redraws': 0},               # most proposals leave the limits
    {'joint_noise': 1.0, 'refine_count': 0, 'num_particles': 20},
])
def test_particles_map_and_estimate_never_leave_joint_limits(arm7, settings):
    rng = np.random.default_rng(1)
    solver = make_solver('smc', arm7, seed=2, **settings)
    solver.reset(arm7.neutral_configuration())
    goals = _targets(arm7, 3, 11)
    far = np.eye(4)
    far[:3, 3] = (2.0, 0.0, 0.5)  # out of reach: pushes joints against their limits
    goals.append(far)
    for goal in goals:
        for _ in range(40):
            est = solver.step(goal)
            info = solver.last_info
            assert arm7.within_limits(est)
            assert arm7.within_limits(info['map'])
            assert arm7.within_limits(info['particles']).all()
            assert np.all(np.isfinite(info['particles']))
        assert 1.0 <= info['ess'] <= solver.settings.num_particles + 1e-9
    # A reset outside the limits is projected inside.
    solver.reset(arm7.upper + rng.uniform(0.1, 1.0, size=7))
    assert arm7.within_limits(solver.estimate)


@pytest.mark.parametrize('chain_name', ['arm7', 'arm6'])
@pytest.mark.parametrize('seed_kind', ['mid', 'random'])
def test_round_trip_success_rate(request, chain_name, seed_kind):
    """Random in-limit q -> FK -> solve; >= 95 % within 150 iterations over 60 seeded trials.

    (Measured with the shipped settings: 99.5-100 % on 500 trials; docs/benchmarks.md.)
    """
    chain = request.getfixturevalue(chain_name)
    rng = np.random.default_rng(100)
    successes = 0
    trials = 60
    for trial in range(trials):
        target = chain.fk(chain.random_configuration(rng))
        seed_q = (chain.neutral_configuration() if seed_kind == 'mid'
                  else chain.random_configuration(rng))
        result = make_solver('smc', chain, seed=trial).solve(target, seed_q, max_iters=150,
                                                              tol=(1e-3, 1e-2))
        assert chain.within_limits(result.q)
        if result.success:
            assert result.position_error <= 1e-3 and result.orientation_error <= 1e-2
            np.testing.assert_allclose(chain.fk(result.q)[:3, 3], target[:3, 3], atol=1e-3)
        successes += result.success
    assert successes >= 0.95 * trials


def test_plain_filter_of_the_paper_reaches_position_targets():
    """Algorithm 1 without refinement or restarts on seed 000's 4-segment arm of 3-DOF pivots."""
    chain = Chain.ball_chain(4, 1.0)
    rng = np.random.default_rng(3)
    successes = 0
    for trial in range(30):
        target = chain.fk(chain.random_configuration(rng))[:3, 3]
        solver = make_solver('smc', chain, seed=trial, refine_count=0, restart_after=0,
                             num_particles=30)
        result = solver.solve(PositionTarget(target), chain.neutral_configuration(),
                              max_iters=200, tol=1e-2)
        successes += result.success
    assert successes >= 24   # measured 30/30 at 1 cm


def test_online_steps_converge_smoothly(arm7):
    target = _targets(arm7, 1, 12)[0]
    solver = make_solver('smc', arm7, seed=3)
    start = arm7.neutral_configuration()
    solver.reset(start)
    previous = start
    jumps = []
    for _ in range(250):
        q = solver.step(target)
        jumps.append(np.abs(q - previous).max())
        previous = q
    result_pose = arm7.fk(previous)
    assert np.linalg.norm(result_pose[:3, 3] - target[:3, 3]) < 1e-3
    # Smoothing (alpha = 0.1): no step moves a joint by more than alpha times the joint span.
    assert max(jumps) <= 0.1 * np.max(arm7.upper - arm7.lower) + 1e-12


def test_goal_change_rewidens_the_task_noise(arm7):
    goals = _targets(arm7, 2, 13)
    solver = make_solver('smc', arm7, seed=4, anneal_initial=10.0, anneal_rate=0.5)
    solver.reset(arm7.neutral_configuration())
    for _ in range(20):
        solver.step(goals[0])
    assert solver.last_info['temperature'] == pytest.approx(1.0)
    solver.step(goals[1])
    assert solver.last_info['temperature'] == pytest.approx(10.0)
    # A tiny move of the same goal (tracking) does not re-widen it.
    for _ in range(20):
        solver.step(goals[1])
    nudged = goals[1].copy()
    nudged[0, 3] += 1e-4
    solver.step(nudged)
    assert solver.last_info['temperature'] == pytest.approx(1.0)


def test_hard_keep_out_sphere_is_never_entered(arm7):
    start = arm7.neutral_configuration()
    goal = _targets(arm7, 1, 14)[0]
    # A sphere half-way between the start and goal tool positions.
    middle = 0.5 * (arm7.fk(start)[:3, 3] + goal[:3, 3])
    sphere = KeepOutSphere(middle, 0.08)
    solver = make_solver('smc', arm7, seed=5)
    solver.set_constraints([sphere])
    solver.reset(start)
    assert not sphere.violated(arm7.frames(start))[0]
    for _ in range(80):
        solver.step(goal)
        particles = solver.last_info['particles']
        assert not sphere.violated(arm7.frames(particles)).any()


def test_posture_preference_pulls_redundancy_towards_it(arm7):
    """Position-only goals leave 4 DOF free: online, a posture term settles nearer to it."""
    rng = np.random.default_rng(6)
    rest = arm7.neutral_configuration()
    closer = 0
    trials = 10
    for trial in range(trials):
        target = PositionTarget(arm7.fk(arm7.random_configuration(rng))[:3, 3])
        start = arm7.random_configuration(rng)
        finals = []
        for constraints in ([], [PosturePreference(rest, sigma=2.0)]):
            solver = make_solver('smc', arm7, seed=trial)
            solver.set_constraints(constraints)
            solver.reset(start)
            for _ in range(150):
                q = solver.step(target)
            finals.append(q)
        reached = np.linalg.norm(arm7.fk(finals[1])[:3, 3] - target.position) < 1e-3
        if reached and np.linalg.norm(finals[1] - rest) < np.linalg.norm(finals[0] - rest):
            closer += 1
    assert closer >= 8


def test_unreachable_target_gives_best_effort(arm7):
    far = np.eye(4)
    far[:3, 3] = (3.0, 0.0, 0.4)
    result = make_solver('smc', arm7, seed=7).solve(far, arm7.neutral_configuration(),
                                                    max_iters=60)
    assert not result.success
    assert np.all(np.isfinite(result.q)) and arm7.within_limits(result.q)
    reach = 0.96   # measured maximum reach of the demo arm
    assert 3.0 - reach - 0.3 < result.position_error < 3.0


def test_timeout_returns_best_so_far(arm7):
    far = np.eye(4)
    far[:3, 3] = (1.5, 0.2, 0.3)   # unreachable: only the timeout can end the search
    result = make_solver('smc', arm7, seed=8).solve(far, arm7.neutral_configuration(),
                                                    max_iters=10 ** 6, timeout=0.02)
    assert not result.success and 0 < result.iterations < 10 ** 6
    assert arm7.within_limits(result.q)
    start_error = np.linalg.norm(arm7.fk(arm7.neutral_configuration())[:3, 3] - far[:3, 3])
    assert result.position_error < start_error


def test_settings_are_validated_with_helpful_messages(arm7):
    with pytest.raises(ParameterError, match='valid settings: .*num_particles'):
        make_solver('smc', arm7, num_particle=10)
    with pytest.raises(ParameterError, match='num_particles must be >= 1'):
        make_solver('smc', arm7, num_particles=0)
    with pytest.raises(ParameterError, match='smoothing_alpha'):
        make_solver('smc', arm7, smoothing_alpha=1.5)
    with pytest.raises(ParameterError, match='must be an integer'):
        make_solver('smc', arm7, num_particles='many')
    with pytest.raises(ParameterError, match='needs 7 values'):
        make_solver('smc', arm7, joint_noise_per_joint=(0.1, 0.2))
    with pytest.raises(ParameterError, match="unknown solver 'smcx'; available solvers: smc"):
        make_solver('smcx', arm7)


def test_bad_goals_raise_goal_errors(arm7):
    solver = make_solver('smc', arm7, seed=0)
    bad = np.eye(4)
    bad[0, 3] = np.nan
    with pytest.raises(GoalError, match='NaN'):
        solver.step(bad)
    with pytest.raises(GoalError, match='rotation'):
        solver.step(np.diag([2.0, 1.0, 1.0, 1.0]))
    with pytest.raises(GoalError, match="unknown link 'nope'"):
        solver.step(PoseTarget(np.eye(4), link='nope'))
    with pytest.raises(GoalError, match='goal must be'):
        solver.step('tool0')


def test_settings_change_at_runtime_keeps_the_estimate(arm7):
    target = _targets(arm7, 1, 16)[0]
    solver = make_solver('smc', arm7, seed=9)
    solver.reset(arm7.neutral_configuration())
    for _ in range(10):
        solver.step(target)
    before = solver.estimate
    solver.update_settings(num_particles=40, smoothing_alpha=0.2)
    assert solver.settings.num_particles == 40
    np.testing.assert_array_equal(solver.estimate, before)
    after = solver.step(target)
    assert np.abs(after - before).max() <= 0.2 * np.max(arm7.upper - arm7.lower)
    assert solver.last_info['particles'].shape == (40, 7)


def test_ninety_dof_chain_with_center_of_mass_and_smoothness_runs():
    """Seed 000 section 6.1: 30 ball joints, CoM on the vertical through the root."""
    from smcik_ros.goals import CenterOfMassLine, ChainSmoothness
    chain = Chain.ball_chain(30, 0.1, max_angle=1.0)
    assert chain.nv == 90
    solver = make_solver('smc', chain, seed=1, num_particles=50)
    solver.set_constraints([CenterOfMassLine(sigma=0.02), ChainSmoothness(sigma=0.3)])
    target = np.array([0.8, 0.5, 2.0])
    solver.reset(chain.neutral_configuration())
    start_err = np.linalg.norm(chain.fk(solver.estimate)[:3, 3] - target)
    for _ in range(150):
        q = solver.step(PositionTarget(target))
    assert chain.within_limits(q)
    assert np.linalg.norm(chain.fk(q)[:3, 3] - target) < 0.1 * start_err
    com = chain.center_of_mass(q)
    assert np.linalg.norm(com[:2]) < 0.1
