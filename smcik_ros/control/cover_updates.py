"""Collision model updates computed in the background, without ROS.

Three updates take seconds to minutes and must not hold up the control tick; each runs in a
daemon thread and ``CollisionGuard.poll`` applies its result at a tick, in the order they
finished:

- ``full_covers``: the fine covers of a coarse model (``CollisionModel.fine``: a first start
  with meshes begins with coarse covers, see ``CollisionGuard.from_urdf``'s ``cover_wait``)
  and their constraint; once each batch is applied (the chain's links, then the swept
  ones), the pairs are computed again (``srdf_pairs``: the 'always' rule judges only pairs
  of two links with fine covers).
- ``srdf_pairs``: the self-collision pairs of another SRDF (MoveIt's
  ``/robot_description_semantic`` arriving after start-up) and their constraint.
- ``finer_covers``: the covers of the links that rest in contact at the first command,
  computed again at a finer tolerance, kept only when they release a pair in contact or
  make one at least ``CONTACT_GAIN`` shallower; in steps (``contact_tolerances``), each
  for the links that have not left their contact (``CONTACT_RELEASE``).

Covers are computed in a child process (``covers_in_child``, one kept for every job), the
rest in the thread.

A result is a dict: 'text' (callable -> the log line), and for a change 'constraint' with
'base' (the model and pairs it was built on; when either has been replaced since, ``poll``
has it built again in the background, ``rebased``), 'model' (with 'from', the model it was
computed on, and 'merge', callable: the same change made on the model that replaced 'from'
since) and/or 'pairs' and 'srdf';
'then' (callable, run once it is taken); or 'error' (the log line of a failure).
"""

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

from ..collision import Srdf, overlapping_parts, self_collision_pairs
from ..collision.constraint import CONTACT_RELEASE
from ..collision.model import COARSE_TOLERANCE, link_covers
from ..errors import ModelError

__all__ = ['BackgroundUpdates', 'full_covers', 'srdf_pairs', 'default_pairs', 'finer_covers',
           'frees_contact', 'rebased', 'contact_tolerances', 'finer_steps', 'settle',
           'coarse_note', 'start_covers_child', 'CONTACT_GAIN']

# [m] finer covers are swapped in when a pair in contact is released or at least this much
# shallower: every sphere costs in every query (docs/collision.md, section 4: the Panda case).
CONTACT_GAIN = 0.002


def frees_contact(before, after):
    """True when finer covers are worth their spheres: a pair in contact (padded distance
    < 0) at ``before`` ([((a, b), distance)], ``CollisionConstraint.contacts``) is apart at
    ``after``, or a pair of ``before`` is at least ``CONTACT_GAIN`` farther (a pair missing
    from ``after`` is as far as the query looked)."""
    now = dict(after)
    return any(pair not in now or now[pair] >= distance + CONTACT_GAIN
               or (distance < 0.0 <= now[pair]) for pair, distance in before)


def _shown(contacts):
    return (', '.join(f'{a} / {b} {1e3 * d:.1f} mm' for (a, b), d in contacts[:4])
            + (f' and {len(contacts) - 4} more' if len(contacts) > 4 else ''))


def full_covers(model, pairs, settings, build, then, links=None):
    """Return the work (callable -> result) of the next fine covers of the coarse ``model``
    (``links``, else ``CollisionModel.next_fine_links``: the chain's links before those swept
    over off-chain joints; ``fine``, the covers from ``covers_in_child``) and their constraint
    with the same ``pairs`` and settings; then() runs once they are applied."""
    def work():
        started = time.monotonic()
        names = [n for n in links if n in model.coarse_links] if links else \
            model.next_fine_links()
        covers = covers_in_child(model.fine_inputs(names))
        fine = model.fine(covers)
        took = time.monotonic() - started
        rest = '; the self-collision pairs are computed again for them'
        if fine.coarse:
            rest += (f'; the coarse covers of {", ".join(fine.coarse_links)} (swept over '
                     'joints off the chain) stay until theirs are computed')
        spheres = sum(len(covers[n].radii) for n in names)
        return {'model': fine, 'merge': lambda current: current.fine(covers),
                'constraint': build(fine, pairs, settings),
                'base': (fine, pairs), 'from': model, 'then': then,
                'text': lambda: (
                    f'fine covers in after {took:.0f} s: {spheres} spheres (tolerance '
                    f'{fine.tolerance:g} m) on {len(names)} link(s) replace their coarse '
                    f'ones{rest}')}
    return work


