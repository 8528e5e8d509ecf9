"""Refinement: a Levenberg-Marquardt move step of a few particles (policy ``refine_count``).

The paper's random walk finds a branch but converges slowly to the precise solution on it;
the refinement moves the best few particles (and the estimate's, the searchers and a
recovery's shadow) by damped least-squares steps on the negative log-likelihood, with the
minimal-motion pull in the task's null space. It also decides when the estimate's particle
has converged (``settled``): the online filter then keeps it as it is.
"""

import numpy as np

from .... import kernels as _kernels
from ....goals import PoseTarget
from ...base import stack_terms

__all__ = ['Refinement']

# The held particle's refinement has converged when it moved at most SETTLE_MOVE [rad or m]
# per joint and its cost changed by at most a relative SETTLE_GAIN (RESTING_*: while the goal
# is out of reach). See Refinement._no_progress.
SETTLE_MOVE = 1e-6
SETTLE_GAIN = 1e-9
RESTING_MOVE = 1e-4         # [rad or m] per joint and step: 0.6 deg/s at 100 Hz
RESTING_GAIN = 1e-6


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
        self.reset()

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

    def reset(self):
        """Forget the estimate's convergence (a reset, a new goal, a new estimate)."""
        self.settled = False            # the estimate's particle has converged
        self.settled_cost = np.inf      # its cost then, when above the cost floor

    # -- filter_step hook
    def move(self, step):
        """The move step of ``filter_step``: refine the estimate's particle (online), this
        iteration's searchers and shadow, and the best others by likelihood (and prior),
        unless the refinement is idle: converged at its cost floor, or (online) on an
        estimate that converged above it and whose cost has not changed since (a scene
        change that alters it, or a new goal, wakes the refinement)."""
        model, online, held = step.model, step.online, step.held
        motion = step.policies.minimal_motion
        cost = step.cost
        anchor = held if (online and held >= 0) else int(np.argmin(cost))
        floor = cost[anchor] <= self.min_cost or (
            online and self.settled and held >= 0 and np.isfinite(self.settled_cost)
            and abs(cost[held] - self.settled_cost) <= SETTLE_GAIN * self.settled_cost)
        if floor and not len(step.searchers) and (motion is None or self.settled
                                                   or not online):
            return
        rank = -model.log_likelihood(step.task, step.soft)
        if step.dist_ref is not None:
            rank = rank - model.temper(motion.log_prior(distance=step.dist_ref))
        idx = self.choose(rank, held if online else -1, step.refined)
        guard = None
        if online and held >= 0 and model.goal_still > 0 and step.policies.branch_hold:
            # A still goal out of reach: the estimate's tool never moves away from it.
            guard = np.where(idx == held, _held_position_error(model, step.frames, held),
                             np.inf)
        before = (step.particles[held].copy(), float(cost[held])) \
            if online and held >= 0 else None
        pull = motion if (motion is not None and motion.pulling) else None
        sub, _, improved, gained = self.refine(model, step.frames.subset(idx), cost[idx],
                                               pull, guard)
        step.stuck = idx[~improved]
        if improved.any():
            if motion is not None and motion.has_turns:
                sub.q[:] = motion.map_turns(sub.q, motion.turn_reference)
            step.particles[idx] = sub.q
            step.frames.assign(idx, sub)
            step.frames.q = step.particles
            step.evaluate(idx)
        if before is not None:
            self._settle(step, gained[int(np.flatnonzero(idx == held)[0])], before)

    def _settle(self, step, gained, before):
        """Decide whether the estimate's particle has converged after its refinement."""
        held, cost = step.held, step.cost
        if cost[held] <= self.min_cost:
            self.settled, self.settled_cost = bool(gained < 1e-12), np.inf
        elif _no_progress(before, step.particles[held], cost[held], step.model.resting):
            # Converged above the floor: keep it where the refinement found it (its trials
            # would keep wandering by rounding-level steps).
            step.particles[held] = before[0]
            step.frames.assign([held], self.chain.frames(before[0][None]))
            step.frames.q = step.particles
            step.evaluate([held])
            self.settled, self.settled_cost = True, float(step.cost[held])
        else:
            self.settled, self.settled_cost = False, np.inf

    # -- the move itself
    def refine(self, problem, frames, cost, motion, guard=None):
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
        if self.chain.has_ball_joints:
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


