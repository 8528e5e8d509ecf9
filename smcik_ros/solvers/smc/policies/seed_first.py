"""Seed first: ``solve``'s compiled first stage (policy ``seed_rows``).

Before the filter runs, ``solve`` refines the seed, then ``seed_rows - 1`` draws of the
filter's uniform proposal, each alone by compiled LM steps (the refinement's own step) until
one meets the tolerance. Only where it is the same problem the refinement solves in one
compiled kernel: one plain pose target, no hard constraints, no ball joints. The seed row goes
first, so a seed on (or near) a solution's branch keeps it; a draw is a random branch, which
the filter's nearest-success choice would not necessarily pick: the price of answering most
queries in tens of microseconds (docs/smc.md and docs/benchmarks.md, ``bench speed``).
"""

import numpy as np

from .... import kernels
from ....goals import PoseTarget
from ....kernels.records import LM

__all__ = ['SeedFirst']


class SeedFirst:
    """``solve``'s first stage (module docstring)."""

    def __init__(self, settings, refinement):
        self.rows = int(settings.seed_rows)
        self.steps = int(settings.seed_steps)
        self.refinement = refinement

    def solve(self, chain, targets, constraints, q_seed, tolerance, rng):
        """Return (q, position error, orientation error) of the first row that meets
        ``tolerance`` (position [m], orientation [rad]), or None (the filter runs)."""
        if not _fast_pose_goal(chain, targets, constraints):
            return None
        rows = np.empty((self.rows, chain.nq))
        rows[0] = q_seed
        if self.rows > 1:
            rows[1:] = chain.random_configuration(rng, self.rows - 1)
        bodies, columns, joints, record, lm, plain = self.refinement.records(targets, tolerance)
        steps = LM.pack(steps=self.steps, alphas=lm[1], damping=lm[2], max_step=lm[3])
        index, pos, ori = kernels.first_solution(bodies, columns, joints, record, steps, plain,
                                                 rows)
        if index < 0:
            return None
        return rows[index], float(pos), float(ori)


def _fast_pose_goal(chain, targets, constraints):
    """Return whether a solve is one plain pose target the compiled kernels handle whole."""
    if chain.has_ball_joints or len(targets) != 1 or any(c.hard for c in constraints):
        return False
    term = targets[0]
    return (type(term) is PoseTarget and term.covariance is None
            and chain.link_anchor(term.link)[0] >= 0)