def covers_in_child(inputs):
    """Return the covers {link: SphereCover} of ``link_covers(*inputs)``, computed in a child
    Python process: a minute of covers computed in a thread held up the control tick through
    the GIL (talos: 277 late ticks of 100 Hz in 107 s). The child is a fresh interpreter
    (``python -c``, nothing of this process forked or re-imported), started on the first
    job and kept for the next ones (``_Worker``: a talos first start sends six, and each
    fresh interpreter took 1-3 s to import before it computed anything); the inputs and its
    messages travel pickled over its stdin and stdout, and its log lines come out of this
    process's loggers. ModelError when the covers fail or the child ends without them (the
    next job starts another); where no process can be started, the covers are computed
    here."""
    with _WORKER.lock:         # one job at a time (BackgroundUpdates runs them in turn)
        try:
            child = _WORKER.child()
        except OSError as exc:
            logging.getLogger('smcik_ros.collision').info(
                'no process for the fine covers (%s): computed in this one', exc)
            return link_covers(*inputs)[0]
        try:
            pickle.dump(inputs, child.stdin)
            child.stdin.flush()
            while True:
                kind, *rest = pickle.load(child.stdout)
                if kind == 'log':
                    logging.getLogger(rest[0]).log(rest[1], '%s', rest[2])
                elif kind == 'covers':
                    return rest[0]
                else:
                    raise ModelError(rest[0])
        except (EOFError, OSError, pickle.UnpicklingError):
            raise ModelError('the process computing the fine covers ended without them (exit '
                             f'code {_WORKER.stop()})') from None


