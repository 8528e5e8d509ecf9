"""Warm-up before a real-time loop: every kernel compiled (or loaded from numba's on-disk
cache) and the SMC solver's paths run once, so that no tick pays for either.

This module sits above the solvers (it builds one); the kernels' own ``ensure_ready``,
which the SMC solver's constructor calls, compiles the kernels alone.
"""

import time

import numpy as np

from .goals import PoseTarget
from .kernels.warm import cache_is_warm, compile_kernels
from .solvers import make_solver

__all__ = ['warm_up']


def warm_up(chain, log=None):
    """Compile (or load from the on-disk cache) every kernel for ``chain``'s arrays, then run
    FK, Jacobians, the pose terms and a short SMC solve and steps.

    Call it once before a real-time loop starts (the node: after building the chain, before
    its solver and its timer). log: optional callable taking a message; it gets
    'compiling kernels (first run) ...' before a cold compilation (one kernel without its
    cache index) and the time it took after. Returns the seconds spent.
    """
    start = time.perf_counter()
    cold = not cache_is_warm()
    if cold and log is not None:
        log('compiling kernels (first run; later starts load them from the on-disk cache)')
    compile_kernels(chain.records)
    q = chain.neutral_configuration()
    frames = chain.frames(np.atleast_2d(q))
    frames.jacobian()
    chain.fk(q)
    chain.fk(np.atleast_2d(q))
    term = PoseTarget(frames.link_pose()[0])
    term.residual_jacobian(frames)
    term.errors(frames)
    # A goal a little away from the seed: the solve and the steps refine.
    goal = chain.fk(chain.clip(chain.integrate(q, np.full(chain.nv, 0.2))))
    solver = make_solver('smc', chain, seed=0, num_particles=8)
    solver.solve(goal, q, max_iters=3)
    # Without the seed-first stage, solve() refines in the filter (kernels.refine).
    make_solver('smc', chain, seed=0, num_particles=8, seed_rows=0).solve(goal, q, max_iters=2)
    solver.reset(q)
    for _ in range(3):
        solver.step(goal)
    elapsed = time.perf_counter() - start
    if cold and log is not None:
        log(f'kernels ready ({elapsed:.1f} s)')
    return elapsed
