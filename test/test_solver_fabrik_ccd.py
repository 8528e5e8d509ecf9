"""Tests of FABRIK ('fabrik', ball-joint chains) and cyclic coordinate descent ('ccd').

Thresholds from measurements with a margin (docs/solvers.md): FABRIK reached 100 % of
random position and pose targets on a 6-segment ball chain without limits and 94-100 %
with 1 rad joint limits; CCD solved 96-100 % of nearby position targets and 70-84 % of
nearby pose targets (tolerance 1e-3) within 300 sweeps on the demo arms.
"""

import math
import os

import numpy as np
import pytest

from smcik_ros.errors import GoalError, ParameterError
from smcik_ros.goals import OrientationTarget, PoseTarget, PositionTarget
from smcik_ros.model import Chain, JointSpec, ball_chain
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.ccd import _best_angle
from smcik_ros.solvers.fabrik import _fabrik_pass


@pytest.fixture(params=['arm7', 'arm6'])
def chain(request):
    """Each demo arm (the session fixtures of conftest.py)."""
    return request.getfixturevalue(request.param)


def far_pose():
    pose = np.eye(4)
    pose[:3, 3] = (2.5, 0.5, 1.0)
    return pose


# ---------------------------------------------------------------------------- FABRIK
@pytest.mark.parametrize('max_angle, kind, threshold', [
    (None, 'position', 0.96), (None, 'pose', 0.96),
    (1.0, 'position', 0.85), (1.0, 'pose', 0.85)])
def test_fabrik_reaches_random_targets_on_ball_chains(max_angle, kind, threshold):
    chain = ball_chain(6, 0.2, max_angle=max_angle)
    rng = np.random.default_rng(0)
    solver = make_solver('fabrik', chain, seed=0)
    ok = 0
    for _ in range(50):
        pose = chain.fk(chain.random_configuration(rng))
        goal = PositionTarget(pose[:3, 3]) if kind == 'position' else pose
        res = solver.solve(goal, chain.neutral_configuration(), max_iters=200, tol=1e-3)
        assert chain.within_limits(res.q) and np.all(np.isfinite(res.q))
        ok += res.success
    assert ok / 50 >= threshold


def test_fabrik_pass_keeps_lengths_and_reaches():
    rng = np.random.default_rng(1)
    lengths = np.full(5, 0.2)
    points = np.vstack([np.zeros(3), np.cumsum(np.tile([0.0, 0.0, 0.2], (5, 1)), axis=0)])
    for _ in range(20):
        goal = rng.uniform(-0.5, 0.5, 3)
        p = points
        for _ in range(50):
            p = _fabrik_pass(p, lengths, 5, goal)
        np.testing.assert_allclose(np.linalg.norm(np.diff(p, axis=0), axis=1), 0.2, atol=1e-12)
        np.testing.assert_allclose(p[0], 0.0, atol=1e-12)
        np.testing.assert_allclose(p[5], goal, atol=1e-6)
    # Unreachable: straight line towards the goal.
    p = _fabrik_pass(points, lengths, 5, np.array([3.0, 0.0, 0.0]))
    np.testing.assert_allclose(p[5], [1.0, 0.0, 0.0], atol=1e-12)


def test_fabrik_joints_reproduce_the_fabrik_points():
    """From points to joints: FK of the recovered quaternions is the FABRIK chain."""
    chain = ball_chain(5, 0.3)
    solver = make_solver('fabrik', chain, online_gain=1.0)
    rng = np.random.default_rng(2)
    for _ in range(10):
        q0 = chain.random_configuration(rng)
        solver.reset(q0)
        goal = PositionTarget(chain.fk(chain.random_configuration(rng))[:3, 3])
        wanted = _fabrik_pass(solver._points(chain.frames(q0)), solver._lengths,
                              chain.num_bodies, goal.position)
        q = solver.step(goal)
        np.testing.assert_allclose(solver._points(chain.frames(q)), wanted, atol=1e-9)
        assert np.linalg.norm(wanted - solver._points(chain.frames(q0))) > 0.05


def test_fabrik_point_target_on_an_inner_link():
    chain = ball_chain(6, 0.2)
    rng = np.random.default_rng(3)
    solver = make_solver('fabrik', chain)
    for _ in range(10):
        q = chain.random_configuration(rng)
        goal = PositionTarget(chain.frames(q).point('seg4')[0], link='seg4')
        res = solver.solve(goal, chain.neutral_configuration(), max_iters=100, tol=1e-4)
        assert res.success


def test_fabrik_refuses_revolute_arms(chain):
    with pytest.raises(ParameterError) as info:
        make_solver('fabrik', chain)
    message = str(info.value)
    assert 'ball' in message and 'ccd' in message and 'revolute' in message


