"""Seed 002 section VI-B and VI-C with ``FreePointDistanceSolver`` (the free-point form).

VI-B, "reach a target with an articulated chain" (paper: 10 joints, 9 segment lengths + 2
point constraints, 30 unknowns, "the error is zero after 18 iterations"):

- 10 points, reference straight along +x with unit spacing (9 unit segments, hard); point 0
  pinned at the origin (the end held at p, hard); point 9 (the other end) must reach the
  target c = (4, 5, 2) (hard, three rows). Start: the reference. soft='none' as in the
  paper's description (no secondary task); also soft='anchors' (each point keeps its
  reference distances to four fixed points, eqs. 12-13) with the shipped settings
  (soft_gain 0.1, soft step capped at 0.2 segment, faded by soft_decay 0.95 per iteration)
  and with soft_decay=1 (a constant secondary task, eq. 11 as printed).
- error per iteration: the largest hard residual [units] (segment-length error or target
  distance); iterations until it is below 1e-6 and below 1e-12 ("zero").
- ``--targets`` extra random targets (numpy Generator seed 2, uniform directions, distance
  from the pinned end uniform in [2, 8.5]) for the iteration-count distribution.
- residual: ours is (|xi - xj|^2 - d^2) / (2 d), not the paper's squared (..)^2 (eq. 7),
  whose gradient vanishes at the solution (linear convergence); see distance.py.

VI-C, "31 points, 124 soft and 30 hard constraints: 110 fps optimised, 51 not":

- a 31-point skeleton with the CMU motion-capture topology (hip, 2 x (hipjoint, femur,
  tibia, foot, toes), lowerback, upperback, thorax, lowerneck, upperneck, head,
  2 x (clavicle, humerus, radius, wrist, hand, fingers, thumb)), a T-pose ~1.7 units high;
  the 30 bones are hard length constraints, the 124 = 4 x 31 reference distances to four
  fixed anchor points are the soft ones (the paper's replay set-up). Nothing pinned.
- motion edit: the right hand (point ``rhand``) gets a hard target (3 more rows) moving
  on a smooth loop in front of the body (``--frames`` frames, 0.2 units radius, within
  the arm's reach).
- per frame: ``solve(target, max_iters=--iters, tol=1e-6)`` from the previous frame;
  frames per second = frames / total wall time; also the median time of one ``step``
  (30 bone rows only, and with the hand target) and the iteration rate.
- ``structured=True`` (block-diagonal soft pseudo-inverse, eq. 12-13, sparse primary
  solve) vs ``structured=False`` (dense SVD pseudo-inverses of the full matrices); each with
  the shipped settings and with soft_decay=1 (constant secondary task).

Run: ``./smcik bench distance_paper`` (``--quick``: fewer targets and frames).
Writes benchmarks/results/distance_paper.csv and distance_paper.png.
"""

import argparse
import time

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np



def load():
    C.load_solvers()
    from _free_point import FreePointDistanceSolver
    return FreePointDistanceSolver


# ---------------------------------------------------------------------------------- VI-B
CHAIN_POINTS = 10
TARGET_B = np.array([4.0, 5.0, 2.0])
VARIANTS_B = {
    "soft='none'": dict(soft='none'),
    "soft='anchors' (defaults)": dict(soft='anchors'),
    "soft='anchors', soft_decay=1": dict(soft='anchors', soft_decay=1.0),
}


def chain_b(solver_cls, **kw):
    ref = np.c_[np.arange(CHAIN_POINTS, dtype=float), np.zeros((CHAIN_POINTS, 2))]
    edges = [(i, i + 1) for i in range(CHAIN_POINTS - 1)]
    return solver_cls(ref, edges, pinned=(0,), **kw)


def error_curve(solver, target, iters):
    tg = {CHAIN_POINTS - 1: target}
    solver.reset()
    errs = [solver.errors(targets=tg)[0]]
    for _ in range(iters):
        solver.step(tg)
        errs.append(solver.errors(targets=tg)[0])
    return np.array(errs)


def first_below(errs, tol):
    idx = np.flatnonzero(errs < tol)
    return int(idx[0]) if len(idx) else np.nan


