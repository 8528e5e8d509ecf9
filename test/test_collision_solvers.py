"""Every solver respects the collision constraint: seeded statistics checked with python-fcl
on the URDF's own shapes, the damper QP, and 'never deeper' for an obstacle on the arm."""

import numpy as np
import pytest
from scipy.optimize import minimize, nnls as scipy_nnls

from smcik_ros.collision import (CollisionConstraint, Obstacle, Scene, conventional_srdf_path,
                                 pose_matrix, self_collision_pairs)
from smcik_ros.goals import PositionTarget
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.inequality import damper_rows, nnls, project_step

from collision_helpers import FclRobot, demo_model, fcl_distance, fcl_obstacle
from conftest import ARM7_URDF, assert_in_fresh_interpreter

# A low wall in front of the arm (x 0.30..0.40 m, up to 0.3 m high); 'behind' goals are low
# positions past it, reached over the top.
BOX = Obstacle.box((0.1, 0.4, 0.3), pose_matrix((0.35, 0.0, 0.15)))


@pytest.fixture(scope='module')
def setup():
    chain, model = demo_model(ARM7_URDF)
    pairs = self_collision_pairs(model, conventional_srdf_path(ARM7_URDF))
    fcl_robot = FclRobot(ARM7_URDF, 'base_link')
    return chain, model, pairs, fcl_robot


def _fcl_free(chain, fcl_robot, pairs, q, obstacles):
    """Return True when python-fcl finds no contact between enabled pairs and obstacles."""
    objects = fcl_robot.objects(dict(zip(chain.joint_names, q)))
    for a, b in pairs.names:
        if fcl_distance(objects[a], objects[b]) <= 0.0:
            return False
    for link, objs in objects.items():
        for obstacle in obstacles:
            if fcl_distance(objs, [obstacle]) <= 0.0:
                return False
    return True


def _goals(chain, constraint, rng, count):
    """Return reachable position goals: tool positions of random free configurations, every
    other one behind the wall (past its far face, lower than its top)."""
    out = []
    while len(out) < count:
        q = chain.random_configuration(rng)
        if constraint.in_collision(chain.frames(q))[0]:
            continue
        p = chain.fk(q)[:3, 3]
        behind = p[0] > 0.42 and abs(p[1]) < 0.2 and p[2] < 0.3
        if behind == (len(out) % 2 == 0):
            out.append(p)
    return out


def _home(chain):
    q = chain.neutral_configuration()
    q[3], q[5] = -1.57, 1.57
    return q


@pytest.mark.slow
@pytest.mark.parametrize('solver', ['smc', 'jacobian', 'distance'])
def test_solve_never_returns_a_colliding_configuration(setup, solver):
    chain, model, pairs, fcl_robot = setup
    scene = Scene({('scene', 0): BOX})
    constraint = CollisionConstraint(model, scene, pairs=pairs)
    rng = np.random.default_rng(21)
    goals = _goals(chain, constraint, rng, 24)
    ik = make_solver(solver, chain, seed=4)
    ik.set_constraints([constraint])
    free = make_solver(solver, chain, seed=4)
    obstacles = [fcl_obstacle(BOX)]
    successes = unconstrained_collisions = 0
    for goal in goals:
        result = ik.solve(PositionTarget(goal), _home(chain), max_iters=150, tol=1e-3)
        if result.constraints_ok:
            assert not constraint.in_collision(chain.frames(result.q))[0]
            assert _fcl_free(chain, fcl_robot, pairs, result.q, obstacles)
        successes += result.success
        assert not result.success or result.constraints_ok
        # The same solver without the constraint: its answers do collide (the test can fail).
        other = free.solve(PositionTarget(goal), _home(chain), max_iters=150, tol=1e-3)
        unconstrained_collisions += not _fcl_free(chain, fcl_robot, pairs, other.q, obstacles)
    assert successes >= 0.9 * len(goals), f'{solver}: {successes}/{len(goals)} reached'
    assert unconstrained_collisions >= 3


