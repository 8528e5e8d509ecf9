"""Measure smcik_node's start-up on robots with meshes: cold and warm disk cache.

For each robot, sim_arm plays it first (every joint at zero: the URDF's neutral pose, clipped
into the limits), then smcik_node is spawned as a user starts it (``python -m
smcik_ros.node --ros-args --params-file config/arm.yaml -p urdf_path:=... -p base_link:=...
-p tip_links:=[...]``, plus ``floating_base`` for the humanoids) on a private ROS_DOMAIN_ID,
with ``XDG_CACHE_HOME`` pointed at a fresh directory: the first start ('cold') computes the
chain, the sphere covers and the pairs; the second ('warm') reads them from the disk cache.
The kernels are compiled once before the measurements (per install, not per robot: the
numba cache lives beside the package), so neither start pays for that.

Times are seconds from spawning the node: 'model' (its "model from" line: the URDF read,
the chain built), 'collision' (the collision model's summary line), 'ready' (its "ready"
line), 'command' (the first command received here: the node commands the robot), and
'fine' (the first log line saying that fine covers replaced coarse ones computed first: the
chain's links), 'all_fine' (every link's, the swept ones last: the pairs computed again for
them); both empty when the start had nothing to refine, e.g. on a warm cache. The node's log
lines
about covers are listed under the table (what a user sees while it computes). 'rate_hz' is
the command rate received here from the first command until all fine covers are in (or for
10 s when there is nothing to wait for), 'late_ticks' the node's late control ticks
(``~/status``) by then: what computing the fine covers beside the control tick costs it.

    ./smcik bench start_time [--robots talos,arm7,figure] (also romeo, baxter, arm6)
        [--thirdparty /work/thirdparty/example-robot-data] [--fine-timeout 600]

Writes benchmarks/results/start_time.csv and start_time.png. Third-party robots are read
from --thirdparty (example-robot-data), never copied into the repository; the ones whose
files are not there are skipped with a note.
"""

import argparse
import json
import os
from pathlib import Path
import re
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (pins BLAS to one thread)

ROOT = Path(C.ROOT)
sys.path.insert(0, str(ROOT))

from smcik_ros.demo import (child_env, private_domain_id, start_node_process,  # noqa: E402
                            stop_process)

THIRDPARTY = '/work/thirdparty/example-robot-data'
# name: (URDF, relative to --thirdparty when not absolute; base link; tips; floating base)
ROBOTS = {
    'talos': ('robots/talos_data/robots/talos_full_v2.urdf', 'base_link',
              ['gripper_left_base_link', 'gripper_right_base_link', 'left_sole_link',
               'right_sole_link'], True),
    'romeo': ('robots/romeo_description/urdf/romeo.urdf', 'base_link',
              ['l_wrist', 'r_wrist', 'l_sole', 'r_sole'], True),
    'baxter': ('robots/baxter_description/urdf/baxter.urdf', 'base',
               ['left_gripper', 'right_gripper'], False),
    'arm7': (str(ROOT / 'urdf' / 'smcik_arm.urdf'), 'base_link', ['tool0'], False),
    'arm6': (str(ROOT / 'urdf' / 'smcik_arm6.urdf'), 'base_link', ['tool0'], False),
    'figure': (str(ROOT / 'urdf' / 'smcik_figure.urdf'), 'pelvis',
               ['left_hand', 'right_hand', 'left_foot', 'right_foot'], True),
}
FIELDS = ['robot', 'joints', 'cache', 'model_s', 'collision_s', 'ready_s', 'command_s',
          'fine_s', 'all_fine_s', 'spheres', 'rate_hz', 'late_ticks']
# The node's log lines, as rcutils prints them: [LEVEL] [seconds.nanoseconds] [name]: text
LINE = re.compile(r'^\[(\w+)\] \[(\d+\.\d+)\] \[smcik_node\]: (.*)$')
PHASES = {'model_s': 'model from ', 'collision_s': 'collision model: ', 'ready_s': 'ready: ',
          'fine_s': 'fine covers ', 'all_fine_s': 'self-collision pairs of the fine covers'}
