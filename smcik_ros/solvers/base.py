"""What every solver shares: settings validation, the result record, online and batch loops.

A solver is built by ``make_solver(name, chain, **settings)``; its settings are a frozen
dataclass (field names = ROS parameter names, units in comments). Online use:
``reset(q)`` then ``step(goal)`` each control tick (the goal may change between steps).
Batch use: ``solve(goal, q_seed, max_iters, tol, timeout)`` returns an ``IKResult``;
not converging is ``success=False``, never an exception.
"""

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import Target, Term, as_goal, check_terms, task_errors
from ..rotations import quat_slerp

__all__ = ['IKResult', 'Alternative', 'Solver', 'LocalSolver', 'LocalSettings', 'SolverSettings',
           'StateKey', 'goal_signature', 'register', 'make_solver', 'available_solvers',
           'settings_type', 'parse_tolerance', 'stack_terms', 'check_fields', 'check_choice',
           'interpolate']

_REGISTRY = {}


@dataclass(frozen=True)
class IKResult:
    """Outcome of ``Solver.solve``.

    q: (nq,) best configuration found (always inside the joint limits);
    success: errors within tolerance and hard constraints satisfied;
    position_error [m], orientation_error [rad]: worst over the goal's targets;
    iterations: solver iterations used; elapsed: wall time [s].
    """

    q: np.ndarray
    success: bool
    position_error: float
    orientation_error: float
    iterations: int
    elapsed: float = 0.0
    constraints_ok: bool = True


@dataclass(frozen=True)
class Alternative:
    """One solution branch of ``Solver.alternatives``.

    q: (nq,) its configuration; cost: negative log-likelihood of the goal and constraints
    (``sum((whitened residual) ** 2)``, the filter's cost at temperature 1);
    position_error [m], orientation_error [rad]: worst over the goal's targets;
    distance: weighted joint distance [rad] from the current estimate (see docs/smc.md);
    mass: share of the posterior weight on this branch (1 for single-answer solvers);
    within_tolerance: the goal is satisfied within the solution tolerance;
    held: this is the branch the estimate is on.
    """

    q: np.ndarray
    cost: float
    position_error: float
    orientation_error: float
    distance: float
    mass: float
    within_tolerance: bool
    held: bool


@dataclass(frozen=True)
class SolverSettings:
    """Base class of solver settings: validated, immutable, ROS-parameter-named fields."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value) and f.default != value:
                raise ParameterError(f'{f.name} must be finite; got {value}')
        self.validate()

    def validate(self):
        """Raise ParameterError when a field is out of range (overridden per solver)."""

    def replace(self, **changes):
        """Return a copy with ``changes`` applied (validated)."""
        return build_settings(type(self), dict(dataclasses.asdict(self), **changes))


def _check(cond, message):
    if not cond:
        raise ParameterError(message)


def check_fields(settings, rule, *names, note=''):
    """Raise ParameterError unless each field ``names`` of ``settings`` satisfies ``rule``:
    '> a', '>= a' or an interval such as '(0, 1]' (a bracket closes its end); ``note``
    follows the rule in the message (a unit, what 0 means)."""
    interval = rule[0] in '(['
    if interval:
        low, high = (float(v) for v in rule[1:-1].split(','))
    else:
        op, low = rule.split()
        low = float(low)
    for name in names:
        value = getattr(settings, name)
        if interval:
            ok = ((low < value if rule[0] == '(' else low <= value)
                  and (value < high if rule[-1] == ')' else value <= high))
        else:
            ok = value > low if op == '>' else value >= low
        _check(ok, f'{name} must be {"in " if interval else ""}{rule}{note}; got {value}')


def check_choice(settings, name, choices):
    """Raise ParameterError unless field ``name`` of ``settings`` is one of ``choices``."""
    value = getattr(settings, name)
    _check(value in choices, f'{name} must be one of {", ".join(choices)}; got {value!r}')


def build_settings(cls, values):
    """Return ``cls(**values)``; unknown names or wrong types raise ParameterError."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ParameterError(f'unknown setting(s) {unknown} for {cls.__name__}; valid settings: '
                             f'{", ".join(sorted(fields))}')
    clean = {}
    for name, value in values.items():
        default = fields[name].default
        clean[name] = _coerce(name, value, default)
    try:
        return cls(**clean)
    except ParameterError:
        raise
    except (TypeError, ValueError) as exc:
        raise ParameterError(f'invalid settings for {cls.__name__}: {exc}') from exc


