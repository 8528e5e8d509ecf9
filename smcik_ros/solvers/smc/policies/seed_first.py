"""Seed first: ``solve``'s compiled first stage (policy ``seed_rows``).

Before the filter runs, ``solve`` refines the seed, then (only when the seed fails)
``seed_rows - 1`` draws of the filter's uniform proposal, each alone by compiled LM steps
(the refinement's own step, damped less: ``COST_DAMPING``, its longest trial that lowers the
cost taken) until one meets the tolerance. Only where the compiled kernel can judge the
problem whole: targets of its kinds (pose, position, orientation, any number, on moving
links), no ball joints, and of the hard constraints only contacts (``Contact``: a link keeps
its pose), which it takes as pose targets at their own sigmas; the row it returns must then
keep every hard constraint (``violated``: a CoM polygon, ...; the contacts at their
tolerance, which the kernel's own check covers when it is no tighter), else the filter runs.
The seed row goes first, so a seed on (or near) a solution's branch keeps it; a draw is a
random branch, which the filter's nearest-success choice would not necessarily pick: the
price of answering most queries in tens of microseconds (docs/smc.md and docs/benchmarks.md,
``bench speed``).
"""

import numpy as np

from .... import kernels
from ....goals import Contact
from ....kernels.records import LM
from .refinement import KERNEL_TARGETS

__all__ = ['SeedFirst']

CONTACT_SHARE = 0.1    # with contacts, the rows meet this share of the tolerance
COST_DAMPING = 0.05    # lambda = COST_DAMPING * cost + refine_damping in its steps (module doc)


class SeedFirst:
    """``solve``'s first stage (module docstring)."""

    def __init__(self, settings, refinement):
        self.rows = int(settings.seed_rows)
        self.steps = int(settings.seed_steps)
        self.refinement = refinement
        lm = LM.view(refinement.lm)
        self.lm = LM.pack(steps=self.steps, alphas=lm.alphas, damping=lm.damping,
                          max_step=lm.max_step, cost_damping=COST_DAMPING)

    def solve(self, chain, targets, constraints, q_seed, tolerance, rng):
        """Return (q, position error, orientation error) of the first row that meets
        ``tolerance`` (position [m], orientation [rad]) and keeps the hard constraints, or
        None (the filter runs)."""
        terms = _compiled_terms(chain, targets, constraints)
        if terms is None:
            return None
        if len(terms) > len(targets):       # contacts: kept well inside their tolerance
            tolerance = (CONTACT_SHARE * tolerance[0], CONTACT_SHARE * tolerance[1])
        bodies, columns, joints, record, _, plain = self.refinement.records(terms, tolerance)
        # The seed alone first: the draws are made only when it fails.
        rows = q_seed[None].copy()
        index, pos, ori = kernels.first_solution(bodies, columns, joints, record, self.lm,
                                                 plain, rows)
        if index < 0 and self.rows > 1:
            rows = chain.random_configuration(rng, self.rows - 1)
            index, pos, ori = kernels.first_solution(bodies, columns, joints, record, self.lm,
                                                     plain, rows)
        if index < 0:
            return None
        # The kernel met ``tolerance`` on the contacts' targets (the same errors): a contact
        # whose own tolerance is no tighter (a position-only one has no orientation row)
        # needs no second look.
        hard = [c for c in constraints if c.hard and not (
            type(c) is Contact and c.tolerance[0] >= tolerance[0]
            and (c.position_only or c.tolerance[3] >= tolerance[1]))]
        if hard:
            frames = chain.frames(rows[index])
            if any(bool(c.violated(frames)[0]) for c in hard):
                return None
        return rows[index], float(pos), float(ori)


def _compiled_terms(chain, targets, constraints):
    """Return the kernel's terms of a solve (the targets, then the contacts as pose
    targets), or None when the compiled kernel cannot judge it whole."""
    if chain.has_ball_joints or not targets:
        return None
    terms = list(targets)
    for c in constraints:
        if type(c) is Contact and c.anchored:
            terms.append(c.target)
        elif getattr(c, 'equality', False):      # another equality: the filter projects
            return None
    if all(type(t) in KERNEL_TARGETS and chain.link_anchor(t.link)[0] >= 0 for t in terms):
        return terms
    return None
