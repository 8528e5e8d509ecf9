"""Algorithm 1 of seed 000 (section 5.3): one iteration of the SMC IK filter.

``filter_step`` is the paper's iteration - exploration (the random walk of eq. 12), importance
weights (eq. 13-14), the estimate, selection (resampling) - over a ``FilterState`` that holds
only the particles, their weights and the estimate's index. What this package adds to the
paper is a set of named policies (``Policies``), each an object with its own state that the
step calls at a named point, each switched off by its setting (docs/smc.md, "Policies"):

- minimal motion (``policies/motion.py``): the random walk's prior made explicit, around a
  reference configuration; whole turns mapped towards it; the nearest solution as estimate;
- nearest search (``policies/search.py``): searchers of the nearest branch after a new goal;
- recovery (``policies/recovery.py``): the branch left behind is kept as a shadow particle;
- refinement (``policies/refinement.py``): a Levenberg-Marquardt move step of a few particles;
- branch hold (``policies/branch_hold.py``): online, the estimate stays on its branch;
- restarts (``policies/restarts.py``): re-seeding when the best cost stalls.

Weights of moved particles: the refinement is a *move* step; a moved particle's incremental
weight is the likelihood (and prior) where it lands, ``p(z_k | x'_k)``, as if the random walk
had proposed ``x'_k`` (the density ratio of the deterministic move is not computed).
Re-seeded particles have no history: they enter with the population's mean weight.
"""

from dataclasses import dataclass

import numpy as np

from ... import kernels
from ...goals import Target, Term, project, task_errors
from ...goals.projection import KEPT_SHARE, residual_share
from ...rotations import quat_times_exp

__all__ = ['FilterModel', 'FilterState', 'Policies', 'Step', 'feasible', 'filter_step',
           'mean_log_weight', 'sample_qutem', 'systematic_resample']

NONE = np.zeros(0, dtype=int)
_EMPTY = np.zeros(0)


@dataclass
class FilterState:
    """The particle population: particles (N, nq), log weights (N,) (max 0), and the index
    of the estimate's particle (-1: none yet)."""

    particles: np.ndarray
    logw: np.ndarray
    estimate: int = -1


@dataclass(frozen=True)
class Policies:
    """The policies ``filter_step`` calls; ``None`` switches one off. ``keep_map``: the
    estimate's particle takes no random step (the filter's elitism, setting ``keep_map``)."""

    minimal_motion: object = None
    search: object = None
    recovery: object = None
    refinement: object = None
    branch_hold: object = None
    restarts: object = None
    keep_map: bool = True


def filter_step(state, model, policies, rng, online):
    """Run one iteration of Algorithm 1 (seed 000, section 5.3); return (state, info).

    state: ``FilterState``; model: ``FilterModel``; policies: ``Policies``; online: ``step``
    (True) or ``solve`` (False). info (``Step.info``): the estimate's ``index`` into
    ``particles`` (the population before resampling), its ``q`` and one-row ``frames``,
    ``weights``, ``ess``, ``ok`` (within tolerance), ``cost``, ``confidence``, and what the
    policies add (the branch-hold ``switch`` and ``warning``, ``restarted``).
    """
    step = Step(state, model, policies, online)
    motion, hold = policies.minimal_motion, policies.branch_hold

    # 1. Exploration: x_k ~ p(x_k | x_{k-1}), a random walk inside the limits (eq. 12); the
    # carried particles (the estimate's, the searchers, a recovery's shadow) take no step.
    scale = np.exp(rng.uniform(model.log_min_scale, 0.0, size=step.n))
    scale[step.carried] = 0.0
    particles = model.propagate(state.particles, scale, rng)
    if motion is not None:
        particles = motion.map_turns(particles, motion.turn_reference)
    step.explore(particles, scale, rng)

    # 2. Importance weights: w_k = w_{k-1} p(z_k | x_k) [x motion prior] (eq. 13-14),
    # evaluated where the particles are after the move step (refinement).
    step.evaluate()
    if policies.refinement is not None:
        policies.refinement.move(step)
    step.weigh()

    # 3. Estimate: the MAP particle (Algorithm 1), unless branch hold (stay on the held
    # branch) or minimal motion (the nearest particle within tolerance) picks another.
    if hold is not None and hold.applies(step):
        hold.choose(step)
    elif motion is not None:
        motion.choose(step)

    # 4. Selection: systematic resampling when the effective sample size is low; the
    # pinned particles (the estimate's, the searchers) keep their slots.
    step.select(rng)
    for policy in (policies.search, policies.restarts):
        if policy is not None:
            policy.after_selection(step, rng)
    return step.result()


