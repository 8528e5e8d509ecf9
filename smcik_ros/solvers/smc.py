"""The Sequential Monte Carlo IK filter of Courty & Arnaud (seed 000, Algorithm 1).

``filter_step`` is Algorithm 1 in one function - exploration (the random walk of eq. 12),
importance weights (eq. 13-14), the estimate, selection (resampling) - with the additions
as named policies passed to it (``smc_policies``), each switched off by its setting:

- minimal motion (``minimal_motion``): the random walk's prior made explicit as
  ``N(x_ref, Sigma_motion)`` around a reference configuration: a weight factor, the
  proposal of re-seeded particles, a null-space pull in the refinement, the nearest
  particle within tolerance as the estimate, and whole-turn mapping;
- refinement (``refine_count``): a Levenberg-Marquardt move step of a few particles;
- restarts (``restart_after``): re-seeding when the best cost stalls;
- branch hold (``branch_hold``): online, the estimate stays on its branch unless another
  satisfies the goal and its own cannot.

Weights of moved particles: the refinement is a *move* step; a moved particle's incremental
weight is the likelihood (and prior) where it lands, ``p(z_k | x'_k)``, as if the random walk
had proposed ``x'_k`` (the density ratio of the deterministic move is not computed).
Re-seeded particles (restarts, a new goal) have no history: they enter with the
population's mean weight and are weighted by their likelihood from then on. docs/smc.md
gives the ablation of every policy.

Online use: ``reset(q)``, then ``step(goal)`` per tick (returns the estimate; the eq. 15
smoothing ``smoothing_alpha`` is 1 by default: lag-free). Batch: ``solve(...)``.
``alternatives()`` lists the distinct solution branches the particles hold and
``select_alternative()`` moves the estimate to one of them.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from .. import kernels
from ..errors import ParameterError
from ..goals import PoseTarget, Target, Term, task_errors
from ..rotations import quat_slerp
from .base import Alternative, Solver, SolverSettings, StateKey, _check, register
from .smc_policies import (BranchHold, MinimalMotion, NearestSearch, Policies, Refinement,
                           Restarts, mean_log_weight, sample_qutem)

__all__ = ['SmcSettings', 'SmcSolver', 'FilterState', 'FilterModel', 'filter_step']


@dataclass(frozen=True)
class SmcSettings(SolverSettings):
    """Settings of the SMC IK filter (field names are the ROS parameter names)."""

    num_particles: int = 100            # N, particles
    seed: int = -1                      # random seed; -1: fresh entropy each construction
    joint_noise: float = 0.1            # [rad] std of the revolute random walk per iteration
    prismatic_noise: float = 0.02       # [m] std of the prismatic random walk
    ball_noise: float = 0.1             # [rad] ball rotation-angle std per axis (2x eq. 17's)
    joint_noise_per_joint: tuple = ()   # [rad or m] one std per 1-DOF joint; () = the above
    ball_noise_per_axis: tuple = ()     # [rad] 3 stds per ball joint (QuTem diag); () = above
    min_noise_scale: float = 0.01       # smallest per-particle noise factor (log-uniform to 1)
    sigma_position: float = 0.01        # [m] task noise std, position (Sigma_z) of array goals
    sigma_orientation: float = 0.05     # [rad] task noise std, orientation (Sigma_z)
    anneal_initial: float = 10.0        # Sigma_z std multiplier when a new goal arrives
    anneal_rate: float = 0.8            # per-iteration factor on that multiplier (down to 1)
    smoothing_alpha: float = 1.0        # eq. 15 interpolation factor (1: no smoothing, no lag)
    resample_threshold: float = 0.5     # resample when ESS < threshold * N
    max_redraws: int = 3                # accept/reject redraws per iteration
    refine_count: int = 4               # best particles refined per iteration (0: off)
    refine_steps: int = 3               # damped least-squares steps per refined particle
    refine_damping: float = 1e-4        # Levenberg-Marquardt damping floor
    refine_min_cost: float = 1e-9       # skip refinement while the best cost is below this
    max_step: float = 0.5               # [rad or m] largest joint change of one refinement step
    restart_after: int = 4              # iterations without enough progress before re-seeding
    stall_tolerance: float = 0.1        # 'progress' = best cost down by this fraction
    restart_fraction: float = 1.0       # share of particles re-seeded on a restart
    online_restarts: bool = True        # also re-seed in online use (the estimate's stays)
    restart_min_cost: float = 0.01      # no restart once the best task cost is below this
    online_restart_limit: int = 20      # online: restarts per still goal, then rest (0: no limit)
    init_uniform_fraction: float = 0.5  # solve(): share of particles drawn uniformly at start
    seed_rows: int = 8                  # solve(): seed + draws refined one by one first (0: off)
    seed_steps: int = 30                # solve(): LM steps per row of that first stage
    keep_map: bool = True               # carry the estimate's particle over without noise
    goal_change_threshold: float = 3.0  # goal moves > this many sigmas re-arm the filter
    solution_tolerance_position: float = 0.001      # [m] 'satisfies the goal' (online)
    solution_tolerance_orientation: float = 0.01    # [rad] 'satisfies the goal' (online)
    minimal_motion: bool = True         # prefer the solution nearest the reference (off: MAP)
    motion_sigma: float = 1.0           # [rad] std of the motion prior N(x_ref, Sigma_motion)
    nullspace_gain: float = 1.0         # refinement's pull to x_ref in the task null space
    reseed_fraction: float = 0.5        # share of particles drawn around x_ref on a new goal
    search_count: int = 32              # searchers of the nearest branch on a new goal (0: off)
    search_iterations: int = 8          # iterations per search window (repeated while useful)
    search_batch: int = 0               # searchers refined per iteration (0: all)
    branch_hold: bool = True            # online: stay on the estimate's branch (needs keep_map)
    branch_jump: float = 0.5            # [rad] 'another branch' = a joint differs by more
    recovery_iterations: int = 300      # iterations the branch left out of reach is kept
    hold_patience: int = 4              # iterations without progress before leaving the branch

    def validate(self):
        _check(self.num_particles >= 1, f'num_particles must be >= 1; got {self.num_particles}')
        _check(self.seed >= -1, f'seed must be >= 0, or -1 for a random seed; got {self.seed}')
        for name in ('joint_noise', 'prismatic_noise', 'ball_noise', 'sigma_position',
                     'sigma_orientation', 'solution_tolerance_position',
                     'solution_tolerance_orientation', 'motion_sigma'):
            _check(getattr(self, name) > 0.0, f'{name} must be > 0; got {getattr(self, name)}')
        _check(0.0 < self.min_noise_scale <= 1.0,
               f'min_noise_scale must be in (0, 1]; got {self.min_noise_scale}')
        _check(self.anneal_initial >= 1.0,
               f'anneal_initial must be >= 1; got {self.anneal_initial}')
        _check(0.0 < self.anneal_rate <= 1.0,
               f'anneal_rate must be in (0, 1]; got {self.anneal_rate}')
        _check(0.0 < self.smoothing_alpha <= 1.0,
               f'smoothing_alpha must be in (0, 1]; got {self.smoothing_alpha}')
        _check(0.0 <= self.resample_threshold <= 1.0,
               f'resample_threshold must be in [0, 1]; got {self.resample_threshold}')
        _check(self.max_redraws >= 0, f'max_redraws must be >= 0; got {self.max_redraws}')
        _check(0 <= self.refine_count <= self.num_particles,
               f'refine_count must be in [0, num_particles={self.num_particles}]; '
               f'got {self.refine_count}')
        _check(self.refine_steps >= 1, f'refine_steps must be >= 1; got {self.refine_steps}')
        _check(self.refine_damping >= 0.0,
               f'refine_damping must be >= 0; got {self.refine_damping}')
        _check(self.refine_min_cost >= 0.0,
               f'refine_min_cost must be >= 0; got {self.refine_min_cost}')
        _check(self.max_step > 0.0, f'max_step must be > 0; got {self.max_step}')
        _check(self.restart_after >= 0,
               f'restart_after must be >= 0 (0: off); got {self.restart_after}')
        _check(self.online_restart_limit >= 0,
               f'online_restart_limit must be >= 0 (0: no limit); got '
               f'{self.online_restart_limit}')
        _check(0.0 <= self.stall_tolerance < 1.0,
               f'stall_tolerance must be in [0, 1); got {self.stall_tolerance}')
        _check(0.0 <= self.restart_fraction <= 1.0,
               f'restart_fraction must be in [0, 1]; got {self.restart_fraction}')
        _check(0.0 <= self.init_uniform_fraction <= 1.0,
               f'init_uniform_fraction must be in [0, 1]; got {self.init_uniform_fraction}')
        _check(self.seed_rows >= 0, f'seed_rows must be >= 0 (0: off); got {self.seed_rows}')
        _check(self.seed_steps >= 1, f'seed_steps must be >= 1; got {self.seed_steps}')
        _check(self.restart_min_cost >= 0.0,
               f'restart_min_cost must be >= 0; got {self.restart_min_cost}')
        _check(self.goal_change_threshold >= 0.0,
               f'goal_change_threshold must be >= 0; got {self.goal_change_threshold}')
        _check(0.0 <= self.nullspace_gain <= 1.0,
               f'nullspace_gain must be in [0, 1]; got {self.nullspace_gain}')
        _check(0.0 <= self.reseed_fraction < 1.0,
               f'reseed_fraction must be in [0, 1); got {self.reseed_fraction}')
        _check(self.search_count >= 0,
               f'search_count must be >= 0 (at most num_particles - 1 are used); '
               f'got {self.search_count}')
        _check(self.search_iterations >= 0,
               f'search_iterations must be >= 0; got {self.search_iterations}')
        _check(self.search_batch >= 0,
               f'search_batch must be >= 0 (0: every searcher each iteration); '
               f'got {self.search_batch}')
        _check(self.branch_jump > 0.0, f'branch_jump must be > 0; got {self.branch_jump}')
        _check(self.recovery_iterations >= 0,
               f'recovery_iterations must be >= 0; got {self.recovery_iterations}')
        _check(self.hold_patience >= 1, f'hold_patience must be >= 1; got {self.hold_patience}')
        _check(self.keep_map or not self.branch_hold,
               'branch_hold needs keep_map (the held particle is carried over without noise); '
               'set keep_map: true or branch_hold: false')
        for v in self.joint_noise_per_joint + self.ball_noise_per_axis:
            _check(v > 0.0, f'per-joint noise values must be > 0; got {v}')


# ---------------------------------------------------------------------------- Algorithm 1
@dataclass
class FilterState:
    """The particle population and the policies' bookkeeping between iterations.

    particles: (N, nq); logw: (N,) log weights (max 0); held: index of the estimate's
    particle (-1: none yet); best_cost / stall: restarts; held_cost / held_stall: branch
    hold; settled: the held particle's refinement has converged (the idle step skips it);
    settled_cost: its cost then, when above the refinement's floor (see ``_no_progress``);
    restarted: particles re-seeded at the end of the last step; searchers / search_left:
    the nearest search's particles and the iterations left in its window; shadow: the
    particle that keeps the branch the estimate left on during a recovery (-1: none).
    """

    particles: np.ndarray
    logw: np.ndarray
    held: int = -1
    best_cost: float = np.inf
    stall: int = 0
    held_cost: float = np.inf
    held_stall: int = 0
    settled: bool = False
    settled_cost: float = np.inf
    restarted: int = 0
    searchers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    search_left: int = 0
    shadow: int = -1


class FilterModel:
    """What Algorithm 1 needs of the problem at one iteration.

    The random walk p(x_k | x_{k-1}) (eq. 12) with bounded accept/reject on the joint
    limits and hard constraints, the likelihood p(z_k | x_k) (eq. 13-14, the task cost
    divided by the annealing ``temperature`` squared) and the solution tolerance.
    """

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
        # Constraints with a residual enter the likelihood (eq. 14); those with a Jacobian
        # too enter the refinement. A hard constraint may offer only ``violated(frames)``
        # (accept/reject alone).
        self.soft = [c for c in constraints if _implements(c, 'residual')]
        self.terms = targets + [c for c in self.soft if _implements(c, 'jacobian')
                                or hasattr(c, 'residual_jacobian')]
        self.temperature = temperature
        self.tolerance = tolerance
        self.resample_threshold = settings.resample_threshold
        self.goal_still = 0         # iterations since the goal last changed (set by the solver)
        self.recovering = False     # a recovery search window is on (set by the solver)
        self.resting = False        # the goal is out of reach (SmcSolver.resting; set by it)
        # Cost of a particle at the solution tolerance (array goals' sigmas): the scale at
        # which the refinement's spring fades out.
        self.tolerance_cost = ((tolerance[0] / settings.sigma_position) ** 2
                               + (tolerance[1] / settings.sigma_orientation) ** 2)

    # -- p(x_k | x_{k-1})
    def propagate(self, prev, scale, rng):
        """Return random-walk steps of ``prev`` (N, nq), noise scaled per particle (N,)."""
        chain = self.chain
        out = prev.copy()
        sq = chain.scalar_q
        if len(sq) and kernels.ENABLED:
            # The same draws in the same order, without numpy's per-round index arrays.
            bad = np.ones((len(prev), len(sq)), dtype=bool)
            walk = (scale, self.scalar_noise, out, bad)
            left = kernels.random_walk(chain.records.joints, prev,
                                       rng.standard_normal(bad.size), *walk, False)
            for _ in range(self.max_redraws):
                if not left:
                    break
                left = kernels.random_walk(chain.records.joints, prev,
                                           rng.standard_normal(left), *walk, False)
            if left:        # fallback after max_redraws: those joints stay where they were
                kernels.random_walk(chain.records.joints, prev, _EMPTY, *walk, True)
        elif len(sq):
            base = prev[:, sq]
            sigma = self.scalar_noise * scale[:, None]
            lower, upper = chain.lower[sq], chain.upper[sq]
            cand = base + rng.standard_normal(base.shape) * sigma
            bad = (cand < lower) | (cand > upper)
            for _ in range(self.max_redraws):
                if not bad.any():
                    break
                rows, cols = np.nonzero(bad)
                cand[rows, cols] = base[rows, cols] + rng.standard_normal(len(rows)) \
                    * sigma[rows, cols]
                moved = cand[rows, cols]
                bad[rows, cols] = (moved < lower[cols]) | (moved > upper[cols])
            # Fallback after max_redraws: that joint stays where it was (always valid).
            cand[bad] = base[bad]
            out[:, sq] = cand
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
        """Redraw particles that violate hard constraints; fall back to their previous state."""
        bad = self.violated(frames)
        for _ in range(self.max_redraws):
            if not bad.any():
                break
            idx = np.flatnonzero(bad)
            particles[idx] = self.propagate(prev[idx], scale[idx], rng)
            sub = self.chain.frames(particles[idx])
            _assign_frames(frames, idx, sub, particles)
            bad[idx] = self.violated(sub)
        if bad.any():
            idx = np.flatnonzero(bad)
            particles[idx] = prev[idx]
            _assign_frames(frames, idx, self.chain.frames(prev[idx]), particles)
        return particles, frames

    def violated(self, frames):
        """Return (N,) bool: some hard constraint is violated."""
        bad = np.zeros(len(frames), dtype=bool)
        for c in self.hard:
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


def filter_step(state, model, policies, rng, online):
    """Run one iteration of Algorithm 1 (seed 000, section 5.3); return (state, info).

    state: ``FilterState``; model: ``FilterModel``; policies: ``Policies`` (None = off);
    online: ``step`` (True) or ``solve`` (False). info: the estimate's particle ``index``
    into ``info['particles']`` (the population before resampling), its ``q`` and one-row
    ``frames``, ``weights``, ``ess``, ``ok`` (within tolerance), ``cost``, ``confidence``,
    the branch-hold ``switch`` record and ``warning``.
    """
    chain = model.chain
    motion, refine = policies.minimal_motion, policies.refinement
    restarts, hold = policies.restarts, policies.branch_hold
    prev = state.particles
    n = len(prev)
    held = state.held
    searchers = state.searchers if state.search_left > 0 else _NONE
    shadow = state.shadow
    kept = searchers if shadow < 0 else np.union1d(searchers, [shadow]).astype(int)
    # The searchers refined this iteration (``search_batch``: a rotating share of them).
    batch = policies.search.batch(searchers, state.search_left) \
        if policies.search is not None and len(searchers) else searchers
    refined = batch if shadow < 0 else np.union1d(batch, [shadow]).astype(int)

    # 1. Exploration: x_k^(i) ~ p(x_k | x_{k-1}^(i)), a random walk inside the limits
    # (the estimate's particle and the searchers of a new goal are carried over as they are).
    scale = np.exp(rng.uniform(model.log_min_scale, 0.0, size=n))
    if policies.keep_held and held >= 0:
        scale[held] = 0.0
    scale[kept] = 0.0
    particles = model.propagate(prev, scale, rng)
    if motion is not None and motion.has_turns:
        particles = motion.map_turns(particles, motion.turn_reference)
    frames = chain.frames(particles)
    if model.hard:
        particles, frames = model.enforce_hard(prev, particles, frames, scale, rng)

    # 2. Importance weights: w_k = w_{k-1} p(z_k | x_k) [x motion prior], evaluated where
    # the particles are after the move step (refinement).
    if online:
        task, soft, pos_err, ori_err = model.costs_and_errors(frames)
    else:
        task, soft = model.costs(frames)
    cost = task + soft
    settled, settled_cost = state.settled, state.settled_cost
    stuck = _NONE
    weighted = motion is not None and motion.weighted
    dist_ref = motion.distance(particles) if weighted else None
    if refine is not None:
        anchor = held if (online and held >= 0) else int(np.argmin(cost))
        # Idle: converged at the cost floor, or (online) on a held particle that converged
        # above it and whose cost has not changed since (a scene change that alters it, or
        # a new goal, wakes the refinement).
        floor = cost[anchor] <= refine.min_cost or (
            online and settled and held >= 0 and np.isfinite(settled_cost)
            and abs(cost[held] - settled_cost) <= SETTLE_GAIN * settled_cost)
        idle = (floor and not len(searchers)
                and (motion is None or settled or not online))
        if not idle:
            rank = -model.log_likelihood(task, soft)
            if weighted:
                rank = rank - model.temper(motion.log_prior(distance=dist_ref))
            idx = refine.choose(rank, held if online else -1, refined)
            sub = frames.subset(idx)
            pull = motion if (motion is not None and motion.pulling) else None
            guard = None
            if online and held >= 0 and model.goal_still > 0 and policies.branch_hold:
                # A still goal out of reach: the estimate's tool never moves away from it.
                guard = np.where(idx == held, _held_position_error(model, frames, held),
                                 np.inf)
            held_before = (particles[held].copy(), float(cost[held])) \
                if online and held >= 0 else None
            sub, _, improved, gained = refine.move(model, sub, cost[idx], pull, guard)
            stuck = idx[~improved]
            if improved.any():
                if motion is not None and motion.has_turns:
                    sub.q[:] = motion.map_turns(sub.q, motion.turn_reference)
                particles[idx] = sub.q
                frames.assign(idx, sub)
                frames.q = particles
                if online:
                    task[idx], soft[idx], pos_err[idx], ori_err[idx] = \
                        model.costs_and_errors(sub)
                else:
                    task[idx], soft[idx] = model.costs(sub)
                cost = task + soft
                if weighted:
                    dist_ref[idx] = motion.distance(sub.q)
            if online and held >= 0:
                pos = int(np.flatnonzero(idx == held)[0])
                if cost[held] <= refine.min_cost:
                    settled, settled_cost = bool(gained[pos] < 1e-12), np.inf
                elif _no_progress(held_before, particles[held], cost[held], model.resting):
                    # Converged above the floor: keep it where the refinement found it
                    # (its trials would keep wandering by rounding-level steps).
                    particles[held] = held_before[0]
                    frames.assign([held], chain.frames(held_before[0][None]))
                    frames.q = particles
                    task[held], soft[held], pos_err[held], ori_err[held] = (
                        v[0] for v in model.costs_and_errors(frames.subset([held])))
                    cost = task + soft
                    if weighted:
                        dist_ref[held] = motion.distance(held_before[0][None])[0]
                    settled, settled_cost = True, float(cost[held])
                else:
                    settled, settled_cost = False, np.inf
    loglik = model.log_likelihood(task, soft)
    if weighted:
        loglik = loglik + model.temper(motion.log_prior(distance=dist_ref))
    logw = state.logw + loglik
    logw -= logw.max()
    weights = np.exp(logw)
    weights /= weights.sum()

    # 3. Estimate: the MAP particle (Algorithm 1), unless minimal motion (the nearest
    # particle within tolerance) or branch hold (stay on the held branch) picks another.
    if online:
        ok = model.precise(frames, 1.0, (pos_err, ori_err))
    else:
        ok = np.zeros(n, dtype=bool)    # solve() judges its result itself (and the seed's)
    map_index = int(np.argmax(weights))
    switch, warning, approximate = None, False, False
    held_cost, held_stall = state.held_cost, state.held_stall
    if online and hold is not None and held >= 0:
        exact = model.precise(frames, hold.EXACT_FRACTION, (pos_err, ori_err))
        held_cost, held_stall = hold.progress(held_cost, held_stall, cost[held], exact[held])
        if motion is not None:
            jumps = motion.jump(particles, particles[held])
            if dist_ref is None:
                dist_ref = motion.distance(particles)
        else:
            jumps = np.max(np.abs(particles - particles[held]), axis=1)
            dist_ref = None
        index, reason = hold.choose(held, ok, cost, jumps, dist_ref, held_stall,
                                    model.goal_still, pos_err, model.recovering, exact)
        if reason is not None:
            switch = dict(reason=reason, distance=float(jumps[index]),
                          previous=particles[held].copy())
            held_cost, held_stall = cost[index], 0
        warning = hold.warning(held_stall, bool(ok[index]))
        approximate = hold.approximate(held_stall, model.goal_still, bool(ok[index]),
                                       bool(exact[index]))
    elif online:
        index = motion.nearest(particles, ok) if (motion is not None and ok.any()) \
            else map_index
    else:
        index = motion.nearest(particles, ok) if (motion is not None and ok.any()) \
            else int(np.argmin(cost))
    # What the solver's bookkeeping would otherwise compute again (one difference of the
    # whole population each): the estimate's distance from the reference and, while it stays
    # on the held particle, every particle's jump from it.
    info_jumps = jumps if (online and hold is not None and held >= 0 and index == held
                           and motion is not None) else None
    info = dict(index=index, map_index=map_index, q=particles[index].copy(),
                distance=None if dist_ref is None else float(dist_ref[index]),
                jumps=info_jumps,
                frames=frames.subset([index]), particles=particles, weights=weights,
                ok=ok, cost=cost, task=task, confidence=float(np.sum(weights[ok])),
                switch=switch, warning=warning, approximate=approximate, resampled=False,
                restarted=0)

    # 4. Selection: systematic resampling when the effective sample size is low. The
    # estimate's particle and the searchers keep their slots; the other slots are drawn
    # from the weights. While the held branch is stuck (no progress, outside tolerance)
    # its weight is left out of the draw, so a search for another branch is not swamped
    # by copies of the stuck particle.
    best_cost, stall = state.best_cost, state.stall
    if restarts is not None:
        best_cost, stall = restarts.progress(best_cost, stall, float(np.min(cost)))
    fixed = np.union1d(kept, [index]).astype(int) if len(kept) else np.array([index])
    if index == shadow:
        shadow = -1         # back on the branch it left: the shadow is the estimate now
    pool = weights.copy()
    pool[searchers] = 0.0
    if online and hold is not None and held_stall > 0 and not ok[index]:
        pool[index] = 0.0
    if pool.sum() <= 0.0:
        pool = weights.copy()
    pool /= pool.sum()
    ess = 1.0 / np.sum(pool * pool)
    info['ess'] = float(1.0 / np.sum(weights * weights))
    if ess < model.resample_threshold * n and n > len(fixed):
        free = np.ones(n, dtype=bool)
        free[fixed] = False
        keep = np.arange(n)
        keep[free] = _systematic_resample(pool, rng, n - len(fixed))
        particles = particles[keep]
        logw = np.zeros(n)
        info['resampled'] = True
    else:
        logw = np.log(np.maximum(weights, 1e-300))
    search_left = max(state.search_left - 1, 0)
    next_searchers = _NONE
    if len(searchers) and search_left > 0:
        # Searchers that reached the goal stay as ordinary particles (new slots are drawn);
        # those that stopped improving are redrawn in place.
        found = np.union1d(searchers[ok[searchers]], [index])    # the estimate's stays
        redraw = np.setdiff1d(np.intersect1d(searchers, stuck), found)
        keep_on = np.setdiff1d(searchers, np.union1d(found, redraw))
        spare = np.setdiff1d(np.arange(n), np.union1d(fixed, redraw))
        released = len(np.intersect1d(found, searchers))
        extra = rng.choice(spare, size=min(released, len(spare)), replace=False) \
            if released and len(spare) else _NONE
        fresh_slots = np.concatenate([redraw, extra]).astype(int)
        if len(fresh_slots):
            particles = particles.copy()
            fresh = policies.search.draw(len(fresh_slots), motion, chain, rng,
                                         motion.turn_reference,
                                         spread=policies.search.spread)
            particles[fresh_slots] = _feasible(
                model, fresh, particles[index], rng,
                lambda c: policies.search.draw(c, motion, chain, rng, motion.turn_reference,
                                               spread=policies.search.spread))
            logw = logw.copy()
            logw[fresh_slots] = mean_log_weight(logw)
        next_searchers = np.sort(np.concatenate([keep_on, fresh_slots])).astype(int)
    new_state = FilterState(particles=particles, logw=logw, held=index,
                            best_cost=best_cost, stall=stall, held_cost=held_cost,
                            held_stall=held_stall, settled=settled, settled_cost=settled_cost,
                            searchers=next_searchers, search_left=search_left,
                            shadow=shadow)
    if (restarts is not None and not len(searchers)
            and restarts.due(stall, float(np.min(task)), online)):
        new_state = _restart(new_state, model, policies, rng, online)
        info['restarted'] = new_state.restarted
    return new_state, info


_NONE = np.zeros(0, dtype=int)
_EMPTY = np.zeros(0)


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


SETTLE_MOVE = 1e-6
SETTLE_GAIN = 1e-9
RESTING_MOVE = 1e-4         # [rad or m] per joint and step: 0.6 deg/s at 100 Hz
RESTING_GAIN = 1e-6


def _held_position_error(model, frames, held):
    """Return the held particle's position error [m] (the guard of a still goal)."""
    pos, _ = model.errors(frames.subset([held]))
    return float(pos[0]) if not model.precise(frames.subset([held]))[0] else np.inf


