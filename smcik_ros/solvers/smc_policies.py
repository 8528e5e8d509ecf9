"""The named policies that ``filter_step`` (solvers/smc.py) adds to the paper's Algorithm 1.

Each policy is a small object built from ``SmcSettings`` and switched off by its setting;
``filter_step`` receives them in a ``Policies`` record (``None`` = off):

- ``MinimalMotion`` (``minimal_motion``): the random walk of eq. 12 made explicit as a motion
  prior ``N(x_ref, Sigma_motion)`` around a reference configuration (the current estimate
  online, ``q_seed`` in ``solve``): a factor of the weights, the proposal of re-seeded
  particles, the null-space pull of the refinement, the choice of the nearest particle
  within tolerance as the estimate, and whole-turn (2 pi) mapping.
- ``Refinement`` (``refine_count > 0``): a Levenberg-Marquardt move step of a few particles
  on the negative log-likelihood, with the minimal-motion pull in the task's null space.
- ``Restarts`` (``restart_after > 0``): re-seed particles when the best cost stalls.
- ``BranchHold`` (``branch_hold``): online, keep the estimate on the branch it is on; move
  to a far particle only when it satisfies the goal and the held branch cannot.

All work is vectorised over particles; loops run over refinement steps and joints only.
"""

import copy
from dataclasses import dataclass

import numpy as np

from .. import kernels as _kernels
from ..goals import PoseTarget
from ..rotations import quat_relative_rotvecs, quat_times_exp
from .base import stack_terms

__all__ = ['Policies', 'MinimalMotion', 'NearestSearch', 'Refinement', 'Restarts',
           'BranchHold', 'sample_qutem']

TWO_PI = 2.0 * np.pi


@dataclass(frozen=True)
class Policies:
    """The policies passed to ``filter_step``; ``None`` switches one off."""

    minimal_motion: object = None
    search: object = None           # NearestSearch (part of minimal motion)
    refinement: object = None
    restarts: object = None
    branch_hold: object = None
    keep_held: bool = True          # elitism: the estimate's particle takes no random step