class Step:
    """One iteration of ``filter_step`` in progress: what the policies read and change.

    After ``explore``: ``particles`` (N, nq) and their ``frames``. After ``evaluate``: the
    ``task`` and ``soft`` costs (temperature 1), ``cost`` = their sum, and online the worst
    task errors ``pos_err``, ``ori_err``; ``dist_ref``: the distances from the motion
    prior's reference (minimal motion, else None). After ``weigh``: ``logw`` and normalised
    ``weights``, ``ok`` (within tolerance) and the ``index`` of the estimate (the MAP
    online, the lowest cost in ``solve``) until a policy chooses another. ``info`` collects
    what is returned.
    """

    def __init__(self, state, model, policies, online):
        self.model, self.policies, self.online = model, policies, online
        self.state = state
        self.n = len(state.particles)
        self.held = state.estimate
        search, recovery = policies.search, policies.recovery
        self.searchers = search.active() if search is not None else NONE
        self.shadow = recovery.shadow if recovery is not None else -1
        kept = self.searchers if self.shadow < 0 else \
            np.union1d(self.searchers, [self.shadow]).astype(int)
        self.kept = kept
        if not (policies.keep_map and self.held >= 0):
            self.carried = kept
        elif len(kept):
            self.carried = np.union1d(kept, [self.held]).astype(int)
        else:       # the common case, without union1d's ~8 us
            self.carried = np.array([self.held])
        # The particles refined besides the best: this iteration's share of the searchers
        # and the shadow.
        batch = search.batch() if (search is not None and len(self.searchers)) else \
            self.searchers
        self.refined = batch if self.shadow < 0 else \
            np.union1d(batch, [self.shadow]).astype(int)
        self.dist_ref = None
        self.stuck = NONE
        self.info = {}

    # -- 1. exploration
    def explore(self, particles, scale, rng):
        """Take the propagated particles; redraw those that violate a hard constraint."""
        self.frames = self.model.chain.frames(particles)
        if self.model.hard:
            particles, self.frames = self.model.enforce_hard(
                self.state.particles, particles, self.frames, scale, rng)
        self.particles = particles

    # -- 2. weights
    def evaluate(self, rows=None, frames=None):
        """Evaluate the costs (and online the task errors) of every particle, or of
        ``rows`` (after the refinement moved them; ``frames``: theirs, if at hand)."""
        model = self.model
        if rows is None:
            frames = self.frames
        elif frames is None:
            frames = self.frames.subset(rows)
        if self.online:
            values = model.costs_and_errors(frames)
        else:
            values = model.costs(frames)
        if rows is None:
            self.task, self.soft = values[0], values[1]
            if self.online:
                self.pos_err, self.ori_err = values[2], values[3]
            motion = self.policies.minimal_motion
            if motion is not None and motion.weighted:
                self.dist_ref = motion.distance(self.particles)
        else:
            self.task[rows], self.soft[rows] = values[0], values[1]
            if self.online:
                self.pos_err[rows], self.ori_err[rows] = values[2], values[3]
            if self.dist_ref is not None:
                motion = self.policies.minimal_motion
                self.dist_ref[rows] = motion.distance(self.particles[rows])
        self.cost = self.task + self.soft

    def weigh(self):
        """w_k = w_{k-1} p(z_k | x_k) [x the motion prior]: normalised weights, the MAP."""
        model = self.model
        loglik = model.log_likelihood(self.task, self.soft)
        if self.dist_ref is not None:
            motion = self.policies.minimal_motion
            loglik = loglik + model.temper(motion.log_prior(distance=self.dist_ref))
        logw = self.state.logw + loglik
        logw -= logw.max()
        weights = np.exp(logw)
        weights /= weights.sum()
        self.weights = weights
        if self.online:
            self.ok = model.precise(self.frames, 1.0, (self.pos_err, self.ori_err))
        else:
            self.ok = np.zeros(self.n, dtype=bool)  # solve() judges its result itself
        self.map_index = int(weights.argmax())
        self.index = self.map_index if self.online else int(np.argmin(self.cost))

    # -- 4. selection
    def select(self, rng):
        """Resample the free slots when the pool's effective sample size is low.

        The pool is the weights without the searchers (and, while the held branch is stuck
        outside tolerance, without the estimate's: ``BranchHold.pool``), so that a search
        for another branch is not swamped by copies of them."""
        self.info = self._info()
        self.pinned = np.union1d(self.kept, [self.index]).astype(int) if len(self.kept) \
            else np.array([self.index])
        recovery = self.policies.recovery
        if recovery is not None:
            recovery.estimated(self)
        pool = self.weights.copy()
        pool[self.searchers] = 0.0
        hold = self.policies.branch_hold
        if hold is not None:
            hold.pool(self, pool)
        if pool.sum() <= 0.0:
            pool = self.weights.copy()
        pool /= pool.sum()
        ess = 1.0 / (pool * pool).sum()
        self.info['ess'] = float(1.0 / (self.weights * self.weights).sum())
        n, pinned = self.n, self.pinned
        self.next = self.particles
        if ess < self.model.resample_threshold * n and n > len(pinned):
            free = np.ones(n, dtype=bool)
            free[pinned] = False
            keep = np.arange(n)
            keep[free] = systematic_resample(pool, rng, n - len(pinned))
            self.next = self.particles[keep]
            self.next_logw = np.zeros(n)
            self.info['resampled'] = True
        else:
            self.next_logw = np.log(np.maximum(self.weights, 1e-300))

    def reseed(self, slots, fresh, fallback, rng, draw=None):
        """Replace the next population's ``slots`` by ``fresh`` draws (hard-constraint
        violators redrawn by ``draw(k)``, else copies of ``fallback``); they enter with
        the mean weight."""
        self.next = self.next.copy()
        self.next[slots] = feasible(self.model, fresh, fallback, rng, draw)
        self.next_logw = self.next_logw.copy()
        self.next_logw[slots] = mean_log_weight(self.next_logw)

    def _info(self):
        index, particles, weights = self.index, self.particles, self.weights
        return dict(index=index, map_index=self.map_index, q=particles[index].copy(),
                    distance=None if self.dist_ref is None else float(self.dist_ref[index]),
                    jumps=getattr(self, 'jumps', None), frames=self.frames.subset([index]),
                    particles=particles, weights=weights, ok=self.ok, cost=self.cost,
                    task=self.task, confidence=float(weights[self.ok].sum()),
                    switch=getattr(self, 'switch', None),
                    warning=getattr(self, 'warning', False),
                    approximate=getattr(self, 'approximate', False), resampled=False,
                    restarted=0)

    def result(self):
        """Return (next FilterState, info)."""
        return FilterState(self.next, self.next_logw, self.index), self.info


