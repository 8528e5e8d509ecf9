"""The entry points' executor choice (smcik_ros.ros_runner._make_executor) and their
real-time priority (set_realtime_priority)."""
import os
import threading

import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed to run nodes')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from conftest import thread_policy  # noqa: E402
from smcik_ros.errors import SmcIkError  # noqa: E402
from smcik_ros.ros_runner import (  # noqa: E402
    _apply_priority, _make_executor, set_realtime_priority)

try:
    from rclpy.experimental import EventsExecutor  # noqa: F401
    HAVE_EVENTS = True
except ImportError:
    HAVE_EVENTS = False


@pytest.fixture
def context():
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=(os.getpid() % 100) + 100)
    yield ctx
    rclpy.shutdown(context=ctx)


def _node(context, sim_time=False):
    return Node('executor_choice', context=context, parameter_overrides=[
        Parameter('use_sim_time', Parameter.Type.BOOL, sim_time)])


def test_executor_choice(context, monkeypatch):
    logger = rclpy.logging.get_logger('test_ros_runner')
    node = _node(context)
    try:
        monkeypatch.setenv('SMCIK_EXECUTOR', 'single')
        assert isinstance(_make_executor(node, logger), SingleThreadedExecutor)
        monkeypatch.setenv('SMCIK_EXECUTOR', 'auto')
        chosen = _make_executor(node, logger)
        assert isinstance(chosen, SingleThreadedExecutor) != HAVE_EVENTS
        monkeypatch.setenv('SMCIK_EXECUTOR', 'fast')
        with pytest.raises(SmcIkError, match="'auto', 'events' or 'single'.*'fast'"):
            _make_executor(node, logger)
    finally:
        node.destroy_node()


def test_sim_time_keeps_the_wait_set_executor(context, monkeypatch):
    # The events executor's ROS-time timers fire too often under a fast /clock.
    monkeypatch.setenv('SMCIK_EXECUTOR', 'auto')
    node = _node(context, sim_time=True)
    try:
        assert isinstance(_make_executor(node, rclpy.logging.get_logger('t')),
                          SingleThreadedExecutor)
    finally:
        node.destroy_node()


@pytest.mark.skipif(not hasattr(os, 'sched_setscheduler'),
                    reason='SCHED_FIFO is Linux-only (os.sched_setscheduler is missing)')
def test_realtime_priority_goes_to_the_caller_and_the_threads_named_only():
    """thread_priority: the calling thread and the named threads run under SCHED_FIFO, a
    thread they start afterwards under the normal policy; without the privilege nothing
    changes and the message says how to grant it."""
    with pytest.raises(ValueError, match='1-99, got 0'):
        set_realtime_priority(0)
    with pytest.raises(ValueError, match='1-99, got 100'):
        set_realtime_priority(100)
    release = threading.Event()
    bystander = threading.Thread(target=release.wait, args=(30.0,), daemon=True)
    bystander.start()
    seen = {}

    def caller():
        seen['result'] = set_realtime_priority(5, [bystander.native_id])
        seen['caller'] = thread_policy(0)
        child = threading.Thread(target=lambda: seen.setdefault('child', thread_policy(0)))
        child.start()
        child.join(10.0)

    try:
        thread = threading.Thread(target=caller)
        thread.start()
        thread.join(10.0)
        other = thread_policy(bystander.native_id)
    finally:
        release.set()
        bystander.join(10.0)
    applied, problem = seen['result']
    assert seen['child'] == (os.SCHED_OTHER, 0)
    assert thread_policy(0) == (os.SCHED_OTHER, 0)          # the test's own thread is untouched
    if applied:
        assert (applied, problem) == (5, None)
        assert seen['caller'] == (os.SCHED_FIFO, 5)
        assert other == (os.SCHED_FIFO, 5)
    else:
        assert 'real-time priority 5 not set' in problem and 'CAP_SYS_NICE' in problem
        assert seen['caller'] == other == (os.SCHED_OTHER, 0)


def test_a_tick_in_the_first_spin_runs_at_the_priority(context, monkeypatch):
    """_apply_priority raises the calling thread before the executor's first spin: a timer
    due then (the node's first control tick; the wait-set executor of Humble and of
    use_sim_time runs it in that spin) already runs under SCHED_FIFO, and a Python thread
    that callback starts keeps the normal policy; without the privilege the tick runs at
    normal priority and the node is told why."""
    monkeypatch.setenv('SMCIK_EXECUTOR', 'single')
    node = Node('first_spin', context=context)
    node.declare_parameter('thread_priority', 6)
    seen, told = {}, []

    def tick():
        if 'tick' not in seen:
            seen['tick'] = thread_policy(0)
            child = threading.Thread(target=lambda: seen.setdefault('child', thread_policy(0)))
            child.start()
            child.join(10.0)
    node.create_timer(1e-4, tick)
    node.priority_applied = lambda applied, problem: told.append((applied, problem))
    executor = _make_executor(node, rclpy.logging.get_logger('test_ros_runner'))
    executor.add_node(node)
    threading.Event().wait(0.01)            # the timer is due at the first spin
    try:
        thread = threading.Thread(target=_apply_priority, args=(
            node, executor, rclpy.logging.get_logger('test_ros_runner')))
        thread.start()
        thread.join(10.0)
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
    assert 'tick' in seen and len(told) == 1
    assert seen['child'] == (os.SCHED_OTHER, 0)
    applied, problem = told[0]
    if applied:
        assert (applied, problem) == (6, None)
        assert seen['tick'] == (os.SCHED_FIFO, 6)
    else:
        assert 'CAP_SYS_NICE' in problem and seen['tick'] == (os.SCHED_OTHER, 0)