class _Worker:
    """The child process of ``covers_in_child``, kept between jobs: started again when it
    has ended (or was started with another ``sys.executable``). It ends when this process
    closes its stdin (this process ending) or when ``stop`` kills it."""

    def __init__(self):
        self.lock = threading.Lock()
        self._child = None

    def child(self):
        """Return the running child, starting one when there is none (OSError: none can
        be started)."""
        child = self._child
        if child is not None and child.poll() is None and child.args[0] == sys.executable:
            return child
        self.stop()
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [package] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
        self._child = subprocess.Popen(
            [sys.executable, '-c', 'from smcik_ros.control.cover_updates import '
             'child_covers; child_covers()'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env)
        return self._child

    def stop(self):
        """End the child (if any); return its exit code (None: there was none)."""
        child, self._child = self._child, None
        if child is None:
            return None
        if child.poll() is None:
            child.kill()
        code = child.wait()
        for stream in (child.stdin, child.stdout):
            try:
                stream.close()
            except OSError:         # its pipe broke with it
                pass
        return code


_WORKER = _Worker()


def start_covers_child():
    """Start the child process of ``covers_in_child`` now, unless it runs or a job holds it:
    its interpreter starts niced (``CHILD_NICENESS``), and on a busy computer a warm start's
    first refinement, cached covers only, waited 7 s for it (Unitree H2 in the black box)."""
    if _WORKER.lock.acquire(blocking=False):
        try:
            _WORKER.child()
        except OSError:              # none can be started: covers_in_child says so later
            pass
        finally:
            _WORKER.lock.release()


class _PickleHandler(logging.Handler):
    """Send log records to the parent process (``covers_in_child``) over ``stream``; end
    this process when the parent is gone (its pipe closed: no one waits for the covers)."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def emit(self, record):
        self.send(('log', record.name, record.levelno, record.getMessage()))

    def send(self, message):
        try:
            pickle.dump(message, self.stream)
            self.stream.flush()
        except OSError:      # BrokenPipeError: the parent ended
            os._exit(1)


CHILD_NICENESS = 10     # the covers take the CPU the control loop leaves (os.nice)


def child_covers():
    """The child process of ``covers_in_child``: for each job, read the inputs on stdin and
    send the log lines and the covers (or the error) on stdout; end when stdin closes. A
    Ctrl-C in the terminal reaches the whole process group: the parent decides when this
    ends, so SIGINT is ignored here. It runs at a lower priority (``CHILD_NICENESS``): its
    seconds of covers are background work, and on a two-core computer they competed as
    equals with the control tick and the solver's thread."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(CHILD_NICENESS)
    except OSError:          # not permitted here: the same priority as the node
        pass
    import trimesh  # noqa: F401  (the meshes' reader, imported before the first job asks)
    out, stdin = sys.stdout.buffer, sys.stdin.buffer
    sys.stdout = sys.stderr          # stray prints must not corrupt the stream
    handler = _PickleHandler(out)
    logger = logging.getLogger('smcik_ros')
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    while True:
        try:
            inputs = pickle.load(stdin)
        except EOFError:            # the parent closed the pipe (or ended)
            return
        try:
            covers, _ = link_covers(*inputs)
            message = ('covers', covers)
        except Exception as exc:     # sent to the parent, which raises it there
            message = ('error', f'{type(exc).__name__}: {exc}')
        with handler.lock:
            handler.send(message)


def srdf_pairs(model, parsed, settings, description, build, summary, label=None):
    """Return the work (callable -> result) of the pairs of the parsed SRDF ``parsed`` (or
    None) on ``model``; build(model, pairs, settings) -> constraint; summary() -> the guard's
    line for the log once applied, after ``label`` (default: 'SRDF from ... applied')."""
    label = label or f'SRDF from {description} applied'

    def work():
        pairs = self_collision_pairs(model, parsed, padding=settings.padding)
        return {'pairs': pairs, 'srdf': description, 'base': (model, pairs),
                'constraint': build(model, pairs, settings),
                'text': lambda: f'{label}: {summary()}'}
    return work


def default_pairs(model, q, candidates, parsed, settings, description, build, summary, adopt):
    """Return the work (callable -> result) of MoveIt's "Default" rule at the first command
    q (nq,): of the link pairs ``candidates`` (in contact there in the covers), those at most
    two joints apart whose URDF shapes themselves intersect (``overlapping_parts``,
    python-fcl) are disabled as an SRDF's ``<disable_collisions reason="Default"/>`` would
    (``srdf_pairs`` on ``parsed`` with them added); adopt(srdf) runs once they are applied
    (the pairs computed later keep them)."""
    def work():
        found = overlapping_parts(model, q, candidates)
        if not found:
            return {'text': lambda: (
                'python-fcl is not installed: pairs whose URDF shapes intersect at the first '
                'command stay checked, held at their depth (pip install python-fcl, or '
                'disable them in an SRDF)' if found is None else
                'the pairs in contact at the first command do not intersect in the URDF\'s '
                'own shapes, or are more than two joints apart: they stay checked')}
        extra = tuple((a, b, 'Default') for a, b in found)
        srdf = (Srdf('', extra, {}, 'the first command') if parsed is None else
                dataclasses.replace(parsed, disabled=parsed.disabled + extra))
        label = (f'{len(found)} self-collision pair(s) disabled, their URDF shapes intersect '
                 f'at the first command ({", ".join(f"{a} / {b}" for a, b in found)}; '
                 'MoveIt\'s "Default" rule: <disable_collisions ... reason="Default"/> in '
                 'the SRDF lists them for good)')
        result = srdf_pairs(model, srdf, settings, f'{description} + Default pairs', build,
                            summary, label)()
        result['then'] = lambda: adopt(srdf)
        return result
    return work


def finer_covers(model, links, q, contacts, pairs, settings, build, tolerance, then):
    """Return the work (callable -> result) of the covers of ``links`` again at the finer
    ``tolerance`` [m] (``CollisionModel.refined``, the covers from ``covers_in_child``), its
    constraint with the same ``pairs`` and settings; ``contacts``: the pairs in contact (or
    within ``CONTACT_RELEASE``) at q (nq,) before. Applied when they free one of those
    pairs (``frees_contact``), and then() runs (the next, finer step)."""
    def work():
        inputs = model.refine_inputs(links, tolerance)
        covers = covers_in_child(inputs) if inputs[0] else {}
        refined, names = model.refined(links, tolerance, covers)
        if not names:        # none finer within its sphere budget: on to the next step
            return {'then': then, 'text': lambda: (
                f'covers of {", ".join(links)} at tolerance {tolerance:g} m: none finer '
                'than before within its sphere budget; the covers stay as they were')}
        constraint = build(refined, pairs, settings)
        near = constraint.fork().contacts(q, within=CONTACT_RELEASE)   # a scene snapshot
        after = [(pair, d) for pair, d in near if d < 0.0]
        before = sum(int(model.link_count[model.link_index(n)]) for n in names)
        spheres = sum(int(refined.link_count[refined.link_index(n)]) for n in names)
        done = (f'covers of {", ".join(names)} computed again at tolerance '
                f'{tolerance:g} m ({before} -> {spheres} spheres)')
        if not frees_contact(contacts, near):
            return {'text': lambda: (
                f'{done}: not applied, they part no pair and take none {CONTACT_GAIN:g} m '
                f'farther ({_shown(near)}: the parts themselves are about that close); the '
                'covers stay as they were, and those pairs no deeper. Parts that overlap by '
                'design (a shoulder in its housing) move freely once an SRDF disables their '
                'pair (<disable_collisions link1= link2= reason="Default"/>, srdf_path)')}
        rest = (f'the arm now rests in contact at {_shown(after)} (padded cover distances)'
                if after else 'the arm no longer rests in contact')
        return {'model': refined, 'from': model,
                'merge': lambda current: current.refined(names, tolerance, covers)[0],
                'constraint': constraint, 'base': (refined, pairs), 'then': then,
                'text': lambda: f'{done}: {rest}'}
    return work


def rebased(result, model, pairs, settings, build):
    """Return the update ``result`` made again on ``model``, ``pairs`` and ``settings`` (the
    guard's current ones, which replaced its base meanwhile: the same change on top of them;
    ``build``: the guard's constraint builder)."""
    current = model
    if 'model' in result:
        model = result['model'] if result['from'] is current else result['merge'](current)
    pairs = result['pairs'] if 'pairs' in result else pairs
    rebuilt = dict(result, constraint=build(model, pairs, settings), base=(model, pairs))
    if 'model' in result:
        rebuilt.update(model=model, **{'from': current})
    return rebuilt


def contact_tolerances(settings):
    """Return the steps [m] of the contact refinement, coarser first: 60 % of the cover
    tolerance (when coarser than ``contact_tolerance``), then ``contact_tolerance`` for the
    links whose pairs are still in contact (at the first command) or not yet
    ``CONTACT_RELEASE`` apart (a blocked goal; ``start_contact_refinement``): every sphere
    costs in every query of every tick, and the coarser step comes sooner (talos's five
    resting links: 2722 spheres at 6 mm in 8 s, 6630 at 4 mm)."""
    finest = settings.contact_tolerance
    return sorted({finest, max(finest, 0.6 * settings.cover_tolerance)}, reverse=True)


def finer_steps(settings, refined_at, names):
    """Return the ``contact_tolerances`` finer than the covers applied to one of ``names`` at
    least (``refined_at``: {link: the tolerance of its applied finer covers [m]}): where a
    blocked goal's refinement of those links starts."""
    return [t for t in contact_tolerances(settings)
            if any(refined_at.get(n, float('inf')) > t for n in names)]


def settle(guard, seconds):
    """Wait up to ``seconds`` for the guard's background updates and apply the finished ones
    (``poll``; an applied update can start another, e.g. the pairs after the fine covers,
    waited for too); return their (level, text) lines."""
    deadline = time.monotonic() + seconds
    notes = []
    while True:
        finished = guard.wait_for_update(max(0.0, deadline - time.monotonic()))
        events = []
        while (event := guard.poll()) is not None:
            events.append(event[:2])
        notes += events
        if not finished or not (events or guard.updating):
            return notes


def coarse_note(model, waited):
    """Return the log line of a start with the coarse ``model`` after ``waited`` [s]."""
    boxes = ('spheres over each collision element\'s bounding box, reaching up to '
             f'{COARSE_TOLERANCE:g} m beyond the box')
    later = ('("fine covers in" is logged; later starts read them from the disk cache)')
    if len(model.coarse_links) < len(model.link_names):
        return (f'the fine covers of {", ".join(model.coarse_links)} (swept over joints off '
                'the chain: the slowest to compute) are computed from the first command on '
                f'(those in contact there first); until then they keep coarse covers '
                f'({boxes}), so the guard refuses more motions near them than its settings '
                f'ask, never fewer {later}')
    return (f'the fine sphere covers are not ready after {waited:g} s (a first start with '
            f'this robot): the collision guard starts with coarse covers ({boxes}) and '
            'checks every pair the SRDF leaves, so it refuses more motions than its settings '
            'ask, never fewer, until the fine covers being computed in the background replace '
            f'them {later}')


class BackgroundUpdates:
    """Runs update work in daemon threads and queues the results in the order they finish."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending = []
        self._workers = []
        self._last_cover = None      # the thread of the cover update started last

    def start(self, name, work, failure, covers=False, then=None):
        """Run ``work()`` in a thread named ``name``; its result (or {'error': failure(exc)}
        when it raised) waits for ``take``, with ``then`` (callable: what the guard's poll
        runs once it is taken, whatever the result) as 'then' unless the work gave one.
        covers: the work computes covers in a child process; such updates run one after the
        other, in the order started (two processes would take the control tick's core)."""
        before = self._last_cover if covers else None

        def run():
            if before is not None:
                before.join()
            try:
                result = work()
            except Exception as exc:   # reported by the guard's poll, never raised here
                result = {'error': failure(exc)}
            if then is not None:
                result.setdefault('then', then)
            with self._lock:
                self._pending.append(result)

        worker = threading.Thread(target=run, name=name, daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        if covers:
            self._last_cover = worker
        worker.start()

    def wait(self, timeout=None):
        """Wait until the running updates have finished, at most ``timeout`` [s] in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in list(self._workers):
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def busy(self, name):
        """True while an update started under ``name`` is being computed."""
        return any(w.is_alive() and w.name == name for w in self._workers)

    @property
    def running(self):
        """True while an update is being computed."""
        return any(worker.is_alive() for worker in self._workers)

    @property
    def waiting(self):
        """True while a finished result waits for ``take``."""
        with self._lock:
            return bool(self._pending)

    def take(self):
        """Return the oldest finished result, or None."""
        with self._lock:
            return self._pending.pop(0) if self._pending else None