@pytest.mark.slow
@pytest.mark.parametrize('solver', ['jacobian', 'distance'])
def test_gradient_solvers_online_steps_stay_free(setup, solver):
    """Online steps towards goals behind the box: every returned configuration, and a fine
    sampling of the motion between consecutive ones, is free for FCL."""
    chain, model, pairs, fcl_robot = setup
    scene = Scene({('scene', 0): BOX})
    constraint = CollisionConstraint(model, scene, pairs=pairs)
    rng = np.random.default_rng(22)
    goals = _goals(chain, constraint, rng, 6)
    ik = make_solver(solver, chain, seed=0)
    ik.set_constraints([constraint])
    obstacles = [fcl_obstacle(BOX)]
    q_prev = _home(chain)
    ik.reset(q_prev)
    refused = 0
    for goal in goals:
        for _ in range(40):
            q = ik.step(PositionTarget(goal))
            refused += bool(ik.last_info.get('refused'))
            for s in np.linspace(0.0, 1.0, 5)[1:]:
                assert _fcl_free(chain, fcl_robot, pairs, q_prev + s * (q - q_prev), obstacles)
            assert not constraint.in_collision(chain.frames(q))[0]
            q_prev = q
    assert ik.last_info['inequality_rows'] >= 0


@pytest.mark.slow
def test_smc_online_with_the_command_check_never_commands_a_collision(setup):
    """The SMC filter online as the node runs it: reference = the current command each tick,
    the command only advances when ``check_motion`` accepts the move (else it holds and the
    filter restarts there). Commands and the motion between them are free for FCL, and
    most goals are reached."""
    chain, model, pairs, fcl_robot = setup
    scene = Scene({('scene', 0): BOX})
    constraint = CollisionConstraint(model, scene, pairs=pairs)
    rng = np.random.default_rng(23)
    goals = _goals(chain, constraint, rng, 8)
    ik = make_solver('smc', chain, seed=5, smoothing_alpha=0.5)
    ik.set_constraints([constraint])
    obstacles = [fcl_obstacle(BOX)]
    q_cmd = _home(chain)
    ik.reset(q_cmd)
    reached = holds = 0
    max_step = 0.05
    for goal in goals:
        target = PositionTarget(goal)
        for _ in range(150):
            constraint.set_reference(q_cmd)
            q_hat = ik.step(target)
            q_new = chain.clip(q_cmd + np.clip(q_hat - q_cmd, -max_step, max_step))
            ok, _ = constraint.check_motion(q_cmd, q_new)
            if not ok:
                holds += 1
                ik.reset(q_cmd)
                continue
            for s in np.linspace(0.0, 1.0, 4)[1:]:
                assert _fcl_free(chain, fcl_robot, pairs, q_cmd + s * (q_new - q_cmd),
                                 obstacles)
            q_cmd = q_new
            if np.linalg.norm(chain.fk(q_cmd)[:3, 3] - goal) < 2e-3:
                reached += 1
                break
    assert reached >= 0.6 * len(goals), f'reached {reached}/{len(goals)}, holds {holds}'


def test_obstacle_on_the_arm_is_never_entered_deeper(setup):
    """A sphere appears on link4: the jacobian solver's steps reduce or keep every cover
    sphere's penetration; a goal pulling the arm through it makes it hold, not go deeper."""
    chain, model, pairs, _ = setup
    q0 = _home(chain)
    center = chain.fk(q0, 'link4')[:3, 3]
    scene = Scene({('scene', 1): Obstacle.sphere(center + (0.0, 0.05, 0.0), 0.05)})
    constraint = CollisionConstraint(model, scene, pairs=pairs)
    assert constraint.in_collision(chain.frames(q0))[0]
    ik = make_solver('jacobian', chain, seed=0)
    ik.set_constraints([constraint])
    ik.reset(q0)
    goal = PositionTarget(chain.fk(q0)[:3, 3] + (0.0, 0.25, 0.0))
    q = q0
    depth0 = -constraint.distances(chain.frames(q0)).distance[0]
    for _ in range(60):
        q_new = ik.step(goal)
        assert not constraint.violated(chain.frames(q_new), reference=q)[0]
        q = q_new
    assert -constraint.distances(chain.frames(q)).distance[0] <= depth0 + 1e-7


