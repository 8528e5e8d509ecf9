"""Helpers of the graph-level tests: child processes and a probe node spinning in a thread.

Child nodes run with the same venv interpreter (``sys.executable``) and the parent's
environment, changed only by ROS_DOMAIN_ID / ROS_LOG_DIR (see smcik_ros.demo.child_env), so
the wheels' ``.pth`` bootstrap stays consistent.
"""

import contextlib
import threading
import time

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter_client import AsyncParameterClient
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from visualization_msgs.msg import MarkerArray

from smcik_ros.demo import REPO_ROOT, child_env, start_node_process, stop_process  # noqa: F401

__all__ = ['REPO_ROOT', 'child_env', 'start_node_process', 'stop_process', 'wait_for',
           'Probe', 'ArmPlayer', 'read_log', 'wait_for_log', 'stream_ratios', 'get_parameters',
           'call_parameters']


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
        self.collision = []      # ~/collision MarkerArrays
        self.status = []
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        # 10 s of a 100 Hz stream: the limits are judged between consecutive commands, and
        # with depth 100 a process busy elsewhere (the GIL) lost commands, each gap read
        # as an acceleration of up to 1.5x the limit (black box, Unitree H1).
        stream = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(JointState, 'joint_commands',
                                 lambda m: self._record(self.commands, m), stream)
        self.create_subscription(JointState, 'joint_states',
                                 lambda m: self._record(self.joint_states, m), stream)
        self.create_subscription(MarkerArray, f'{namespace_node}/particles',
                                 lambda m: self._record(self.markers, m), reliable)
        self.create_subscription(MarkerArray, f'{namespace_node}/collision',
                                 lambda m: self._record(self.collision, m), reliable)
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

    def command_stream(self, since=0.0):
        """Return (receive times (K,), header stamps (K,) [ns, int64], positions (K, n)) of
        the commands received after ``since`` (monotonic). Stamps stay integers: as float
        seconds since 1970 they would carry 0.2 us of rounding, 1e-3 of an acceleration."""
        with self.lock:
            items = [(t, m) for t, m in self.commands if t >= since]
        if not items:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, 0))
        return (np.array([t for t, _ in items]),
                np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
                          for _, m in items], dtype=np.int64),
                np.array([list(m.position) for _, m in items]))

    def close(self):
        self._spin_executor.shutdown(timeout_sec=1.0)
        self.destroy_node()


@contextlib.contextmanager
def module_ros_env(tmp_path_factory, domain_id):
    """Set ROS_DOMAIN_ID / ROS_LOG_DIR for a test module (before rclpy.init) and restore them
    after; yields (environment for child processes, log directory)."""
    log_dir = tmp_path_factory.mktemp('ros_logs')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv('ROS_DOMAIN_ID', str(domain_id))
        patch.setenv('ROS_LOG_DIR', str(log_dir))
        yield child_env(domain_id, log_dir), log_dir


@contextlib.contextmanager
def probe_in_own_context(domain_id):
    """Yield a Probe in its own rclpy context on ``domain_id``; shut both down after."""
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain_id)
    node = Probe(ctx)
    try:
        yield node
    finally:
        node.close()
        rclpy.try_shutdown(context=ctx)


def dds_fixtures(domain_id):
    """Return the module-scoped fixtures (ros_env, context, probe) of a DDS test module on
    ``domain_id``: bind them in the module, ``ros_env, context, probe = dds_fixtures(ID)``.

    ros_env: ``module_ros_env``'s (child environment, log directory); context: an rclpy
    context on the domain; probe: a ``Probe`` in its own context."""
    @pytest.fixture(scope='module')
    def ros_env(tmp_path_factory):
        with module_ros_env(tmp_path_factory, domain_id) as env:
            yield env

    @pytest.fixture(scope='module')
    def context(ros_env):
        ctx = rclpy.Context()
        rclpy.init(context=ctx, domain_id=domain_id)
        yield ctx
        rclpy.try_shutdown(context=ctx)

    @pytest.fixture(scope='module')
    def probe(ros_env):
        with probe_in_own_context(domain_id) as node:
            yield node

    return ros_env, context, probe


def stream_ratios(stamps, positions, velocity, acceleration):
    """Return (max |v|/vmax, max |a|/amax) of a command stream, the way a judge computes them:
    v_k = (q_k - q_{k-1}) / (t_k - t_{k-1}), a_k = (v_k - v_{k-1}) / (t_k - t_{k-1}), from
    the header stamps (K,) [ns, integers] and positions (K, n); the stream starts at rest."""
    stamps = np.asarray(stamps, dtype=np.int64)
    positions = np.asarray(positions, float)
    if len(stamps) < 2:
        return 0.0, 0.0
    dt = np.diff(stamps) * 1e-9
    v = np.diff(positions, axis=0) / dt[:, None]
    v_prev = np.vstack([np.zeros(positions.shape[1]), v[:-1]])
    a = (v - v_prev) / dt[:, None]
    return (float(np.max(np.abs(v) / velocity)), float(np.max(np.abs(a) / acceleration)))


