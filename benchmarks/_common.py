"""Shared helpers of the benchmark scripts: timing, tables, CSV/PNG output, solver lists.

Not a benchmark itself (``./smcik bench`` runs the other files in this folder). Import it
before numpy: it pins BLAS/LAPACK to one thread (OPENBLAS_NUM_THREADS=1 etc., unless set),
because a multi-threaded OpenBLAS on a busy 2-core machine made a 124 x 93 pinv 15x slower
(17 ms instead of 1.2 ms) and the benchmarks measure single-threaded cost.
"""

import csv
import datetime
import os
import platform
import tempfile
import time

for _var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
    os.environ.setdefault(_var, '1')

import numpy as np  # noqa: E402  (after the thread pinning)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')
ARM7 = os.path.join(ROOT, 'urdf', 'smcik_arm.urdf')
ARM6 = os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf')

# Plain Algorithm 1 of seed 000: no refinement, no restarts, no elitism, no annealing.
# (The multi-scale proposal, min_noise_scale, stays at its default: see docs/benchmarks.md.)
PLAIN_SMC = dict(refine_count=0, restart_after=0, keep_map=False, anneal_initial=1.0,
                 branch_hold=False)   # branch hold needs keep_map; the paper has neither

# Jacobian methods of make_solver('jacobian', ..., method=...).
JACOBIAN_METHODS = ('transpose', 'pinv', 'dls', 'sr')


def machine():
    """Return a one-line description of this machine and the date (for the tables)."""
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    return (f'{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, '
            f'{os.cpu_count()} cores, python {platform.python_version()}, '
            f'numpy {np.__version__}, BLAS threads {os.environ["OPENBLAS_NUM_THREADS"]}, '
            f'load {load:.2f}')


def time_calls(fn, repeats, warmup=5):
    """Return an array of ``repeats`` wall times [s] of ``fn()`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    out = np.empty(repeats)
    clock = time.perf_counter
    for i in range(repeats):
        t0 = clock()
        fn()
        out[i] = clock() - t0
    return out


def fmt(value):
    """Format a table cell: floats with 4 significant digits."""
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return str(value)
        if value != 0.0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f'{value:.3e}'
        return f'{value:.4g}'
    return str(value)


def print_table(rows, fields, title=None):
    """Print ``rows`` (list of dicts) as an aligned text table with columns ``fields``."""
    cells = [[fmt(r.get(f, '')) for f in fields] for r in rows]
    widths = [max(len(f), *(len(c[i]) for c in cells)) if cells else len(f)
              for i, f in enumerate(fields)]
    if title:
        print(title)
    print('  '.join(f.rjust(w) for f, w in zip(fields, widths)))
    print('  '.join('-' * w for w in widths))
    for c in cells:
        print('  '.join(v.rjust(w) for v, w in zip(c, widths)))
    print()


def write_csv(name, rows, fields):
    """Write ``benchmarks/results/<name>.csv`` and return its path."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f'{name}.csv')
    with open(path, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction='ignore')
        w.writeheader()
        for r in rows:
            w.writerow({k: fmt(r.get(k, '')) if isinstance(r.get(k), float) else r.get(k, '')
                        for k in fields})
    return path


def pyplot():
    """Return matplotlib.pyplot with the Agg backend."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, name, dpi=90):
    """Save ``fig`` as ``benchmarks/results/<name>.png`` and return the path."""
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f'{name}.png')
    fig.savefig(path, dpi=dpi)
    return path


def load_solvers():
    """Import every solver module present (registers it) and return ``available_solvers()``.

    The package registers solvers in ``smcik_ros/solvers/__init__.py``; a module that exists
    but is not imported there yet is imported here, so the benchmarks pick it up too.
    """
    import importlib
    from smcik_ros.solvers import available_solvers
    for module in ('smc', 'jacobian', 'distance', 'fabrik', 'ccd'):
        try:
            importlib.import_module(f'smcik_ros.solvers.{module}')
        except ImportError:
            pass
    return available_solvers()


def solver_variants(include_smc=True, smc_settings=None, fd_jacobian=False):
    """Return [(label, solver name, settings)] for every registered solver.

    'jacobian' expands into one entry per method; 'smc' gets ``smc_settings`` (a dict of
    {label_suffix: settings}). Solvers that are not registered yet are skipped.
    """
    out = []
    for name in load_solvers():
        if name == 'smc':
            if include_smc:
                for suffix, settings in (smc_settings or {'': {}}).items():
                    out.append((f'smc{suffix}', 'smc', dict(settings)))
        elif name == 'jacobian':
            for m in JACOBIAN_METHODS:
                out.append((f'jacobian-{m}', 'jacobian', dict(method=m)))
                if fd_jacobian:
                    out.append((f'jacobian-{m}-fd', 'jacobian',
                                dict(method=m, finite_difference=True)))
        else:
            out.append((name, name, {}))
    return out


def accepts_setting(name, setting):
    """Return whether solver ``name``'s settings have a field ``setting``."""
    import dataclasses
    from smcik_ros.solvers import settings_type
    return setting in {f.name for f in dataclasses.fields(settings_type(name))}


def thirdparty_panda(directory):
    """Return (urdf, srdf, package_dir, chain) of MoveIt's Panda under ``directory`` (by hand
    only: panda_description and panda_moveit_config there, never in the repository);
    package_dir holds ``moveit_resources_panda_description`` for its package:// meshes."""
    from smcik_ros.model import Chain
    urdf = os.path.join(directory, 'panda_description', 'urdf', 'panda.urdf')
    srdf = os.path.join(directory, 'panda_moveit_config', 'config', 'panda.srdf')
    package_dir = tempfile.mkdtemp(prefix='smcik-bench-pkgs-')
    os.symlink(os.path.join(directory, 'panda_description'),
               os.path.join(package_dir, 'moveit_resources_panda_description'))
    return urdf, srdf, package_dir, Chain.from_urdf(urdf, 'panda_link0', 'panda_hand')