def section_b(solver_cls, targets, iters):
    rng = np.random.default_rng(2)
    extra = []
    for _ in range(targets):
        d = rng.normal(size=3)
        extra.append(d / np.linalg.norm(d) * rng.uniform(2.0, 8.5))
    rows, curves = [], {}
    for label, kw in VARIANTS_B.items():
        solver = chain_b(solver_cls, **kw)
        errs = error_curve(solver, TARGET_B, iters)
        curves[label] = errs
        counts6 = [first_below(error_curve(solver, t, iters), 1e-6) for t in extra]
        counts6 = np.array(counts6, dtype=float)
        rows.append(dict(
            case='VI-B', variant=label,
            iters_to_1em6=first_below(errs, 1e-6), iters_to_1em12=first_below(errs, 1e-12),
            final_hard_error=float(errs[-1]),
            random_targets=len(extra),
            random_converged_pct=100.0 * float(np.mean(~np.isnan(counts6))) if len(extra)
            else np.nan,
            random_median_iters_1em6=float(np.nanmedian(counts6))
            if np.any(~np.isnan(counts6)) else np.nan,
            random_max_iters_1em6=float(np.nanmax(counts6))
            if np.any(~np.isnan(counts6)) else np.nan))
    return rows, curves


# ---------------------------------------------------------------------------------- VI-C
def skeleton():
    """Return (names, (31, 3) T-pose points, (30, 2) bones) with the CMU topology."""
    pts, names, bones = [], [], []

    def add(name, xyz, parent=None):
        names.append(name)
        pts.append(xyz)
        if parent is not None:
            bones.append((names.index(parent), len(names) - 1))

    add('hip', (0.0, 0.0, 1.0))
    for side, s in (('l', 1.0), ('r', -1.0)):
        add(f'{side}hipjoint', (0.05 * s, 0.0, 0.95), 'hip')
        add(f'{side}femur', (0.10 * s, 0.0, 0.90), f'{side}hipjoint')
        add(f'{side}tibia', (0.10 * s, 0.01, 0.50), f'{side}femur')
        add(f'{side}foot', (0.10 * s, 0.0, 0.08), f'{side}tibia')
        add(f'{side}toes', (0.10 * s, 0.12, 0.02), f'{side}foot')
    add('lowerback', (0.0, 0.0, 1.10), 'hip')
    add('upperback', (0.0, 0.01, 1.25), 'lowerback')
    add('thorax', (0.0, 0.0, 1.40), 'upperback')
    add('lowerneck', (0.0, 0.0, 1.50), 'thorax')
    add('upperneck', (0.0, 0.01, 1.56), 'lowerneck')
    add('head', (0.0, 0.0, 1.66), 'upperneck')
    for side, s in (('l', 1.0), ('r', -1.0)):
        add(f'{side}clavicle', (0.05 * s, 0.0, 1.48), 'thorax')
        add(f'{side}humerus', (0.18 * s, 0.0, 1.47), f'{side}clavicle')
        add(f'{side}radius', (0.46 * s, 0.0, 1.46), f'{side}humerus')
        add(f'{side}wrist', (0.72 * s, 0.0, 1.46), f'{side}radius')
        add(f'{side}hand', (0.76 * s, 0.0, 1.46), f'{side}wrist')
        add(f'{side}fingers', (0.84 * s, 0.0, 1.46), f'{side}hand')
        add(f'{side}thumb', (0.78 * s, 0.04, 1.46), f'{side}wrist')
    return names, np.array(pts), np.array(bones)


def hand_path(start, frames):
    """Return (frames, 3) targets: from the rest hand to a loop of radius 0.2 in front."""
    centre = np.array([-0.3, 0.3, 1.35])
    s = np.linspace(0.0, 1.0, frames)
    angle = 2 * np.pi * s
    loop = centre + 0.2 * np.c_[np.cos(angle), np.zeros(frames), np.sin(angle)] * [1, 0, 1]
    blend = np.clip(s / 0.2, 0.0, 1.0)[:, None]      # first 20 %: move in from the rest
    return (1 - blend) * start + blend * loop


