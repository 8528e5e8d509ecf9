"""Measure smcik_node over DDS: goal-to-command latency, achieved timer rate, CPU share.

Starts smcik_node (config/arm.yaml: rate_hz 100, smc with 100 particles, markers at 10 Hz)
and, unless --no-sim, sim_arm, as separate processes on a private ROS_DOMAIN_ID. Then:

0. start-up: sim_arm runs first; the time from spawning smcik_node until its first command's
   header stamp (imports, URDF, collision model, kernels from the on-disk cache, discovery,
   first tick), with when the node logged its model and "ready";
1. latency: for --goals nearby pose goals (FK of the measured configuration plus a random
   joint offset), the time from publishing the goal until the first joint command whose FK is
   within 1 mm / 0.01 rad of it (receive times in this process);
2. rate and CPU: over --window seconds while goals keep coming every 2 s (--goal-period; 0:
   none, the last goal held: a settled arm at rest), the command rate
   (from the commands' header stamps, i.e. the node's timer, and from receive times) and the
   node process's CPU share of one core (utime + stime from /proc/<pid>/stat).

Prints a table, writes benchmarks/results/node_latency.csv and node_latency.png; exits 1 when
a target is missed: the rate >= 99 % of rate_hz; at rate_hz 100 the CPU share <= 15 % at rest
(--goal-period 0) and <= 30 % with goals coming.
--profile runs the node under cProfile (SMCIK_PROFILE) and prints where its time goes.

Collision scenario (issue 9): ``--obstacles N`` publishes N spheres (5 cm radius, seeded,
around the arm's workspace and clear of its start configuration) on ``obstacles`` before the
measurements; self-collision is on by default (config/arm.yaml, the demo arm's SRDF). The
table adds the scene size, the self-collision pairs and how often the validator refused.
``--urdf PATH --base LINK --tip LINK`` (with ``-p package_paths:=[...]``,
``-p srdf_path:=...`` where they are not found beside the URDF) runs another robot, e.g.
MoveIt's Panda; sim_arm plays the same URDF and chain.

``--floor`` then stops the node and runs benchmarks/middleware_floor.py in its place for
another window: the same topics, QoS, command bytes, timers and executor holding the last
command, without the IK. Its CPU share is what the middleware alone costs on this host (the
at-rest target leaves the node's own work the difference); its rate is what the host's
timers hold without the node's work.

    ./smcik bench node_latency [--window 20] [--goals 8] [--no-sim] [--profile]
        [--obstacles 10] [--floor] [--csv node_latency_collision.csv]
"""

import argparse
import csv
import json
import math
import os
from pathlib import Path
import pstats
import re
import signal
import sys
import tempfile
import time

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from smcik_ros.demo import child_env, private_domain_id, start_node_process, stop_process  # noqa

RESULTS = ROOT / 'benchmarks' / 'results'
# Issue 10's targets: the command rate held at 99 % of rate_hz (>= 99 Hz at 100, >= 495 Hz
# at 500). Issue 31's: the node's CPU share at rest (a held goal, --goal-period 0) <= 15 % of
# a core at 100 Hz with markers, with standard messages (issue 10 asked 10 % of the node that
# wrote and read CDR bytes itself). With goals coming (every 2 s) the older bound of 30 %.
TARGET_RATE_SHARE = 0.99
TARGET_CPU_REST = 0.15
TARGET_CPU_GOALS = 0.30