def _coerce(name, value, default):
    """Convert ``value`` to the type of ``default`` (ROS parameters arrive as int/float/str)."""
    if default is None or default is dataclasses.MISSING:
        return value
    if isinstance(default, bool):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        raise ParameterError(f'{name} must be a bool; got {value!r}')
    if isinstance(default, int):
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ParameterError(f'{name} must be an integer; got {value!r}')
    if isinstance(default, float):
        number = (int, float, np.integer, np.floating)
        if isinstance(value, number) and not isinstance(value, bool):
            return float(value)
        raise ParameterError(f'{name} must be a number; got {value!r}')
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise ParameterError(f'{name} must be a string; got {value!r}')
    if isinstance(default, tuple):
        try:
            return tuple(float(v) for v in value)
        except (TypeError, ValueError):
            raise ParameterError(f'{name} must be a list of numbers; got {value!r}') from None
    return value


def register(name):
    """Class decorator: make a Solver subclass available to ``make_solver(name, ...)``."""
    def wrap(cls):
        cls.name = name
        _REGISTRY[name] = cls
        return cls
    return wrap


def available_solvers():
    """Return the registered solver names."""
    return tuple(_REGISTRY)


def settings_type(name):
    """Return the settings dataclass of solver ``name``."""
    return _solver_class(name).Settings


def _solver_class(name):
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ParameterError(f'unknown solver {name!r}; available solvers: '
                             f'{", ".join(available_solvers())}') from None


def make_solver(name, chain, **settings):
    """Return the solver ``name`` for ``chain`` with ``settings`` (ParameterError if bad)."""
    cls = _solver_class(name)
    return cls(chain, build_settings(cls.Settings, settings))


# A scalar tol means tol [m] in position and ORIENTATION_PER_POSITION * tol [rad]: an
# orientation error of 10 * tol rad moves a point 10 cm from the tool by tol, so 1e-3 is
# the usual "1 mm and 0.01 rad" of IK benchmarks.
ORIENTATION_PER_POSITION = 10.0


def parse_tolerance(tol):
    """Return (position_tol [m], orientation_tol [rad]) from a number or a pair.

    A number ``t`` gives (t, 10 t): 1e-3 means 1 mm and 0.01 rad. A pair is taken as is.
    """
    if type(tol) in (tuple, list) and len(tol) == 2 and \
            all(isinstance(x, (float, int)) for x in tol):  # (a pair of numbers: no numpy call)
        pos, ori = float(tol[0]), float(tol[1])
    elif isinstance(tol, float) or np.ndim(tol) == 0:   # (a float: none either)
        pos = float(tol)
        ori = ORIENTATION_PER_POSITION * pos
    else:
        pair = np.asarray(tol, dtype=float).ravel()
        if pair.shape != (2,):
            raise ParameterError(f'tol must be a number or (position_tol, orientation_tol); '
                                 f'got {tol!r}')
        pos, ori = float(pair[0]), float(pair[1])
    if not (pos > 0.0 and ori > 0.0 and math.isfinite(pos) and math.isfinite(ori)):
        raise ParameterError(f'tolerances must be positive; got {tol!r}')
    return pos, ori


