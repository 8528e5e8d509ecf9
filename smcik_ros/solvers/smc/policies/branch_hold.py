"""Branch hold: online, the estimate stays on the IK branch it is on (policy ``branch_hold``).

A robot arm must not swing to another solution branch because a particle there scores a
little better: ``BranchHold`` chooses the estimate among the held particle (the previous
estimate's, carried over without noise and always refined) and the best candidate, by the
rule in its docstring, and says when the held branch is about to be lost.
"""

import numpy as np

__all__ = ['BranchHold']


class BranchHold:
    """Online: keep the estimate on the branch it is on.

    ``choose`` gets the held particle (the previous estimate's, carried over without noise
    and always refined) and a candidate: the particle nearest the reference among those
    within tolerance (minimal motion; without it the lowest cost), else the lowest cost.
    'Near' = no joint differs by more than ``branch_jump`` (weighted metric); 'far' = another
    branch. The rule:

    - nothing satisfies the goal: a near candidate with a lower cost replaces the held
      particle, a far one never (out of reach every branch costs about the same, and a
      merely lower cost is no reason to swing the arm): the estimate's cost never grows
      while the goal is still;
    - the held particle satisfies the goal: it stays (it is the refined, precise one),
      unless a far candidate is nearer the reference (minimal motion);
    - only the candidate does: a near one replaces it; a far one (a branch switch) if it is
      nearer the reference than the held particle is, or once the held particle has made
      no progress for ``hold_patience`` iterations on a goal that has not moved for as
      long (its branch cannot reach the goal: a joint limit, a hard constraint, the
      workspace). A goal that keeps moving (teleoperation dragging it out of the held
      branch's reach) never makes the arm swing to another branch.

    While the goal is still, a near candidate outside tolerance must also not be farther
    from the target position: the commanded tool never moves away from a still target.
    """

    def __init__(self, settings):
        self.jump = float(settings.branch_jump)
        self.patience = int(settings.hold_patience)
        self.stall_tolerance = float(settings.stall_tolerance)
        self.reset()

    def reset(self):
        """Forget the held particle's progress (a reset, a far goal, a selected branch)."""
        self.cost, self.stall = np.inf, 0   # its best cost, iterations without progress

    # -- filter_step hooks
    def applies(self, step):
        """Return whether the hold chooses the estimate: online, with a held particle."""
        return step.online and step.held >= 0

    def choose(self, step):
        """Choose the estimate (``step.index``) and record a switch, a warning and whether
        the held branch reaches the goal only approximately."""
        model, held = step.model, step.held
        motion = step.policies.minimal_motion
        exact = model.precise(step.frames, self.EXACT_FRACTION, (step.pos_err, step.ori_err))
        self.cost, self.stall = self.progress(self.cost, self.stall, step.cost[held],
                                              exact[held])
        if motion is not None:
            jumps = motion.jump(step.particles, step.particles[held])
            if step.dist_ref is None:
                step.dist_ref = motion.distance(step.particles)
        else:
            jumps = np.max(np.abs(step.particles - step.particles[held]), axis=1)
        index, reason = self.pick(held, step.ok, step.cost, jumps, step.dist_ref, self.stall,
                                  model.goal_still, step.pos_err, model.recovering, exact)
        step.index = index
        if reason is not None:
            step.switch = dict(reason=reason, distance=float(jumps[index]),
                               previous=step.particles[held].copy())
            self.cost, self.stall = step.cost[index], 0
        step.warning = self.warning(self.stall, bool(step.ok[index]))
        step.approximate = self.approximate(self.stall, model.goal_still, bool(step.ok[index]),
                                            bool(exact[index]))
        # Every particle's jump from the estimate, while it stays the held one (the
        # solver's bookkeeping reads it instead of computing it again).
        step.jumps = jumps if (index == held and motion is not None) else None

    def pool(self, step, pool):
        """While the held branch is stuck outside tolerance, leave its weight out of the
        resampling draw (a search for another branch is not swamped by its copies)."""
        if step.online and self.stall > 0 and not step.ok[step.index]:
            pool[step.index] = 0.0

    # -- the rule

    def progress(self, held_cost, stall, cost, held_exact):
        """Return the updated (held_cost, stall) bookkeeping of the held particle: the
        iterations it has not lowered its cost by ``stall_tolerance`` while not exact."""
        if held_exact or cost < held_cost * (1.0 - self.stall_tolerance):
            return cost, 0
        return min(held_cost, cost), stall + 1

    def stalled(self, stall):
        return stall >= self.patience

    def approximate(self, stall, still, held_ok, held_exact):
        """Return whether the held particle is stuck within tolerance short of exact on a
        still goal (the solver then starts a search for an exact solution)."""
        return held_ok and not held_exact and self.stalled(stall) and still >= self.patience

    def warning(self, stall, held_ok):
        """Return whether the held branch is about to be lost: it does not satisfy the goal
        and has made no progress for half the patience (docs/smc.md)."""
        return (not held_ok) and stall >= max(1, self.patience // 2)

    NEAR_MARGIN = 0.05      # [rad] how much nearer a near candidate must be in a recovery
    EXACT_FRACTION = 0.1    # 'exact' = task errors within this share of the tolerance

    def pick(self, held, ok, cost, jumps, dist_ref, stall, still, position,
             recovering=False, exact=None):
        """Return (index, reason or None); a reason names a switch to a far branch.

        held: the held particle; ok, cost, jumps (weighted L-inf distance from the held
        particle [rad]), dist_ref (weighted distance from the reference, None without
        minimal motion), position (position errors [m]): (N,) arrays; stall: iterations the
        held particle has made no progress; still: iterations the goal has not changed;
        recovering: a recovery window (back within tolerance after a stretch out of it):
        a near particle nearer the reference by ``NEAR_MARGIN`` also replaces the held one;
        exact: (N,) task errors within ``EXACT_FRACTION`` of the tolerance. A held particle
        within tolerance but stuck short of exact (a local minimum against a joint limit)
        gives way, once the goal has been still for ``hold_patience`` iterations, to the
        exact solution nearest the reference.
        """
        near = jumps <= self.jump
        if (exact is not None and ok[held] and not exact[held] and exact.any()
                and self.stalled(stall) and still >= self.patience):
            pool = np.flatnonzero(exact)
            key = dist_ref[pool] if dist_ref is not None else cost[pool]
            cand = int(pool[key.argmin()])
            return cand, (None if near[cand]
                          else 'held branch reaches the goal only approximately')
        if exact is not None and exact[held]:
            ok = exact      # an exact held particle gives way to exact solutions only
        if ok.any():
            pool = np.flatnonzero(ok)
            key = dist_ref[pool] if dist_ref is not None else cost[pool]
            cand = int(pool[key.argmin()])
            nearer = dist_ref is not None and dist_ref[cand] < dist_ref[held] - 1e-9
            if cand == held:
                return held, None
            if ok[held]:
                if not near[cand] and nearer:
                    return cand, 'nearer solution'
                if (near[cand] and recovering and dist_ref is not None
                        and dist_ref[cand] < dist_ref[held] - self.NEAR_MARGIN):
                    return cand, None
                return held, None
            if near[cand]:
                return cand, None
            if nearer:
                return cand, 'nearer solution'
            if self.stalled(stall) and still >= self.patience:
                return cand, 'held branch cannot reach the goal'
        elif ok[held]:
            return held, None
        # The held branch does not satisfy the goal: descend on it (the best near particle
        # if it lowers the cost, and, the goal being still, is not farther from it).
        better = near & (cost < cost[held])
        if still > 0:
            better &= position <= position[held]
        if better.any():
            pool = np.flatnonzero(better)
            return int(pool[cost[pool].argmin()]), None
        return held, None
