"""smcik_node: online inverse kinematics as a ROS 2 node.

Wiring only: the node declares its parameters (ros/parameters.py), builds the model and the
ROS-free control wing (smcik_ros/control: the collision guard, the goal inbox, the control
loop) and connects them to topics and timers through one small adapter per ROS concern:
goals and joint_states in (ros/inputs.py), the scene in (ros/scene.py: constraints,
obstacles, point clouds, the SRDF topic), commands, markers, alternatives and the node's
health out (ros/outputs.py: /diagnostics and its mirror ~/status). A timer at ``rate_hz``
asks the control loop for the command of the tick and publishes it. What is decided (limits,
the arm's state, which goal applies, what a parameter change does, when markers are rebuilt,
the status) lives in plain modules tested without a ROS graph. See docs/node.md.

Run: ``ros2 run smcik_ros smcik_node --ros-args --params-file config/arm.yaml`` or
``python -m smcik_ros.node --ros-args --params-file config/arm.yaml``.
"""

import os

# The solvers work on tiny matrices: BLAS threads only add contention (measured 10-30x slower
# SVDs on a loaded 2-core host). Must be set before numpy is imported; an explicit setting wins.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
os.environ.setdefault('OMP_NUM_THREADS', '1')

import gc
import sys
import time

from rclpy.node import Node

from .control import (ArmSettings, ControlLoop, FrameResolver, GoalInbox,
                      HardConstraintValidator, Reporter, limits_for_chain,
                      read_joint_limits_yaml)
from .control.alternatives import AlternativesBook
from .control.collision_guard import CollisionGuard, CollisionSettings
from .control.constraints import ConstraintSet
from .control.detour import Detour, DetourSettings
from .control.scene_upkeep import SceneUpkeep
from .control.side_work import SideWork
from .control.step_worker import SWITCH_INTERVAL
from .control.tick_timing import TickTiming
from .warmup import warm_up
from .model import Chain
from .ros.conversions import LoopTime
from .ros.description import SrdfSources, load_robot_description, resolve_path, urdf_file_of
from .ros.health import Health, Timings
from .ros.inputs import GoalInputs, JointStatesInput, TfFrames
from .ros.markers import link_segments
from .ros.outputs import (AlternativesOutput, BaseOutput, CommandOutput, HealthOutput,
                          MarkerOutput)
from .ros.parameters import NodeParameters, initial_base_pose, tips_of
from .ros.runner import LogBridge, run_node, stop_requested
from .ros.scene import SCENE_PARAMETERS, SceneInputs, SemanticTopic
from .ros.schedule import LOOP_PARAMETERS, apply_loop_settings
from .ros.solver_parameters import SolverChoice, solver_settings_yaml

__all__ = ['SmcIkNode', 'main']

# Timers of the work between control ticks: parameter -> side job.
SIDE_TIMERS = {'marker_rate_hz': 'markers', 'alternatives_rate_hz': 'alternatives',
               'status_rate_hz': 'status'}