class Solver:
    """Base class: goal handling, constraints, the online/batch loops.

    Subclasses set ``Settings`` and implement ``_reset(q)`` and ``_iterate(targets, online)``,
    which returns ``(q_candidate, frames_of_candidate)`` for one iteration.
    """

    name = 'base'
    Settings = SolverSettings

    def __init__(self, chain, settings=None):
        if chain.floating and not self.honours_constraints:
            raise ParameterError(
                f'the {self.name} solver cannot drive a floating base: the base is held, or '
                'fitted to the contacts, through constraints, which it does not honour; use '
                'the smc, jacobian or distance solver')
        self.chain = chain
        self.settings = settings if settings is not None else self.Settings()
        self.constraints = []
        self.last_info = {}
        self._goal_key = None
        self._targets_key = None
        self._targets = None
        self._q = chain.neutral_configuration()
        self._estimate = self._q.copy()

    # ------------------------------------------------------------------ configuration
    # Whether the answers keep the constraints given. A solver that does not (ccd, fabrik)
    # refuses every constraint but a ``preference`` (the collision clearance: the node's
    # command guard keeps collision for every solver), rather than ignore it silently.
    honours_constraints = True

    def set_constraints(self, constraints):
        """Replace the constraint set (GoalError if one does not fit the chain, or if this
        solver does not honour constraints)."""
        constraints = check_terms(list(constraints or ()), self.chain)
        refused = [type(c).__name__ for c in constraints
                   if not self.honours_constraints and not getattr(c, 'preference', False)]
        if refused:
            raise GoalError(f'the {self.name} solver does not honour constraints (given: '
                            f'{", ".join(refused)}): its answers would ignore them; use the '
                            'smc, jacobian or distance solver for these, or send none')
        self.constraints = constraints
        self._on_constraints_changed()

    def _on_constraints_changed(self):
        pass

    def update_settings(self, **changes):
        """Apply setting changes in place, keeping the current estimate (no jump)."""
        self.settings = self.settings.replace(**changes)
        self._on_settings_changed()

    def _on_settings_changed(self):
        pass

    def reset(self, q):
        """Restart online use from configuration ``q`` (nq,) (clipped into the limits)."""
        q = self.chain.clip(self.chain.check_configuration(q, 'reset configuration'))
        if q.ndim != 1:
            raise GoalError(f'reset takes one configuration ({self.chain.nq},); got {q.shape}')
        self._reset_checked(q)

    def _reset_checked(self, q):
        """``reset`` from ``q`` (nq,), a float array already checked and within the limits
        (owned by the solver from here on)."""
        self._q = q
        self._estimate = q.copy()
        self._goal_key = None
        self._targets = None        # the next step re-arms its goal (annealing, stall counters)
        self._reset(q)

    @property
    def settled(self):
        """True when another ``step`` on the same goal and constraints cannot change the
        estimate (the control loop may then skip steps while the arm rests); False unless a
        solver knows better."""
        return False

    @property
    def estimate(self):
        """The current smoothed (online) estimate, (nq,)."""
        return self._estimate.copy()

    def _targets_for(self, goal):
        """Return (targets, changed). Goals are compared by value (a goal array or Target
        changed in place is a new goal), through a cheap signature of their numbers."""
        key = goal_signature(goal)
        if self._targets is not None and key is not None and key == self._goal_key:
            return self._targets, False
        targets = self._make_goal(goal)
        targets_key = goal_signature(targets)
        if self._targets_key is None and self._targets is not None:
            self._targets_key = goal_signature(self._targets)   # solve()'s, signed when used
        changed = self._targets is None or targets_key != self._targets_key
        self._goal_key, self._targets_key = key, targets_key
        self._targets = targets
        return targets, changed

    def _make_goal(self, goal):
        """Return the Target list of ``goal`` (solvers may set defaults, e.g. sigmas)."""
        return as_goal(goal, self.chain)

    # ------------------------------------------------------------------ loops
    def step(self, goal):
        """Run one online iteration towards ``goal`` and return the (nq,) estimate."""
        targets, changed = self._targets_for(goal)
        if changed:
            self._on_goal_changed(targets)
        q, frames = self._iterate(targets, online=True)
        self._estimate = self._smooth(self._estimate, q)
        pos, ori = task_errors(targets, frames)
        self.last_info.update(position_error=float(pos[0]), orientation_error=float(ori[0]))
        return self._estimate.copy()

    def _smooth(self, previous, candidate):
        return candidate

    def _on_goal_changed(self, targets):
        pass

    def solve(self, goal, q_seed, max_iters=300, tol=1e-3, timeout=None):
        """Solve ``goal`` from ``q_seed`` and return an ``IKResult``.

        goal: (4, 4) pose in the base frame [m], a Target or a list of Targets.
        tol: a number t means position error <= t [m] and orientation error <= 10 t [rad]
        (1e-3: 1 mm and 0.01 rad); or a pair (position_tol [m], orientation_tol [rad]).
        timeout: wall-clock budget [s]; the best estimate so far is returned when it runs out.
        """
        work = self.solve_steps(goal, q_seed, max_iters, tol, timeout)
        while True:
            try:
                next(work)
            except StopIteration as done:
                return done.value

    def solve_steps(self, goal, q_seed, max_iters=300, tol=1e-3, timeout=None):
        """Generator form of ``solve`` (same arguments): yield after each iteration, return
        the ``IKResult`` (``yield from`` gives it). A caller with a time budget per tick
        (the node's detour planning) spreads one solve over ticks; the solver must not be
        used otherwise until the generator is exhausted or dropped."""
        start = time.perf_counter()
        pos_tol, ori_tol = parse_tolerance(tol)
        max_iters = int(max_iters)
        if max_iters < 0:
            raise ParameterError(f'max_iters must be >= 0; got {max_iters}')
        targets = self._make_goal(goal)
        self._targets, self._goal_key = targets, None
        self._targets_key = None        # signed by the next step() that needs it
        self._solve_tolerance = (pos_tol, ori_tol)
        q_seed = self.chain.check_configuration(q_seed, 'q_seed')
        if q_seed.ndim != 1:
            raise GoalError(f'q_seed must have shape ({self.chain.nq},); got {q_seed.shape}')
        q_seed = self.chain.clip(q_seed)
        first = self._start_solve(q_seed, targets, first_stage=max_iters > 0)
        self._targets = targets
        if first is not None:
            q, pos, ori = first
            self.last_info = {'first_stage': True}
            return IKResult(q=q.copy(), success=True, position_error=pos,
                            orientation_error=ori, iterations=1,
                            elapsed=time.perf_counter() - start, constraints_ok=True)
        q = self._q
        frames = self.chain.frames(q)
        best = None
        iterations = 0
        while True:
            score = _score(self, targets, frames, pos_tol, ori_tol)
            if best is None or score[0] < best[0]:
                best = score + (q.copy(),)
            if best[1] or iterations >= max_iters:
                break
            if timeout is not None and time.perf_counter() - start >= timeout:
                break
            if iterations:
                yield
            q, frames = self._iterate(targets, online=False)
            iterations += 1
        _, success, pos, ori, ok, q = best
        chosen = self._solve_result(q, success and iterations > 0)
        if not np.array_equal(chosen, q):
            # Another success (nearer the seed) or the same one turned by whole turns: report
            # the errors of the configuration returned.
            _, success, pos, ori, ok = _score(self, targets, self.chain.frames(chosen),
                                              pos_tol, ori_tol)
            q = chosen
        return IKResult(q=q, success=bool(success), position_error=float(pos),
                        orientation_error=float(ori), iterations=iterations,
                        elapsed=time.perf_counter() - start, constraints_ok=bool(ok))

    def _start_solve(self, q_seed, targets, first_stage):
        """Start a solve from ``q_seed`` (nq,), in the limits; return (q, position error,
        orientation error) of a solution found before the iterations start (counted as the
        first; only when ``first_stage``), or None. The SMC overrides it (its seed stage)."""
        self.reset(q_seed)
        return None

    def _solve_result(self, q, solved):
        """Return the configuration ``solve`` returns for its best ``q`` (a solver may prefer
        an equivalent success: the same errors class, e.g. nearer the seed)."""
        return q

    # ------------------------------------------------------------------ alternatives
    def alternatives(self, max_count=5):
        """Return the distinct solution branches the solver holds, best first.

        A single-answer solver holds one: its current estimate (mass 1, distance 0), with
        its errors on the last goal (NaN before any goal). The SMC filter overrides this
        with the branches of its particles. Returns a list of ``Alternative`` records.
        """
        if int(max_count) < 1:
            raise ParameterError(f'max_count must be >= 1; got {max_count}')
        q = self._estimate.copy()
        if self._targets is None:
            pos = ori = float('nan')
            ok = False
            cost = float('nan')
        else:
            frames = self.chain.frames(q)
            p, o = task_errors(self._targets, frames)
            pos, ori = float(p[0]), float(o[0])
            cost = float(sum(t.cost(frames)[0] for t in self._targets + self.constraints
                             if type(t).residual is not Term.residual))
            ok = pos <= self._default_tolerance[0] and ori <= self._default_tolerance[1]
        return [Alternative(q=q, cost=cost, position_error=pos, orientation_error=ori,
                            distance=0.0, mass=1.0, within_tolerance=bool(ok), held=True)]

    _default_tolerance = (1e-3, 1e-2)

    def select_alternative(self, choice):
        """Move the estimate to a listed alternative: an index into the last
        ``alternatives()`` list, or a configuration (nq,). A single-answer solver restarts
        its online use there (``reset``). Returns the new estimate (nq,)."""
        q = self._alternative_q(choice, self.alternatives)
        targets = self._targets
        self.reset(q)
        self._targets = targets
        self._goal_key = None
        return self._estimate.copy()

    def _alternative_q(self, choice, listed):
        """Return the configuration of ``choice`` (index into ``listed()``, the last
        ``alternatives()`` list, or (nq,) array), validated."""
        if isinstance(choice, (int, np.integer)) and not isinstance(choice, bool):
            listed = listed()
            if not 0 <= int(choice) < len(listed):
                raise GoalError(f'alternative index {int(choice)} out of range: the last '
                                f'alternatives() listed {len(listed)} (0..{len(listed) - 1})')
            return listed[int(choice)].q.copy()
        q = self.chain.check_configuration(choice, 'alternative configuration')
        if q.ndim != 1:
            raise GoalError(f'select_alternative takes an index or one configuration '
                            f'({self.chain.nq},); got shape {q.shape}')
        return self.chain.clip(q)

    # ------------------------------------------------------------------ subclass hooks
    def _reset(self, q):
        pass

    def _iterate(self, targets, online):  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class LocalSettings(SolverSettings):
    """The settings every ``LocalSolver`` has: its restarts in ``solve``."""

    restart_after: int = 10     # solve(): iterations without progress before a restart from
    #                             a random configuration (0: never)
    seed: int = -1              # random seed of the restarts; -1: fresh entropy

    def validate(self):
        check_fields(self, '>= 0', 'restart_after', note=' (0: never restart)')
        check_fields(self, '>= -1', 'seed', note=' (-1: fresh entropy)')