def test_fabrik_refuses_unsupported_goals():
    chain = ball_chain(4, 0.2)
    solver = make_solver('fabrik', chain)
    pose = chain.fk(chain.random_configuration(np.random.default_rng(0)))
    with pytest.raises(GoalError, match='one PositionTarget or PoseTarget'):
        solver.solve([PositionTarget(pose[:3, 3]), PositionTarget(pose[:3, 3], link='seg2')],
                     chain.neutral_configuration())
    with pytest.raises(GoalError, match='one PositionTarget or PoseTarget'):
        solver.solve(OrientationTarget(pose[:3, :3]), chain.neutral_configuration())
    with pytest.raises(GoalError, match='not a chain point'):
        solver.solve(PositionTarget(pose[:3, 3], offset=(0.05, 0.0, 0.0)),
                     chain.neutral_configuration())


def test_fabrik_unreachable_and_online_limits():
    chain = ball_chain(5, 0.2, max_angle=0.8)
    solver = make_solver('fabrik', chain, seed=0)
    res = solver.solve(PositionTarget((3.0, 0.0, 0.0)), chain.neutral_configuration(),
                       max_iters=50)
    assert not res.success and chain.within_limits(res.q) and np.all(np.isfinite(res.q))
    rng = np.random.default_rng(4)
    solver.reset(chain.neutral_configuration())
    for _ in range(5):
        goal = chain.fk(chain.random_configuration(rng))
        for _ in range(20):
            q = solver.step(goal)
            assert chain.within_limits(q) and np.all(np.isfinite(q))


def test_fabrik_bad_settings():
    chain = ball_chain(3, 0.2)
    with pytest.raises(ParameterError, match='>= 1'):
        make_solver('fabrik', chain, passes=0)
    with pytest.raises(ParameterError, match=r'\(0, 1\]'):
        make_solver('fabrik', chain, online_gain=0.0)


# ---------------------------------------------------------------------------- CCD
def nearby_success(chain, kind, trials, max_iters=300, seed=1, **settings):
    rng = np.random.default_rng(seed)
    solver = make_solver('ccd', chain, restart_after=0, **settings)
    ok = 0
    for _ in range(trials):
        q0 = chain.random_configuration(rng)
        pose = chain.fk(chain.clip(q0 + rng.normal(0.0, 0.3, q0.shape)))
        goal = pose if kind == 'pose' else PositionTarget(pose[:3, 3])
        res = solver.solve(goal, q0, max_iters=max_iters, tol=1e-3)
        assert chain.within_limits(res.q) and np.all(np.isfinite(res.q))
        ok += res.success
    return ok / trials


def test_ccd_converges_on_nearby_position_targets(chain):
    assert nearby_success(chain, 'position', 50) >= 0.9


def test_ccd_weighs_orientation_for_pose_targets(chain):
    assert nearby_success(chain, 'pose', 30) >= 0.55


def test_ccd_on_ball_chain():
    chain = ball_chain(6, 0.2)
    rng = np.random.default_rng(5)
    solver = make_solver('ccd', chain, seed=0)
    ok = 0
    for _ in range(30):
        pose = chain.fk(chain.random_configuration(rng))
        ok += solver.solve(PositionTarget(pose[:3, 3]), chain.neutral_configuration(),
                           max_iters=200, tol=1e-3).success
    assert ok / 30 >= 0.9


def test_ccd_prismatic_joint():
    """A revolute-prismatic-revolute arm: the prismatic update is a clamped axis projection."""
    def origin(z):
        m = np.eye(4)
        m[2, 3] = z
        return m
    joints = [
        JointSpec('yaw', 'base_link', 'l1', 'revolute', origin(0.1), (0, 0, 1), -3.0, 3.0),
        JointSpec('lift', 'l1', 'l2', 'prismatic', origin(0.1), (0, 0, 1), 0.0, 0.5),
        JointSpec('pitch', 'l2', 'l3', 'revolute', origin(0.1), (0, 1, 0), -1.5, 1.5),
        JointSpec('tool', 'l3', 'tool0', 'fixed', np.array([[1, 0, 0, 0.3], [0, 1, 0, 0],
                                                            [0, 0, 1, 0], [0, 0, 0, 1.0]])),
    ]
    chain = Chain.from_joints(joints, 'base_link', 'tool0')
    rng = np.random.default_rng(6)
    solver = make_solver('ccd', chain, seed=0)
    ok = 0
    for _ in range(20):
        goal = PositionTarget(chain.fk(chain.random_configuration(rng))[:3, 3])
        res = solver.solve(goal, chain.neutral_configuration(), max_iters=200, tol=1e-3)
        assert chain.within_limits(res.q)
        ok += res.success
    assert ok / 20 >= 0.9


