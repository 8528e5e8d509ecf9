"""Round-trip IK on the package's own arms, every registered solver.

Setup:

- arms: urdf/smcik_arm.urdf (7-DOF, base_link -> tool0) and urdf/smcik_arm6.urdf (6-DOF).
- trial t: q_true = ``chain.random_configuration(rng)`` (uniform inside the limits,
  numpy Generator seeded with (arm, t)); goal = ``chain.fk(q_true)`` as a full (4, 4) pose;
  ``solver.solve(goal, q_seed, max_iters=100000, tol=(1e-3, 1e-2), timeout=0.05)``
  (1 mm, 0.01 rad, 50 ms wall-clock budget), from two seeds:
  ``neutral`` = ``chain.neutral_configuration()`` and ``random`` = another uniform draw of
  the same Generator.
- solvers: every name in ``available_solvers()``; 'jacobian' once per method
  (transpose, pinv, dls, sr; analytic Jacobians), 'smc' with its shipped defaults
  (100 particles); a solver that refuses the chain (FABRIK needs ball joints) is
  skipped. Each solver object is built once per arm (seed 0 where it has a seed setting)
  and reused for all trials, as the node does.
- reported per (arm, solver, seed kind): success % (``IKResult.success``), median and p95
  wall time of ``solve`` [ms] (all trials, failures included: they take the full 50 ms),
  median iterations of the successful trials, and the median final position error.

Run: ``./smcik bench round_trip --trials 500`` (``--quick``: 30 trials).
Writes benchmarks/results/round_trip.csv and .png. The time budget makes the success rates
machine dependent: run it on an idle machine.
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver

ARMS = {'arm7': C.ARM7, 'arm6': C.ARM6}
TOL = (1e-3, 1e-2)
TIMEOUT = 0.05


def build(name, chain, settings):
    if C.accepts_setting(name, 'seed'):
        settings = dict(settings, seed=0)
    return make_solver(name, chain, **settings)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trials', type=int, default=500, help='trials per cell (500)')
    parser.add_argument('--quick', action='store_true', help='30 trials per cell')
    parser.add_argument('--solvers', nargs='*', default=None,
                        help='labels to run (default: all), e.g. smc jacobian-dls')
    args = parser.parse_args()
    if args.quick:
        args.trials = 30
    print(C.machine())
    variants = C.solver_variants()
    if args.solvers:
        variants = [v for v in variants if v[0] in args.solvers]
    print('solvers:', ', '.join(v[0] for v in variants))
    rows = []
    for arm, path in ARMS.items():
        chain = Chain.from_urdf(path)
        problems = []
        for t in range(args.trials):
            rng = np.random.default_rng([7, chain.nq, t])
            q_true = chain.random_configuration(rng)
            problems.append((chain.fk(q_true), chain.random_configuration(rng)))
        for label, name, settings in variants:
            try:
                solver = build(name, chain, settings)
            except ParameterError as exc:
                print(f'{arm} {label}: skipped ({str(exc)[:90]}...)')
                continue
            for seed_kind in ('neutral', 'random'):
                ok, secs, iters, errs = [], [], [], []
                for goal, q_rand in problems:
                    q_seed = chain.neutral_configuration() if seed_kind == 'neutral' else q_rand
                    t0 = time.perf_counter()
                    res = solver.solve(goal, q_seed, max_iters=100000, tol=TOL,
                                       timeout=TIMEOUT)
                    secs.append(time.perf_counter() - t0)
                    ok.append(res.success)
                    iters.append(res.iterations)
                    errs.append(res.position_error)
                ok, secs, iters = np.array(ok), np.array(secs), np.array(iters)
                rows.append(dict(
                    arm=arm, solver=label, seed=seed_kind, trials=len(ok),
                    success_pct=100.0 * ok.mean(), median_ms=1e3 * np.median(secs),
                    p95_ms=1e3 * np.percentile(secs, 95),
                    median_iters_success=float(np.median(iters[ok])) if ok.any() else np.nan,
                    median_pos_err_m=float(np.median(errs))))
                r = rows[-1]
                print(f'{arm} {label:>20s} {seed_kind:>7s}: {r["success_pct"]:5.1f} %  '
                      f'median {r["median_ms"]:.3g} ms  p95 {r["p95_ms"]:.3g} ms  '
                      f'iters {r["median_iters_success"]}', flush=True)
    fields = ['arm', 'solver', 'seed', 'trials', 'success_pct', 'median_ms', 'p95_ms',
              'median_iters_success', 'median_pos_err_m']
    print()
    C.print_table(rows, fields, title=f'round trip, tol {TOL}, timeout {TIMEOUT} s')
    C.write_csv('round_trip', rows, fields)

    plt = C.pyplot()
    labels = list(dict.fromkeys(r['solver'] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * len(labels) + 2.0))
    cells = [(a, s) for a in ARMS for s in ('neutral', 'random')]
    height = 0.8 / len(cells)
    y = np.arange(len(labels))
    for i, (arm, seed_kind) in enumerate(cells):
        sel = {r['solver']: r for r in rows if r['arm'] == arm and r['seed'] == seed_kind}
        nan = dict(success_pct=np.nan, median_ms=np.nan, p95_ms=np.nan)
        sel = [sel.get(s, nan) for s in labels]
        axes[0].barh(y + i * height, [r['success_pct'] for r in sel], height,
                     label=f'{arm}, {seed_kind} seed')
        axes[1].barh(y + i * height, [r['median_ms'] for r in sel], height,
                     xerr=[np.zeros(len(labels)), [r['p95_ms'] - r['median_ms'] for r in sel]],
                     capsize=2)
    for ax in axes:
        ax.set_yticks(y + 0.4 - height / 2, labels, fontsize=8)
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis='x')
    axes[0].set_xlabel('success % (1 mm, 0.01 rad, 50 ms)')
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel('solve time [ms] (median, whisker p95)')
    fig.suptitle(f'round trip, {args.trials} trials per bar', fontsize=9)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'round_trip'))


if __name__ == '__main__':
    main()
