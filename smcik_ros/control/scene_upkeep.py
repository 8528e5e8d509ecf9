"""What the collision scene needs at each control tick, without ROS.

``SceneUpkeep.before_tick()`` swaps in what the guard computed in the background (an SRDF's
pairs, fine or finer covers: ``CollisionGuard.poll``), hands the loop the new constraints and
cancels a detour planned on the old model, and brings the planted contacts' surfaces up to
date (``surfaces.PlantedSurfaces``). ``after_command(q)``, after each published command, notes
once (at the first command, and again once fine covers replace coarse ones) the pairs the
robot rests in contact with, and starts the finer covers of their links
(``CollisionGuard.start_contact_refinement``), then the fine covers of the links still coarse
(swept over off-chain joints: ``CollisionGuard.start_fine_covers``). Both return (level,
text) log lines.
"""

from .surfaces import PlantedSurfaces

__all__ = ['SceneUpkeep']


class SceneUpkeep:
    """guard (CollisionGuard), loop (ControlLoop), constraints (callable -> the solver's
    constraint list), padding [m] (the collision padding), report (the node's rate-limited
    reporter, for a failed check)."""

    def __init__(self, guard, loop, constraints, padding, report):
        self.guard, self.loop, self.constraints, self.report = guard, loop, constraints, report
        self.surfaces = PlantedSurfaces(padding=padding)
        self.noted = False      # the contact note: None = due again once the fine pairs are in

    def before_tick(self):
        """Apply background updates and the surfaces' exemptions; return log lines."""
        lines = []
        chain_coarse = bool(self.guard.model.coarse_chain_links)
        coarse = self.guard.model.coarse
        # A new constraint waits for the solver's running step (the loop hands it over
        # between steps): applied at a tick that finds the step done, never waited for.
        event = self.guard.poll() if self.loop.solver_idle else None
        if event is not None:
            level, text, changed = event
            if changed:
                self.loop.set_constraints(self.constraints())
                self.loop.cancel_detour('the collision model changed')
            lines.append((level, text))
            model = self.guard.model
            if chain_coarse and not model.coarse_chain_links:    # the chain's fine covers: now
                self.noted = False
            elif coarse and not model.coarse:      # the last ones: once their pairs are in
                self.noted = None
            elif changed and self.noted is None:
                self.noted = False
        lines += [('info', line) for line in self.surfaces.update(
            self.guard.scene, self.guard.model, self.constraints(), lambda: self.loop.state)]
        return lines

    def after_command(self, q):
        """After a published command at q (nq,): the contact note when it is due and no
        background update is on its way (the pairs of the chain's fine covers, computed
        after them, may disable a pair in contact: no refinement for it); then the next fine
        covers of a model that still has coarse ones (after the refinement)."""
        if self.noted is not False or self.guard.updating:
            return []
        self.noted = True
        guard = self.guard
        try:
            if guard.model.coarse_chain_links:
                count = len(guard.constraint.contacts(q))
                note = (f'with the coarse covers the robot rests in contact in {count} '
                        'pair(s) at its first command: none may get deeper until the fine '
                        'covers are in') if count else None
            else:
                # Then the swept links' fine covers (a head, fingers), if coarse.
                note = guard.contact_note(q, guard.start_contact_refinement(q))
        except Exception as exc:      # never in the way of the command stream
            self.report('warn', 'contact_note', f'contact check failed ({exc})', exc)
            return []
        return [] if note is None else [('warn', note)]