def test_ccd_refuses_mimic_chains():
    path = os.path.join(os.path.dirname(__file__), 'urdf', 'mimic_prismatic.urdf')
    chain = Chain.from_urdf(path)
    assert any(chain.body_mimic[b] is not None for b in range(chain.num_bodies))
    with pytest.raises(ParameterError, match='mimic'):
        make_solver('ccd', chain)


def test_best_angle_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(200):
        a, b = rng.normal(size=2)
        lo, hi = -rng.uniform(0.0, 4.0), rng.uniform(0.0, 4.0)
        grid = np.linspace(lo, hi, 20001)
        best = grid[np.argmax(a * np.cos(grid) + b * np.sin(grid))]
        got = _best_angle(a, b, lo, hi)
        assert lo - 1e-12 <= got <= hi + 1e-12
        value = a * math.cos(got) + b * math.sin(got)
        assert value >= a * np.cos(best) + b * np.sin(best) - 1e-6


def test_ccd_every_online_iterate_stays_in_limits(chain):
    rng = np.random.default_rng(8)
    solver = make_solver('ccd', chain)
    solver.reset(chain.neutral_configuration())
    for goal in [chain.fk(chain.random_configuration(rng)) for _ in range(3)] + [far_pose()]:
        for _ in range(20):
            q = solver.step(goal)
            assert chain.within_limits(q) and np.all(np.isfinite(q))


def test_ccd_unreachable_target_gives_best_effort(chain):
    solver = make_solver('ccd', chain, seed=0)
    res = solver.solve(far_pose(), chain.neutral_configuration(), max_iters=50, tol=1e-3)
    assert not res.success and chain.within_limits(res.q) and np.all(np.isfinite(res.q))
    start = np.linalg.norm(chain.fk(chain.neutral_configuration())[:3, 3] - far_pose()[:3, 3])
    assert res.position_error < start


@pytest.mark.parametrize('changes, words', [
    ({'gain': 0.0}, '(0, 1]'),
    ({'max_step': 0.0}, '> 0'),
    ({'orientation_weight': -1.0}, '>= 0'),
    ({'restart_after': -2}, '>= 0'),
])
def test_ccd_bad_settings(changes, words):
    with pytest.raises(ParameterError) as info:
        make_solver('ccd', ball_chain(3, 0.2), **changes)
    assert words in str(info.value)


def test_classical_solvers_are_registered():
    from smcik_ros.solvers import available_solvers
    assert {'jacobian', 'distance', 'fabrik', 'ccd'} <= set(available_solvers())


def test_pose_target_orientation_is_reached_by_ccd_on_ball_chain():
    chain = ball_chain(4, 0.25)
    rng = np.random.default_rng(9)
    solver = make_solver('ccd', chain, seed=0)
    ok = 0
    for _ in range(20):
        pose = chain.fk(chain.random_configuration(rng))
        res = solver.solve(PoseTarget(pose), chain.neutral_configuration(), max_iters=300,
                           tol=(1e-3, 1e-2))
        ok += res.success
    assert ok / 20 >= 0.7


def test_ccd_and_fabrik_refuse_constraints_and_a_floating_base_instead_of_ignoring_them(chain):
    """A solver that does not honour constraints refuses them (at any time), but takes the
    collision clearance (a preference: the node's command guard keeps collision for every
    solver), and refuses a floating base (held or fitted through constraints) outright."""
    from smcik_ros.collision import CollisionConstraint, CollisionModel, Scene
    from smcik_ros.goals import Contact, JointCoupling
    ccd = make_solver('ccd', chain)
    coupling = JointCoupling(chain.joint_names[1], chain.joint_names[0])
    with pytest.raises(GoalError, match=r'ccd solver does not honour constraints \(given: '
                                        r'JointCoupling\).*smc, jacobian or distance'):
        ccd.set_constraints([coupling])
    assert ccd.constraints == []
    clearance = CollisionConstraint(CollisionModel.skeleton(chain), Scene({}))
    ccd.set_constraints([clearance])
    assert ccd.constraints == [clearance]
    with pytest.raises(GoalError, match='does not honour constraints'):
        ccd.set_constraints([clearance, Contact(chain.tip_link)])
    assert ccd.constraints == [clearance]           # the refused set changed nothing
    balls = ball_chain(3, 0.2)
    with pytest.raises(GoalError, match='fabrik solver does not honour constraints'):
        make_solver('fabrik', balls).set_constraints([Contact(balls.tip_link)])
    biped = Chain.from_urdf(os.path.join(os.path.dirname(__file__), 'urdf', 'biped.urdf'),
                            'pelvis', ['l_palm', 'r_palm'], floating_base=True)
    with pytest.raises(ParameterError, match='ccd solver cannot drive a floating base'):
        make_solver('ccd', biped)
    assert make_solver('jacobian', biped).chain is biped
