"""The solver's worker thread: its steps and the side work that reads it, beside the tick.

At ``rate_hz`` 500 a tick has 2 ms; a solver step during a new goal's search takes 3-8 ms,
a marker message or an alternatives refresh 5-12 ms. Run in the tick's thread, each made
the timer miss one or more periods. ``StepWorker`` runs them in one worker thread instead,
in the order they were handed over:

- ``start``: a solver step (one at a time; ``take`` returns its answer). The tick that
  starts it waits at most its budget; while it runs on, the ticks carry the solver's last
  answer on, shaped, limited and validated as between two solver steps (``ControlLoop``,
  ``solver_thread``).
- ``beside``: side work (markers, alternatives), one batch at a time; while the solver
  searches (not settled on its goal), at most ``SIDE_SHARE`` of the worker's time.

The tick never waits for the worker: a reset of the solver (a hold, a resync, a detour's
end) drops the running step's answer (``discard``) and runs behind it in the worker, and the
fallback candidates come from the last step's answer. Whoever else uses the solver (a
constraint or solver change, parameter changes) waits until the worker is idle first
(``ControlLoop.solver`` does), so the solver never has two callers. The solver's
constraint objects are the thread's own twins (``CollisionConstraint.fork``): the
validators and the scene callbacks, in the tick's thread, use the originals. numba kernels
release the GIL while they run, and the node shortens the interpreter's switch interval, so
the tick's thread is not held up long by Python code in the worker.
"""

from concurrent.futures import ThreadPoolExecutor
# Python < 3.11 (Ubuntu 22.04, Humble): not the builtin TimeoutError, which it is since 3.11.
from concurrent.futures import TimeoutError as FutureTimeout
import threading
import time

__all__ = ['StepWorker', 'SWITCH_INTERVAL']

# With a worker thread, the interpreter should hand the GIL over after this long [s]
# (Python's default: 5 ms): the tick's thread, woken by its timer, waits at most about this
# for it, and the worker, which takes the GIL back after each compiled kernel, is not held
# up for 5 ms each time by a busy thread. Node at rate_hz 500 with new goals (2 cores):
# 0.1 ms 472-483 Hz at 62-70 % CPU, 0.5 ms 487 Hz at 55 %, 1 ms 483-488 Hz at 57-59 %.
SWITCH_INTERVAL = 0.0005
# While the solver has not settled on its goal, side work takes at most this share of the
# worker's time: a batch that took d seconds is followed by the next one d (1 / share - 1)
# later at the soonest. Talos whole-body goals in the black box (2 cores): markers (11 ms)
# at 10 Hz and alternatives (31 ms) at 5 Hz took 27 % of the worker, its steps 54 %, and
# the solver made 3-5 steps a second; on the demo arm a batch of 1-3 ms is not held back.
SIDE_SHARE = 0.1


