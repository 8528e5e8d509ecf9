"""The goal inbox: the newest goal is applied at the next control tick.

Pure numpy, no ROS. Goals arrive at any rate (a click, a 100 Hz teleoperation stream, a
1 kHz flood); each is converted to the base frame when it arrives and replaces the one waiting,
so a tick always applies the newest goal and a fast stream loses nothing that matters (the
goals in between would have been overtaken within the same tick anyway) and logs nothing.

Stale goals: with ``goal_timeout`` > 0, a goal whose header stamp is older than that on the
node's clock is dropped (a backlog, a replayed bag). Order is the order of arrival, never the
stamps: a publisher whose clock jumps backwards keeps being heard.

Frames: an empty frame is the base; any link of the URDF tree resolves through the robot's own
kinematics (``FrameResolver``: links of the chain at the current configuration, static links
above or beside the base); other frames go to ``lookup`` (tf2 in the node) when given.
"""

from dataclasses import dataclass
import math

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import PoseTarget, PositionTarget, covariance_to_base

__all__ = ['Goal', 'GoalInbox']


@dataclass(frozen=True)
class Goal:
    """One accepted goal, converted to the base frame.

    terms: tuple of Targets for ``solver.step``; display: (4, 4) pose or (3,) point in the base
    frame [m]; source: where it came from (topic and frame); stamp: header stamp [s] or None;
    received: arrival time [s] on the node's clock; sequence: 1, 2, ... per accepted goal;
    covariance: the task covariance in the base frame ((6, 6) pose, (3, 3) point) of a goal
    with uncertainty, else None.
    """

    terms: tuple
    display: np.ndarray
    source: str
    stamp: float
    received: float
    sequence: int
    covariance: np.ndarray = None


class GoalInbox:
    """Holds the newest goal until a tick takes it.

    resolver: FrameResolver of the chain; tip_link: link the goals apply to; goal_timeout [s]
    (0 = off); lookup: optional callable frame -> (4, 4) pose of ``frame`` in the base frame
    (raising GoalError), asked for frames the robot's own kinematics cannot resolve.
    """

    def __init__(self, resolver, tip_link, goal_timeout=0.0, lookup=None):
        self.resolver = resolver
        self.tip_link = tip_link
        self.goal_timeout = float(goal_timeout)
        self.lookup = lookup
        self._pending = None
        self.received = 0       # goals accepted into the inbox
        self.applied = 0        # goals taken by a tick
        self.superseded = 0     # goals replaced by a newer one before a tick took them
        self.stale = 0          # goals dropped as older than goal_timeout

    @property
    def goal_timeout(self):
        return self._goal_timeout

    @goal_timeout.setter
    def goal_timeout(self, value):
        value = float(value)
        if not math.isfinite(value) or value < 0.0:
            raise ParameterError(f'goal_timeout must be >= 0 [s] (0 = off); got {value!r}')
        self._goal_timeout = value

    def to_base(self, frame, q):
        """Return the (4, 4) pose of ``frame`` in the base frame at configuration q (n,)."""
        kind = self.resolver.kind(frame)
        if kind in ('model', 'static') or self.lookup is None:
            return self.resolver.pose(frame, q)
        return self.lookup(frame)

    def _age(self, stamp, now):
        return None if stamp is None else now - stamp

    def offer(self, kind, value, frame, stamp, now, q, source='goal', covariance=None):
        """Convert a goal to the base frame and make it the newest; return the Goal.

        kind: 'pose' (value (4, 4) in ``frame``) or 'point' (value (3,) in ``frame``) [m];
        stamp: header stamp [s] or None; now: arrival [s]; q: (n,) configuration the link
        frames are taken at (the measured one); covariance: None, or the goal's task
        covariance in ``frame`` ((6, 6) for a pose, ROS order x y z rx ry rz; (3, 3) for a
        point): rotated into the base frame (R S R^T per 3 x 3 block), it replaces the
        target's sigmas (the paper's Sigma_z). Raises GoalError (stale, unknown frame, bad
        value, a covariance that is not symmetric positive definite); the waiting goal is
        then kept.
        """
        age = self._age(stamp, now)
        if self._goal_timeout > 0.0 and age is not None and age > self._goal_timeout:
            self.stale += 1
            raise GoalError(f'goal stamped {age:.3f} s ago (goal_timeout = '
                            f'{self._goal_timeout:g} s): dropped as stale')
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
            terms = (PoseTarget(display, link=self.tip_link, covariance=covariance),)
        elif kind == 'point':
            if value.shape != (3,):
                raise GoalError(f'point goal: expected 3 coordinates, got shape {value.shape}')
            display = to_base[:3, :3] @ value + to_base[:3, 3]
            terms = (PositionTarget(display, link=self.tip_link, covariance=covariance),)
        else:
            raise GoalError(f'goal kind must be pose or point; got {kind!r}')
        if self._pending is not None:
            self.superseded += 1
        self.received += 1
        where = frame or self.resolver.base_link
        self._pending = Goal(terms=terms, display=display, source=f'{source} in {where!r}',
                             stamp=stamp, received=now, sequence=self.received,
                             covariance=covariance)
        return self._pending

    def take(self, now):
        """Return the newest waiting goal (and forget it), or None.

        A goal that went stale while waiting (goal_timeout) is dropped: returns None.
        """
        goal, self._pending = self._pending, None
        if goal is None:
            return None
        age = self._age(goal.stamp, now)
        if self._goal_timeout > 0.0 and age is not None and age > self._goal_timeout:
            self.stale += 1
            return None
        self.applied += 1
        return goal
