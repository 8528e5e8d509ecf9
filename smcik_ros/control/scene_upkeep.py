"""What the collision scene needs at each control tick, without ROS.

``SceneUpkeep.before_tick()`` swaps in what the guard computed in the background (an SRDF's
pairs, fine or finer covers: ``CollisionGuard.poll``), hands the loop the new constraints and
cancels a detour planned on the old model, and brings the planted contacts' surfaces up to
date (``surfaces.PlantedSurfaces``). ``after_command(q)``, after each published command, notes
once (at the first command, and again once fine covers replace coarse ones) the pairs the
robot rests in contact with, and starts the finer covers of their links
(``CollisionGuard.start_contact_refinement``), then the fine covers of the links still coarse
(swept over off-chain joints: ``CollisionGuard.start_fine_covers``); later, while a goal is
blocked, the finer covers of the links near another part at the command
(``_refine_blocked``). Both return (level, text) log lines.
"""

import numpy as np

from ..collision.constraint import CONTACT_RELEASE
from .cover_updates import finer_steps
from .surfaces import PlantedSurfaces

__all__ = ['SceneUpkeep']

# [ticks] a goal not reached is blocked when a validator refused a motion within this many
# ticks or the command has not changed for as many; the pairs near the command are looked
# at no more often than that.
BLOCKED_TICKS = 50


class SceneUpkeep:
    """guard (CollisionGuard), loop (ControlLoop), constraints (callable -> the solver's
    constraint list), padding [m] (the collision padding), report (the node's rate-limited
    reporter, for a failed check)."""

    def __init__(self, guard, loop, constraints, padding, report):
        self.guard, self.loop, self.constraints, self.report = guard, loop, constraints, report
        self.surfaces = PlantedSurfaces(padding=padding)
        self.noted = False      # the contact note: None = due again once the fine pairs are in
        self.commanded = False  # the note of the first command (with fine chain covers) given
        self.refined = set()    # the links refined (or tried) where a goal was blocked
        self._next_look = 0     # the tick from which a blocked goal's pairs are looked at
        self._still = 0         # ticks the command has not changed (its velocity 0)

    def before_tick(self):
        """Apply background updates and the surfaces' exemptions; return log lines."""
        lines = []
        chain_coarse = bool(self.guard.model.coarse_chain_links)
        coarse = self.guard.model.coarse
        # A new constraint waits for the solver's running step (the loop hands it over
        # between steps): applied at a tick that finds the step done, never waited for.
        # Meanwhile the worker starts no step nor side work (``solver_held``): with side
        # work queued behind every step, talos's worker was busy at 986 of 988 ticks and
        # the finer covers that a blocked goal waited for came 14 s late.
        idle = self.loop.solver_idle
        self.loop.solver_held = self.guard.updates.waiting and not idle
        event = self.guard.poll() if idle else None
        if event is not None:
            level, text, changed = event
            if changed:
                self.loop.set_constraints(self.constraints())
                self.loop.replan_detour('the collision model changed')
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
        covers of a model that still has coarse ones (after the refinement). Once noted,
        while a goal is blocked: the finer covers of the links near another there
        (``_refine_blocked``), also while other updates are computed (queued behind them:
        H2_Plus's swept fingers took 12 s, and two goals held at the margin got nothing),
        not while a refinement is or a result waits."""
        updates = self.guard.updates
        if self.noted is True and not (updates.waiting or updates.busy('smcik-contact-covers')):
            return self._refine_blocked(q)
        if self.guard.updating or self.noted is not False:
            return []
        self.noted = True
        guard = self.guard
        try:
            if guard.model.coarse_chain_links:
                count = len(guard.constraint.contacts(q))
                note = ('warn', f'with the coarse covers the robot rests in contact in '
                        f'{count} pair(s) at its first command: none may get deeper until '
                        'the fine covers are in') if count else None
            else:
                # Then the swept links' fine covers (a head, fingers), if coarse.
                note = guard.contact_note(q, guard.start_contact_refinement(q), (
                    'with the fine covers in' if self.commanded else 'at its first command'))
                self.commanded = True
        except Exception as exc:      # never in the way of the command stream
            self.report('warn', 'contact_note', f'contact check failed ({exc})', exc)
            return []
        return [] if note is None else [note]

    def _refine_blocked(self, q):
        """While the loop's goal is blocked (a validator refused a motion, or the solver
        held the command still, for ``BLOCKED_TICKS``), compute again at the contact
        tolerances the covers of the links within ``CONTACT_RELEASE`` of another at the
        command q, once per link (``CollisionGuard.start_contact_refinement``: swapped in
        only where they part or widen a pair; the finer step only while that goal is still
        not reached). Covers exceed the meshes by up to their
        tolerance: an arm held where only they touch had no way on, and its detour none
        either (its start is inside the margin; a push out cannot widen a pair of covers
        that always nearly touch)."""
        loop = self.loop
        self._still = 0 if loop.v is None or np.any(loop.v) else self._still + 1
        if (loop.goal is None or loop.goal_reached or loop.ticks < self._next_look
                or (self._still < BLOCKED_TICKS
                    and loop.refusal(within=BLOCKED_TICKS) is None)):
            return []
        self._next_look = loop.ticks + BLOCKED_TICKS
        sequence = loop.goal.sequence

        def wanted():       # the next, finer step: only while this goal is still not reached
            return (loop.goal is not None and loop.goal.sequence == sequence
                    and not loop.goal_done)
        try:
            names = self.guard.start_contact_refinement(q, first=False, skip=self.refined,
                                                        wanted=wanted)
        except Exception as exc:      # never in the way of the command stream
            self.report('warn', 'blocked_refinement', f'blocked-goal cover check failed '
                        f'({exc})', exc)
            return []
        if not names:
            return []
        self.refined.update(names)
        steps = ' then '.join(f'{t:g}' for t in finer_steps(
            self.guard.settings, self.guard.refined_at, names))
        return [('info', f'goal {loop.goal.sequence} is blocked with {", ".join(names)} '
                 f'within {1e3 * CONTACT_RELEASE:g} mm of another part (padded cover '
                 f'distances): their covers are being computed again at tolerance {steps} m '
                 '(collision_contact_tolerance; applied when ready, where they part or widen '
                 'a pair) to take away what is only an overlap of the covers')]