def cpu_seconds(pid):
    """Return utime + stime [s] of process ``pid`` from /proc/<pid>/stat."""
    with open(f'/proc/{pid}/stat') as handle:
        fields = handle.read().rsplit(')', 1)[1].split()
    ticks = os.sysconf('SC_CLK_TCK')
    return (int(fields[11]) + int(fields[12])) / ticks   # fields 14, 15 of stat(5)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--window', type=float, default=20.0, help='rate/CPU window [s]')
    parser.add_argument('--goals', type=int, default=8, help='latency goals')
    parser.add_argument('--no-sim', action='store_true', help='node only (no sim_arm)')
    parser.add_argument('--profile', action='store_true', help='cProfile the node')
    parser.add_argument('-p', '--param', action='append', default=[], metavar='NAME:=VALUE',
                        help='extra smcik_node parameter')
    parser.add_argument('--env', action='append', default=[], metavar='KEY=VALUE',
                        help='extra environment variable of the node processes, e.g. '
                             'RMW_FASTRTPS_PUBLICATION_MODE=ASYNCHRONOUS')
    parser.add_argument('--csv', default='node_latency.csv',
                        help='result CSV: a name (in benchmarks/results) or a path; the plot '
                             'is written beside it')
    parser.add_argument('--obstacles', type=int, default=0, help='sphere obstacles published')
    parser.add_argument('--goal-period', type=float, default=2.0,
                        help='a new goal every this many seconds in the rate/CPU window [s]; '
                             '0: none (the last latency goal is held: a settled arm at rest)')
    parser.add_argument('--urdf', default=str(ROOT / 'urdf' / 'smcik_arm.urdf'),
                        help='robot URDF (default: the demo arm)')
    parser.add_argument('--base', default='base_link', help='base link')
    parser.add_argument('--tip', default='tool0', help='tip link')
    parser.add_argument('--floor', action='store_true',
                        help='after the window, stop the node and measure the middleware '
                             'floor (benchmarks/middleware_floor.py: the same topics, QoS, '
                             'timers and executor holding the last command, no IK) over '
                             'another window')
    args = parser.parse_args(argv)

    domain_id = private_domain_id(offset=17)
    os.environ['ROS_DOMAIN_ID'] = str(domain_id)
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from smcik_ros.model import Chain
    from smcik_ros.ros.conversions import matrix_to_pose

    from visualization_msgs.msg import Marker, MarkerArray

    chain = Chain.from_urdf(args.urdf, args.base, args.tip)
    log_dir = Path(tempfile.mkdtemp(prefix='smcik_bench_'))
    env = child_env(domain_id, log_dir)
    profile_path = log_dir / 'node.prof'
    if args.profile:
        env['SMCIK_PROFILE'] = str(profile_path)
    env.update(item.split('=', 1) for item in args.env)
    params = ['smcik_node:rate_hz:=100.0', 'smcik_node:smc.num_particles:=100',
              'smcik_node:marker_rate_hz:=10.0', 'smcik_node:joint_states_timeout:=1.0',
              f'smcik_node:urdf_path:={args.urdf}', f'smcik_node:base_link:={args.base}',
              f'smcik_node:tip_link:={args.tip}']
    if args.no_sim:   # nothing publishes joint_states: the simulation-only blind start
        params.append('smcik_node:start_without_joint_states:=true')
    params += [f'smcik_node:{p}' for p in args.param]
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node('smcik_bench', context=context)
    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    measured = []
    node.create_subscription(JointState, 'joint_states', measured.append, 10)
    commands = []   # (receive time, header stamp [s], q)

    def on_command(msg):
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        commands.append((time.monotonic(), stamp, np.array(msg.position)))

    node.create_subscription(JointState, 'joint_commands', on_command, reliable)
    status = []   # (receive time, dict)
    node.create_subscription(String, '/smcik_node/status',
                             lambda m: status.append((time.monotonic(), json.loads(m.data))),
                             reliable)
    pose_pub = node.create_publisher(PoseStamped, 'target_pose', reliable)
    obstacle_pub = node.create_publisher(MarkerArray, 'obstacles', reliable)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    rng = np.random.default_rng(0)
    # Start-up: the arm (sim_arm) runs first, as on a real robot; then the node is spawned and
    # its first command's header stamp (the node's clock: system time) is compared with the
    # spawn time: imports, URDF, collision model, kernels from the cache, discovery, first tick.
    procs = []
    free = _goal_check(args, chain)
    if not args.no_sim:
        start = _free_start(chain, free)
        procs.append(start_node_process(
            'smcik_ros.sim_arm', env, log_dir / 'sim_arm.log',
            parameters=[f'sim_arm:urdf_path:={args.urdf}', f'sim_arm:base_link:={args.base}',
                        f'sim_arm:tip_link:={args.tip}',
                        'sim_arm:initial_positions:=[' + ','.join(map(repr, start)) + ']']))
        deadline = time.monotonic() + 30.0
        while not measured and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
    spawned = time.time()
    node_proc = start_node_process('smcik_ros.node', env, log_dir / 'smcik_node.log',
                                   parameters=params)
    procs.insert(0, node_proc)

    def spin_until(predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.005)
            if predicate():
                return True
        return False

    def send_goal():
        q = commands[-1][2]
        span = chain.upper - chain.lower
        for _ in range(100):     # a goal the arm can take: redrawn while its covers collide
            q_goal = np.clip(q + rng.uniform(-0.4, 0.4, chain.n), chain.lower + 0.05 * span,
                             chain.upper - 0.05 * span)
            if free is None or free(q_goal):
                break
        pose = chain.fk(q_goal)
        msg = PoseStamped()
        msg.header.frame_id = args.base
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.pose = matrix_to_pose(pose)
        pose_pub.publish(msg)
        return pose, time.monotonic()

    def reached(pose):
        tip = chain.fk(commands[-1][2])
        cos = 0.5 * (np.trace(tip[:3, :3].T @ pose[:3, :3]) - 1.0)
        return (np.linalg.norm(tip[:3, 3] - pose[:3, 3]) <= 1e-3
                and math.acos(max(-1.0, min(1.0, cos))) <= 1e-2)

    given = dict(item.split(':=') for item in args.param)
    latencies = []
    floor = node_code = None     # --floor: (CPU share, rate); the node's exit code
    try:
        if not spin_until(lambda: commands and pose_pub.get_subscription_count() > 0, 30.0):
            print('smcik_node did not start; log:\n' + (log_dir / 'smcik_node.log').read_text())
            return 1
        startup = commands[0][1] - spawned
        if args.obstacles:
            markers = _obstacles(chain, commands[-1][2], args.obstacles, Marker, args.base)
            spin_until(lambda: obstacle_pub.get_subscription_count() > 0, 10.0)
            obstacle_pub.publish(MarkerArray(markers=markers))
            if not spin_until(lambda: status and status[-1][1].get('obstacles') == len(markers),
                              10.0):
                print('the obstacles were not applied; log:\n'
                      + (log_dir / 'smcik_node.log').read_text())
                return 1
        for _ in range(args.goals):
            pose, sent = send_goal()
            ok = spin_until(lambda: commands[-1][0] > sent and reached(pose), 10.0)
            latencies.append(commands[-1][0] - sent if ok else math.nan)
        # Rate and CPU window, with a new goal every 2 s.
        first = len(commands)
        cpu0, t0 = cpu_seconds(node_proc.pid), time.monotonic()
        next_goal = t0
        while time.monotonic() - t0 < args.window:
            if args.goal_period > 0 and time.monotonic() >= next_goal:
                send_goal()
                next_goal += args.goal_period
            executor.spin_once(timeout_sec=0.005)
        cpu1, t1 = cpu_seconds(node_proc.pid), time.monotonic()
        window = commands[first:]
        if args.floor:
            node_code = stop_process(procs.pop(0), signal.SIGINT)
            floor = _floor(args, given, env, log_dir, commands, procs, spin_until)
    finally:
        codes = [stop_process(p, signal.SIGINT) for p in procs]
        if node_code is None:
            node_code = codes[0]
        node.destroy_node()
        rclpy.try_shutdown(context=context)

    recv = np.array([c[0] for c in window])
    stamps = np.array([c[1] for c in window])
    rate_stamp = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    rate_recv = (len(recv) - 1) / (recv[-1] - recv[0])
    gaps = np.diff(stamps) * 1e3
    cpu_share = (cpu1 - cpu0) / (t1 - t0)
    in_window = [d for t, d in status if t0 <= t <= t1]
    # CPU time (thread_time) of the callbacks: wall times would count preemption on a busy host.
    tick_ms = np.mean([d['step_cpu_ms'] for d in in_window if d.get('step_cpu_ms')])
    marker_ms = np.mean([d['marker_cpu_ms'] for d in in_window if d.get('marker_cpu_ms')]
                        or [0.0])
    marker_hz = given.get('marker_rate_hz', 10.0)
    rate_hz = float(given.get('rate_hz', 100.0))
    target_rate = TARGET_RATE_SHARE * rate_hz
    # (the CPU bounds are set at 100 Hz; other rates are judged on their rate alone)
    target_cpu = math.inf if rate_hz != 100.0 else \
        TARGET_CPU_REST if args.goal_period <= 0 else TARGET_CPU_GOALS
    tick_share = tick_ms * 1e-3 * rate_stamp
    # Marker ticks: their CPU seconds over the window (marker_cpu_s, a running total), else
    # (an older node) the mean of the last 50 ticks, which after goals still holds the
    # building ticks of the window's first seconds although the skips at rest cost 0.1 ms.
    spent = [(t, d['marker_cpu_s']) for t, d in status
             if t0 <= t <= t1 and d.get('marker_cpu_s') is not None]
    if len(spent) >= 2 and spent[-1][0] > spent[0][0]:
        marker_share = (spent[-1][1] - spent[0][1]) / (spent[-1][0] - spent[0][0])
        marker_ms = 1e3 * marker_share / float(marker_hz)
    else:
        marker_share = marker_ms * 1e-3 * float(marker_hz)
    # solver_thread: the worker's CPU (steps, markers, alternatives, status) over the window
    timed = [(t, d['solver_thread_cpu_s']) for t, d in status
             if t0 <= t <= t1 and d.get('solver_thread_cpu_s') is not None]
    thread_share = ((timed[-1][1] - timed[0][1]) / (timed[-1][0] - timed[0][0])
                    if len(timed) >= 2 and timed[-1][0] > timed[0][0] else None)
    rest_share = cpu_share - tick_share - (marker_share if thread_share is None
                                           else thread_share)
    load = os.getloadavg()[0]
    last = in_window[-1] if in_window else {}
    first_status = in_window[0] if in_window else {}
    lat = np.array(latencies)
    done = lat[np.isfinite(lat)]
    rows = [
        ('start-up to first command [s]', f'{startup:.2f}',
         '<= 2 (warm cache)' + (' incl. the blind start\'s wait' if args.no_sim else '')),
        *_startup_phases(log_dir / 'smcik_node.log', spawned),
        ('goals reached (1 mm, 0.01 rad)', f'{len(done)}/{len(lat)}', ''),
        ('latency median [s]', f'{np.median(done):.3f}' if len(done) else 'n/a', ''),
        ('latency max [s]', f'{np.max(done):.3f}' if len(done) else 'n/a', ''),
        ('command rate, node stamps [Hz]', f'{rate_stamp:.2f}', f'>= {target_rate:g}'),
        ('command rate, receive times [Hz]', f'{rate_recv:.2f}', ''),
        ('command period p99 / max [ms]',
         f'{np.percentile(gaps, 99):.2f} / {gaps.max():.2f}', ''),
        ('late ticks in the window (~/status late_ticks)',
         f'{last.get("late_ticks", 0) - first_status.get("late_ticks", 0)}', ''),
        ('node CPU share of one core', f'{100 * cpu_share:.1f} %',
         '-' if math.isinf(target_cpu) else f'<= {100 * target_cpu:g} %'
         + (' at rest' if args.goal_period <= 0 else ' with goals coming')),
        ('  control ticks (limits, publish' + (')' if thread_share is not None
                                                 else ', solver)'),
         f'{100 * tick_share:.1f} %', f'{tick_ms:.2f} ms CPU/tick'),
        *([('  solver thread (steps, markers, alternatives, status)',
            f'{100 * thread_share:.1f} %', 'solver_thread')] if thread_share is not None
          else []),
        ('  marker ticks (build + publish)' + (', in the solver thread'
                                                if thread_share is not None else ''),
         f'{100 * marker_share:.1f} %', f'{marker_ms:.2f} ms CPU/tick'),
        ('  rest: executor, joint_states, DDS threads', f'{100 * rest_share:.1f} %', ''),
        *([('middleware floor: the same DDS traffic, no IK', f'{100 * floor[0]:.1f} %',
            f'{floor[1]:.2f} Hz, benchmarks/middleware_floor.py'),
           ('  node minus floor (the IK node\'s own work)',
            f'{100 * (cpu_share - floor[0]):.1f} %', '')] if floor else []),
        ('collision: obstacles / self-collision pairs',
         f'{last.get("obstacles")} / {last.get("self_collision_pairs")}',
         f'self_collision {last.get("self_collision")}'),
        ('collision: holds / fallbacks in the window',
         f'{last.get("holds", 0) - first_status.get("holds", 0)} / '
         f'{last.get("fallbacks", 0) - first_status.get("fallbacks", 0)}', ''),
        ('solver steps / marker ticks skipped at rest',
         f'{last.get("steps_skipped", 0) - first_status.get("steps_skipped", 0)} / '
         f'{last.get("markers_skipped", 0) - first_status.get("markers_skipped", 0)}',
         'rest_step_interval, unchanged markers'),
        ('machine load average (1 min)', f'{load:.2f}', f'{os.cpu_count()} cores'),
        ('window [s]', f'{t1 - t0:.1f}', ''),
        ('node exit code after SIGINT', str(node_code), '0'),
    ]
    print(f'\nsmcik_node latency benchmark (sim_arm: {not args.no_sim}; logs {log_dir})')
    width = max(len(r[0]) for r in rows)
    for name, value, goal in rows:
        print(f'  {name:<{width}}  {value:>14}  {goal}')
    RESULTS.mkdir(parents=True, exist_ok=True)
    config = ' '.join(args.param + args.env + (['--no-sim'] if args.no_sim else [])
                      + ([f'--obstacles {args.obstacles}'] if args.obstacles else [])
                      + ([f'--goal-period {args.goal_period:g}'] if args.goal_period != 2.0
                         else [])
                      + ([f'--urdf {args.urdf}'] if 'smcik_arm.urdf' not in args.urdf else []))
    rows.append(('configuration', config or 'config/arm.yaml defaults', ''))
    out = RESULTS / args.csv          # a bare name: in results/; a path: there
    with open(out, 'w', newline='') as handle:
        writer = csv.writer(handle)
        writer.writerow(['metric', 'value', 'goal'])
        writer.writerows(rows)
        writer.writerow([])
        writer.writerow(['goal', 'latency_s'])
        writer.writerows([(i + 1, f'{v:.4f}') for i, v in enumerate(lat)])
    png = out.with_suffix('.png')
    _plot(lat, gaps, png, rate_stamp, cpu_share)
    print(f'  wrote {out} and {png}')
    if args.profile and profile_path.exists():
        print('\nwhere the node spends its time (cProfile, cumulative, top 25):')
        pstats.Stats(str(profile_path)).sort_stats('cumulative').print_stats(25)
    ok = rate_stamp >= target_rate and cpu_share <= target_cpu and len(done) == len(lat) \
        and (floor is not None or not args.floor)
    return 0 if ok else 1