class FilterModel:
    """What Algorithm 1 needs of the problem at one iteration.

    The random walk p(x_k | x_{k-1}) (eq. 12) with bounded accept/reject on the joint
    limits and hard constraints, the likelihood p(z_k | x_k) (eq. 13-14, the task cost
    divided by the annealing ``temperature`` squared) and the solution tolerance.

    The paper's accept/reject on the joint limits may never end; here a joint (or a
    particle, for hard constraints) is redrawn at most ``max_redraws`` times and then keeps
    its previous value, which is always valid.
    """

    PROJECTION_ITERATIONS = 3   # Gauss-Newton steps of a particle onto the equalities

    def __init__(self, chain, settings, scalar_noise, ball_noise, targets, constraints,
                 temperature, tolerance):
        self.chain = chain
        self.max_redraws = settings.max_redraws
        self.log_min_scale = np.log(settings.min_noise_scale)
        self.scalar_noise = scalar_noise
        self.ball_noise = ball_noise
        self.targets = targets
        self.constraints = constraints
        self.hard = [c for c in constraints if c.hard]
        # Hard equalities (a planted foot) are projected onto, not only checked: the seed's
        # rejection alone cannot hit an equality (docs/smc.md, "Hard constraints").
        self.equalities = [c for c in self.hard if getattr(c, 'equality', False)]
        self._others = [c for c in self.hard if c not in self.equalities]
        self.projects = bool(self.equalities)
        self._anchored = None       # (nq,) bool: joints that move an equality's link
        # Constraints with a residual enter the likelihood (eq. 14); those with a Jacobian
        # too enter the refinement, unless they are a ``preference`` (the collision
        # clearance: it weighs the particles but must never pull one off its goal). A hard
        # constraint may offer only ``violated(frames)`` (accept/reject alone).
        self.soft = [c for c in constraints if _implements(c, 'residual')]
        self._refined = [c for c in self.soft if (
            _implements(c, 'jacobian') or hasattr(c, 'residual_jacobian'))
            and not getattr(c, 'preference', False)]
        self.terms = targets + self._refined
        self.temperature = temperature
        self.tolerance = tolerance
        self.resample_threshold = settings.resample_threshold
        self.goal_still = 0         # iterations since the goal last changed (set by the solver)
        self.recovering = False     # a recovery search window is on (set by the solver)
        self.resting = False        # the goal is out of reach (set by the solver)
        # Cost of a particle at the solution tolerance (array goals' sigmas): the scale at
        # which the refinement's spring fades out.
        self.tolerance_cost = ((tolerance[0] / settings.sigma_position) ** 2
                               + (tolerance[1] / settings.sigma_orientation) ** 2)

    def retarget(self, targets):
        """Take the ``targets`` of a new goal (the constraints and tolerance unchanged)."""
        self.targets = targets
        self.terms = targets + self._refined

    # -- p(x_k | x_{k-1})
    def propagate(self, prev, scale, rng):
        """Return random-walk steps of ``prev`` (N, nq), noise scaled per particle (N,)."""
        random_walk = kernels.random_walk
        chain = self.chain
        out = prev.copy()
        sq = chain.scalar_q
        if len(sq):
            # Redraws of the joints outside their limits, in the kernel, then the fallback.
            bad = np.ones((len(prev), len(sq)), dtype=bool)
            joints, walk = chain.records.joints, (scale, self.scalar_noise, out, bad)
            left = random_walk(joints, prev, rng.standard_normal(bad.size), *walk, False)
            for _ in range(self.max_redraws):
                if not left:
                    break
                left = random_walk(joints, prev, rng.standard_normal(left), *walk, False)
            if left:        # after max_redraws: those joints stay where they were
                random_walk(joints, prev, _EMPTY, *walk, True)
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            out[:, bq] = self._propagate_balls(prev[:, bq], scale, rng)
        return out

    def _propagate_balls(self, quat, scale, rng):
        """QuTem steps with bounded accept/reject on the ball joints' angle limits."""
        sigma = self.ball_noise[None, :, :] * scale[:, None, None]      # (N, B, 3)
        cand = sample_qutem(quat, sigma, rng)
        limits = self.chain.ball_limits
        if np.all(limits >= np.pi):
            return cand
        cos_half = np.cos(0.5 * np.minimum(limits, np.pi))
        bad = np.abs(cand[..., 0]) < cos_half
        for _ in range(self.max_redraws):
            if not bad.any():
                break
            cand[bad] = sample_qutem(quat[bad], sigma[bad], rng)
            bad = np.abs(cand[..., 0]) < cos_half
        cand[bad] = quat[bad]
        return cand

    def enforce_hard(self, prev, particles, frames, scale, rng):
        """Project particles onto the hard equalities (those beyond ``KEPT_SHARE`` of their
        tolerances: a particle may not use the rest as slack); redraw those that violate hard
        constraints; fall back to their previous state."""
        # An equality violated (beyond its tolerance) is beyond KEPT_SHARE too: its rows are
        # judged once, by the share.
        bad = self.violated(frames, self._others)
        bad |= residual_share(frames, self.equalities) > KEPT_SHARE
        if self.projects and bad.any():
            idx = np.flatnonzero(bad)
            particles[idx], kept = project(self.chain, particles[idx], self.hard,
                                           iterations=self.PROJECTION_ITERATIONS)
            _assign_frames(frames, idx, self.chain.frames(particles[idx]), particles)
            bad[idx] = ~kept
        for _ in range(self.max_redraws):
            if not bad.any():
                break
            idx = np.flatnonzero(bad)
            particles[idx] = self.propagate(prev[idx], scale[idx], rng)
            if self.projects:      # its ``kept`` is ``violated``'s answer (every hard one)
                particles[idx], kept = project(self.chain, particles[idx], self.hard,
                                               iterations=self.PROJECTION_ITERATIONS)
            sub = self.chain.frames(particles[idx])
            _assign_frames(frames, idx, sub, particles)
            bad[idx] = ~kept if self.projects else self.violated(sub)
        if bad.any():
            idx = np.flatnonzero(bad)
            particles[idx] = prev[idx]
            _assign_frames(frames, idx, self.chain.frames(prev[idx]), particles)
        return particles, frames

    def held_joints(self, anchor):
        """Return (nq,) bool: the joints a draw takes from ``anchor`` (nq,) (``feasible``):
        those that move an equality's link (a planted foot's leg, the floating base) or the
        link of a target already met there (the hand that holds while the other moves).
        A uniform draw of the whole figure is projected onto two planted feet almost never:
        a restart kept nothing but copies of the estimate (romeo, issue 32), where a new arm
        is what it needs; a new arm for the hand that holds made the commands carry that
        hand 3-4 mm on the way (talos)."""
        if self._anchored is None:
            mask = np.zeros(self.chain.nq, dtype=bool)
            for c in self.hard:
                link = getattr(c, 'link', None) if getattr(c, 'equality', False) else None
                if link is not None and not self.chain.has_ball_joints:
                    mask |= self.chain.moving(link)
            self._anchored = mask
        mask = self._anchored.copy()
        if self.chain.has_ball_joints:
            return mask
        frames = self.chain.frames(np.asarray(anchor, dtype=float)[None])
        for target in self.targets:
            link = getattr(target, 'link', None)
            if link is not None and callable(getattr(target, 'errors', None)):
                pos, ori = (float(e[0]) for e in target.errors(frames))
                if pos <= self.tolerance[0] and ori <= self.tolerance[1]:
                    mask |= self.chain.moving(link)
        return mask

    def onto_equalities(self, q, anchor, held):
        """Return draws q (K, nq) with the ``held`` joints (``held_joints``) at ``anchor``'s
        values (nq,), projected onto the hard equalities."""
        q = np.array(q, dtype=float)
        q[:, held] = np.asarray(anchor, dtype=float)[held]
        return project(self.chain, q, self.hard, iterations=self.PROJECTION_ITERATIONS)[0]

    def violated(self, frames, constraints=None):
        """Return (N,) bool: some hard constraint (of ``constraints``, default all) is
        violated."""
        bad = np.zeros(len(frames), dtype=bool)
        for c in self.hard if constraints is None else constraints:
            bad |= c.violated(frames)
        return bad

    # -- p(z_k | x_k)
    def costs(self, frames):
        """Return (task (N,), soft (N,)) negative log-likelihoods (temperature 1)."""
        task = _sum_costs(self.targets, frames, len(frames))
        soft = _sum_costs(self.soft, frames, len(frames))
        return task, soft

    def costs_and_errors(self, frames):
        """Return (task, soft, position_error, orientation_error), each (N,): the costs of
        ``costs`` and the worst task errors of ``errors``, the targets evaluated once."""
        n = len(frames)
        task, pos, ori = np.zeros(n), np.zeros(n), np.zeros(n)
        for t in self.targets:
            if isinstance(t, Target):
                c, p, o = t.cost_and_errors(frames)
                pos, ori = np.maximum(pos, p), np.maximum(ori, o)
            else:
                c = t.cost(frames)        # a constraint handed in with the goal
            task = task + c
        return task, _sum_costs(self.soft, frames, n), pos, ori

    def cost_and_errors(self, frames):
        """Return ``cost(frames)`` and ``errors(frames)`` in one pass over the targets."""
        task, _, pos, ori = self.costs_and_errors(frames)
        n = len(frames)
        return task + _sum_costs(self.terms[len(self.targets):], frames, n), pos, ori

    def cost(self, frames):
        """Return the (N,) untempered negative log-likelihood (task + constraints)."""
        return _sum_costs(self.terms, frames, len(frames))

    def log_likelihood(self, task, soft):
        """Return the (N,) log p(z_k | x_k) with the task noise annealed (seed 001)."""
        t = self.temperature
        return -(task / (t * t) + soft)

    def temper(self, log_density):
        """Return a log-density flattened by the annealing temperature (divided by T^2)."""
        t = self.temperature
        return log_density / (t * t)

    def errors(self, frames):
        """Return the worst (position [m], orientation [rad]) task errors, each (N,)."""
        return task_errors(self.targets, frames)

    def precise(self, frames, fraction=1.0, errors=None):
        """Return (N,) bool: task errors within ``fraction`` of the solution tolerance."""
        pos, ori = task_errors(self.targets, frames) if errors is None else errors
        return (pos <= fraction * self.tolerance[0]) & (ori <= fraction * self.tolerance[1])

    def within_tolerance(self, frames):
        """Return (N,) bool: the goal is satisfied within tolerance (particles are feasible:
        the hard constraints are enforced on every particle)."""
        return self.precise(frames, 1.0)


