"""Compile (or load from the on-disk cache) every kernel before a real-time loop starts."""

import logging
import time

import numpy as np

from .collision import collision_query, distance_gradients, leaf_buffers
from .fk import body_points_world, fk, jacobian_at, link_pose_path
from .jit import ENABLED
from .lm import lm_null_step, lm_spring_step, lm_step
from .motion import blocked_joints, clip_ball_rows, motion_distances, random_walk
from .quat import (quat_exp_products, quat_pair_rotvecs, quat_products, quat_relative_rotvecs,
                   quat_rotvecs, quat_slerps)
from .refine import first_solution, refine_pose, refine_pose_motion
from .residuals import pose_errors, pose_residual_jacobian

__all__ = ['WARM_UP_KERNELS', 'ensure_ready', 'warm_up']


def _cache_is_warm(func):
    """Return whether numba's on-disk cache holds an index for ``func`` (best effort)."""
    try:
        return bool(func._cache._cache_file._load_index())
    except Exception:
        return False


def _warm_collision_query(frames):
    """Compile ``collision_query`` for the argument types the collision engine passes (one
    robot sphere and link, one self pair with a table, one sphere obstacle)."""
    i1 = np.zeros(1, dtype=np.int64)
    i2 = np.zeros((1, 2), dtype=np.int64)
    i4 = np.zeros((1, 4), dtype=np.int64)
    f1, f2, f3 = np.zeros(1), np.zeros((1, 2)), np.zeros((1, 3))
    collision_query(np.array(frames.rot, order='C'), np.array(frames.pos, order='C'),
                    np.array([-1, -1], dtype=np.int64), np.zeros((2, 3)),
                    np.zeros((len(frames), 1)), 0.01, 0.0, np.ones(1), i1.copy(),
                    np.ones(1, dtype=np.int64), np.ones(1), i1.copy(), np.ones(1, np.int64),
                    i1.copy(), f3.copy(), np.full(1, -1, dtype=np.int64), np.ones(1),
                    i2.copy(), np.full(1, -1, dtype=np.int64), i2.copy(), f2.copy(), f2 + 1.0,
                    i2 + 1, i1.copy(), f1.copy(), f1.copy(), i1.copy(), i4.copy(), i4.copy(),
                    i1.copy(), i1.copy(), f3.copy(), np.ones(1), i1.copy(),
                    np.ones(1, np.int64), f3.copy(), np.ones(1), i1.copy(),
                    np.ones(1, np.int64), i1.copy(), np.eye(3)[None].copy(), f3.copy(),
                    f3 + 0.1, 0, *leaf_buffers(1))


_READY = False


_LOG = logging.getLogger('smcik_ros.kernels')


def ensure_ready(chain):
    """Run ``warm_up(chain)`` once per process (the SMC solver's constructor calls it).

    The kernels' types do not depend on the chain, so one warm-up serves every chain. The
    messages go to the ``smcik_ros.kernels`` logger (level INFO).
    """
    global _READY
    if _READY or not ENABLED:
        return
    _READY = True           # first: warm_up builds an SMC solver itself
    try:
        warm_up(chain, _LOG.info)
    except Exception as exc:    # the warm-up is an optimisation: the kernels compile lazily
        _LOG.warning('kernel warm-up failed (%s: %s); kernels compile on first use',
                     type(exc).__name__, exc)


# The kernels warm_up calls itself (each one then has its on-disk cache index, which is what
# tells a warm start from a cold one): every kernel a solver or the collision engine calls.
WARM_UP_KERNELS = ('fk', 'link_pose_path', 'jacobian_at', 'pose_residual_jacobian',
                   'pose_errors', 'lm_step', 'lm_null_step', 'lm_spring_step',
                   'blocked_joints', 'refine_pose', 'refine_pose_motion', 'first_solution',
                   'body_points_world', 'random_walk', 'collision_query',
                   'distance_gradients', 'quat_products',
                   'quat_rotvecs', 'quat_relative_rotvecs', 'quat_exp_products',
                   'quat_slerps', 'clip_ball_rows', 'quat_pair_rotvecs', 'motion_distances')