def _floor(args, given, env, log_dir, commands, procs, spin_until):
    """Run benchmarks/middleware_floor.py holding the last command; return (its CPU share
    of one core, its command rate [Hz]) over --window s, or None when it did not start.
    given: the node's -p parameters as {name: value text}."""
    held = commands[-1][2]
    proc = start_node_process(
        'benchmarks.middleware_floor', env, log_dir / 'middleware_floor.log', params_file=None,
        parameters=[f'urdf_path:={args.urdf}', f'base_link:={args.base}',
                    f'tip_link:={args.tip}', f'rate_hz:={float(given.get("rate_hz", 100.0))}',
                    f'marker_rate_hz:={float(given.get("marker_rate_hz", 10.0))}',
                    f'status_rate_hz:={float(given.get("status_rate_hz", 2.0))}',
                    'positions:=[' + ','.join(map(repr, held.tolist())) + ']'])
    procs.insert(0, proc)
    started = time.monotonic()
    if not spin_until(lambda: commands[-1][0] > started + 2.0, 30.0):
        print('the middleware floor did not start; log:\n'
              + (log_dir / 'middleware_floor.log').read_text())
        return None
    first = len(commands)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    spin_until(lambda: False, args.window)
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    stamps = np.array([c[1] for c in commands[first:]])
    return (cpu1 - cpu0) / (t1 - t0), (len(stamps) - 1) / (stamps[-1] - stamps[0])


