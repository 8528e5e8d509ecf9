"""Refinement: a Levenberg-Marquardt move step of a few particles (policy ``refine_count``).

The paper's random walk finds a branch but converges slowly to the precise solution on it;
the refinement moves the best few particles (and the estimate's, the searchers and a
recovery's shadow) by damped least-squares steps on the negative log-likelihood, with the
minimal-motion pull in the task's null space. It also decides when the estimate's particle
has converged (``settled``): the online filter then keeps it as it is.
"""

import numpy as np

from .... import kernels as _kernels
from ....goals import Contact, OrientationTarget, PoseTarget, PositionTarget, project
from ....goals.projection import KEPT_SHARE, residual_share
from ....kernels.records import LM, MOTION, TARGETS
from ...base import stack_terms

__all__ = ['KERNEL_TARGETS', 'Refinement']

# The held particle's refinement has converged when it moved at most SETTLE_MOVE [rad or m]
# per joint and its cost changed by at most a relative SETTLE_GAIN (RESTING_*: while the goal
# is out of reach). See Refinement._no_progress.
SETTLE_MOVE = 1e-6
SETTLE_GAIN = 1e-9
RESTING_MOVE = 1e-4         # [rad or m] per joint and step: 0.6 deg/s at 100 Hz
RESTING_GAIN = 1e-6
# A precise held particle whose nearest approach to the reference improved by less than
# PULL_PROGRESS [rad] from one window of PULL_WINDOW refinements to the next has converged
# too. The null-space pull of a 7-joint arm can cycle on a curved solution set: a long slide
# lands a little off it, the task step back lands where the slide began, and a Panda's
# answer, and the arm, kept moving by 0.01 rad every six steps at rest, for good.
PULL_WINDOW = 10
PULL_PROGRESS = 1e-4


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
    nearer, else the lowest-cost trial if precise and lower. A trial that violates a hard
    constraint is never kept. One plain pose target with constraints (the node's collision
    avoidance): where the constraints are inactive at a particle's start and at the end of
    the compiled pose-only refinement, that result is taken without checking the trials in between
    (``_move_fused_where_free``; a refinement result is a hypothesis: the command stream
    checks every motion towards it).
    """

    PRECISE_FRACTION = 0.25
    COST_DAMPING = 0.5          # Sugihara's lambda = cost / 2 + refine_damping
    SPRING = 0.1                # share of the motion prior's weight in the coarse LM
    SPRING_FADE = 10.0          # the spring fades below this many tolerance costs
    SPRING_HOLD = 50            # [iterations] on a still goal at full spring, then as many
                                # to release it (``spring_share``)
    SLIDE_CORRECTION = 0.01     # [rad] pulls larger than this get a corrector step

    def __init__(self, chain, settings):
        self.chain = chain
        self.count = int(settings.refine_count)
        self.steps = int(settings.refine_steps)
        self.damping = float(settings.refine_damping)
        self.max_step = float(settings.max_step)
        self.min_cost = float(settings.refine_min_cost)
        self.alphas = np.array([1.0, 0.5, 0.25])
        self.lm = LM.pack(steps=self.steps, alphas=self.alphas, damping=self.damping,
                          max_step=self.max_step, cost_damping=self.COST_DAMPING)
        self._targets_key = self._targets_record = None
        self._plain = None          # the plain step's motion record (no prior), built once
        self._prior_key = self._prior = None    # the prior's record, (motion, tolerance cost)
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
        # The held particle's nearest approach to the reference [rad]: in the last window,
        # in the current one, and the current window's length (``_pull_stalled``).
        self._approach = [np.inf, np.inf, 0]

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
            step.evaluate(idx, sub)
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
        elif self._pull_stalled(step):
            self.settled, self.settled_cost = True, float(step.cost[held])
        else:
            self.settled, self.settled_cost = False, np.inf

    def _pull_stalled(self, step):
        """Return whether the held particle, precise, has stopped getting nearer the
        reference (``PULL_WINDOW``, ``PULL_PROGRESS``); a particle that is not precise
        starts the count afresh."""
        held = step.held
        if step.dist_ref is None or not step.model.precise(
                None, self.PRECISE_FRACTION, (step.pos_err[held], step.ori_err[held])):
            self._approach = [np.inf, np.inf, 0]
            return False
        last, now, count = self._approach
        now, count = min(now, float(step.dist_ref[held])), count + 1
        if count < PULL_WINDOW:
            self._approach = [last, now, count]
            return False
        self._approach = [now, np.inf, 0]
        return now > last - PULL_PROGRESS

    # -- the move itself
    def refine(self, problem, frames, cost, motion, guard=None):
        """Refine the configurations of ``frames`` (K rows) with costs ``cost`` (K,).

        problem: has ``terms`` (targets first), ``hard``, ``tolerance``, ``tolerance_cost``;
        motion: a ``MinimalMotion`` or None; guard: None or (K,) largest position errors [m]
        a step may end at (inf: no guard; the held particle of a still goal out of reach
        gets its current error: its tool never moves away from the target). Returns
        (frames, cost, improved (K,) bool, motion_gain (K,): how much nearer the reference
        each got [rad^2]).

        The steps run in ``kernels.refine`` for the targets; where another term is active
        (a constraint with a cost, or a hard one violated, where the row starts or where
        its refinement ends) that row takes the same steps one at a time with the term's
        rows (``_stepwise``). The trials in between are not checked where no term is active:
        a refinement's intermediate trials are never commanded, only its result is, and that
        is checked like any trial of the stepwise move (far from obstacles this replaces
        ~18 collision queries per iteration by two: docs/benchmarks.md, speed (a)).
        """
        chain = self.chain
        targets, extra = _split(problem.terms)
        records = self.records(targets, problem.tolerance, motion, problem.tolerance_cost,
                               self.spring_share(problem.goal_still))
        q = np.array(frames.q, dtype=float)
        state = _state_of(np.array(cost, dtype=float), np.full(len(q), np.inf)
                          if guard is None else np.array(guard, dtype=float))
        busy = _constrained(extra, problem.hard, frames) if extra or problem.hard else None
        free = np.flatnonzero(~busy) if busy is not None else None
        if free is None:        # targets alone: every row in place, no copies
            _kernels.refine(*records, q, state)
        elif len(free):
            part = _rows(state, free)
            qf = q[free]
            _kernels.refine(*records, qf, part)
            # Ends where a term is active: stepwise instead.
            moved = np.flatnonzero(part[4])
            ends = moved[_constrained(extra, problem.hard, chain.frames(qf[moved]))]
            busy[free[ends]] = True
            keep = np.setdiff1d(np.arange(len(free)), ends)
            free, qf, part = free[keep], qf[keep], _rows(part, keep)
            q[free] = qf
            _put(state, free, part)
        if busy is not None and busy.any():
            rows = np.flatnonzero(busy)
            part = _rows(state, rows)
            qs = q[rows]
            self._stepwise(problem, extra, records, qs, part)
            q[rows] = qs
            _put(state, rows, part)
        improved = state[4]
        if improved.any():
            idx = np.flatnonzero(improved)
            frames.assign(idx, chain.frames(q[idx]))
        return frames, state[0], improved, state[5]

    def _stepwise(self, problem, extra, records, q, state):
        """The refinement's steps one at a time for rows where a term the kernels do not
        evaluate is active: its whitened rows at each row's configuration join the targets'
        (``kernels.propose``), the trials are projected back onto the hard equalities
        (``goals.project``: a linear step leaves a planted foot by a second-order error), and
        the term's costs at them and the hard constraints' verdicts join their judgement
        (``kernels.choose``): no trial goes farther off an equality than ``KEPT_SHARE`` of its
        tolerance or than where it starts."""
        chain = self.chain
        nv = chain.nv
        _kernels.begin(*records, q, state)
        equalities = [c for c in problem.hard if getattr(c, 'equality', False)]
        for _ in range(self.steps):
            if not state[6].any():
                break
            frames = chain.frames(q)
            if extra:
                extra_rows = stack_terms(extra, frames)
            else:
                extra_rows = (np.zeros((len(q), 0)), np.zeros((len(q), 0, nv)))
            trials, mu = _kernels.propose(*records[:4], records[4], records[5],
                                          tuple(np.ascontiguousarray(a) for a in extra_rows),
                                          q, state)
            k_count, count, nq = trials.shape
            if getattr(problem, 'projects', False):     # back onto the hard equalities
                trials = project(chain, trials.reshape(-1, nq), problem.hard,
                                 iterations=1)[0].reshape(trials.shape)
            flat = chain.frames(trials.reshape(-1, nq))
            extra_cost = _terms_cost(extra, flat) if extra else np.zeros(len(flat))
            for c in problem.hard:
                extra_cost = np.where(c.violated(flat), np.inf, extra_cost)
            if equalities:
                # No farther off the equalities than KEPT_SHARE, or than the trial's start.
                bound = np.maximum(KEPT_SHARE, residual_share(frames, equalities))
                off = residual_share(flat, equalities).reshape(k_count, count)
                extra_cost = np.where((off > bound[:, None]).ravel(), np.inf, extra_cost)
            _kernels.choose(*records[:4], records[5], q, state, trials, mu,
                            extra_cost.reshape(k_count, count))

    def spring_share(self, goal_still):
        """Return the share (0 to 1) of the spring after ``goal_still`` iterations on a
        still goal: full for ``SPRING_HOLD`` iterations, then released linearly over as many.

        The spring makes the coarse LM minimise the task error plus the prior's pull, a
        compromise whose minimum is not on the goal: where reaching needs a long motion (a
        PR2 hand held while the other reaches with the torso) the estimate stopped 7 mm off,
        and the filter declared the goal out of reach. The spring has done its work (it kept
        the first steps of a new goal near the reference) by the time it is released; the
        null-space pull still chooses among the solutions."""
        return float(np.clip(2.0 - goal_still / self.SPRING_HOLD, 0.0, 1.0))

    def records(self, targets, tolerance, motion=None, tolerance_cost=1.0, spring_share=1.0):
        """Return the kernels' records of a refinement: the chain's bodies, columns and
        joints, the ``targets`` (with the solution ``tolerance``: position [m], orientation
        [rad]), the steps, and the motion prior (None: the plain LM step) with
        ``spring_share`` of its spring."""
        chain = self.chain
        # Everything but the goals depends on the targets' structure (kinds, links, sigmas,
        # weights, covariances, offsets) and the tolerance: built once per structure, the
        # goals filled on every call (solve() gets new targets every call).
        key = (tuple(map(_structure, targets)), tuple(tolerance))
        if self._targets_key != key:
            self._targets_record = _targets_record(chain, targets, tolerance)
            self._targets_key = key
        targets_record = _with_goals(self._targets_record, targets)
        if motion is None:
            if self._plain is None:
                self._plain = MOTION.pack(
                    spring=0.0, spring_fade=1.0, tolerance_cost=1.0, gain=0.0, slide_min=0.0,
                    precise_fraction=-1.0, weights=np.ones(chain.nv),
                    reference=np.zeros(chain.nq))
            prior = self._plain
        else:
            # The prior's record holds while the motion policy and the tolerance do; its
            # reference is renewed on every call (a new goal moves it).
            key = (motion, tolerance_cost)
            if self._prior_key != key:
                self._prior = MOTION.pack(
                    spring=self.SPRING * motion.spring, spring_fade=self.SPRING_FADE,
                    tolerance_cost=tolerance_cost, gain=motion.gain,
                    slide_min=self.SLIDE_CORRECTION, precise_fraction=self.PRECISE_FRACTION,
                    weights=motion.weights, reference=motion.reference)
                self._prior_key = key
            prior = MOTION.replace(self._prior, reference=motion.reference,
                                   spring=self.SPRING * motion.spring * spring_share)
        bodies, columns, _, joints = chain.records
        return (bodies, columns, joints, targets_record, self.lm, prior)


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
    return bool(np.abs(q - q_before).max() <= move
                and abs(cost_before - cost) <= gain * cost_before)


def _held_position_error(model, frames, held):
    """Return the held particle's position error [m] (the guard of a still goal)."""
    pos, _ = model.errors(frames.subset([held]))
    return float(pos[0]) if not model.precise(frames.subset([held]))[0] else np.inf