def feasible(model, fresh, fallback, rng, draw=None):
    """Return ``fresh`` (K, nq) with hard-constraint violators redrawn (``draw(k)``, at most
    ``max_redraws`` times), the rest replaced by copies of ``fallback`` (feasible). With
    hard equalities, a violating draw (and each redraw) first takes ``fallback``'s values of
    the joints that move an equality's link or a target met there, computed once
    (``FilterModel.held_joints``), and is projected onto them (``onto_equalities``)."""
    if not model.hard or not len(fresh):
        return fresh
    bad = model.violated(model.chain.frames(fresh))
    projects = model.projects and bad.any()
    held = model.held_joints(fallback) if projects else None
    if projects:
        idx = np.flatnonzero(bad)
        fresh[idx] = model.onto_equalities(fresh[idx], fallback, held)
        bad[idx] = model.violated(model.chain.frames(fresh[idx]))
    for _ in range(model.max_redraws if draw is not None else 0):
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        redrawn = draw(len(idx))
        fresh[idx] = model.onto_equalities(redrawn, fallback, held) if projects else redrawn
        bad[idx] = model.violated(model.chain.frames(fresh[idx]))
    fresh[bad] = fallback
    return fresh


def mean_log_weight(logw):
    """Return log(mean(exp(logw))) (the weight a newcomer enters with)."""
    top = np.max(logw)
    return float(top + np.log(np.mean(np.exp(logw - top))))


