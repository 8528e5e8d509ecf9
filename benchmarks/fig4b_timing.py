"""Seed 000 Fig. 4b: time per iteration against the number of DOF, SMC vs Jacobian IK.

Setup:

- chains: ``ball_chain(J, segment_length=3 / J, max_angle=pi / 2)``, J ball joints
  (3 J DOF; J = 1, 2, 4, 8, 10, 15, 20, 30, 50, 70, 100, i.e. 3 .. 300 DOF), 3 units long,
  straight at the start; PositionTargets at a point 2 units from the start tip (the tip
  of the configuration whose joints all turn by the same angle about x, chosen by
  bisection, as in fig4a_success) turned about +z by 9 degrees per step (40 goals, then
  again), so that every iteration works on an unsolved goal (a reached goal makes the SMC
  skip its refinement and the Jacobian step trivial).
- one iteration = one online ``solver.step(goal_k)`` from the straight start. Per
  (method, DOF): median over up to ``--repeats`` steps (at least 5, at most ``--budget``
  seconds per cell), after 3 warm-up steps.
- methods: SMC with 20 and 50 particles, ``plain`` (refine_count=0, restart_after=0,
  keep_map=False, anneal_initial=1, branch_hold=False) and the shipped ``defaults``; the
  Jacobian transpose and damped least squares ('dls', damping 1.0 in task sigmas) solvers,
  ``make_solver('jacobian', chain, method=..., finite_difference=True|False)``: with
  central finite-difference Jacobians (the paper's set-up) and with the analytic ones.
  The Jacobian rows are skipped if that solver is not registered yet.

Run: ``./smcik bench fig4b_timing`` (``--quick``: fewer DOF and repeats).
Writes benchmarks/results/fig4b_timing.csv and .png (log-log).
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.goals import PositionTarget
from smcik_ros.model import ball_chain
from smcik_ros.rotations import quat_from_rotvec
from smcik_ros.solvers import make_solver

JOINTS = (1, 2, 4, 8, 10, 15, 20, 30, 50, 70, 100)
QUICK_JOINTS = (1, 4, 10, 30, 100)


def methods():
    """Return [(label, solver name, settings)] of the compared methods."""
    out = []
    for p in (20, 50):
        out.append((f'smc-{p} plain', 'smc', dict(C.PLAIN_SMC, num_particles=p, seed=0)))
        out.append((f'smc-{p} defaults', 'smc', dict(num_particles=p, seed=0)))
    if 'jacobian' in C.load_solvers():
        for m in ('transpose', 'dls'):
            for fd in (True, False):
                out.append((f'jacobian-{m} {"finite-diff" if fd else "analytic"}', 'jacobian',
                            dict(method=m, finite_difference=fd)))
    return out


def goal_for(chain):
    """Return a PositionTarget 2 units from the straight chain's tip (same bend per joint)."""
    return PositionTarget(target_point(chain))


def moving_goals(chain, count=40):
    """Return ``count`` PositionTargets: the goal_for point turned about +z in 9 deg steps."""
    p = target_point(chain)
    out = []
    for k in range(count):
        a = 2 * np.pi * k / count
        rot = np.array([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0],
                        [0.0, 0.0, 1.0]])
        out.append(PositionTarget(rot @ p))
    return out


def target_point(chain):
    """Return the (3,) point 2 units from the straight chain's tip (same bend per joint)."""
    q0 = chain.neutral_configuration()
    start = chain.fk(q0)[:3, 3]
    bq = chain.ball_q_index

    def tip(angle):
        q = q0.copy()
        q[bq] = quat_from_rotvec(np.tile([angle, 0.0, 0.0], (len(bq), 1)))
        return chain.fk(q)[:3, 3]

    lo, hi = 0.0, np.pi / 2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.linalg.norm(tip(mid) - start) < 2.0:
            lo = mid
        else:
            hi = mid
    return tip(hi)


def time_method(chain, goals, name, settings, repeats, budget):
    solver = make_solver(name, chain, **settings)
    q0 = chain.neutral_configuration()
    solver.reset(q0)
    for k in range(3):
        solver.step(goals[k])
    times = []
    spent = 0.0
    clock = time.perf_counter
    while len(times) < repeats and (spent < budget or len(times) < 5):
        goal = goals[(len(times) + 3) % len(goals)]
        t0 = clock()
        solver.step(goal)
        dt = clock() - t0
        times.append(dt)
        spent += dt
    return np.array(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeats', type=int, default=400, help='max timed steps per cell')
    parser.add_argument('--budget', type=float, default=2.0, help='max seconds per cell')
    parser.add_argument('--quick', action='store_true', help='5 chain sizes, 40 steps')
    args = parser.parse_args()
    joints = JOINTS
    if args.quick:
        joints, args.repeats, args.budget = QUICK_JOINTS, 40, 0.3
    print(C.machine())
    rows = []
    meths = methods()
    for j in joints:
        chain = ball_chain(j, 3.0 / j, max_angle=np.pi / 2)
        goals = moving_goals(chain)
        for label, name, settings in meths:
            t = time_method(chain, goals, name, settings, args.repeats, args.budget)
            rows.append(dict(method=label, dof=3 * j, median_ms=1e3 * np.median(t),
                             p90_ms=1e3 * np.percentile(t, 90), samples=len(t)))
        print(f'{3 * j:4d} DOF: ' + ', '.join(f'{r["method"]} {r["median_ms"]:.3g} ms'
                                              for r in rows[-len(meths):]), flush=True)
    fields = ['method', 'dof', 'median_ms', 'p90_ms', 'samples']
    print()
    # Wide table: rows DOF, columns methods.
    wide = []
    for j in joints:
        w = {'dof': 3 * j}
        for r in rows:
            if r['dof'] == 3 * j:
                w[r['method']] = r['median_ms']
        wide.append(w)
    C.print_table(wide, ['dof'] + [m[0] for m in meths],
                  title='median time per iteration [ms]')
    C.write_csv('fig4b_timing', rows, fields)
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = {'smc-20 plain': 'C0o-', 'smc-50 plain': 'C1o-', 'smc-20 defaults': 'C0s--',
              'smc-50 defaults': 'C1s--'}
    for i, (label, _, _) in enumerate(meths):
        xs = [r['dof'] for r in rows if r['method'] == label]
        ys = [r['median_ms'] for r in rows if r['method'] == label]
        style = styles.get(label, f'C{2 + i % 6}{"^-" if "finite" in label else "v:"}')
        hollow = 'transpose' in label   # transpose and dls cost the same: keep both visible
        ax.plot(xs, ys, style, label=label, ms=8 if hollow else 4,
                mfc='none' if hollow else None)
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('degrees of freedom')
    ax.set_ylabel('median time per iteration [ms]')
    ax.set_title('time per iteration vs DOF (ball-joint chains, 1 thread)', fontsize=9)
    ax.grid(alpha=0.3, which='both')
    ax.legend(fontsize=7)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'fig4b_timing'))


if __name__ == '__main__':
    main()
