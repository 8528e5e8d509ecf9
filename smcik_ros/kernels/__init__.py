"""Compiled kernels of the hot path: batched forward kinematics, Jacobians, pose residuals,
the Levenberg-Marquardt steps, the SMC refinement and the collision broad phase.

numba only, records in, arrays out: each kernel is a loop over configurations compiled by
numba (``@njit(cache=True)``, nopython, releasing the GIL) and reads ``(records, inputs,
out)``: what is constant for a model comes packed in a few records built once per model
(``records``; ``Chain.records`` for the chain). numba is required; ``NUMBA_DISABLE_JIT=1``
(numba's own switch) runs the very same functions as plain Python, for debugging. Nothing
above this package imports numba.

Modules by topic: ``fk`` (body frames, link poses, Jacobian columns, body points),
``residuals`` (pose errors and residuals), ``lm`` (the LM/Cholesky steps), ``quat``,
``motion`` (motion distances, random walk, blocked joints, ball clipping), ``refine`` (the
SMC refinement's move step), ``collision`` (the broad phase and distance gradients), ``records``
(the record layouts), ``warm`` (compile every kernel before a real-time loop), ``jit``.
"""

from .collision import collision_query, distance_gradients, leaf_buffers
from .fk import FAST_TRIG_LIMIT, body_points_world, fk, jacobian_at, link_pose
from .jit import as_rows
from .lm import LARGE_SYSTEM, lm_null_step, lm_spring_step, lm_step
from .motion import blocked_joints, clip_ball_rows, motion_distances, random_walk
from .quat import (W_FLOOR, quat_exp_products, quat_pair_rotvecs, quat_products,
                   quat_relative_rotvecs, quat_rotvecs, quat_slerps)
from .refine import begin, choose, first_solution, propose, refine, state_of
from .residuals import pose_errors, pose_residual_jacobian
from .warm import KERNELS, cache_is_warm, compile_kernels, ensure_ready

__all__ = ['FAST_TRIG_LIMIT', 'KERNELS', 'LARGE_SYSTEM', 'W_FLOOR', 'as_rows',
           'blocked_joints', 'body_points_world', 'cache_is_warm', 'clip_ball_rows',
           'collision_query', 'compile_kernels', 'distance_gradients', 'ensure_ready',
           'first_solution', 'fk', 'jacobian_at', 'leaf_buffers', 'link_pose', 'lm_null_step',
           'lm_spring_step', 'lm_step', 'motion_distances', 'pose_errors',
           'pose_residual_jacobian', 'quat_exp_products', 'quat_pair_rotvecs', 'quat_products',
           'quat_relative_rotvecs', 'quat_rotvecs', 'quat_slerps', 'random_walk', 'refine',
           'begin', 'propose', 'choose', 'state_of']
