"""Ablation of the SMC filter's policies: what each addition to Algorithm 1 contributes.

Variants (settings of ``make_solver('smc', ...)``, each row adds one policy to the previous;
every policy of ``solvers/smc/policies/`` is switched off by its setting):

1. ``Algorithm 1 alone``: refine_count=0, restart_after=0, keep_map=False,
   anneal_initial=1, minimal_motion=False, branch_hold=False, seed_rows=0 (the paper's
   filter; the multi-scale proposal and the lag-free smoothing_alpha=1 stay);
2. ``+ refinement`` (refine_count=4, the LM move step);
3. ``+ restarts`` (restart_after=4, re-seeding when the best cost stalls; annealing of
   Sigma_z back to its default anneal_initial=10);
4. ``+ minimal motion`` (minimal_motion=True, search_count=0: motion prior, null-space
   pull, nearest selection, whole-turn mapping);
5. ``+ nearest search`` (search_count=32: the searchers of a new goal; recovery off);
6. ``+ branch hold`` (keep_map=True, branch_hold=True; recovery off);
7. ``+ recovery`` (recovery_iterations=300: back on the branch left after an excursion);
8. ``+ seed-first solve`` (seed_rows=8: solve() refines the seed, then proposal draws, one
   by one in a compiled kernel before the filter runs; online steps are unchanged): the
   shipped defaults.

Per arm (``--arms``; urdf/smcik_arm.urdf and the UR5-type DH arm by default):

- round trip: ``solve(fk(q_true), q_seed, max_iters=200, tol=1e-3)`` from uniform random
  seeds (``--trials``, Generator seeded per arm): success %, median solve time [ms]
  (machine dependent: note the load), and the median distance from the seed [rad];
- point goals (``--goals`` random reachable poses one after another, follower plant, 10 s
  per goal; ``_motion.run_point_goals``): goals reached, path ratio median / p90 and
  far-from-nearest count over the reached goals, 2 pi turns;
- tracking (``_motion.run_tracking``: the circle at 0.1 m/s with a jump and a drag
  excursion): median / p95 position error [mm] (solver level) and the largest L-inf
  distance from the configuration held before an excursion to the one after it [rad].

Run: ``./smcik bench smc_ablation`` (``--quick``: 40 trials, 6 goals, arm7 only).
Writes benchmarks/results/smc_ablation.csv and .png. docs/smc.md quotes the table.
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import _motion as M
import numpy as np

from smcik_ros.solvers import make_solver

ALONE = dict(refine_count=0, restart_after=0, keep_map=False, anneal_initial=1.0,
             minimal_motion=False, branch_hold=False, seed_rows=0)
MOTION = dict(ALONE, refine_count=4, restart_after=4, anneal_initial=10.0,
              minimal_motion=True)
VARIANTS = [
    ('Algorithm 1 alone', ALONE),
    ('+ refinement', dict(ALONE, refine_count=4)),
    ('+ restarts', dict(ALONE, refine_count=4, restart_after=4, anneal_initial=10.0)),
    ('+ minimal motion', dict(MOTION, search_count=0)),
    ('+ nearest search', dict(MOTION, recovery_iterations=0)),
    ('+ branch hold', dict(seed_rows=0, recovery_iterations=0)),
    ('+ recovery', dict(seed_rows=0)),
    ('+ seed-first solve (defaults)', {}),
]


def round_trip(chain, settings, trials, arm_index):
    solver = make_solver('smc', chain, seed=0, **settings)
    rng = np.random.default_rng([arm_index, 17])
    ok, times, dist = 0, [], []
    for _ in range(trials):
        goal = chain.fk(chain.random_configuration(rng))
        seed = chain.random_configuration(rng)
        t0 = time.perf_counter()
        result = solver.solve(goal, seed, max_iters=200, tol=1e-3)
        times.append(time.perf_counter() - t0)
        ok += result.success
        if result.success:
            dist.append(np.linalg.norm(result.q - seed))
    return dict(success_pct=100.0 * ok / trials, median_ms=1e3 * float(np.median(times)),
                seed_distance=float(np.median(dist)) if dist else np.nan)


def point_goals(name, chain, settings, goals):
    solver = make_solver('smc', chain, seed=0, **settings)
    rec = M.run_point_goals(chain, solver, M.make_plant('follower', chain),
                            M.reachable_goals(chain, goals, 11), np.asarray(M.HOMES[name]),
                            M.NearestSolution(chain, seed=3))
    reached = [r for r in rec if r['reached']]
    ratio = np.array([r['ratio'] for r in reached]) if reached else np.array([np.nan])
    return dict(reached=f'{len(reached)}/{len(rec)}',
                path_ratio_median=float(np.median(ratio)),
                path_ratio_p90=float(np.percentile(ratio, 90)),
                far_05rad=sum(r['far'] > 0.5 for r in reached),
                turns_2pi=sum(r['turns'] for r in rec))


def tracking(name, chain, settings):
    solver = make_solver('smc', chain, seed=0, **settings)
    rec, _ = M.run_tracking(chain, name, solver, M.make_plant('ideal', chain))
    return dict(track_median_mm=rec['median_pos_mm'], track_p95_mm=rec['p95_pos_mm'],
                excursion_branch_rad=max(e['branch_dist'] for e in rec['excursions']),
                excursion_recover_s=max(e['recover_s'] for e in rec['excursions']))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--arms', nargs='+', default=['arm7', 'ur5_like'], choices=M.ARM_NAMES)
    parser.add_argument('--trials', type=int, default=200, help='round trips per variant')
    parser.add_argument('--goals', type=int, default=15, help='point goals per variant')
    parser.add_argument('--quick', action='store_true')
    args = parser.parse_args()
    if args.quick:
        args.trials, args.goals, args.arms = 40, 6, ['arm7']
    print(C.machine())
    arms = M.load_arms(args.arms)
    rows = []
    for arm_index, (name, chain) in enumerate(arms.items()):
        for label, settings in VARIANTS:
            row = dict(arm=name, variant=label)
            row.update(round_trip(chain, settings, args.trials, arm_index))
            row.update(point_goals(name, chain, settings, args.goals))
            row.update(tracking(name, chain, settings))
            rows.append(row)
            print(f'{name:9s} {label:26s} success {row["success_pct"]:5.1f} % '
                  f'{row["median_ms"]:.2f} ms | goals {row["reached"]} ratio '
                  f'{row["path_ratio_median"]:.3f}/{row["path_ratio_p90"]:.3f} far '
                  f'{row["far_05rad"]} turns {row["turns_2pi"]} | tracking '
                  f'{row["track_median_mm"]:.3g}/{row["track_p95_mm"]:.3g} mm, excursion '
                  f'{row["excursion_branch_rad"]:.2f} rad {row["excursion_recover_s"]:.2f} s',
                  flush=True)
    fields = ['arm', 'variant', 'success_pct', 'median_ms', 'seed_distance', 'reached',
              'path_ratio_median', 'path_ratio_p90', 'far_05rad', 'turns_2pi',
              'track_median_mm', 'track_p95_mm', 'excursion_branch_rad', 'excursion_recover_s']
    C.print_table(rows, fields, title='SMC ablation (each row adds one policy)')
    C.write_csv('smc_ablation', rows, fields)
    plt = C.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    labels = [v[0] for v in VARIANTS]
    y = np.arange(len(labels))
    for i, name in enumerate(arms):
        sel = [r for r in rows if r['arm'] == name]
        h = 0.8 / len(arms)
        axes[0].barh(y + i * h, [r['success_pct'] for r in sel], h, label=name)
        axes[1].barh(y + i * h, [r['path_ratio_p90'] for r in sel], h, label=name)
        axes[2].barh(y + i * h, [max(r['track_p95_mm'], 1e-6) for r in sel], h, label=name)
    axes[0].set_xlabel('round-trip success % (200 iterations, 1 mm / 0.01 rad)')
    axes[1].set_xlabel('joint path / straight move to the nearest solution, p90')
    axes[1].axvline(1.5, color='k', ls=':', lw=0.8)
    axes[2].set_xlabel('tracking p95 error [mm] (log)')
    axes[2].set_xscale('log')
    for ax in axes:
        ax.set_yticks(y + 0.4 - 0.4 / len(arms), labels, fontsize=7)
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis='x')
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'smc_ablation'))


if __name__ == '__main__':
    main()
