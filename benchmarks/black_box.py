"""Issue 32's black box, as a benchmark: smcik_node started as a user would on any URDF,
per-tip goals drawn from reachable configurations, every command checked.

smcik_node and sim_arm run as their own processes (``--params-file`` config/arm.yaml, or
``--params``, plus ``urdf_path``, ``base_link``, ``tip_links`` = hands + feet and, with
feet, ``floating_base`` and ``world_frame: world``); sim_arm plays every joint of the URDF on
``joint_states``. With feet, the contacts on the feet and the centre of mass over the support
links (``--margin``) are latched on the transient-local ``constraints`` topic before the node
starts, so they anchor at the first joint_states. Goals go one tip at a time, the hands in
turn, on ``targets/<tip>/pose``; each waits up to 10 s for the commanded tip to come within
1 mm and 0.01 rad (the node's own kinematics, the base of each command from
``~/base_pose`` by stamp), then the next is sent at once. Each goal is the tip's pose at a
configuration drawn from the command at that moment (``--mode``):

- ``arm``: the joints that move the goal's tip and no other tip moved by up to ``--spread``
  rad each;
- ``path``: every joint on the tip's path that moves no foot (a torso too) moved so;
- ``body``: ``arm`` plus every joint moved by up to ``--spread``, then projected onto the feet,
  the other hands where they are and the support polygon (``goals.project``; draws that do
  not converge are drawn again);

inside the limits less 5 % of their range, self-collision clearance (the node's SRDF pairs,
its sphere covers) at least 2 cm or half the current one, the CoM inside the polygon.
Checked over every command: the limits (position; velocity and acceleration from the header
stamps, as ``stream_ratios``), the feet within 1 mm and 0.01 rad of where they were at the
first command, the CoM inside the polygon less ``--margin``, and per goal how far the other
hands moved from where they were when it was sent (2 mm at most).

Default: the humanoid of urdf/smcik_figure.urdf at its ``ready`` stance. Another robot:
``--urdf PATH --base LINK --hands A,B --feet C,D --support E,F [--srdf PATH] [--init
'substring=value,...']`` (joints whose name contains the substring start at that value;
``--feet=`` for a fixed base). Writes benchmarks/results/black_box.{csv,png} (``--name``:
another name; ``--solver``: the node's ``solver``, smc unless given). Run: ``./smcik bench
black_box [--seeds 1 2] [--mode path --spread 1.6] [--solver jacobian]`` (20-60 s per seed;
``--quick``: one seed, 3 goals).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402  (pins BLAS to one thread)
import numpy as np  # noqa: E402

from smcik_ros.demo import REPO_ROOT, private_domain_id  # noqa: E402

sys.path.insert(0, os.path.join(REPO_ROOT, 'test'))
from ros_helpers import (Probe, child_env, read_log, start_node_process,  # noqa: E402
                         stop_process, stream_ratios, wait_for)

FIGURE = dict(urdf='urdf/smcik_figure.urdf', base='pelvis', hands='left_hand,right_hand',
              feet='left_foot,right_foot', support='left_foot_link,right_foot_link',
              srdf='urdf/smcik_figure.srdf', params='config/figure.yaml', init='')
POSITION_TOL, ORIENTATION_TOL, REACH_TIMEOUT, DRIFT = 1e-3, 1e-2, 10.0, 2e-3
FIELDS = ['seed', 'goal', 'tip', 'reached_s', 'error_mm', 'error_rad', 'others_moved_mm']


def angle(a, b):
    """Return the rotation angle [rad] between the rotations of poses a and b (4, 4)."""
    cos = 0.5 * (np.trace(a[:3, :3].T @ b[:3, :3]) - 1.0)
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


class Robot:
    """The robot as the judge sees it: its chain (floating with feet), limits, the checks."""

    def __init__(self, args):
        from smcik_ros.collision import CollisionConstraint, CollisionModel
        from smcik_ros.collision import self_collision_pairs
        from smcik_ros.control.limits import limits_for_chain
        from smcik_ros.model import Chain
        import yaml
        self.args = args
        self.urdf = str(REPO_ROOT / args.urdf)
        self.hands, self.feet = args.hands.split(','), [f for f in args.feet.split(',') if f]
        self.floating = bool(self.feet)
        self.chain = Chain.from_urdf(self.urdf, args.base, self.hands + self.feet,
                                     floating_base=self.floating)
        with open(REPO_ROOT / args.params) as f:
            node = yaml.safe_load(f)['smcik_node']['ros__parameters']
        self.limits, _ = limits_for_chain(self.chain, node.get('velocity_scale', 0.5),
                                          node.get('max_acceleration', 3.0))
        self.names = list(self.limits.names)
        model = CollisionModel.from_urdf(self.chain, self.urdf)
        srdf = str(REPO_ROOT / args.srdf) if args.srdf else None
        self.collision = CollisionConstraint(model, pairs=self_collision_pairs(model, srdf))
        self.contacts, self.support = [], None

    def state(self, q, base):
        return self.chain.with_base(q, base) if self.floating else np.asarray(q, float)

    def clearance(self, state):
        found = self.collision.status(state)['min_distance']
        return np.inf if found is None else found

    def anchor(self, state):
        """Plant the feet where ``state`` has them; the support polygon there."""
        from smcik_ros.collision import support_polygon
        from smcik_ros.goals import CenterOfMassPolygon, Contact
        if not self.floating:
            return
        self.contacts = [Contact(f, pose=self.chain.fk(state, f)).bind(self.chain)
                         for f in self.feet]
        polygon = support_polygon(self.chain, self.urdf, self.args.support.split(','), state)
        self.support = CenterOfMassPolygon(polygon=polygon,
                                           margin=self.args.margin).bind(self.chain)

    def draw(self, state, tip, rng):
        """Return a goal configuration for ``tip`` drawn from ``state`` (``--mode``), or
        None after 2000 draws."""
        from smcik_ros.goals import Contact
        from smcik_ros.goals.projection import project
        chain, args = self.chain, self.args
        moving = {t: chain.moving(t) for t in self.hands + self.feet}
        legs = np.zeros(chain.nv, bool)
        for f in self.feet:
            legs |= moving[f]
        others = np.zeros(chain.nv, bool)
        for t in self.hands + self.feet:
            if t != tip:
                others |= moving[t]
        column = [chain.joint_velocity_index(n) for n in self.names]
        own = [i for i, c in enumerate(column) if moving[tip][c] and not (
            legs[c] if args.mode == 'path' else others[c])]
        lo, hi = self.limits.lower.copy(), self.limits.upper.copy()
        q = state[chain.command_index] if self.floating else state.copy()
        lo, hi = np.where(np.isfinite(lo), lo, q - np.pi), np.where(np.isfinite(hi), hi, q + np.pi)
        lo, hi = lo + 0.05 * (hi - lo), hi - 0.05 * (hi - lo)
        base = chain.base_pose(state)
        held = [Contact(t, pose=chain.fk(state, t)).bind(chain) for t in self.hands if t != tip]
        floor = self.clearance(state)
        floor = min(0.02, 0.5 * floor) if floor > 0 else floor - 1e-4
        for _ in range(2000):
            goal = q.copy()
            if args.mode == 'body':
                goal = np.clip(goal + rng.uniform(-args.spread, args.spread, len(goal)), lo, hi)
            goal[own] = np.clip(q[own] + rng.uniform(-args.spread, args.spread, len(own)),
                                lo[own], hi[own])
            drawn = self.state(goal, base)
            if args.mode == 'body':
                drawn, ok = project(chain, drawn, self.contacts + held + (
                    [self.support] if self.support else []), iterations=60, tolerance=2e-5)
                joints = drawn[chain.command_index] if self.floating else drawn
                if not ok or np.any(joints < lo) or np.any(joints > hi):
                    continue
            if self.clearance(drawn) < floor:
                continue
            if self.support and self.support.violated(chain.frames(drawn)).any():
                continue
            return drawn
        return None


def constraint_text(args):
    feet, support = args.feet.split(','), args.support.split(',')
    items = [f'{{type: contact, link: {f}}}' for f in feet]
    items.append(f'{{type: center_of_mass, support: [{", ".join(support)}], '
                 f'margin: {args.margin}}}')
    return '[' + ', '.join(items) + ']'


def run_seed(robot, args, seed, log_dir):
    """Start the node and sim_arm, send the goals, check the stream; return (rows, summary)."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String
    from smcik_ros.ros.conversions import matrix_to_pose, pose_to_matrix
    from smcik_ros.ros.inputs import tip_topic
    chain, hands = robot.chain, robot.hands
    env = child_env(private_domain_id(os.getpid() + seed), log_dir)
    os.environ.update(env)
    rclpy.init()
    params = [f'urdf_path:={robot.urdf}', f'base_link:={args.base}',
              f'tip_links:=[{",".join(hands + robot.feet)}]']
    node_params = [f'smcik_node:{p}' for p in params] + [
        f'smcik_node:smc.seed:={seed}', f'smcik_node:solver:={args.solver}']
    if args.srdf:
        node_params.append(f'smcik_node:srdf_path:={REPO_ROOT / args.srdf}')
    sim_params = [f'sim_arm:{p}' for p in params]
    if robot.floating:
        node_params += ['smcik_node:floating_base:=true', 'smcik_node:world_frame:=world']
    if args.init:
        q0 = np.zeros(len(robot.names))
        for item in args.init.split(','):
            key, value = item.split('=')
            q0[[i for i, n in enumerate(robot.names) if key in n]] = float(value)
        q0 = np.clip(q0, robot.limits.lower, robot.limits.upper)
        sim_params.append(f'sim_arm:initial_positions:=[{",".join(f"{v:.6f}" for v in q0)}]')
    latch = rclpy.create_node('black_box_latch')
    if robot.floating:
        latch.create_publisher(String, 'constraints', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL)).publish(
                String(data=constraint_text(args)))
    params_file = REPO_ROOT / args.params
    node = start_node_process('smcik_ros.node', env, log_dir / 'smcik_node.log', params_file,
                              node_params)
    sim = start_node_process('smcik_ros.sim_arm', env, log_dir / 'sim_arm.log', params_file,
                             sim_params)
    probe = Probe(rclpy.get_default_context())
    bases = {}
    probe.create_subscription(PoseStamped, '/smcik_node/base_pose', lambda m: bases.__setitem__(
        m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec, pose_to_matrix(m.pose)),
        QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
    rng = np.random.default_rng(seed)
    rows = []

    def state_of(msg):
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        if not robot.floating:
            return np.array(msg.position)
        return robot.state(msg.position, bases[stamp]) if stamp in bases else None

    def latest():
        """The state of the newest command whose base pose has arrived (None: none in 1 s)."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            msg = probe.last_command()
            found = None if msg is None else state_of(msg)
            if found is not None:
                return found
            time.sleep(0.01)
        return None

    try:
        if not wait_for(lambda: probe.commands and latest() is not None
                        or node.poll() is not None, 120.0) or node.poll() is not None:
            raise SystemExit('smcik_node did not start:\n' + read_log(node.log_path)[-3000:])
        robot.anchor(latest())
        publishers = {t: probe.publisher(PoseStamped, tip_topic(t, 'pose')) for t in hands}
        for publisher in publishers.values():
            probe.wait_matched(publisher)
        for k in range(args.goals):
            tip = hands[k % len(hands)]
            drawn = robot.draw(latest(), tip, rng)
            if drawn is None:
                print(f'seed {seed} goal {k}: no configuration drawn for {tip}')
                continue
            goal = chain.fk(drawn, tip)
            start, since = latest(), time.monotonic()
            msg = PoseStamped(pose=matrix_to_pose(goal))
            msg.header.frame_id = 'world' if robot.floating else args.base
            publishers[tip].publish(msg)

            def error():     # the newest command whose base pose has arrived (else inf)
                now = latest()
                pose = chain.fk(now, tip) if now is not None else None
                return (np.inf, np.inf) if pose is None else (
                    float(np.linalg.norm(pose[:3, 3] - goal[:3, 3])), angle(pose, goal))
            reached = wait_for(lambda: all(e <= t for e, t in zip(
                error(), (POSITION_TOL, ORIENTATION_TOL))), REACH_TIMEOUT, interval=0.02)
            elapsed = time.monotonic() - since
            position, orientation = error()
            _, stamps, positions = probe.command_stream(since)
            states = [robot.state(q, bases[s]) if robot.floating else q
                      for s, q in zip(stamps.tolist(), positions)
                      if not robot.floating or s in bases]
            moved = max([float(np.linalg.norm(chain.fk(np.array(states), t)[:, :3, 3]
                                              - chain.fk(start, t)[:3, 3], axis=1).max())
                         for t in hands if t != tip and states] + [0.0])
            rows.append(dict(seed=seed, goal=k, tip=tip,
                             reached_s=elapsed if reached else float('nan'),
                             error_mm=1e3 * position, error_rad=orientation,
                             others_moved_mm=1e3 * moved))
        time.sleep(0.3)
        summary = check_stream(robot, probe, bases, rows)
    finally:
        stop_process(node)
        stop_process(sim)
        probe.close()
        latch.destroy_node()
        rclpy.try_shutdown()
    return rows, dict(summary, seed=seed)


def check_stream(robot, probe, bases, rows):
    """Return the checks over every command of the run."""
    limits = robot.limits
    _, stamps, positions = probe.command_stream(0.0)
    v_ratio, a_ratio = stream_ratios(stamps, positions, limits.velocity, limits.acceleration)
    out = dict(commands=len(stamps), v_ratio=v_ratio, a_ratio=a_ratio,
               outside_limits=int(np.sum(np.any((positions < limits.lower - 1e-9)
                                               | (positions > limits.upper + 1e-9), axis=1))),
               feet_mm=0.0, feet_rad=0.0, com_outside=0, unpaired=0)
    if robot.floating:
        # The node publishes each command's base pose, then the command (the commands are
        # read here first): a command without its base pose counts as unpaired, unless it
        # is stamped after the newest base pose (two topics: no order between them).
        known = set(bases)
        newest = max(known, default=-1)
        keep = [i for i, s in enumerate(stamps.tolist()) if s in known]
        out['unpaired'] = sum(s not in known and s <= newest for s in stamps.tolist())
        frames = robot.chain.frames(robot.state(positions[keep], np.array(
            [bases[stamps[i]] for i in keep])))
        for contact in robot.contacts:
            position, orientation = contact.errors(frames)
            out['feet_mm'] = max(out['feet_mm'], 1e3 * float(position.max()))
            out['feet_rad'] = max(out['feet_rad'], float(orientation.max()))
        out['com_outside'] = int(robot.support.violated(frames).sum())
    out['reached'] = sum(not np.isnan(r['reached_s']) for r in rows)
    out['goals'] = len(rows)
    out['others_over_2mm'] = sum(r['others_moved_mm'] > 1e3 * DRIFT for r in rows)
    return out


def plot(rows, path_name):
    plt = C.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    x = np.arange(len(rows))
    times = np.array([r['reached_s'] for r in rows])
    missed = np.isnan(times)
    axes[0].bar(x[~missed], times[~missed], color='tab:blue', label='reached')
    if missed.any():
        axes[0].bar(x[missed], np.full(missed.sum(), REACH_TIMEOUT), color='tab:red',
                    label='missed (10 s)')
    axes[0].set(xlabel='goal (all seeds)', ylabel='time to reach [s]')
    axes[0].legend(fontsize=8)
    axes[1].bar(x, [r['others_moved_mm'] for r in rows], color='tab:gray')
    axes[1].axhline(1e3 * DRIFT, color='tab:red', lw=1)
    axes[1].set(xlabel='goal (all seeds)', ylabel='other hands moved [mm]')
    for axis in axes:
        axis.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return C.save_figure(fig, path_name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    for key, value in FIGURE.items():
        parser.add_argument(f'--{key}', default=value)
    parser.add_argument('--mode', choices=('arm', 'path', 'body'), default='arm')
    parser.add_argument('--spread', type=float, default=0.8, help='[rad]')
    parser.add_argument('--goals', type=int, default=6)
    parser.add_argument('--solver', default='smc', help='the node\'s solver parameter')
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--margin', type=float, default=0.02, help='[m] of the polygon')
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--name', default='black_box', help='results file name')
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.goals = args.seeds[:1], 3
    import tempfile
    from pathlib import Path
    robot = Robot(args)
    rows, summaries = [], []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix='black_box_') as log_dir:
            seed_rows, summary = run_seed(robot, args, seed, Path(log_dir))
        rows += seed_rows
        summaries.append(summary)
    print(f'{args.urdf} ({args.mode}, spread {args.spread} rad, solver {args.solver}), '
          f'{C.machine()}')
    C.print_table(rows, FIELDS, 'goals')
    C.print_table(summaries, ['seed', 'reached', 'goals', 'others_over_2mm', 'v_ratio',
                              'a_ratio', 'outside_limits', 'feet_mm', 'feet_rad',
                              'com_outside', 'unpaired', 'commands'], 'every command')
    print(C.write_csv(args.name, rows, FIELDS))
    print(plot(rows, args.name))


if __name__ == '__main__':
    main()
