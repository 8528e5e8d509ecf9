"""The entry points' executor choice (smcik_ros.ros_runner._make_executor) and their
real-time priority (set_realtime_priority)."""
import os
import threading

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter

from conftest import thread_policy
from smcik_ros.errors import SmcIkError
from smcik_ros.ros_runner import _make_executor, set_realtime_priority

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
