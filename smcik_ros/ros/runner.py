"""Shared entry-point logic of the package's nodes: init, our own executor loop, exit codes,
and the core's Python log records on a node's log (``LogBridge``).

rclpy's own SIGINT handler shuts the context down from inside the signal, so a second signal
(terminal Ctrl-C, then ``ros2 launch`` forwarding it) could land in ``destroy_node()`` and end
the process with -2. Here rclpy is initialised without signal handlers
(``SignalHandlerOptions.NO``, Humble and Jazzy) and idempotent Python handlers only set a
flag; the loop below spins with a timeout, sees the flag, lets the node stop gracefully (the
IK node brakes to a stop while still publishing) and exits 0, however many signals arrive.
"""

import cProfile
import logging
import os
import signal
import sys
import threading
import time

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

from ..errors import SmcIkError

__all__ = ['run_node', 'stop_requested', 'request_stop', 'LogBridge']

_stop = threading.Event()
_signals = []      # signal numbers received, in order
_starting = []     # [node name] while run_node constructs the node


def stop_requested():
    """Return True once SIGINT or SIGTERM arrived (or request_stop was called)."""
    return _stop.is_set()


def request_stop(signum=None, frame=None):
    """Ask the running node to stop (the signal handler; idempotent, never raises).

    A signal while ``run_node`` is still constructing the node ends the process at once with
    exit code 0: nothing has been commanded yet, and the first start compiles the kernels for
    20-50 s, longer than ros2 launch waits before escalating to SIGTERM and SIGKILL (-9).
    numba writes its cache files atomically, so the next start compiles again or loads them.
    """
    if signum is not None:
        _signals.append(signum)
        if _starting:
            try:
                sys.stderr.write(f'[{_starting[0]}] stopped during start-up (signal {signum}): '
                                 'nothing was commanded; exiting\n')
                sys.stderr.flush()
            finally:
                os._exit(0)
    _stop.set()


def _install_handlers():
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, request_stop)
        except ValueError:   # not the main thread (tests run nodes in threads): no handlers
            pass
    return previous


def _ignore_signals():
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except ValueError:   # not the main thread
            pass


def _restore_handlers(previous):
    for sig, handler in previous.items():
        try:
            signal.signal(sig, handler)
        except (ValueError, TypeError):
            pass


class LogBridge(logging.Handler):
    """Route the core's Python log records ('smcik_ros.collision': SRDF entries naming unknown
    links, links left out of the model) to the node's log."""

    LOGGER = 'smcik_ros.collision'

    def __init__(self, log):
        super().__init__(logging.INFO)
        self._log = log
        self._logger = logging.getLogger(self.LOGGER)
        self._logger.addHandler(self)
        if self._logger.level == logging.NOTSET or self._logger.level > logging.INFO:
            self._logger.setLevel(logging.INFO)

    def emit(self, record):
        level = ('error' if record.levelno >= logging.ERROR else
                 'warn' if record.levelno >= logging.WARNING else 'info')
        try:
            self._log(level, record.getMessage())
        except Exception:   # noqa: BLE001 - a destroyed node: nothing to log to
            pass

    def close(self):
        self._logger.removeHandler(self)
        super().close()


_last_error = [0.0]


def _spin_once(executor, timeout, logger):
    """Spin once; an exception that escapes a callback is logged (at most every 5 s), not
    fatal: the nodes guard their own callbacks, this is the last line."""
    try:
        executor.spin_once(timeout_sec=timeout)
    except (KeyboardInterrupt, ExternalShutdownException):
        raise
    except Exception as exc:
        if not rclpy.ok(context=executor.context):
            raise ExternalShutdownException() from exc
        now = time.monotonic()
        if now - _last_error[0] >= 5.0:
            _last_error[0] = now
            logger.error(f'a callback raised {type(exc).__name__}: {exc} (the node continues)')