def test_project_step_matches_a_general_qp_solver():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(40):
        n, m = 5, 4
        dq0 = rng.normal(size=n)
        A = rng.normal(size=(m, n))
        b = rng.normal(size=m) * 0.5
        J = rng.normal(size=(3, n))
        H = J.T @ J + 0.1 * np.eye(n)
        lower, upper = -np.full(n, 2.0), np.full(n, 2.0)
        dq = project_step(dq0, A, b, H, lower, upper)
        cons = [{'type': 'ineq', 'fun': lambda x, A=A, b=b: A @ x - b}]
        ref = minimize(lambda x: (x - dq0) @ H @ (x - dq0), np.zeros(n), jac=lambda x:
                       2 * H @ (x - dq0), constraints=cons, bounds=list(zip(lower, upper)),
                       method='SLSQP', options={'ftol': 1e-12, 'maxiter': 500})
        if not ref.success:
            continue
        assert dq is not None
        assert np.all(A @ dq >= b - 1e-8) and np.all(dq >= lower - 1e-9)
        f = (dq - dq0) @ H @ (dq - dq0)
        assert f <= ref.fun + 1e-6
        checked += 1
    assert checked >= 30
    # Infeasible: x >= 1 and x <= -1.
    assert project_step(np.zeros(1), np.array([[1.0], [-1.0]]), np.array([1.0, 1.0])) is None
    # Already feasible: unchanged.
    np.testing.assert_array_equal(project_step(np.ones(2), np.eye(2), np.zeros(2)), np.ones(2))