def _restart(state, model, policies, rng, online):
    """Re-seed the lowest-weight particles (see ``Restarts``); mark the count on the state.

    In ``solve`` the draws are uniform inside the limits. Online, the estimate's particle
    stays, half the draws come from the motion prior and, with the nearest search on, the
    first ``search_count`` become searchers (a new search window).
    """
    restarts, motion, search = policies.restarts, policies.minimal_motion, policies.search
    protect = state.held if online else -1
    victims = restarts.victims(state.logw, [protect, state.shadow])
    particles, logw = state.particles.copy(), state.logw.copy()
    k = len(victims)
    searchers, search_left = _NONE, 0
    if k:
        if online and motion is not None:
            half = k // 2
            fresh = np.concatenate([motion.sample(half, rng),
                                    model.chain.random_configuration(rng, k - half)])
            if search is not None:
                c = min(search.count, k)
                fresh[:c] = search.draw(c, motion, model.chain, rng, motion.turn_reference)
                searchers = np.sort(victims[:c]).astype(int)
                search_left = search.window(len(searchers))
            if motion.has_turns:
                fresh = motion.map_turns(fresh, motion.turn_reference)
        else:
            fresh = model.chain.random_configuration(rng, k)
        fallback = particles[state.held if state.held >= 0 else 0]
        particles[victims] = _feasible(model, fresh, fallback, rng,
                                       lambda c: model.chain.random_configuration(rng, c))
        logw[victims] = mean_log_weight(state.logw)
        if not online:
            logw[:] = 0.0
    held = state.held
    if held in victims:
        held = -1
    return FilterState(particles=particles, logw=logw - logw.max(), held=held,
                       best_cost=np.inf, stall=0, held_cost=state.held_cost,
                       held_stall=state.held_stall, settled=state.settled,
                       settled_cost=state.settled_cost, restarted=k,
                       searchers=searchers, search_left=search_left, shadow=state.shadow)


