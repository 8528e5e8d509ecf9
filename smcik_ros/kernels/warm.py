"""Compile (or load from the on-disk cache) every kernel before a real-time loop starts.

``compile_kernels(records)`` calls each kernel once, on small inputs of the argument types
its callers pass (float64, int64 or bool, C-contiguous), so that the specialisations the
library uses exist, compiled or loaded, before a first tick or a first timed ``solve``.
``ensure_ready`` does it once per process (the SMC solver's constructor calls it);
``smcik_ros.warmup.warm_up`` does it with messages and a short solve, before the node's
timer starts.
"""

import logging
import time

import numpy as np

from .collision import collision_query, distance_gradients, leaf_buffers
from .fk import body_points_world, fk, jacobian_at, link_pose
from .lm import lm_null_step, lm_spring_step, lm_step
from .motion import blocked_joints, clip_ball_rows, motion_distances, random_walk
from .quat import (quat_exp_products, quat_pair_rotvecs, quat_products, quat_relative_rotvecs,
                   quat_rotvecs, quat_slerps)
from .records import LM, MOTION, OBSTACLES, PAIRS, ROBOT, TARGETS
from .refine import begin, choose, first_solution, propose, refine, state_of
from .residuals import pose_errors, pose_residual_jacobian

__all__ = ['KERNELS', 'cache_is_warm', 'compile_kernels', 'ensure_ready']

# Every kernel a caller outside the kernels calls: ``compile_kernels`` calls each of them
# itself, so each one has its own cache index, which is what tells a warm start from a cold
# one (a kernel reached only inside another is not cached on its own).
KERNELS = (fk, link_pose, jacobian_at, pose_residual_jacobian, pose_errors, lm_step,
           lm_null_step, lm_spring_step, blocked_joints, refine, begin, propose, choose, state_of,
           first_solution, body_points_world, random_walk, collision_query,
           distance_gradients, quat_products, quat_rotvecs, quat_relative_rotvecs,
           quat_exp_products, quat_slerps, clip_ball_rows, quat_pair_rotvecs, motion_distances)

_LOG = logging.getLogger('smcik_ros.kernels')
_READY = False


def cache_is_warm():
    """Return whether numba's on-disk cache holds an index for every kernel (best effort:
    False where it cannot tell, as with ``NUMBA_DISABLE_JIT=1``)."""
    for func in KERNELS:
        try:
            if not func._cache._cache_file._load_index():
                return False
        except Exception:
            return False
    return True


def ensure_ready(records):
    """Run ``compile_kernels(records)`` once per process (the SMC solver's constructor calls
    it, so that a library user's first timed solve does not compile). The kernels' types do
    not depend on the chain, so one call serves every chain. records: ``Chain.records``.
    A failure is logged on the ``smcik_ros.kernels`` logger: the kernels then compile at
    their first use."""
    global _READY
    if _READY:
        return
    _READY = True
    try:
        compile_kernels(records)
    except Exception as exc:    # the warm-up is an optimisation: the kernels compile lazily
        _LOG.warning('kernel warm-up failed (%s: %s); kernels compile on first use',
                     type(exc).__name__, exc)


def compile_kernels(records):
    """Call every kernel once for a chain's records (``Chain.records``: bodies, columns,
    links, joints) and small inputs of its callers' types; return the seconds spent."""
    global _READY
    _READY = True
    start = time.perf_counter()
    bodies, columns, links, joints = records
    q = np.atleast_2d(0.5 * (joints[0] + joints[1]))       # mid-range (lower + upper) / 2
    _frames_kernels(bodies, columns, links, q)
    _refinement_kernels(records, q)
    _joint_kernels(joints, columns[6], q)
    _collision_kernels(bodies, columns, q)
    return time.perf_counter() - start


def _frames_kernels(bodies, columns, links, q):
    rot, pos = fk(bodies, q)
    link_pose(bodies, links, q, 0, np.empty((1, 4, 4)))
    jacobian_at(columns, rot, pos, rot.shape[0] - 1, np.zeros((1, 3)))
    body_points_world(rot, pos, np.array([-1, rot.shape[0] - 1], dtype=np.int64),
                      np.zeros((2, 3)), np.empty((3, 2)))
    target = _read_only(np.eye(4))
    pose_residual_jacobian(columns, links, rot, pos, 0, target)
    pose_errors(links, rot, pos, 0, target)