def _split(terms):
    """Return (the targets the kernels evaluate: targets of their kinds, anchored contacts
    as their pose targets; the other terms)."""
    targets, other = [], []
    for t in terms:
        if type(t) in KERNEL_TARGETS:
            targets.append(t)
        elif type(t) is Contact and t.anchored:
            targets.append(t.target)
        else:
            other.append(t)
    return targets, other


KERNEL_TARGETS = {PoseTarget: 0, PositionTarget: 1, OrientationTarget: 2}  # record kinds


def _structure(target):
    """Return what a target's kernel record depends on besides its goal."""
    cov, offset = target.covariance, getattr(target, 'offset', None)
    return (type(target), target.link, target.weight, target.sigma.tobytes(),
            None if cov is None else cov.tobytes(), None if offset is None else offset.tobytes())


_GOAL = TARGETS.names.index('goal')
_EYE4 = np.eye(4)


def _with_goals(record, targets):
    """Return the targets' record ``record`` with the goals of ``targets`` (same structure)."""
    goal = np.empty((len(targets), 4, 4))
    goal[:] = _EYE4
    for i, t in enumerate(targets):
        kind = type(t)
        if kind is PoseTarget:
            goal[i] = t.pose
        elif kind is PositionTarget:
            goal[i, :3, 3] = t.position
        else:
            goal[i, :3, :3] = t.rotation
    return record[:_GOAL] + (goal,) + record[_GOAL + 1:]


