"""The Sequential Monte Carlo IK filter of Courty & Arnaud (seed 000, Algorithm 1).

State: the whole joint vector. Each iteration:

1. exploration: every particle takes a random-walk step, Gaussian for 1-DOF joints and
   QuTem (a Gaussian in the tangent space, wrapped by the exponential map; Appendix A)
   for ball joints; each joint has its own noise. Joint limits and hard constraints are
   enforced by accept/reject with at most ``max_redraws`` redraws; what still fails
   keeps its previous (valid) value. The paper's rejection loop is unbounded ("may lead
   to ... endless rejection"); ours is bounded and its fallback is a zero step, so every
   particle stays feasible and the step always ends.
2. weights: w_k = w_{k-1} p(z_k | x_k), p = exp(-|task|^2_{Sigma_z} - sum |C_i|^2_{Sigma_i})
   (eq. 13-14) in log space. Sigma_z is annealed (seed 001 section 4: "iteratively
   reduce Sigma_z"): multiplied by ``anneal_initial`` when a goal arrives and shrunk by
   ``anneal_rate`` each iteration down to the settings' sigma_position/orientation.
3. estimate: MAP particle, then x_k = interpolate(x_{k-1}, MAP_k, alpha) (eq. 15) with slerp
   for ball joints and linear interpolation otherwise.
4. systematic resampling when the effective sample size falls below
   ``resample_threshold * num_particles``.

Additions for precision and robustness (each a setting; measured in docs/benchmarks.md):

- refinement: the ``refine_count`` best particles take ``refine_steps`` damped
  least-squares (Levenberg-Marquardt) steps on the same negative log-likelihood the
  weights use, accepted only when they lower it. The particles keep exploring; the
  refinement brings millimetre precision in a few iterations.
- multi-scale proposal: each particle's noise is scaled by a factor drawn log-uniformly in
  [min_noise_scale, 1], so coarse and fine moves coexist without tuning a schedule.
- elitism (``keep_map``): the MAP particle is carried over without noise, so the best
  estimate never gets worse while the goal is fixed.
- restarts: when the best cost has not improved for ``restart_after`` iterations, the
  ``restart_fraction`` lowest-weight particles are redrawn uniformly inside the limits.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from ..rotations import quat_from_rotvec, quat_multiply, quat_slerp
from .base import Solver, SolverSettings, _check, register, stack_terms

__all__ = ['SmcSettings', 'SmcSolver']


@dataclass(frozen=True)
class SmcSettings(SolverSettings):
    """Settings of the SMC IK filter (field names are the ROS parameter names)."""

    num_particles: int = 100            # N, particles
    seed: int = -1                      # random seed; -1: fresh entropy each construction
    joint_noise: float = 0.1            # [rad] std of the revolute random walk per iteration
    prismatic_noise: float = 0.02       # [m] std of the prismatic random walk
    ball_noise: float = 0.1             # [rad] std of the QuTem (ball joint) noise, per axis
    joint_noise_per_joint: tuple = ()   # [rad or m] one std per 1-DOF joint; () = the above
    ball_noise_per_axis: tuple = ()     # [rad] 3 stds per ball joint (QuTem diag); () = above
    min_noise_scale: float = 0.01       # smallest per-particle noise factor (log-uniform to 1)
    sigma_position: float = 0.01        # [m] task noise std, position (Sigma_z)
    sigma_orientation: float = 0.05     # [rad] task noise std, orientation (Sigma_z)
    anneal_initial: float = 10.0        # Sigma_z std multiplier when a new goal arrives
    anneal_rate: float = 0.8            # per-iteration factor on that multiplier (down to 1)
    smoothing_alpha: float = 0.1        # eq. 15 interpolation factor (1: no smoothing)
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
    online_restarts: bool = True        # also re-seed in online use (the MAP is kept)
    restart_min_cost: float = 0.01      # no restart once the best task cost is below this
    init_uniform_fraction: float = 0.5  # solve(): share of particles drawn uniformly at start
    keep_map: bool = True               # carry the MAP particle over without noise
    branch_switch_ratio: float = 0.5    # online: a far particle becomes MAP only below this
    #                                     share of the held MAP's cost (1: no hysteresis)
    branch_jump: float = 0.5            # [rad or m] 'far' = largest joint difference above this
    goal_change_threshold: float = 3.0  # goal moves > this many sigmas re-widen Sigma_z

    def validate(self):
        _check(self.num_particles >= 1, f'num_particles must be >= 1; got {self.num_particles}')
        _check(self.seed >= -1, f'seed must be >= 0, or -1 for a random seed; got {self.seed}')
        for name in ('joint_noise', 'prismatic_noise', 'ball_noise', 'sigma_position',
                     'sigma_orientation'):
            _check(getattr(self, name) > 0.0, f'{name} must be > 0; got {getattr(self, name)}')
        _check(0.0 < self.min_noise_scale <= 1.0,
               f'min_noise_scale must be in (0, 1]; got {self.min_noise_scale}')
        _check(self.anneal_initial >= 1.0, f'anneal_initial must be >= 1; got {self.anneal_initial}')
        _check(0.0 < self.anneal_rate <= 1.0, f'anneal_rate must be in (0, 1]; got {self.anneal_rate}')
        _check(0.0 < self.smoothing_alpha <= 1.0,
               f'smoothing_alpha must be in (0, 1]; got {self.smoothing_alpha}')
        _check(0.0 <= self.resample_threshold <= 1.0,
               f'resample_threshold must be in [0, 1]; got {self.resample_threshold}')
        _check(self.max_redraws >= 0, f'max_redraws must be >= 0; got {self.max_redraws}')
        _check(0 <= self.refine_count <= self.num_particles,
               f'refine_count must be in [0, num_particles={self.num_particles}]; '
               f'got {self.refine_count}')
        _check(self.refine_steps >= 1, f'refine_steps must be >= 1; got {self.refine_steps}')
        _check(self.refine_damping >= 0.0, f'refine_damping must be >= 0; got {self.refine_damping}')
        _check(self.refine_min_cost >= 0.0,
               f'refine_min_cost must be >= 0; got {self.refine_min_cost}')
        _check(self.max_step > 0.0, f'max_step must be > 0; got {self.max_step}')
        _check(self.restart_after >= 0, f'restart_after must be >= 0 (0: off); got {self.restart_after}')
        _check(0.0 <= self.stall_tolerance < 1.0,
               f'stall_tolerance must be in [0, 1); got {self.stall_tolerance}')
        _check(0.0 <= self.restart_fraction <= 1.0,
               f'restart_fraction must be in [0, 1]; got {self.restart_fraction}')
        _check(0.0 <= self.init_uniform_fraction <= 1.0,
               f'init_uniform_fraction must be in [0, 1]; got {self.init_uniform_fraction}')
        _check(self.restart_min_cost >= 0.0,
               f'restart_min_cost must be >= 0; got {self.restart_min_cost}')
        _check(0.0 < self.branch_switch_ratio <= 1.0,
               f'branch_switch_ratio must be in (0, 1]; got {self.branch_switch_ratio}')
        _check(self.branch_jump >= 0.0, f'branch_jump must be >= 0; got {self.branch_jump}')
        _check(self.goal_change_threshold >= 0.0,
               f'goal_change_threshold must be >= 0; got {self.goal_change_threshold}')
        for v in self.joint_noise_per_joint + self.ball_noise_per_axis:
            _check(v > 0.0, f'per-joint noise values must be > 0; got {v}')


@register('smc')
class SmcSolver(Solver):
    """Sequential Monte Carlo IK filter (see the module docstring)."""

    Settings = SmcSettings

    def __init__(self, chain, settings=None):
        super().__init__(chain, settings)
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
                raise ParameterError(
                    f'joint_noise_per_joint needs {len(scalar_types)} values (one per 1-DOF joint'
                    f' of {[n for n, t in zip(chain.joint_names, chain.joint_types) if t != "ball"]});'
                    f' got {len(s.joint_noise_per_joint)}')
            noise = np.array(s.joint_noise_per_joint, dtype=float)
        else:
            noise = np.array([s.prismatic_noise if t == 'prismatic' else s.joint_noise
                              for t in scalar_types])
        self._scalar_noise = noise
        balls = chain._ball_slices
        if s.ball_noise_per_axis:
            if len(s.ball_noise_per_axis) != 3 * len(balls):
                raise ParameterError(f'ball_noise_per_axis needs {3 * len(balls)} values (3 per '
                                     f'ball joint); got {len(s.ball_noise_per_axis)}')
            self._ball_noise = np.array(s.ball_noise_per_axis, dtype=float).reshape(-1, 3)
        else:
            self._ball_noise = np.full((len(balls), 3), s.ball_noise)
        self._log_min_scale = np.log(s.min_noise_scale)
        self._line_search = np.array([1.0, 0.5, 0.25])

    def _on_settings_changed(self):
        particles, logw = self._particles, self._logw
        n_old = len(particles)
        self._configure()
        n = self.settings.num_particles
        if n != n_old:
            idx = np.arange(n) % n_old
            particles, logw = particles[idx], logw[idx]
        self._particles = particles.copy()
        self._logw = logw.copy()
        self._map_index = min(self._map_index, n - 1)

    def _reset(self, q):
        n = self.settings.num_particles
        self._particles = np.tile(q, (n, 1))
        self._logw = np.zeros(n)
        self._map_index = 0
        self._temperature = 1.0
        self._anneal_level = 1.0
        self._best_cost = np.inf
        self._stall = 0
        self._last_goal_vec = None
        self._has_map = False

    def _start_solve(self, q_seed, targets):
        self.reset(q_seed)
        s = self.settings
        n = s.num_particles
        k = int(round(s.init_uniform_fraction * (n - 1)))
        if k > 0:
            self._particles[n - k:] = self.chain.random_configuration(self.rng, k)
        self._on_goal_changed(targets, force=True)

    # ------------------------------------------------------------------ goal handling
    def _on_goal_changed(self, targets, force=False):
        vec = np.concatenate([_goal_vector(t) for t in targets])
        s = self.settings
        if force or self._last_goal_vec is None or vec.shape != self._last_goal_vec.shape:
            moved = np.inf
        else:
            moved = np.max(np.abs(vec - self._last_goal_vec) / _goal_scale(targets, s))
        self._last_goal_vec = vec
        if moved > s.goal_change_threshold:
            self._anneal_level = s.anneal_initial
            self._best_cost = np.inf
            self._stall = 0

    # ------------------------------------------------------------------ the filter
    def _iterate(self, targets, online):
        s = self.settings
        chain = self.chain
        prev = self._particles
        n = len(prev)
        scale = np.exp(self.rng.uniform(self._log_min_scale, 0.0, size=n))
        if s.keep_map:
            scale[self._map_index] = 0.0
        # 1. exploration with bounded accept/reject.
        particles = self._propagate(prev, scale)
        frames = chain.frames(particles)
        hard = [c for c in self.constraints if c.hard]
        if hard:
            particles, frames = self._enforce_hard(hard, prev, particles, frames, scale)
        # 2. likelihood (log space), annealed task noise.
        terms = targets + self.constraints
        temp = self._anneal_level
        task = self._cost(targets, frames)
        soft = self._cost(self.constraints, frames) if self.constraints else 0.0
        loglik = -(task / (temp * temp) + soft)
        # Refinement: a Gauss-Newton move of the best particles on the final posterior.
        full = task + soft
        if s.refine_count > 0 and np.min(full) > s.refine_min_cost:
            idx = np.argpartition(full, s.refine_count - 1)[:s.refine_count] \
                if s.refine_count < n else np.arange(n)
            if online and s.keep_map and self._has_map and self._map_index not in idx:
                idx[np.argmax(full[idx])] = self._map_index   # the held MAP is always refined
            particles, frames, improved = self._refine(terms, particles, frames, idx, full, hard)
            if improved is not None:
                task[idx] = improved[0]
                if self.constraints:
                    soft = np.array(soft) if np.ndim(soft) else np.zeros(n)
                    soft[idx] = improved[1]
                loglik = -(task / (temp * temp) + soft)
        # 3. weights, MAP.
        logw = self._logw + loglik
        logw -= logw.max()
        weights = np.exp(logw)
        weights /= weights.sum()
        map_index = int(np.argmax(weights))
        best_index = int(np.argmin(task + soft))
        if online and s.keep_map and self._has_map:
            map_index = self._hold_branch(particles, task + soft, map_index)
        ess = 1.0 / np.sum(weights * weights)
        # Bookkeeping for restarts.
        best_cost = float((task + soft)[best_index])
        if best_cost < self._best_cost * (1.0 - self.settings.stall_tolerance):
            self._best_cost = best_cost
            self._stall = 0
        else:
            self._stall += 1
        self.last_info = {
            'ess': float(ess), 'temperature': float(temp), 'map': particles[map_index].copy(),
            'particles': particles, 'weights': weights, 'resampled': False, 'restarted': 0,
        }
        map_q = particles[map_index].copy()
        best_q = particles[best_index].copy()
        best_frames = frames.subset([best_index])
        map_frames = best_frames if map_index == best_index else frames.subset([map_index])
        # 4. resampling.
        if ess < s.resample_threshold * n:
            keep = _systematic_resample(weights, self.rng)
            # Keep the MAP particle through resampling (a held MAP may not be the heaviest).
            copies = np.flatnonzero(keep == map_index)
            if copies.size == 0:
                keep[0] = map_index
                copies = np.zeros(1, dtype=int)
            particles = particles[keep]
            logw = np.zeros(n)
            self._map_index = int(copies[0])
            self.last_info['resampled'] = True
        else:
            logw = np.log(np.maximum(weights, 1e-300))
            self._map_index = map_index
        if (s.restart_after and self._stall >= s.restart_after
                and task[best_index] > s.restart_min_cost and (s.online_restarts or not online)):
            particles, logw = self._restart(particles, logw, keep_map=online)
        self._particles = particles
        self._logw = logw
        self._has_map = True
        self._anneal_level = max(1.0, self._anneal_level * s.anneal_rate)
        if online:
            return map_q, map_frames
        return best_q, best_frames

    def _hold_branch(self, particles, cost, candidate):
        """Return the MAP index online: keep the previous MAP's branch unless clearly beaten.

        A candidate more than ``branch_jump`` away (largest joint difference) from the
        previous MAP replaces it only if its cost is below ``branch_switch_ratio`` times the
        previous one: out of reach, all branches cost about the same and the arm must not
        flip between them; stuck at a limit, a fresh solution costs far less and wins.
        """
        s = self.settings
        held = self._map_index
        if candidate == held or s.branch_switch_ratio >= 1.0:
            return candidate
        jump = np.max(np.abs(particles[candidate] - particles[held]))
        if jump > s.branch_jump and cost[candidate] > s.branch_switch_ratio * cost[held]:
            return held
        return candidate

    def _cost(self, terms, frames):
        total = 0.0
        for t in terms:
            total = total + t.cost(frames)
        return total

    def _propagate(self, prev, scale):
        """Random walk with bounded accept/reject on joint limits (scalar and ball joints)."""
        s = self.settings
        chain = self.chain
        out = prev.copy()
        sq = chain._scalar_q
        if len(sq):
            base = prev[:, sq]
            sigma = self._scalar_noise * scale[:, None]
            lower, upper = chain.lower[sq], chain.upper[sq]
            step = self.rng.standard_normal(base.shape) * sigma
            cand = base + step
            bad = (cand < lower) | (cand > upper)
            for _ in range(s.max_redraws):
                if not bad.any():
                    break
                rows, cols = np.nonzero(bad)
                cand[rows, cols] = base[rows, cols] + self.rng.standard_normal(len(rows)) \
                    * sigma[rows, cols]
                bad[rows, cols] = (cand[rows, cols] < lower[cols]) | (cand[rows, cols] > upper[cols])
            # Fallback after max_redraws: that joint stays where it was (always valid).
            cand[bad] = base[bad]
            out[:, sq] = cand
        if chain.has_ball_joints:
            bq = chain._ball_q_idx
            out[:, bq] = self._propagate_balls(prev[:, bq], scale)
        return out

    def _propagate_balls(self, quat, scale):
        """QuTem steps q * exp(v), v ~ N(0, diag(sigma^2) scale^2), bounded accept/reject.

        quat: (N, B, 4) for the B ball joints; a joint whose sample leaves its angle limit
        is redrawn (at most max_redraws times), then keeps its previous rotation.
        """
        s = self.settings
        sigma = self._ball_noise[None, :, :] * scale[:, None, None]      # (N, B, 3)
        cand = _qutem(quat, sigma, self.rng)
        limits = self.chain.ball_limits
        if np.all(limits >= np.pi):
            return cand
        cos_half = np.cos(0.5 * np.minimum(limits, np.pi))
        bad = np.abs(cand[..., 0]) < cos_half
        for _ in range(s.max_redraws):
            if not bad.any():
                break
            cand[bad] = _qutem(quat[bad], sigma[bad], self.rng)
            bad = np.abs(cand[..., 0]) < cos_half
        cand[bad] = quat[bad]
        return cand

    def _enforce_hard(self, hard, prev, particles, frames, scale):
        """Redraw particles that violate hard constraints; fall back to their previous state."""
        bad = np.zeros(len(particles), dtype=bool)
        for c in hard:
            bad |= c.violated(frames)
        for _ in range(self.settings.max_redraws):
            if not bad.any():
                break
            idx = np.flatnonzero(bad)
            particles[idx] = self._propagate(prev[idx], scale[idx])
            sub = self.chain.frames(particles[idx])
            _assign_frames(frames, idx, sub, particles)
            still = np.zeros(len(idx), dtype=bool)
            for c in hard:
                still |= c.violated(sub)
            bad[idx] = still
        if bad.any():
            idx = np.flatnonzero(bad)
            particles[idx] = prev[idx]
            _assign_frames(frames, idx, self.chain.frames(prev[idx]), particles)
        return particles, frames

    def _refine(self, terms, particles, frames, idx, full_cost, hard):
        """Levenberg-Marquardt moves of particles ``idx`` on the negative log-likelihood.

        Each step solves (J J^T + lambda I) y = r, dv = -J^T y with Sugihara's damping
        lambda = cost / 2 + refine_damping, drops joints that sit at a limit and would be
        pushed through it (so a clipped step cannot stall), tries the step at full, half and
        quarter length in one batched FK, and keeps the best only if it lowers the cost.
        """
        s = self.settings
        chain = self.chain
        sub = frames.subset(idx)
        cost = full_cost[idx].copy()
        k_count = len(idx)
        alphas = self._line_search
        improved_any = False
        for _ in range(s.refine_steps):
            r, jac = stack_terms(terms, sub)
            dv = _lm_step(jac, r, 0.5 * cost + s.refine_damping)
            blocked = _blocked_joints(chain, sub.q, dv)
            if blocked is not None:
                dv = _lm_step(jac * ~blocked[:, None, :], r, 0.5 * cost + s.refine_damping)
            biggest = np.max(np.abs(dv), axis=1)
            dv *= np.minimum(1.0, s.max_step / np.maximum(biggest, 1e-12))[:, None]
            trial = chain.clip(chain.integrate(np.tile(sub.q, (len(alphas), 1)),
                                               np.repeat(alphas, k_count)[:, None]
                                               * np.tile(dv, (len(alphas), 1))))
            trial_frames = chain.frames(trial)
            trial_cost = self._cost(terms, trial_frames)
            for c in hard:
                trial_cost = np.where(c.violated(trial_frames), np.inf, trial_cost)
            trial_cost = trial_cost.reshape(len(alphas), k_count)
            pick = np.argmin(trial_cost, axis=0)
            new_cost = trial_cost[pick, np.arange(k_count)]
            ok = new_cost < cost
            if not ok.any():
                break
            improved_any = True
            rows = (pick * k_count + np.arange(k_count))[ok]
            sub.assign(np.flatnonzero(ok), trial_frames.subset(rows))
            cost[ok] = new_cost[ok]
        if not improved_any:
            return particles, frames, None
        particles[idx] = sub.q
        frames.assign(idx, sub)
        frames.q = particles
        targets = [t for t in terms if t not in self.constraints]
        task = self._cost(targets, sub)
        soft = self._cost(self.constraints, sub) if self.constraints else np.zeros(len(idx))
        return particles, frames, (task, soft)

    def _restart(self, particles, logw, keep_map):
        """Redraw a share of the particles uniformly inside the limits and re-widen Sigma_z.

        In ``solve`` (keep_map False) with restart_fraction = 1 every particle is redrawn,
        the MAP included: ``solve`` keeps the best configuration seen so far, so nothing is
        lost, and the new population's best particles get refined without competing against
        a particle stuck in a local minimum (a joint limit or a singular configuration).
        Online (keep_map True) the MAP stays, so the estimate only moves to another branch
        when a new particle beats it.
        """
        s = self.settings
        n = len(particles)
        k = int(round(s.restart_fraction * n))
        if keep_map:
            k = min(k, n - 1)
        if k == 0:
            return particles, logw
        order = np.argsort(logw)
        if keep_map:
            order = order[order != self._map_index]
        order = order[:k]
        particles = particles.copy()
        particles[order] = self.chain.random_configuration(self.rng, k)
        logw = np.zeros(n)
        if self._map_index in order:
            self._map_index = int(order[0])
        self._stall = 0
        self._best_cost = np.inf
        # Re-widen Sigma_z so the new particles survive resampling long enough to be refined.
        self._anneal_level = s.anneal_initial
        self.last_info['restarted'] = k
        return particles, logw

    # ------------------------------------------------------------------ smoothing (eq. 15)
    def _smooth(self, previous, candidate):
        alpha = self.settings.smoothing_alpha
        chain = self.chain
        out = previous + alpha * (candidate - previous)
        if chain.has_ball_joints:
            bq = chain._ball_q_idx
            out[bq] = quat_slerp(previous[bq], candidate[bq], alpha)
        # Convex combination of in-limit points stays in the box; clip guards rounding.
        return chain.clip(out)



# ---------------------------------------------------------------------- helpers
def _qutem(quat, sigma, rng):
    """Sample q * exp(v) with v ~ N(0, diag(sigma^2)) per row (QuTem, seed 000 App. A).

    The paper's Algorithm 2 draws a unit direction and a separate Gaussian angle; drawing
    the tangent vector v directly from N(0, Sigma) gives the QuTem density of eq. 17 exactly
    (its log-map has covariance Sigma), which is what the tests check.
    """
    v = rng.standard_normal(sigma.shape) * sigma
    out = quat_multiply(quat, quat_from_rotvec(v))
    return np.where(out[..., :1] < 0.0, -out, out)


def _lm_step(jac, r, lam):
    """Return dv = -J^T (J J^T + lam I)^-1 r for stacks jac (K, m, nv), r (K, m), lam (K,)."""
    m = r.shape[1]
    jjt = jac @ np.swapaxes(jac, 1, 2)
    jjt[:, np.arange(m), np.arange(m)] += lam[:, None]
    y = np.linalg.solve(jjt, r[..., None])
    return -(np.swapaxes(jac, 1, 2) @ y)[..., 0]


def _blocked_joints(chain, q, dv):
    """Return a (K, nv) mask of 1-DOF joints at a limit that ``dv`` pushes outwards, or None."""
    sq, sv = chain._scalar_q, chain._scalar_v
    if not len(sq):
        return None
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


def _systematic_resample(weights, rng):
    n = len(weights)
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
        return np.r_[target.pose[:3, :3].ravel(), target.pose[:3, 3]]
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
            out.append(np.r_[np.full(9, s.sigma_orientation), np.full(3, s.sigma_position)])
        elif getattr(t, 'position', None) is not None:
            out.append(np.full(3, s.sigma_position))
        elif getattr(t, 'rotation', None) is not None:
            out.append(np.full(9, s.sigma_orientation))
    return np.concatenate(out) if out else np.ones(0)
