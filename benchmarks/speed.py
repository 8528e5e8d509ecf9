"""Speed targets of the core: SMC step time, 90-DOF chain step rate, batched FK.

Setup (all single-threaded numpy, times from time.perf_counter, medians over many calls):

(a) one online SMC filter step (``solver.step(goal)``) on the 7-DOF arm
    urdf/smcik_arm.urdf, 100 particles, solver seed 0, reset to the neutral configuration
    and run 50 steps on the first goal; then ``--steps`` timed steps (after 20 untimed).
    Goals: PoseTargets on a 2 cm circle (100 goals, 1.3 mm apart, fixed orientation)
    around the FK of a random in-limit configuration (numpy Generator seed 0): a new goal
    every step ("moving goal", the filter always works), or the first goal all along ("held
    goal": once it is reached to ~0.3 um the filter skips its refinement,
    refine_min_cost). Settings: the shipped defaults (refine_count=4, refine_steps=3),
    refine_steps=1, and refine_count=0 (the plain Algorithm 1 step with the multi-scale
    proposal; no refinement). Target: median <= 0.3 ms.
(b) the 90-DOF chain: Chain.ball_chain(30, segment_length=0.1, max_angle=1.0, mass=1.0)
    (30 ball joints, 3 m long, pointing up), 50 particles, constraints
    CenterOfMassLine(sigma=0.02) (vertical through the root) and ChainSmoothness(sigma=0.3),
    PositionTarget (0.8, 0.5, 2.0) (held: the soft constraints keep the cost above
    refine_min_cost, so the refinement always runs); steps per second = 1 / median step
    time over ``--steps`` / 4 online steps. Defaults and refine_count=0. Target >= 300 steps/s
    (seed 000 section 6.1: ~60 frames/s on a 2007 laptop).
(c) forward kinematics of 1000 random configurations of the 7-DOF arm in one batched call
    (``chain.fk(q)``, (1000, 4, 4)), median over ``--repeats`` calls; target <= 1 ms.
    Also ``chain.frames(q)`` + ``frames.jacobian()`` for 100 configurations (FK+Jacobian).

Run: ``./smcik bench speed`` (``--quick`` for a fast check).
Writes benchmarks/results/speed.csv and speed.png.
"""

import argparse

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.goals import CenterOfMassLine, ChainSmoothness, PoseTarget, PositionTarget
from smcik_ros.kinematics import Chain
from smcik_ros.solvers import make_solver


def step_times(solver, goal, steps, warmup=20):
    """Return ``steps`` wall times [s] of ``solver.step(goal)`` after ``warmup`` steps."""
    return C.time_calls(lambda: solver.step(goal), steps, warmup=warmup)


def moving_goals(chain, rng, count=100, radius=0.02):
    """Return ``count`` PoseTargets on a circle of ``radius`` [m] around a random reachable
    pose (fixed orientation): consecutive goals are 1.3 mm apart, so every step works."""
    pose = chain.fk(chain.random_configuration(rng))
    goals = []
    for k in range(count):
        a = 2 * np.pi * k / count
        p = pose.copy()
        p[:3, 3] += radius * np.array([np.cos(a) - 1.0, np.sin(a), 0.0])
        goals.append(PoseTarget(p))
    return goals


def bench_arm_step(steps):
    chain = C_arm7()
    rng = np.random.default_rng(0)
    goals = moving_goals(chain, rng)
    held = goals[0]
    rows = []
    cases = (('defaults, moving goal', {}, True), ('defaults, held goal', {}, False),
             ('refine_steps=1, moving goal', {'refine_steps': 1}, True),
             ('refine_count=0, moving goal', {'refine_count': 0}, True))
    for label, settings, moving in cases:
        solver = make_solver('smc', chain, num_particles=100, seed=0, **settings)
        solver.reset(chain.neutral_configuration())
        for _ in range(50):                    # converge on the first goal
            solver.step(held)
        counter = [0]

        def step():
            counter[0] += 1
            solver.step(goals[counter[0] % len(goals)] if moving else held)

        t = C.time_calls(step, steps, warmup=20)
        rows.append(dict(case='(a) smc step, 7-DOF arm, 100 particles, pose goal',
                         variant=label, median_ms=1e3 * np.median(t),
                         p90_ms=1e3 * np.percentile(t, 90), rate_per_s=1.0 / np.median(t),
                         target='<= 0.3 ms median',
                         meets=bool(np.median(t) <= 0.3e-3), samples=len(t)))
    return rows, None


