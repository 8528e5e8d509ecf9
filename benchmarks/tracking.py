"""Online tracking at 100 Hz: issue 8's circle with out-of-reach excursions, or a joint path.

``--scenario circle`` (default; the acceptance figures of issue 8): the SMC filter at its
default settings on the five arms of ``benchmarks/_motion.py`` (urdf/smcik_arm.urdf,
smcik_arm6.urdf and the Panda-, iiwa- and UR5-type DH arms), ``step()`` once per 10 ms
tick, the estimate taken as is (solver level: no command shaping, no smoothing lag). The
target runs a 15 cm (diameter) vertical circle at 0.1 m/s around the tool position of the
arm's home configuration with the orientation turning, one lap, with two out-of-reach
excursions: 'jump' (the target jumps 0.15 m past the reach, stays 1.5 s, jumps back) and
'drag' (it moves out and back at 0.1 m/s). Reported: median / p95 / max position error on
the circle [mm], and per excursion the time back within 1 mm / 0.01 rad after the target
returns [s] (target <= 2 s), the L-inf distance between the configurations before and
2.5 s after the excursion [rad] (same branch: <= 0.3) and the largest rise of the
estimate's position error while the out-of-reach target was still [mm] (0: the tool never
moved away). Targets: median <= 1.5 mm, p95 <= 3 mm on every arm. Writes
benchmarks/results/tracking_circle.csv and .png; ``--solvers`` adds other solvers.

``--scenario joint_path``: every registered solver on a joint-space path, as below.
Writes benchmarks/results/tracking.csv and tracking.png.

Joint-path setup:

- arms: urdf/smcik_arm.urdf (7-DOF) and urdf/smcik_arm6.urdf (6-DOF).
- path (period T = 24 s, sampled at 100 Hz, ``--cycles`` periods, 1 by default): the tool0
  pose of a smooth closed joint trajectory q_ref(t) = q_mid + a sin(2 pi t / T + phi), so the
  position curve is closed and smooth and the orientation varies slowly; q_ref stays inside
  the limits and below 15 % of the URDF velocity limits (tool speed: median 0.13 m/s,
  max 0.22 m/s on arm7). It passes near singular poses:
  arm7: joint6 crosses ~1.57 (wrist alignment, sigma_min(J) ~ 0.006) and joint4 reaches
  -0.27 (near full stretch); arm6: elbow_joint reaches 0.2 rad (near stretch) and
  wrist_2_joint 0.1 rad (wrist alignment). The smallest singular value of the analytic
  Jacobian along q_ref is printed.
- out-of-reach stretch: for t/T in [0.55, 0.75] the target position is pushed radially
  away from the shoulder point (on the joint-1 axis) by 0.2 m * sin^2 (a bump); the
  orientation is unchanged. The table prints the share of bumped samples beyond the arm's
  reach (the largest shoulder-to-tool distance of 20000 random in-limit configurations).
  Only the samples with no bump ("reachable": they are FK of q_ref) count in the error
  statistics.
- per solver: ``solver.reset(q_ref(0))``, then one ``solver.step(pose_k)`` per 10 ms tick
  (the (4, 4) pose as goal). Solvers: every registered name; 'jacobian' once per method
  (analytic Jacobians; FABRIK is skipped: it needs ball joints); 'smc' with the shipped
  defaults and ``smc plain``
  (refine_count=0, restart_after=0, keep_map=False, anneal_initial=1, branch_hold=False).
  Seed 0 where a solver has a seed.
- reported: largest joint jump per step max_k max_j |q_k - q_{k-1}| [rad] (all steps, and
  reachable steps only); RMS and max
  position [m] and orientation [rad] error of the returned estimate (reachable samples);
  share of reachable steps within 1 mm and 0.01 rad; share of steps (all, and reachable
  only) whose joint jump exceeds velocity_limit * 0.01 s on some joint; median step time.

Run: ``./smcik bench tracking`` (circle) or ``./smcik bench tracking --scenario
joint_path`` (``--quick``: 0.8 cycle, 7-DOF arm only).
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver

PERIOD = 24.0
DT = 0.01
BUMP = 0.2
BUMP_WINDOW = (0.55, 0.75)

# Per arm: urdf, q_mid, amplitudes, phases, shoulder point.
PATHS = {
    'arm7': dict(
        urdf=C.ARM7,
        q_mid=[0.0, 0.25, 0.0, -1.25, 0.0, 1.9, 0.0],
        amp=[0.8, 0.45, 0.3, 0.98, 0.5, 0.45, 0.6],
        phase=[0.0, 1.0, 0.5, -np.pi / 2 + 2 * np.pi * 0.6, 2.0, np.pi, 1.5],
        shoulder=[0.0, 0.0, 0.24]),
    'arm6': dict(
        urdf=C.ARM6,
        q_mid=[0.0, -1.3, 1.2, -1.4, 0.9, 0.0],
        amp=[0.8, 0.4, 1.0, 0.5, 0.8, 0.6],
        phase=[0.0, 1.0, -np.pi / 2 + 2 * np.pi * 0.6, 2.0, np.pi / 2, 1.5],
        shoulder=[0.0, 0.0, 0.145]),
}


def make_path(chain, spec, cycles):
    """Return (t (K,), q_ref (K, n), poses (K, 4, 4), bump (K,), shoulder (3,))."""
    t = np.arange(int(round(cycles * PERIOD / DT)) + 1) * DT
    phase = 2 * np.pi * t[:, None] / PERIOD + np.asarray(spec['phase'])
    q_ref = np.asarray(spec['q_mid']) + np.asarray(spec['amp']) * np.sin(phase)
    if not np.all(chain.within_limits(q_ref)):
        raise RuntimeError('reference path leaves the joint limits')
    poses = chain.fk(q_ref)
    frac = (t / PERIOD) % 1.0
    lo, hi = BUMP_WINDOW
    inside = (frac > lo) & (frac < hi)
    bump = np.where(inside, BUMP * np.sin(np.pi * (frac - lo) / (hi - lo)) ** 2, 0.0)
    shoulder = np.asarray(spec['shoulder'])
    radial = poses[:, :3, 3] - shoulder
    radial /= np.linalg.norm(radial, axis=1, keepdims=True)
    poses = poses.copy()
    poses[:, :3, 3] += bump[:, None] * radial
    return t, q_ref, poses, bump, shoulder


def max_reach(chain, shoulder):
    q = chain.random_configuration(np.random.default_rng(5), 20000)
    return float(np.max(np.linalg.norm(chain.fk(q)[:, :3, 3] - shoulder, axis=1)))


def track(chain, name, settings, q0, poses):
    if C.accepts_setting(name, 'seed'):
        settings = dict(settings, seed=0)
    solver = make_solver(name, chain, **settings)
    solver.reset(q0)
    qs = np.empty((len(poses), chain.nq))
    times = np.empty(len(poses))
    clock = time.perf_counter
    for k, pose in enumerate(poses):
        t0 = clock()
        qs[k] = solver.step(pose)
        times[k] = clock() - t0
    return qs, times


def errors(chain, qs, poses):
    """Return (position error (K,) [m], orientation error (K,) [rad]) of qs vs poses."""
    got = chain.fk(qs)
    pos = np.linalg.norm(got[:, :3, 3] - poses[:, :3, 3], axis=1)
    rel = np.einsum('kij,kil->kjl', poses[:, :3, :3], got[:, :3, :3])
    cos = np.clip(0.5 * (np.trace(rel, axis1=1, axis2=2) - 1.0), -1.0, 1.0)
    return pos, np.arccos(cos)


def circle(args):
    """The issue-8 scenario: the SMC (and --solvers) on the circle with excursions."""
    import _motion as M
    arms = M.load_arms(args.circle_arms)
    rows, series = [], {}
    for name, chain in arms.items():
        for solver_name in ['smc'] + list(args.solvers or []):
            settings = dict(seed=0) if C.accepts_setting(solver_name, 'seed') else {}
            solver = make_solver(solver_name, chain, **settings)
            t0 = time.perf_counter()
            rec, data = M.run_tracking(chain, name, solver, M.make_plant('ideal', chain))
            wall = time.perf_counter() - t0
            row = dict(arm=name, solver=solver_name, median_mm=rec['median_pos_mm'],
                       p95_mm=rec['p95_pos_mm'], max_mm=rec['max_pos_mm'],
                       median_ori_mrad=rec['median_ori_mrad'], wall_s=wall,
                       ticks=len(data['pos']))
            for e in rec['excursions']:
                row[f'{e["kind"]}_back_s'] = e['recover_s']
                row[f'{e["kind"]}_branch_rad'] = e['branch_dist']
                row[f'{e["kind"]}_rise_mm'] = 1e3 * e['worst_rise_m']
            row['step_ms'] = 1e3 * wall / len(data['pos'])
            rows.append(row)
            series[(name, solver_name)] = data
            print(f'{name:11s} {solver_name:9s} median {row["median_mm"]:.3g} mm p95 '
                  f'{row["p95_mm"]:.3g} mm; jump back {row["jump_back_s"]:.2f} s branch '
                  f'{row["jump_branch_rad"]:.3f} rad; drag back {row["drag_back_s"]:.2f} s '
                  f'branch {row["drag_branch_rad"]:.3f} rad', flush=True)
    fields = ['arm', 'solver', 'median_mm', 'p95_mm', 'max_mm', 'median_ori_mrad',
              'jump_back_s', 'jump_branch_rad', 'jump_rise_mm', 'drag_back_s',
              'drag_branch_rad', 'drag_rise_mm', 'step_ms']
    print()
    C.print_table(rows, fields, title='tracking a 15 cm circle at 0.1 m/s, 100 Hz, with '
                  'out-of-reach excursions (solver level; step_ms: wall time per tick)')
    C.write_csv('tracking_circle', rows, fields)
    plt = C.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    for (name, solver_name), data in series.items():
        t = np.arange(len(data['pos'])) * DT
        ax.semilogy(t, np.maximum(data['pos'], 1e-9), lw=0.7, label=f'{name} {solver_name}')
    ax.axhline(1e-3, color='k', ls='--', lw=0.8)
    ax.set_xlabel('time [s] (circle, jump excursion, circle, drag excursion, circle)')
    ax.set_ylabel('position error of the estimate [m]')
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which='both')
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'tracking_circle'))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scenario', choices=('circle', 'joint_path'), default='circle')
    parser.add_argument('--circle-arms', nargs='+',
                        default=['arm7', 'arm6', 'panda_like', 'iiwa_like', 'ur5_like'])
    parser.add_argument('--solvers', nargs='*', default=[],
                        help='circle: other solvers to run besides smc')
    parser.add_argument('--cycles', type=float, default=1.0, help='path periods (24 s each)')
    parser.add_argument('--arms', nargs='+', default=list(PATHS), choices=list(PATHS))
    parser.add_argument('--quick', action='store_true',
                        help='0.8 cycle (through the bump), arm7 only')
    args = parser.parse_args()
    if args.scenario == 'circle':
        print(C.machine())
        if args.quick:
            args.circle_arms = ['arm7']
        circle(args)
        return
    if args.quick:
        args.cycles, args.arms = 0.8, ['arm7']
    print(C.machine())
    variants = C.solver_variants(smc_settings={'': {}, ' plain': dict(C.PLAIN_SMC)})
    rows = []
    curves = {}
    for arm in args.arms:
        spec = PATHS[arm]
        chain = Chain.from_urdf(spec['urdf'])
        t, q_ref, poses, bump, shoulder = make_path(chain, spec, args.cycles)
        reach = max_reach(chain, shoulder)
        dist = np.linalg.norm(poses[:, :3, 3] - shoulder, axis=1)
        bumped = bump > 0.0
        smin = np.linalg.svd(chain.jacobian(q_ref), compute_uv=False)[:, -1]
        vel_ref = np.abs(np.diff(q_ref, axis=0)).max(axis=0) / DT
        print(f'{arm}: {len(t)} ticks, reachable {np.sum(~bumped)}, bumped {bumped.sum()} '
              f'({100 * np.mean(dist[bumped] > reach):.0f} % of them beyond the reach '
              f'{reach:.3f} m); sigma_min(J) along q_ref: min {smin.min():.4f} at '
              f't = {t[np.argmin(smin)]:.2f} s; reference speed / velocity limit: max '
              f'{np.max(vel_ref / chain.velocity_limits):.2f}')
        limit_step = chain.velocity_limits * DT
        reach_mask = ~bumped
        for label, name, settings in variants:
            try:
                qs, times = track(chain, name, settings, q_ref[0], poses)
            except ParameterError as exc:
                print(f'  {label:>20s}: skipped ({str(exc)[:80]}...)')
                continue
            jumps = np.abs(np.diff(np.vstack([q_ref[:1], qs]), axis=0))
            pos, ori = errors(chain, qs, poses)
            pr, orr = pos[reach_mask], ori[reach_mask]
            rows.append(dict(
                arm=arm, solver=label, steps=len(t),
                max_jump_rad=float(jumps.max()),
                max_jump_reachable_rad=float(jumps[reach_mask].max()),
                rms_pos_m=float(np.sqrt(np.mean(pr ** 2))), max_pos_m=float(pr.max()),
                rms_ori_rad=float(np.sqrt(np.mean(orr ** 2))), max_ori_rad=float(orr.max()),
                within_1mm_10mrad_pct=100.0 * float(np.mean((pr <= 1e-3) & (orr <= 1e-2))),
                over_vel_limit_pct=100.0 * float(np.mean(np.any(jumps > limit_step, axis=1))),
                over_vel_limit_reachable_pct=100.0 * float(
                    np.mean(np.any(jumps[reach_mask] > limit_step, axis=1))),
                median_step_ms=1e3 * float(np.median(times))))
            curves[(arm, label)] = (t, pos, ori, jumps.max(axis=1), bumped)
            r = rows[-1]
            print(f'  {label:>20s}: rms pos {r["rms_pos_m"]:.2e} m, max jump '
                  f'{r["max_jump_rad"]:.3f} rad, within {r["within_1mm_10mrad_pct"]:.1f} %',
                  flush=True)
    fields = ['arm', 'solver', 'steps', 'max_jump_rad', 'max_jump_reachable_rad', 'rms_pos_m',
              'max_pos_m', 'rms_ori_rad', 'max_ori_rad', 'within_1mm_10mrad_pct',
              'over_vel_limit_pct', 'over_vel_limit_reachable_pct', 'median_step_ms']
    print()
    C.print_table(rows, fields, title='tracking at 100 Hz (errors over reachable samples)')
    C.write_csv('tracking', rows, fields)

    plt = C.pyplot()
    labels = list(dict.fromkeys(r['solver'] for r in rows))
    fig, axes = plt.subplots(3, len(args.arms), figsize=(6.5 * len(args.arms), 7.5),
                             sharex=True, squeeze=False)
    for col, arm in enumerate(args.arms):
        for i, label in enumerate(labels):
            if (arm, label) not in curves:
                continue
            t, pos, ori, jump, bumped = curves[(arm, label)]
            kw = dict(lw=0.8, color=f'C{i % 10}', label=label)
            axes[0][col].semilogy(t, np.maximum(pos, 1e-7), **kw)
            axes[1][col].semilogy(t, np.maximum(ori, 1e-7), **kw)
            axes[2][col].semilogy(t, np.maximum(jump, 1e-7), **kw)
        for ax in axes[:, col]:
            ax.fill_between(t, 1e-7, 10, where=bumped, color='0.85', step='mid')
            ax.grid(alpha=0.3, which='both')
        chain = Chain.from_urdf(PATHS[arm]['urdf'])
        axes[2][col].axhline(np.min(chain.velocity_limits) * DT, color='k', ls='--', lw=0.8)
        axes[0][col].set_title(f'{arm} (grey: target pushed out of reach)', fontsize=9)
        axes[0][col].set_ylim(1e-7, 1)
        axes[1][col].set_ylim(1e-7, 3)
        axes[2][col].set_ylim(1e-7, 3)
        axes[2][col].set_xlabel('time [s]')
    axes[0][0].set_ylabel('position error [m]')
    axes[1][0].set_ylabel('orientation error [rad]')
    axes[2][0].set_ylabel('largest joint jump [rad]\n(dashed: v_lim * 10 ms)')
    axes[0][-1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'tracking', dpi=72))


if __name__ == '__main__':
    main()
