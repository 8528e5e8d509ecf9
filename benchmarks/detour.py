"""Goals behind an obstacle: the node's control loop with and without the detour (issue 9).

The node's own ``ControlLoop`` (SMC solver, the collision guard as validator and constraint,
command shaping at the default limits: velocity scale 0.5, 3 rad/s^2) is ticked at 100 Hz of
simulated time against a perfect arm (joint_states = the last command), so the figures do
not depend on the machine's load; the detour's planning budget is still wall-clock time per
tick, so a slower machine plans over more ticks. Per goal: reached (1 mm / 0.01 rad) within
15 s, the time to reach it, detours planned and the ticks spent planning.

Cases (demo arm 'arm7' + its SRDF): a 12 cm box half way on a large joint-1 swing of a
random pose (the test_detour set-up), pose goals, ``--trials`` placements. 'off' is the loop
without the detour (the arm stops at the margin: the baseline), 'on' with it.

Writes benchmarks/results/detour.{csv,png}. Run: ``./smcik bench detour`` (about 3 min;
``--quick``: 3 placements).
``--thirdparty DIR`` also prints (never writes) the same for MoveIt's Panda under DIR: a
10 x 40 x 40 cm box at (0.55, 0, 0.25) m and goals from random collision-free
configurations of the model, half of them with the hand behind the box (third-party models
and anything derived from them stay out of the repository).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (pins BLAS to one thread)
import numpy as np  # noqa: E402

from smcik_ros.collision import (CollisionModel, Obstacle, pose_matrix,  # noqa: E402
                                 self_collision_pairs)
from smcik_ros.control.arm_state import ArmSettings  # noqa: E402
from smcik_ros.control.collision_guard import CollisionGuard  # noqa: E402
from smcik_ros.control.limits import limits_for_chain  # noqa: E402
from smcik_ros.control.detour import Detour, DetourSettings  # noqa: E402
from smcik_ros.control.guard import HardConstraintValidator  # noqa: E402
from smcik_ros.control.tick import ControlLoop  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.solvers import make_solver  # noqa: E402

RATE = 100.0
TIMEOUT = 15.0          # [s] of simulated time per goal
TOLERANCE = (1e-3, 1e-2)
FIELDS = ['arm', 'detour', 'goals', 'reached', 'reached_pct', 'median_time_s', 'max_time_s',
          'detours_planned', 'median_plan_ticks', 'max_plan_tick_ms']


def make_loop(chain, guard, seed, detour):
    """Return a node-like ControlLoop: SMC, the guard as validator and constraint."""
    limits, _ = limits_for_chain(chain, 0.5, 3.0)
    loop = ControlLoop(
        chain, make_solver('smc', chain, seed=seed), limits, ArmSettings(),
        validators=[HardConstraintValidator(chain, skip=lambda c: c is guard.constraint),
                    guard],
        tolerances=TOLERANCE, fallback_candidates=8,
        detour=Detour(chain, limits, DetourSettings(enabled=detour, seed=seed)))
    loop.set_constraints([guard.constraint])
    return loop


def run_goals(loop, chain, q0, goals):
    """Tick ``loop`` through ``goals`` (4x4 poses) from q0; return one dict per goal."""
    t = 0.0
    q = np.array(q0, dtype=float)
    loop.on_joint_states(q, t, t)
    out = []
    for pose in goals:
        loop.offer_goal('pose', pose, chain.base_link, t, t)
        start, reached = t, None
        planned = loop.detour.counts['planned']
        plan_ticks, longest = [], 0.0
        for _ in range(int(TIMEOUT * RATE)):
            t += 1.0 / RATE
            command = loop.tick(t)
            if command is not None:
                q = command.q
                loop.on_joint_states(q, t, t)
            if loop.detour.state == 'following' and loop.detour.last_plan_ticks and \
                    (not plan_ticks or plan_ticks[-1] != loop.detour.last_plan_ticks):
                plan_ticks.append(loop.detour.last_plan_ticks)
                longest = max(longest, loop.detour.longest_tick)
            frame = chain.fk(q)
            pos = np.linalg.norm(frame[:3, 3] - pose[:3, 3])
            cos = 0.5 * (np.trace(frame[:3, :3].T @ pose[:3, :3]) - 1.0)
            if pos <= TOLERANCE[0] and np.arccos(np.clip(cos, -1.0, 1.0)) <= TOLERANCE[1]:
                reached = t - start
                break
        out.append({'reached': reached, 'planned': loop.detour.counts['planned'] - planned,
                    'plan_ticks': plan_ticks, 'longest': longest})
    return out


def summarise(arm, detour, results):
    times = [r['reached'] for r in results if r['reached'] is not None]
    ticks = [k for r in results for k in r['plan_ticks']]
    return {'arm': arm, 'detour': 'on' if detour else 'off', 'goals': len(results),
            'reached': len(times), 'reached_pct': 100.0 * len(times) / len(results),
            'median_time_s': float(np.median(times)) if times else float('nan'),
            'max_time_s': float(np.max(times)) if times else float('nan'),
            'detours_planned': sum(r['planned'] for r in results),
            'median_plan_ticks': float(np.median(ticks)) if ticks else float('nan'),
            'max_plan_tick_ms': 1e3 * max((r['longest'] for r in results), default=0.0)}


def demo_rows(trials):
    chain = Chain.from_urdf(_common.ARM7, 'base_link', 'tool0')
    model = CollisionModel.from_urdf(chain, _common.ARM7, urdf_path=_common.ARM7)
    srdf = os.path.splitext(_common.ARM7)[0] + '.srdf'
    rows = []
    for detour in (False, True):
        results = []
        for trial in range(trials):
            rng = np.random.default_rng(trial)
            guard = CollisionGuard(model, self_collision_pairs(model, srdf))
            q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0]) + rng.uniform(-0.2, 0.2, 7)
            q_goal = q0.copy()
            q_goal[0] += rng.uniform(1.2, 1.8) * rng.choice([-1.0, 1.0])
            box = Obstacle('box', (0.12, 0.12, 0.12),
                           pose_matrix(chain.fk(0.5 * (q0 + q_goal))[:3, 3]))
            guard.scene.apply([('add', ('bench', 0), box)], 'obstacles')
            loop = make_loop(chain, guard, trial, detour)
            results += run_goals(loop, chain, q0, [chain.fk(q_goal)])
        rows.append(summarise('arm7', detour, results))
    return rows


def panda_rows(directory, count, seed=2, with_baseline=False):
    """The Panda rows (printed only): one goal sequence, half behind the box (detour on;
    ``with_baseline``: also off, which takes up to 15 s of simulated time per missed goal)."""
    urdf, srdf, link, chain = _common.thirdparty_panda(directory)
    model = CollisionModel.from_urdf(chain, urdf, urdf_path=urdf, package_paths=[link])
    box = Obstacle('box', (0.1, 0.4, 0.4), pose_matrix((0.55, 0.0, 0.25)))
    check = CollisionGuard(model, self_collision_pairs(model, srdf))
    check.scene.apply([('add', ('bench', 0), box)], 'obstacles')
    rng = np.random.default_rng(seed)
    span = chain.upper - chain.lower
    goals = []
    while len(goals) < count:
        behind = len(goals) % 2 == 0
        q = chain.lower + span * (0.05 + 0.9 * rng.uniform(size=chain.n))
        tip = chain.fk(q)[:3, 3]
        if behind != bool(0.62 <= tip[0] <= 0.8 and abs(tip[1]) <= 0.2
                          and 0.05 <= tip[2] <= 0.45):
            continue
        if tip[2] < 0.05 or np.linalg.norm(tip[:2]) < 0.25 or \
                np.any(chain.link_poses(q)[:, 2, 3] < 0.0):
            continue
        # Reachable for the node: the goal's own configuration is free for its model (the
        # covers are conservative by up to 1 cm plus the padding, so goals drawn free on the
        # meshes, as the python-fcl harness draws them, include some the node cannot reach).
        if check.constraint.distances(chain.frames(q[None])).distance[0] < 0.0:
            continue
        goals.append(chain.fk(q))
    q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    rows = []
    for detour in (True,) if not with_baseline else (False, True):
        guard = CollisionGuard(model, self_collision_pairs(model, srdf))
        guard.scene.apply([('add', ('bench', 0), box)], 'obstacles')
        loop = make_loop(chain, guard, seed, detour)
        results = run_goals(loop, chain, q0, goals)
        rows.append(summarise('panda', detour, results))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--trials', type=int, default=10, help='box placements (arm7)')
    parser.add_argument('--thirdparty', default='', help='directory holding MoveIt\'s '
                        'panda_description and panda_moveit_config (printed only)')
    parser.add_argument('--panda-goals', type=int, default=20)
    parser.add_argument('--panda-baseline', action='store_true',
                        help='also run the Panda goals with the detour off (slow)')
    parser.add_argument('--quick', action='store_true', help='3 placements (under a minute)')
    args = parser.parse_args()
    if args.quick:
        args.trials = min(args.trials, 3)
    print(_common.machine())
    started = time.perf_counter()
    rows = demo_rows(args.trials)
    _common.print_table(rows, FIELDS, title='Goals behind a box: control loop, detour off/on')
    _common.write_csv('detour', rows, FIELDS)
    _plot(rows)
    if args.thirdparty:
        _common.print_table(panda_rows(args.thirdparty, args.panda_goals,
                                       with_baseline=args.panda_baseline), FIELDS,
                            title='Panda (printed only)')
    print(f'{time.perf_counter() - started:.0f} s')


def _plot(rows):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    x = np.arange(len(rows))
    ax.bar(x, [r['reached_pct'] for r in rows])
    ax.set_xticks(x, [f'{r["arm"]}\ndetour {r["detour"]}' for r in rows])
    ax.set_ylabel('goals reached within 15 s [%]')
    ax.set_ylim(0, 100)
    fig.tight_layout()
    _common.save_figure(fig, 'detour')


if __name__ == '__main__':
    main()