def section_c(solver_cls, frames, iters, step_repeats):
    names, ref, bones = skeleton()
    hand = names.index('rhand')
    path = hand_path(ref[hand], frames)
    rows = []
    hard_curves = {}
    for structured, decay in ((True, None), (False, None), (True, 1.0), (False, 1.0)):
        label = (f'{"structured (eqs. 12-13)" if structured else "dense SVD"}'
                 + ('' if decay is None else f', soft_decay={decay:g}'))
        extra = {} if decay is None else {'soft_decay': decay}
        solver = solver_cls(ref, bones, soft='anchors', structured=structured, **extra)
        # Step times: bones only, and bones + hand target.
        solver.reset()
        t_bones = C.time_calls(lambda: solver.step(None), step_repeats, warmup=3)
        solver.reset()
        tg = {hand: path[len(path) // 2]}
        t_target = C.time_calls(lambda: solver.step(tg), step_repeats, warmup=3)
        solver.reset()
        used, hard, ok = [], [], []
        t0 = time.perf_counter()
        for target in path:
            res = solver.solve({hand: target}, max_iters=iters, tol=1e-6)
            used.append(res.iterations)
            hard.append(res.hard_error)
            ok.append(res.success)
        wall = time.perf_counter() - t0
        hard_curves[label] = np.array(hard)
        rows.append(dict(
            case='VI-C', variant=label, points=len(ref), hard_rows=len(bones),
            soft_rows=4 * len(ref), step_ms_bones=1e3 * np.median(t_bones),
            step_ms_with_target=1e3 * np.median(t_target),
            iterations_per_s=1.0 / np.median(t_target),
            frames=len(path), fps_solve=len(path) / wall,
            mean_iters_per_frame=float(np.mean(used)),
            frames_converged_pct=100.0 * float(np.mean(ok)),
            max_hard_error=float(np.max(hard))))
    return rows, hard_curves, (ref, bones, solver.points, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--iters', type=int, default=60, help='VI-B iterations (60)')
    parser.add_argument('--targets', type=int, default=200, help='VI-B random targets (200)')
    parser.add_argument('--frames', type=int, default=300, help='VI-C animation frames (300)')
    parser.add_argument('--frame-iters', type=int, default=20,
                        help='VI-C max iterations per frame (20)')
    parser.add_argument('--repeats', type=int, default=500, help='VI-C timed steps (500)')
    parser.add_argument('--quick', action='store_true')
    args = parser.parse_args()
    if args.quick:
        args.targets, args.frames, args.repeats = 20, 60, 100
    print(C.machine())
    try:
        solver_cls = load()
    except ImportError as exc:
        print(f'FreePointDistanceSolver is not available yet ({exc}); nothing to run')
        return
    rows_b, curves = section_b(solver_cls, args.targets, args.iters)
    fields_b = ['case', 'variant', 'iters_to_1em6', 'iters_to_1em12', 'final_hard_error',
                'random_targets', 'random_converged_pct', 'random_median_iters_1em6',
                'random_max_iters_1em6']
    C.print_table(rows_b, fields_b, title='VI-B: 10-point chain, both ends held '
                  '(paper: error zero after 18 iterations)')
    rows_c, hard_curves, (ref, bones, final, path) = section_c(
        solver_cls, args.frames, args.frame_iters, args.repeats)
    fields_c = ['case', 'variant', 'points', 'hard_rows', 'soft_rows', 'step_ms_bones',
                'step_ms_with_target', 'iterations_per_s', 'frames', 'fps_solve',
                'mean_iters_per_frame', 'frames_converged_pct', 'max_hard_error']
    C.print_table(rows_c, fields_c, title='VI-C: 31 points, 124 soft + 30 hard '
                  '(paper: 110 fps optimised, 51 fps not)')
    C.write_csv('distance_paper', rows_b + rows_c, fields_b + fields_c[2:])

    plt = C.pyplot()
    fig = plt.figure(figsize=(11, 3.6))
    ax = fig.add_subplot(1, 3, 1)
    for label, errs in curves.items():
        ax.semilogy(np.maximum(errs, 1e-16), 'o-', ms=2, label=label)
    ax.axvline(18, color='k', ls=':', lw=0.8, label='paper: zero after 18')
    ax.set_xlabel('iteration')
    ax.set_ylabel('largest hard residual')
    ax.set_title('VI-B: 10-point chain to (4, 5, 2)', fontsize=9)
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3, which='both')
    ax = fig.add_subplot(1, 3, 2)
    for r in rows_c:
        short = r['variant'].replace(' (eqs. 12-13)', '').replace(', soft_decay=', '\ndecay ')
        short = short.replace('structured', 'struct.')
        ax.bar(short, r['fps_solve'], color='C0' if 'struct' in short else 'C1')
        ax.text(short, r['fps_solve'], f'{r["fps_solve"]:.0f} fps\n'
                f'{r["iterations_per_s"]:.0f} it/s', ha='center', va='bottom', fontsize=7)
    ax.bar(['paper\nopt.', 'paper\nnot'], [110, 51], color=['C0', 'C1'], alpha=0.4)
    ax.set_ylabel('frames/s (solve to 1e-6 or 20 iterations)')
    ax.set_title('VI-C: 31 points, 124 soft + 30 hard', fontsize=9)
    ax.tick_params(axis='x', labelsize=6)
    ax = fig.add_subplot(1, 3, 3, projection='3d')
    for a, b in bones:
        ax.plot(*ref[[a, b]].T, color='0.6', lw=1)
        ax.plot(*final[[a, b]].T, color='C0', lw=1.2)
    ax.plot(*path.T, 'r:', lw=0.8)
    ax.set_title('VI-C: reference (grey), last frame (blue), hand path (red)', fontsize=8)
    ax.set_box_aspect((1, 1, 1.4))
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'distance_paper'))


if __name__ == '__main__':
    main()
