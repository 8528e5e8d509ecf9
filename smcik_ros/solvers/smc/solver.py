"""The SMC IK solver: Algorithm 1 (``filter.filter_step``) driven online and in ``solve``.

Online use: ``reset(q)``, then ``step(goal)`` per tick (returns the estimate; the eq. 15
smoothing ``smoothing_alpha`` is 1 by default: lag-free). Batch: ``solve(...)``.
``alternatives()`` lists the distinct solution branches the particles hold and
``select_alternative()`` moves the estimate to one of them.

The solver owns the goal stream: a new goal re-arms the filter (the annealing of the task
noise of seed 001, the policies' bookkeeping, the motion prior's proposal), and each online
iteration ends with the policies' solver-level hooks (a recovery, another search window).
"""

import functools

import numpy as np

from ... import kernels
from ...errors import ParameterError
from ...goals import as_goal, task_errors
from ..base import Solver, StateKey, interpolate, register
from .branches import Branches
from .filter import FilterModel, FilterState, Policies, feasible, filter_step, mean_log_weight
from .policies import (BranchHold, MinimalMotion, NearestSearch, Recovery, Refinement,
                       Restarts, SeedFirst)
from .settings import SmcSettings, particle_count

__all__ = ['SmcSettings', 'SmcSolver']