def _startup_phases(log_path, spawned):
    """Return rows: when the node's log said 'model from' (interpreter, imports, rclpy, the
    URDF parsed or read from the model cache) and 'ready:' (kernels loaded, collision model,
    solver, timers), in seconds after the spawn (the log's stamps are the system clock)."""
    stamps = {}
    try:
        text = log_path.read_text(errors='replace')
    except OSError:
        return []
    for match in re.finditer(r'\[(\d+\.\d+)\] \[smcik_node\]: (model from|ready:)', text):
        stamps.setdefault(match.group(2), float(match.group(1)) - spawned)
    names = {'model from': '  spawn to model (imports, URDF) [s]',
             'ready:': '  spawn to ready (kernels, collision model, solver) [s]'}
    return [(names[key], f'{stamps[key]:.2f}', '') for key in names if key in stamps]


def _goal_check(args, chain):
    """Return q -> True when the configuration keeps the node's clearance from
    self-collision (the node's sphere covers of the URDF's collision geometry and the SRDF
    found beside it, as the node finds them by default), or None when the URDF has no
    collision geometry or its meshes cannot be found here (then goals are not checked).
    Sphere covers are conservative: on a Panda a quarter of random configurations bring two
    covers within the padding, and a goal there is one the node must refuse to reach."""
    from smcik_ros.collision import conventional_srdf_path
    from smcik_ros.control.collision_guard import CollisionGuard
    try:
        guard, _ = CollisionGuard.from_urdf(chain, args.urdf, urdf_path=args.urdf,
                                            srdf=conventional_srdf_path(args.urdf),
                                            explicit_srdf=False)
    except Exception as exc:       # a mesh not found here: the node's log says more
        print(f'goals are not checked for self-collision: {exc}')
        return None
    constraint = guard.constraint
    if not constraint.self_collision:
        return None
    margin = constraint.clearance

    def free(q):
        report = constraint.distances(chain.frames(q), search=(2.0 * margin,))
        return bool(report.distance[0] >= margin)
    return free


