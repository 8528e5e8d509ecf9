"""The demo (``./smcik demo``): smcik_node + sim_arm over DDS, a sequence of clicked goals, a PNG.

Starts ``smcik_node`` and ``sim_arm`` as separate processes on a private ROS_DOMAIN_ID with
config/arm.yaml, then sends goals the way a user clicking in RViz would: PointStamped on
``target_point`` (Publish Point) and PoseStamped on ``target_pose``. Goals are reachable by
construction: FK of random in-limit configurations from a fixed seed. For each goal one line
reports the time until the measured arm (FK of /joint_states) is within tolerance and the
final errors. At the end a PNG of the tool path and the joint trajectories is written.

Exit status: 0 when every goal was reached within its timeout, 1 otherwise.

``./smcik demo --figure`` runs the whole-figure humanoid instead (urdf/smcik_figure.urdf,
config/figure.yaml): both hands reach while the feet stay planted and the centre of mass stays
over them; the sequence, its checks and its picture are in ``smcik_ros.figure_demo``.
"""

import argparse
import os
from pathlib import Path
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

__all__ = ['REPO_ROOT', 'private_domain_id', 'child_env', 'start_node_process',
           'stop_process', 'make_goals', 'main']

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PARAMS = REPO_ROOT / 'config' / 'arm.yaml'
DEFAULT_URDF = REPO_ROOT / 'urdf' / 'smcik_arm.urdf'


# ---------------------------------------------------------------------- child processes
def private_domain_id(offset=0):
    """Return a ROS_DOMAIN_ID in 1..100 derived from this process id (isolates runs)."""
    return 1 + (os.getpid() + offset) % 100


def child_env(domain_id, log_dir):
    """Return this process's environment with only ROS_DOMAIN_ID and ROS_LOG_DIR changed.

    The rclpy wheels' .pth bootstrap sets LD_LIBRARY_PATH once; children must inherit it
    unchanged and run the same interpreter (sys.executable).
    """
    env = dict(os.environ)
    env['ROS_DOMAIN_ID'] = str(int(domain_id))
    env['ROS_LOG_DIR'] = str(log_dir)
    return env


def start_node_process(module, env, log_path, params_file=DEFAULT_PARAMS, parameters=()):
    """Start ``python -m module --ros-args --params-file ... -p k:=v`` writing to ``log_path``.

    ``parameters``: 'name:=value' strings (use 'node_name:name:=value' to beat the YAML).
    Returns the Popen object with ``log_path`` set on it.
    """
    args = [sys.executable, '-m', module, '--ros-args']
    if params_file is not None:
        args += ['--params-file', str(params_file)]
    for item in parameters:
        args += ['-p', item]
    log = open(log_path, 'w')
    try:
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()
    proc.log_path = Path(log_path)
    return proc