class LocalSolver(Solver):
    """A solver that improves one configuration per iteration: jacobian, distance, ccd, fabrik.

    Subclasses implement ``_task(targets) -> (cost, task)``, the cost (a float) of the current
    configuration ``self._q`` (FK ``self._frames``) and what the step needs, and
    ``_update(targets, task, online) -> q`` (nq,), the next configuration. In ``solve``,
    ``restart_after`` iterations without a 0.1 % drop below the best cost so far restart
    from a random configuration (``_restart``); ``solve`` keeps the best iterate, so a
    restart never loses the best answer. Their settings extend ``LocalSettings``.
    """

    Settings = LocalSettings

    def __init__(self, chain, settings=None):
        super().__init__(chain, settings)
        self._configure()
        self._on_constraints_changed()
        self._reset(self._q)

    def _configure(self):
        """Set up what the settings decide: the restarts' random generator."""
        self._rng = np.random.default_rng(None if self.settings.seed < 0 else self.settings.seed)

    def _on_settings_changed(self):
        self._configure()

    def _reset(self, q):
        self._frames = self.chain.frames(q)
        self._best_cost, self._stalled = np.inf, 0     # the restart's stall count

    def _iterate(self, targets, online):
        cost, task = self._task(targets)
        if not online and self._stall(cost):
            self.last_info['restarts'] = self.last_info.get('restarts', 0) + 1
            q = self._restart()     # stuck in a local minimum (often at joint limits)
        else:
            q = self._update(targets, task, online)
        self._q = q
        self._frames = self.chain.frames(q)
        return q, self._frames

    def _stall(self, cost):
        """Record ``cost``; return True (and start counting again) when a restart is due."""
        if self.settings.restart_after <= 0:
            return False
        if cost < self._best_cost * (1.0 - 1e-3):
            self._best_cost, self._stalled = cost, 0
            return False
        self._stalled += 1
        if self._stalled < self.settings.restart_after:
            return False
        self._best_cost, self._stalled = np.inf, 0
        return True

    def _restart(self):
        """Return the configuration (nq,) a restart starts from: uniform in the limits."""
        return self.chain.random_configuration(self._rng)


