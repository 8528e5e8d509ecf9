"""Seed 000 Fig. 4a: success rate against the number of particles and of DOF.

Setup (decided here; the paper gives only "a chain whose number of DOF is parameterizable",
"0.001 unit for a 2 units original distance to target within 200 iterations", 1000 runs):

- chains of 3-DOF ball joints: 1, 4, 10, 30 joints = 3, 12, 30, 90 DOF, built with
  ``ball_chain(J, segment_length=3 / J, max_angle=pi / 2)``: the total length is fixed
  at 3 units (so the one-joint chain can still reach targets 2 units from its tip), every
  ball joint is limited to a rotation of pi/2 from straight, the chain starts straight
  (``neutral_configuration``, pointing up +z).
- targets: for each trial, a random rotation vector v_i per joint, drawn uniformly inside the
  limits (``chain.random_configuration``); the configuration exp(s v_i) with the scale s in
  (0, 1] found by bisection so that its tip lies 2 units (+-1 %) from the start tip (a draw
  whose s = 1 tip is closer than 2 units is redrawn). The target is that tip position
  (PositionTarget, the tip origin), so it is always reachable. The trial's targets depend
  only on (DOF, trial index): every particle count and variant sees the same targets.
- success: ``solver.solve(PositionTarget, q_seed=straight, max_iters=200, tol=1e-3)``
  returns success, i.e. the best particle of some iteration within 200 had its tip within
  0.001 unit of the target.
- particles: 5, 10, 20, 30, 50. Solver seed = a hash of (variant, DOF, particles, trial).
- variants: ``plain``: the paper's filter, Algorithm 1 (refine_count=0, restart_after=0,
  keep_map=False, anneal_initial=1.0, branch_hold=False, and init_uniform_fraction=0:
  every particle starts at the start configuration x0); the multi-scale proposal (each
  particle's noise scaled by a log-uniform factor in [min_noise_scale=0.01, 1]) stays on,
  as in the shipped filter.
  ``defaults``: the shipped SmcSettings (refinement, restarts, elitism, annealing, half
  the particles drawn uniformly at the start of solve()). Both: joint noise 0.1 rad per axis,
  sigma_position 0.01 unit. ``fixed-noise`` (only with --variants): plain with
  min_noise_scale=1, a single Gaussian random walk with std 0.1 rad.

Run: ``./smcik bench fig4a_success --trials 1000`` (two cores via multiprocessing;
``--quick`` = 20 trials). Writes benchmarks/results/fig4a_success.csv and .png
(``--out NAME`` for another name, e.g. the fixed-noise run:
``./smcik bench fig4a_success --variants fixed-noise --trials 100 --out fig4a_fixed_noise``).
"""

import argparse
import multiprocessing as mp
import time
import zlib

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.goals import PositionTarget
from smcik_ros.model import ball_chain
from smcik_ros.rotations import quat_from_rotvec, quat_to_rotvec
from smcik_ros.solvers import make_solver

DOFS = (3, 12, 30, 90)
PARTICLES = (5, 10, 20, 30, 50)
LENGTH = 3.0
DISTANCE = 2.0
MAX_ANGLE = np.pi / 2
VARIANTS = {
    'plain': dict(C.PLAIN_SMC, init_uniform_fraction=0.0),
    'defaults': {},
    'fixed-noise': dict(C.PLAIN_SMC, init_uniform_fraction=0.0, min_noise_scale=1.0),
}

_CHAINS = {}


def chain_for(dof):
    if dof not in _CHAINS:
        joints = dof // 3
        _CHAINS[dof] = ball_chain(joints, LENGTH / joints, max_angle=MAX_ANGLE)
    return _CHAINS[dof]


def make_target(chain, rng):
    """Return (q_target, tip (3,)) with |tip - start tip| = 2 units +- 1 %."""
    q0 = chain.neutral_configuration()
    start = chain.fk(q0)[:3, 3]
    bq = chain.ball_q_index
    while True:
        v = quat_to_rotvec(chain.random_configuration(rng)[bq])       # (J, 3)

        def config(s):
            q = q0.copy()
            q[bq] = quat_from_rotvec(s * v)
            return q

        def dist(s):
            return np.linalg.norm(chain.fk(config(s))[:3, 3] - start)

        if dist(1.0) < DISTANCE:
            continue
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if dist(mid) < DISTANCE:
                lo = mid
            else:
                hi = mid
            if abs(dist(hi) - DISTANCE) <= 0.01 * DISTANCE:
                break
        q = config(hi)
        d = dist(hi)
        if abs(d - DISTANCE) <= 0.01 * DISTANCE and chain.within_limits(q):
            return q, chain.fk(q)[:3, 3]


def targets_for(dof, trials):
    chain = chain_for(dof)
    rng = np.random.default_rng([4, dof])
    return np.array([make_target(chain, rng)[1] for _ in range(trials)])


def run_chunk(job):
    variant, dof, particles, first, targets = job
    chain = chain_for(dof)
    q0 = chain.neutral_configuration()
    out = []
    for k, target in enumerate(targets):
        trial = first + k
        seed = zlib.crc32(f'{variant}/{dof}/{particles}/{trial}'.encode())
        solver = make_solver('smc', chain, num_particles=particles, seed=seed,
                             **VARIANTS[variant])
        t0 = time.perf_counter()
        res = solver.solve(PositionTarget(target), q0, max_iters=200, tol=1e-3)
        out.append((res.success, res.iterations, res.position_error,
                    time.perf_counter() - t0))
    return variant, dof, particles, out


