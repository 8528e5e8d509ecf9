"""Log lines of the command stream, without ROS: once in full, then throttled with a count."""

import re
import time
import traceback

__all__ = ['Reporter', 'never_raises']


class Reporter:
    """Log each kind of event (its key) in full once, then at most once per ``interval``.

    emit: callable(level, text) with level 'debug', 'info', 'warn' or 'error'. A repeated
    event within ``interval`` [s] (``clock``, monotonic) is counted, and the next report says
    how many were not logged (unless ``count`` is False). An exception's traceback is logged
    the first time only. Returns whether the event was logged.
    """

    def __init__(self, emit, interval=5.0, clock=time.monotonic, max_keys=256):
        self.emit = emit
        self.interval = float(interval)
        self.clock = clock
        self.max_keys = max_keys
        self._seen = {}            # key -> [time of the last report, events not logged since]

    def __call__(self, level, key, text, exc=None, interval=None, count=True):
        now = self.clock()
        interval = self.interval if interval is None else interval
        entry = self._seen.get(key)
        if entry is None:
            if len(self._seen) >= self.max_keys:
                self._seen.clear()
            self._seen[key] = [now, 0]
            if exc is not None:
                text = text + '\n' + ''.join(traceback.format_exception(
                    type(exc), exc, exc.__traceback__)).rstrip()
            self.emit(level, text)
            return True
        if now - entry[0] >= interval:
            if entry[1] and count:
                text = f'{text} ({entry[1]} more like this not logged)'
            entry[0], entry[1] = now, 0
            self.emit(level, text)
            return True
        entry[1] += 1
        return False

    @staticmethod
    def key_of(prefix, text):
        """Return a key for ``text`` that ignores its numbers (same message, other values)."""
        return prefix + ':' + re.sub(r'[-+]?\d[\d.e+-]*', '#', text)[:100]


def never_raises(report):
    """Return ``report`` (callable(level, key, text, exc=None, ...); None: discard) wrapped so
    that a failing reporter never stops its caller (the control tick)."""
    if report is None:
        return lambda *args, **kwargs: None

    def safe(*args, **kwargs):
        try:
            report(*args, **kwargs)
        except Exception:
            pass
    return safe
