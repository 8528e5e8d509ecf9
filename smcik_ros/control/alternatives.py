"""The filter's alternatives as the node shows them: ~/alternatives, ~/status, ghost arms,
and the deliberate move to a listed branch.

Pure numpy, no ROS. ``AlternativesBook`` keeps the bookkeeping around the solver's API
(``Solver.alternatives`` and ``Solver.select_alternative``, docs/smc.md):

- ``refresh(solver, goal_id, q_command, now)``, at ``alternatives_rate_hz``: asks the solver
  for its distinct solution branches (best first), maps them to the command's coordinate
  (continuous joints: the equivalent nearest the current command, as the command stream
  does) and says whether the list must be published: when the set of branches changed (the
  goal, their number, the held one, or a branch moved by more than ``change_threshold``),
  and at least every ``republish_interval`` while it is not empty (a late subscriber hears it;
  the topic is volatile). A list that becomes void (no goal, or a solver with a single answer)
  is published once, empty.
- ``observe(solver, goal, now)``, after every solver step of the control loop: latches the
  filter's ``confidence``, ``branch_warning`` and the latest ``branch_switch`` record (a
  switch is reported on the one step it happens; ``~/status`` runs at a few Hz).
- ``select(index, solver, goal_id, now)``: makes the solver adopt the branch ``index`` of the
  last *published* list (by its configuration, so that a later ``alternatives()`` call cannot
  change what the index meant); an index out of range or a solver without alternatives is a
  ``GoalError`` (the node logs it). The command stream then moves there within its limits.
- ``status(now)``: the JSON-ready ``~/status`` fields (see docs/node.md).

Only solvers that override ``Solver.alternatives`` (the SMC filter) have alternatives; the
single-answer solvers (jacobian, distance, ccd, fabrik) publish none and the status says so.
"""

from dataclasses import dataclass
import math

import numpy as np

from ..errors import GoalError, ParameterError
from ..solvers.base import Solver
from .limits import nearest_equivalent

__all__ = ['AlternativesBook', 'BranchList', 'has_alternatives']


def has_alternatives(solver):
    """Return whether ``solver`` holds several hypotheses (overrides ``alternatives``)."""
    return type(solver).alternatives is not Solver.alternatives


@dataclass(frozen=True)
class BranchList:
    """One computed list of alternatives.

    q: (K, n) configurations in the command's coordinate [rad or m] (what ~/alternatives
    carries, best first); records: the solver's ``Alternative`` records (solver coordinate);
    goal_id: the goal they are for; stamp: when they were computed [s, node clock];
    note: why the list is empty ('' when it is not); available: False when the solver has
    no alternatives at all (a single-answer solver, or max_alternatives 0).
    """

    q: np.ndarray
    records: tuple
    goal_id: int
    stamp: float
    note: str = ''
    available: bool = True

    def __len__(self):
        return len(self.records)


def _empty(goal_id, stamp, note, n, available=True):
    return BranchList(q=np.zeros((0, n)), records=(), goal_id=goal_id, stamp=stamp, note=note,
                      available=available)


def _number(value, digits):
    if value is None:
        return None
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