def _refinement_kernels(records, q):
    nv = records[1][6]
    jac, r, one = np.zeros((1, 6, nv)), np.zeros((1, 6)), np.ones(1)
    lm_step(jac, r, one)
    lm_null_step(jac, r, one, np.zeros((1, nv)), np.ones(nv), 1e-6)
    lm_spring_step(jac, r, one, one, np.ones(nv), np.zeros((1, nv)))
    bodies, columns, _, joints = records
    targets = TARGETS.pack(body=[-1], offset=np.eye(4)[None], kind=[0], goal=np.eye(4)[None],
                           whiten=np.eye(6)[None], full=[False], weight=[1.0],
                           sigma_position=[1.0], sigma_orientation=[1.0],
                           position_tolerance=0.0, orientation_tolerance=0.0, rows=6)
    steps = LM.pack(steps=1, alphas=np.ones(3), damping=1e-3, max_step=0.1,
                    cost_damping=0.5)
    for fraction in (0.5, -1.0):        # with the motion prior, and the plain LM step
        motion = MOTION.pack(spring=1.0, spring_fade=1.0, tolerance_cost=1.0, gain=0.5,
                             slide_min=0.1, precise_fraction=fraction,
                             weights=np.ones(nv), reference=q[0])
        refine(bodies, columns, joints, targets, steps, motion, q.copy(),
               state_of(np.ones(1), np.ones(1)))
        state = state_of(np.ones(1), np.ones(1))
        begin(bodies, columns, joints, targets, steps, motion, q.copy(), state)
        trials, mu = propose(bodies, columns, joints, targets, steps, motion,
                             (np.zeros((1, 0)), np.zeros((1, 0, nv))), q.copy(), state)
        choose(bodies, columns, joints, targets, motion, q.copy(), state, trials, mu,
               np.zeros(trials.shape[:2]))
    first_solution(bodies, columns, joints, targets, steps, motion, q.copy())


def _joint_kernels(joints, nv, q):
    blocked_joints(joints, q, np.zeros((1, nv)))
    scalar = len(joints[2])
    bad = np.ones((1, scalar), dtype=np.bool_)
    random_walk(joints, q, np.zeros(bad.size), np.ones(1), np.ones(scalar), q.copy(), bad,
                False)
    motion_distances(joints, q, q[0], np.ones(nv))
    unit = np.eye(1, 4)
    quat_rotvecs(quat_products(unit, unit))
    quat_relative_rotvecs(unit, unit)
    quat_exp_products(unit, np.zeros((1, 3)))
    quat_slerps(unit, unit, np.full(1, 0.5))
    clip_ball_rows(joints, np.zeros((0, 4)))        # no rows: a chain may have no ball joint
    quat_pair_rotvecs(np.eye(1, 8), np.zeros(1, dtype=np.int64), np.full(1, 4))


def _collision_kernels(bodies, columns, q):
    """Compile the collision kernels for the records the collision engine builds (one robot
    sphere and link, one self pair with a table, one sphere obstacle)."""
    rot, pos = fk(bodies, q)
    i1, i2, i4 = np.zeros(1, np.int64), np.zeros((1, 2), np.int64), np.zeros((1, 4), np.int64)
    f1, f2, f3 = np.zeros(1), np.zeros((1, 2)), np.zeros((1, 3))
    robot = ROBOT.pack(row_body=[-1, -1], row_local=np.zeros((2, 3)), radii=np.ones(1),
                       sphere_row=i1, link_row=[1], link_radius=np.ones(1),
                       link_sphere_start=i1, link_sphere_count=[1], sphere_part=i1,
                       part_local=f3, part_body=[-1], part_radius=np.ones(1))
    pairs = PAIRS.pack(pairs=i2, table_of_pair=[-1], qcols=i2, low=f2, step=f2 + 1.0,
                       size=i2 + 1, offset=i1, values=f1, subset_limit=f1, sphere_index=i1,
                       sphere_ranges=i4, full_ranges=i4)
    obstacles = OBSTACLES.pack(pair_link=i1, pair_obj=i1, obj_center=f3, obj_radius=np.ones(1),
                               obj_part_start=i1, obj_part_count=[1], part_center=f3,
                               part_radius=np.ones(1), part_start=i1, part_count=[1],
                               kind=i1, rot=np.eye(3)[None], trans=f3, size=f3 + 0.1)
    collision_query(robot, pairs, obstacles, rot, pos, np.zeros((1, 1)), 0.01, 0.0, 0,
                    leaf_buffers(1))
    two = np.zeros((2, 3))
    distance_gradients(columns, rot, pos, (np.zeros(2, np.int64), np.array([0, -1], np.int64),
                                           two.copy(), np.array([-1, -2], np.int64), two.copy(),
                                           two.copy()))


def _read_only(arr):
    arr.setflags(write=False)
    return arr
