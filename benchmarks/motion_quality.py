"""Motion quality of online SMC IK: nearest solutions, no branch flips, lag-free tracking.

The figures of issue 8's motion harness, measured on the core (no ROS graph):

- arms: urdf/smcik_arm.urdf (7-DOF), urdf/smcik_arm6.urdf (6-DOF) and the Panda-, iiwa- and
  UR5-type arms that ``dh_round_trip.arms()`` builds from published DH tables (``_motion``).
- plant: ``--plant follower`` (default): ``StraightLineFollower``, a synchronised
  straight-line follower within 0.5 x the URDF velocity limits and 10 rad/s^2 (like
  sim_arm.follow with every joint on one line); ``--plant ideal``: the arm is wherever the
  estimate says. Each 10 ms tick: ``q_cmd = solver.step(goal)`` once, then one plant tick.
- point goals (``--goals`` per arm, 30 by default): random reachable poses (FK of uniform
  in-limit configurations, Generator seed 11), one after another from the arm's home
  configuration; a goal ends once the arm has been within 1 mm and 0.01 rad for 0.3 s, or
  after 10 s. The nearest IK solution to the configuration the arm starts from is found
  independently of the filter (``_motion.NearestSolution``: a batched bounded Newton
  iteration from 313 seeds, 2 pi-turn mapping, SLSQP distance minimisation on the
  solution set). Reported: goals
  reached, median time to reach and its ratio to the ideal straight move to the nearest
  solution on the same plant, the joint path / straight distance to the nearest solution
  (median, p90), the goals ending more than 0.5 rad (L-inf) from the nearest solution, the
  joints ending a whole turn (2 pi k) away from it, branch switches the solver reported.
- tracking (``_motion.run_tracking``): a 15 cm (diameter) vertical circle at 0.1 m/s
  around the tool position of the home configuration, orientation turning (0.5 sin(phi)
  about the tool axis, 0.15 sin(2 phi) about the tangent), one lap, with two out-of-reach
  excursions inserted: 'jump' (the target jumps 0.15 m past the arm's reach, radially
  from the shoulder, stays 1.5 s, jumps back and stays 2.5 s) and 'drag' (out and back at
  0.1 m/s, 1.5 s hold). Reported at solver level (the estimate; the plant's figures in the
  CSV): median / p95 position error on the circle, recovery time after each excursion
  (first tick back within tolerance) and the L-inf distance between the configurations
  before and 2.5 s after it (same branch: <= 0.3 rad), and the largest rise of the
  estimate's position error while the out-of-reach target was still (should be 0).

Arms authored elsewhere: ``--urdf PATH:BASE:TIP[:SRDF]`` (``--package-path`` for package://
meshes); with ``--collision`` the solver respects their self-collision model as the node does
(its defaults: the URDF's <collision> geometry, the SRDF's pairs, padding 2 mm, clearance
1 cm), goals come from random configurations, and the nearest solution is the nearest
collision-free one; goals with no collision-free solution are counted apart
(``no_free_solution``) and left out of the other columns. Issue 31's check, the UR5 of
example-robot-data: ``--arms --urdf .../ur5_robot.urdf:base_link:tool0:.../ur5.srdf
--package-path DIR --collision --no-tracking --goals 60``.

Run: ``./smcik bench motion_quality`` (``--quick``: 8 goals per arm; ``--arms``, ``--plant``,
``--set name=value`` for solver settings). Writes benchmarks/results/motion_quality.csv,
motion_quality_tracking.csv and motion_quality.png.
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import _motion as M
import numpy as np

from smcik_ros.solvers import make_solver


def parse_settings(pairs):
    out = {}
    for pair in pairs or ():
        key, value = pair.split('=', 1)
        for cast in (int, float):
            try:
                value = cast(value)
                break
            except ValueError:
                continue
        if value in ('true', 'false', 'True', 'False'):
            value = value.lower() == 'true'
        out[key] = value
    return out


def point_goal_row(name, chain, settings, plant_name, goals_count, seed=0, constraint=None,
                   home=None):
    solver = make_solver('smc', chain, seed=seed, **settings)
    if constraint is not None:
        solver.set_constraints([constraint])
    plant = M.make_plant(plant_name, chain)
    goals = M.reachable_goals(chain, goals_count, 11)
    nearest = M.NearestSolution(chain, seed=3)
    t0 = time.perf_counter()
    home = np.asarray(M.HOMES[name] if home is None else home)
    rec = M.run_point_goals(chain, solver, plant, goals, home, nearest, constraint=constraint)
    wall = time.perf_counter() - t0
    unreachable = sum(not np.isfinite(r['nearest']) for r in rec)
    rec = [r for r in rec if np.isfinite(r['nearest'])]
    ratio = np.array([r['ratio'] for r in rec])
    times = np.array([r['time'] for r in rec])
    ideal = np.array([r['ideal_time'] for r in rec])
    return dict(
        arm=name, dof=chain.nq, goals=len(rec), no_free_solution=unreachable,
        reached=sum(r['reached'] for r in rec),
        median_time_s=float(np.nanmedian(times)),
        median_time_ratio=float(np.nanmedian(times / np.maximum(ideal, 1e-9))),
        path_ratio_median=float(np.median(ratio)), path_ratio_p90=float(np.percentile(ratio, 90)),
        far_05rad=sum(r['far'] > 0.5 for r in rec), turns_2pi=sum(r['turns'] for r in rec),
        switches=sum(r['switches'] for r in rec), wall_s=wall), rec


def third_party_arms(specs, package_paths, collision):
    """Return {name: (chain, collision constraint or None, home)} of ``PATH:BASE:TIP[:SRDF]``
    specs; the home is a collision-free random configuration (seeded)."""
    from smcik_ros.collision import CollisionConstraint, CollisionModel, Scene, \
        self_collision_pairs
    out = {}
    for spec in specs:
        path, base, tip, *rest = spec.split(':')
        chain = M.Chain.from_urdf(path, base, tip)
        constraint = None
        if collision:
            model = CollisionModel.from_urdf(chain, path, package_paths=package_paths)
            pairs = self_collision_pairs(model, rest[0] if rest else None)
            constraint = CollisionConstraint(model, Scene({}), pairs=pairs, padding=0.002,
                                             clearance=0.01)
        rng = np.random.default_rng(5)
        home = chain.random_configuration(rng)
        while constraint is not None and constraint.in_collision(chain.frames(home))[0]:
            home = chain.random_configuration(rng)
        name = path.rsplit('/', 1)[-1].rsplit('.', 1)[0] + ('+collision' if collision else '')
        out[name] = (chain, constraint, home)
    return out


def tracking_row(name, chain, settings, plant_name, seed=0):
    solver = make_solver('smc', chain, seed=seed, **settings)
    plant = M.make_plant(plant_name, chain)
    rec, series = M.run_tracking(chain, name, solver, plant)
    row = dict(arm=name, median_pos_mm=rec['median_pos_mm'], p95_pos_mm=rec['p95_pos_mm'],
               max_pos_mm=rec['max_pos_mm'], median_ori_mrad=rec['median_ori_mrad'],
               p95_ori_mrad=rec['p95_ori_mrad'], plant_median_pos_mm=rec['plant_median_pos_mm'],
               plant_p95_pos_mm=rec['plant_p95_pos_mm'])
    for e in rec['excursions']:
        k = e['kind']
        row[f'{k}_recover_s'] = e['recover_s']
        row[f'{k}_branch_rad'] = e['branch_dist']
        row[f'{k}_rise_mm'] = 1e3 * e['worst_rise_m']
        row[f'{k}_plant_recover_s'] = e['recover_plant_s']
        row[f'{k}_plant_branch_rad'] = e['branch_dist_plant']
    return row, series


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arms', nargs='*', default=list(M.ARM_NAMES), choices=M.ARM_NAMES)
    parser.add_argument('--urdf', action='append', default=[], metavar='PATH:BASE:TIP[:SRDF]',
                        help='an arm authored elsewhere (repeatable); with --collision its '
                             "URDF <collision> geometry and SRDF (default: none) as the node's")
    parser.add_argument('--package-path', action='append', default=[],
                        help='directory holding ROS packages for package:// meshes')
    parser.add_argument('--collision', action='store_true',
                        help='the --urdf arms with their self-collision model, node defaults '
                             '(padding 2 mm, clearance 1 cm); nearest = nearest collision-free')
    parser.add_argument('--goals', type=int, default=30, help='point goals per arm (30)')
    parser.add_argument('--plant', default='follower', choices=sorted(M.PLANTS))
    parser.add_argument('--set', nargs='*', default=[], help='solver settings name=value')
    parser.add_argument('--no-tracking', action='store_true')
    parser.add_argument('--no-goals', action='store_true')
    parser.add_argument('--quick', action='store_true', help='8 goals per arm')
    parser.add_argument('--tag', default='', help='suffix of the output file names')
    args = parser.parse_args()
    if args.quick:
        args.goals = 8
    settings = parse_settings(args.set)
    print(C.machine())
    print('solver: smc', settings or '(defaults)', '| plant:', args.plant)
    arms = {name: (chain, None, None) for name, chain in M.load_arms(args.arms).items()}
    arms.update(third_party_arms(args.urdf, args.package_path, args.collision))
    goal_rows, track_rows, all_series = [], [], {}
    for name, (chain, constraint, home) in arms.items():
        if not args.no_goals:
            row, _ = point_goal_row(name, chain, settings, args.plant, args.goals,
                                    constraint=constraint, home=home)
            goal_rows.append(row)
            print(f'{name:11s} goals: reached {row["reached"]}/{row["goals"]}, path ratio median '
                  f'{row["path_ratio_median"]:.3f} p90 {row["path_ratio_p90"]:.3f}, far '
                  f'{row["far_05rad"]}, 2pi turns {row["turns_2pi"]}, time median '
                  f'{row["median_time_s"]:.2f} s (x{row["median_time_ratio"]:.2f} ideal), '
                  f'switches {row["switches"]}', flush=True)
        if not args.no_tracking and name in M.HOMES:
            row, series = tracking_row(name, chain, settings, args.plant)
            track_rows.append(row)
            all_series[name] = series
            print(f'{name:11s} tracking: median {row["median_pos_mm"]:.3f} mm, p95 '
                  f'{row["p95_pos_mm"]:.3f} mm; jump: back in {row["jump_recover_s"]:.2f} s, '
                  f'branch {row["jump_branch_rad"]:.3f} rad, rise {row["jump_rise_mm"]:.3f} mm; '
                  f'drag: back in {row["drag_recover_s"]:.2f} s, branch '
                  f'{row["drag_branch_rad"]:.3f} rad', flush=True)
    tag = f'_{args.tag}' if args.tag else ''
    if goal_rows:
        fields = ['arm', 'dof', 'goals', 'no_free_solution', 'reached', 'median_time_s',
                  'median_time_ratio',
                  'path_ratio_median', 'path_ratio_p90', 'far_05rad', 'turns_2pi', 'switches']
        C.print_table(goal_rows, fields, title=f'point goals ({args.plant} plant)')
        C.write_csv(f'motion_quality{tag}', goal_rows, fields + ['wall_s'])
    if track_rows:
        fields = ['arm', 'median_pos_mm', 'p95_pos_mm', 'max_pos_mm', 'median_ori_mrad',
                  'jump_recover_s', 'jump_branch_rad', 'jump_rise_mm', 'drag_recover_s',
                  'drag_branch_rad', 'drag_rise_mm']
        C.print_table(track_rows, fields, title='tracking at 100 Hz, 0.1 m/s (solver level)')
        extra = ['p95_ori_mrad', 'plant_median_pos_mm', 'plant_p95_pos_mm',
                 'jump_plant_recover_s', 'jump_plant_branch_rad', 'drag_plant_recover_s',
                 'drag_plant_branch_rad']
        C.write_csv(f'motion_quality_tracking{tag}', track_rows, fields + extra)
    if goal_rows or track_rows:
        plot(goal_rows, track_rows, all_series, f'motion_quality{tag}')


def plot(goal_rows, track_rows, series, name):
    plt = C.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    if goal_rows:
        x = np.arange(len(goal_rows))
        axes[0].bar(x - 0.2, [r['path_ratio_median'] for r in goal_rows], 0.4, label='median')
        axes[0].bar(x + 0.2, [r['path_ratio_p90'] for r in goal_rows], 0.4, label='p90')
        axes[0].axhline(1.15, color='k', ls='--', lw=0.8)
        axes[0].axhline(1.5, color='k', ls=':', lw=0.8)
        axes[0].set_xticks(x, [r['arm'] for r in goal_rows], fontsize=8)
        axes[0].set_ylabel('joint path / straight move to the nearest solution')
        axes[0].legend(fontsize=8)
    for arm, s in series.items():
        t = np.arange(len(s['pos'])) * M.DT
        axes[1].semilogy(t, np.maximum(s['pos'], 1e-7), lw=0.7, label=arm)
    axes[1].axhline(1e-3, color='k', ls='--', lw=0.8)
    axes[1].set_xlabel('time [s] (circle, jump excursion, circle, drag excursion, circle)')
    axes[1].set_ylabel('position error of the estimate [m]')
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, name))


if __name__ == '__main__':
    main()