def run_all(args):
    """Run every (variant, DOF, particles) cell; return the table rows."""
    t_start = time.perf_counter()
    targets = {dof: targets_for(dof, args.trials) for dof in DOFS}
    jobs = []
    for variant in args.variants:
        for dof in DOFS:
            for particles in PARTICLES:
                for first in range(0, args.trials, args.chunk):
                    jobs.append((variant, dof, particles, first,
                                 targets[dof][first:first + args.chunk]))
    # Chunk-major order: every cell gets its first chunk before any gets a second, so a run
    # stopped by --max-minutes has about the same number of trials in every cell.
    jobs.sort(key=lambda j: (j[3], -j[1] * j[2]))
    results = {}
    done = 0
    with mp.Pool(args.workers) as pool:
        for variant, dof, particles, out in pool.imap_unordered(run_chunk, jobs):
            results.setdefault((variant, dof, particles), []).extend(out)
            done += 1
            minutes = (time.perf_counter() - t_start) / 60.0
            if done % 20 == 0 or done == len(jobs):
                print(f'{done}/{len(jobs)} chunks, {minutes:.1f} min', flush=True)
            if args.max_minutes and minutes > args.max_minutes and done < len(jobs):
                print(f'stopping after {minutes:.1f} min (--max-minutes): {done}/{len(jobs)} '
                      'chunks done', flush=True)
                pool.terminate()
                break
    rows = []
    for variant in args.variants:
        for dof in DOFS:
            for particles in PARTICLES:
                res = results.get((variant, dof, particles), [])
                ok = np.array([r[0] for r in res], dtype=bool)
                iters = np.array([r[1] for r in res])
                err = np.array([r[2] for r in res])
                secs = np.array([r[3] for r in res])
                rows.append(dict(
                    variant=variant, dof=dof, particles=particles, trials=len(res),
                    success_pct=100.0 * ok.mean() if len(res) else np.nan,
                    median_iters_success=float(np.median(iters[ok])) if ok.any() else np.nan,
                    median_final_error=float(np.median(err)) if len(res) else np.nan,
                    median_ms_per_trial=1e3 * float(np.median(secs)) if len(res) else np.nan))
    print(f'total {time.perf_counter() - t_start:.0f} s')
    return rows


FIELDS = ['variant', 'dof', 'particles', 'trials', 'success_pct', 'median_iters_success',
          'median_final_error', 'median_ms_per_trial']


def read_rows(name):
    import csv
    import os
    with open(os.path.join(C.RESULTS, f'{name}.csv')) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ('dof', 'particles', 'trials'):
            r[k] = int(r[k])
        for k in ('success_pct', 'median_iters_success', 'median_final_error',
                  'median_ms_per_trial'):
            r[k] = float(r[k])
    return rows


def report(rows, out):
    variants = list(dict.fromkeys(r['variant'] for r in rows))
    C.print_table(rows, FIELDS)
    for variant in variants:
        print(f'success % ({variant}); rows: DOF, columns: particles')
        print('  DOF ' + ''.join(f'{p:>8d}' for p in PARTICLES))
        for dof in DOFS:
            print(f'{dof:5d} ' + ''.join(
                f'{r["success_pct"]:8.1f}' for r in rows
                if r['variant'] == variant and r['dof'] == dof))
        print()
    plt = C.pyplot()
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4),
                             sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        sel = [r for r in rows if r['variant'] == variant]
        for dof in DOFS:
            ax.plot(PARTICLES, [r['success_pct'] for r in sel if r['dof'] == dof], 'o-',
                    label=f'{dof} DOF')
        trials = sorted({r['trials'] for r in sel})
        span = f'{trials[0]}' if len(trials) == 1 else f'{trials[0]}-{trials[-1]}'
        ax.set_xlabel('particles')
        ax.set_title(f'{variant} ({span} trials/point)', fontsize=9)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel('success % (error < 0.001 in 200 iterations)')
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, out))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trials', type=int, default=1000, help='trials per cell (1000)')
    parser.add_argument('--quick', action='store_true', help='20 trials per cell')
    parser.add_argument('--variants', nargs='+', default=['plain', 'defaults'],
                        choices=sorted(VARIANTS))
    parser.add_argument('--workers', type=int, default=min(2, mp.cpu_count()))
    parser.add_argument('--chunk', type=int, default=50, help='trials per work unit')
    parser.add_argument('--max-minutes', type=float, default=0.0,
                        help='stop after this many minutes and report the trials done so far '
                             '(work is spread evenly over the cells; 0: no limit)')
    parser.add_argument('--from-csv', action='store_true',
                        help='do not run: re-print and re-plot benchmarks/results/<out>.csv')
    parser.add_argument('--out', default='fig4a_success',
                        help='output name in benchmarks/results (default fig4a_success)')
    args = parser.parse_args()
    if args.quick:
        args.trials = 20
    print(C.machine())
    if args.from_csv:
        report(read_rows(args.out), args.out)
        return
    print(f'{args.trials} trials per cell, variants {args.variants}, {args.workers} workers')
    rows = run_all(args)
    C.write_csv(args.out, rows, FIELDS)
    report(rows, args.out)


if __name__ == '__main__':
    main()