# ---------------------------------------------------------------------------- minimal motion
class MinimalMotion:
    """The motion prior ``N(x_ref, Sigma_motion)`` and what follows from it.

    Metric: the tangent difference ``d(q) = x_ref - q`` per joint (wrapped into (-pi, pi]
    for continuous joints; ``Log(q^-1 x_ref)`` for ball joints) weighted by
    ``w_j = joint_noise / sigma_j``, the random walk's own per-joint noise relative to the
    revolute one (eq. 12's Sigma_x): 1 for every revolute joint at the defaults,
    ``joint_noise / prismatic_noise`` = 5 rad/m for prismatic joints. The distance is
    ``|w * d|_2`` [rad]; the prior's log-density is ``-(distance / motion_sigma)^2`` (no
    factor 1/2, like the likelihood of eq. 13).
    """

    def __init__(self, chain, settings, scalar_noise, ball_noise):
        self.chain = chain
        self.sigma = float(settings.motion_sigma)
        self.spring = 1.0 / (self.sigma * self.sigma)     # weight of d^2 in -log prior
        self.gain = float(settings.nullspace_gain)
        self.reseed_fraction = float(settings.reseed_fraction)
        self.max_redraws = int(settings.max_redraws)
        w = np.ones(chain.nv)
        sq, sv = chain.scalar_q, chain.scalar_v
        w[sv] = settings.joint_noise / np.asarray(scalar_noise, dtype=float)
        if chain.has_ball_joints:
            w[chain.ball_v_index] = settings.joint_noise / np.asarray(ball_noise, dtype=float)
        self.weights = w
        scalar_types = [t for t in chain.joint_types if t != 'ball']
        continuous = np.array([t == 'continuous' for t in scalar_types], dtype=bool)
        revolute = np.array([t in ('revolute', 'continuous') for t in scalar_types], dtype=bool)
        span = chain.upper[sq] - chain.lower[sq]
        self._continuous = continuous
        # Joints that can take a whole turn inside their limits: mapped towards the reference.
        self._turn_cols = sq[revolute & (span > TWO_PI + 1e-9)]
        self._turn_limits = [(int(c), float(chain.lower[c]), float(chain.upper[c]))
                             for c in self._turn_cols]
        self._continuous_any = bool(continuous.any())
        # Only 1-DOF joints, q and tangent indices equal (URDF arms): differences are ref - q.
        self._plain = (not chain.has_ball_joints and chain.nq == chain.nv
                       and np.array_equal(sq, np.arange(chain.nq))
                       and np.array_equal(chain.scalar_v, np.arange(chain.nv)))
        # The compiled distance and jump: one pass per row, without the difference array
        # (a plain arm's numpy form is still a handful of calls, 5-14 us for 100 rows).
        # (The layout only: the weights are read at each call.)
        self._k_motion = None if not _kernels.ENABLED else chain.records.joints
        self.reference = None
        self.turn_reference = None
        self.weighted = True        # the prior is a factor of the weights
        self.pulling = self.gain > 0.0   # the refinement pulls towards the reference

    def selection_only(self):
        """Return a copy that only chooses and maps (no weight factor, no pull): what
        ``solve`` uses, so its global search is the same as without minimal motion."""
        other = copy.copy(self)
        other.weighted = other.pulling = False
        return other

    @property
    def has_turns(self):
        """True when some joint's range exceeds 2 pi (whole turns are possible)."""
        return len(self._turn_cols) > 0

    def difference(self, q, ref=None):
        """Return (N, nv) tangent steps from configurations q (N, nq) to ``ref`` (nq,)."""
        chain = self.chain
        ref = self.reference if ref is None else ref
        q = np.atleast_2d(q)
        if self._plain:
            d = ref - q
            if self._continuous_any:
                c = self._continuous
                d[:, c] = (d[:, c] + np.pi) % TWO_PI - np.pi
            return d
        out = np.empty((len(q), chain.nv))
        sq, sv = chain.scalar_q, chain.scalar_v
        d = ref[sq] - q[:, sq]
        if self._continuous_any:
            c = self._continuous
            d[:, c] = (d[:, c] + np.pi) % TWO_PI - np.pi
        out[:, sv] = d
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            out[:, chain.ball_v_index] = quat_relative_rotvecs(q[:, bq], ref[bq])
        return out

    def distance(self, q, ref=None):
        """Return the (N,) weighted joint distances [rad] of q (N, nq) from ``ref``."""
        if self._k_motion is not None:
            return self._compiled(q, ref)[0]
        d = self.difference(q, ref) * self.weights
        return np.sqrt(np.einsum('nk,nk->n', d, d))

    def jump(self, q, other):
        """Return the (N,) largest weighted joint differences [rad] between q and ``other``."""
        if self._k_motion is not None:
            return self._compiled(q, other)[1]
        return np.max(np.abs(self.difference(q, other) * self.weights), axis=1)

    def _compiled(self, q, ref):
        """``kernels.motion_distances`` of q against ``ref`` (None: the reference)."""
        nq = self.chain.nq
        ref = self.reference if ref is None else ref
        weights = np.ascontiguousarray(self.weights, dtype=float)
        return _kernels.motion_distances(self._k_motion, _kernels.as_rows(q, nq),
                                         _kernels.as_rows(ref, nq)[0], weights)

    def log_prior(self, q=None, distance=None):
        """Return the (N,) log prior ``-(distance / motion_sigma)^2`` of configurations q
        (or of their ``distance`` from the reference, when already known)."""
        d = self.distance(q) if distance is None else distance
        return -(d * d) / (self.sigma * self.sigma)

    def map_turns(self, q, ref):
        """Return q (N, nq) with whole turns of the joints whose range exceeds 2 pi moved
        towards ``ref`` (nq,), staying inside the limits (same poses, shortest travel)."""
        cols = self._turn_cols
        if not len(cols):
            return q
        if len(q) == 1:
            # One row (solve()'s answer): the same arithmetic on Python floats, without ten
            # numpy calls on arrays of a few entries (~20 us -> ~3 us).
            row, target = q[0].tolist(), ref.tolist()
            for c, lo, hi in self._turn_limits:
                v = row[c]
                v = v + TWO_PI * round((target[c] - v) / TWO_PI)
                if v > hi:
                    v -= TWO_PI
                if v < lo:
                    v += TWO_PI
                row[c] = v
            return np.array([row])
        lower, upper = self.chain.lower[cols], self.chain.upper[cols]
        v = q[:, cols]
        v = v + TWO_PI * np.round((ref[cols] - v) / TWO_PI)
        v = np.where(v > upper, v - TWO_PI, v)
        v = np.where(v < lower, v + TWO_PI, v)
        out = q.copy()
        out[:, cols] = v
        return out

    def sample(self, count, rng, spread=1.0):
        """Return (count, nq) draws of the motion prior around the reference, in limits.

        1-DOF joints: Gaussian with std ``spread * motion_sigma / w_j``, redrawn at most
        ``max_redraws`` times when outside the limits, then clipped; ball joints: QuTem.
        """
        chain = self.chain
        ref = self.reference
        out = np.tile(ref, (count, 1))
        sq, sv = chain.scalar_q, chain.scalar_v
        sigma = self.sigma * spread
        if len(sq):
            std = sigma / self.weights[sv]
            lower, upper = chain.lower[sq], chain.upper[sq]
            cand = ref[sq] + rng.standard_normal((count, len(sq))) * std
            for _ in range(self.max_redraws):
                bad = (cand < lower) | (cand > upper)
                if not bad.any():
                    break
                rows, cols = np.nonzero(bad)
                cand[rows, cols] = ref[sq][cols] + rng.standard_normal(len(rows)) * std[cols]
            out[:, sq] = cand
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            std = sigma / self.weights[chain.ball_v_index]
            out[:, bq] = sample_qutem(np.broadcast_to(ref[bq], (count,) + bq.shape),
                                      np.broadcast_to(std, (count,) + std.shape), rng)
        return chain.clip(out)

    def nearest(self, q, mask):
        """Return the index of the particle nearest the reference among ``mask`` (N,) bool."""
        idx = np.flatnonzero(mask)
        return int(idx[np.argmin(self.distance(q[idx]))])


