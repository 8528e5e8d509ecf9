"""SMC tracking vs the eq. 15 smoothing factor (companion of tracking.py).

Same path, arms and tick as ``tracking.py`` (one ``step`` per 10 ms tick, seed 0); only
``smoothing_alpha`` varies (0.1 = the paper's and the shipped default, 1.0 = no smoothing).
Prints RMS position error and the share of reachable ticks within 1 mm / 0.01 rad, and the
largest joint change per tick. Run: ``./smcik bench tracking_alpha`` (about 1 min).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: F401,E402  (pins BLAS to one thread)
import numpy as np  # noqa: E402
from tracking import PATHS, make_path  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.solvers import make_solver  # noqa: E402
from smcik_ros.goals import PoseTarget, task_errors  # noqa: E402


def main():
    rows = []
    for arm in ('arm7', 'arm6'):
        chain = Chain.from_urdf(PATHS[arm]['urdf'])
        t, q_ref, poses, bump, _ = make_path(chain, PATHS[arm], 1.0)
        for alpha in (0.1, 0.3, 1.0):
            solver = make_solver('smc', chain, seed=0, smoothing_alpha=alpha)
            solver.reset(q_ref[0])
            prev = q_ref[0]
            errs, jumps = [], []
            for k, pose in enumerate(poses):
                q = solver.step(pose)
                jumps.append(np.abs(q - prev).max())
                prev = q
                if not bump[k]:
                    pe, oe = task_errors([PoseTarget(pose)], chain.frames(q))
                    errs.append((pe[0], oe[0]))
            e = np.array(errs)
            rows.append({'arm': arm, 'smoothing_alpha': alpha,
                         'rms_pos_mm': 1e3 * float(np.sqrt(np.mean(e[:, 0] ** 2))),
                         'within_1mm_10mrad_pct': 100.0 * float(np.mean((e[:, 0] < 1e-3)
                                                                       & (e[:, 1] < 1e-2))),
                         'max_jump_rad': float(max(jumps))})
    fields = ['arm', 'smoothing_alpha', 'rms_pos_mm', 'within_1mm_10mrad_pct', 'max_jump_rad']
    _common.print_table(rows, fields, title=f'SMC tracking vs smoothing ({_common.machine()})')
    _common.write_csv('tracking_alpha', rows, fields)
    plt = _common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    for arm in ('arm7', 'arm6'):
        sub = [r for r in rows if r['arm'] == arm]
        ax.plot([r['smoothing_alpha'] for r in sub], [r['rms_pos_mm'] for r in sub], 'o-',
                label=arm)
    ax.set_xlabel('smoothing_alpha')
    ax.set_ylabel('RMS tracking error [mm]')
    ax.legend()
    fig.tight_layout()
    _common.save_figure(fig, 'tracking_alpha')


if __name__ == '__main__':
    main()
