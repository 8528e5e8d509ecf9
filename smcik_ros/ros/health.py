"""The node's health, without ROS: one status built from the control loop, the collision guard,
the alternatives and the node's timings, and the diagnostics derived from it.

``Health.status(now)`` returns the status dictionary (JSON-ready; the ``~/status`` mirror);
``Health.diagnostics(status)`` turns that same dictionary into diagnostic entries
(``Diagnostic``: name, level, message, key-values) for ``/diagnostics``: the arm, the control
ticks, the solver, collision and the goal, each OK, WARN, ERROR or STALE, and the whole figure
(per tip, the contacts, the centre of mass over its support) where there is one: several
tips, a floating base, contacts or a support polygon. A level rises for
what happened since the previous diagnostics (a late tick, a failed tick), so that a monitor
shows a problem while it lasts, not forever.
"""

import collections
from dataclasses import dataclass, field
import math
import threading

from ..control.base import base_pose_list, figure_view

__all__ = ['OK', 'WARN', 'ERROR', 'STALE', 'LEVEL_NAMES', 'Diagnostic', 'Timings', 'Health']

# diagnostic_msgs/DiagnosticStatus levels.
OK, WARN, ERROR, STALE = 0, 1, 2, 3
LEVEL_NAMES = {OK: 'OK', WARN: 'WARN', ERROR: 'ERROR', STALE: 'STALE'}


@dataclass(frozen=True)
class Diagnostic:
    """One DiagnosticStatus: name, level (OK, WARN, ERROR, STALE), message, key-values."""

    name: str
    level: int
    message: str
    values: dict = field(default_factory=dict)


def _number(value, digits):
    return None if value is None or not math.isfinite(value) else round(value, digits)


class Timings:
    """Wall and CPU times of the node's callbacks, by name, the last ``keep`` of each [s]; and
    the CPU seconds of each name in all (summed per thread: no lost adds across threads)."""

    def __init__(self, keep=None):
        self._keep = keep or {'tick': 200, 'markers': 50, 'cloud': 20, 'alternatives': 20}
        self._wall = {name: collections.deque(maxlen=k) for name, k in self._keep.items()}
        self._cpu = {name: collections.deque(maxlen=k) for name, k in self._keep.items()}
        self._total = collections.defaultdict(float)     # (name, thread) -> CPU seconds

    def add(self, name, wall, cpu=None):
        """Note one run of ``name``: ``wall`` [s] and, if measured, its thread's ``cpu`` [s]."""
        self._wall[name].append(wall)
        if cpu is not None:
            self._cpu[name].append(cpu)
            self._total[name, threading.get_ident()] += cpu

    def mean_ms(self, name, cpu=False):
        """Return the mean [ms] of the kept times of ``name`` (None before the first)."""
        values = (self._cpu if cpu else self._wall)[name]
        return _number(1e3 * math.fsum(values) / len(values), 3) if values else None

    def cpu_seconds(self, name):
        """Return the CPU seconds of every run of ``name`` so far."""
        return math.fsum(v for (key, _), v in list(self._total.items()) if key == name)


