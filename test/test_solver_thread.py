"""The solver's worker thread (control/step_worker.py, ControlLoop solver_thread): the
worker itself, the constraint twins and scene snapshots the solver reads there, and the
command stream with steps that run on beside the ticks. The solvers are the real SMC (a
gate or a delay wrapped around its step makes the step slow on purpose)."""

import sys
import threading
import time

import numpy as np
import pytest

from smcik_ros.collision import CollisionConstraint, Obstacle, Scene, self_collision_pairs
from smcik_ros.control.tick import ControlLoop
from smcik_ros.control.side_work import SideWork
from smcik_ros.control.step_worker import SWITCH_INTERVAL, StepWorker
from smcik_ros.collision import KeepOutSphere
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.smc import SmcSettings, SmcSolver

from collision_helpers import demo_model
from conftest import ARM7_URDF
from test_control_loop import (SLACK, Log, RaisingSmc, Stream, follower, make_loop,
                               reachable_pose)
from test_control_loop import arm7  # noqa: F401  (the module's chain fixture)


@pytest.fixture(autouse=True)
def switch_interval():
    """The node's GIL switch interval with solver_thread (the tests tick back to back: at
    Python's default of 5 ms a worker that waits for the GIL after each kernel crawls)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    yield
    sys.setswitchinterval(previous)


# ---------------------------------------------------------------------- the worker
def test_worker_runs_a_step_and_side_work_in_order_in_one_thread():
    worker = StepWorker()
    gate = threading.Event()
    order = []
    try:
        worker.start('tag', lambda x: (gate.wait(5.0), order.append('step'), x * 2)[2], 21)
        assert worker.pending and worker.running and not worker.done and not worker.idle
        assert not worker.wait(0.0) and not worker.wait(0.01)
        assert worker.beside(lambda: order.append(('side', worker.in_worker())))
        assert not worker.beside(lambda: order.append('refused')), 'one batch at a time'
        with pytest.raises(RuntimeError, match='not taken'):
            worker.start('again', lambda: None)
        with pytest.raises(RuntimeError, match='no finished step'):
            worker.take()
        gate.set()
        assert worker.wait(None) and worker.done
        assert worker.take() == ('tag', 42) and not worker.pending
        worker.settle()
        assert order == ['step', ('side', True)] and worker.idle
        assert not worker.in_worker()
        spent = worker.cpu_time
        worker.start('busy', lambda: sum(k * k for k in range(200000)))
        worker.wait(None)
        worker.take()
        assert worker.cpu_time > spent, 'the CPU time of the thread\'s work is counted'

    finally:
        gate.set()
        worker.close()


def test_while_the_solver_searches_side_work_keeps_to_its_share_of_the_worker():
    """A batch of side work that took 40 ms (on the worker's clock) is followed by the next
    one only 360 ms later while the solver searches (``SIDE_SHARE`` 0.1: at most a tenth of
    the worker), and at once when it has settled. Talos: markers and alternatives took 27 %
    of the worker beside 3-5 solver steps a second."""
    now = [0.0]
    worker = StepWorker(clock=lambda: now[0])

    def batch():
        now[0] += 0.04
    try:
        assert worker.beside(batch, searching=True)
        worker.settle()
        assert now[0] == pytest.approx(0.04)
        for wait, searching, ok in ((0.0, True, False), (0.35, True, False),
                                    (0.0, False, True)):
            now[0] += wait
            assert worker.beside(lambda: None, searching) == ok, (now[0], searching)
            worker.settle()
        now[0] += 0.5                 # the settled batch took no time: no wait after it
        assert worker.beside(batch, searching=True)
        worker.settle()
        assert not worker.beside(lambda: None, searching=True)
        now[0] += 0.361
        assert worker.beside(lambda: None, searching=True)
        worker.settle()
    finally:
        worker.close()


def test_worker_hands_a_step_exception_to_take_and_keeps_side_errors():
    worker = StepWorker()
    try:
        worker.start(1, lambda: 1 / 0)
        worker.wait(None)
        with pytest.raises(ZeroDivisionError):
            worker.take()
        assert not worker.pending
        assert worker.beside(lambda: [][1])
        worker.settle()
        errors = worker.side_errors()
        assert len(errors) == 1 and isinstance(errors[0], IndexError)
        assert worker.side_errors() == []
        # settle from inside the worker returns at once (no wait on itself)
        done = []
        assert worker.beside(lambda: (worker.settle(), done.append(True)))
        worker.settle()
        assert done == [True]
    finally:
        worker.close()
    assert worker.idle and not worker.pending


# ---------------------------------------------------------------------- twins and snapshots
def test_a_scene_snapshot_keeps_its_obstacles_and_version_while_the_scene_changes():
    scene = Scene({('a', 0): Obstacle.sphere((0.5, 0.0, 0.3), 0.1)})
    snapshot = scene.snapshot()
    assert snapshot.version == scene.version and snapshot.items() == scene.items()
    scene.add(('a', 1), Obstacle.sphere((0.0, 0.5, 0.3), 0.1))
    scene.remove(('a', 0))
    assert [k for k, _ in snapshot.items()] == [('a', 0)] and snapshot.version == 0
    assert [k for k, _ in scene.items()] == [('a', 1)] and scene.version == 2


def test_a_constraint_twin_reads_its_snapshot_until_refreshed_with_the_same_verdicts():
    chain, model = demo_model(ARM7_URDF)
    scene = Scene()
    constraint = CollisionConstraint(model, scene, pairs=self_collision_pairs(model))
    twin = constraint.fork()
    rng = np.random.default_rng(3)
    q = chain.neutral_configuration() + rng.uniform(-0.8, 0.8, (40, chain.n))
    q = np.clip(q, chain.lower, chain.upper)
    frames = chain.frames(q)
    tool = chain.fk(q[0])[:3, 3]
    scene.add(('ob', 0), Obstacle.sphere(tool, 0.05))       # on the tool of q[0]
    assert twin.scene.version == 0 and not twin.violated(frames)[0], 'a snapshot of before'
    assert constraint.violated(frames)[0]
    twin.refresh()
    assert twin.scene.version == scene.version
    for reference in (None, q[0]):
        constraint.set_reference(reference)
        twin.set_reference(reference)
        assert np.array_equal(twin.violated(frames), constraint.violated(frames))
        assert np.array_equal(twin.residual(frames), constraint.residual(frames))
    assert twin.version == constraint.version
    assert twin._cache is not constraint._cache and twin.pairs is constraint.pairs
    assert constraint.check_motion(q[1], q[2]) == twin.check_motion(q[1], q[2])


def test_side_work_hands_beside_jobs_to_another_thread_in_one_batch():
    side = SideWork()
    ran = []
    for name in ('markers', 'alternatives', 'status'):
        side.add(name, lambda name=name: ran.append(name), beside=name != 'status')
    for name in ('markers', 'status', 'alternatives'):
        side.request(name)
    batches = []
    assert side.run(lambda: 1.0, beside=lambda fn: False) == ['status']
    assert set(side.pending) == {'markers', 'alternatives'} and ran == ['status']
    assert sorted(side.run(lambda: 1.0, beside=lambda fn: batches.append(fn) or True)) == \
        ['alternatives', 'markers']
    assert side.pending == () and ran == ['status']
    batches[0]()
    assert ran == ['status', 'markers', 'alternatives']
    assert side.runs == {'markers': 1, 'alternatives': 1, 'status': 1}
    side.request('markers')
    assert side.run(lambda: 1.0) == ['markers'], 'without a thread every job runs here'


# ---------------------------------------------------------------------- the loop
class TimedStream(Stream):
    """A Stream whose ticks leave the GIL for ``pause`` [s] between them, as the node's
    timer does (ticks back to back would starve the worker, which takes the GIL back after
    each compiled kernel)."""

    def __init__(self, loop, seed=0, jitter=0.2, pause=0.0003):
        super().__init__(loop, seed=seed, jitter=jitter)
        self.pause = pause

    def tick(self):
        command = super().tick()
        time.sleep(self.pause)
        return command


def _thread_loop(chain, solver, budget, log=None):
    loop, limits = make_loop(chain, solver=solver, log=log)
    threaded = ControlLoop(chain, solver, limits, loop.arm.settings, report=log or Log(),
                           solver_thread=True, step_budget=budget)
    return threaded, limits


def _goal_run(loop, chain, seeds, ticks=800, keep_out=True):
    stream = (TimedStream if loop.stepper.worker is not None else Stream)(loop, seed=seeds[0],
                                                                   jitter=0.3)
    stream.measure(chain.neutral_configuration())
    stream.tick()
    if keep_out:      # a collision-engine constraint, forked for the solver's thread
        far = chain.fk(chain.neutral_configuration())[:3, 3] + np.array([0.0, 0.0, 5.0])
        loop.set_constraints([KeepOutSphere(far, 0.01, hard=True)])
    for seed in seeds:
        loop.offer_goal('pose', reachable_pose(chain, seed, near=stream.commands[-1].q), '',
                        None, stream.t)
        for _ in range(ticks):
            follower(2)(stream)
            stream.tick()
            if loop.goal_reached:
                break
    return stream


def test_steps_awaited_in_the_thread_give_the_commands_of_steps_in_the_tick(arm7):
    """With an unlimited budget every step is taken in its own tick: the commands are the
    same, bit for bit, as with the step inside the tick (the twins of the constraints give
    the same verdicts as the constraints)."""
    inline, _ = make_loop(arm7, solver=make_solver('smc', arm7, seed=7))
    threaded, _ = _thread_loop(arm7, make_solver('smc', arm7, seed=7), budget=None)
    try:
        a = _goal_run(inline, arm7, [11, 12])
        b = _goal_run(threaded, arm7, [11, 12])
    finally:
        threaded.close()
    assert inline.goal_reached and threaded.goal_reached
    assert len(a.commands) == len(b.commands)
    assert all(np.array_equal(x.q, y.q) and x.limited_by == y.limited_by
               for x, y in zip(a.commands, b.commands))
    assert threaded.steps_in_thread == 0 and threaded.stepper.worker.calls > 0
    assert threaded.stepper.twins[0] is not threaded.constraints[0]


class GatedSmc(SmcSolver):
    """The real SMC whose step waits until the test opens its gate (a slow step)."""

    def __init__(self, chain, seed=0):
        super().__init__(chain, SmcSettings(seed=seed))
        self.gate = threading.Event()
        self.goals = []

    def step(self, goal):
        assert self.gate.wait(10.0), 'the test never opened the gate'
        self.goals.append(goal)
        return super().step(goal)


def _steps(loop):
    """The solver steps the loop started in its worker (the rest of its work: resets)."""
    return loop.stepper.worker.calls - loop.stepper.queued_resets


def _gated_start(chain, seed, stream_seed, goal_seed):
    """A thread loop on a GatedSmc (budget 0), started at the neutral configuration with a
    goal offered: (solver, loop, limits, stream)."""
    solver = GatedSmc(chain, seed=seed)
    loop, limits = _thread_loop(chain, solver, budget=0.0)
    stream = TimedStream(loop, seed=stream_seed)
    stream.measure(chain.neutral_configuration())
    stream.tick()
    loop.offer_goal('pose', reachable_pose(chain, goal_seed), '', None, stream.t)
    return solver, loop, limits, stream


def test_a_step_running_on_is_carried_then_taken_and_a_replaced_goal_steps_at_once(arm7):
    solver, loop, limits, stream = _gated_start(arm7, 3, 1, 21)
    try:
        for _ in range(5):        # the first step waits at the gate: the arm holds
            follower(1)(stream)
            stream.tick()
        assert loop.stepper.worker.running and loop.steps_in_thread == 1 and not solver.goals
        assert all(not np.any(c.v) for c in stream.commands), 'no answer yet: at rest'
        solver.gate.set()
        loop.stepper.worker.wait(None)
        follower(1)(stream)
        stream.tick()               # takes the answer
        assert loop.estimate is not None and solver.goals == [loop.goal.terms]
        assert not loop.stepper.worker.pending
        solver.gate.clear()
        first_goal = loop.goal
        follower(1)(stream)
        stream.tick()               # the next step starts, and waits at the gate
        assert loop.stepper.worker.running and _steps(loop) == 2
        # A new goal while a step of the old one runs: that step is dropped when it ends
        # and the new goal is stepped in the same tick.
        loop.offer_goal('pose', reachable_pose(arm7, 22, near=stream.commands[-1].q), '',
                        None, stream.t)
        follower(1)(stream)
        stream.tick()
        assert loop.goal is not first_goal and loop.stepper.worker.running
        solver.gate.set()
        loop.stepper.worker.wait(None)
        follower(1)(stream)
        stream.tick()
        loop.settle()
        assert _steps(loop) == 3, 'the dropped step was followed by one at once'
        assert solver.goals[-2] is first_goal.terms and solver.goals[-1] is loop.goal.terms
        assert loop.estimate is not None
        for _ in range(20000):
            follower(1)(stream)
            stream.tick()
            if loop.goal_reached:
                break
        assert loop.goal_reached, (loop.goal_errors, loop.stepper.worker.calls)
        v_ratio, a_ratio = stream.worst_ratios(limits)
        assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    finally:
        solver.gate.set()
        loop.close()


class SlowSmc(SmcSolver):
    """The real SMC with a random (seeded) delay of 0-3 ms in every step."""

    def __init__(self, chain, seed):
        super().__init__(chain, SmcSettings(seed=seed))
        self.delay_rng = np.random.default_rng(seed)

    def step(self, goal):
        time.sleep(self.delay_rng.uniform(0.0, 0.003))
        return super().step(goal)


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_steps_beside_the_ticks_keep_every_limit_and_reach_the_goals(arm7, seed):
    """Ticks back to back while steps of 0-3 ms run on beside them (taken whenever they
    end): the commands keep the position, velocity and acceleration limits and the lead,
    never carry NaN, and the goals are reached."""
    loop, limits = _thread_loop(arm7, SlowSmc(arm7, seed), budget=0.0)
    try:
        stream = _goal_run(loop, arm7, [30 + seed, 40 + seed], ticks=20000)
        assert loop.goal_reached and loop.steps_in_thread > 0
    finally:
        loop.close()
    q = np.array([c.q for c in stream.commands])
    assert np.all(np.isfinite(q))
    assert np.all(q >= limits.lower - 1e-12) and np.all(q <= limits.upper + 1e-12)
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    leads = [np.max(np.abs(c.q - m)) for c, (_, m) in zip(stream.commands[1:],
                                                          stream.measured[1:])]
    assert max(leads) <= loop.arm.settings.max_lead + 1e-9
    assert loop.faults == 0


@pytest.mark.parametrize('seed', [0, 1])
def test_a_step_raising_in_the_thread_is_a_fault_of_the_tick_that_takes_it(arm7, seed):
    log = Log()
    # Steps 2, 4 and 6 always fault: how many steps the thread takes before the goal is
    # reached depends on the machine (a random draw alone gave 2 faults on a slow run).
    solver = RaisingSmc(arm7, rate=0.15, seed=seed, always=(2, 4, 6))
    loop, limits = _thread_loop(arm7, solver, budget=0.0, log=log)
    try:
        stream = _goal_run(loop, arm7, [50 + seed, 60 + seed], ticks=20000, keep_out=False)
        assert loop.goal_reached
        loop.settle()
    finally:
        loop.close()
    assert solver.raised >= 3
    assert solver.raised - 1 <= loop.faults <= solver.raised   # the last may still wait
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    assert all(np.all(np.isfinite(c.q)) for c in stream.commands)
    assert any(key.startswith('tick:') for key in log.keys())


def test_a_reset_waits_for_the_running_step_and_drops_its_answer(arm7):
    solver, loop, _, stream = _gated_start(arm7, 4, 2, 23)
    try:
        stream.tick()
        assert loop.stepper.worker.running
        releaser = threading.Timer(0.05, solver.gate.set)
        releaser.start()
        loop.set_constraints([])        # waits for the step, drops its answer
        assert not loop.stepper.worker.pending and solver.gate.is_set()
        assert loop.solver is solver and loop.solver_idle
    finally:
        solver.gate.set()
        loop.close()


class ResetLog(GatedSmc):
    """A GatedSmc that records the thread and configuration of every reset, and tells when
    a step has come to its gate (``at_gate``)."""

    def __init__(self, chain, seed=0):
        super().__init__(chain, seed)
        self.resets = []
        self.at_gate = threading.Event()

    def step(self, goal):
        self.at_gate.set()
        return super().step(goal)

    def reset(self, q=None):
        self.resets.append((threading.get_ident(), None if q is None else np.array(q)))
        return super().reset(q)


class Refuser:
    """A validator that refuses every motion while ``on``."""
    reason = 'the test refuses every motion'

    def __init__(self):
        self.on = False

    def __call__(self, q_from, q_to):
        return not self.on


def test_a_hold_while_a_step_runs_brakes_at_once_and_resets_behind_the_step(arm7):
    """A refusal while a solver step runs in the worker: the tick neither waits for the step
    (nor for its fallback candidates) but brakes at once; the step's answer is dropped, and
    the solver restarts behind it, in the worker, at the latest braking stop asked for."""
    solver = ResetLog(arm7, seed=6)
    loop, limits = _thread_loop(arm7, solver, budget=0.0)
    refuser = Refuser()
    loop.validators.append(refuser)
    stream = TimedStream(loop, seed=3)
    try:
        stream.measure(arm7.neutral_configuration())
        stream.tick()
        loop.offer_goal('pose', reachable_pose(arm7, 24), '', None, stream.t)
        solver.gate.set()
        for _ in range(2000):               # moving towards the goal
            follower(1)(stream)
            stream.tick()
            if np.max(np.abs(stream.commands[-1].v)) > 0.05:
                break
        assert np.max(np.abs(stream.commands[-1].v)) > 0.05
        solver.gate.clear()
        solver.at_gate.clear()
        for _ in range(200):                # until a step waits at the closed gate
            follower(1)(stream)
            stream.tick()
            if solver.at_gate.wait(0.01):
                break
        assert solver.at_gate.is_set() and loop.stepper.worker.running
        resets, queued = len(solver.resets), loop.stepper.queued_resets
        refuser.on = True
        for k in range(3):                  # three holding ticks, each in its own thread
            follower(1)(stream)
            worker = threading.Thread(target=stream.tick)
            worker.start()
            worker.join(10.0)               # a deadline, so that a wait cannot hang the suite
            assert not worker.is_alive() and not solver.gate.is_set(), \
                f'hold tick {k} waited for the running step'
        assert loop.guard.holds >= 3
        assert loop.stepper.queued_resets == queued + 1, 'one reset queued; later ones replace it'
        assert len(solver.resets) == resets, 'no reset while the step runs'
        speeds = [np.max(np.abs(c.v)) for c in stream.commands[-4:]]
        assert all(b <= a + 1e-12 for a, b in zip(speeds, speeds[1:])), 'braking'
        target = loop.stepper._reset_to.copy()
        solver.gate.set()
        loop.settle()
        assert len(solver.resets) == resets + 1
        thread, q = solver.resets[-1]
        assert thread == loop.stepper.worker._ident and np.array_equal(q, target)
        refuser.on = False
        follower(1)(stream)
        stream.tick()                       # takes the reset: no answer of the old step
        assert loop.estimate is None and loop.faults == 0
    finally:
        solver.gate.set()
        loop.close()
    assert all(np.all(np.isfinite(c.q)) for c in stream.commands)
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