class SmcIkNode(Node):
    """Online IK node: goals + constraints + joint_states in, joint commands out."""

    def __init__(self, **kwargs):
        super().__init__('smcik_node', **kwargs)
        self.report = Reporter(self.log)
        self._log_bridge = LogBridge(self.log)
        self.parameters = NodeParameters(self, self.log)
        values = self.parameters.values
        self.time, self.timings, self._rate_timers = LoopTime(self.get_clock()), Timings(), {}
        # Subscribed first: discovery of a /robot_description_semantic publisher (waited for
        # below) runs while the URDF is read and the kernels load.
        srdf = SrdfSources()
        semantic = SemanticTopic(self, values, srdf)
        self.chain = self._load_model(srdf)
        self.guard = self._collision_guard(srdf, semantic.wait(0.5, 2.0))
        self.solver = SolverChoice(self.parameters.setting_fields, self.chain, values['solver'],
                                   lambda: self.parameters.values,
                                   lambda: self.scene.solver_constraints(), self.log)
        self.loop = self._control_loop()
        self._connect(srdf, semantic)
        self._make_timers(('rate_hz', *SIDE_TIMERS), values)
        self._watch_parameters()
        # Everything built at start-up (the model, covers, pair tables, compiled kernels) lives
        # for the whole run: out of the collector's view, a full collection does not walk it
        # (docs/node.md, "The tick": 41 ms measured with it in view, 0.4 ms frozen).
        gc.collect()
        gc.freeze()
        lim = self.loop.limits
        self.log('info', f'ready: solver {self.solver.name}, {values["rate_hz"]:g} Hz x '
                 f'{values["iterations_per_tick"]} iteration(s), commands '
                 f'({values["command_type"]}) on {self.commands.publisher.topic_name}; limits: '
                 f'velocity {lim.velocity.round(3)}, acceleration {lim.acceleration.round(3)}, '
                 f'max_lead {values["max_lead"]:g}; waiting for joint_states before commanding'
                 + (' (start_without_joint_states: simulation only)'
                    if values['start_without_joint_states'] else ''))

    # ------------------------------------------------------------------ building
    def _load_model(self, srdf):
        """Return the Chain of the robot description; compile or load the kernels for it."""
        values = self.parameters.values
        self.urdf_xml, source = load_robot_description(
            self, values['robot_description_timeout'], keep_waiting=lambda: not stop_requested())
        floating = {'floating_base': True, 'world_frame': values['world_frame']} \
            if values['floating_base'] else {}
        chain = Chain.from_urdf(self.urdf_xml, base_link=values['base_link'],
                                tip_link=tips_of(values), **floating)
        self.log('info', f'model from {source}: {chain.robot_name} {chain.base_link} -> '
                 f'{", ".join(chain.tip_links)}, joints {", ".join(chain.joint_names)}')
        # Compile the kernels (first run) or load them from the on-disk cache now, before any
        # solver or timer exists: no tick pays for it, and a cold cache says so.
        warm_up(chain, lambda text: self.log('info', text))
        srdf.urdf_file, note = urdf_file_of(values['urdf_path'], self.urdf_xml, source)
        if note:
            self.log('warn', note)
        return chain

    def _connect(self, srdf, semantic):
        """Build the adapters: goals, joint_states and the scene in; commands, markers,
        alternatives and the node's health out; the work beside the control ticks."""
        values, chain, loop = self.parameters.values, self.chain, self.loop
        links = loop.inbox.resolver.links
        tf = TfFrames.make(self, chain.base_link, links, self.log) if values['use_tf'] else None
        if tf is not None:
            loop.inbox.lookup = tf.lookup
        constraints = ConstraintSet(chain, self._frame_to_base, model=self.guard.model,
                                    frame_names=None if tf else links, urdf=self.urdf_xml,
                                    urdf_path=srdf.urdf_file,
                                    package_paths=values['package_paths'])
        self.scene = SceneInputs(self, loop, self.guard, constraints, srdf, semantic, values,
                                 self._frame_to_base, self.report, self.log, self.time,
                                 self.timings)
        self.upkeep = SceneUpkeep(self.guard, loop, self.scene.solver_constraints,
                                  values['collision_padding'], self.report)
        book = AlternativesBook(chain.nq, chain.continuous, values['max_alternatives'],
                                report=self.report)
        loop.step_observers.append(book.observe)
        self.alternatives = AlternativesOutput(self, chain, book, self.time, self.timings)
        if values['alternatives_rate_hz'] <= 0.0:
            book.switch_off(0.0, 'alternatives_rate_hz is 0 (off)')
        self.goals = GoalInputs(self, loop, book, values, self.report, self.time)
        self.joint_states = JointStatesInput(self, loop, self.report, self.time)
        base = BaseOutput(self, chain.base_link, chain.floating_link, values['publish_base_tf'],
                          self.log) if chain.floating else None
        self.commands = CommandOutput(self, loop.limits.names, values, base)
        self.markers = MarkerOutput(self, chain, link_segments(self.urdf_xml, chain.link_names),
                                    loop, self.guard, constraints, self.alternatives, values,
                                    self.time, self.timings)
        self.tick_timing = TickTiming(values['rate_hz'])
        self.health = HealthOutput(self, Health(
            loop, self.guard, book, self.timings, self.tick_timing, lambda: self.solver.name,
            lambda: self.markers.schedule.skipped, lambda: self.parameters.values['rate_hz']),
            chain.robot_name, self.time, self.report)
        # Markers, alternatives and the status are requested by their timers and run in the
        # solver's worker thread after a control tick (solver_thread), else between ticks.
        self._side = SideWork()
        self._beside = loop.beside if values['solver_thread'] else None
        for job, run in (('markers', self.markers.tick),
                         ('alternatives', lambda: self.alternatives.refresh(loop)),
                         ('status', self.health.tick)):
            self._side.add(job, self.guarded(job, run), beside=True)

    def _collision_guard(self, srdf, topic_text):
        """Build the collision model, self-collision pairs and scene (ModelError: exit 1)."""
        values = self.parameters.values
        source, where, explicit = srdf.choose(values, topic_text)
        self.log('info', 'building the collision model: sphere covers of the URDF\'s '
                 '<collision> geometry (computed on the first start of a robot, seconds to '
                 'minutes for meshes, waited for up to collision_cover_wait '
                 f'{values["collision_cover_wait"]:g} s, then coarse covers until they are '
                 'ready; read from the on-disk cache later) and the self-collision pairs '
                 f'({where})')
        guard, notes = CollisionGuard.from_urdf(
            self.chain, self.urdf_xml, urdf_path=srdf.urdf_file,
            package_paths=values['package_paths'], srdf=source, srdf_description=where,
            explicit_srdf=explicit, settings=CollisionSettings(
                self_collision=values['self_collision'], padding=values['collision_padding'],
                clearance=values['collision_clearance'],
                cover_tolerance=values['collision_cover_tolerance'],
                contact_tolerance=values['collision_contact_tolerance'],
                voxel_size=values['pointcloud_voxel_size']),
            cover_wait=values['collision_cover_wait'])
        for level, text in notes:
            self.log(level, text)
        srdf.applied = source
        return guard

    def _control_loop(self):
        """Return the ControlLoop: limits, arm state machine, goal inbox, solver, validators."""
        values, chain = self.parameters.values, self.chain
        path = values['joint_limits_path']
        limits, notes = limits_for_chain(
            chain, values['velocity_scale'], values['max_acceleration'],
            values['default_velocity_limit'],
            read_joint_limits_yaml(resolve_path(path, 'joint_limits_path'))
            if path.strip() else None)
        for note in notes:
            self.log('warn', note)
        arm = ArmSettings(joint_states_timeout=values['joint_states_timeout'],
                          resync_threshold=values['resync_threshold'],
                          max_lead=values['max_lead'],
                          start_without_joint_states=values['start_without_joint_states'])
        # Hard constraints the collision model has no geometry for keep their own validator.
        validator = HardConstraintValidator(chain, skip=lambda c: c is self.guard.constraint)
        detour = None
        if chain.floating:
            self.log('info', 'floating_base: the collision detour is off (it plans the joints '
                     'of a fixed base); the guard still stops at the collision margin')
        else:
            detour = Detour(chain, limits, DetourSettings(enabled=values['collision_detour']))
        loop = ControlLoop(
            chain, self.solver.build(values), limits, arm,
            GoalInbox(FrameResolver(chain), chain.tip_links),
            validators=[validator, self.guard], report=self.report,
            solver_thread=values['solver_thread'], detour=detour,
            base=initial_base_pose(values) if chain.floating else None)
        apply_loop_settings(loop, values)
        if values['solver_thread']:
            sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        return loop

    def _watch_parameters(self):
        """Route run-time parameter changes to the adapters that own them."""
        changes = self.parameters.changes
        changes.add(SCENE_PARAMETERS, self.scene.check, self.scene.apply)
        changes.add(self.solver.owns, self.solver.check,
                    lambda changes, values: self.solver.apply(self.loop, changes, values))
        changes.add(LOOP_PARAMETERS, apply=lambda changes, values: apply_loop_settings(
            self.loop, values, changes))
        changes.add(CommandOutput.PARAMETERS, CommandOutput.check, self.commands.apply)
        changes.add(('rate_hz', *SIDE_TIMERS), apply=lambda changes, values: self._make_timers(
            [k for k in ('rate_hz', *SIDE_TIMERS) if k in changes], values))
        changes.add(('max_alternatives', 'alternatives_rate_hz'), apply=self._alternatives_set)
        self.parameters.start(before=self.loop.settle)   # nothing runs beside meanwhile

    def _alternatives_set(self, changes, values):
        book = self.alternatives.book
        if 'max_alternatives' in changes:
            book.max_alternatives = values['max_alternatives']
        if 'alternatives_rate_hz' in changes and values['alternatives_rate_hz'] <= 0.0:
            self.alternatives.switch_off('alternatives_rate_hz is 0 (off)')

    def _make_timers(self, which, values):
        """(Re)create the control timer and the side-work timers named in ``which``."""
        for key in which:
            if self._rate_timers.get(key) is not None:
                self.destroy_timer(self._rate_timers.pop(key))
            rate = values[key]
            if key == 'rate_hz':
                self.tick_timing.rate = self.commands.rate_hz = rate
                self._rate_timers[key] = self.create_timer(1.0 / rate, self.guarded('tick',
                                                                               self._on_tick))
            elif rate > 0.0:
                request = self._request_markers if key == 'marker_rate_hz' else \
                    lambda job=SIDE_TIMERS[key]: self._side.request(job)
                self._rate_timers[key] = self.create_timer(1.0 / rate, self.guarded(key, request))
            else:
                self._side.cancel(SIDE_TIMERS[key])

    def _frame_to_base(self, frame):
        """Return the (4, 4) pose of ``frame`` in the base frame [m] (GoalError if unknown)."""
        return self.loop.inbox.to_base(frame, self.loop.current_state())

    # ------------------------------------------------------------------ the tick
    def _on_tick(self):
        started, cpu = time.perf_counter(), time.thread_time()
        late = self.tick_timing.tick(started)        # late ticks: counted, warned when many
        if late is not None:
            self.report('warn', 'late_ticks', late, interval=10.0)
        for level, text in self.upkeep.before_tick():   # background updates, surfaces
            self.log(level, text)
        ns, now = self.time.now()
        command = self.loop.tick(now)
        if command is not None:
            self.commands.publish(command, ns)
            for level, text in self.upkeep.after_command(self.loop.state):
                self.log(level, text)
        elif self.loop.q is None:
            if self._waiting_since is None:
                self._waiting_since = now
            self.report('info', 'waiting', (
                f'waiting for joint_states on {self.joint_states.topic} '
                f'({now - self._waiting_since:.0f} s): nothing is commanded until the arm\'s '
                'positions arrive'), interval=5.0, count=False)
        self.timings.add('tick', time.perf_counter() - started, time.thread_time() - cpu)
        if self._side.pending:      # markers, alternatives, status: beside or between ticks
            self._side.run(self._time_to_next_tick, self._beside)

    _waiting_since = None     # [s] the first tick without a command

    def _time_to_next_tick(self):
        """Return the seconds until the control timer fires next (None: unknown)."""
        ns = self._rate_timers['rate_hz'].time_until_next_call()
        return None if ns is None else ns * 1e-9

    def _request_markers(self):
        """The marker timer: a marker tick beside or between control ticks, unless nothing
        changed since the last markers (then they are republished once a second, here)."""
        if self.loop.solver_idle and self.markers.unchanged():
            return
        self._side.request('markers')

    # ------------------------------------------------------------------ logging
    def log(self, level, text):
        """Log ``text`` at ``level`` ('debug', 'info', 'warn', 'error')."""
        # One call site per severity: rclpy refuses a severity change at the same call site.
        logger = self.get_logger()
        if level == 'error':
            logger.error(text)
        elif level == 'warn':
            logger.warn(text)
        elif level == 'debug':
            logger.debug(text)
        else:
            logger.info(text)

    def guarded(self, name, callback):
        """Return ``callback`` wrapped so that an exception is reported, never raised."""
        def run(*args):
            try:
                callback(*args)
            except Exception as exc:   # never die: report once with traceback, continue
                self.report('error', f'callback:{name}:{type(exc).__name__}',
                            f'{name} callback failed ({type(exc).__name__}: {exc}); the '
                            'message is dropped and the node continues', exc)
        return run

    # ------------------------------------------------------------------ shutdown
    def begin_shutdown(self):
        """SIGINT/SIGTERM: stop following goals and brake to a stop (timers keep running)."""
        if not self.loop.stopping:
            self.loop.request_stop()
            self.log('info', 'shutdown requested: braking to a stop within the limits, then '
                     'exiting')

    @property
    def shutdown_complete(self):
        """True once the braking after begin_shutdown is complete."""
        return self.loop.stopped

    def flush(self, timeout=0.5):
        """Wait up to ``timeout`` [s] until subscribers acknowledged the last commands (the
        final, zero-velocity one is published on the tick that completes the brake)."""
        return self.commands.flush(timeout)

    def destroy_node(self):
        """Wait for the solver's thread, detach the collision log bridge, destroy the node."""
        loop = getattr(self, 'loop', None)
        if loop is not None:
            loop.close()
        self._log_bridge.close()
        return super().destroy_node()


def main(args=None):
    """Run the node until SIGINT/SIGTERM (exit 0); exit 1 when the model or a parameter is
    unusable.

    Set SMCIK_PROFILE=/path/file.prof to profile the node with cProfile (written at exit).
    ``--solver-settings-yaml`` prints the solver settings block of config/arm.yaml and exits.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv[:1] == ['--solver-settings-yaml']:
        print(solver_settings_yaml(), end='')
        return 0
    return run_node(SmcIkNode, 'smcik_node', args, os.environ.get('SMCIK_PROFILE'))


if __name__ == '__main__':
    sys.exit(main())
