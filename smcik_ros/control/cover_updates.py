"""Collision model updates computed in the background, without ROS.

Two updates take seconds and must not hold up the control tick; each runs in a daemon
thread and ``CollisionGuard.poll`` applies its result at a tick, in the order they finished:

- ``srdf_pairs``: the self-collision pairs of another SRDF (MoveIt's
  ``/robot_description_semantic`` arriving after start-up) and their constraint.
- ``finer_covers``: the covers of the links that rest in contact at the first command,
  computed again at a finer tolerance, kept only when they release a pair in contact or
  make one at least ``CONTACT_GAIN`` shallower.

A result is a dict: 'text' (callable -> the log line), and for a change 'constraint' with
'base' (the model and pairs it was built on; ``poll`` builds it again when either has been
replaced since), 'model' and/or 'pairs' and 'srdf'; or 'error' (the log line of a failure).
"""

import threading

from ..collision import self_collision_pairs

__all__ = ['BackgroundUpdates', 'srdf_pairs', 'finer_covers', 'frees_contact', 'CONTACT_GAIN']

# [m] finer covers are swapped in when a pair in contact is released or at least this much
# shallower: every sphere costs in every query (docs/collision.md, section 4: the Panda case).
CONTACT_GAIN = 0.002


def frees_contact(before, after):
    """True when finer covers are worth their spheres: a pair in contact at ``before``
    ([((a, b), depth)], ``CollisionConstraint.contacts``) is apart at ``after``, or at least
    ``CONTACT_GAIN`` shallower."""
    now = dict(after)
    return any(pair not in now or now[pair] >= depth + CONTACT_GAIN for pair, depth in before)


def _shown(contacts):
    return (', '.join(f'{a} / {b} {1e3 * d:.1f} mm' for (a, b), d in contacts[:4])
            + (f' and {len(contacts) - 4} more' if len(contacts) > 4 else ''))


def srdf_pairs(model, parsed, settings, description, build, summary):
    """Return the work (callable -> result) of the pairs of the parsed SRDF ``parsed`` (or
    None) on ``model``; build(model, pairs, settings) -> constraint; summary() -> the guard's
    line for the log once applied."""
    def work():
        pairs = self_collision_pairs(model, parsed, padding=settings.padding)
        return {'pairs': pairs, 'srdf': description, 'base': (model, pairs),
                'constraint': build(model, pairs, settings),
                'text': lambda: f'SRDF from {description} applied: {summary()}'}
    return work


def finer_covers(model, links, q, contacts, pairs, settings, build):
    """Return the work (callable -> result) of the covers of ``links`` again at
    ``settings.contact_tolerance`` (``CollisionModel.refined``), its constraint with the
    same ``pairs`` and settings; ``contacts``: the pairs in contact at q (nq,) before."""
    tolerance = settings.contact_tolerance

    def work():
        refined, names = model.refined(links, tolerance)
        constraint = build(refined, pairs, settings)
        after = constraint.fork().contacts(q)      # the fork reads a scene snapshot
        before = sum(int(model.link_count[model.link_index(n)]) for n in names)
        spheres = sum(int(refined.link_count[refined.link_index(n)]) for n in names)
        done = (f'covers of {", ".join(names)} computed again at tolerance '
                f'{tolerance:g} m ({before} -> {spheres} spheres)')
        if not frees_contact(contacts, after):
            return {'text': lambda: (
                f'{done}: not applied, they free no pair in contact ({_shown(after)}: the '
                f'parts themselves are that close); the covers stay at tolerance '
                f'{settings.cover_tolerance:g} m')}
        rest = (f'the arm now rests in contact at {_shown(after)} (padded cover distances)'
                if after else 'the arm no longer rests in contact')
        return {'model': refined, 'constraint': constraint, 'base': (refined, pairs),
                'text': lambda: f'{done}: {rest}'}
    return work


class BackgroundUpdates:
    """Runs update work in daemon threads and queues the results in the order they finish."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = []
        self._workers = []

    def start(self, name, work, failure):
        """Run ``work()`` in a thread named ``name``; its result (or {'error': failure(exc)}
        when it raised) waits for ``take``."""
        def run():
            try:
                result = work()
            except Exception as exc:   # reported by the guard's poll, never raised here
                result = {'error': failure(exc)}
            with self._lock:
                self._pending.append(result)

        worker = threading.Thread(target=run, name=name, daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    def wait(self, timeout=None):
        """Wait until the running updates have finished (for tests)."""
        for worker in list(self._workers):
            worker.join(timeout)

    def take(self):
        """Return the oldest finished result, or None."""
        with self._lock:
            return self._pending.pop(0) if self._pending else None
