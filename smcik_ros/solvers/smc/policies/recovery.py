"""Recovery: come back on the branch the estimate left (policy ``recovery_iterations``).

Out of reach (a target beyond the workspace) or through a singularity, the estimate can
leave its branch; when it is back within tolerance the filter looks for the branch it left:
for ``recovery_iterations`` iterations the motion's reference is the branch memory (an
exponential average of the estimates that satisfied their goal, ``remember``), a search
window starts there (from the memory and the last estimate that satisfied its goal), and,
when the estimate came back away from the memory, that last estimate is kept as a shadow
particle (no random walk, always refined, never resampled away): the left branch's
hypothesis. Whichever satisfies the goal nearest the memory becomes the estimate
(``BranchHold``). Needs the nearest search; ``recovery_iterations: 0`` switches it off.
"""

import numpy as np

__all__ = ['Recovery']


class Recovery:
    """The branch memory, the recovery window and its shadow particle (module docstring)."""

    RATE = 0.05     # the memory's time constant: 1 / RATE iterations

    def __init__(self, settings, motion, search):
        self.iterations = int(settings.recovery_iterations)
        self.jump = float(settings.branch_jump)
        self.motion, self.search = motion, search
        self.memory = None
        self.end()

    def reset(self, q):
        """Start over at ``q`` (a reset or a selected branch): it is the memory."""
        self.memory = q.copy()
        self.left_tolerance = False     # the estimate satisfied this goal stream, then left
        self.end()

    def end(self):
        self.left = 0           # iterations the recovery lasts
        self.window = 0         # iterations its search window lasts
        self.shadow = -1        # the shadow particle (-1: none)
        self.shadow_on = False

    @property
    def recovering(self):
        """True while the recovery's search window runs."""
        return self.window > 0

    def remember(self, estimate, interpolate):
        """Move the memory towards an estimate that satisfies its goal."""
        self.memory = interpolate(self.memory, estimate, self.RATE)

    # -- filter_step hook
    def estimated(self, step):
        """Back on the branch it left: the shadow is the estimate now."""
        if step.index == self.shadow:
            self.shadow = -1

    # -- the solver's hook, after each online iteration
    def after_step(self, solver, was_ok, ok, q):
        """Count the recovery down; start one when the estimate ``q`` is back within
        tolerance after it left it. Returns True when one started."""
        self.left = max(self.left - 1, 0)
        self.window = max(self.window - 1, 0)
        if self.left == 0 or (self.shadow_on and self.shadow < 0):
            self.end()
        if was_ok and not ok:
            self.left_tolerance = True
        if not was_ok and ok and self.left_tolerance:
            self.left_tolerance = False
            self.start(solver, q)
            return True
        return False

    def start(self, solver, q):
        """Look for the left branch from the memory (module docstring)."""
        solver.reference = self.memory.copy()
        self.window = self.search.window(self.search.count)
        solver.reseed(starts=[self.memory, solver.anchor])
        state = solver.state
        self.left = self.window         # no shadow: the search window only
        if self.shadow < 0 and self.motion.jump(q[None], self.memory)[0] > self.jump:
            order = np.argsort(state.logw, kind='stable')
            free = order[~np.isin(order, np.r_[state.estimate, self.search.searchers])]
            if len(free):
                self.shadow = int(free[0])
                state.particles[self.shadow] = solver.anchor
                state.logw[self.shadow] = np.max(state.logw)
                self.shadow_on = True
                self.left = max(self.iterations, self.window)