def _free_start(chain, free):
    """Return sim_arm's start: its default (0 where the range holds 0, else mid-range), or
    where that brings covers within the clearance (a Panda's zero pose folds the hand onto
    link 5), the mid-range configuration or a seeded draw around it that does not."""
    from smcik_ros.control.arm_state import initial_configuration
    start = initial_configuration(chain)
    if free is None or free(start):
        return [float(v) for v in start]
    mid = 0.5 * (chain.lower + chain.upper)
    rng = np.random.default_rng(1)
    span = chain.upper - chain.lower
    candidates = [mid] + [np.clip(mid + rng.uniform(-0.2, 0.2, chain.n) * span, chain.lower,
                                  chain.upper) for _ in range(200)]
    return [float(v) for v in next((q for q in candidates if free(q)), start)]


def _obstacles(chain, q, count, Marker, frame, radius=0.05, seed=0):
    """Return ``count`` SPHERE markers (seeded) in a shell around the base, at least 0.2 m
    from every link origin at q (the arm starts clear of them)."""
    rng = np.random.default_rng(seed)
    links = chain.link_poses(q)[:, :3, 3]
    reach = max(0.4, float(np.max(np.linalg.norm(links, axis=1))))
    markers = []
    while len(markers) < count:
        direction = rng.normal(size=3)
        direction[2] = abs(direction[2])
        center = direction / np.linalg.norm(direction) * rng.uniform(0.5, 0.9) * reach
        if np.min(np.linalg.norm(links - center, axis=1)) < 0.2:
            continue
        marker = Marker(ns='bench', id=len(markers), type=Marker.SPHERE, action=Marker.ADD)
        marker.header.frame_id = frame
        marker.pose.position.x, marker.pose.position.y, marker.pose.position.z = \
            (float(c) for c in center)
        marker.pose.orientation.w = 1.0
        marker.scale.x = marker.scale.y = marker.scale.z = 2 * radius
        markers.append(marker)
    return markers


def _plot(latencies, gaps, path, rate, cpu):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].bar(np.arange(1, len(latencies) + 1), np.nan_to_num(latencies, nan=0.0))
    axes[0].set_xlabel('goal')
    axes[0].set_ylabel('goal -> commands within 1 mm [s]')
    axes[0].set_title('goal-to-command latency (0: not reached)')
    axes[1].hist(gaps, bins=60)
    axes[1].set_yscale('log')
    axes[1].set_xlabel('period between commands (node stamps) [ms]')
    axes[1].set_title(f'command timing: {rate:.2f} Hz, node CPU {100 * cpu:.1f} %')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == '__main__':
    sys.exit(main())