def warm_up(chain, log=None):
    """Compile (or load from the on-disk cache) every kernel for ``chain``'s arrays.

    Call it once before a real-time loop starts (the node: after building the chain, before
    its solver and its timer; otherwise the SMC solver's constructor runs it once per
    process, logging to ``smcik_ros.kernels``): it runs FK, Jacobians, the pose kernels and
    a short SMC solve and steps, so that every specialisation the solvers use exists before
    the first tick. log: optional
    callable taking a message; it gets 'compiling kernels (first run) ...' before a cold
    compilation and the time it took after. Returns the seconds spent; does nothing
    (returns 0.0) when the kernels are not compiled (SMCIK_NO_JIT=1 or no numba).
    """
    global _READY
    if not ENABLED:
        return 0.0
    _READY = True
    start = time.perf_counter()
    cold = not all(_cache_is_warm(globals()[name]) for name in WARM_UP_KERNELS)
    if cold and log is not None:
        log('compiling kernels (first run; later starts load them from the on-disk cache)')
    from ..goals import PoseTarget
    from ..solvers import make_solver
    q = chain.neutral_configuration()
    frames = chain.frames(np.atleast_2d(q))
    body_points_world(np.ascontiguousarray(frames.rot), np.ascontiguousarray(frames.pos),
                      np.array([-1, chain.num_bodies - 1], dtype=np.int64), np.zeros((2, 3)),
                      np.empty((3, 2)))
    _warm_collision_query(frames)
    if len(chain.column_body):
        two = np.zeros((2, 3))
        distance_gradients(np.ascontiguousarray(frames.rot), np.ascontiguousarray(frames.pos),
                           np.zeros(2, dtype=np.int64), np.array([0, -1], dtype=np.int64),
                           two.copy(), np.array([-1, -2], dtype=np.int64), two.copy(),
                           two.copy(), np.ones((chain.num_bodies + 1, len(chain.column_body)),
                                               dtype=np.bool_),
                           *chain.kernel_columns(0)[1:], chain.nv)
    frames.jacobian()
    chain.fk(q)
    chain.fk(np.atleast_2d(q))
    pose = frames.link_pose()[0]
    term = PoseTarget(pose)
    term.residual_jacobian(frames)
    term.errors(frames)
    jac = frames.jacobian()
    lm_step(jac, np.zeros((1, 6)), np.ones(1))
    lm_null_step(jac, np.zeros((1, 6)), np.ones(1), np.zeros((1, chain.nv)),
                 np.ones(chain.nv), 1e-6)
    lm_spring_step(jac, np.zeros((1, 6)), np.ones(1), np.ones(1), np.ones(chain.nv),
                   np.zeros((1, chain.nv)))
    blocked_joints(np.atleast_2d(q), np.zeros((1, chain.nv)), chain.scalar_q, chain.scalar_v,
                   chain.lower, chain.upper)
    quat_rotvecs(quat_products(np.eye(1, 4), np.eye(1, 4)), 1e-12)
    quat_relative_rotvecs(np.eye(1, 4), np.eye(1, 4), 1e-12)
    quat_exp_products(np.eye(1, 4), np.zeros((1, 3)))
    quat_slerps(np.eye(1, 4), np.eye(1, 4), 0.5)
    clip_ball_rows(np.eye(1, 4), np.ones(1))
    quat_pair_rotvecs(np.eye(1, 8), np.zeros(1, dtype=np.int64), np.full(1, 4), 1e-12)
    index = np.zeros(1, dtype=np.int64)
    motion_distances(np.eye(1, 5), np.eye(1, 5)[0], index, index, np.zeros(1, dtype=np.bool_),
                     np.arange(1, 5).reshape(1, 4), np.arange(1, 4).reshape(1, 3), np.ones(4),
                     1e-12)
    # A goal a little away from the seed: the solve and the steps refine.
    goal = chain.fk(chain.clip(chain.integrate(q, np.full(chain.nv, 0.2))))
    solver = make_solver('smc', chain, seed=0, num_particles=8)
    solver.solve(goal, q, max_iters=3)
    # Without the seed-first stage, solve() refines in the filter (refine_pose).
    make_solver('smc', chain, seed=0, num_particles=8, seed_rows=0).solve(goal, q, max_iters=2)
    solver.reset(q)
    for _ in range(3):
        solver.step(goal)
    elapsed = time.perf_counter() - start
    if cold and log is not None:
        log(f'kernels ready ({elapsed:.1f} s)')
    return elapsed