@register('smc')
class SmcSolver(Solver):
    """Sequential Monte Carlo IK filter (seed 000; module docstrings of ``filter`` and
    ``policies`` for what is added to the paper)."""

    Settings = SmcSettings

    def __init__(self, chain, settings=None):
        super().__init__(chain, settings)
        # Compile (or load) the kernels now, not inside the first timed solve or tick.
        kernels.ensure_ready(chain.records)
        self._configure()
        self._reset(self._q)

    # ------------------------------------------------------------------ setup
    def _configure(self):
        """Build the noise model and the policies from the settings (their bookkeeping
        starts afresh: a settings change keeps the particles and the estimate only)."""
        s, chain = self.settings, self.chain
        self.rng = np.random.default_rng(None if s.seed < 0 else s.seed)
        self._scalar_noise, self._ball_noise = _noise(chain, s)
        motion = (MinimalMotion(chain, s, self._scalar_noise, self._ball_noise)
                  if s.minimal_motion else None)
        search = NearestSearch(s, motion, chain) if (
            motion is not None and s.search_count > 0 and s.search_iterations > 0) else None
        refinement = Refinement(chain, s) if s.refine_count > 0 else None
        self._policies = Policies(
            minimal_motion=motion, search=search, refinement=refinement,
            recovery=(Recovery(s, motion, search)
                      if search is not None and s.recovery_iterations > 0 else None),
            restarts=Restarts(s) if s.restart_after > 0 else None,
            branch_hold=BranchHold(s) if s.branch_hold else None, keep_map=s.keep_map)
        # solve(): Algorithm 1 with refinement and restarts; minimal motion only chooses the
        # returned success and maps its turns (_solve_result), so the search is unchanged.
        self._solve_policies = Policies(refinement=refinement,
                                        restarts=self._policies.restarts,
                                        keep_map=s.keep_map)
        self._selection = None if motion is None else motion.selection_only()
        self._seed_first = SeedFirst(s, refinement) if (s.seed_rows > 0 and refinement) \
            else None
        self._model_cache = None

    @property
    def policies(self):
        """The ``Policies`` record the online step passes to ``filter_step``."""
        return self._policies

    def _on_settings_changed(self):
        state = self.state
        self._configure()
        n = particle_count(self.settings, self.chain.nv)
        if n != len(state.particles):
            # Keep the estimate's particle (it becomes 0), then the heaviest others.
            order = np.argsort(-state.logw, kind='stable')
            if state.estimate >= 0:
                order = np.r_[state.estimate, order[order != state.estimate]]
            idx = np.resize(order, n)
            state = FilterState(state.particles[idx].copy(), state.logw[idx].copy(),
                                0 if state.estimate >= 0 else -1)
        self.state = state
        self._reset_policies(self._estimate)

    @property
    def state(self):
        """The particle population (``FilterState``). After a reset every particle is at
        the reset configuration (particle 0: the estimate's, held); that population is
        built at its first use, not in the reset: ``solve`` resets on every call, mostly
        to answer from its first stage without touching the particles, and filling them
        there cost a tenth of such a solve (the kernel ran slower after it)."""
        if self._state is None:
            q = self._reset_q
            particles = np.empty((particle_count(self.settings, self.chain.nv), len(q)))
            particles[:] = q
            self._state = FilterState(particles, np.zeros(len(particles)), 0)
        return self._state

    @state.setter
    def state(self, state):
        self._state = state

    def _reset(self, q):
        self._state, self._reset_q = None, q    # every particle at q (``state``)
        self._anneal_level = 1.0            # the task noise's annealing factor (seed 001)
        self._last_goal_vec = None
        self.goal_still = 0                 # iterations since the goal last changed
        self.within_tolerance = True        # the estimate satisfies its goal
        self.anchor = q.copy()              # the last estimate that satisfied its goal
        self._anchor_goal = None            # that goal (its vector)
        self.reference = q.copy()           # the motion prior's reference
        self._tolerance = (self.settings.solution_tolerance_position,
                           self.settings.solution_tolerance_orientation)
        self._branches = Branches(self)
        self._switch_count = 0
        self._constraints_key = None
        self._reset_policies(q)

    def _reset_policies(self, q):
        p = self._policies
        for policy in (p.refinement, p.branch_hold, p.restarts, p.search):
            if policy is not None:
                policy.reset()
        if p.restarts is not None:
            p.restarts.still = 0
        if p.recovery is not None:
            p.recovery.reset(q)

    @property
    def settled(self):
        """True when the online filter has settled: the estimate's particle satisfies the goal
        (or the filter rests: ``resting``) and its refinement converged (idle), no search
        window, recovery or shadow runs, and the annealing has ended. Its next steps then
        keep that particle as it is (no random step, no refinement); another particle could
        replace it only by landing, unrefined, within a tenth of the tolerance of the goal
        farther than ``branch_jump`` from it."""
        p, state = self._policies, self.state
        return bool(p.refinement is not None and p.refinement.settled and state.estimate >= 0
                    and (self.within_tolerance or self.resting)
                    and (p.search is None or p.search.left == 0)
                    and (p.recovery is None or (p.recovery.shadow < 0
                                                and p.recovery.left == 0))
                    and self._anneal_level <= 1.0 and p.keep_map
                    and np.array_equal(self._estimate, state.particles[state.estimate]))

    @property
    def resting(self):
        """True when ``online_restart_limit`` restarts on the current goal, unchanged, with
        the same constraints, brought no estimate within tolerance: the goal is out of reach
        (too far, in collision, blocked). The filter then keeps its best estimate and stops
        re-seeding until the goal or a constraint (or its ``version``) changes; with a
        converged refinement it is ``settled``, so the node steps it only every
        ``rest_step_interval``."""
        restarts = self._policies.restarts
        return restarts is not None and restarts.resting(self.within_tolerance)

    # ------------------------------------------------------------------ goal handling
    def _make_goal(self, goal):
        return as_goal(goal, self.chain, sigma_position=self.settings.sigma_position,
                       sigma_orientation=self.settings.sigma_orientation)

    def _on_goal_changed(self, targets, force=False):
        """Re-arm on a new goal: reference, annealing, the policies' bookkeeping, and (a goal
        that moved beyond ``goal_change_threshold`` sigmas) the motion prior's proposal."""
        s, p = self.settings, self._policies
        vec, scale = _goal_vector(targets, s)
        far = force or _moved(vec, self._last_goal_vec, scale, s.goal_change_threshold)
        self._last_goal_vec = vec
        self.goal_still = -1            # counted up to 0 by the coming step
        if p.restarts is not None:
            p.restarts.still = 0
        if p.search is not None:
            p.search.new_goal(far)
        if p.refinement is not None:
            p.refinement.reset()
        if far:
            if p.recovery is not None:
                p.recovery.end()        # a new goal: the motion starts from the anchor
                p.recovery.left_tolerance = False
            self._branches.clear()
            self.within_tolerance = False   # nothing satisfies the new goal yet
        if not force and (p.recovery is None or p.recovery.left <= 0):
            # The motion starts from the last estimate that satisfied its goal (back from
            # an excursion out of reach, the arm returns to the branch it left), unless the
            # goal is another than that estimate's: then from where the estimate is (after
            # a goal out of reach, the arm is there, not at the last estimate that reached).
            new = far and _moved(vec, self._anchor_goal, scale, s.goal_change_threshold)
            self.reference = (self._estimate if new else self.anchor).copy()
        if far:
            self._anneal_level = s.anneal_initial
            for policy in (p.restarts, p.branch_hold):
                if policy is not None:
                    policy.reset()
            if p.minimal_motion is not None and not force and s.reseed_fraction > 0.0:
                self.reseed()

    def reseed(self, starts=(), spread=1.0):
        """Redraw ``reseed_fraction`` of the particles (lowest weights) around the reference:
        the motion prior's proposal. The first ``search_count`` of them (a third drawn
        uniformly, for far branches) become a search window's searchers, ``starts`` (as
        they are) first."""
        s, p, state = self.settings, self._policies, self.state
        n = len(state.particles)
        k = min(max(int(round(s.reseed_fraction * n)), s.search_count), n - 1)
        if k <= 0:
            return
        shadow = p.recovery.shadow if p.recovery is not None else -1
        order = np.argsort(state.logw, kind='stable')
        victims = order[(order != state.estimate) & (order != shadow)][:k]
        model = self._model(self._targets)
        motion, search = p.minimal_motion, p.search
        motion.reference = self.reference
        searchers = min(search.count, k) if search is not None else 0
        fresh = motion.sample(k, self.rng)
        if searchers:
            search.spread = spread
            fresh[:searchers] = search.draw(searchers, self.rng, starts, spread,
                                            turn_reference=self.reference)
        if motion.has_turns:
            fresh = motion.map_turns(fresh, self.reference)
        fallback = state.particles[max(state.estimate, 0)]
        state.particles[victims] = feasible(model, fresh, fallback, self.rng,
                                            lambda c: motion.sample(c, self.rng))
        state.logw[victims] = mean_log_weight(state.logw)
        if search is not None:
            search.start(victims[:searchers])
            search.windows += 1
            search.window_start = self.found_distance()

    def found_distance(self, info=None):
        """Return the weighted distance [rad] of the estimate's particle from the reference
        (inf while it does not satisfy the goal); ``info``: the last ``filter_step``'s, whose
        ``distance`` is it while the state still holds that particle."""
        motion = self._policies.minimal_motion
        if not self.within_tolerance or motion is None:
            return np.inf
        state = self.state
        if info is not None and info['distance'] is not None and \
                state.estimate == info['index']:
            return info['distance']
        q = state.particles[max(state.estimate, 0)]
        return float(motion.distance(q[None], self.reference)[0])

    def _model(self, targets):
        model = self._model_cache
        if (model is None or model.constraints is not self.constraints
                or model.tolerance != self._tolerance):
            model = FilterModel(self.chain, self.settings, self._scalar_noise,
                                self._ball_noise, targets, self.constraints,
                                self._anneal_level, self._tolerance)
            self._model_cache = model
        elif model.targets is not targets:
            model.retarget(targets)     # a new goal: the rest of the model holds
        recovery = self._policies.recovery
        model.temperature = self._anneal_level
        model.goal_still = self.goal_still
        model.recovering = recovery is not None and recovery.recovering
        model.resting = self.resting
        return model

    # ------------------------------------------------------------------ solve()
    def _start_solve(self, q_seed, targets, first_stage):
        """Try the first stage (``policies/seed_first.py``; whole turns mapped towards the
        seed); without a solution there, start the filter at the seed with
        ``init_uniform_fraction`` of the particles drawn uniformly."""
        stage = self._seed_first if first_stage else None
        found = stage and stage.solve(self.chain, targets, self.constraints, q_seed,
                                      self._solve_tolerance, self.rng)
        if found is not None:
            q, pos, ori = found
            if self._selection is not None and self._selection.has_turns:
                q = self.chain.clip(self._selection.map_turns(q[None], q_seed)[0])
            # The first stage's rows are finite and in the limits (its steps clip them):
            # reset without checking them again.
            self._reset_checked(q)
            return q, pos, ori
        self.reset(q_seed)
        s = self.settings
        n = particle_count(s, self.chain.nv)
        k = int(round(s.init_uniform_fraction * (n - 1)))
        if k > 0:
            fresh = self.chain.random_configuration(self.rng, k)
            if any(c.hard for c in self.constraints):
                fresh = feasible(self._model(targets), fresh, self._q, self.rng,
                                 lambda c: self.chain.random_configuration(self.rng, c))
            self.state.particles[n - k:] = fresh
        self._tolerance = self._solve_tolerance
        self._on_goal_changed(targets, force=True)
        return None

    def _solve_result(self, q, solved):
        """Return the success nearest the seed among the 16 best particles of the last
        iteration (``solve`` stops at the first iteration with a success), whole turns of
        joints spanning more than 2 pi mapped towards the seed (also when not solved)."""
        motion = self._selection
        if motion is None:
            return q
        ref = self.reference
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

    # ------------------------------------------------------------------ the filter
    def _iterate(self, targets, online):
        """One iteration of Algorithm 1 (``filter_step``), then online the policies'
        solver-level hooks; return (estimate's particle, its one-row frames)."""
        p = self._policies
        policies = p if online else self._solve_policies
        if online:
            self.goal_still += 1
            constraints = StateKey(constraints=self.constraints)
            if constraints != self._constraints_key and p.restarts is not None:
                p.restarts.still = 0            # a constraint, scene or pairs changed
            self._constraints_key = constraints
            if p.minimal_motion is not None:
                p.minimal_motion.reference = p.minimal_motion.turn_reference = self.reference
        resting = self.resting
        if p.restarts is not None:
            p.restarts.paused = online and resting
        model = self._model(targets)
        self.state, info = filter_step(self.state, model, policies, self.rng, online)
        if info['restarted']:
            # Re-widen Sigma_z so the re-seeded particles survive resampling long enough
            # to be refined.
            self._anneal_level = self.settings.anneal_initial
            if online:
                p.restarts.still += 1
        self._anneal_level = max(1.0, self._anneal_level * self.settings.anneal_rate)
        self._last_step = info
        self.last_info = {
            'ess': info['ess'], 'temperature': float(model.temperature), 'map': info['q'],
            'particles': info['particles'], 'weights': info['weights'],
            'resampled': info['resampled'], 'restarted': info['restarted']}
        if online:
            self._after_step(info, resting)
        return info['q'], info['frames']

    def _after_step(self, info, resting):
        """The solver-level hooks of an online iteration: a recovery, another search window;
        the branch archive; ``last_info``."""
        p = self._policies
        switch = info['switch']
        if switch is not None:
            self._switch_count += 1
        was_ok, self.within_tolerance = self.within_tolerance, bool(info['ok'][info['index']])
        if p.search is not None:
            p.search.searching = p.search.searching or bool(len(p.search.searchers))
        started = p.recovery is not None and p.recovery.after_step(
            self, was_ok, self.within_tolerance, info['q'])
        if not started and p.search is not None:
            p.search.after_step(self, info)
        self._branches.observe(info)
        self.last_info.update({
            'confidence': info['confidence'], 'within_tolerance': self.within_tolerance,
            'branch_switch': switch, 'branch_switches': self._switch_count,
            'branch_warning': info['warning'], 'reference': self.reference.copy(),
            'resting': resting})

    # ------------------------------------------------------------------ estimate (eq. 15)
    def _smooth(self, previous, candidate):
        alpha = self.settings.smoothing_alpha
        if alpha >= 1.0:
            out = candidate.copy()
            ok = self.within_tolerance
        else:
            out = interpolate(self.chain, previous, candidate, alpha)
            ok = bool(self._model(self._targets).within_tolerance(self.chain.frames(out))[0])
        if ok:
            self.anchor = out.copy()
            self._anchor_goal = self._last_goal_vec
            if self._policies.recovery is not None:
                self._policies.recovery.remember(out, self.interpolate)
        return out

    def interpolate(self, a, b, t):
        """Return interpolate(a, b, t) of eq. 15 (``base.interpolate`` on this chain)."""
        return interpolate(self.chain, a, b, t)

    # ------------------------------------------------------------------ alternatives
    def alternatives(self, max_count=5):
        """Return up to ``max_count`` distinct solution branches the filter holds, best first
        (``branches.Branches.list``); empty before the first step."""
        return self._branches.list(max_count)

    def select_alternative(self, choice):
        """Move the estimate to a branch: an index into the last ``alternatives()`` list,
        or a configuration (nq,). From then on the held branch is that one (the next steps
        refine it towards the goal); ``last_info['branch_switch']`` records the move."""
        q = self._alternative_q(choice, lambda: self._branches.records or self.alternatives())
        state, p = self.state, self._policies
        held = state.estimate if state.estimate >= 0 else int(np.argmin(state.logw))
        previous = self._estimate.copy()
        state.particles[held] = q
        state.logw[:] = 0.0
        state.estimate = held
        for policy in (p.branch_hold, p.refinement):
            if policy is not None:
                policy.reset()
        self._estimate = q.copy()
        self.anchor = q.copy()
        if p.recovery is not None:
            p.recovery.end()
            p.recovery.memory = q.copy()
        self.reference = q.copy()
        self._switch_count += 1
        switch = dict(reason='selected', distance=float(np.max(np.abs(q - previous))),
                      previous=previous)
        self.last_info = dict(self.last_info, branch_switch=switch,
                              branch_switches=self._switch_count, map=q.copy())
        return q.copy()