class Health:
    """The status of a control loop and what it runs with (see the module doc).

    loop: ControlLoop; guard: CollisionGuard; alternatives: AlternativesBook; timings: Timings;
    tick_timing: TickTiming (late ticks); solver_name: callable -> the running solver's name;
    markers_skipped: callable -> marker ticks with nothing new; rate: callable -> rate_hz [Hz].
    """

    def __init__(self, loop, guard, alternatives, timings, tick_timing, solver_name,
                 markers_skipped, rate):
        self.loop = loop
        self.guard = guard
        self.alternatives = alternatives
        self.timings = timings
        self.tick_timing = tick_timing
        self._solver_name = solver_name
        self._markers_skipped = markers_skipped
        self._rate = rate
        self._last = {'late_ticks': 0, 'faults': 0}   # counts at the previous diagnostics

    def status(self, now):
        """Return the status dictionary at ``now`` [s, the loop's clock] (JSON-ready)."""
        loop, timings = self.loop, self.timings
        ess = loop.solver.last_info.get('ess')
        goal = loop.goal
        out = {
            'position_error': _number(loop.goal_errors[0], 6),
            'orientation_error': _number(loop.goal_errors[1], 6),
            'ess': _number(ess, 2) if ess is not None else None,
            'step_time_ms': timings.mean_ms('tick'),
            'marker_time_ms': timings.mean_ms('markers'),
            'step_cpu_ms': timings.mean_ms('tick', cpu=True),
            'late_ticks': self.tick_timing.late_ticks,
            'tick_period_max_ms': _number(1e3 * self.tick_timing.max_period, 2),
            'marker_cpu_ms': timings.mean_ms('markers', cpu=True),
            'marker_cpu_s': round(timings.cpu_seconds('markers'), 6),
            'steps_skipped': loop.skipped_steps,
            'ticks_between_steps': loop.interpolated_ticks,
            'steps_beside_tick': loop.steps_in_thread,
            'markers_skipped': self._markers_skipped(),
            'solver': self._solver_name(),
            'goal_id': goal.sequence if goal is not None else 0,
            'reached': bool(loop.goal_reached),
        }
        out.update(loop.status(now))
        out.update(self.alternatives.status(now))
        out['goal_covariance'] = goal is not None and goal.covariance is not None
        out['alternatives_time_ms'] = timings.mean_ms('alternatives')
        q = loop.state if loop.q is not None else loop.current_state()
        blocked = goal is not None and not loop.goal_reached
        out.update(self.guard.status(q, loop.refusal(within=int(self._rate()) + 1), blocked))
        out['pointcloud_ms'] = timings.mean_ms('cloud')
        out.update(self.figure(loop))
        return out

    @staticmethod
    def figure(loop):
        """Return the whole figure's part of the status: per tip (``tips``), the contacts,
        the centre of mass and its margin in the support polygon, the base pose."""
        goal, tips = loop.goal, loop.inbox.tip_links
        errors = loop.tip_errors if goal is not None else ()
        out = {'tips': [
            {'tip': tip, 'goal': goal is not None and goal.tips[k] is not None,
             'position_error': _number(errors[k][0], 6) if errors else None,
             'orientation_error': _number(errors[k][1], 6) if errors else None,
             'reached': bool(errors and goal.tips[k] is not None
                             and errors[k][0] <= loop.tolerances[0]
                             and errors[k][1] <= loop.tolerances[1])}
            for k, tip in enumerate(tips)]}
        state = loop.state
        view = figure_view(loop.chain, loop.constraints_kept, state, loop.figure.floating) \
            if state is not None else None
        out['contacts'] = list(view.contacts) if view is not None else []
        out['center_of_mass'] = list(view.com) if view is not None and view.com else None
        out['com_margin'] = view.com_margin if view is not None else None
        out['base_pose'] = base_pose_list(loop.base) if loop.base is not None else None
        out['figure'] = (len(tips) > 1 or loop.figure.floating or bool(out['contacts'])
                         or out['com_margin'] is not None)
        return out

    def diagnostics(self, status):
        """Return the Diagnostic entries of a ``status`` dictionary (and note its counts)."""
        entries = [self._arm(status), self._ticks(status), self._solver(status),
                   self._collision(status), self._goal(status)]
        if status.get('figure'):
            entries.append(self.figure_entry(status))
        self._last = {'late_ticks': status['late_ticks'], 'faults': status['faults']}
        return entries

    @staticmethod
    def _values(status, keys):
        return {key: status.get(key) for key in keys}

    def _arm(self, status):
        state = status['arm_state']
        if state == 'waiting':
            level, text = STALE, 'waiting for joint_states: nothing is commanded'
        elif state == 'stale':
            level, text = ERROR, ('joint_states are stale: the command brakes to a stop and '
                                  'holds')
        elif state in ('resync', 'stopping'):
            level, text = WARN, ('restarting from the measured configuration' if
                                 state == 'resync' else 'stopping: braking to a stop')
        else:
            level, text = OK, f'active, limited by {status["limited_by"]}'
        return Diagnostic('smcik_node: arm', level, text, self._values(status, (
            'arm_state', 'commanding', 'lead', 'max_lead', 'limited_by', 'velocity_ratio',
            'acceleration_ratio', 'joint_states_age', 'resyncs', 'stale_episodes')))

    def _ticks(self, status):
        late = status['late_ticks'] - self._last['late_ticks']
        level = WARN if late > 0 else OK
        text = (f'{late} late control tick(s) since the last report' if late
                else f'on time at {self._rate():g} Hz')
        values = self._values(status, ('late_ticks', 'tick_period_max_ms', 'step_time_ms',
                                       'step_cpu_ms', 'steps_skipped', 'ticks_between_steps',
                                       'steps_beside_tick'))
        values['rate_hz'] = self._rate()
        return Diagnostic('smcik_node: control ticks', level, text, values)

    def _solver(self, status):
        faults = status['faults'] - self._last['faults']
        if faults > 0:
            level, text = ERROR, (f'{faults} control tick(s) failed since the last report: '
                                  'the arm braked and the solver restarted (see the log)')
        elif status.get('branch_warning'):
            level, text = WARN, 'the held branch is about to be lost'
        else:
            level, text = OK, f'{status["solver"]}'
        return Diagnostic('smcik_node: solver', level, text, self._values(status, (
            'solver', 'ess', 'faults', 'confidence', 'branch_switches', 'resting')))

    def _collision(self, status):
        reason = status['collision_reason']
        if status['in_collision']:
            level = ERROR
        elif reason:
            level = WARN
        else:
            level = OK
        distance = status['min_distance']
        text = reason or ('clear' if distance is None else
                          f'clear: {status["closest_pair"]} at {1e3 * distance:.1f} mm')
        return Diagnostic('smcik_node: collision', level, text, self._values(status, (
            'min_distance', 'closest_pair', 'in_collision', 'self_collision',
            'self_collision_pairs', 'obstacles', 'holds', 'fallbacks', 'detour')))

    def _goal(self, status):
        goal_id = status['goal_id']
        if not goal_id:
            level, text = OK, 'no goal'
        elif status['reached']:
            level, text = OK, f'goal {goal_id} reached'
        elif status['refusal'] or status['resting']:
            level, text = WARN, (f'goal {goal_id} not reached: '
                                 + (status['refusal'] or 'out of reach, resting on the best '
                                    'estimate'))
        else:
            level, text = OK, f'moving to goal {goal_id}'
        return Diagnostic('smcik_node: goal', level, text, self._values(status, (
            'goal_id', 'reached', 'position_error', 'orientation_error', 'goals_received',
            'goals_superseded', 'goals_stale', 'goal_covariance')))

    @staticmethod
    def figure_entry(status):
        """Return the 'smcik_node: figure' Diagnostic of a status (its ``figure`` part)."""
        lost = [c['link'] for c in status['contacts'] if not c['held']]
        margin = status['com_margin']
        if lost:
            level, text = ERROR, f'contact(s) not held: {", ".join(lost)}'
        elif margin is not None and margin < 0.0:
            level, text = ERROR, (f'the centre of mass is {-1e3 * margin:.1f} mm outside its '
                                  'support polygon (less the margin)')
        else:
            reached = [t['tip'] for t in status['tips'] if t['reached']]
            goals = [t['tip'] for t in status['tips'] if t['goal']]
            level, text = OK, (f'{len(reached)} of {len(goals)} tip goal(s) reached'
                               + (f', {len(status["contacts"])} contact(s) held'
                                  if status['contacts'] else '')
                               + (f', CoM {1e3 * margin:.1f} mm inside its support'
                                  if margin is not None else ''))
        return Diagnostic('smcik_node: figure', level, text, Health._values(status, (
            'tips', 'contacts', 'center_of_mass', 'com_margin', 'base_pose')))
