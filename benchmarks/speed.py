"""Speed targets of the core, before and after a change, in one table.

Every figure is measured in a fresh Python process: "after" with this tree, "before" (with
``--before REF``) with the tree of git revision REF (exported by ``git archive`` to a
temporary directory and measured by its own copy of this script, so each side runs its own
code and API). Both with the numba kernels compiled or loaded from the cache before timing
(``warm_up``). Single-threaded (BLAS pinned to one thread), times from time.perf_counter,
medians. ``./smcik bench speed --before a77c096``: issue 31's before/after.

(a) one online SMC filter step (``solver.step(goal)``) on the 7-DOF arm
    urdf/smcik_arm.urdf, 100 particles, solver seed 0, reset to the neutral configuration
    and run 50 steps on the first goal; then ``--steps`` timed steps (after 20 untimed).
    Goals: PoseTargets on a 2 cm circle (100 goals, 1.3 mm apart, fixed orientation)
    around the FK of a random in-limit configuration (numpy Generator seed 0): a new goal
    every step ("moving goal", the filter always works), or the first goal all along ("held
    goal": once it is reached the filter skips its refinement, refine_min_cost). Settings:
    the shipped defaults, refine_steps=1, and refine_count=0 (no refinement). Target (issue
    10): moving goal, defaults, median <= 0.1 ms. One more row, no target: a moving goal
    with self-collision as smcik_node runs it by default (the arm's sphere covers, its
    SRDF's pairs, CollisionConstraint's default padding and clearance; the reference set to
    the last estimate before each step, as the node sets it to its command), over a fifth
    of ``--steps`` (at least 100). Its circle is around the first random configuration
    (Generator seed 0) whose covers are 5 cm clear of each other: goals in free space, as
    users send them (around one in the clearance band the filter keeps restarting).
(b) the 90-DOF chain: ball_chain(30, segment_length=0.1, max_angle=1.0, mass=1.0)
    (30 ball joints, 3 m long, pointing up), 50 particles, constraints
    CenterOfMassLine(sigma=0.02) (vertical through the root) and ChainSmoothness(sigma=0.3),
    PositionTarget (0.8, 0.5, 2.0); steps per second = 1 / median step time over
    ``--steps`` / 4 online steps. Defaults and refine_count=0. Target >= 3000 steps/s.
(c) forward kinematics of 1000 random configurations of the 7-DOF arm in one batched call
    (``chain.fk(q)``, (1000, 4, 4)), median over ``--repeats`` calls; target <= 0.1 ms.
    Also ``chain.frames(q)`` + ``frames.jacobian()`` for 100 configurations and FK of one.
(d) round trip, ``make_solver('smc', chain, seed=0)`` shipped defaults, on the arms of
    dh_round_trip.py (Panda-, iiwa-, UR5-type from published DH tables) and the two demo
    arms: ``--trials`` goals fk(q_true) (q_true uniform, Generator seeded per arm), half from
    the neutral seed and half from a uniform random seed, ``solve(goal, seed, tol=1e-3,
    timeout=0.05)`` (1 mm and 0.01 rad); success % (reported and checked by FK) and median
    time. Next to it TRAC-IK (pytracik, Speed mode, 50 ms, eps 1e-5; success checked by FK
    at the same 1 mm / 0.01 rad) on the same goals and seeds when pytracik is installed (it
    is not a dependency: without it those rows say so). Target: smc success >= 99.5 % and
    median <= TRAC-IK's.
    ``--arm PATH:BASE:TIP`` (repeatable) adds an arm, e.g. a third-party URDF (its meshes
    are not loaded: package:// URIs need not resolve).

Run: ``./smcik bench speed [--before REF]`` (``--quick`` for a fast check). Writes
benchmarks/results/speed.csv and speed.png.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.goals import CenterOfMassLine, ChainSmoothness, PoseTarget, PositionTarget
from smcik_ros.model import Chain, ball_chain
from smcik_ros.solvers import make_solver


def step_times(solver, goal, steps, warmup=20):
    """Return ``steps`` wall times [s] of ``solver.step(goal)`` after ``warmup`` steps."""
    return C.time_calls(lambda: solver.step(goal), steps, warmup=warmup)


def moving_goals(chain, rng, count=100, radius=0.02, centre=None):
    """Return ``count`` PoseTargets on a circle of ``radius`` [m] around a random reachable
    pose (fixed orientation; ``centre``: the pose of this configuration instead):
    consecutive goals are 1.3 mm apart, so every step works."""
    pose = chain.fk(chain.random_configuration(rng) if centre is None else centre)
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
                         target='<= 0.1 ms median' if label.startswith('defaults, moving')
                         else '-', samples=len(t)))
    rows.append(bench_arm_step_collision(chain, max(100, steps // 5)))
    return rows, None


def bench_arm_step_collision(chain, steps):
    """(a) with self-collision as the node runs it by default (see the module doc)."""
    from smcik_ros.collision import (CollisionConstraint, CollisionModel,
                                     conventional_srdf_path, self_collision_pairs)
    model = CollisionModel.from_urdf(chain, C.ARM7)
    constraint = CollisionConstraint(
        model, pairs=self_collision_pairs(model, conventional_srdf_path(C.ARM7)))
    rng = np.random.default_rng(0)
    while True:                                 # a goal circle in free space
        centre = chain.random_configuration(rng)
        if constraint.distances(chain.frames(centre)).distance[0] > 0.05:
            break
    goals = moving_goals(chain, None, centre=centre)
    held = goals[0]
    solver = make_solver('smc', chain, num_particles=100, seed=0)
    solver.set_constraints([constraint])
    q = [chain.neutral_configuration()]
    solver.reset(q[0])
    counter = [0]

    def step(goal=None):
        counter[0] += 1
        constraint.set_reference(q[0])
        q[0] = solver.step(goals[counter[0] % len(goals)] if goal is None else goal)

    for _ in range(50):                        # converge on the first goal
        step(held)
    t = C.time_calls(step, steps, warmup=20)
    return dict(case='(a) smc step, 7-DOF arm, 100 particles, pose goal',
                variant='defaults + self-collision (the node), moving goal',
                median_ms=1e3 * np.median(t), p90_ms=1e3 * np.percentile(t, 90),
                rate_per_s=1.0 / np.median(t), target='-', samples=len(t))


def chain90():
    """Return (chain, constraints, goal) of the 90-DOF set-up of seed 000 section 6.1."""
    chain = ball_chain(30, 0.1, max_angle=1.0, mass=1.0)
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
                         target='>= 3000 steps/s' if label == 'defaults' else '-',
                         samples=len(t)))
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
                     rate_per_s=1.0 / np.median(t), target='<= 0.1 ms median',
                     samples=len(t)))

    def fk_jac():
        frames = chain.frames(q100)
        frames.link_pose()
        frames.jacobian()

    t = C.time_calls(fk_jac, repeats)
    rows.append(dict(case='(c) fk + jacobian, 7-DOF arm, 100 configs',
                     variant='frames + jacobian', median_ms=1e3 * np.median(t),
                     p90_ms=1e3 * np.percentile(t, 90), rate_per_s=1.0 / np.median(t),
                     target='-', samples=len(t)))
    t = C.time_calls(lambda: chain.fk(q1000[0]), repeats)
    rows.append(dict(case='(c) fk, 7-DOF arm, 1 config', variant='chain.fk',
                     median_ms=1e3 * np.median(t), p90_ms=1e3 * np.percentile(t, 90),
                     rate_per_s=1.0 / np.median(t), target='-', samples=len(t)))
    return rows


def parse_arm(spec):
    """Return (name, URDF text, base, tip) of an ``--arm PATH:BASE:TIP`` argument."""
    try:
        path, base, tip = spec.rsplit(':', 2)
        with open(path) as f:
            xml = f.read()
    except (ValueError, OSError) as exc:
        raise SystemExit(f'--arm expects PATH:BASE_LINK:TIP_LINK of a readable URDF; got '
                         f'{spec!r} ({exc})') from None
    return os.path.splitext(os.path.basename(path))[0], xml, base, tip


def bench_round_trip(trials, extra=()):
    """Return rows of (d): smc and (when installed) TRAC-IK round trips on the same goals.

    extra: ``--arm`` specs (PATH:BASE:TIP) of more arms, e.g. third-party URDFs."""
    from dh_round_trip import arms
    try:
        import pytracik
    except ImportError:
        pytracik = None
    from smcik_ros.rotations import matrix_to_quat
    urdfs = {name: (xml, 'base_link', 'tool0') for name, xml in arms().items()}
    for path in (C.ARM7, C.ARM6):
        with open(path) as f:
            urdfs[os.path.splitext(os.path.basename(path))[0]] = (f.read(), 'base_link',
                                                                   'tool0')
    for spec in extra:
        name, xml, base, tip = parse_arm(spec)
        while name in urdfs:
            name += "'"
        urdfs[name] = (xml, base, tip)
    def reaches(chain, q, goal):      # the same 1 mm / 0.01 rad check for both solvers
        reached = chain.fk(np.asarray(q, dtype=float))
        cos = np.clip((np.trace(reached[:3, :3].T @ goal[:3, :3]) - 1.0) / 2.0, -1.0, 1.0)
        return bool(np.linalg.norm(reached[:3, 3] - goal[:3, 3]) <= 1e-3
                    and np.arccos(cos) <= 1e-2)

    rows = []
    for arm_index, (name, (xml, base, tip)) in enumerate(urdfs.items()):
        chain = Chain.from_urdf(xml, base, tip)
        rng = np.random.default_rng([arm_index, 10])
        cases = []
        for k in range(trials):
            goal = chain.fk(chain.random_configuration(rng))
            seed = chain.neutral_configuration() if k % 2 == 0 \
                else chain.random_configuration(rng)
            cases.append((goal, seed))
        solver = make_solver('smc', chain, seed=0)
        solver.solve(*cases[0], tol=1e-3, timeout=0.05)        # untimed first call
        ok, times = 0, []
        for goal, seed in cases:
            result = solver.solve(goal, seed, tol=1e-3, timeout=0.05)
            ok += result.success and reaches(chain, result.q, goal)
            times.append(result.elapsed)
        case = f'(d) round trip, {name} ({chain.n} DOF), 1 mm / 0.01 rad'
        rows.append(dict(case=case, variant='smc', median_ms=1e3 * np.median(times),
                         p90_ms=1e3 * np.percentile(times, 90),
                         rate_per_s=1.0 / np.median(times), success_pct=100.0 * ok / trials,
                         target='>= 99.5 %, median <= TRAC-IK', samples=trials))
        if pytracik is None:
            rows.append(dict(case=case, variant='trac-ik', target='pytracik not installed',
                             samples=0))
            continue
        tracik = pytracik.TRAC_IK(base, tip, xml, 0.05, 1e-5, pytracik.Speed)
        lower = np.array(pytracik.get_joint_lower_bounds(tracik))
        upper = np.array(pytracik.get_joint_upper_bounds(tracik))
        empty = lower >= upper
        if lower.shape == chain.lower.shape and empty.any():
            # pytracik reads some URDFs' limits (TIAGo's, PR2's: <safety_controller> soft
            # limits) as [0, 0]: it could then solve nothing. Those joints get the URDF's.
            print(f'{name}: pytracik read empty limits for '
                  f'{", ".join(np.array(chain.joint_names)[empty])}: set from the URDF')
            pytracik.set_joint_limits(tracik, np.where(empty, chain.lower, lower).tolist(),
                                      np.where(empty, chain.upper, upper).tolist())
        ok, times = 0, []
        for goal, seed in cases:
            w, x, y, z = matrix_to_quat(goal[:3, :3])
            t0 = time.perf_counter()
            sol = pytracik.ik(tracik, list(seed), *goal[:3, 3], x, y, z, w)
            times.append(time.perf_counter() - t0)
            if sol is not None and len(sol) > chain.n and sol[0] >= 0:
                ok += reaches(chain, sol[1:1 + chain.n], goal)
        rows.append(dict(case=case, variant='trac-ik', median_ms=1e3 * np.median(times),
                         p90_ms=1e3 * np.percentile(times, 90),
                         rate_per_s=1.0 / np.median(times), success_pct=100.0 * ok / trials,
                         target='-', samples=trials))
    return rows


_ARM7 = None


def C_arm7():
    global _ARM7
    if _ARM7 is None:
        _ARM7 = Chain.from_urdf(C.ARM7)
    return _ARM7


# A TRAC-IK row below this success [%] is no reference (pytracik could not solve the arm:
# e.g. KDL's chain from an example-robot-data URDF whose root link has an inertia).
TRACIK_REFERENCE_PCT = 50.0


def meets(row):
    """Return whether the 'after' figure of ``row`` meets its target (True/False), or ''."""
    target, after = row.get('target', '-'), row.get('after_ms')
    if after is None or after == '':
        return ''
    if target.startswith('<='):
        return bool(after <= float(target.split()[1]))
    if target.startswith('>= 3000'):
        return bool(1e3 / after >= 3000.0)
    if target.startswith('>= 99.5'):
        tracik = row.get('tracik_ms')
        ok = row.get('after_success_pct', 0.0) >= 99.5
        if isinstance(tracik, str) and tracik:     # TRAC-IK failed there: no reference
            return '' if ok else False
        return bool(ok and (tracik in (None, '') or after <= tracik))
    return ''


def plot(rows):
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 0.32 * len(rows) + 1.5))
    labels = [f'{r["case"][:58]}\n{r["variant"]}' for r in rows]
    y = np.arange(len(rows))
    before = [r.get('before_ms') or np.nan for r in rows]
    after = [r.get('after_ms') or np.nan for r in rows]
    ax.barh(y - 0.2, before, height=0.4, color='tab:gray', label='before (numpy)')
    ax.barh(y + 0.2, after, height=0.4, label='after (numba kernels)',
            color=['tab:green' if r['meets'] is True else 'tab:red' if r['meets'] is False
                   else 'tab:blue' for r in rows])
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale('log')
    ax.set_xlabel('median time per call [ms]; after: green = meets target, red = misses',
                  fontsize=8)
    ax.legend(fontsize=7, loc='lower right')
    ax.set_title('smcik_ros core speed before/after the compiled kernels (single thread)',
                 fontsize=9)
    fig.tight_layout()
    return C.save_figure(fig, 'speed')


def measure(args):
    """Return this process's rows (this tree's code)."""
    from smcik_ros.warmup import warm_up
    warm_up(C_arm7(), print)
    warm_up(chain90()[0], print)
    rows, _ = bench_arm_step(args.steps)
    rows += bench_chain90(max(100, args.steps // 4))
    rows += bench_fk(args.repeats)
    rows += bench_round_trip(args.trials, args.arm)
    return rows


def run_child(args, ref=None):
    """Run ``measure`` in a fresh process: this tree's, or the tree of git revision ``ref``
    (exported to a temporary directory, measured by its own speed.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, root, env = os.path.join(tmp, 'rows.json'), C.ROOT, dict(os.environ)
        if ref is not None:
            root = os.path.join(tmp, 'tree')
            os.makedirs(root)
            archive = subprocess.run(['git', '-C', C.ROOT, 'archive', ref], check=True,
                                     capture_output=True).stdout
            subprocess.run(['tar', '-x', '-C', root], input=archive, check=True)
            env['PYTHONPATH'] = root + os.pathsep + env.get('PYTHONPATH', '')
        cmd = [sys.executable, os.path.join(root, 'benchmarks', 'speed.py'), '--child', out,
               '--steps', str(args.steps), '--repeats', str(args.repeats), '--trials',
               str(args.trials)] + [f'--arm={spec}' for spec in args.arm]
        print(f'{"before: " + ref if ref else "after: this tree"}', flush=True)
        subprocess.run(cmd, env=env, check=True, cwd=root)
        with open(out) as f:
            return json.load(f)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=2000,
                        help='timed SMC steps per setting (default 2000)')
    parser.add_argument('--repeats', type=int, default=2000,
                        help='timed FK calls (default 2000)')
    parser.add_argument('--trials', type=int, default=400,
                        help='round-trip goals per arm (default 400)')
    parser.add_argument('--quick', action='store_true',
                        help='200 steps / 200 repeats / 60 trials')
    parser.add_argument('--arm', action='append', default=[], metavar='PATH:BASE:TIP',
                        help='one more arm for the round trip (d), e.g. a third-party URDF '
                             '(repeatable)')
    parser.add_argument('--before', metavar='REF',
                        help='git revision to measure as "before" (e.g. a77c096)')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.trials = 200, 200, 60
    if args.child:
        rows = measure(args)
        with open(args.child, 'w') as f:
            json.dump(rows, f)
        return
    print(C.machine())
    sides = {'after': run_child(args)}
    if args.before:
        sides['before'] = run_child(args, args.before)
    merged = {}
    for mode, rows in sides.items():
        for r in rows:
            m = merged.setdefault((r['case'], r['variant']), dict(
                case=r['case'], variant=r['variant'], target=r.get('target', '-')))
            m[f'{mode}_ms'] = r.get('median_ms', '')
            m[f'{mode}_p90_ms'] = r.get('p90_ms', '')
            m[f'{mode}_success_pct'] = r.get('success_pct', '')
            if r.get('target', '-') != '-':
                m['target'] = r['target']
    rows = list(merged.values())
    tracik = {r['case']: (r.get('after_ms', r.get('before_ms')),
                          r.get('after_success_pct', r.get('before_success_pct')))
              for r in rows if r['variant'] == 'trac-ik'}
    no_reference = []
    for r in rows:
        if r['case'] in tracik and r['variant'] == 'smc':
            ms, pct = tracik[r['case']]
            if isinstance(pct, (int, float)) and pct < TRACIK_REFERENCE_PCT:
                # TRAC-IK did not solve this arm (its median is its timeout): no reference.
                r['tracik_ms'] = f'no reference ({pct:g} % solved)'
                no_reference.append(r['case'])
            else:
                r['tracik_ms'] = ms
        b, a = r.get('before_ms'), r.get('after_ms')
        r['speedup'] = b / a if isinstance(b, float) and isinstance(a, float) and a else ''
        r['meets'] = meets(r)
    fields = ['case', 'variant', 'before_ms', 'after_ms', 'speedup', 'after_p90_ms',
              'before_success_pct', 'after_success_pct', 'tracik_ms', 'target', 'meets']
    C.print_table(rows, fields, title=f'median times [ms] before ({args.before or "-"}) and '
                                      'after (this tree)')
    for case in no_reference:
        print(f'{case}: TRAC-IK solved fewer than {TRACIK_REFERENCE_PCT} % of the goals (its '
              'median is its timeout): no reference time, not judged')
    C.write_csv('speed', rows, fields)
    print('wrote', plot(rows))


if __name__ == '__main__':
    main()