def _make_executor(node, logger):
    """Return rclpy's EventsExecutor where it exists (Jazzy's rclpy.experimental), else the
    SingleThreadedExecutor (Humble). SMCIK_EXECUTOR=single forces the latter.

    The events executor (experimental in rclpy) dispatches timers and subscriptions from C++
    without rebuilding a wait set in Python on every wake-up: half the node's CPU at rest.
    Under use_sim_time it is not used: its timers fired more often than the simulated time
    allows (docs/node.md, "Cost", has both measurements).
    """
    choice = os.environ.get('SMCIK_EXECUTOR', 'auto').strip().lower()
    if choice not in ('auto', 'events', 'single'):
        raise SmcIkError(f"SMCIK_EXECUTOR must be 'auto', 'events' or 'single', got {choice!r}")
    sim_time = node.has_parameter('use_sim_time') and \
        bool(node.get_parameter('use_sim_time').value)
    if choice == 'single' or sim_time:
        return SingleThreadedExecutor(context=node.context)
    try:
        from rclpy.experimental import EventsExecutor
    except ImportError:
        if choice == 'events':
            logger.warn('SMCIK_EXECUTOR=events: this rclpy has no EventsExecutor (Jazzy or '
                        'newer); using the SingleThreadedExecutor')
        return SingleThreadedExecutor(context=node.context)
    return EventsExecutor(context=node.context)


def run_node(factory, name, args=None, profile_path=None, stop_timeout=5.0,
             spin_period=0.02, restore_signals=False):
    """Create the node with ``factory()`` and spin it; return the process exit code.

    SIGINT/SIGTERM (once or several times) end it with 0: a node with ``begin_shutdown()`` and
    a ``shutdown_complete`` property is given up to ``stop_timeout`` [s] to stop gracefully
    while the executor keeps spinning (its timers keep publishing). A SmcIkError at start-up
    (bad URDF, link or parameter) is logged as fatal with its message (which says how to fix
    it) and gives 1. profile_path: write cProfile statistics of the spin there (None: off).
    restore_signals: put the previous SIGINT/SIGTERM handlers back on return (for callers that
    keep running); a process entry point keeps the flag-only handlers until it exits, so a
    signal that arrives after the stop (Ctrl-C, then ros2 launch forwarding it) cannot end
    the process with -2 on its way out.
    """
    _stop.clear()
    del _signals[:]
    from rclpy.signals import SignalHandlerOptions

    previous = _install_handlers()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    logger = rclpy.logging.get_logger(name)
    profiler = cProfile.Profile() if profile_path else None
    node = None
    executor = None
    code = 0
    try:
        _starting[:] = [name]
        try:
            node = factory()
        finally:
            del _starting[:]
        executor = _make_executor(node, logger)
        executor.add_node(node)
        if profiler:
            profiler.enable()
        while not _stop.is_set():
            _spin_once(executor, spin_period, logger)
        if hasattr(node, 'begin_shutdown'):
            node.begin_shutdown()
            deadline = time.monotonic() + stop_timeout
            while not node.shutdown_complete and time.monotonic() < deadline:
                _spin_once(executor, spin_period, logger)
            if not node.shutdown_complete:
                logger.warn(f'graceful stop not complete within {stop_timeout:g} s: exiting')
        if hasattr(node, 'flush'):
            node.flush()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except SmcIkError as exc:
        if _stop.is_set():
            logger.info(f'stopped during start-up ({exc})')
        else:
            logger.fatal('cannot start: ' + ' '.join(str(exc).split()))   # one line
            code = 1
    finally:
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile_path)
        try:
            if executor is not None:
                executor.shutdown(timeout_sec=1.0)
            if node is not None:
                node.destroy_node()
        finally:
            rclpy.try_shutdown()
            if restore_signals:
                _restore_handlers(previous)
            else:
                # Interpreter finalisation resets Python-level handlers to SIG_DFL, so a late
                # signal would still end the process with -2 while rclpy tears down: ignore
                # them from here on (the process is on its way out with its exit code).
                _ignore_signals()
    return code