def _feasible(model, fresh, fallback, rng, draw=None):
    """Return ``fresh`` (K, nq) with hard-constraint violators redrawn (``draw(k)``, at most
    ``max_redraws`` times), the rest replaced by copies of ``fallback`` (feasible)."""
    if not model.hard or not len(fresh):
        return fresh
    bad = model.violated(model.chain.frames(fresh))
    for _ in range(model.max_redraws if draw is not None else 0):
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        fresh[idx] = draw(len(idx))
        bad[idx] = model.violated(model.chain.frames(fresh[idx]))
    fresh[bad] = fallback
    return fresh


# ---------------------------------------------------------------------------- the solver
@register('smc')
class SmcSolver(Solver):
    """Sequential Monte Carlo IK filter (see the module docstring)."""

    Settings = SmcSettings

    def __init__(self, chain, settings=None):
        super().__init__(chain, settings)
        # Compile (or load) the kernels now, not inside the first timed solve or tick.
        kernels.ensure_ready(chain.records)
        self._configure()
        self._reset(self._q)

    # ------------------------------------------------------------------ setup
    def _configure(self):
        s = self.settings
        chain = self.chain
        self.rng = np.random.default_rng(None if s.seed < 0 else s.seed)
        scalar_types = [t for t in chain.joint_types if t != 'ball']
        if s.joint_noise_per_joint:
            if len(s.joint_noise_per_joint) != len(scalar_types):
                names = [n for n, t in zip(chain.joint_names, chain.joint_types) if t != 'ball']
                raise ParameterError(
                    f'joint_noise_per_joint needs {len(scalar_types)} values (one per 1-DOF joint'
                    f' of {names}); got {len(s.joint_noise_per_joint)}')
            noise = np.array(s.joint_noise_per_joint, dtype=float)
        else:
            noise = np.array([s.prismatic_noise if t == 'prismatic' else s.joint_noise
                              for t in scalar_types])
        self._scalar_noise = noise
        balls = chain.ball_joints
        if s.ball_noise_per_axis:
            if len(s.ball_noise_per_axis) != 3 * len(balls):
                raise ParameterError(f'ball_noise_per_axis needs {3 * len(balls)} values (3 per '
                                     f'ball joint); got {len(s.ball_noise_per_axis)}')
            self._ball_noise = np.array(s.ball_noise_per_axis, dtype=float).reshape(-1, 3)
        else:
            self._ball_noise = np.full((len(balls), 3), s.ball_noise)
        motion = (MinimalMotion(chain, s, self._scalar_noise, self._ball_noise)
                  if s.minimal_motion else None)
        search = NearestSearch(s) if (motion is not None and s.search_count > 0
                                      and s.search_iterations > 0) else None
        self._policies = Policies(
            minimal_motion=motion, search=search,
            refinement=Refinement(chain, s) if s.refine_count > 0 else None,
            restarts=Restarts(s) if s.restart_after > 0 else None,
            branch_hold=BranchHold(s) if s.branch_hold else None,
            keep_held=s.keep_map)
        # solve(): Algorithm 1 with refinement and restarts; minimal motion only chooses the
        # returned success and maps its turns (_iterate_solve), so the search is unchanged.
        self._offline_policies = Policies(
            refinement=self._policies.refinement, restarts=self._policies.restarts,
            keep_held=s.keep_map)
        # Online, once ``online_restart_limit`` restarts on one still goal brought it no
        # estimate within tolerance: the same policies without restarts (resting).
        self._resting_policies = replace(self._policies, restarts=None)
        self._selection = None if motion is None else motion.selection_only()

    @property
    def policies(self):
        """The ``Policies`` record the online step passes to ``filter_step``."""
        return self._policies

    def _on_settings_changed(self):
        self._model_cache = None
        state = self._state
        n_old = len(state.particles)
        self._configure()
        n = self.settings.num_particles
        if n != n_old:
            # Keep the estimate's particle, then the heaviest others (the MAP index stays
            # valid: it becomes 0).
            order = np.argsort(-state.logw, kind='stable')
            if state.held >= 0:
                order = np.r_[state.held, order[order != state.held]]
            idx = np.resize(order, n)
            state = FilterState(particles=state.particles[idx].copy(),
                                logw=state.logw[idx].copy(),
                                held=0 if state.held >= 0 else -1,
                                best_cost=state.best_cost, stall=state.stall,
                                held_cost=state.held_cost, held_stall=state.held_stall,
                                settled=state.settled, settled_cost=state.settled_cost)
            self._recovery_left = self._recovery_search = 0
            self._shadow_on = False
        self._state = state

    def _reset(self, q):
        n = self.settings.num_particles
        # Every particle starts at q; particle 0 is the estimate's (held) particle.
        self._state = FilterState(particles=np.repeat(q[None], n, axis=0), logw=np.zeros(n),
                                  held=0)
        self._anneal_level = 1.0
        self._last_goal_vec = None
        self._goal_still = 0
        self._candidate_ok = True
        self._left_tolerance = False
        self._searched_exact = False
        self._windows, self._searching, self._window_start = 0, False, np.inf
        self._anchor = q.copy()
        self._memory = q.copy()
        self._recovery_left = self._recovery_search = 0
        self._shadow_on = False
        self._tolerance = (self.settings.solution_tolerance_position,
                           self.settings.solution_tolerance_orientation)
        self._alternatives = []
        self._alternatives_key = None       # what the last list was computed from
        self._archive = []
        self._switch_count = 0
        self._reference = q.copy()
        self._restarts_still = 0
        self._constraints_key = None

    @property
    def settled(self):
        """True when the online filter has settled: the estimate's particle satisfies the goal
        (or the filter rests: ``resting``) and its refinement converged (idle), no search
        window, recovery or shadow runs, and the annealing has ended. Its next steps then
        keep that particle as it is (no random step, no refinement); another particle could
        replace it only by landing, unrefined, within a tenth of the tolerance of the goal
        farther than ``branch_jump`` from it."""
        state = self._state
        return bool(state.settled and state.held >= 0
                    and (self._candidate_ok or self.resting)
                    and state.search_left == 0 and state.shadow < 0
                    and self._recovery_left == 0 and self._anneal_level <= 1.0
                    and self._policies.keep_held
                    and np.array_equal(self._estimate, state.particles[state.held]))

    @property
    def resting(self):
        """True when ``online_restart_limit`` restarts on the current goal, unchanged, with
        the same constraints, brought no estimate within tolerance: the goal is out of reach
        (too far, in collision, blocked). The filter then keeps its best estimate and stops
        re-seeding (each restart redraws the population and reopens the nearest search:
        milliseconds per step, forever) until the goal or a constraint (or its ``version``)
        changes; with a converged refinement it is ``settled``, so the node steps it only
        every ``rest_step_interval``."""
        limit = self.settings.online_restart_limit
        return limit > 0 and self._restarts_still >= limit and not self._candidate_ok

    def _start_solve(self, q_seed, targets):
        self.reset(q_seed)
        s = self.settings
        n = s.num_particles
        k = int(round(s.init_uniform_fraction * (n - 1)))
        if k > 0:
            fresh = self.chain.random_configuration(self.rng, k)
            if any(c.hard for c in self.constraints):
                fresh = _feasible(self._model(targets), fresh, self._q, self.rng,
                                  lambda c: self.chain.random_configuration(self.rng, c))
            self._state.particles[n - k:] = fresh
        self._tolerance = self._solve_tolerance
        self._on_goal_changed(targets, force=True)

    def _first_stage(self, targets, q_seed, tolerance):
        """solve()'s first stage: the seed, then ``seed_rows - 1`` draws of the filter's
        uniform proposal, each refined alone by compiled LM steps (the refinement's own move
        step) until one meets the tolerance. Returns (q, position error, orientation error)
        of that row, or None (then the filter runs as before, from the seed).

        Only where it is the same problem the refinement solves in one compiled kernel: one
        plain pose target, no hard constraints, no ball joints, kernels compiled. The seed
        row goes first, so a seed on (or near) a solution's branch keeps it; a draw is a
        random branch, which the filter's nearest-success choice would not necessarily
        pick: the price of answering most queries in tens of microseconds (measured in
        docs/smc.md and docs/benchmarks.md, `bench speed`).
        """
        s = self.settings
        refinement = self._policies.refinement
        if s.seed_rows < 1 or refinement is None or not _fast_pose_goal(self.chain, targets,
                                                                         self.constraints):
            return None
        chain = self.chain
        term = targets[0]
        rows = np.empty((s.seed_rows, chain.nq))
        rows[0] = q_seed
        if s.seed_rows > 1:
            rows[1:] = chain.random_configuration(self.rng, s.seed_rows - 1)
        index, pos, ori = kernels.first_solution(
            *chain.records, term.goal_record(chain, tolerance),
            (int(s.seed_steps), refinement.alphas, refinement.damping, refinement.max_step),
            rows)
        if index < 0:
            return None
        q = rows[index]
        motion = self._selection
        if motion is not None and motion.has_turns:
            q = motion.map_turns(q[None], q_seed)[0]
        return q, float(pos), float(ori)

    def _make_goal(self, goal):
        return self._as_goal(goal, sigma_position=self.settings.sigma_position,
                             sigma_orientation=self.settings.sigma_orientation)

    # ------------------------------------------------------------------ goal handling
    def _on_goal_changed(self, targets, force=False):
        """Re-arm on a new goal: reference, annealing, stall counters, re-seeding."""
        vec = np.concatenate([_goal_vector(t) for t in targets])
        s = self.settings
        if force or self._last_goal_vec is None or vec.shape != self._last_goal_vec.shape:
            moved = np.inf
        else:
            moved = np.max(np.abs(vec - self._last_goal_vec) / _goal_scale(targets, s))
        self._last_goal_vec = vec
        self._goal_still = -1           # counted up to 0 by the coming step
        self._restarts_still = 0
        self._searched_exact = False
        state = self._state
        state.settled = False
        motion = self._policies.minimal_motion
        if moved > s.goal_change_threshold:
            self._end_recovery()        # a new goal: the motion starts from the anchor
            self._archive = []
            self._left_tolerance = False
            self._candidate_ok = False      # nothing satisfies the new goal yet
            self._windows, self._searching = 0, False
        if not force and self._recovery_left <= 0:
            # The motion starts from the last estimate that satisfied its goal.
            self._reference = self._anchor.copy()
        if moved > s.goal_change_threshold:
            self._anneal_level = s.anneal_initial
            state.best_cost, state.stall = np.inf, 0
            state.held_cost, state.held_stall = np.inf, 0
            if motion is not None and not force and s.reseed_fraction > 0.0:
                self._reseed(s.reseed_fraction)

    def _reseed(self, fraction, starts=(), spread=1.0):
        """Redraw ``fraction`` of the particles (lowest weights) around the reference: the
        motion prior's proposal. The first ``search_count`` of them (a third drawn
        uniformly, for far branches) become searchers, refined every iteration for
        ``search_iterations`` iterations so the nearest branch is found early."""
        s = self.settings
        state = self._state
        n = len(state.particles)
        k = min(max(int(round(fraction * n)), s.search_count), n - 1)
        if k <= 0:
            return
        order = np.argsort(state.logw, kind='stable')
        order = order[(order != state.held) & (order != state.shadow)]
        victims = order[:k]
        model = self._model(self._targets)
        motion = self._policies.minimal_motion
        motion.reference = self._reference
        search = self._policies.search
        searchers = min(search.count, k) if search is not None else 0
        fresh = motion.sample(k, self.rng)
        if searchers:
            search.spread = spread
            fresh[:searchers] = search.draw(searchers, motion, self.chain, self.rng,
                                            self._reference, starts, spread)
        if motion.has_turns:
            fresh = motion.map_turns(fresh, self._reference)
        fallback = state.particles[max(state.held, 0)]
        state.particles[victims] = _feasible(model, fresh, fallback, self.rng,
                                             lambda c: motion.sample(c, self.rng))
        state.logw[victims] = mean_log_weight(state.logw)
        state.searchers = np.sort(victims[:searchers]).astype(int)
        state.search_left = search.window(searchers) if searchers else 0
        self._windows += 1
        self._window_start = self._found_distance()

    def _found_distance(self, info=None):
        """Return the weighted distance [rad] of the estimate's particle from the reference
        (inf while it does not satisfy the goal); ``info``: the last ``filter_step``'s, whose
        ``distance`` is it while the state still holds that particle."""
        if not self._candidate_ok or self._policies.minimal_motion is None:
            return np.inf
        state = self._state
        if info is not None and info['distance'] is not None and state.held == info['index']:
            return info['distance']
        q = state.particles[max(state.held, 0)]
        return float(self._policies.minimal_motion.distance(q[None], self._reference)[0])

    def _model(self, targets):
        model = self._model_cache
        if (model is None or model.targets is not targets or model.constraints is not
                self.constraints or model.tolerance != self._tolerance):
            model = FilterModel(self.chain, self.settings, self._scalar_noise,
                                self._ball_noise, targets, self.constraints,
                                self._anneal_level, self._tolerance)
            self._model_cache = model
        model.temperature = self._anneal_level
        model.goal_still = self._goal_still
        model.recovering = self._recovery_search > 0
        model.resting = self.resting
        return model

    _model_cache = None

    # ------------------------------------------------------------------ the filter
    def _iterate_solve(self, targets):
        """Run one ``solve`` iteration: Algorithm 1 with refinement and restarts (minimal
        motion only chooses the result, in ``_solve_result``)."""
        model = self._model(targets)
        state, info = filter_step(self._state, model, self._offline_policies, self.rng, False)
        if state.restarted:
            self._anneal_level = self.settings.anneal_initial
        self._anneal_level = max(1.0, self._anneal_level * self.settings.anneal_rate)
        self._state = state
        self.last_info = {
            'ess': info['ess'], 'temperature': float(model.temperature), 'map': info['q'],
            'particles': info['particles'], 'weights': info['weights'],
            'resampled': info['resampled'], 'restarted': info['restarted'],
        }
        self._last_step = info
        return info['q'], info['frames']

    def _solve_result(self, q, solved):
        """Return the success nearest the seed among the 16 best particles of the last
        iteration (``solve`` stops at the first iteration with a success), whole turns of
        joints spanning more than 2 pi mapped towards the seed (also when not solved)."""
        motion = self._selection
        if motion is None:
            return q
        ref = self._reference
        if solved:
            info = self._last_step
            cost, particles = info['cost'], info['particles']
            best = np.argpartition(cost, 15)[:16] if len(cost) > 16 else np.arange(len(cost))
            pos, ori = task_errors(self._targets, self.chain.frames(particles[best]))
            ok = (pos <= self._solve_tolerance[0]) & (ori <= self._solve_tolerance[1])
            if ok.any():
                cands = particles[best[ok]]
                if motion.has_turns:
                    cands = motion.map_turns(cands, ref)
                return cands[int(np.argmin(motion.distance(cands, ref)))].copy()
        return motion.map_turns(q[None], ref)[0] if motion.has_turns else q

    def _iterate(self, targets, online):
        if not online:
            return self._iterate_solve(targets)
        self._goal_still += 1
        constraints = StateKey(constraints=self.constraints)
        if constraints != self._constraints_key:
            self._constraints_key = constraints   # a constraint, scene or pairs changed
            self._restarts_still = 0
        resting = self.resting
        policies = self._resting_policies if resting else self._policies
        motion = policies.minimal_motion
        if motion is not None:
            motion.reference = self._reference
            motion.turn_reference = self._reference
        model = self._model(targets)
        state, info = filter_step(self._state, model, policies, self.rng, online)
        if state.restarted:
            # Re-widen Sigma_z so the re-seeded particles survive resampling long enough
            # to be refined.
            self._anneal_level = self.settings.anneal_initial
            self._restarts_still += 1
        self._anneal_level = max(1.0, self._anneal_level * self.settings.anneal_rate)
        self._state = state
        switch = info['switch']
        if switch is not None:
            self._switch_count += 1
        was_ok = self._candidate_ok
        self._candidate_ok = bool(info['ok'][info['index']])
        self._searching = self._searching or bool(len(self._state.searchers))
        self._recovery_left = max(self._recovery_left - 1, 0)
        self._recovery_search = max(self._recovery_search - 1, 0)
        if self._recovery_left == 0 or (self._shadow_on and state.shadow < 0):
            self._end_recovery()
        if online and was_ok and not self._candidate_ok:
            self._left_tolerance = True         # it satisfied this goal stream, then left
        if (online and not was_ok and self._candidate_ok and self._left_tolerance
                and policies.search is not None):
            self._left_tolerance = False
            self._start_recovery(info['q'])
        elif (online and policies.search is not None and self._searching
              and state.search_left == 0 and self._candidate_ok
              and self._goal_still >= policies.search.iterations
              and self._windows < policies.search.MAX_WINDOWS
              and ((found := self._found_distance(info)) < 0.98 * self._window_start
                   or found > policies.search.FAR * np.sqrt(self.chain.nv))):
            # The last window found a nearer solution, or the best is far (many branches
            # lie within it): another window.
            spread = max(1.0, found / (self.settings.motion_sigma * np.sqrt(self.chain.nv)))
            self._reseed(self.settings.reseed_fraction, starts=[self._reference], spread=spread)
        elif (online and switch is not None and switch['reason'] != 'nearer solution'
              and policies.search is not None):
            # The held branch could not (exactly) reach the goal and the estimate jumped to
            # the first branch found that does: keep looking for a nearer one.
            self._reseed(self.settings.reseed_fraction, starts=[self._reference])
        elif (online and info['approximate'] and not self._searched_exact
              and policies.search is not None and state.search_left == 0):
            # Within tolerance but stuck short of exact (a local minimum against a joint
            # limit): look once per goal for an exact solution (BranchHold takes the nearest).
            self._searched_exact = True
            self._reseed(self.settings.reseed_fraction)
        if online:
            self._update_archive(info)
        self.last_info = {
            'ess': info['ess'], 'temperature': float(model.temperature), 'map': info['q'],
            'particles': info['particles'], 'weights': info['weights'],
            'resampled': info['resampled'], 'restarted': info['restarted'],
            'confidence': info['confidence'], 'within_tolerance': self._candidate_ok,
            'branch_switch': switch, 'branch_switches': self._switch_count,
            'branch_warning': info['warning'],
            'reference': self._reference.copy(),
            'resting': resting,
        }
        self._last_step = info
        return info['q'], info['frames']

    def _start_recovery(self, q):
        """Back within tolerance after a stretch out of it (out of reach, or through a
        singularity): look for the branch the estimate left on.

        For ``recovery_iterations`` iterations the reference is the branch memory (where
        the estimate satisfied its goals a moment before it left: at the edge of the
        workspace the last such estimate can be the singular configuration itself, between
        two branches); a search window starts there (from the memory and the last estimate
        that satisfied its goal); and, when the estimate came back away from the memory,
        that last estimate is kept as a shadow particle (no random walk, always refined,
        never resampled away): the left branch's hypothesis. Whichever satisfies the goal
        nearest the memory becomes the estimate (``BranchHold``): the arm comes back on the
        branch it left on as soon as that branch reaches the goal again.
        """
        s = self.settings
        motion = self._policies.minimal_motion
        self._reference = self._memory.copy()
        search = self._policies.search
        self._recovery_search = search.window(search.count)
        self._reseed(s.reseed_fraction, starts=[self._memory, self._anchor])
        state = self._state
        self._recovery_left = self._recovery_search     # no shadow: the search window only
        if (s.recovery_iterations > 0 and state.shadow < 0
                and motion.jump(q[None], self._memory)[0] > s.branch_jump):
            order = np.argsort(state.logw, kind='stable')
            free = order[~np.isin(order, np.r_[state.held, state.searchers])]
            if len(free):
                state.shadow = int(free[0])
                state.particles[state.shadow] = self._anchor
                state.logw[state.shadow] = np.max(state.logw)
                self._shadow_on = True
                self._recovery_left = max(s.recovery_iterations, self._recovery_search)

    def _end_recovery(self):
        self._recovery_left = 0
        self._recovery_search = 0
        self._state.shadow = -1
        self._shadow_on = False

    # ------------------------------------------------------------------ estimate (eq. 15)
    def _smooth(self, previous, candidate):
        alpha = self.settings.smoothing_alpha
        if alpha >= 1.0:
            out = candidate.copy()
            ok = self._candidate_ok
        else:
            chain = self.chain
            # A convex combination of in-limit points stays in the box; clip guards rounding.
            out = self._interpolate(previous, candidate, alpha)
            ok = bool(self._model(self._targets).within_tolerance(chain.frames(out))[0])
        if ok:
            self._anchor = out.copy()
            # Branch memory: an exponential average of the estimates that satisfied their
            # goal (time constant 1 / MEMORY_RATE iterations).
            self._memory = self._interpolate(self._memory, out, self.MEMORY_RATE)
        return out

    MEMORY_RATE = 0.05

    def _interpolate(self, a, b, t):
        """Return interpolate(a, b, t) (eq. 15): linear for 1-DOF joints, slerp for balls."""
        chain = self.chain
        out = a + t * (b - a)
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            out[bq] = quat_slerp(a[bq], b[bq], t)
        return chain.clip(out)

    # ------------------------------------------------------------------ alternatives
    ARCHIVE_SIZE = 8

    def alternatives(self, max_count=5):
        """Return up to ``max_count`` distinct solution branches the filter holds, best first.

        Candidates: the estimate's particle; the particles of the last step grouped
        greedily, lowest cost first (a particle joins the first group whose leader is within
        ``branch_jump``, largest weighted joint difference with whole turns mapped), each
        represented by its leader; and the branch archive (distinct configurations that
        satisfied the current goal since it arrived: the nearest search finds several, and
        resampling would forget them). Each candidate is refined on a copy (``refine_steps``
        LM steps towards the goal, sliding towards the current estimate; the filter is not
        changed); candidates that end on the same branch are merged. ``mass``: the share of
        the posterior weight of the particles nearest each branch (within ``branch_jump``).
        Order: branches within the solution tolerance first, nearest the estimate first;
        then the others by cost. The estimate's branch is always listed (``held=True``).
        Returns a list of ``Alternative`` records (empty before the first step).
        """
        max_count = int(max_count)
        if max_count < 1:
            raise ParameterError(f'max_count must be >= 1; got {max_count}')
        info = getattr(self, '_last_step', None)
        if info is None or self._targets is None:
            return []
        # Nothing they depend on changed since the last call (the arm rests on a settled
        # goal, its steps skipped): the same list, without the refinement (~10 ms). While the
        # filter stays settled on one estimate its rest steps do not count as a change: the
        # branches were refined from that estimate to that goal already (the masses stay
        # those of the step that settled it).
        settled = self.settled
        key = StateKey((None if settled else info, self._targets, self._policies,
                        self.settings),
                       (max_count, len(self._archive), self._estimate.tobytes(), settled),
                       self.constraints)
        if key == self._alternatives_key:
            return list(self._alternatives)
        records = self._compute_alternatives(info, max_count)
        self._alternatives, self._alternatives_key = records, key
        return list(records)

    def _compute_alternatives(self, info, max_count):
        s = self.settings
        chain = self.chain
        particles, weights, cost = info['particles'], info['weights'], info['cost']
        estimate = self._estimate
        motion = self._policies.minimal_motion or MinimalMotion(
            chain, s.replace(minimal_motion=True), self._scalar_noise, self._ball_noise)
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
                   for q in self._archive]
        q = np.array([mapped[held]] + others + archive)
        model = self._model(self._targets)
        model.temperature = 1.0
        frames = chain.frames(q)
        rep_cost = model.cost(frames)
        refine = self._policies.refinement or Refinement(chain, s.replace(refine_count=1))
        motion.reference = estimate
        frames, rep_cost, _, _ = refine.move(model, frames, rep_cost, motion)
        reps = frames.q
        ok = model.within_tolerance(frames)
        # Merge candidates that ended on one branch (the estimate's first, then by cost).
        keep = [0]
        for i in sorted(range(1, len(reps)), key=lambda i: (not ok[i], rep_cost[i])):
            if np.all(motion.jump(reps[keep], reps[i]) > s.branch_jump):
                keep.append(i)
        keep = np.array(keep)
        reps, rep_cost, ok = reps[keep], rep_cost[keep], ok[keep]
        pos, ori = task_errors(self._targets, chain.frames(reps))
        dist = motion.distance(reps, estimate)
        # Posterior mass: each particle counts for the nearest branch within branch_jump.
        jumps = np.stack([motion.jump(mapped, r) for r in reps], axis=1)     # (N, R)
        owner = np.where(np.min(jumps, axis=1) <= s.branch_jump, np.argmin(jumps, axis=1), -1)
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

    def _update_archive(self, info):
        """Remember distinct configurations that satisfy the current goal (the branch
        archive that ``alternatives`` also lists; cleared when a new goal arrives)."""
        ok = info['ok']
        if not ok.any():
            return
        motion = self._policies.minimal_motion
        if motion is None:
            return
        idx = np.flatnonzero(ok)
        # Most are on the estimate's branch: drop those in one vectorised test.
        jumps = info['jumps'][idx] if info['jumps'] is not None \
            else motion.jump(info['particles'][idx], info['q'])
        idx = idx[jumps > self.settings.branch_jump]
        if not len(idx):
            return
        idx = idx[np.argsort(info['cost'][idx])][:16]
        archive = self._archive
        known = [info['q']] + archive
        for i in idx:
            q = info['particles'][i]
            if np.all(motion.jump(np.array(known), q) > self.settings.branch_jump):
                known.append(q.copy())
                archive.append(q.copy())
        del archive[:max(0, len(archive) - self.ARCHIVE_SIZE)]

    def select_alternative(self, choice):
        """Move the estimate to a branch: an index into the last ``alternatives()`` list,
        or a configuration (nq,). From then on the held branch is that one (the next steps
        refine it towards the goal); ``last_info['branch_switch']`` records the move."""
        q = self._alternative_q(choice)
        state = self._state
        held = state.held if state.held >= 0 else int(np.argmin(state.logw))
        previous = self._estimate.copy()
        state.particles[held] = q
        state.logw[:] = 0.0
        state.held = held
        state.held_cost, state.held_stall, state.settled = np.inf, 0, False
        self._estimate = q.copy()
        self._anchor = q.copy()
        self._memory = q.copy()
        self._end_recovery()
        self._reference = q.copy()
        self._switch_count += 1
        switch = dict(reason='selected', distance=float(np.max(np.abs(q - previous))),
                      previous=previous)
        self.last_info = dict(self.last_info, branch_switch=switch,
                              branch_switches=self._switch_count, map=q.copy())
        return q.copy()