# ---------------------------------------------------------------------------- nearest search
class NearestSearch:
    """Find the nearest branch early: a multi-start search inside the filter.

    For ``search_iterations`` iterations after a new goal (or an online restart),
    ``search_count`` particles are searchers: fresh draws (two thirds from the motion
    prior around the reference, one third uniform inside the limits, for far branches)
    that take no random step and are refined every iteration (LM with the minimal-motion
    pull, so each lands on the point of its branch nearest the reference). A searcher that
    reaches the goal becomes an ordinary particle; one that stops improving is redrawn, so
    the window tries more starts than it has slots. The estimate then picks the nearest
    particle within tolerance (``BranchHold`` rules). While a window brings a nearer
    solution another follows (at most ``MAX_WINDOWS`` per goal), its motion-prior draws
    widened to the distance of the best solution found (a nearer one lies within it).
    Part of minimal motion.

    ``search_batch`` (0: off) bounds the work of one iteration: with more searchers than
    that, each iteration refines one of ``ceil(count / batch)`` equal shares of them in
    turn (the others wait, carried over as they are) and the window lasts that many times
    ``search_iterations`` iterations, so every searcher gets as many refinements as without
    the bound (the node sets it: a new goal's search then fits its tick period).
    """

    MAX_WINDOWS = 6         # windows per goal while they find nearer solutions or it is far
    FAR = 0.6               # [rad per sqrt(joint)] 'far' best solution: sqrt(nv) * FAR

    def __init__(self, settings):
        self.count = int(settings.search_count)
        self.iterations = int(settings.search_iterations)
        self.batch_size = int(settings.search_batch)
        self.spread = 1.0   # set per window by the solver: the prior widened to the best found

    def shares(self, count):
        """Return how many iterations it takes to refine ``count`` searchers once."""
        if self.batch_size <= 0 or count <= self.batch_size:
            return 1
        return -(-int(count) // self.batch_size)

    def window(self, count):
        """Return the length [iterations] of a search window of ``count`` searchers."""
        return self.iterations * self.shares(count)

    def batch(self, searchers, search_left):
        """Return the searchers (sorted indices) refined at the iteration with
        ``search_left`` iterations left in the window: all, or one share in turn."""
        shares = self.shares(len(searchers))
        if shares == 1:
            return searchers
        return np.array_split(searchers, shares)[int(search_left) % shares]

    def draw(self, count, motion, chain, rng, turn_reference, starts=(), spread=1.0):
        """Return (count, nq) fresh searcher configurations: ``starts`` (configurations to
        start from as they are, e.g. the reference itself), then a third uniform and the
        rest from the motion prior widened by ``spread``."""
        starts = np.asarray(starts, dtype=float).reshape(-1, chain.nq)[:count]
        rest = count - len(starts)
        uniform = rest // 3
        fresh = np.concatenate([starts, chain.random_configuration(rng, uniform),
                                motion.sample(rest - uniform, rng, spread)])
        if motion.has_turns:
            fresh = motion.map_turns(fresh, turn_reference)
        return fresh


# ---------------------------------------------------------------------------- refinement
class Refinement:
    """Levenberg-Marquardt move step of a few particles on the negative log-likelihood.

    Each step solves ``A y = r + J d0``, ``A = J W^-2 J^T + lambda I``, and moves by
    ``dv = d0 - W^-2 J^T y`` (K particles at once): the damped least-squares step on the
    whitened residual ``r`` (targets and constraints, rows scaled like ``stack_terms``)
    plus the minimal-motion pull ``d0 = nullspace_gain * (x_ref - q)`` projected on the
    (W-weighted, damped) null space of J. Without minimal motion, ``d0 = 0`` and ``W = I``
    (the plain LM step). Damping: Sugihara's ``lambda = cost / 2 + refine_damping``.
    Joints at a limit that the step pushes outwards are removed from that step, the step is
    scaled to at most ``max_step`` per joint and tried at full, half and quarter length in
    one batched FK. Acceptance: while a particle is coarse (task errors above a quarter of
    the solution tolerance) the trial with the lowest cost is kept if it lowers the cost;
    once precise, the trial nearest the reference that stays precise is kept if it moves
    nearer (or, as near, lowers the cost). A trial that violates a hard constraint is never
    kept. One plain pose target with constraints (the node's collision avoidance): where the
    constraints are inactive at a particle's start and at the end of the compiled pose-only
    refinement, that result is taken without checking the trials in between
    (``_move_fused_where_free``; a refinement result is a hypothesis: the command stream
    checks every motion towards it).
    """

    PRECISE_FRACTION = 0.25
    SPRING = 0.1                # share of the motion prior's weight in the coarse LM
    SPRING_FADE = 10.0          # the spring fades below this many tolerance costs
    SLIDE_CORRECTION = 0.01     # [rad] pulls larger than this get a corrector step

    def __init__(self, chain, settings):
        self.chain = chain
        self.count = int(settings.refine_count)
        self.steps = int(settings.refine_steps)
        self.damping = float(settings.refine_damping)
        self.max_step = float(settings.max_step)
        self.min_cost = float(settings.refine_min_cost)
        self.alphas = np.array([1.0, 0.5, 0.25])

    def choose(self, rank, held, searchers=()):
        """Return the indices of the particles to refine: ``held`` (if >= 0), the
        ``searchers`` of a new goal, and the best others by ``rank`` (lower is better) up to
        ``count`` besides the searchers."""
        n = len(rank)
        if held < 0 and not len(searchers):        # solve(): the best ``count``
            k = min(self.count, n)
            return np.argpartition(rank, k - 1)[:k] if k < n else np.arange(n)
        pick = np.zeros(n, dtype=bool)         # a mask: sorted, unique indices out
        pick[np.asarray(searchers, dtype=int)] = True
        if held >= 0:
            pick[held] = True
        k = min(self.count - (1 if held >= 0 else 0), n - int(np.count_nonzero(pick)))
        if k > 0:
            free_rank = np.where(pick, np.inf, rank)
            pick[np.argpartition(free_rank, k - 1)[:k] if k < n else slice(None)] = True
        return np.flatnonzero(pick)

    def move(self, problem, frames, cost, motion, guard=None):
        """Refine the configurations of ``frames`` (K rows) with costs ``cost`` (K,).

        problem: has ``terms``, ``hard``, ``cost(frames)``, ``cost_and_errors(frames)``,
        ``precise(frames, fraction, errors)``; motion: a ``MinimalMotion`` or None;
        guard: None or (K,) largest position errors [m] a step may end at (inf: no guard;
        the held particle of a still goal out of reach gets its current error: its tool
        never moves away from the target). Returns (frames, cost, improved (K,) bool,
        motion_gain (K,): how much nearer the reference each got [rad^2]).
        """
        if self._fusable(problem):
            if motion is None and guard is None:
                return self._move_fused(problem, frames, cost)
            if motion is not None and motion._plain:
                return self._move_fused_motion(problem, frames, cost, motion, guard)
        elif (motion is None and guard is None) or (motion is not None and motion._plain):
            if self._fusable(problem, constrained=True):
                return self._move_fused_where_free(problem, frames, cost, motion, guard)
        return self._move_steps(problem, frames, cost, motion, guard)

    def _move_fused_where_free(self, problem, frames, cost, motion, guard):
        """``move`` for one plain pose target with constraints (the node's collision
        avoidance): the particles on which every constraint is inactive where they start
        (no cost, no hard violation) take the compiled pose-only refinement, and keep its
        result where every constraint is inactive where they end too; the others, from their
        start, take the stepwise ``move`` with the constraints' rows.

        The trials in between are not checked against the constraints: a refinement's
        intermediate trials are never commanded, only its result is, and that is checked
        like any trial of the stepwise move (a hard constraint never violated; a soft one,
        zero there, adds nothing to the cost). Far from obstacles this replaces ~18
        collision queries per iteration by two (the demo arm with self-collision:
        docs/benchmarks.md, speed (a))."""
        extra, hard = problem.terms[1:], problem.hard
        free = ~_constrained(extra, hard, frames)
        if not free.any():
            return self._move_steps(problem, frames, cost, motion, guard)
        k_count = len(frames)
        idx = np.flatnonzero(free)
        sub = frames.subset(idx)
        view = _PoseProblem(problem)
        start = problem.terms[0].cost(sub)
        if motion is None:
            sub, new_cost, moved, gain = self._move_fused(view, sub, start)
        else:
            sub, new_cost, moved, gain = self._move_fused_motion(
                view, sub, start, motion, None if guard is None else guard[idx])
        cost = np.array(cost, dtype=float)
        improved = np.zeros(k_count, dtype=bool)
        gained = np.zeros(k_count)
        if moved.any():
            at = np.flatnonzero(moved)
            blocked = _constrained(extra, hard, sub.subset(at))
            keep = at[~blocked]
            rows = idx[keep]
            frames.assign(rows, sub.subset(keep))
            cost[rows], improved[rows], gained[rows] = new_cost[keep], True, gain[keep]
            free[idx[at[blocked]]] = False       # ends inside a constraint: the steps
        rest = np.flatnonzero(~free)
        if len(rest):
            part, part_cost, part_improved, part_gained = self._move_steps(
                problem, frames.subset(rest), cost[rest], motion,
                None if guard is None else guard[rest])
            frames.assign(rest, part)
            cost[rest], improved[rest], gained[rest] = part_cost, part_improved, part_gained
        return frames, cost, improved, gained

    def _move_steps(self, problem, frames, cost, motion, guard):
        """``move`` step by step in numpy, for any terms and constraints."""
        chain = self.chain
        k_count, nv = len(frames), chain.nv
        cols = np.arange(k_count)
        cost = cost.copy()
        improved = np.zeros(k_count, dtype=bool)
        gained = np.zeros(k_count)
        n_trials = len(self.alphas) + (motion is not None)
        if motion is not None:
            winv2 = 1.0 / (motion.weights * motion.weights)
            dist2 = motion.distance(frames.q) ** 2
            precise = problem.precise(frames, self.PRECISE_FRACTION)
            pulled = np.array([True, True, True, False])
            pull_share = np.array([1.0, 0.25, 0.0625, 0.0])
        for _ in range(self.steps):
            r, jac = stack_terms(problem.terms, frames)
            lam = 0.5 * cost + self.damping
            if motion is not None:
                # The motion prior's spring (a share of its weight 1 / motion_sigma^2),
                # fading out once the cost nears the tolerance's: no bias at the end.
                mu = self.SPRING * motion.spring * np.minimum(
                    1.0, cost / (self.SPRING_FADE * problem.tolerance_cost))
            if motion is None:
                dv = _lm_step(jac, r, lam)
                blocked = _blocked_joints(chain, frames.q, dv)
                if blocked is not None:
                    dv = _lm_step(jac * ~blocked[:, None, :], r, lam)
                dv *= np.minimum(1.0, self.max_step
                                 / np.maximum(np.max(np.abs(dv), axis=1), 1e-12))[:, None]
                steps = self.alphas[:, None, None] * dv[None]
            else:
                diff = motion.difference(frames.q)
                if precise.all():
                    dv_c = np.zeros((k_count, nv))
                else:
                    # Coarse: LM on the task and the motion prior's spring
                    # mu |W (q - x_ref)|^2.
                    dv_c = _lm_spring_step(jac, r, lam, mu, motion.weights, diff)
                    blocked = _blocked_joints(chain, frames.q, dv_c)
                    if blocked is not None:
                        dv_c = _lm_spring_step(jac * ~blocked[:, None, :], r, lam, mu,
                                               motion.weights, diff * ~blocked)
                # Precise: the task step and the pull d0 projected on the task's null space
                # (also the coarse particles' task-only trial).
                d0 = motion.gain * diff
                dv_t, dv_p = _lm_null_step(jac, r, lam, d0, winv2, self.damping)
                blocked = _blocked_joints(chain, frames.q, dv_t + dv_p)
                if blocked is not None:
                    jac = jac * ~blocked[:, None, :]
                    dv_t, dv_p = _lm_null_step(jac, r, lam, d0 * ~blocked, winv2, self.damping)
                # The pull is capped to max_step before its shares are taken: a slide along
                # a curved solution set may need short steps (the corrector keeps them exact).
                dv_p *= np.minimum(1.0, self.max_step
                                   / np.maximum(np.max(np.abs(dv_p), axis=1), 1e-12))[:, None]
                coarse_steps = np.concatenate([self.alphas[:, None, None] * dv_c[None],
                                               dv_t[None]])
                precise_steps = dv_t[None] + pull_share[:, None, None] * dv_p[None]
                steps = np.where(precise[None, :, None], precise_steps, coarse_steps)
                biggest = np.max(np.abs(steps), axis=2)
                steps = steps * np.minimum(1.0, self.max_step
                                           / np.maximum(biggest, 1e-12))[..., None]
            trial = chain.clip(chain.integrate(np.tile(frames.q, (n_trials, 1)),
                                               steps.reshape(-1, nv)))
            trial_frames = chain.frames(trial)
            if motion is not None:
                # Slides of precise particles leave the curved solution set by a second-order
                # error: one more task step (the Jacobian reused) corrects it before the
                # trial is judged, so long slides stay precise.
                slide = precise & (np.max(np.abs(dv_p), axis=1) > self.SLIDE_CORRECTION)
                if slide.any():
                    self._correct(problem, trial_frames, jac, winv2, slide, pulled)
            trial_errors = None
            if motion is not None or guard is not None:
                trial_cost, *trial_errors = problem.cost_and_errors(trial_frames)
            else:
                trial_cost = problem.cost(trial_frames)
            for c in problem.hard:
                trial_cost = np.where(c.violated(trial_frames), np.inf, trial_cost)
            trial_cost = trial_cost.reshape(n_trials, k_count)
            if guard is not None:
                pos = trial_errors[0].reshape(n_trials, k_count)
                trial_cost = np.where(pos <= guard[None, :] + 1e-12, trial_cost, np.inf)
            if motion is None:
                pick = np.argmin(trial_cost, axis=0)
                new_cost = trial_cost[pick, cols]
                ok = new_cost < cost
            else:
                trial_d2 = (motion.distance(trial) ** 2).reshape(n_trials, k_count)
                trial_precise = problem.precise(trial_frames, self.PRECISE_FRACTION,
                                                trial_errors) \
                    .reshape(n_trials, k_count) & np.isfinite(trial_cost)
                # Coarse particles: the lowest cost + spring. Precise ones: the nearest trial
                # that stays precise if it is nearer, else the lowest cost if lower.
                merit = trial_cost + mu[None, :] * trial_d2
                lowest_merit = np.argmin(merit, axis=0)
                lowest = np.argmin(trial_cost, axis=0)
                nearest = np.argmin(np.where(trial_precise, trial_d2, np.inf), axis=0)
                moves_nearer = (trial_precise[nearest, cols]
                                & (trial_d2[nearest, cols] < dist2 - 1e-12))
                pick = np.where(precise, np.where(moves_nearer, nearest, lowest), lowest_merit)
                new_cost = trial_cost[pick, cols]
                new_d2 = trial_d2[pick, cols]
                new_precise = trial_precise[pick, cols]
                ok = np.where(precise, moves_nearer | (new_precise & (new_cost < cost)),
                              merit[pick, cols] < cost + mu * dist2)
            if not ok.any():
                break
            improved |= ok
            rows = (pick * k_count + cols)[ok]
            frames.assign(np.flatnonzero(ok), trial_frames.subset(rows))
            cost[ok] = new_cost[ok]
            if motion is not None:
                gained[ok] += dist2[ok] - new_d2[ok]
                dist2[ok] = new_d2[ok]
                precise = precise | (ok & new_precise)
            if guard is not None:
                guard = np.where(ok & np.isfinite(guard),
                                 trial_errors[0].reshape(n_trials, k_count)[pick, cols], guard)
        return frames, cost, improved, gained

    def _fusable(self, problem, constrained=False):
        """Return whether ``move`` may run as the compiled kernel: one plain pose target, no
        hard constraints, no ball joints, the kernels compiled. ``constrained``: the same
        target first, then only constraints (``_move_fused_where_free``)."""
        if not _kernels.ENABLED or self.chain.has_ball_joints:
            return False
        terms = problem.terms
        if constrained:
            if len(terms) < 2 and not problem.hard or len(getattr(problem, 'targets', ())) != 1:
                return False
        elif problem.hard or len(terms) != 1:
            return False
        return (type(terms[0]) is PoseTarget and terms[0].covariance is None
                and self.chain.link_anchor(terms[0].link)[0] >= 0)

    def _move_fused(self, problem, frames, cost):
        """``move`` without motion prior or guard, in one compiled kernel (same steps)."""
        chain = self.chain
        term = problem.terms[0]
        q = np.array(frames.q, dtype=float)
        cost = np.array(cost, dtype=float)
        improved = _kernels.refine_pose(
            *chain.records, term.goal_record(chain, problem.tolerance),
            (self.steps, self.alphas, self.damping, self.max_step), q, cost)
        if improved.any():
            idx = np.flatnonzero(improved)
            frames.assign(idx, chain.frames(q[idx]))
        return frames, cost, improved, np.zeros(len(q))

    def _move_fused_motion(self, problem, frames, cost, motion, guard):
        """``move`` with the minimal-motion prior, in one compiled kernel (same steps)."""
        chain = self.chain
        term = problem.terms[0]
        q = np.array(frames.q, dtype=float)
        cost = np.array(cost, dtype=float)
        guard = np.full(len(q), np.inf) if guard is None else np.array(guard, dtype=float)
        improved, gained = _kernels.refine_pose_motion(
            *chain.records, term.goal_record(chain, problem.tolerance),
            (self.steps, self.alphas, self.damping, self.max_step),
            (float(self.SPRING * motion.spring), float(self.SPRING_FADE),
             float(problem.tolerance_cost), float(motion.gain), float(self.SLIDE_CORRECTION),
             float(self.PRECISE_FRACTION), np.array(motion.weights, dtype=float),
             np.array(motion.reference, dtype=float)), q, cost, guard)
        if improved.any():
            idx = np.flatnonzero(improved)
            frames.assign(idx, chain.frames(q[idx]))
        return frames, cost, improved, gained

    def _correct(self, problem, trial_frames, jac, winv2, slide, pulled):
        """Apply one Gauss-Newton task correction (Jacobian of the step's start) to the
        ``pulled`` trials (T,) bool of the ``slide`` particles (K,) bool, in place."""
        chain = self.chain
        k_count = len(slide)
        t_idx, k_idx = np.nonzero(pulled[:, None] & slide[None, :])
        rows = t_idx * k_count + k_idx
        sub = trial_frames.subset(rows)
        r1 = stack_terms(problem.terms, sub, with_jacobian=False)
        j = jac[k_idx]
        jw = j * winv2
        a = jw @ np.swapaxes(j, 1, 2)
        m = a.shape[-1]
        a[:, np.arange(m), np.arange(m)] += self.damping
        y = np.linalg.solve(a, r1[..., None])[..., 0]
        q = chain.clip(chain.integrate(sub.q, -np.einsum('kmv,km->kv', jw, y)))
        trial_frames.assign(rows, chain.frames(q))


class _PoseProblem:
    """The pose target of a ``move`` problem alone (what the compiled kernels read)."""

    def __init__(self, problem):
        self.terms = problem.terms[:1]
        self.tolerance = problem.tolerance
        self.tolerance_cost = problem.tolerance_cost


def _constrained(terms, hard, frames):
    """Return (K,) bool: some constraint of ``terms`` has a cost, or one of ``hard`` is
    violated, at ``frames``."""
    out = np.zeros(len(frames), dtype=bool)
    for c in terms:
        out |= c.cost(frames) > 0.0
    for c in hard:
        out |= np.asarray(c.violated(frames), dtype=bool)
    return out


def _lm_step(jac, r, lam):
    """Return dv = -J^T (J J^T + lam I)^-1 r for stacks jac (K, m, nv), r (K, m), lam (K,)."""
    if _kernels.ENABLED:
        return _kernels.lm_step(np.ascontiguousarray(jac), np.ascontiguousarray(r),
                                np.ascontiguousarray(lam, dtype=float))
    m = r.shape[1]
    jjt = jac @ np.swapaxes(jac, 1, 2)
    jjt[:, np.arange(m), np.arange(m)] += lam[:, None]
    y = np.linalg.solve(jjt, r[..., None])
    return -(np.swapaxes(jac, 1, 2) @ y)[..., 0]


def _lm_spring_step(jac, r, lam, mu, w, diff):
    """Return the LM step on the residual r plus the spring mu |W (q - x_ref)|^2.

    The minimiser of |r + J dv|^2 + mu |W (dv - diff)|^2 + lam |W dv|^2 (diff = x_ref - q):
    in u = W dv with J_s = J W^-1 and c = lam + mu, by the push-through identity
    du = -J_s^T A^-1 r + (mu / c) (g - J_s^T A^-1 J_s g), g = W diff, A = J_s J_s^T + c I:
    an m x m solve (m task rows) even for long chains. Stacks: jac (K, m, nv), r (K, m),
    lam, mu (K,), w (nv,), diff (K, nv).
    """
    if _kernels.ENABLED:
        return _kernels.lm_spring_step(
            np.ascontiguousarray(jac), np.ascontiguousarray(r),
            np.ascontiguousarray(lam, dtype=float), np.ascontiguousarray(mu, dtype=float),
            np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(diff, dtype=float))
    k, m = r.shape
    js = jac / w
    c = lam + mu
    a = js @ np.swapaxes(js, 1, 2)
    a[:, np.arange(m), np.arange(m)] += c[:, None]
    g = diff * w
    rhs = np.concatenate([r, np.einsum('kmv,kv->km', js, g)])
    y = np.linalg.solve(np.concatenate([a, a]), rhs[..., None])[..., 0]
    du = (-np.einsum('kmv,km->kv', js, y[:k])
          + (mu / c)[:, None] * (g - np.einsum('kmv,km->kv', js, y[k:])))
    return du / w


def _lm_null_step(jac, r, lam, d0, winv2, lam0):
    """Return (task step, pull step): the W-weighted LM step on r, and the pull d0 projected
    on the null space of J.

    task = -W^-2 J^T (J W^-2 J^T + lam I)^-1 r; pull = d0 - W^-2 J^T (J W^-2 J^T + lam0 I)^-1 J d0
    for stacks jac (K, m, nv), r (K, m), lam (K,), d0 (K, nv); winv2 (nv,) = 1 / w^2. The
    projector uses only the damping floor lam0 (the LM damping lam grows with the cost and
    would let the pull leak into the task directions).
    """
    if _kernels.ENABLED:
        return _kernels.lm_null_step(np.ascontiguousarray(jac), np.ascontiguousarray(r),
                                     np.ascontiguousarray(lam, dtype=float),
                                     np.ascontiguousarray(d0, dtype=float),
                                     np.ascontiguousarray(winv2, dtype=float), float(lam0))
    k, m = r.shape
    jw = jac * winv2
    base = jw @ np.swapaxes(jac, 1, 2)
    diag = np.arange(m)
    a = np.concatenate([base, base])
    a[:k, diag, diag] += lam[:, None]
    a[k:, diag, diag] += lam0
    rhs = np.concatenate([r, np.einsum('kmv,kv->km', jac, d0)])
    y = np.linalg.solve(a, rhs[..., None])[..., 0]
    return -np.einsum('kmv,km->kv', jw, y[:k]), d0 - np.einsum('kmv,km->kv', jw, y[k:])


def _blocked_joints(chain, q, dv):
    """Return a (K, nv) mask of 1-DOF joints at a limit that ``dv`` pushes outwards, or None."""
    sq, sv = chain.scalar_q, chain.scalar_v
    if not len(sq):
        return None
    if _kernels.ENABLED:
        found, mask = _kernels.blocked_joints(chain.records.joints, np.ascontiguousarray(q),
                                              np.ascontiguousarray(dv))
        return mask if found else None
    span = chain.upper[sq] - chain.lower[sq]
    eps = 1e-9 * np.maximum(span, 1.0)
    at_lower = q[:, sq] <= chain.lower[sq] + eps
    at_upper = q[:, sq] >= chain.upper[sq] - eps
    push = (at_lower & (dv[:, sv] < 0.0)) | (at_upper & (dv[:, sv] > 0.0))
    if not push.any():
        return None
    mask = np.zeros(dv.shape, dtype=bool)
    mask[:, sv] = push
    return mask


# ---------------------------------------------------------------------------- restarts
class Restarts:
    """Re-seed particles when the best cost has stalled.

    'Stalled': the best cost has not dropped by ``stall_tolerance`` (a fraction) for
    ``restart_after`` iterations while the best task cost is above ``restart_min_cost``.
    ``restart_fraction`` of the particles (the lowest weights; never the estimate's
    particle online) are redrawn; the caller decides from where (uniform in ``solve``,
    half motion prior and half uniform online). Re-seeded particles enter with the
    population's mean weight (they have no history); the others keep theirs.
    """

    def __init__(self, settings):
        self.after = int(settings.restart_after)
        self.tolerance = float(settings.stall_tolerance)
        self.fraction = float(settings.restart_fraction)
        self.online = bool(settings.online_restarts)
        self.min_cost = float(settings.restart_min_cost)

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


def mean_log_weight(logw):
    """Return log(mean(exp(logw))) (the weight a newcomer enters with)."""
    top = np.max(logw)
    return float(top + np.log(np.mean(np.exp(logw - top))))


# ---------------------------------------------------------------------------- branch hold
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

    def choose(self, held, ok, cost, jumps, dist_ref, stall, still, position,
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
            cand = int(pool[np.argmin(key)])
            return cand, (None if near[cand]
                          else 'held branch reaches the goal only approximately')
        if exact is not None and exact[held]:
            ok = exact      # an exact held particle gives way to exact solutions only
        if ok.any():
            pool = np.flatnonzero(ok)
            key = dist_ref[pool] if dist_ref is not None else cost[pool]
            cand = int(pool[np.argmin(key)])
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
            return int(pool[np.argmin(cost[pool])]), None
        return held, None


# ---------------------------------------------------------------------------- sampling
def sample_qutem(quat, sigma, rng):
    """Sample q * exp(v), v ~ N(0, diag(sigma^2)) per row (QuTem, seed 000 App. A).

    ``sigma`` is the std of the rotation vector v [rad]: the rotation angle. Eq. 17 puts
    the QuTem covariance on log(q) = v / 2, so sigma here is twice the paper's sigma
    (``ball_noise`` documents the same factor). The paper's Algorithm 2 draws a unit
    direction and a separate Gaussian angle; drawing the tangent vector directly gives
    the density of eq. 17 exactly (the tests check its covariance).
    """
    return quat_times_exp(quat, rng.standard_normal(sigma.shape) * sigma)