def sample_qutem(quat, sigma, rng):
    """Sample q * exp(v), v ~ N(0, diag(sigma^2)) per row (QuTem, seed 000 App. A).

    ``sigma`` is the std of the rotation vector v [rad]: the rotation angle. Eq. 17 puts
    the QuTem covariance on log(q) = v / 2, so sigma here is twice the paper's sigma
    (``ball_noise`` documents the same factor). The paper's Algorithm 2 draws a unit
    direction and a separate Gaussian angle; drawing the tangent vector directly gives
    the density of eq. 17 exactly (the tests check its covariance).
    """
    return quat_times_exp(quat, rng.standard_normal(sigma.shape) * sigma)


def systematic_resample(weights, rng, count=None):
    """Return ``count`` (default len(weights)) indices drawn by systematic resampling."""
    n = len(weights) if count is None else int(count)
    positions = (rng.uniform() + np.arange(n)) / n
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, positions)


def _implements(term, method):
    """Return whether ``term`` overrides ``Term.<method>`` (the base raises)."""
    return getattr(type(term), method, None) is not getattr(Term, method)


def _sum_costs(terms, frames, n):
    total = np.zeros(n)
    for t in terms:
        total = total + t.cost(frames)
    return total


def _assign_frames(frames, idx, sub, particles):
    frames.rot[:, idx] = sub.rot
    frames.pos[:, idx] = sub.pos
    frames.q = particles