def _score(solver, targets, frames, pos_tol, ori_tol):
    """Return (rank, success, pos_err, ori_err, constraints_ok) of a one-row Frames."""
    pos, ori = task_errors(targets, frames)
    pos, ori = float(pos[0]), float(ori[0])
    ok = not any(bool(c.violated(frames)[0]) for c in solver.constraints if c.hard)
    success = pos <= pos_tol and ori <= ori_tol and ok
    # Rank: solved first, then by normalised error, constraint violations last.
    rank = 0.0 if success else (1.0 + pos / solver.chain.length_scale + ori / np.pi
                                + (0.0 if ok else 10.0))
    return rank, success, pos, ori, ok


class StateKey:
    """What a cached result was computed from, to tell whether it still holds: ``objects``
    compared by identity (each is replaced, never changed in place, when what it holds
    changes; the key keeps them alive, so an identity is never reused) and ``values``
    compared by equality. ``constraints`` adds each constraint (identity) and its
    ``version`` (value), when it has one."""

    __slots__ = ('objects', 'values')
    __hash__ = None

    def __init__(self, objects=(), values=(), constraints=()):
        constraints = tuple(constraints)
        self.objects = tuple(objects) + constraints
        self.values = tuple(values) + tuple(getattr(c, 'version', None) for c in constraints)

    def __eq__(self, other):
        return (isinstance(other, StateKey) and len(self.objects) == len(other.objects)
                and all(a is b for a, b in zip(self.objects, other.objects))
                and self.values == other.values)


