"""Nearest search: find the nearest branch early, a multi-start search inside the filter
(policy ``search_count``, part of minimal motion).

For ``search_iterations`` iterations after a new goal (or an online restart),
``search_count`` particles are searchers: fresh draws (two thirds from the motion prior
around the reference, one third uniform inside the limits, for far branches) that take no
random step, keep their slots through resampling and are refined every iteration (LM with
the minimal-motion pull, so each lands on the point of its branch nearest the reference). A
searcher that reaches the goal becomes an ordinary particle; one that stops improving is
redrawn, so the window tries more starts than it has slots. The estimate then picks the
nearest particle within tolerance (``BranchHold`` rules). While a window brings a nearer
solution another follows (at most ``MAX_WINDOWS`` per goal), its motion-prior draws widened
to the distance of the best solution found (a nearer one lies within it).

``search_batch`` (0: off) bounds the work of one iteration: with more searchers than that,
each iteration refines one of ``ceil(count / batch)`` equal shares of them in turn (the
others wait, carried over as they are) and the window lasts that many times
``search_iterations`` iterations, so every searcher gets as many refinements as without the
bound (the node sets it: a new goal's search then fits its tick period).
"""

import numpy as np

from ..filter import NONE

__all__ = ['NearestSearch']


class NearestSearch:
    """The searchers of a window and the windows of a goal (see the module docstring)."""

    MAX_WINDOWS = 6         # windows per goal while they find nearer solutions or it is far
    FAR = 0.6               # [rad per sqrt(joint)] 'far' best solution: sqrt(nv) * FAR

    def __init__(self, settings, motion, chain):
        self.count = int(settings.search_count)
        self.iterations = int(settings.search_iterations)
        self.batch_size = int(settings.search_batch)
        self.motion, self.chain = motion, chain
        self.reset()

    def reset(self):
        """Forget the window and the goal's windows (a reset or a new goal)."""
        self.searchers, self.left = NONE, 0     # the window's particles, iterations left
        self.spread = 1.0       # the prior widened to the best solution found (per window)
        self.windows, self.searching, self.window_start = 0, False, np.inf
        self.searched_exact = False

    def new_goal(self, far):
        """A goal arrived: look for an exact solution again; a ``far`` one (moved beyond
        ``goal_change_threshold``) also starts the count of windows afresh."""
        self.searched_exact = False
        if far:
            self.windows, self.searching = 0, False

    # -- the window
    def shares(self, count):
        """Return how many iterations it takes to refine ``count`` searchers once."""
        if self.batch_size <= 0 or count <= self.batch_size:
            return 1
        return -(-int(count) // self.batch_size)

    def window(self, count):
        """Return the length [iterations] of a search window of ``count`` searchers."""
        return self.iterations * self.shares(count)

    def start(self, slots):
        """Make the particles at ``slots`` the searchers of a new window."""
        self.searchers = np.sort(np.asarray(slots)).astype(int)
        self.left = self.window(len(self.searchers)) if len(self.searchers) else 0

    def active(self):
        """Return the searchers of the window in progress (none once it ended)."""
        return self.searchers if self.left > 0 else NONE

    def batch(self):
        """Return the searchers refined this iteration: all, or one share in turn."""
        searchers = self.active()
        shares = self.shares(len(searchers))
        if shares == 1:
            return searchers
        return np.array_split(searchers, shares)[int(self.left) % shares]

    def draw(self, count, rng, starts=(), spread=1.0, turn_reference=None):
        """Return (count, nq) fresh searcher configurations: ``starts`` (configurations to
        start from as they are, e.g. the reference itself), then a third uniform and the
        rest from the motion prior widened by ``spread``; whole turns mapped towards
        ``turn_reference`` (default the motion's)."""
        chain, motion = self.chain, self.motion
        if turn_reference is None:
            turn_reference = motion.turn_reference
        starts = np.asarray(starts, dtype=float).reshape(-1, chain.nq)[:count]
        rest = count - len(starts)
        uniform = rest // 3
        fresh = np.concatenate([starts, chain.random_configuration(rng, uniform),
                                motion.sample(rest - uniform, rng, spread)])
        if motion.has_turns:
            fresh = motion.map_turns(fresh, turn_reference)
        return fresh

    # -- filter_step hook
    def after_selection(self, step, rng):
        """Count the window down; searchers that reached the goal stay as ordinary
        particles (new slots are drawn for them), those that stopped improving are redrawn
        in place."""
        searchers, index = step.searchers, step.index
        self.left = max(self.left - 1, 0)
        if not (len(searchers) and self.left > 0):
            self.searchers = NONE
            return
        found = np.union1d(searchers[step.ok[searchers]], [index])  # the estimate's stays
        redraw = np.setdiff1d(np.intersect1d(searchers, step.stuck), found)
        keep_on = np.setdiff1d(searchers, np.union1d(found, redraw))
        spare = np.setdiff1d(np.arange(step.n), np.union1d(step.pinned, redraw))
        released = len(np.intersect1d(found, searchers))
        extra = rng.choice(spare, size=min(released, len(spare)), replace=False) \
            if released and len(spare) else NONE
        fresh_slots = np.concatenate([redraw, extra]).astype(int)
        if len(fresh_slots):
            fresh = self.draw(len(fresh_slots), rng, spread=self.spread)
            step.reseed(fresh_slots, fresh, step.next[index], rng,
                        lambda c: self.draw(c, rng, spread=self.spread))
        self.searchers = np.sort(np.concatenate([keep_on, fresh_slots])).astype(int)

    # -- the solver's hook, after each online iteration
    def after_step(self, solver, info):
        """Start another window when the last one found a nearer solution or the best is
        far, or look again when the held branch was left for the first branch found, or
        once per goal when the estimate is stuck short of exact. Returns True when a new
        window started."""
        nv = self.chain.nv
        if (self.searching and self.left == 0 and solver.within_tolerance
                and solver.goal_still >= self.iterations and self.windows < self.MAX_WINDOWS):
            found = solver.found_distance(info)
            if found < 0.98 * self.window_start or found > self.FAR * np.sqrt(nv):
                # The last window found a nearer solution, or the best is far (many
                # branches lie within it): another window.
                spread = max(1.0, found / (self.motion.sigma * np.sqrt(nv)))
                solver.reseed(starts=[self.motion.reference], spread=spread)
                return True
        switch = info['switch']
        if switch is not None and switch['reason'] != 'nearer solution':
            # The held branch could not (exactly) reach the goal and the estimate jumped to
            # the first branch found that does: keep looking for a nearer one.
            solver.reseed(starts=[self.motion.reference])
            return True
        if info['approximate'] and not self.searched_exact and self.left == 0:
            # Within tolerance but stuck short of exact (a local minimum against a joint
            # limit): look once per goal for an exact solution (BranchHold takes the nearest).
            self.searched_exact = True
            solver.reseed()
            return True
        return False
