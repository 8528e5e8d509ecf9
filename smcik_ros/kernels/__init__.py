"""Compiled kernels of the hot path: batched forward kinematics, Jacobians, pose residuals,
the Levenberg-Marquardt steps, the SMC refinement and the collision broad phase.

Each kernel is a loop over configurations written for numba (``@njit(cache=True)``,
nopython); ``jit`` turns the decorator into a no-op when numba is missing or
``SMCIK_NO_JIT=1``. The callers (``Chain.frames``, ``Frames.jacobian_at``, ``PoseTarget``,
the SMC refinement) use a kernel only when ``ENABLED`` is True and keep their numpy
implementation otherwise; the tests check both against each other and against finite
differences. Call ``warm_up(chain)`` once before a real-time loop starts: it compiles (or
loads from the on-disk cache) every kernel, so that no tick pays for compilation.

Modules by topic: ``fk`` (body frames, link poses, Jacobian columns, body points),
``residuals`` (pose errors and residuals), ``lm`` (the LM/Cholesky steps), ``quat``,
``motion`` (motion distances, random walk, blocked joints, ball clipping), ``refine`` (the
fused refinement), ``collision`` (the broad phase and distance gradients), ``warm``.

Array conventions are those of ``smcik_ros.kinematics``: body frames are body-major,
rot (B, N, 3, 3) and pos (B, N, 3) in the base frame [m].
"""

from .collision import collision_query, distance_gradients, leaf_buffers
from .fk import FAST_TRIG_LIMIT, body_points_world, fk, jacobian_at, link_pose_path
from .jit import ENABLED, as_rows
from .lm import LARGE_SYSTEM, lm_null_step, lm_spring_step, lm_step
from .motion import blocked_joints, clip_ball_rows, motion_distances, random_walk
from .quat import (quat_exp_products, quat_pair_rotvecs, quat_products, quat_relative_rotvecs,
                   quat_rotvecs, quat_slerps)
from .refine import first_solution, refine_pose, refine_pose_motion
from .residuals import pose_errors, pose_residual_jacobian
from .warm import WARM_UP_KERNELS, ensure_ready, warm_up

__all__ = ['ENABLED', 'FAST_TRIG_LIMIT', 'LARGE_SYSTEM', 'WARM_UP_KERNELS', 'as_rows',
           'blocked_joints', 'body_points_world', 'clip_ball_rows', 'collision_query',
           'distance_gradients', 'ensure_ready', 'first_solution', 'fk', 'jacobian_at',
           'leaf_buffers', 'link_pose_path', 'lm_null_step', 'lm_spring_step', 'lm_step',
           'motion_distances', 'pose_errors', 'pose_residual_jacobian', 'quat_exp_products',
           'quat_pair_rotvecs', 'quat_products', 'quat_relative_rotvecs', 'quat_rotvecs',
           'quat_slerps', 'random_walk', 'refine_pose', 'refine_pose_motion', 'warm_up']
