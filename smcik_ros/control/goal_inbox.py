"""The goal inbox: one goal slot per tip; the newest goals are applied at the next control tick.

Pure numpy, no ROS. Goals arrive at any rate (a click, a 100 Hz teleoperation stream, a
1 kHz flood); each is converted to the base frame when it arrives and replaces the one waiting
for its tip, so a tick always applies the newest goals and a fast stream loses nothing that
matters (the goals in between would have been overtaken within the same tick anyway) and logs
nothing.

Several tips (``tip_links``): each tip has its own slot. The goal the solver follows is one
target per tip, in ``tip_links`` order: the tip's goal, or, for a tip without one, a pose
target that holds it where it was (its pose taken at start and at resync, ``hold_at``, and
when its goal is released, ``release``), so that a goal for the left hand does not drag the
right one. When no tip has a goal there is nothing to follow (``Goal.empty``).

Stale goals: with ``goal_timeout`` > 0, a goal whose header stamp is older than that on the
node's clock is dropped (a backlog, a replayed bag). Order is the order of arrival, never the
stamps: a publisher whose clock jumps backwards keeps being heard.

Frames: an empty frame is the base; any link of the URDF tree resolves through the robot's own
kinematics (``FrameResolver``: links of the chain at the current configuration, static links
above or beside the base); other frames go to ``lookup`` (tf2 in the node) when given.
"""

from dataclasses import dataclass, replace
import math
from typing import NamedTuple

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import PoseTarget, PositionTarget, covariance_to_base

__all__ = ['Goal', 'TipGoal', 'GoalInbox', 'TipProgress', 'kept_goals']

# [s] a tip that came no nearer its goal for this long, or has not reached it in PATIENCE,
# when another tip's goal arrives is held where it is instead (``TipProgress``).
# PATIENCE is short of the 10 s: a client that gives each goal 10 s from its own
# send sends the next one when the node has had the goal a little less (its delivery, the
# tick that took it), and Unitree H1's elbow, kept on at 9.9 s, moved 72 mm during the
# other elbow's goal (black box).
STALL_TIME = 2.0
PATIENCE = 9.0
# 'Nearer': the tip's error, position over its tolerance plus orientation over its own, down
# by this fraction of its value when the tip last came nearer, and by one tolerance at least.
PROGRESS = 0.05


@dataclass(frozen=True)
class TipGoal:
    """One tip's goal, converted to the base frame.

    tip: the tip link; target: its Target; display: (4, 4) pose or (3,) point in the base
    frame [m]; source: where it came from (topic and frame); stamp: header stamp [s] or None;
    covariance: the task covariance in the base frame, or None.
    """

    tip: str
    target: object
    display: np.ndarray
    source: str
    stamp: float
    covariance: np.ndarray = None


@dataclass(frozen=True)
class Goal:
    """What the solver follows: one target per tip.

    terms: tuple of Targets for ``solver.step``, one per tip in ``tip_links`` order (the
    tip's goal, or a PoseTarget holding the tip's pose); tips: tuple per tip of its TipGoal,
    or None where the tip holds; display, source, stamp, covariance: those of the newest
    tip goal (display None when the change was a release or a new hold pose); received:
    arrival time [s] on the node's clock; sequence: 1, 2, ... per change of the goals.
    """

    terms: tuple
    display: np.ndarray
    source: str
    stamp: float
    received: float
    sequence: int
    covariance: np.ndarray = None
    tips: tuple = ()

    @property
    def empty(self):
        """True when no tip has a goal (then there is nothing to follow)."""
        return all(tip is None for tip in self.tips)

    @property
    def goal_tips(self):
        """Indices of the tips that have a goal (the others hold)."""
        return tuple(k for k, tip in enumerate(self.tips) if tip is not None)

    def summary(self, frame):
        """Return where the goal is, for the log: the newest goal's position [m] in ``frame``
        (the base frame), or the tips that have a goal."""
        if self.display is None:
            return 'tip(s) ' + ', '.join(self.tips[k].tip for k in self.goal_tips)
        display = np.asarray(self.display)
        point = display[:3, 3] if display.shape == (4, 4) else display
        return f'position {np.array2string(point, precision=3)} m in {frame}'


def kept_goals(goal, previous, tip_errors, tolerances):
    """Return the tips that keep, in the new ``goal``, the very goal they had in ``previous``
    and are not within ``tolerances`` (position [m], orientation [rad]) of it by
    ``tip_errors`` (per tip, at the command): they move on towards it while the new goal
    runs, since each tip has its own slot until it is released."""
    if previous is None or len(tip_errors) != len(goal.tips):
        return []
    return [goal.tips[k].tip for k in goal.goal_tips if previous.tips[k] is goal.tips[k]
            and not (tip_errors[k][0] <= tolerances[0] and tip_errors[k][1] <= tolerances[1])]


