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
from smcik_ros.kinematics import Chain  # noqa: E402
from smcik_ros.solvers import make_solver  # noqa: E402
from smcik_ros.goals import PoseTarget, task_errors  # noqa: E402
for arm in ('arm7', 'arm6'):
    chain = Chain.from_urdf(PATHS[arm]['urdf'])
    t, q_ref, poses, bump, _ = make_path(chain, PATHS[arm], 1.0)
    for alpha in (0.1, 0.3, 1.0):
        s = make_solver('smc', chain, seed=0, smoothing_alpha=alpha); s.reset(q_ref[0]); prev = q_ref[0]
        errs = []; jumps = []
        for k, p in enumerate(poses):
            q = s.step(p); jumps.append(np.abs(q - prev).max()); prev = q
            if not bump[k]:
                pe, oe = task_errors([PoseTarget(p)], chain.frames(q)); errs.append((pe[0], oe[0]))
        e = np.array(errs)
        print(arm, 'alpha', alpha, 'rms pos %.2f mm' % (1e3*np.sqrt((e[:,0]**2).mean())), 'within %.1f %%' % (100*np.mean((e[:,0]<1e-3)&(e[:,1]<1e-2))), 'max jump %.3f' % max(jumps))