def resync_cuts(probe, since, positions):
    """Return the indices [0, ..., K] that cut the K commands received after ``since`` (their
    ``positions`` (K, n), ``Probe.command_stream``'s) at the resyncs: after joint_states went
    stale the node restarts the stream from the measurement at rest, by design, a command at
    rest that jumps. Each part starts at rest: judge the limits part by part."""
    with probe.lock:
        velocities = [m.velocity for t, m in probe.commands if t >= since]
    positions = np.asarray(positions, float)
    at_rest = np.array([not np.any(v) for v in velocities[:len(positions)]], dtype=bool)
    jumps = np.r_[False, np.any(positions[1:] != positions[:-1], axis=1)]
    return [0] + [int(k) for k in np.flatnonzero(at_rest & jumps) if k > 0] + [len(positions)]


def call_parameters(node, target, request, timeout=10.0, attempts=3):
    """Return the answer to ``request(client)`` (a request to ``target``'s parameter
    services, returning its Future), through one AsyncParameterClient per node and target
    (a new client per call would repeat the discovery every time). A request not answered
    within ``timeout`` [s] is sent again, ``attempts`` times in all: Fast DDS can drop a
    reply that the server sends before it has discovered the client's reply reader
    (``wait_for_services`` sees the request side only). A lost reply failed a test once on
    a loaded machine, with the request done in the node's log. Every parameter request is
    idempotent: sent twice, it does what it does once."""
    clients = node.__dict__.setdefault('_parameter_clients', {})
    if target not in clients:
        clients[target] = AsyncParameterClient(node, target)
    client = clients[target]
    if not client.wait_for_services(timeout_sec=timeout):
        raise AssertionError(f'{target} offers no parameter services within {timeout} s')
    for _ in range(attempts):
        future = request(client)
        if wait_for(future.done, timeout):
            return future.result()
    raise AssertionError(f'{target} answered none of {attempts} parameter requests '
                         f'within {timeout} s each')


def get_parameters(node, target, names, timeout=10.0):
    """Return {name: value} of ``target``'s parameters through its parameter services."""
    answer = call_parameters(node, target, lambda client: client.get_parameters(names),
                             timeout)
    values = answer.values
    out = {}
    for name, value in zip(names, values):
        kind = value.type
        out[name] = {1: value.bool_value, 2: value.integer_value, 3: value.double_value,
                     4: value.string_value}.get(kind)
    return out


class ArmPlayer:
    """Plays the arm on ``joint_states`` from the test (no sim_arm), at ``rate_hz``.

    Modes: 'silent' (publishes nothing), 'fixed' (publishes ``q``), 'follow' (publishes the
    newest command received, i.e. an arm that tracks with the transport delay; ``q`` until
    the first command). ``inject(positions, names)`` publishes one message as given (NaN,
    missing names). ``published`` records (monotonic time, q) of every complete message and
    ``stamps`` their header stamps [ns] (the probe's clock: the node's clock on this machine).
    """

    def __init__(self, probe, joint_names, q, rate_hz=100.0, stamped=True):
        from sensor_msgs.msg import JointState
        self._msg_type = JointState
        self.probe = probe
        self.joint_names = list(joint_names)
        self.lock = threading.Lock()
        self.mode = 'silent'
        self.q = np.asarray(q, dtype=float)
        self.stamped = stamped
        self.published = []
        self.stamps = []        # header stamps [ns] of the messages in ``published``
        self.publisher = probe.publisher(JointState, 'joint_states')
        self.timer = probe.create_timer(1.0 / rate_hz, self._on_timer)

    def set(self, mode, q=None):
        with self.lock:
            self.mode = mode
            if q is not None:
                self.q = np.asarray(q, dtype=float)

    def latest(self, before=None):
        """Return the newest q published (before monotonic time ``before``), or None."""
        with self.lock:
            items = [(t, q) for t, q in self.published if before is None or t <= before]
        return items[-1][1] if items else None

    def _message(self, names, positions):
        msg = self._msg_type(name=list(names), position=[float(p) for p in positions])
        if self.stamped:
            msg.header.stamp = self.probe.get_clock().now().to_msg()
        return msg

    def inject(self, positions, names=None):
        msg = self._message(names or self.joint_names, positions)
        self.publisher.publish(msg)

    def _on_timer(self):
        with self.lock:
            mode, q = self.mode, self.q
        if mode == 'silent':
            return
        if mode == 'follow':
            last = self.probe.last_command()
            if last is not None:
                q = np.array(last.position, dtype=float)
        msg = self._message(self.joint_names, q)
        with self.lock:
            self.published.append((time.monotonic(), np.array(q)))
            self.stamps.append(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
        self.publisher.publish(msg)