class _Mark(NamedTuple):
    """What ``TipProgress`` notes of a tip's goal."""

    goal: object        # the TipGoal
    error: float        # its error when the tip last came nearer [tolerances]
    since: float        # then [s]
    first: float        # when the goal was first noted [s]
    met: bool           # the tip was within the tolerances at some command


class TipProgress:
    """When each tip last came nearer its goal, to tell a stalled one (the control loop).

    A tip that keeps a goal not reached yet moves on towards it while another tip's goal
    runs (each tip has its own slot). One that has come no nearer for ``STALL_TIME`` (out of
    reach, or blocked: Talos's left hand 52 mm short of a goal behind it for 7 s) was instead
    dragged about by the other goal's whole-body motion, 40-55 mm in the black box, and never
    reached its own; such a tip holds where it is when the other goal arrives (``stalled``,
    ``GoalInbox.retire``). So does one that has not reached its goal in ``PATIENCE`` (short
    of the issue's 10 s a goal), though it still closes in: Talos's left hand, 20-135 mm
    short of a goal behind it after 10 s, moved on by that much during the right hand's
    next goal, which must leave it where it is. A tip that met its goal (within the
    tolerances) at some command holds too, wherever it is when the next goal comes: after
    passing through its goal, Unitree H1's elbow (its goal kept, since the whole goal's
    pinned tip had slipped past its tolerance) went 116 mm off during the other elbow's goal
    (black box). A teleoperation stream sends new goals (new TipGoals) all the time, and a
    tip closing in on a recent goal makes progress: neither stalls.
    """

    def __init__(self):
        self._marks = {}        # tip -> _Mark

    def note(self, goal, tip_errors, tolerances, now):
        """Note the tips' errors (per tip of ``goal``: (position [m], orientation [rad])) at
        ``now`` [s]; tolerances: (position, orientation)."""
        for k in goal.goal_tips:
            tip_goal, (pos, ori) = goal.tips[k], tip_errors[k]
            error = pos / tolerances[0] + ori / tolerances[1]
            met = pos <= tolerances[0] and ori <= tolerances[1]
            mark = self._marks.get(tip_goal.tip)
            if mark is None or mark.goal is not tip_goal:
                self._marks[tip_goal.tip] = _Mark(tip_goal, error, now, now, met)
            elif error <= mark.error - max(PROGRESS * mark.error, 1.0):
                self._marks[tip_goal.tip] = mark._replace(error=error, since=now,
                                                          met=mark.met or met)
            elif met and not mark.met:
                self._marks[tip_goal.tip] = mark._replace(met=True)

    def stalled(self, goal, tips, now):
        """Return {tip: why} for those of ``tips`` (names) whose goal in ``goal`` was met at
        some command, has come no nearer for ``STALL_TIME``, or was not reached in
        ``PATIENCE``, at ``now``."""
        out = {}
        for k in goal.goal_tips:
            tip_goal = goal.tips[k]
            mark = self._marks.get(tip_goal.tip)
            if tip_goal.tip not in tips or mark is None or mark.goal is not tip_goal:
                continue
            if mark.met:
                out[tip_goal.tip] = 'met an earlier goal within the tolerances'
            elif now - mark.first >= PATIENCE:
                out[tip_goal.tip] = f'did not reach an earlier goal in {PATIENCE:g} s'
            elif now - mark.since >= STALL_TIME:
                out[tip_goal.tip] = f'came no nearer an earlier goal for {STALL_TIME:g} s'
        return out


