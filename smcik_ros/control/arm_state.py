"""The arm's state as measured on joint_states: WAITING, ACTIVE, STALE, RESYNC.

Pure Python/numpy, no ROS; times are seconds on the node's clock (ROS time, so sim time
under use_sim_time). The node feeds every joint_states message to ``ArmMonitor.measure`` and
asks ``ArmMonitor.decide`` once per control tick what the command stream must do:

- WAITING: no complete measurement yet: publish nothing (unless the simulation-only
  ``start_without_joint_states`` is set: then command from an assumed start).
- ACTIVE: measurements are fresh and the command is near them: follow the goal.
- STALE: the newest measurement of some joint is older than ``joint_states_timeout``:
  decelerate to a stop within the acceleration limit and hold (keep publishing the held
  command); warned once per episode.
- RESYNC (one tick): start, or come back from STALE, or the measurement and the command differ
  by more than ``resync_threshold`` on a joint while measurements are fresh (arm moved by hand,
  restarted, fell behind): the command restarts from exactly the measurement at zero velocity
  and the solver is reset there.

A measurement's age is ``now - stamp`` when the header stamp is set and on this clock, else
``now - arrival``; a stamp in the future counts as its arrival, and stamps more than
``clock_mismatch`` from now are taken for another clock (warned once, arrival used). NaN
and missing joints keep their last good values (and their age).
"""

from dataclasses import dataclass
import enum
import math

import numpy as np

from ..errors import ParameterError
from .limits import commanded, nearest_equivalent

__all__ = ['ArmState', 'ArmSettings', 'ArmMonitor', 'Decision', 'MeasureReport',
           'initial_configuration']


class ArmState(enum.Enum):
    """What the command stream does on this tick."""

    WAITING = 'waiting'
    ACTIVE = 'active'
    STALE = 'stale'
    RESYNC = 'resync'