# The node's notes of a start with coarse covers (everywhere, or on the swept links).
COARSE_START = ('starts with coarse covers', 'keep coarse covers')


def log_times(path, spawned):
    """Return ({phase: seconds after ``spawned``}, [cover lines]) of a node log."""
    times, covers = {}, []
    for line in Path(path).read_text(errors='replace').splitlines():
        match = LINE.match(line)
        if not match:
            continue
        stamp, text = float(match.group(2)) - spawned, match.group(3)
        for key, start in PHASES.items():
            # every link fine: the pairs computed for a model no longer on coarse covers
            # (each batch of swept links has its own pairs line, the model still coarse)
            done = key != 'all_fine_s' or 'coarse covers' not in text
            if text.startswith(start) and key not in times and done:
                times[key] = stamp
        if 'cover' in text:
            covers.append(f'{stamp:7.1f} s  {text[:160]}')
    return times, covers


def spheres_of(path):
    """Return the sphere count of the last collision model summary in the log ('' if none)."""
    found = re.findall(r'collision model: (\d+) spheres', Path(path).read_text(errors='replace'))
    return int(found[-1]) if found else ''


def start_once(spec, cache, log_dir, args, node_ctx):
    """Start sim_arm and smcik_node once with XDG_CACHE_HOME=cache; return the row."""
    urdf, base, tips, floating = spec
    domain = private_domain_id(offset=31)
    env = child_env(domain, log_dir)
    env['XDG_CACHE_HOME'] = cache
    model = [f'urdf_path:={urdf}', f'base_link:={base}', f'tip_links:=[{",".join(tips)}]']
    node_params = [f'smcik_node:{p}' for p in model]
    if floating:
        node_params.append('smcik_node:floating_base:=true')
    received = node_ctx(domain)
    sim = start_node_process('smcik_ros.sim_arm', env, log_dir / 'sim_arm.log',
                             parameters=[f'sim_arm:{p}' for p in model])
    node_log = log_dir / 'smcik_node.log'
    try:
        if not received.wait(lambda r: r.joint_states, 60.0):
            raise RuntimeError('sim_arm did not publish joint_states:\n'
                               + (log_dir / 'sim_arm.log').read_text())
        spawned = time.time()
        node = start_node_process('smcik_ros.node', env, node_log, parameters=node_params)
        try:
            got = received.wait(lambda r: r.first_command or node.poll() is not None,
                                args.timeout)
            if not got or received.first_command is None:
                raise RuntimeError(f'smcik_node sent no command within {args.timeout} s:\n'
                                   + node_log.read_text()[-4000:])
            command = received.first_command - spawned
            deadline = time.monotonic() + args.fine_timeout
            received.wait(lambda r: False, 10.0)
            while time.monotonic() < deadline and node.poll() is None:
                times, _ = log_times(node_log, spawned)
                text = node_log.read_text(errors='replace')
                if 'all_fine_s' in times or not any(
                        note in text for note in COARSE_START):
                    break
                received.wait(lambda r: False, 1.0)
            span = time.time() - received.first_command
            rate = (received.commands - 1) / span if span > 0 else float('nan')
            late = received.status.get('late_ticks', '')
        finally:
            stop_process(node, signal.SIGINT)
    finally:
        stop_process(sim, signal.SIGINT)
        received.close()
    times, covers = log_times(node_log, spawned)
    row = dict(times, command_s=command, spheres=spheres_of(node_log), rate_hz=rate,
               late_ticks=late)
    return row, covers