def test_nnls_reaches_the_residual_of_scipys_nnls():
    """The package's NNLS (it keeps scipy.optimize out of the control tick) on 600 seeded
    problems of the shapes project_step makes, a third with repeated columns: never
    negative, never a larger residual than scipy's beyond rounding."""
    rng = np.random.default_rng(11)
    for k in range(600):
        m, n = int(rng.integers(1, 12)), int(rng.integers(1, 30))
        A = rng.normal(size=(m, n))
        if k % 3 == 0:
            A[:, :n // 2] = A[:, :1]
        b = rng.normal(size=m)
        x = nnls(A, b, maxiter=50 * (m + n))
        reference, rnorm = scipy_nnls(A, b, maxiter=50 * (m + n))
        assert x is not None and np.all(x >= 0.0)
        assert np.linalg.norm(A @ x - b) <= rnorm + 1e-9 * (1.0 + rnorm)
    assert nnls(np.eye(2), np.array([1.0, -1.0])).tolist() == [1.0, 0.0]
    assert nnls(np.ones((3, 4)), np.ones(3), maxiter=0) is None


def test_a_constrained_step_does_not_import_scipy_optimize():
    """The first collision-constrained step runs in the control tick (a detour's search):
    it must not import scipy.optimize (0.3-1.5 s with the GIL held)."""
    code = ('import sys, numpy as np\n'
            'from smcik_ros.solvers.inequality import project_step\n'
            'dq = project_step(np.zeros(2), np.array([[1.0, 1.0]]), np.array([1.0]))\n'
            'assert abs(dq.sum() - 1.0) < 1e-9, dq\n'
            'assert "scipy.optimize" not in sys.modules\n')
    assert_in_fresh_interpreter(code)


def test_damper_rows_follow_the_velocity_damper_formula(setup):
    chain, model, pairs, _ = setup
    q0 = _home(chain)
    tool = chain.fk(q0)[:3, 3]
    scene = Scene({('s', 0): Obstacle.sphere(tool + (0.0, 0.0, 0.06), 0.02)})
    c = CollisionConstraint(model, scene, self_collision=False)
    frames = chain.frames(q0)
    A, b, d = damper_rows([c], frames, 0.1, 0.01, 0.5)
    assert len(d) > 0
    np.testing.assert_allclose(b, -0.5 * (d - 0.01) / (0.1 - 0.01))
    d_check, jac = c.inequality_rows(frames, 0.1)
    np.testing.assert_allclose(A, jac)


@pytest.mark.parametrize('motion', [True, False])
def test_an_online_step_is_checked_along_its_motion_and_a_solve_step_at_its_end(setup, motion):
    """A base-yaw step whose tool sweeps through a small sphere half-way while both ends are
    free: checked along the motion (``step``, every iterate may be commanded) it is cut short
    of the sphere; checked at its end (``solve``, one answer) it is taken whole."""
    from smcik_ros.solvers.inequality import constrained_step
    from smcik_ros.solvers.jacobian import JacobianSettings
    chain, model, pairs, _ = setup
    q0 = _home(chain)
    dv = np.zeros(chain.nv)
    dv[0] = 0.6
    middle = q0 + 0.5 * dv
    scene = Scene({('s', 0): Obstacle.sphere(chain.fk(middle)[:3, 3], 0.01)})
    c = CollisionConstraint(model, scene, self_collision=False)
    ends = chain.frames(np.array([q0, q0 + dv]))
    assert not c.in_collision(ends).any() and c.in_collision(chain.frames(middle))[0]
    settings = JacobianSettings(collision_influence_distance=0.01,
                                collision_security_distance=0.002)
    step, info = constrained_step(chain, q0, dv, chain.frames(q0), [c], None, settings, 1.0,
                                  motion=motion)
    if motion:
        assert info['step_scale'] < 0.5 and c.check_motion(q0, q0 + step)[0]
    else:
        assert info['step_scale'] == 1.0
        np.testing.assert_allclose(step, dv)


def test_every_cached_query_of_an_smc_run_equals_a_fresh_query(setup, monkeypatch):
    """The constraint's evaluation cache (reuse, changed rows, rows taken from other
    evaluations) answers every query of a seeded SMC run with a wall and self-collision
    as a fresh query of the same configurations: the same leaves (configuration, pair,
    spheres) and distances, bit for bit with the compiled kernels. The run covers resampled
    copies, redraws of rejected particles and the refinement's trials; each kind of cache
    answer occurs."""
    chain, model, pairs, _ = setup
    constraint = CollisionConstraint(model, Scene({('test', 'wall'): BOX}), pairs=pairs)
    seen = {'calls': 0, 'wrong': 0, 'reused': 0, 'updated': 0}
    query, update = CollisionConstraint._query, CollisionConstraint._update_rows

    def leaf_table(leaves):
        table = np.stack([leaves.n, leaves.pair, leaves.a, leaves.b], axis=1)
        order = np.lexsort(table.T[::-1])
        return table[order], leaves.d[order]

    def checked_query(self, frames, threshold):
        runs_before = seen['runs']
        leaves, world = query(self, frames, threshold)
        seen['calls'] += 1
        seen['reused'] += seen['runs'] == runs_before
        (table, d), (fresh_table, fresh_d) = (
            leaf_table(leaves), leaf_table(self._run(frames, threshold, per_pair=True)[1]))
        if table.shape != fresh_table.shape or not (
                np.array_equal(table, fresh_table) and np.array_equal(d, fresh_d)):
            seen['wrong'] += 1
        return leaves, world

    def counted_update(self, *args):
        seen['updated'] += 1
        return update(self, *args)

    run = CollisionConstraint._run

    def counted_run(self, *args, **kwargs):
        seen['runs'] += 1
        return run(self, *args, **kwargs)

    seen['runs'] = 0
    monkeypatch.setattr(CollisionConstraint, '_query', checked_query)
    monkeypatch.setattr(CollisionConstraint, '_update_rows', counted_update)
    monkeypatch.setattr(CollisionConstraint, '_run', counted_run)
    solver = make_solver('smc', chain, num_particles=40, seed=5, search_count=8)
    solver.set_constraints([constraint])
    q = _home(chain)
    solver.reset(q)
    rng = np.random.default_rng(21)
    for goal in _goals(chain, constraint, rng, 4):
        for _ in range(15):
            constraint.set_reference(q)
            q = solver.step(PositionTarget(goal))
    assert seen['calls'] > 300
    assert seen['wrong'] == 0, seen
    assert seen['updated'] > 0 and seen['reused'] > 0, seen


@pytest.mark.parametrize('motion', [False, True])
def test_refinement_where_the_constraint_is_inactive_is_the_compiled_pose_step(setup, motion):
    """``Refinement.refine`` with a pose target and the collision constraint (the node's
    default problem): a particle on which the constraint is inactive (no violation: its
    clearance is a preference the refinement leaves out) where it starts and where the
    compiled refinement of the target alone ends gets that result bit for bit; one that
    starts in collision, or whose target-only result ends in the wall or another link, takes
    the steps one at a time with every trial checked (the same result when refined alone:
    rows are independent); no result is violating where its start was not."""
    from smcik_ros.goals import PoseTarget
    from smcik_ros.solvers.smc import FilterModel
    from smcik_ros.solvers.smc.policies.refinement import _constrained
    chain, model, pairs, _ = setup
    constraint = CollisionConstraint(model, Scene({('scene', 0): BOX}), pairs=pairs)
    rng = np.random.default_rng(5)
    q_goal = None
    while q_goal is None:            # a free configuration whose tool is behind the wall
        q = chain.random_configuration(rng)
        p = chain.fk(q)[:3, 3]
        if not constraint.in_collision(chain.frames(q))[0] and p[0] > 0.42 and \
                abs(p[1]) < 0.2 and p[2] < 0.3:
            q_goal = q
    goal = chain.fk(q_goal)
    solver = make_solver('smc', chain, seed=0)
    refine = solver.policies.refinement
    pull = None
    if motion:
        pull = solver.policies.minimal_motion
        pull.reference = pull.turn_reference = _home(chain)

    def problem(constraints):
        return FilterModel(chain, solver.settings, solver._scalar_noise, solver._ball_noise,
                           [PoseTarget(goal)], constraints, 1.0, (1e-3, 1e-2))
    constrained, plain = problem([constraint]), problem([])
    start_q = chain.random_configuration(rng, 60)
    start = chain.frames(start_q)
    out, cost, improved, _ = refine.refine(constrained, chain.frames(start_q.copy()),
                                         constrained.cost(start), pull)
    alone, _, alone_improved, _ = refine.refine(plain, chain.frames(start_q.copy()),
                                              plain.cost(start), pull)
    busy = _constrained(constrained.terms[1:], constrained.hard, start)
    ends_busy = _constrained(constrained.terms[1:], constrained.hard, alone)
    fused = ~busy & ~(ends_busy & alone_improved)
    assert busy.sum() >= 5 and (~busy & ends_busy & alone_improved).sum() >= 5
    np.testing.assert_array_equal(out.q[fused], alone.q[fused])
    stepped = np.flatnonzero(~fused)
    steps = refine.refine(constrained, start.subset(stepped), constrained.cost(start)[stepped],
                          pull)
    np.testing.assert_array_equal(out.q[stepped], steps[0].q)
    np.testing.assert_array_equal(improved[stepped], steps[2])
    was = constraint.violated(start)
    assert not np.any(constraint.violated(out) & ~was)
    np.testing.assert_allclose(cost[improved],
                               constrained.cost(out.subset(np.flatnonzero(improved))),
                               rtol=1e-9, atol=1e-12)
