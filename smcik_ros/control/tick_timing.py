"""When the control ticks come: late ticks counted, and a warning when they pile up.

A ROS timer skips the periods a late tick missed, so a tick that comes 1.5 periods or more
after the one before is a command the arm did not get on time. A controller that follows
one-point trajectories of one period (``command_type: joint_trajectory``) reaches the end of
each and holds until the next: irregular ticks make irregular motion. ``TickTiming`` counts
them (``~/status`` ``late_ticks``), keeps the periods of the last ticks
(``tick_period_max_ms``) and says when more than ``share`` of the last ``window`` seconds'
ticks came late. The first ``grace`` seconds after the first tick count, but never warn:
a node's first ticks run on cold caches (on a slow machine, several came late in the first
second while the arm held still). Pure: the node passes each tick's start time.
"""

import collections

__all__ = ['TickTiming', 'LATE_PERIODS']

# A tick this many timer periods after the one before came late.
LATE_PERIODS = 1.5


class TickTiming:
    """Count late control ticks; keep the last ``keep`` periods.

    rate: the timer's rate [Hz] (set ``rate`` when it changes); share: the fraction of the
    ticks in the last ``window`` [s] that may come late before ``tick`` returns a warning;
    at least ``minimum`` late ticks are needed for one; late ticks within ``grace`` [s] of
    the first tick are counted and kept, never warned about.
    """

    def __init__(self, rate, window=1.0, share=0.05, minimum=3, keep=1000, grace=2.0):
        self.rate = float(rate)
        self.window = float(window)
        self.share = float(share)
        self.minimum = int(minimum)
        self.grace = float(grace)
        self.late_ticks = 0                                  # since the start
        self.periods = collections.deque(maxlen=int(keep))   # [s] from one tick to the next
        self._last = None
        self._first = None
        self._late = collections.deque()                     # start times of recent late ticks

    @property
    def max_period(self):
        """The longest period [s] among the kept ones (0.0 before the second tick)."""
        return max(self.periods, default=0.0)

    def tick(self, now):
        """Note a tick that started at ``now`` [s, monotonic]; return None, or a sentence
        when the late ticks of the last ``window`` seconds exceed ``share`` of its ticks."""
        last, self._last = self._last, now
        if last is None:
            self._first = now
            return None
        period = now - last
        self.periods.append(period)
        if period * self.rate < LATE_PERIODS:
            return None
        self.late_ticks += 1
        if now - self._first < self.grace:
            return None
        late = self._late
        late.append(now)
        while late and late[0] <= now - self.window:
            late.popleft()
        expected = self.window * self.rate
        if len(late) < max(self.minimum, self.share * expected):
            return None
        return (f'control ticks are late: {len(late)} of the last {self.window:g} s came '
                f'{LATE_PERIODS:g} timer periods or more after the one before (this one '
                f'{1e3 * period:.1f} ms, the period is {1e3 / self.rate:.1f} ms), so the arm '
                'gets its commands irregularly; the computer is too busy for rate_hz '
                f'{self.rate:g}: lower it, or give the node a less loaded CPU (docs/node.md, '
                '"The tick"; thread_priority was removed in issue 31)')