def goal_signature(goal):
    """Return a value signature of a goal (array, Target or list of Targets), or None when
    it holds something unknown. A few microseconds: the arrays as bytes, so a goal array or
    Target changed in place gets a new signature."""
    if isinstance(goal, np.ndarray):
        return ('array', goal.shape, goal.astype(float, copy=False).tobytes())
    if isinstance(goal, Target):
        return (_term_signature(goal),)
    if isinstance(goal, (list, tuple)):
        if goal and all(hasattr(g, 'residual') for g in goal):
            return tuple(_term_signature(g) for g in goal)
        try:
            arr = np.asarray(goal, dtype=float)
        except (TypeError, ValueError):
            return None
        return ('array', arr.shape, arr.tobytes())
    return None


_SIGNATURE_ATTRS = ('pose', 'position', 'rotation', 'offset', 'sigma', 'covariance', 'link',
                    'weight')


def _term_signature(term):
    out = [type(term).__name__]
    for attr in _SIGNATURE_ATTRS:
        value = getattr(term, attr, None)
        if isinstance(value, np.ndarray):
            value = value.tobytes()
        out.append(value)
    return tuple(out)


def interpolate(chain, a, b, t):
    """Return the configuration (nq,) a fraction ``t`` of the way from ``a`` to ``b`` (nq,):
    linear for 1-DOF joints, slerp for ball joints; clipped into the limits (a convex
    combination of in-limit points stays in the box: the clip guards rounding)."""
    out = a + t * (b - a)
    if chain.has_ball_joints:
        bq = chain.ball_q_index
        out[bq] = quat_slerp(a[bq], b[bq], t)
    return chain.clip(out)


def stack_terms(terms, frames, with_jacobian=True):
    """Return whitened residuals (N, K) and Jacobians (N, K, nv) of terms.

    Each term's rows go through ``term.whiten``: scaled by sqrt(weight) / sigma (a diagonal
    Sigma), or multiplied by sqrt(weight) L^-1 for a full covariance Sigma = L L^T (a goal
    with uncertainty), so that the squared norm is the SMC cost sum(r^T Sigma^-1 r) weight.
    """
    res, jac = [], []
    for t in terms:
        if with_jacobian:
            if hasattr(t, 'residual_jacobian'):
                r, j = t.residual_jacobian(frames)
            else:
                r, j = t.residual(frames), t.jacobian(frames)
            jac.append(t.whiten(j))
        else:
            r = t.residual(frames)
        res.append(t.whiten(r))
    if len(res) == 1:
        return (res[0], jac[0]) if with_jacobian else res[0]
    r = np.concatenate(res, axis=1)
    return (r, np.concatenate(jac, axis=1)) if with_jacobian else r