# ---------------------------------------------------------------------- helpers
def _noise(chain, s):
    """Return the random walk's stds: (1-DOF joints (n1,), ball joints (B, 3))."""
    scalar_types = [t for t in chain.joint_types if t != 'ball']
    if s.joint_noise_per_joint:
        if len(s.joint_noise_per_joint) != len(scalar_types):
            names = [n for n, t in zip(chain.joint_names, chain.joint_types) if t != 'ball']
            raise ParameterError(
                f'joint_noise_per_joint needs {len(scalar_types)} values (one per 1-DOF joint'
                f' of {names}); got {len(s.joint_noise_per_joint)}')
        noise = np.array(s.joint_noise_per_joint, dtype=float)
    else:
        noise = _slow_prismatic(chain, scalar_types, np.array(
            [s.prismatic_noise if t == 'prismatic' else s.joint_noise for t in scalar_types]),
            s.joint_noise)
    balls = chain.ball_joints
    if s.ball_noise_per_axis:
        if len(s.ball_noise_per_axis) != 3 * len(balls):
            raise ParameterError(f'ball_noise_per_axis needs {3 * len(balls)} values (3 per '
                                 f'ball joint); got {len(s.ball_noise_per_axis)}')
        ball = np.array(s.ball_noise_per_axis, dtype=float).reshape(-1, 3)
    else:
        ball = np.full((len(balls), 3), s.ball_noise)
    return noise, ball