class GoalInbox:
    """Holds the newest goals until a tick takes them.

    resolver: FrameResolver of the chain; tip_links: the link (str) or links the goals apply
    to (the first is the default tip); goal_timeout [s] (0 = off); lookup: optional callable
    frame -> (4, 4) pose of ``frame`` in the base frame (raising GoalError), asked for frames
    the robot's own kinematics cannot resolve.
    """

    def __init__(self, resolver, tip_links, goal_timeout=0.0, lookup=None):
        self.resolver = resolver
        self.tip_links = (tip_links,) if isinstance(tip_links, str) else tuple(tip_links)
        if not self.tip_links:
            raise ParameterError('the goal inbox needs at least one tip link')
        self.goal_timeout = float(goal_timeout)
        self.lookup = lookup
        count = len(self.tip_links)
        self._slots = [None] * count        # per tip: its newest TipGoal (None: holds)
        self._applied = [None] * count      # the slots of the last goal a tick took
        self._holds = [None] * count        # per tip: (4, 4) pose it holds without a goal
        self._pending = None                # the Goal waiting for a tick
        self._changes = 0                   # goals accepted and releases: the sequence
        self.received = 0       # goals accepted into the inbox
        self.applied = 0        # goals taken by a tick
        self.superseded = 0     # goals replaced by a newer one before a tick took them
        self.stale = 0          # goals dropped as older than goal_timeout
        self.released = 0       # tips released

    @property
    def tip_link(self):
        """The first (default) tip."""
        return self.tip_links[0]

    @property
    def goal_timeout(self):
        return self._goal_timeout

    @goal_timeout.setter
    def goal_timeout(self, value):
        value = float(value)
        if not math.isfinite(value) or value < 0.0:
            raise ParameterError(f'goal_timeout must be >= 0 [s] (0 = off); got {value!r}')
        self._goal_timeout = value

    def tip_index(self, tip):
        """Return the slot of ``tip`` (None: the first tip); GoalError for another link."""
        if tip is None:
            return 0
        try:
            return self.tip_links.index(tip)
        except ValueError:
            raise GoalError(f'{tip!r} is not a tip; tips: {", ".join(self.tip_links)}') \
                from None

    def to_base(self, frame, q):
        """Return the (4, 4) pose of ``frame`` in the base frame at configuration q (n,)."""
        kind = self.resolver.kind(frame)
        if kind in ('model', 'static') or self.lookup is None:
            return self.resolver.pose(frame, q)
        return self.lookup(frame)

    def _age(self, stamp, now):
        return None if stamp is None else now - stamp

    def _check_fresh(self, stamp, now):
        age = self._age(stamp, now)
        if self._goal_timeout > 0.0 and age is not None and age > self._goal_timeout:
            self.stale += 1
            raise GoalError(f'goal stamped {age:.3f} s ago (goal_timeout = '
                            f'{self._goal_timeout:g} s): dropped as stale')

    def convert(self, kind, value, frame, q, tip=None, source='goal', stamp=None,
                covariance=None):
        """Return the TipGoal of one goal in the base frame (nothing is stored).

        kind: 'pose' (value (4, 4) in ``frame``) or 'point' (value (3,) in ``frame``) [m];
        q: (n,) configuration the link frames are taken at; covariance: None, or the goal's
        task covariance in ``frame`` ((6, 6) for a pose, ROS order x y z rx ry rz; (3, 3) for
        a point): rotated into the base frame (R S R^T per 3 x 3 block), it replaces the
        target's sigmas (the paper's Sigma_z). GoalError for an unknown frame or tip, a bad
        value, a covariance that is not symmetric positive definite.
        """
        link = self.tip_links[self.tip_index(tip)]
        value = np.asarray(value, dtype=float)
        to_base = self.to_base(frame, q)
        if covariance is not None:
            size = {'pose': 6, 'point': 3}.get(kind)
            if size is not None and np.size(covariance) != size * size:
                raise GoalError(f'{kind} goal covariance: expected a ({size}, {size}) matrix, '
                                f'got shape {np.shape(covariance)}')
            covariance = covariance_to_base(covariance, to_base[:3, :3])
        if kind == 'pose':
            if value.shape != (4, 4):
                raise GoalError(f'pose goal: expected a (4, 4) matrix, got shape {value.shape}')
            display = to_base @ value
            target = PoseTarget(display, link=link, covariance=covariance)
        elif kind == 'point':
            if value.shape != (3,):
                raise GoalError(f'point goal: expected 3 coordinates, got shape {value.shape}')
            display = to_base[:3, :3] @ value + to_base[:3, 3]
            target = PositionTarget(display, link=link, covariance=covariance)
        else:
            raise GoalError(f'goal kind must be pose or point; got {kind!r}')
        where = frame or self.resolver.base_link
        return TipGoal(link, target, display, f'{source} in {where!r}', stamp, covariance)

    def offer(self, kind, value, frame, stamp, now, q, source='goal', covariance=None,
              tip=None):
        """Convert a goal for ``tip`` (None: the first) to the base frame and make it the
        newest; return the Goal that waits for the tick (see ``convert``; stamp: header stamp
        [s] or None; now: arrival [s]). Raises GoalError (stale, unknown frame or tip, bad
        value or covariance); the waiting goals are then kept."""
        self._check_fresh(stamp, now)
        goal = self.convert(kind, value, frame, q, tip, source, stamp, covariance)
        return self._accept({self.tip_index(tip): goal}, goal, now, q)

    def offer_all(self, goals, stamp, now, q):
        """Make ``goals`` (one TipGoal per tip, in ``tip_links`` order, from ``convert``) the
        newest goals of every tip at once (one goal: ``target_poses``); return the Goal.
        GoalError for another count or a stale stamp (nothing changes)."""
        goals = list(goals)
        if len(goals) != len(self.tip_links):
            raise GoalError(f'expected {len(self.tip_links)} goals, one per tip '
                            f'({", ".join(self.tip_links)}); got {len(goals)}')
        self._check_fresh(stamp, now)
        return self._accept(dict(enumerate(goals)), goals[-1], now, q)

    def offer_poses(self, poses, frame, stamp, now, q, source='goals'):
        """Make one pose goal per tip the newest goals at once: poses (T, 4, 4) in ``frame``,
        in ``tip_links`` order (``target_poses``); return the Goal. GoalError (nothing
        changes) for another count, a bad pose, an unknown frame or a stale stamp."""
        if len(poses) != len(self.tip_links):
            raise GoalError(f'expected {len(self.tip_links)} poses, one per tip '
                            f'({", ".join(self.tip_links)}); got {len(poses)}')
        goals = [self.convert('pose', pose, frame, q, tip, source, stamp)
                 for tip, pose in zip(self.tip_links, poses)]
        return self.offer_all(goals, stamp, now, q)

    def release(self, tip, now, q, source='release'):
        """Release ``tip``'s goal: from now on it holds its pose at configuration q (n,).

        Returns the Goal that waits for the tick (``empty`` when no tip keeps a goal).
        """
        k = self.tip_index(tip)
        self._holds[k] = self.resolver.pose(self.tip_links[k], q)
        self.released += 1
        return self._accept({k: None}, None, now, q, source)

    def retire(self, goal, tips, q):
        """Return ``goal`` (the one a tick just took) with ``tips`` holding their poses at
        configuration q (n,) instead of their goals, as a release would, in the same
        sequence (``TipProgress``)."""
        slots = list(goal.tips)
        for tip in tips:
            k = self.tip_index(tip)
            self._holds[k] = self.resolver.pose(tip, q)
            slots[k] = None
            if self._slots[k] is goal.tips[k]:
                self._slots[k] = None
        self._applied = slots
        return replace(goal, terms=self._terms(slots, q), tips=tuple(slots))

    def hold_at(self, q):
        """Take every tip's hold pose at configuration q (n,) (start, resync): tips without
        a goal hold there. A goal with holding tips is given again (same sequence)."""
        self._holds = [self.resolver.pose(tip, q) for tip in self.tip_links]
        base = self._pending
        if base is None and any(s is None for s in self._applied) and \
                not all(s is None for s in self._applied):
            base = Goal(terms=(), display=None, source='hold', stamp=None, received=0.0,
                        sequence=self._changes, tips=tuple(self._applied))
            self._slots = list(self._applied)
        if base is not None:
            self._pending = replace(base, terms=self._terms(base.tips, q))

    def _accept(self, changes, newest, now, q, source=None):
        """Apply per-tip ``changes`` {index: TipGoal or None} to the slots; return the
        waiting Goal (``newest``: the TipGoal that changed last, or None for a release)."""
        for k, goal in changes.items():
            self._slots[k] = goal
        if newest is not None:
            self.received += 1
        if self._pending is not None:
            self.superseded += 1
        self._changes += 1
        terms, slots = self._terms(self._slots, q), tuple(self._slots)
        if newest is None:
            self._pending = Goal(terms=terms, display=None, source=source or 'release',
                                 stamp=None, received=now, sequence=self._changes, tips=slots)
        else:
            self._pending = Goal(terms=terms, display=newest.display, source=newest.source,
                                 stamp=newest.stamp, received=now, sequence=self._changes,
                                 covariance=newest.covariance, tips=slots)
        return self._pending

    def _terms(self, slots, q):
        """Return the targets of ``slots``: the goals, and hold targets for the other tips
        (a hold not taken yet is taken at configuration q)."""
        terms = []
        for k, goal in enumerate(slots):
            if goal is not None:
                terms.append(goal.target)
                continue
            if self._holds[k] is None:
                self._holds[k] = self.resolver.pose(self.tip_links[k], q)
            terms.append(PoseTarget(self._holds[k], link=self.tip_links[k]))
        return tuple(terms)

    def take(self, now):
        """Return the newest waiting Goal (and forget it), or None.

        A goal that went stale while waiting (goal_timeout) is dropped (the tips keep the
        goals the last tick took): returns None.
        """
        goal, self._pending = self._pending, None
        if goal is None:
            return None
        age = self._age(goal.stamp, now)
        if self._goal_timeout > 0.0 and age is not None and age > self._goal_timeout:
            self.stale += 1
            self._slots = list(self._applied)
            return None
        self._applied = list(goal.tips)
        self.applied += 1
        return goal
