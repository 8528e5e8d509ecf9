"""Restarts: re-seed particles when the best cost stalls (policy ``restart_after``).

'Stalled': the best cost has not dropped by ``stall_tolerance`` (a fraction) for
``restart_after`` iterations while the best task cost is above ``restart_min_cost``.
``restart_fraction`` of the particles (the lowest weights; never the estimate's particle
online, nor a recovery's shadow) are redrawn: uniformly inside the limits in ``solve``;
online half from the motion prior and half uniform, the first ``search_count`` of them a new
search window. Re-seeded particles enter with the population's mean weight (they have no
history); the others keep theirs.

Online, once ``online_restart_limit`` restarts on one still goal brought no estimate within
tolerance, the goal is out of reach: the filter rests (no more restarts) until the goal or a
constraint changes (``resting``).
"""

import numpy as np

from ..filter import NONE

__all__ = ['Restarts']


class Restarts:
    """The stall bookkeeping and the re-seeding of ``filter_step`` (module docstring)."""

    def __init__(self, settings):
        self.after = int(settings.restart_after)
        self.tolerance = float(settings.stall_tolerance)
        self.fraction = float(settings.restart_fraction)
        self.online = bool(settings.online_restarts)
        self.min_cost = float(settings.restart_min_cost)
        self.limit = int(settings.online_restart_limit)
        self.still = 0          # online restarts on the current goal and constraints
        self.paused = False     # resting: no bookkeeping, no restart (set by the solver)
        self.reset()

    def reset(self):
        """Forget the stall (a reset, a far goal, a restart)."""
        self.best_cost, self.stall = np.inf, 0

    def resting(self, within_tolerance):
        """Return whether the goal is out of reach: ``online_restart_limit`` restarts on it
        brought no estimate within tolerance."""
        return self.limit > 0 and self.still >= self.limit and not within_tolerance

    def progress(self, best_cost, stall, cost):
        """Return the updated (best_cost, stall) bookkeeping after an iteration."""
        if cost < best_cost * (1.0 - self.tolerance):
            return cost, 0
        return best_cost, stall + 1

    def due(self, stall, best_task, online):
        return (stall >= self.after and best_task > self.min_cost
                and (self.online or not online))

    def victims(self, logw, protect=()):
        """Return the indices to re-seed: the lowest weights, ``protect`` (indices >= 0: the
        estimate's particle, the shadow of a recovery) excluded."""
        n = len(logw)
        k = int(round(self.fraction * n))
        order = np.argsort(logw)
        protect = [p for p in protect if p >= 0]
        if protect:
            order = order[~np.isin(order, protect)]
            k = min(k, len(order))
        return order[:k]

    # -- filter_step hook
    def after_selection(self, step, rng):
        """Count the stall; re-seed when it is due (never during a search window)."""
        if self.paused:
            return
        self.best_cost, self.stall = self.progress(self.best_cost, self.stall,
                                                   float(step.cost.min()))
        if (not len(step.searchers)
                and self.due(self.stall, float(step.task.min()), step.online)):
            self.restart(step, rng)

    def restart(self, step, rng):
        """Re-seed the lowest-weight particles of the next population (module docstring)."""
        online, model = step.online, step.model
        chain = model.chain
        motion, search = step.policies.minimal_motion, step.policies.search
        recovery = step.policies.recovery
        shadow = recovery.shadow if recovery is not None else -1
        held = step.index
        victims = self.victims(step.next_logw, [held if online else -1, shadow])
        k = len(victims)
        self.reset()
        step.info['restarted'] = k
        if k and online and motion is not None:
            half = k // 2
            fresh = np.concatenate([motion.sample(half, rng),
                                    chain.random_configuration(rng, k - half)])
            if search is not None:
                c = min(search.count, k)
                fresh[:c] = search.draw(c, rng)
                search.start(victims[:c])
            if motion.has_turns:
                fresh = motion.map_turns(fresh, motion.turn_reference)
        elif k:
            fresh = chain.random_configuration(rng, k)
        if k:
            step.reseed(victims, fresh, step.next[held if held >= 0 else 0], rng,
                        lambda c: chain.random_configuration(rng, c))
            if not online:
                step.next_logw[:] = 0.0
        step.next_logw = step.next_logw - step.next_logw.max()
        if held in victims:
            step.index = -1
