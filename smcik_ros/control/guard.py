"""The guard of the command stream, without ROS: every motion validated, or a brake.

Validators are callables ``(q_from, q_to) -> ok`` (optionally with ``check_many(q_from,
q_tos) -> (K,) bool`` for a batch of motions and a ``reason`` text): the collision guard
(``collision_guard.CollisionGuard``) and the ``HardConstraintValidator`` below. Each sees
the motion from the last command to where the new one, as published (projected onto the
contacts and pinned tips), could stop at the latest: that end moved as the stream's
projection moves it, and as it was for validators that ask (``straight``).
``MotionGuard`` decides what the tick commands when one refuses:

1. A fallback: the first of the solver's other candidates (its MAP and heaviest particles)
   whose shaped motion every validator accepts and that takes the tools on their way no
   farther from their targets than the current command is (the sum of their errors), while
   a tool within ``FALLBACK_NEAR`` of its target stays within it.
2. Else a hold: brake, and restart the solver at the braking stop (a hard constraint is
   never entered; the solver looks again from where the arm stops).

Every brake stays on the last validated motion (``validated``): the shaper's brake when it
and its braking point lie on it, else its bent path if the validators accept it, else the
synchronized brake exactly on the line of the current velocity (``line_brakes``).
"""

import math

import numpy as np

from ..goals import project
from .limits import nearest_equivalent
from .shaping import ShapedCommand

__all__ = ['MotionGuard', 'HardConstraintValidator', 'violation', 'free_motions', 'DEEPER']

# [m or rad] a sample deeper than the start by more than this goes deeper (rounding).
DEEPER = 1e-12


def violation(constraint, frames):
    """Return (N,) how far each configuration of ``frames`` is inside a hard constraint
    (the norm of its residual where ``violated``; 0 where it is kept)."""
    bad = np.asarray(constraint.violated(frames), dtype=bool)
    if not bad.any():
        return np.zeros(len(bad))
    residual = np.asarray(constraint.residual(frames), dtype=float).reshape(len(bad), -1)
    return np.where(bad, np.linalg.norm(residual, axis=1), 0.0)


def free_motions(validators, q_from, q_tos, straight=None):
    """Return (K,) bool: whether every validator accepts the motion q_from -> q_tos[k]
    (K, nq); one batched check per validator that has ``check_many``, and only the motions
    the validators before it accepted. straight: None, or (K, nq) the same motions' ends
    before the projection onto the contacts, judged too by the validators that ask for it
    (``straight = True``: the stream's path lies between the two)."""
    ok = np.ones(len(q_tos), dtype=bool)
    for validator in validators:
        for q_ends in _ends(validator, q_tos, straight):
            idx = np.flatnonzero(ok)
            if not len(idx):
                return ok
            check_many = getattr(validator, 'check_many', None)
            if check_many is not None:
                ok[idx] = np.asarray(check_many(q_from, q_ends[idx]), dtype=bool)
            else:
                ok[idx] = [bool(validator(q_from, q_ends[k])) for k in idx]
    return ok


def _ends(validator, end, straight):
    """Return the ends of a motion that ``validator`` judges: ``end`` (as the projection
    lands it), and ``straight`` (before it) too where it asks (``straight = True``)."""
    return [end] + ([straight] if straight is not None and getattr(validator, 'straight',
                                                                    False) else [])


