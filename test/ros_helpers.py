"""Helpers of the graph-level tests: child processes and a probe node spinning in a thread.

Child nodes run with the same venv interpreter (``sys.executable``) and the parent's
environment, changed only by ROS_DOMAIN_ID / ROS_LOG_DIR (see smcik_ros.demo.child_env), so
the wheels' ``.pth`` bootstrap stays consistent.
"""

import threading
import time

import numpy as np
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from smcik_ros.demo import REPO_ROOT, child_env, start_node_process, stop_process  # noqa: F401

__all__ = ['REPO_ROOT', 'child_env', 'start_node_process', 'stop_process', 'wait_for',
           'Probe', 'read_log', 'wait_for_log']


def wait_for(predicate, timeout, interval=0.01):
    """Poll ``predicate`` until it is truthy or ``timeout`` [s] passes; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def read_log(path):
    """Return the text a child process wrote so far."""
    with open(path, errors='replace') as handle:
        return handle.read()


def wait_for_log(path, text, timeout=10.0, start=0):
    """Wait until ``text`` appears in the log at ``path`` after offset ``start``; return it."""
    found = wait_for(lambda: text in read_log(path)[start:], timeout, interval=0.05)
    return found


class Probe(Node):
    """Test-side node: records commands, joint_states, markers and status in lists."""

    def __init__(self, context, namespace_node='/smcik_node'):
        super().__init__('smcik_test_probe', context=context)
        self.lock = threading.Lock()
        self.commands = []       # (monotonic time, JointState)
        self.joint_states = []
        self.markers = []
        self.status = []
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(JointState, 'joint_commands',
                                 lambda m: self._record(self.commands, m), reliable)
        self.create_subscription(JointState, 'joint_states',
                                 lambda m: self._record(self.joint_states, m), reliable)
        self.create_subscription(MarkerArray, f'{namespace_node}/particles',
                                 lambda m: self._record(self.markers, m), reliable)
        self.create_subscription(String, f'{namespace_node}/status',
                                 lambda m: self._record(self.status, m), reliable)
        self._spin_executor = SingleThreadedExecutor(context=context)
        self._spin_executor.add_node(self)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        try:
            self._spin_executor.spin()
        except Exception:  # the context was shut down under us at teardown
            pass

    def _record(self, store, msg):
        with self.lock:
            store.append((time.monotonic(), msg))

    def publisher(self, msg_type, topic, depth=10):
        """Return a reliable publisher (volatile, like RViz tools)."""
        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        return self.create_publisher(msg_type, topic, qos)

    def wait_matched(self, publisher, timeout=10.0):
        """Wait until ``publisher`` has a subscriber; return whether it has."""
        return wait_for(lambda: publisher.get_subscription_count() > 0, timeout)

    def snapshot(self, store, since=0.0):
        with self.lock:
            return [m for t, m in store if t >= since]

    def last_command(self):
        with self.lock:
            return self.commands[-1][1] if self.commands else None

    def command_positions(self, since=0.0):
        """Return (times (K,), positions (K, n)) of commands received after ``since``."""
        with self.lock:
            items = [(t, m.position) for t, m in self.commands if t >= since]
        if not items:
            return np.zeros(0), np.zeros((0, 0))
        return np.array([t for t, _ in items]), np.array([list(p) for _, p in items])

    def close(self):
        self._spin_executor.shutdown(timeout_sec=1.0)
        self.destroy_node()