class Received:
    """joint_states and the first command on ``domain`` (an rclpy context of its own)."""

    def __init__(self, domain):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        self._rclpy = rclpy
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = Node('smcik_start_time', context=self.context)
        self.joint_states = False
        self.first_command = None
        self.commands, self.status = 0, {}
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(JointState, 'joint_states', self._state, 10)
        self.node.create_subscription(JointState, 'joint_commands', self._command, reliable)
        self.node.create_subscription(String, '/smcik_node/status', self._status, reliable)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def _state(self, msg):
        self.joint_states = True

    def _command(self, msg):
        if self.first_command is None:
            self.first_command = time.time()
        self.commands += 1

    def _status(self, msg):
        self.status = json.loads(msg.data)

    def wait(self, predicate, timeout):
        """Spin until ``predicate(self)`` or ``timeout`` [s]; return whether it held."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.05)
            if predicate(self):
                return True
        return False

    def close(self):
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)


def warm_kernels():
    """Compile the kernels once (the numba cache beside the package), outside the timings."""
    from smcik_ros.model import Chain
    from smcik_ros.warmup import warm_up

    warm_up(Chain.from_urdf(str(ROOT / 'urdf' / 'smcik_arm.urdf'), 'base_link', 'tool0',
                            cache_dir=''), lambda text: print('kernels:', text))


def plot(rows):
    plt = C.pyplot()
    names = list(dict.fromkeys(r['robot'] for r in rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for k, cache in enumerate(('cold', 'warm')):
        values = [next((r.get('command_s', 0.0) for r in rows
                        if r['robot'] == n and r['cache'] == cache), 0.0) for n in names]
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        ax.bar(xs, values, width, label=f'{cache} cache: first command')
        fine = [next((r.get('fine_s') for r in rows if r['robot'] == n
                      and r['cache'] == cache and r.get('fine_s')), None) for n in names]
        ax.scatter([x for x, f in zip(xs, fine) if f], [f for f in fine if f], marker='_',
                   s=300, color='k', label='fine covers in' if k == 0 else None)
    ax.axhline(60.0, color='r', lw=0.8, ls='--', label='one minute')
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel('seconds from spawning smcik_node')
    ax.set_title('smcik_node start-up (sim_arm playing the robot)')
    ax.legend(fontsize=8)
    fig.tight_layout()
    return C.save_figure(fig, 'start_time')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--robots', default='talos,arm7,figure',
                        help=f'comma-separated, of {", ".join(ROBOTS)}')
    parser.add_argument('--thirdparty', default=THIRDPARTY,
                        help='example-robot-data checkout (read only)')
    parser.add_argument('--timeout', type=float, default=300.0,
                        help='longest wait for the first command [s]')
    parser.add_argument('--fine-timeout', type=float, default=600.0,
                        help='longest wait for the fine covers after the first command [s]')
    parser.add_argument('--keep', action='store_true', help='keep the logs and caches')
    args = parser.parse_args(argv)
    print(C.machine())
    warm_kernels()
    rows, notes = [], []
    for name in args.robots.split(','):
        urdf, base, tips, floating = ROBOTS[name]
        if not os.path.isabs(urdf):
            urdf = os.path.join(args.thirdparty, urdf)
        if not os.path.isfile(urdf):
            notes.append(f'{name}: {urdf} not found: skipped')
            continue
        from smcik_ros.model import Chain
        joints = Chain.from_urdf(urdf, base, tips, cache_dir='').n
        scratch = Path(tempfile.mkdtemp(prefix=f'smcik_start_{name}_'))
        for cache in ('cold', 'warm'):
            log_dir = scratch / cache
            log_dir.mkdir()
            row, covers = start_once((urdf, base, tips, floating), str(scratch / 'xdg'),
                                     log_dir, args, Received)
            rows.append(dict(row, robot=name, joints=joints, cache=cache))
            print(f'{name} {cache}: ' + ', '.join(f'{k} {C.fmt(v)}' for k, v in row.items()),
                  flush=True)
            notes += [f'{name} {cache}: {line}' for line in covers]
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    C.print_table(rows, FIELDS, title='smcik_node start-up [s from spawning the node] '
                  f'({C.machine()})')
    print('\n'.join(notes))
    print(C.write_csv('start_time', rows, FIELDS))
    print(plot(rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
