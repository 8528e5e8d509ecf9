"""Seed 000 section 6.1: the 90-DOF chain with a CoM line and a smoothness constraint.

Setup:

- chain: ``ball_chain(30, segment_length=0.1, max_angle=1.0, mass=1.0)``: 30 ball
  joints (90 DOF), 3 m long, 1 kg per segment at its middle, straight up (+z) at the start,
  each joint limited to a 1 rad rotation.
- constraints: ``CenterOfMassLine(sigma=0.02)``: the CoM on the vertical line through the
  root; ``ChainSmoothness(neighbours=1, sigma=0.3)``: seed 000 eq. 16 with k = 1 (squared
  geodesic distance between neighbouring joints instead of the paper's unsquared sum).
- task: ``PositionTarget((0.8, 0.5, 2.0))`` for the tip (0.94 m sideways, 1 m below the
  straight tip; reachable with the CoM kept on the line).
- online use as in the paper's animation: ``solver.reset(straight)``, then ``--steps``
  calls of ``solver.step(goal)`` (eq. 15 smoothing, alpha = 0.1); the returned smoothed
  estimate is what is measured. 50 particles; variants ``defaults`` (shipped settings) and
  ``plain`` (refine_count=0, restart_after=0, keep_map=False, anneal_initial=1, branch_hold=False).
- ``--trials`` runs with solver seeds 0, 1, ...; reported: steps per second (1 / median
  step time over all steps of all trials), and the medians over trials of the final tip
  distance to the target and CoM distance from the line, and the first step at which the
  tip is within 1 cm (and stays within 1 cm to the end).

Run: ``./smcik bench chain90`` (``--quick``: 2 trials of 150 steps).
Writes benchmarks/results/chain90.csv and chain90.png (initial and final chain in 3D, and
the errors per step).
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.goals import CenterOfMassLine, ChainSmoothness, PositionTarget
from smcik_ros.model import ball_chain
from smcik_ros.solvers import make_solver

TARGET = np.array([0.8, 0.5, 2.0])
VARIANTS = {'defaults': {}, 'plain': dict(C.PLAIN_SMC)}


def setup():
    chain = ball_chain(30, 0.1, max_angle=1.0, mass=1.0)
    constraints = [CenterOfMassLine(sigma=0.02), ChainSmoothness(neighbours=1, sigma=0.3)]
    return chain, constraints, PositionTarget(TARGET)


def run(chain, constraints, goal, settings, seed, steps):
    solver = make_solver('smc', chain, num_particles=50, seed=seed, **settings)
    solver.set_constraints(constraints)
    q0 = chain.neutral_configuration()
    solver.reset(q0)
    times = np.empty(steps)
    qs = np.empty((steps, chain.nq))
    clock = time.perf_counter
    for k in range(steps):
        t0 = clock()
        qs[k] = solver.step(goal)
        times[k] = clock() - t0
    frames = chain.frames(qs)
    tip_err = np.linalg.norm(frames.point() - TARGET, axis=1)
    com = frames.center_of_mass()
    com_off = np.linalg.norm(com[:, :2], axis=1)
    return times, tip_err, com_off, qs


def settle_step(err, tol=0.01):
    """Return the first index after which ``err`` stays <= tol (nan if it never does)."""
    above = np.flatnonzero(err > tol)
    if len(above) == 0:
        return 0
    if above[-1] == len(err) - 1:
        return np.nan
    return int(above[-1] + 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trials', type=int, default=10)
    parser.add_argument('--steps', type=int, default=400)
    parser.add_argument('--quick', action='store_true', help='2 trials of 150 steps')
    args = parser.parse_args()
    if args.quick:
        args.trials, args.steps = 2, 150
    print(C.machine())
    chain, constraints, goal = setup()
    rows = []
    curves = {}
    finals = {}
    for variant, settings in VARIANTS.items():
        all_t, tips, coms, settles = [], [], [], []
        for seed in range(args.trials):
            t, tip, com, qs = run(chain, constraints, goal, settings, seed, args.steps)
            all_t.append(t)
            tips.append(tip)
            coms.append(com)
            settles.append(settle_step(tip))
            if seed == 0:
                curves[variant] = (tip, com)
                finals[variant] = qs[-1]
        t = np.concatenate(all_t)
        final_tip = np.array([x[-1] for x in tips])
        final_com = np.array([x[-1] for x in coms])
        rows.append(dict(variant=variant, trials=args.trials, steps=args.steps,
                         steps_per_s=1.0 / np.median(t), median_step_ms=1e3 * np.median(t),
                         p90_step_ms=1e3 * np.percentile(t, 90),
                         final_tip_err_m=float(np.median(final_tip)),
                         worst_final_tip_err_m=float(final_tip.max()),
                         final_com_offset_m=float(np.median(final_com)),
                         worst_final_com_offset_m=float(final_com.max()),
                         median_settle_step_1cm=float(np.nanmedian(settles))
                         if not np.all(np.isnan(settles)) else np.nan,
                         settled_trials=int(np.sum(~np.isnan(settles)))))
    fields = ['variant', 'trials', 'steps', 'steps_per_s', 'median_step_ms', 'p90_step_ms',
              'final_tip_err_m', 'worst_final_tip_err_m', 'final_com_offset_m',
              'worst_final_com_offset_m', 'median_settle_step_1cm', 'settled_trials']
    C.print_table(rows, fields, title='90-DOF chain, 50 particles (paper: ~60 frames/s)')
    C.write_csv('chain90', rows, fields)

    plt = C.pyplot()
    fig = plt.figure(figsize=(10, 4))
    ax = fig.add_subplot(1, 2, 1, projection='3d')
    q0 = chain.neutral_configuration()
    for label, q, style in [('initial', q0, 'k.-')] + [
            (f'final ({v})', finals[v], s) for v, s in zip(VARIANTS, ('C0.-', 'C1.-'))]:
        pts = chain.frames(q).link_positions()[0]
        ax.plot(pts[:, 0], pts[:, 1], pts[:, 2], style, ms=2, label=label)
        com = chain.center_of_mass(q)
        ax.scatter(*com, color=style[:2] if style[0] == 'C' else 'k', marker='x', s=30)
    ax.plot([0, 0], [0, 0], [0, 3], 'g:', lw=1, label='CoM line')
    ax.scatter(*TARGET, color='r', marker='*', s=60, label='target')
    ax.set_xlim(-1, 1)
    ax.set_ylim(-1, 1)
    ax.set_zlim(0, 3)
    ax.legend(fontsize=7, loc='upper left')
    ax.set_title('seed 0: initial and final chain (x: CoM)', fontsize=9)
    ax2 = fig.add_subplot(1, 2, 2)
    for v, c in zip(VARIANTS, ('C0', 'C1')):
        tip, com = curves[v]
        ax2.semilogy(tip, c + '-', label=f'tip distance ({v})')
        ax2.semilogy(com, c + ':', label=f'CoM offset ({v})')
    ax2.set_xlabel('step (online, smoothed estimate)')
    ax2.set_ylabel('[m]')
    ax2.grid(alpha=0.3, which='both')
    ax2.legend(fontsize=7)
    ax2.set_title('errors per step, seed 0', fontsize=9)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'chain90'))


if __name__ == '__main__':
    main()