class HardConstraintValidator:
    """Refuse motions that go deeper into a hard constraint (keep-out volumes, the centre of
    mass over its support polygon, ...).

    ``validator(q_from, q_to)`` checks the straight segment between two solver states:
    constraints with a ``check_motion(q_from, q_to)`` (the collision constraints, keep-out
    obstacles) check it at their own sub-step bound with q_from as the reference (a motion
    may leave what q_from penetrates, never go deeper); others are sampled at most
    ``resolution`` [rad or m] apart on any joint (``max_samples``) and refused when the start
    is outside and a later sample inside, or, from a start already inside (a constraint that
    arrived violated), when a later sample is deeper (``violation``): only motion that reduces
    the violation passes. Hard equalities (contacts: ``equality``) are not sampled: the
    command stream projects onto them (``base``). The guard hands it a motion's end as the
    projection onto them lands it and as it was (``straight``): where the limits let the
    stream take only a share of its corrections, the commands stay near the straight path
    (Unitree H1: the CoM headed out along it 3.2 mm past its guarded margin while the
    landed ends lay 4-12 mm inside; black box), and where they take all of it, near the
    landed one. ``constraints``: the solver's constraint objects (``hard`` ones are
    checked; those still waiting for an anchor are not); skip: predicate constraint -> True
    for constraints another validator checks (the collision guard's own constraint).
    """

    straight = True     # judge the end before the projection too (``free_motions``)

    def __init__(self, chain, resolution=0.05, max_samples=16, skip=None):
        self.chain = chain
        self.resolution = float(resolution)
        self.max_samples = int(max_samples)
        self.skip = skip
        self.constraints = []
        self.reason = ''

    def __call__(self, q_from, q_to):
        hard = [c for c in self.constraints if c.hard and not getattr(c, 'equality', False)
                and getattr(c, 'anchored', True) and not (self.skip and self.skip(c))]
        if not hard:
            return True
        q_from = np.asarray(q_from, dtype=float)
        q_to = np.asarray(q_to, dtype=float)
        sampled = [c for c in hard if not hasattr(c, 'check_motion')]
        for constraint in hard:
            if constraint in sampled:
                continue
            ok, info = constraint.check_motion(q_from, q_to)
            if not ok:
                pair = info.get('pair')
                self.reason = (f'the motion would go deeper into a hard constraint '
                               f'({type(constraint).__name__}'
                               + (f': {" / ".join(pair)}' if pair else '') + ')')
                return False
        if not sampled:
            return True
        span = float(np.max(np.abs(q_to - q_from))) if q_from.size else 0.0
        count = min(self.max_samples, max(2, int(math.ceil(span / self.resolution)) + 1))
        t = np.linspace(0.0, 1.0, count)[:, None]
        frames = self.chain.frames(q_from + t * (q_to - q_from))
        for constraint in sampled:
            bad = np.asarray(constraint.violated(frames), dtype=bool)
            if not bad[0] and np.any(bad[1:]):
                self.reason = (f'the motion would enter a hard constraint '
                               f'({type(constraint).__name__})')
                return False
            if bad[0]:
                depth = violation(constraint, frames)
                if np.any(depth[1:] > depth[0] + DEEPER):
                    self.reason = (f'the motion would go deeper into a hard constraint it '
                                   f'violates ({type(constraint).__name__})')
                    return False
        return True