def _slow_prismatic(chain, types, noise, joint_noise):
    """Return the default stds ``noise`` (n1,) with each prismatic joint's at most the
    distance it moves in the time a typical revolute joint (the chain's median revolute
    velocity limit) moves ``joint_noise``. A lift column 100x slower than its arms (PR2's
    torso, 0.013 m/s) was walked like a fast rail: the online answers moved it 5-12 cm on
    goals the arms alone reach, and the synchronised commands took over 10 s (the motion
    prior's weight, ``joint_noise / std``, follows: a slow joint's motion costs its time)."""
    types = np.array(types)
    velocity = np.asarray(chain.velocity_limits, dtype=float)[chain.scalar_q]
    revolute = np.isin(types, ('revolute', 'continuous')) & np.isfinite(velocity)
    prismatic = (types == 'prismatic') & np.isfinite(velocity) & (velocity > 0.0)
    if not revolute.any() or not prismatic.any():
        return noise
    typical = float(np.median(velocity[revolute]))
    noise[prismatic] = np.minimum(noise[prismatic], joint_noise * velocity[prismatic] / typical)
    return noise


def _goal_vector(targets, s):
    """Return the goals' numbers (K,) (per pose, its top three rows: rotation entries and
    position; positions; rotation entries), a copy, and their scales (K,):
    ``sigma_orientation`` for rotation entries, ``sigma_position`` for positions."""
    parts, kinds = [], []
    for t in targets:
        if getattr(t, 'pose', None) is not None:
            parts.append(t.pose[:3])
            kinds.append('pose')
        elif getattr(t, 'position', None) is not None:
            parts.append(t.position)
            kinds.append('position')
        elif getattr(t, 'rotation', None) is not None:
            parts.append(t.rotation)
            kinds.append('rotation')
    if len(parts) == 1:     # one target (the common case): without concatenate's ~2 us
        vec = np.array(parts[0], dtype=float).ravel()
    else:
        vec = np.concatenate([np.ravel(v) for v in parts] or [[]]).astype(float)
    return vec, _goal_scale(tuple(kinds), s.sigma_orientation, s.sigma_position)


@functools.lru_cache(maxsize=32)
def _goal_scale(kinds, sigma_orientation, sigma_position):
    """Return the scales (K,) of ``_goal_vector``'s numbers for targets of ``kinds``
    (read-only: shared by every call with the same kinds and sigmas)."""
    rows = {'pose': [sigma_orientation] * 3 + [sigma_position],
            'position': [sigma_position] * 3, 'rotation': [sigma_orientation] * 9}
    scale = np.array([x for k in kinds for x in rows[k] * (3 if k == 'pose' else 1)],
                     dtype=float)
    scale.flags.writeable = False
    return scale


def _moved(vec, before, scale, threshold):
    """Return whether goal numbers ``vec`` are more than ``threshold`` scales from
    ``before`` (None, or another shape: another goal)."""
    return (before is None or before.shape != vec.shape
            or (np.abs(vec - before) / scale).max() > threshold)