def _targets_record(chain, targets, tolerance):
    """Return the targets as the kernels' record (``records.TARGETS``); its goals are
    ``_with_goals``'."""
    count = len(targets)
    body, offset = np.empty(count, dtype=np.int64), np.empty((count, 4, 4))
    goal, whiten = np.tile(np.eye(4), (count, 1, 1)), np.zeros((count, 6, 6))
    full = np.zeros(count, dtype=bool)
    kind = np.array([KERNEL_TARGETS[type(t)] for t in targets], dtype=np.int64)
    weight, sigma_p, sigma_o = np.empty(count), np.ones(count), np.ones(count)
    rows = 0
    for i, t in enumerate(targets):
        body[i], offset[i] = chain.link_anchor(t.link)
        lo = 3 if kind[i] == 2 else 0
        hi = 3 if kind[i] == 1 else 6
        if kind[i] == 1 and t.offset is not None:
            offset[i, :3, 3] += offset[i, :3, :3] @ t.offset
        weight[i] = t.weight
        if kind[i] != 2:
            sigma_p[i] = t.sigma[0]
        if kind[i] != 1:
            sigma_o[i] = t.sigma[-1]
        if t.covariance is not None:
            full[i] = True
            whiten[i, lo:hi, lo:hi] = t.whiten(np.eye(hi - lo)).T
        else:
            whiten[i, np.arange(lo, hi), np.arange(lo, hi)] = np.sqrt(t.weight) / t.sigma
        rows += hi - lo
    return TARGETS.pack(body=body, offset=offset, kind=kind, goal=goal, whiten=whiten,
                        full=full, weight=weight, sigma_position=sigma_p,
                        sigma_orientation=sigma_o, position_tolerance=tolerance[0],
                        orientation_tolerance=tolerance[1], rows=rows)


def _state_of(cost, guard):
    """Return ``kernels.state_of(cost, guard)``, built here (its kernel call costs twice
    these five arrays)."""
    k_count = len(cost)
    return (cost, guard, np.zeros(k_count, dtype=bool), np.zeros(k_count),
            np.zeros(k_count, dtype=bool), np.zeros(k_count), np.ones(k_count, dtype=bool))


def _rows(state, index):
    """Return the state record of the rows ``index``."""
    return tuple(np.ascontiguousarray(a[index]) for a in state)


def _put(state, index, part):
    """Write the state record ``part`` back into the rows ``index`` of ``state``."""
    for a, b in zip(state, part):
        a[index] = b


def _terms_cost(terms, frames):
    total = np.zeros(len(frames))
    for t in terms:
        total = total + t.cost(frames)
    return total


def _constrained(terms, hard, frames):
    """Return (K,) bool: some constraint of ``terms`` has a cost, or one of ``hard`` is
    violated, at ``frames``."""
    out = np.zeros(len(frames), dtype=bool)
    for c in terms:
        out |= c.cost(frames) > 0.0
    for c in hard:
        out |= np.asarray(c.violated(frames), dtype=bool)
    return out