class MotionGuard:
    """The tick's guard (see the module doc).

    chain: the Chain; limits: JointLimits; shaper: the loop's CommandShaper; stepper: its
    SolverStepper (the fallback candidates, restarts at the stop); report:
    callable(level, key, text, ...); validators: list of validators (add and remove
    freely); fallback_candidates: how many of the solver's heaviest particles (plus its MAP)
    are tried when a validator refuses the estimate's motion (0: brake at once);
    hold_reset_interval [ticks]: while a hold lasts, the solver restarts at the stop on its
    first tick and then every this many ticks (1: every tick).
    """

    FALLBACK_SLACK = 1e-6   # [m] a fallback's tool may be this much farther from the goal
    FALLBACK_NEAR = 0.001   # [m] a tool this near its target stays this near in a fallback

    def __init__(self, chain, limits, shaper, stepper, report, validators=(),
                 fallback_candidates=8, hold_reset_interval=1):
        self.chain = chain
        self.limits = limits
        self.shaper = shaper
        self.stepper = stepper
        self.report = report
        self.validators = list(validators)
        self.fallback_candidates = fallback_candidates
        self.hold_reset_interval = hold_reset_interval
        # (start, end) of the last validated motion: the previous command to the braking
        # point of the current one. Every brake stays on it.
        self.validated = None
        self.figure = None          # base.FigureState: commands -> solver states (the loop's)
        self.holds = 0              # ticks a validator made brake (no free fallback)
        self.fallbacks = 0          # ticks that moved towards another solver candidate
        self.line_brakes = 0        # brakes forced back onto the validated line
        self.last_refusal = None    # {'tick', 'validator', 'reason', 'outcome'}
        self._hold_streak = 0
        self._last_hold = -2

    def set_constraints(self, constraints):
        """Hand the constraint set to the validators that take one."""
        for validator in self.validators:
            if hasattr(validator, 'constraints'):
                validator.constraints = list(constraints)

    def _state(self, q):
        """Return the solver's state(s) of command(s) q: (C,) -> (nq,), (K, C) -> (K, nq)."""
        return np.asarray(q, dtype=float) if self.figure is None else self.figure.state(q)

    def _motion(self, q_from, q_to):
        """Return the solver states (start, end, straight) of the motion(s) q_from (C,) ->
        q_to (C,) or (K, C): the base fitted, and the end moved as far as the stream's
        projection onto what the commands keep (``FigureState.kept``: planted feet, pinned
        tips) moves it beyond what it moves the start (a start a hair off the loop is
        corrected by the stream either way); straight: the end before that move (None
        without one). A straight stop leaves the loop of two planted feet at first order in
        its length, and the commands that brake towards it are projected back onto the loop
        on every tick: judged off the loop alone, Unitree H1's stops stayed inside its
        guarded CoM polygon for three ticks after their projections had crossed it (by up
        to 2.9 mm), and its CoM ended 0.79 and 0.39 mm past the margin (offline, one goal, 2
        seeds). Not for chains with ball joints (their states do not add)."""
        start, end = self._state(q_from), self._state(q_to)
        figure = self.figure
        if figure is None or not figure.kept or self.chain.has_ball_joints:
            return start, end, None
        landed, _ = project(self.chain, np.vstack([start[None], np.atleast_2d(end)]),
                            figure.kept)
        moved = start + (landed[1:] - landed[0])
        return start, (moved[0] if end.ndim == 1 else moved), end

    def refuses(self, q_from, q_to):
        """Return the first validator that refuses the motion q_from -> q_to (commands),
        judged on the solver's states (``_motion``; its straight end too where the
        validator asks for it), or None."""
        if not self.validators:
            return None
        state_from, state_to, straight = self._motion(q_from, q_to)
        for validator in self.validators:
            if not all(validator(state_from, end)
                       for end in _ends(validator, state_to, straight)):
                return validator
        return None

    def admit(self, q, v, dt, lead_box, shaped, desired, goal, tick):
        """Return what tick ``tick`` commands instead of ``shaped`` (ShapedCommand from the
        command q, v (n,) over dt [s] towards ``desired`` (n,) or None, following ``goal``):
        itself when its motion to its braking point is valid, else a fallback or a brake."""
        stop = self.shaper.stopping_point(shaped.q, shaped.v)
        if self.validators:
            refused = self.refuses(q, stop)
            if refused is not None:
                shaped, stop = self._after_refusal(refused, q, v, dt, lead_box, desired, goal,
                                                   tick)
        if stop is not None:
            self.validated = (q.copy(), stop)
        return shaped

    def note_hold(self, validator, tick, reason=None):
        """Count a hold that ``validator`` caused at ``tick``; return its reason (default:
        the validator's ``reason`` now)."""
        reason = reason or getattr(validator, 'reason', '') or type(validator).__name__
        self.holds += 1
        self.last_refusal = {'tick': tick, 'validator': type(validator).__name__,
                             'reason': reason, 'outcome': 'hold'}
        return reason

    def _after_refusal(self, validator, q, v, dt, lead_box, desired, goal, tick):
        """Return (shaped, stop or None) after ``validator`` refused the estimate's motion:
        a free fallback candidate, else a brake (and the solver restarts at its stop)."""
        name = type(validator).__name__
        reason = getattr(validator, 'reason', '') or name     # before the fallback's checks
        alternative = None
        if desired is not None:
            alternative = self._fallback(q, v, dt, lead_box, desired, goal)
        if alternative is not None:
            self.fallbacks += 1
            self.last_refusal = {'tick': tick, 'validator': name, 'reason': reason,
                                 'outcome': 'fallback'}
            self.report('info', f'fallback:{name}', (
                f'{reason}: moving towards another of the solver\'s candidates instead'))
            return alternative
        self.note_hold(validator, tick, reason)
        self.report('warn', f'validator:{name}', (
            f'{reason}: braking instead, the solver restarts at the stop'))
        shaped = self.brake(q, v, dt, lead_box)
        self.stepper.forget_answer()
        # Restart the solver at the stop on the first hold of an episode, then every
        # ``hold_reset_interval`` ticks while holding (default 1: every tick, docs/collision.md
        # section 6). A restart re-seeds the SMC, its dearest step: on the demo arm a long hold
        # costs ~25 ms CPU per tick at 1 and ~5 ms at 'first tick only', but larger intervals
        # did not reach more goals in the by-hand Panda runs (a held filter deadlocks).
        if tick - self._last_hold > 1 or self._hold_streak % self.hold_reset_interval == 0:
            self._hold_streak = 0
            self.stepper.reset(self.shaper.stopping_point(shaped.q, shaped.v))
        self._hold_streak += 1
        self._last_hold = tick
        return shaped, None

    def _fallback(self, q, v, dt, lead_box, desired, goal):
        """Return (shaped, stop) towards the first free fallback candidate, or None.

        Each candidate (``_candidates``) is shaped within the limits from the current
        command; the first whose motion to its braking point every validator accepts
        (``free_motions``, in order, in growing batches) and that takes the tool no
        farther from the goal than the current command is.
        """
        if self.fallback_candidates <= 0:
            return None
        candidates = self._candidates(q, desired)
        if candidates is None or not len(candidates):
            return None
        shaped = [self.shaper.step(q, v, dt, c, lead_box) for c in candidates]
        stops = np.array([self.shaper.stopping_point(s.q, s.v) for s in shaped])
        ok = np.ones(len(stops), dtype=bool)
        if goal is not None:
            # No fallback command takes the tools farther from their targets than the
            # current command is (the branch hold's rule for the estimate; several tips on
            # their way: the sum of their position errors): at the margin of an obstacle
            # that blocks the goal, the arm holds instead of wandering along it. A tip
            # within FALLBACK_NEAR of its target (holding, or its goal reached) stays
            # within it: the sum alone let a fallback trade a held hand's pose for the
            # other hand's progress (22 mm on talos).
            frames = self.chain.frames(self._state(np.vstack([q] + [s.q for s in shaped])))
            pos = np.array([term.errors(frames)[0] for term in goal.terms])
            near = pos[:, 0] <= self.FALLBACK_NEAR
            ok &= np.all(pos[near, 1:] <= self.FALLBACK_NEAR, axis=0)
            if not near.all():
                way = pos[~near].sum(axis=0)
                ok &= way[1:] <= way[0] + self.FALLBACK_SLACK
            if not ok.any():
                return None
        state, stop_states, straight = self._motion(q, stops)
        todo, size = np.flatnonzero(ok), 1
        while len(todo):
            # In order, in batches of 1, 2, 4, ...: the first free candidate ends the
            # checks (eight took up to 0.94 s of one tick on Talos's 4 mm covers).
            batch, todo, size = todo[:size], todo[size:], 2 * size
            free = free_motions(self.validators, state, stop_states[batch],
                                None if straight is None else straight[batch])
            if free.any():
                k = int(batch[int(np.argmax(free))])
                return shaped[k], stops[k]
        return None

    def _candidates(self, q, desired):
        """Return the fallback candidates (K, n) in the command's coordinates, in order and
        distinct, other than the refused ``desired``: the MAP and the heaviest particles of
        the last answer's solver info (``last_info`` after that step; the tick does not wait
        for a running one), at most ``fallback_candidates + 1``; None without any."""
        info = self.stepper.step_info
        rows = []
        if info.get('map') is not None:
            rows.append(np.atleast_2d(np.asarray(info['map'], dtype=float)))
        particles = info.get('particles')
        if particles is not None and len(particles):
            particles = np.asarray(particles, dtype=float)
            weights = info.get('weights')
            order = np.argsort(-np.asarray(weights)) if weights is not None \
                else np.arange(len(particles))
            rows.append(particles[order[:4 * self.fallback_candidates]])
        if not rows:
            return None
        candidates = np.concatenate(rows)
        if self.figure is not None and candidates.ndim == 2:
            candidates = self.figure.command(candidates)
        if candidates.ndim != 2 or candidates.shape[1] != q.shape[0]:
            return None
        candidates = nearest_equivalent(candidates, q, self.limits.continuous)
        _, first = np.unique(np.round(candidates, 9), axis=0, return_index=True)
        candidates = candidates[np.sort(first)]
        candidates = candidates[np.any(np.abs(candidates - desired) > 1e-9, axis=1)]
        return candidates[:self.fallback_candidates + 1]

    # ------------------------------------------------------------------ brakes
    def brake(self, q, v, dt, lead_box, validate=True):
        """Return a braking ShapedCommand from q, v (n,) that stays on the validated line.

        The shaper's brake (synchronized on the current line) is taken when it and its
        braking point lie on the last validated motion; when the per-joint safety net bent
        it (a joint at its position or lead bound), the bent motion is validated
        (``validate``); otherwise the brake follows the validated line exactly.
        """
        braked = self.shaper.brake(q, v, dt, lead_box)
        if self._on_validated_line(braked):
            return braked
        if validate and self.validators:
            stop = self.shaper.stopping_point(braked.q, braked.v)
            if self.refuses(q, stop) is None:
                self.validated = (q.copy(), stop)
                return braked
        return self._line_brake(q, v, dt)

    def _on_validated_line(self, shaped):
        """Return True when the command and its braking point lie on the validated motion."""
        if self.validated is None:
            return True
        start, end = self.validated
        span = end - start
        length2 = float(span @ span)
        tol = 1e-9 * (1.0 + math.sqrt(length2))
        for point in (shaped.q, self.shaper.stopping_point(shaped.q, shaped.v)):
            offset = point - start
            t = float(offset @ span) / length2 if length2 > 0.0 else 0.0
            if t < -tol or t > 1.0 + tol or np.max(np.abs(offset - t * span)) > tol:
                return False
        return True

    def _line_brake(self, q, v, dt):
        """Return the synchronized brake at the shaper's largest deceleration, exactly on the
        line of the current velocity v (inside the validated motion: its braking point moves
        back).

        Velocity and acceleration limits hold; positions are clipped into the limits; the lead
        bound may be exceeded (a collision-free line beats the lead). The shaper's limits
        leave the projection onto contacts its room (``FigureState.shaper_limits``): braking
        at the full limit left Unitree H1 no share of its CoM correction, and its CoM
        passed the margin by up to 7.4 mm (offline, one goal, 2 of 4 seeds)."""
        self.line_brakes += 1
        self.report('warn', 'line_brake', (
            'the limiter\'s brake left the validated motion and its own path was refused: '
            'braking exactly on the validated line (the lead bound may be exceeded briefly)'))
        speed = np.abs(v)
        moving = speed > 0.0
        if not moving.any():
            return ShapedCommand(q.copy(), np.zeros_like(q), 'stop')
        factor = max(0.0, 1.0 - float(np.min(self.shaper.limits.acceleration[moving] * dt
                                             / speed[moving])))
        q_new = self.limits.clip(q + factor * v * dt)
        return ShapedCommand(q_new, (q_new - q) / dt, 'stop')

    # ------------------------------------------------------------------ status
    def refusal(self, tick, within=None):
        """Return the last refusal {'tick', 'validator', 'reason', 'outcome' ('hold' or
        'fallback'), 'ticks_ago'} as seen at ``tick`` (None if none, or older than
        ``within`` ticks)."""
        if self.last_refusal is None:
            return None
        ago = tick - self.last_refusal['tick']
        if within is not None and ago > within:
            return None
        return dict(self.last_refusal, ticks_ago=ago)

    def refusal_text(self, tick, within=50):
        """Return what the last refusal (within ``within`` ticks of ``tick``) did, or ''."""
        refusal = self.refusal(tick, within)
        if refusal is None:
            return ''
        if refusal['outcome'] == 'hold':
            return f'holding: {refusal["reason"]}'
        return f'detour: {refusal["reason"]}; moving towards another solver candidate'