class AlternativesBook:
    """Bookkeeping of the alternatives for one node (see the module docstring).

    n: joints of the chain; continuous: (n,) bool, the continuous joints (their values are
    unwrapped in the command's coordinate); max_alternatives: most branches listed (0 = off);
    change_threshold [rad or m]: a branch that moved by more on some joint is a new set;
    republish_interval [s]: a non-empty list is published at least this often;
    report: callable(level, key, text) (a control.Reporter; default: discard).
    """

    def __init__(self, n, continuous=None, max_alternatives=5, change_threshold=0.01,
                 republish_interval=1.0, report=None):
        self.n = int(n)
        self.continuous = (np.zeros(self.n, dtype=bool) if continuous is None
                           else np.asarray(continuous, dtype=bool))
        self.max_alternatives = max_alternatives
        self.change_threshold = float(change_threshold)
        self.republish_interval = float(republish_interval)
        self._report = report or (lambda *args, **kwargs: None)
        self.current = _empty(0, 0.0, 'no goal yet', self.n)      # the last computed list
        self.published = None        # the last published BranchList (None: nothing yet)
        self.published_time = None   # when it was published [s, node clock]
        self.published_stamp = None  # its message's header stamp [ns] (matched by ~/status)
        self.confidence = None
        self.branch_warning = None
        self.resting = None          # the filter rests: the goal is out of reach (SMC)
        self._rested_goal = None
        self.last_switch = None      # dict: reason, distance, goal_id, time
        self.switches = 0
        self.selections = 0
        self.last_selection = None   # dict: index, alternatives_stamp, goal_id, q
        self._warned_goal = None

    @property
    def max_alternatives(self):
        return self._max

    @max_alternatives.setter
    def max_alternatives(self, value):
        if isinstance(value, bool) or int(value) != value or int(value) < 0:
            raise ParameterError(f'max_alternatives must be an integer >= 0 (0 = off); got '
                                 f'{value!r}')
        self._max = int(value)

    # ------------------------------------------------------------------ computing the list
    def refresh(self, solver, goal_id, q_command, now):
        """Compute the current list; return True when it must be published now.

        goal_id: sequence number of the goal being followed (0: none); q_command: (n,) the
        last command (None before the first), the coordinate the list is given in.
        """
        if self._max == 0:
            current = _empty(goal_id, now, 'max_alternatives is 0 (off)', self.n, False)
        elif not has_alternatives(solver):
            current = _empty(goal_id, now, f'solver {solver.name} keeps a single answer: no '
                             'alternatives', self.n, False)
        elif goal_id == 0 or q_command is None:
            current = _empty(goal_id, now, 'no goal yet', self.n)
        else:
            records = tuple(solver.alternatives(self._max))
            q_command = np.asarray(q_command, dtype=float)
            q = np.array([nearest_equivalent(r.q, q_command, self.continuous)
                          for r in records]).reshape(-1, self.n)
            note = '' if records else 'the filter has not stepped on this goal yet'
            current = BranchList(q=q, records=records, goal_id=goal_id, stamp=now, note=note)
        self.current = current
        return self._should_publish(current, now)

    def switch_off(self, now, note):
        """Void the list (the alternatives were switched off); return True when an empty
        list must be published (a non-empty one was)."""
        self.current = _empty(self.current.goal_id, now, note, self.n, False)
        return self._should_publish(self.current, now)

    def _should_publish(self, current, now):
        last = self.published
        if last is None:
            return len(current) > 0
        if len(current) == 0:
            return len(last) > 0
        if (current.goal_id != last.goal_id or len(current) != len(last)
                or _held_index(current) != _held_index(last)):
            return True
        if np.max(np.abs(current.q - last.q)) > self.change_threshold:
            return True
        return now - self.published_time >= self.republish_interval

    def mark_published(self, now, stamp_ns=None):
        """Record that ``current`` was published at ``now`` [s] with the header stamp
        ``stamp_ns`` [ns] (reported as ``alternatives_stamp`` in ~/status)."""
        self.published = self.current
        self.published_time = float(now)
        self.published_stamp = None if stamp_ns is None else int(stamp_ns)

    # ------------------------------------------------------------------ per solver step
    def observe(self, solver, goal, now):
        """Latch what the solver's last step reported (call after every ``step``)."""
        info = solver.last_info or {}
        goal_id = goal.sequence if goal is not None else 0
        self.confidence = info.get('confidence')
        warning = info.get('branch_warning')
        self.branch_warning = None if warning is None else bool(warning)
        resting = info.get('resting')
        self.resting = None if resting is None else bool(resting)
        if resting and self._rested_goal != goal_id:
            self._rested_goal = goal_id
            self._report('warn', 'resting', (
                f'goal {goal_id}: out of reach (the filter\'s restarts found no configuration '
                'within tolerance): resting on its best estimate, '
                f'{1e3 * info.get("position_error", math.nan):.1f} mm and '
                f'{info.get("orientation_error", math.nan):.4f} rad from the goal, until the '
                'goal or the constraints change'))
        if warning and self._warned_goal != goal_id:
            self._warned_goal = goal_id
            self._report('warn', 'branch_warning', (
                f'goal {goal_id}: the held branch is about to be lost (the estimate does not '
                'satisfy the goal and has stopped improving); the filter may switch to another '
                'branch if the goal stays still'))
        switch = info.get('branch_switch')
        if switch is not None:
            self._record_switch(switch, goal_id, now)

    def _record_switch(self, switch, goal_id, now):
        self.switches += 1
        self.last_switch = {'reason': str(switch.get('reason')),
                            'distance': float(switch.get('distance', math.nan)),
                            'goal_id': int(goal_id), 'time': float(now)}
        self._report('info', 'branch_switch:' + self.last_switch['reason'], (
            f'goal {goal_id}: the filter moved to another branch ({self.last_switch["reason"]}'
            f', largest weighted joint change {self.last_switch["distance"]:.3f} rad)'),
            interval=1.0)

    # ------------------------------------------------------------------ deliberate move
    def select(self, index, solver, goal_id, now):
        """Make ``solver`` adopt branch ``index`` of the last published list.

        Returns the (n,) configuration (command coordinate) the command stream will move to.
        Raises GoalError when the solver has no alternatives or the index is out of range
        (nothing is changed then).
        """
        index = int(index)
        listed = self.published
        if not has_alternatives(solver):
            raise GoalError(f'select_alternative {index} refused: solver {solver.name} keeps a '
                            'single answer (no alternatives); switch to solver smc')
        if listed is None or not 0 <= index < len(listed):
            count = 0 if listed is None else len(listed)
            valid = f'0..{count - 1}' if count else 'none: nothing listed yet'
            raise GoalError(f'select_alternative {index} refused: out of range, the last '
                            f'~/alternatives listed {count} branch(es) (valid: {valid})')
        record = listed.records[index]
        solver.select_alternative(np.array(record.q, dtype=float))   # the solver's coordinate
        self.selections += 1
        self.last_selection = {'index': index, 'alternatives_stamp': self.published_stamp,
                               'goal_id': int(goal_id),
                               'q': [round(float(v), 6) for v in listed.q[index]]}
        previous = solver.last_info.get('branch_switch') if solver.last_info else None
        distance = (float(previous['distance']) if previous else float(record.distance))
        self._record_switch({'reason': 'selected', 'distance': distance}, goal_id, now)
        note = '' if listed.goal_id == goal_id else (
            f' (listed for goal {listed.goal_id}; the filter refines it towards goal '
            f'{goal_id})')
        self._report('info', 'select_alternative', (
            f'alternative {index} selected: distance {record.distance:.3f} rad, cost '
            f'{record.cost:.3g}, '
            f'{"within" if record.within_tolerance else "outside"} tolerance{note}; the '
            'commands move there within the limits'), interval=0.0)
        return listed.q[index].copy()

    # ------------------------------------------------------------------ status
    def status(self, now):
        """Return the alternatives' part of ~/status (JSON-ready values)."""
        listed = self.published
        current = self.current
        entries = [] if current.available else None
        if current.available and listed is not None:
            entries = [{'cost': _number(r.cost, 6), 'distance': _number(r.distance, 4),
                        'reached': bool(r.within_tolerance), 'held': bool(r.held),
                        'mass': _number(r.mass, 4),
                        'position_error': _number(r.position_error, 6),
                        'orientation_error': _number(r.orientation_error, 6)}
                       for r in listed.records]
        switch = None
        if self.last_switch is not None:
            switch = dict(self.last_switch)
            switch['distance'] = _number(switch['distance'], 4)
            switch['age'] = _number(now - switch.pop('time'), 3)
        return {
            'alternatives': entries,
            'alternatives_note': current.note or None,
            'alternatives_goal_id': listed.goal_id if listed is not None else None,
            'alternatives_stamp': self.published_stamp if listed is not None else None,
            'confidence': _number(self.confidence, 4),
            'branch_warning': self.branch_warning,
            'resting': self.resting,
            'branch_switch': switch,
            'branch_switches': self.switches,
            'selected_alternative': (None if self.last_selection is None
                                     else dict(self.last_selection)),
        }


def _held_index(branches):
    for i, record in enumerate(branches.records):
        if record.held:
            return i
    return -1