# ---------------------------------------------------------------------- helpers
def _fast_pose_goal(chain, targets, constraints):
    """Return whether a solve is one plain pose target the compiled kernels handle whole."""
    if not kernels.ENABLED or chain.has_ball_joints or len(targets) != 1 or any(
            c.hard for c in constraints):
        return False
    term = targets[0]
    return (type(term) is PoseTarget and term.covariance is None
            and chain.link_anchor(term.link)[0] >= 0)


def _implements(term, method):
    """Return whether ``term`` overrides ``Term.<method>`` (the base raises)."""
    return getattr(type(term), method, None) is not getattr(Term, method)


def _sum_costs(terms, frames, n):
    total = np.zeros(n)
    for t in terms:
        total = total + t.cost(frames)
    return total


def _systematic_resample(weights, rng, count=None):
    """Return ``count`` (default len(weights)) indices drawn by systematic resampling."""
    n = len(weights) if count is None else int(count)
    positions = (rng.uniform() + np.arange(n)) / n
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    return np.searchsorted(cumulative, positions)


def _assign_frames(frames, idx, sub, particles):
    frames.rot[:, idx] = sub.rot
    frames.pos[:, idx] = sub.pos
    frames.q = particles


def _goal_vector(target):
    if getattr(target, 'pose', None) is not None:
        return np.concatenate((target.pose[:3, :3].ravel(), target.pose[:3, 3]))
    if getattr(target, 'position', None) is not None:
        return np.asarray(target.position, dtype=float)
    if getattr(target, 'rotation', None) is not None:
        return np.ravel(target.rotation)
    return np.zeros(0)


def _goal_scale(targets, s):
    """Return per-entry scales of the goal vectors: sigma_orientation for rotation entries."""
    out = []
    for t in targets:
        if getattr(t, 'pose', None) is not None:
            out.append(np.repeat((s.sigma_orientation, s.sigma_position), (9, 3)))
        elif getattr(t, 'position', None) is not None:
            out.append(np.full(3, s.sigma_position))
        elif getattr(t, 'rotation', None) is not None:
            out.append(np.full(9, s.sigma_orientation))
    return np.concatenate(out) if out else np.ones(0)
