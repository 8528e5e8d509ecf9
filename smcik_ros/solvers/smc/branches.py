"""The distinct solution branches the filter holds: ``SmcSolver.alternatives()``.

A particle filter carries several IK hypotheses across time; this lists them as branches
(docs/node.md, "Alternatives"): the estimate's, the leaders of the particles grouped by
``branch_jump``, and an archive of distinct configurations that satisfied the current goal
since it arrived (the nearest search finds several, and resampling would forget them).
"""

import numpy as np

from ...errors import ParameterError
from ...goals import task_errors
from ..base import Alternative, StateKey
from .policies import MinimalMotion, Refinement

__all__ = ['Branches']


class Branches:
    """The branch archive and the last computed list of one ``SmcSolver``."""

    ARCHIVE_SIZE = 8

    def __init__(self, solver):
        self.solver = solver
        self.archive = []
        self.records = []       # the last list computed
        self._key = None        # what it was computed from

    def clear(self):
        """Forget the archive (a new goal)."""
        self.archive = []

    def list(self, max_count=5):
        """Return up to ``max_count`` distinct solution branches, best first.

        Candidates: the estimate's particle; the particles of the last step grouped
        greedily, lowest cost first (a particle joins the first group whose leader is within
        ``branch_jump``, largest weighted joint difference with whole turns mapped), each
        represented by its leader; and the archive. Each candidate is refined on a copy
        (``refine_steps`` LM steps towards the goal, sliding towards the current estimate;
        the filter is not changed); candidates that end on the same branch are merged.
        ``mass``: the share of the posterior weight of the particles nearest each branch
        (within ``branch_jump``). Order: branches within the solution tolerance first,
        nearest the estimate first; then the others by cost. The estimate's branch is always
        listed (``held=True``). Returns ``Alternative`` records (empty before the first step).
        """
        max_count = int(max_count)
        if max_count < 1:
            raise ParameterError(f'max_count must be >= 1; got {max_count}')
        solver = self.solver
        info = getattr(solver, '_last_step', None)
        if info is None or solver._targets is None:
            return []
        # Nothing they depend on changed since the last call (the arm rests on a settled
        # goal, its steps skipped): the same list, without the refinement (~10 ms). While the
        # filter stays settled on one estimate its rest steps do not count as a change: the
        # branches were refined from that estimate to that goal already (the masses stay
        # those of the step that settled it).
        settled = solver.settled
        key = StateKey((None if settled else info, solver._targets, solver.policies,
                        solver.settings),
                       (max_count, len(self.archive), solver._estimate.tobytes(), settled),
                       solver.constraints)
        if key == self._key:
            return list(self.records)
        self.records, self._key = self._compute(info, max_count), key
        return list(self.records)

    def _candidates(self, info, motion):
        """Return (the particles with whole turns mapped, the candidates (R, nq))."""
        s, estimate = self.solver.settings, self.solver._estimate
        particles, cost = info['particles'], info['cost']
        mapped = motion.map_turns(particles, estimate) if motion.has_turns else particles
        held = int(info['index'])
        order = np.argsort(cost, kind='stable')
        label = np.full(len(particles), -1)
        leaders = []
        for i in order:
            if label[i] >= 0:
                continue
            free = np.flatnonzero(label < 0)
            near = motion.jump(mapped[free], mapped[i]) <= s.branch_jump
            label[free[near]] = len(leaders)
            leaders.append(i)
        others = [mapped[i] for i in leaders if label[i] != label[held]]
        archive = [motion.map_turns(q[None], estimate)[0] if motion.has_turns else q
                   for q in self.archive]
        return mapped, np.array([mapped[held]] + others + archive)

    def _compute(self, info, max_count):
        solver = self.solver
        s, chain, estimate = solver.settings, solver.chain, solver._estimate
        policies = solver.policies
        motion = policies.minimal_motion or MinimalMotion(
            chain, s.replace(minimal_motion=True), solver._scalar_noise, solver._ball_noise)
        mapped, q = self._candidates(info, motion)
        model = solver._model(solver._targets)
        model.temperature = 1.0
        frames = chain.frames(q)
        rep_cost = model.cost(frames)
        refine = policies.refinement or Refinement(chain, s.replace(refine_count=1))
        motion.reference = estimate
        frames, rep_cost, _, _ = refine.refine(model, frames, rep_cost, motion)
        reps = frames.q
        ok = model.within_tolerance(frames)
        # Merge candidates that ended on one branch (the estimate's first, then by cost).
        keep = [0]
        for i in sorted(range(1, len(reps)), key=lambda i: (not ok[i], rep_cost[i])):
            if np.all(motion.jump(reps[keep], reps[i]) > s.branch_jump):
                keep.append(i)
        keep = np.array(keep)
        reps, rep_cost, ok = reps[keep], rep_cost[keep], ok[keep]
        pos, ori = task_errors(solver._targets, chain.frames(reps))
        dist = motion.distance(reps, estimate)
        # Posterior mass: each particle counts for the nearest branch within branch_jump.
        jumps = np.stack([motion.jump(mapped, r) for r in reps], axis=1)     # (N, R)
        owner = np.where(np.min(jumps, axis=1) <= s.branch_jump, np.argmin(jumps, axis=1), -1)
        weights = info['weights']
        records = [Alternative(q=reps[i].copy(), cost=float(rep_cost[i]),
                               position_error=float(pos[i]), orientation_error=float(ori[i]),
                               distance=float(dist[i]),
                               mass=float(np.sum(weights[owner == i])),
                               within_tolerance=bool(ok[i]), held=bool(i == 0))
                   for i in range(len(reps))]
        records.sort(key=lambda r: (not r.within_tolerance,
                                    r.distance if r.within_tolerance else r.cost))
        if max_count < len(records):
            held_record = next(r for r in records if r.held)
            records = records[:max_count]
            if not any(r.held for r in records):
                records[-1] = held_record
        return records

    def observe(self, info):
        """Remember distinct configurations that satisfy the current goal (cleared when a
        new goal arrives)."""
        ok = info['ok']
        if not ok.any():
            return
        motion = self.solver.policies.minimal_motion
        if motion is None:
            return
        jump = self.solver.settings.branch_jump
        # Most are on the estimate's branch: drop those in one vectorised test.
        if info['jumps'] is not None:
            idx = np.flatnonzero(ok & (info['jumps'] > jump))
        else:
            idx = np.flatnonzero(ok)
            idx = idx[motion.jump(info['particles'][idx], info['q']) > jump]
        if not len(idx):
            return
        idx = idx[np.argsort(info['cost'][idx])][:16]
        archive = self.archive
        known = [info['q']] + archive
        for i in idx:
            q = info['particles'][i]
            if np.all(motion.jump(np.array(known), q) > jump):
                known.append(q.copy())
                archive.append(q.copy())
        del archive[:max(0, len(archive) - self.ARCHIVE_SIZE)]
