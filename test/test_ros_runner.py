"""The entry points' executor choice (smcik_ros.ros.runner._make_executor)."""
import os

import pytest

rclpy = pytest.importorskip('rclpy', reason='rclpy is needed to run nodes')

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from smcik_ros.errors import SmcIkError  # noqa: E402
from smcik_ros.ros.runner import _make_executor  # noqa: E402

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