def stop_process(proc, sig=signal.SIGINT, timeout=10.0):
    """Send ``sig``, wait up to ``timeout`` [s], then kill; return the exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5.0)
    return proc.returncode


# ---------------------------------------------------------------------- goals
def make_goals(chain, count, seed=7, min_height=0.1, margin=0.1):
    """Return ``count`` reachable goals [(kind, (4, 4) pose)], kind 'point' or 'pose' alternating.

    Poses are FK of random configurations drawn in the inner (1 - 2 margin) share of every
    joint range (seeded), keeping tool positions at least ``min_height`` [m] above the base.
    """
    rng = np.random.default_rng(seed)
    span = chain.upper - chain.lower
    lower, upper = chain.lower + margin * span, chain.upper - margin * span
    goals = []
    while len(goals) < count:
        pose = chain.fk(rng.uniform(lower, upper))
        if pose[2, 3] < min_height:
            continue
        goals.append(('point' if len(goals) % 2 == 0 else 'pose', pose))
    return goals


# ---------------------------------------------------------------------- the demo
def _run(args, chain, node, out_dir):
    from geometry_msgs.msg import PointStamped, PoseStamped
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from .ros.conversions import joint_state_to_positions, matrix_to_pose

    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    measured = []   # (t, q)
    last_q = np.full(chain.n, np.nan)

    def on_joint_states(msg):
        nonlocal last_q
        q, _, _ = joint_state_to_positions(msg, chain.joint_names, last_q)
        last_q = q
        if np.all(np.isfinite(q)):
            measured.append((time.monotonic(), q))

    node.create_subscription(JointState, 'joint_states', on_joint_states, reliable)
    point_pub = node.create_publisher(PointStamped, 'target_point', reliable)
    pose_pub = node.create_publisher(PoseStamped, 'target_pose', reliable)
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)

    def spin_until(predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
            if predicate():
                return True
        return False

    print('waiting for smcik_node and sim_arm ...', flush=True)
    if not spin_until(lambda: point_pub.get_subscription_count() > 0
                      and pose_pub.get_subscription_count() > 0 and measured, 30.0):
        print('smcik_node / sim_arm did not come up within 30 s', file=sys.stderr)
        return False, [], measured
    goals = make_goals(chain, args.goals, seed=args.seed)
    results = []
    t0 = time.monotonic()
    for k, (kind, pose) in enumerate(goals, start=1):
        stamp = node.get_clock().now().to_msg()
        if kind == 'point':
            msg = PointStamped()
            msg.point.x, msg.point.y, msg.point.z = (float(v) for v in pose[:3, 3])
            publisher = point_pub
        else:
            msg = PoseStamped()
            msg.pose = matrix_to_pose(pose)
            publisher = pose_pub
        msg.header.stamp, msg.header.frame_id = stamp, chain.base_link
        sent = time.monotonic()
        publisher.publish(msg)

        def errors():
            tip = chain.fk(measured[-1][1])
            pos = float(np.linalg.norm(tip[:3, 3] - pose[:3, 3]))
            if kind == 'point':
                return pos, 0.0
            cos = 0.5 * (np.trace(tip[:3, :3].T @ pose[:3, :3]) - 1.0)
            return pos, float(np.arccos(np.clip(cos, -1.0, 1.0)))

        def reached():
            pos, ori = errors()
            return pos <= args.position_tolerance and ori <= args.orientation_tolerance

        ok = spin_until(lambda: measured[-1][0] > sent and reached(), args.timeout)
        elapsed = time.monotonic() - sent
        spin_until(lambda: False, args.settle)   # let the arm settle for the plot
        pos, ori = errors()
        where = ', '.join(f'{v:+.3f}' for v in pose[:3, 3])
        what = (f'reached in {elapsed:5.2f} s' if ok
                else f'NOT reached within {args.timeout:g} s')
        ori_text = f', orientation error {ori:.4f} rad' if kind == 'pose' else ''
        print(f'goal {k}/{len(goals)} {kind:<5} ({where}) m: {what}; position error '
              f'{pos * 1e3:.2f} mm{ori_text}', flush=True)
        results.append({'kind': kind, 'pose': pose, 'sent': sent - t0, 'ok': ok,
                        'time': elapsed, 'position_error': pos, 'orientation_error': ori})
    return all(r['ok'] for r in results), results, measured


def _plot(chain, results, measured, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    t = np.array([m[0] for m in measured])
    q = np.array([m[1] for m in measured])
    t = t - t[0] if len(t) else t
    tips = chain.fk(q)[:, :3, 3] if len(q) else np.zeros((0, 3))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for ax, (i, j), label in ((axes[0], (0, 1), 'xy'), (axes[1], (0, 2), 'xz')):
        ax.plot(tips[:, i], tips[:, j], lw=1.2, label='tool path (measured)')
        for k, r in enumerate(results, start=1):
            p = r['pose'][:3, 3]
            ax.plot(p[i], p[j], 'o' if r['kind'] == 'point' else 's',
                    color='tab:green' if r['ok'] else 'tab:red', ms=7)
            ax.annotate(str(k), (p[i], p[j]), textcoords='offset points', xytext=(4, 4))
        ax.set_xlabel(f'{label[0]} [m]')
        ax.set_ylabel(f'{label[1]} [m]')
        ax.set_aspect('equal', adjustable='datalim')
        ax.set_title(f'tool0 path, {label} projection (o point goal, s pose goal)')
        ax.grid(True, alpha=0.3)
    for j, name in enumerate(chain.joint_names):
        axes[2].plot(t, q[:, j] if len(q) else [], lw=1.0, label=name)
    for r in results:
        axes[2].axvline(r['sent'], color='grey', lw=0.6, ls='--')
    axes[2].set_xlabel('time [s]')
    axes[2].set_ylabel('joint position [rad]')
    axes[2].set_title('measured joint trajectories (dashed: goal sent)')
    axes[2].legend(fontsize=7, loc='upper right')
    axes[2].grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _session(args, params_file, node_params, body):
    """Start smcik_node and sim_arm on a private domain, run ``body(node)`` with a demo node,
    stop them; return (body's result or None, ok: every process exited 0)."""
    domain_id = private_domain_id()
    os.environ['ROS_DOMAIN_ID'] = str(domain_id)
    import rclpy
    from rclpy.node import Node

    log_dir = Path(tempfile.mkdtemp(prefix='smcik_demo_'))
    env = child_env(domain_id, log_dir)
    node_params = list(node_params)
    if args.solver:
        node_params.append(f'solver:={args.solver}')
    node_params = [f'smcik_node:{item}' for item in node_params + args.param]
    print(f'ROS_DOMAIN_ID={domain_id}; logs of the nodes in {log_dir}', flush=True)
    procs = [start_node_process('smcik_ros.node', env, log_dir / 'smcik_node.log',
                                params_file=params_file, parameters=node_params),
             start_node_process('smcik_ros.sim_arm', env, log_dir / 'sim_arm.log',
                                params_file=params_file)]
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node('smcik_demo', context=context)
    result = None
    try:
        result = body(node)
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
    finally:
        codes = [stop_process(p) for p in procs]
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    ok = True
    for proc, code in zip(procs, codes):
        if code != 0:
            ok = False
            print(f'{proc.args[2]} exited with {code}; its log ({proc.log_path}):\n'
                  + proc.log_path.read_text()[-3000:], file=sys.stderr)
    return result, ok


def _arm(args, out_dir):
    from .model import Chain

    chain = Chain.from_urdf(str(DEFAULT_URDF), 'base_link', 'tool0')
    result, exited = _session(args, DEFAULT_PARAMS, [],
                              lambda node: _run(args, chain, node, out_dir))
    ok, results, measured = result or (False, [], [])
    if measured:
        png = out_dir / 'demo.png'
        _plot(chain, results, measured, png)
        print(f'plot: {png}')
    reached = sum(r['ok'] for r in results)
    ok = ok and exited
    print(f'{reached}/{len(results)} goals reached' + ('' if ok else ' -- FAILED'))
    return 0 if ok and results else 1


def _figure(args, out_dir):
    from . import figure_demo

    figure = figure_demo.Figure()
    result, exited = _session(args, figure_demo.PARAMS, figure_demo.node_parameters(),
                              lambda node: figure_demo.run(node, args, figure))
    ok, report = result or (False, {'goals': [], 'check': None, 'failures': ['interrupted'],
                                    'figure': figure})
    if report['goals']:
        png = out_dir / 'figure_demo.png'
        figure_demo.plot(report, png)
        print(f'picture: {png}')
    ok = ok and exited
    reached = sum(r['ok'] for r in report['goals'])
    print(f'{reached}/{len(report["goals"])} goals reached' + ('' if ok else ' -- FAILED: '
                                                              + '; '.join(report['failures'])))
    return 0 if ok else 1


def main(argv=None):
    """Run the demo; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--figure', action='store_true',
                        help='the whole-figure humanoid instead of the arm: both hands reach, '
                             'the feet stay planted, the centre of mass over them '
                             '(smcik_ros/figure_demo.py)')
    parser.add_argument('--goals', type=int, default=6,
                        help='number of goals of the arm demo (default 6)')
    parser.add_argument('--solver', default=None, help='solver name (default: the config file)')
    parser.add_argument('--out', default=str(REPO_ROOT / 'out'), help='output directory')
    parser.add_argument('--seed', type=int, default=7, help='seed of the arm goal sequence')
    parser.add_argument('-p', '--param', action='append', default=[], metavar='NAME:=VALUE',
                        help='extra smcik_node parameter, e.g. -p smc.num_particles:=200')
    parser.add_argument('--timeout', type=float, default=15.0, help='per-goal timeout [s]')
    parser.add_argument('--startup-timeout', type=float, default=90.0,
                        help='figure: wait this long for the nodes [s] (first start compiles)')
    parser.add_argument('--settle', type=float, default=0.5,
                        help='time [s] kept after each goal is reached')
    parser.add_argument('--position-tolerance', type=float, default=1e-3, help='[m]')
    parser.add_argument('--orientation-tolerance', type=float, default=1e-2, help='[rad]')
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    return _figure(args, out_dir) if args.figure else _arm(args, out_dir)


if __name__ == '__main__':
    sys.exit(main())