def _no_progress(before, q, cost, resting=False):
    """True when the held particle's refinement ended where it began, up to rounding: it
    moved at most ``SETTLE_MOVE`` [rad or m] per joint and its cost changed by at most a
    relative ``SETTLE_GAIN``. Above the refinement's cost floor (a soft term the goal cannot
    meet: collision clearance it cannot keep there, say) its trials are still taken on
    rounding-level cost changes and on the motion prior's pull, and it would wander by
    ~1e-7 rad per step; it has converged all the same. ``resting`` (the goal is out of
    reach, ``SmcSolver.resting``): ``RESTING_MOVE`` and ``RESTING_GAIN`` instead. Stretched
    towards a goal beyond its reach, the demo arm's estimate creeps along the motion
    prior's pull by 2e-6 to 5e-5 rad per step at an unchanged cost (relative changes of
    1e-15 to 1e-9), for minutes, which the rounding-level bounds never call converged; it
    is the best it will get, and an arm that creeps towards it is no use."""
    q_before, cost_before = before
    move, gain = (RESTING_MOVE, RESTING_GAIN) if resting else (SETTLE_MOVE, SETTLE_GAIN)
    return bool(np.max(np.abs(q - q_before)) <= move
                and abs(cost_before - cost) <= gain * cost_before)


def _held_position_error(model, frames, held):
    """Return the held particle's position error [m] (the guard of a still goal)."""
    pos, _ = model.errors(frames.subset([held]))
    return float(pos[0]) if not model.precise(frames.subset([held]))[0] else np.inf


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
    return _kernels.lm_step(np.ascontiguousarray(jac), np.ascontiguousarray(r),
                            np.ascontiguousarray(lam, dtype=float))


def _lm_spring_step(jac, r, lam, mu, w, diff):
    """Return the LM step on the residual r plus the spring mu |W (q - x_ref)|^2.

    The minimiser of |r + J dv|^2 + mu |W (dv - diff)|^2 + lam |W dv|^2 (diff = x_ref - q):
    in u = W dv with J_s = J W^-1 and c = lam + mu, by the push-through identity
    du = -J_s^T A^-1 r + (mu / c) (g - J_s^T A^-1 J_s g), g = W diff, A = J_s J_s^T + c I:
    an m x m solve (m task rows) even for long chains. Stacks: jac (K, m, nv), r (K, m),
    lam, mu (K,), w (nv,), diff (K, nv).
    """
    return _kernels.lm_spring_step(
        np.ascontiguousarray(jac), np.ascontiguousarray(r),
        np.ascontiguousarray(lam, dtype=float), np.ascontiguousarray(mu, dtype=float),
        np.ascontiguousarray(w, dtype=float), np.ascontiguousarray(diff, dtype=float))


def _lm_null_step(jac, r, lam, d0, winv2, lam0):
    """Return (task step, pull step): the W-weighted LM step on r, and the pull d0 projected
    on the null space of J.

    task = -W^-2 J^T (J W^-2 J^T + lam I)^-1 r; pull = d0 - W^-2 J^T (J W^-2 J^T + lam0 I)^-1 J d0
    for stacks jac (K, m, nv), r (K, m), lam (K,), d0 (K, nv); winv2 (nv,) = 1 / w^2. The
    projector uses only the damping floor lam0 (the LM damping lam grows with the cost and
    would let the pull leak into the task directions).
    """
    return _kernels.lm_null_step(np.ascontiguousarray(jac), np.ascontiguousarray(r),
                                 np.ascontiguousarray(lam, dtype=float),
                                 np.ascontiguousarray(d0, dtype=float),
                                 np.ascontiguousarray(winv2, dtype=float), float(lam0))


def _blocked_joints(chain, q, dv):
    """Return a (K, nv) mask of 1-DOF joints at a limit that ``dv`` pushes outwards, or None."""
    if not len(chain.scalar_q):
        return None
    found, mask = _kernels.blocked_joints(chain.records.joints, np.ascontiguousarray(q),
                                          np.ascontiguousarray(dv))
    return mask if found else None