@dataclass(frozen=True)
class ArmSettings:
    """Settings of the arm state machine (ROS parameters of the same names)."""

    joint_states_timeout: float = 0.5       # [s] newest joint_states older than this: STALE
    resync_threshold: float = 0.2           # [rad or m] |measured - command| beyond: RESYNC
    max_lead: float = 0.15                  # [rad or m] command never further from the
    #                                         measurement (braking constraint in the shaper)
    start_without_joint_states: bool = False  # simulation only: command before any
    #                                           measurement, from the assumed start
    clock_mismatch: float = 10.0            # [s] stamps further from now: another clock

    def __post_init__(self):
        for name in ('joint_states_timeout', 'resync_threshold', 'max_lead', 'clock_mismatch'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value <= 0.0:
                raise ParameterError(f'{name} must be a finite number > 0; got {value!r}')
        if self.resync_threshold <= self.max_lead:
            raise ParameterError(
                f'resync_threshold ({self.resync_threshold:g}) must be larger than max_lead '
                f'({self.max_lead:g}): the command may lead the measurement by max_lead in '
                'normal operation, so a smaller threshold would resync a healthy arm')
        if not isinstance(self.start_without_joint_states, bool):
            raise ParameterError(f'start_without_joint_states must be a bool; got '
                                 f'{self.start_without_joint_states!r}')


@dataclass(frozen=True)
class Decision:
    """What ``ArmMonitor.decide`` tells the tick.

    state: ArmState; resync_to: (n,) the measured configuration to restart from (RESYNC)
    else None; events: [(level, key, text)] to log ('info', 'warn', 'error').
    """

    state: ArmState
    resync_to: np.ndarray = None
    events: tuple = ()


# The decision of most ticks (immutable: one object serves them all).
_ACTIVE = Decision(ArmState.ACTIVE)


@dataclass(frozen=True)
class MeasureReport:
    """What ``ArmMonitor.measure`` made of one joint_states message.

    updated: names of joints whose value was taken (NaN entries keep their last good value);
    events: [(level, key, text)].
    """

    updated: tuple
    events: tuple = ()


class ArmMonitor:
    """The arm state machine: last good measurement per joint, freshness, resync decisions.

    joint_names: (n,) chain order; continuous: (n,) bool (differences of continuous joints
    are taken modulo 2 pi, so a driver that wraps them does not cause resyncs; read-only).
    """

    def __init__(self, joint_names, continuous, settings=None):
        self.joint_names = tuple(joint_names)
        self.continuous = np.array(continuous, dtype=bool)
        self.continuous.setflags(write=False)
        self._wraps = bool(self.continuous.any())   # else the lead is a plain difference
        self.settings = settings or ArmSettings()
        n = len(self.joint_names)
        self._q = np.full(n, np.nan)          # last good value per joint [rad or m]
        self._time = np.full(n, -np.inf)      # its time on the node's clock [s]
        self._complete = False                # every joint measured (values only get taken)
        self.state = ArmState.WAITING
        self._stale_since = None
        self._clock_warned = False
        self.resyncs = 0
        self.stale_episodes = 0

    # ------------------------------------------------------------------ measurements
    @property
    def measured(self):
        """(n,) last good measured positions (NaN for joints never measured)."""
        return self._q.copy()

    @property
    def complete(self):
        """True once every joint has been measured."""
        return self._complete

    def measure(self, positions, stamp, now):
        """Take one joint_states message.

        positions: (n,) values in chain order, NaN where the message lacks the joint or
        carries a non-finite value; stamp: header stamp [s] or None when not set (zero);
        now: arrival time on the node's clock [s]. Returns a MeasureReport.
        """
        positions = np.asarray(positions, dtype=float)
        if positions.shape != self._q.shape:
            raise ValueError(f'expected {self._q.size} positions '
                             f'({", ".join(self.joint_names)}); got shape {positions.shape}')
        events = []
        when = now
        if stamp is not None and stamp > 0.0:
            if abs(now - stamp) > self.settings.clock_mismatch:
                if not self._clock_warned:
                    self._clock_warned = True
                    events.append(('warn', 'clock', (
                        f'joint_states header stamps are {now - stamp:+.1f} s from this '
                        f'node\'s clock (more than {self.settings.clock_mismatch:g} s): taken '
                        'for another clock, freshness is judged by arrival time; check '
                        'use_sim_time and the clock synchronisation of the arm\'s computer')))
            else:
                when = min(stamp, now)
        good = np.isfinite(positions)
        if good.all():      # the usual message: every joint, no masks
            self._q[:] = positions
            np.maximum(self._time, when, out=self._time)
            self._complete = True
            return MeasureReport(updated=self.joint_names, events=tuple(events))
        self._q[good] = positions[good]
        self._time[good] = np.maximum(self._time[good], when)
        if not self._complete:
            self._complete = bool(np.isfinite(self._q).all())
        names = self.joint_names
        return MeasureReport(updated=tuple(n for n, g in zip(names, good) if g),
                             events=tuple(events))

    def age(self, now):
        """Return the age [s] of the oldest joint's newest good value (inf if never)."""
        return float(now - self._time.min())

    def fresh(self, now):
        """True when every joint has a value younger than joint_states_timeout."""
        return self.complete and self.age(now) <= self.settings.joint_states_timeout

    def lead(self, q_cmd):
        """Return |measured - command| per joint (n,), continuous joints modulo 2 pi."""
        q_cmd = np.asarray(q_cmd, dtype=float)
        return np.abs(self._near(q_cmd) - q_cmd)

    def lead_box(self, q_cmd):
        """Return (lo, hi) (n,): the box of half-width max_lead around the measurement,
        continuous joints taken at their equivalent nearest the command."""
        center = self._near(np.asarray(q_cmd, dtype=float))
        return center - self.settings.max_lead, center + self.settings.max_lead

    def _near(self, q_cmd):
        """The measurement (n,), continuous joints at their equivalent nearest q_cmd (the
        measurement itself, not a copy, without continuous joints: callers only read it)."""
        if not self._wraps:
            return self._q
        return nearest_equivalent(self._q, q_cmd, self.continuous)

    # ------------------------------------------------------------------ decisions
    def decide(self, now, q_cmd):
        """Return the Decision for the tick at ``now`` [s].

        q_cmd: (n,) the last published command, or None when nothing was published yet.
        """
        cfg = self.settings
        fresh = self.fresh(now)
        previous = self.state
        events = []
        if previous is ArmState.WAITING or q_cmd is None:
            if fresh:
                events.append(('info', 'start', (
                    'joint_states received: commanding from the measured configuration '
                    f'{np.array2string(self._q, precision=3)}')))
                return self._resync(events)
            self.state = ArmState.WAITING
            return Decision(ArmState.WAITING, events=tuple(events))
        if previous is ArmState.STALE:
            if fresh:
                events.append(('info', 'resumed', (
                    f'joint_states resumed after {now - self._stale_since:.2f} s: commands '
                    'restart from the measured configuration '
                    f'{np.array2string(self._q, precision=3)} at rest')))
                return self._resync(events)
            return Decision(ArmState.STALE)
        if not self.complete:
            # Commanding blind (start_without_joint_states) until a complete measurement.
            self.state = ArmState.ACTIVE
            return _ACTIVE
        if not fresh:
            self.state = ArmState.STALE
            self._stale_since = now
            self.stale_episodes += 1
            oldest = self.joint_names[int(np.argmin(self._time))]
            events.append(('warn', 'stale', (
                f'joint_states stale: the newest value of {oldest} is {self.age(now):.2f} s old '
                f'(joint_states_timeout = {cfg.joint_states_timeout:g} s): decelerating to a '
                'stop and holding until they resume')))
            return Decision(ArmState.STALE, events=tuple(events))
        lead = self.lead(q_cmd)
        if lead.max() > cfg.resync_threshold:
            worst = int(lead.argmax())
            events.append(('warn', 'resync', (
                f'measured and commanded positions differ by {lead[worst]:.3f} on '
                f'{self.joint_names[worst]} (> resync_threshold = {cfg.resync_threshold:g}; '
                'arm moved by hand, restarted or fell behind): restarting from the measured '
                'configuration at rest')))
            return self._resync(events)
        self.state = ArmState.ACTIVE
        return _ACTIVE

    def forget(self):
        """Drop every measurement and return to WAITING (the node clock was reset)."""
        self._q[:] = np.nan
        self._time[:] = -np.inf
        self._complete = False
        self.state = ArmState.WAITING
        self._stale_since = None

    def start_blind(self):
        """Leave WAITING without a measurement (start_without_joint_states, simulation)."""
        if not self.settings.start_without_joint_states:
            raise ParameterError('commanding before any joint_states needs '
                                 'start_without_joint_states: true (simulation only)')
        self.state = ArmState.ACTIVE

    def _resync(self, events):
        self.state = ArmState.RESYNC
        self.resyncs += 1
        return Decision(ArmState.RESYNC, resync_to=self._q.copy(), events=tuple(events))


def initial_configuration(chain):
    """Return the assumed start of the commanded joints without a measurement (C,): 0 where
    the range holds 0, else mid-range (the node's simulation-only blind start)."""
    index = commanded(chain)
    lower, upper = chain.lower[index], chain.upper[index]
    return np.where((lower <= 0.0) & (upper >= 0.0), 0.0, 0.5 * (lower + upper))