def chain90():
    """Return (chain, constraints, goal) of the 90-DOF set-up of seed 000 section 6.1."""
    chain = Chain.ball_chain(30, 0.1, max_angle=1.0, mass=1.0)
    constraints = [CenterOfMassLine(sigma=0.02), ChainSmoothness(sigma=0.3)]
    goal = PositionTarget(np.array([0.8, 0.5, 2.0]))
    return chain, constraints, goal


def bench_chain90(steps):
    chain, constraints, goal = chain90()
    rows = []
    for label, settings in (('defaults', {}), ('refine_count=0', {'refine_count': 0})):
        solver = make_solver('smc', chain, num_particles=50, seed=0, **settings)
        solver.set_constraints(constraints)
        solver.reset(chain.neutral_configuration())
        t = step_times(solver, goal, steps)
        rows.append(dict(case='(b) smc step, 90-DOF chain, 50 particles, CoM + smoothness',
                         variant=label, median_ms=1e3 * np.median(t),
                         p90_ms=1e3 * np.percentile(t, 90), rate_per_s=1.0 / np.median(t),
                         target='>= 300 steps/s (paper ~60)',
                         meets=bool(1.0 / np.median(t) >= 300.0), samples=len(t)))
    return rows


def bench_fk(repeats):
    chain = C_arm7()
    rng = np.random.default_rng(1)
    q1000 = chain.random_configuration(rng, 1000)
    q100 = q1000[:100]
    rows = []
    t = C.time_calls(lambda: chain.fk(q1000), repeats)
    rows.append(dict(case='(c) fk, 7-DOF arm, 1000 configs', variant='chain.fk',
                     median_ms=1e3 * np.median(t), p90_ms=1e3 * np.percentile(t, 90),
                     rate_per_s=1.0 / np.median(t), target='<= 1 ms median',
                     meets=bool(np.median(t) <= 1e-3), samples=len(t)))

    def fk_jac():
        frames = chain.frames(q100)
        frames.link_pose()
        frames.jacobian()

    t = C.time_calls(fk_jac, repeats)
    rows.append(dict(case='(c) fk + jacobian, 7-DOF arm, 100 configs',
                     variant='frames + jacobian', median_ms=1e3 * np.median(t),
                     p90_ms=1e3 * np.percentile(t, 90), rate_per_s=1.0 / np.median(t),
                     target='-', meets='', samples=len(t)))
    t = C.time_calls(lambda: chain.fk(q1000[0]), repeats)
    rows.append(dict(case='(c) fk, 7-DOF arm, 1 config', variant='chain.fk',
                     median_ms=1e3 * np.median(t), p90_ms=1e3 * np.percentile(t, 90),
                     rate_per_s=1.0 / np.median(t), target='-', meets='', samples=len(t)))
    return rows


_ARM7 = None


def C_arm7():
    global _ARM7
    if _ARM7 is None:
        _ARM7 = Chain.from_urdf(C.ARM7)
    return _ARM7


def plot(rows):
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    labels = [f'{r["case"].split(",")[0]} {r["case"].split(",", 1)[1].strip()[:26]}\n'
              f'{r["variant"]}' for r in rows]
    vals = [r['median_ms'] for r in rows]
    colors = ['tab:green' if r['meets'] is True else 'tab:red' if r['meets'] is False
              else 'tab:gray' for r in rows]
    y = np.arange(len(rows))
    ax.barh(y, vals, color=colors)
    ax.errorbar(vals, y, xerr=[np.zeros(len(rows)),
                               [r['p90_ms'] - r['median_ms'] for r in rows]],
                fmt='none', ecolor='k', capsize=3)
    ax.set_yticks(y, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale('log')
    ax.set_xlabel('median time per call [ms] (bar: median, whisker: p90); '
                  'green = meets target, red = misses', fontsize=8)
    ax.set_title('smcik_ros core speed (single thread)', fontsize=9)
    fig.tight_layout()
    return C.save_figure(fig, 'speed')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=2000,
                        help='timed SMC steps per setting (default 2000)')
    parser.add_argument('--repeats', type=int, default=2000,
                        help='timed FK calls (default 2000)')
    parser.add_argument('--quick', action='store_true', help='200 steps / 200 repeats')
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 200, 200
    print(C.machine())
    rows, _ = bench_arm_step(args.steps)
    rows += bench_chain90(max(100, args.steps // 4))
    rows += bench_fk(args.repeats)
    fields = ['case', 'variant', 'median_ms', 'p90_ms', 'rate_per_s', 'target', 'meets',
              'samples']
    C.print_table(rows, fields)
    C.write_csv('speed', rows, fields)
    print('wrote', plot(rows))


if __name__ == '__main__':
    main()
