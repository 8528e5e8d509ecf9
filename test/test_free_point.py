"""The paper's free-point distance IK (benchmarks/_free_point.py, seed 002 sections VI-B to
VI-D, the form ``bench distance_paper`` reproduces): hard constraints below 1e-9 m in a few
tens of iterations, the structured solve equal to the dense one."""

import os
import sys

import numpy as np
import pytest

from smcik_ros.errors import GoalError, ParameterError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'benchmarks'))
from _free_point import FreePointDistanceSolver  # noqa: E402


@pytest.fixture
def arm(arm7):
    return arm7


def straight_chain(n=10, length=0.1):
    return np.array([[0.0, 0.0, length * i] for i in range(n)]), [(i, i + 1)
                                                                  for i in range(n - 1)]


def ring(n=20):
    ang = 2.0 * np.pi * np.arange(n) / n
    return np.c_[np.cos(ang), np.sin(ang), np.zeros(n)], [(i, (i + 1) % n) for i in range(n)]


@pytest.mark.parametrize('structured', [True, False])
@pytest.mark.parametrize('soft', ['anchors', 'none'])
def test_free_point_chain_reaches_target_keeping_lengths(structured, soft):
    """Section VI-B: a 10-point chain, one end pinned, the other on a target."""
    pts, edges = straight_chain()
    rng = np.random.default_rng(9)
    for _ in range(5):
        goal = rng.uniform(-0.4, 0.4, 3) + (0.0, 0.0, 0.3)
        solver = FreePointDistanceSolver(pts, edges, pinned=(0,), soft=soft,
                                         structured=structured)
        res = solver.solve({9: goal}, max_iters=300, tol=1e-8)
        assert res.success, res
        np.testing.assert_allclose(np.linalg.norm(np.diff(res.points, axis=0), axis=1), 0.1,
                                   atol=1e-7)
        np.testing.assert_allclose(res.points[9], goal, atol=1e-7)
        np.testing.assert_allclose(res.points[0], 0.0, atol=1e-7)


@pytest.mark.parametrize('soft_pairs', [False, True])
def test_free_point_cycle_graph_with_contacts(soft_pairs):
    """Section VI-D: a ring of 20 points, two contacts; soft constraints keep its shape."""
    pts, edges = ring()
    pairs = [(i, (i + 5) % 20) for i in range(20)] if soft_pairs else []
    contacts = {0: (1.3, 0.0, 0.3), 10: (-1.2, 0.1, -0.2)}
    with_soft = FreePointDistanceSolver(pts, edges, soft_pairs=pairs).solve(
        contacts, max_iters=200, tol=1e-9)
    without = FreePointDistanceSolver(pts, edges, soft='none').solve(contacts, max_iters=200,
                                                                     tol=1e-9)
    assert with_soft.success and without.success
    for res in (with_soft, without):
        ring_lengths = np.linalg.norm(res.points - np.roll(res.points, -1, axis=0), axis=1)
        np.testing.assert_allclose(ring_lengths, ring_lengths[0], atol=1e-8)
    # The soft task keeps the reference's distances to the anchors better.
    checker = FreePointDistanceSolver(pts, edges)
    assert checker.errors(with_soft.points, contacts)[1] < checker.errors(without.points,
                                                                          contacts)[1]


@pytest.mark.parametrize('soft_pairs', [False, True])
def test_structured_step_equals_dense_step(soft_pairs):
    """The block-diagonal / sparse solve (eqs. 12-13) is the same step as the dense SVDs."""
    pts, edges = ring()
    pairs = [(i, (i + 5) % 20) for i in range(20)] if soft_pairs else []
    rng = np.random.default_rng(10)
    for _ in range(3):
        x = pts + rng.normal(0.0, 0.05, pts.shape)
        steps = []
        for structured in (True, False):
            solver = FreePointDistanceSolver(pts, edges, soft_pairs=pairs, structured=structured)
            solver.reset(x)
            steps.append(solver.step({0: (1.2, 0.0, 0.2)}) - x)
        np.testing.assert_allclose(steps[0], steps[1], atol=1e-8)


def test_free_point_from_chain_matches_link_origins(arm):
    q = arm.neutral_configuration()
    solver = FreePointDistanceSolver.from_chain(arm, q)
    assert solver.num_points >= 5 and len(solver.edges) == solver.num_points - 1
    goal = solver.reference[-1] + (0.05, -0.05, -0.1)
    res = solver.solve({solver.num_points - 1: goal}, max_iters=100, tol=1e-9)
    assert res.success


def test_free_point_bad_input():
    pts, edges = straight_chain(4)
    with pytest.raises(ParameterError, match='distinct point indices'):
        FreePointDistanceSolver(pts, [(0, 7)])
    with pytest.raises(ParameterError, match='soft'):
        FreePointDistanceSolver(pts, edges, soft='springs')
    with pytest.raises(ParameterError, match='soft_step_fraction'):
        FreePointDistanceSolver(pts, edges, soft_step_fraction=0.0)
    with pytest.raises(GoalError, match='index'):
        FreePointDistanceSolver(pts, edges).step({9: (0.0, 0.0, 0.0)})