class StepWorker:
    """A worker thread for solver steps and side work (see module doc).

    ``start(tag, fn, *args)`` begins a step; ``done`` tells whether it finished;
    ``wait(timeout)`` waits for it (None: as long as it takes) and returns ``done``;
    ``take()`` returns ``(tag, result)`` and forgets the step, raising its exception if it
    raised; ``discard()`` forgets it without waiting (what it raises is kept for
    ``dropped_errors()``). ``beside(fn, searching)`` queues side work behind a running step
    (False while an earlier batch has not finished, or while searching too soon after it);
    ``side_errors()`` returns and clears what side work raised. clock: seconds (monotonic).
    ``settle()`` waits until nothing runs; ``close()`` also ends the thread. ``cpu_time``:
    the CPU seconds the thread spent on steps and side work so far.
    """

    def __init__(self, name='smcik_solver', clock=time.perf_counter):
        self._name = name
        self._clock = clock
        self.side_share = SIDE_SHARE      # (1.0: side work whenever the worker is free)
        self._side_free = -float('inf')   # [s] on ``clock``: when side work may run again
        self._pool = None
        self._ident = None
        self._future = None
        self._tag = None
        self._side = None
        self._side_errors = []
        self._dropped = None          # the last discarded step's future
        self._dropped_errors = []
        self.calls = 0
        self.cpu_time = 0.0

    # ------------------------------------------------------------------ state
    @property
    def pending(self):
        """True from ``start`` until ``take`` (running or finished)."""
        return self._future is not None

    @property
    def done(self):
        return self._future is not None and self._future.done()

    @property
    def running(self):
        """True while a step runs (or waits behind side work)."""
        return self._future is not None and not self._future.done()

    @property
    def idle(self):
        """True when neither a step (also a discarded one) nor side work runs or waits."""
        return not self.running and all(f is None or f.done()
                                        for f in (self._side, self._dropped))

    def in_worker(self):
        """True when called from the worker thread itself."""
        return self._ident is not None and threading.get_ident() == self._ident

    # ------------------------------------------------------------------ work
    def _submit(self, fn, *args):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name,
                                            initializer=self._note_thread)
        return self._pool.submit(fn, *args)

    def _note_thread(self):
        self._ident = threading.get_ident()

    def start(self, tag, fn, *args):
        if self._future is not None:
            raise RuntimeError('StepWorker.start: the previous step was not taken')
        self._tag = tag
        self._future = self._submit(self._timed, fn, *args)
        self.calls += 1

    def beside(self, fn, searching=False):
        """Queue ``fn()`` (side work) in the worker; False if the last batch is not done, or
        (``searching``: the solver has not settled on its goal) if it is too soon after it
        (``side_share``, default ``SIDE_SHARE``)."""
        if self._side is not None and not self._side.done():
            return False
        if searching and self._clock() < self._side_free:
            return False
        self._side = self._submit(self._run_side, fn)
        return True

    def _timed(self, fn, *args):
        started = time.thread_time()
        try:
            return fn(*args)
        finally:
            self.cpu_time += time.thread_time() - started

    def _run_side(self, fn):
        started = self._clock()
        try:
            self._timed(fn)
        except Exception as exc:     # the jobs report their own; this is the last resort
            self._side_errors.append(exc)
        finally:
            ended = self._clock()
            self._side_free = ended + (ended - started) * (1.0 / self.side_share - 1.0)

    def side_errors(self):
        errors, self._side_errors = self._side_errors, []
        return errors

    def wait(self, timeout=None):
        """Wait until the step finished or ``timeout`` [s] passed; return ``done``."""
        if self._future is None:
            return False
        if timeout is None or timeout > 0.0:
            try:
                self._future.exception(timeout=timeout)
            except FutureTimeout:
                pass
        return self._future.done()

    def discard(self):
        """Forget the pending step without waiting for it: its answer is dropped, and an
        exception it raises is kept for ``dropped_errors``. Work started afterwards runs
        after it (one thread, in order)."""
        future, self._future, self._tag = self._future, None, None
        if future is not None:
            self._dropped = future
            future.add_done_callback(self._note_dropped)

    def _note_dropped(self, future):
        exc = future.exception()
        if exc is not None:
            self._dropped_errors.append(exc)

    def dropped_errors(self):
        errors, self._dropped_errors = self._dropped_errors, []
        return errors

    def settle(self):
        """Wait until neither a step nor side work runs (not from the worker itself)."""
        if self.in_worker():
            return
        for future in (self._dropped, self._future, self._side):
            if future is not None:
                future.exception()

    def take(self):
        """Return (tag, result) of the finished step and forget it (its exception raised)."""
        future, tag = self._future, self._tag
        if future is None or not future.done():
            raise RuntimeError('StepWorker.take: no finished step')
        self._future = self._tag = None
        return tag, future.result()

    def close(self):
        """Wait for what runs, forget the step, and end the thread."""
        self.settle()
        self._future = self._tag = self._side = self._dropped = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
