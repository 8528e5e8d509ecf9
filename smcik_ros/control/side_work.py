"""Side work (markers, alternatives) between control ticks, never across one.

The node's marker and alternatives timers keep their own rates, but only ``request`` their
job; the control tick runs the requested jobs right after it has published its command, each
one only when its expected cost fits in the time left before the next control tick. A job
that has waited ``max_wait`` [s] runs anyway (it never starves; at a control rate whose
period is shorter than the job, that is when it runs). Measured on the demo arm with 10
obstacles: a marker tick (~5 ms) or an alternatives refresh landing just before a control
tick during a new goal's search (~5 ms) made that tick miss its period (98 Hz instead of
100 Hz); run between ticks they do not (docs/node.md, "The tick").

Jobs added with ``beside=True`` go to another thread instead when ``run`` is given one
(``beside``: the solver's worker thread, ``ControlLoop.beside``): all that are pending, in
one batch, whatever the time left; at ``rate_hz`` 500 no marker message (5-12 ms) fits
between two ticks.
"""

import time

__all__ = ['SideWork']


class SideWork:
    """Named jobs run between control ticks when they fit (see module doc).

    margin [s]: kept free before the next tick besides a job's expected cost; max_wait [s]:
    a job requested this long ago runs whatever the time left; smoothing: weight of the
    newest duration in a job's expected cost (exponential average of its wall times);
    clock: monotonic seconds.
    """

    def __init__(self, margin=0.001, max_wait=0.5, smoothing=0.3, clock=time.perf_counter):
        if not margin >= 0.0 or not max_wait >= 0.0 or not 0.0 < smoothing <= 1.0:
            raise ValueError(f'SideWork needs margin >= 0, max_wait >= 0 and smoothing in '
                             f'(0, 1]; got {margin}, {max_wait}, {smoothing}')
        self.margin = float(margin)
        self.max_wait = float(max_wait)
        self.smoothing = float(smoothing)
        self.clock = clock
        self._jobs = {}         # name -> callable()
        self._beside = set()    # names that may run in another thread
        self._pending = {}      # name -> time requested [s], in request order
        self.cost = {}          # name -> expected wall time [s]
        self.runs = {}          # name -> how often it ran
        self.deferred = {}      # name -> how often it did not fit and waited

    def add(self, name, job, beside=False):
        """Register ``job`` (callable without arguments; it handles its own exceptions);
        ``beside``: it may run in another thread (see ``run``)."""
        self._jobs[name] = job
        if beside:
            self._beside.add(name)
        self.cost.setdefault(name, 0.0)
        self.runs.setdefault(name, 0)
        self.deferred.setdefault(name, 0)

    def request(self, name):
        """Ask for one run of ``name`` (a repeated request before it ran is one run)."""
        if name not in self._jobs:
            raise KeyError(f'unknown side job {name!r}; jobs: {", ".join(self._jobs)}')
        self._pending.setdefault(name, self.clock())

    def cancel(self, name):
        """Drop a pending request of ``name`` (its timer was switched off)."""
        self._pending.pop(name, None)

    @property
    def pending(self):
        return tuple(self._pending)

    def run(self, time_left, beside=None):
        """Run the pending jobs that fit, oldest request first; return the names run (or
        handed to ``beside``).

        time_left: callable -> seconds until the next control tick (None: unknown, run);
        beside: None (every job runs here), or callable(fn) -> bool that runs fn() in
        another thread (False: busy, try again later): the pending jobs added with
        ``beside=True`` are handed to it in one batch.
        """
        done = []
        if beside is not None:
            batch = [name for name in self._pending if name in self._beside]
            if batch and beside(lambda: [self._timed(name) for name in batch]):
                for name in batch:
                    del self._pending[name]
                done.extend(batch)
        for name in list(self._pending):
            if beside is not None and name in self._beside:
                continue
            now = self.clock()
            left = time_left()
            fits = left is None or self.cost[name] + self.margin <= left
            if not fits and now - self._pending[name] < self.max_wait:
                self.deferred[name] += 1
                continue
            del self._pending[name]
            self._timed(name)
            done.append(name)
        return done

    def _timed(self, name):
        """Run job ``name``, update its expected cost and run count."""
        now = self.clock()
        self._jobs[name]()
        took = self.clock() - now
        self.cost[name] += self.smoothing * (took - self.cost[name]) \
            if self.runs[name] else took - self.cost[name]
        self.runs[name] += 1
