"""Collision avoidance: check cost per SMC step, IK success behind obstacles, cover tightness.

Three tables (CSV + PNG in benchmarks/results/collision_*.{csv,png}):

1. cost: the collision constraint's ``violated`` on 100 configurations (a particle cloud near
   the home pose and uniformly random ones, as after a restart), and one SMC ``step`` (100
   particles, tracking a goal sequence), with and without self-collision, with 0 and 10
   box obstacles; 'extra' is the SMC step's time minus the same step without the constraint.
2. behind: IK ``solve`` of position goals half of which lie behind a low wall, for 'smc',
   'jacobian' and 'distance' with the constraint: success, colliding answers (the model's
   own check; the tests check with python-fcl), solve time.
3. covers: per link, spheres, excess bound, mean excess (surface samples of each sphere's
   exposed surface, distance to the URDF geometry) and cold compute time.

Run: ``./smcik bench collision`` (about 3 min on the 2-core machine). ``--thirdparty DIR``
also prints (never writes) the same rows for MoveIt's Panda under DIR (by hand: third-party
models and anything derived from them stay out of the repository).
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (pins BLAS to one thread)
import numpy as np  # noqa: E402

from smcik_ros.collision import (CollisionConstraint, CollisionModel, Obstacle,  # noqa: E402
                                 Scene, conventional_srdf_path, pose_matrix,
                                 self_collision_pairs)
from smcik_ros.goals import PositionTarget  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.solvers import make_solver  # noqa: E402

ARMS = {'arm7': (_common.ARM7, 'base_link', 'tool0', {'joint4': -1.57, 'joint6': 1.57}),
        'arm6': (_common.ARM6, 'base_link', 'tool0',
                 {'shoulder_lift_joint': -1.57, 'elbow_joint': 1.57, 'wrist_1_joint': -1.57,
                  'wrist_2_joint': -1.57})}


def home(chain, values):
    q = chain.neutral_configuration()
    for name, value in values.items():
        q[chain.joint_index(name)] = value
    return q


def boxes(rng, count, chain, q0, model, pairs):
    """Return ``count`` 10 cm boxes around the arm, none touching it at q0."""
    out = {}
    probe = CollisionConstraint(model, self_collision=False)
    while len(out) < count:
        p = rng.uniform([-0.7, -0.7, 0.0], [0.7, 0.7, 0.9])
        box = Obstacle.box((0.1, 0.1, 0.1), pose_matrix(p))
        probe.scene.add(('probe', 0), box)
        if not probe.in_collision(chain.frames(q0))[0] and np.linalg.norm(p[:2]) > 0.15:
            out[('bench', len(out))] = box
    return out


def timed(fn, repeats):
    times = _common.time_calls(fn, repeats, warmup=3)
    return float(np.median(times)) * 1e3, float(np.mean(times)) * 1e3


def smc_steps(chain, q0, constraints, goals, steps=240, seed=3):
    solver = make_solver('smc', chain, seed=seed)
    solver.set_constraints(constraints)
    solver.reset(q0)
    times = []
    clock = time.thread_time
    for k in range(steps):
        goal = goals[(k // 40) % len(goals)]
        for c in constraints:
            c.set_reference(solver.estimate)
        t0 = clock()
        solver.step(goal)
        times.append(clock() - t0)
    times = np.array(times[10:]) * 1e3
    return float(np.mean(times)), float(np.median(times)), float(np.percentile(times, 95))


def cost_rows(name, chain, model, pairs, q0, rng):
    rows = []
    reach = [PositionTarget(chain.fk(chain.clip(q0 + rng.normal(0, 0.4, chain.nq)))[:3, 3])
             for _ in range(6)]
    base = smc_steps(chain, q0, [], reach)
    near = chain.frames(chain.clip(q0 + rng.normal(0.0, 0.05, (100, chain.nq))))
    random = chain.frames(chain.random_configuration(rng, 100))
    obstacles = boxes(rng, 10, chain, q0, model, pairs)
    for self_collision in (True, False):
        for count in (0, 10):
            scene = Scene(dict(list(obstacles.items())[:count]))
            c = CollisionConstraint(model, scene, pairs=pairs, self_collision=self_collision)
            if not self_collision and count == 0:
                continue

            def check(frames=near):
                c._cache = None
                c.violated(frames)
            near_ms, _ = timed(check, 30)
            random_ms, _ = timed(lambda: check(random), 10)
            mean, median, p95 = smc_steps(chain, q0, [c], reach)
            rows.append({'arm': name, 'self_collision': self_collision, 'obstacles': count,
                         'spheres': len(model.radii), 'self_pairs': len(c.pairs),
                         'check_near_ms': near_ms, 'check_random_ms': random_ms,
                         'smc_step_mean_ms': mean, 'smc_step_median_ms': median,
                         'smc_step_p95_ms': p95, 'smc_step_no_collision_ms': base[0],
                         'extra_mean_ms': mean - base[0]})
    return rows


WALL = Obstacle.box((0.1, 0.4, 0.3), pose_matrix((0.35, 0.0, 0.15)))


def behind_rows(name, chain, model, pairs, q0, rng, count=30):
    if name != 'arm7':
        return []
    scene = Scene({('wall', 0): WALL})
    c = CollisionConstraint(model, scene, pairs=pairs)
    goals = []
    while len(goals) < count:
        q = chain.random_configuration(rng)
        if c.in_collision(chain.frames(q))[0]:
            continue
        p = chain.fk(q)[:3, 3]
        behind = p[0] > 0.42 and abs(p[1]) < 0.2 and p[2] < 0.3
        if behind == (len(goals) % 2 == 0):
            goals.append(p)
    rows = []
    for solver_name in ('smc', 'jacobian', 'distance'):
        for constrained in (True, False):
            solver = make_solver(solver_name, chain, seed=4)
            solver.set_constraints([c] if constrained else [])
            ok = ok_behind = colliding = 0
            t0 = time.perf_counter()
            for k, goal in enumerate(goals):
                result = solver.solve(PositionTarget(goal), q0, max_iters=150, tol=1e-3)
                ok += result.success
                ok_behind += result.success and k % 2 == 0
                colliding += bool(c.in_collision(chain.frames(result.q))[0])
            rows.append({'arm': name, 'solver': solver_name, 'collision_constraint': constrained,
                         'goals': count, 'success_pct': 100.0 * ok / count,
                         'success_behind_pct': 200.0 * ok_behind / count,
                         'colliding_answers': colliding,
                         'ms_per_solve': 1e3 * (time.perf_counter() - t0) / count})
    return rows


def cover_rows(name, urdf, chain, cache_dir, package_paths=()):
    import trimesh
    t0 = time.perf_counter()
    model = CollisionModel.from_urdf(chain, urdf, package_paths=package_paths,
                                     cache_dir=cache_dir)
    elapsed = time.perf_counter() - t0
    rows = []
    unit = _fibonacci(100)
    for link, spheres, excess, swept in model.excess_table():
        i = model.link_index(link)
        sl = slice(model.link_start[i], model.link_start[i] + model.link_count[i])
        centers, radii = model.centers[sl], model.radii[sl]
        solid = _link_solid(model, link, chain)
        mean = np.nan
        if solid is not None and not swept:
            pts = (centers[:, None] + radii[:, None, None] * unit[None]).reshape(-1, 3)
            d = np.linalg.norm(pts[:, None] - centers[None], axis=-1) - radii[None]
            owner = np.repeat(np.arange(len(radii)), len(unit))
            d[np.arange(len(pts)), owner] = np.inf
            exposed = pts[d.min(axis=1) > 0.0]
            mean = float(np.mean(np.maximum(0.0, -trimesh.proximity.signed_distance(
                solid, exposed))))
        rows.append({'arm': name, 'link': link, 'spheres': spheres,
                     'excess_bound_mm': 1e3 * excess, 'excess_mean_mm': 1e3 * mean,
                     'swept': swept, 'model_build_s': elapsed})
    return rows, model


def _fibonacci(n):
    k = np.arange(n) + 0.5
    phi, theta = np.arccos(1 - 2 * k / n), np.pi * (1 + 5 ** 0.5) * k
    return np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)


def _link_solid(model, link, chain):
    """Return the link's URDF collision geometry as one trimesh in its body frame (or None)."""
    import trimesh
    from smcik_ros.collision.model import _element_mesh
    parts = []
    body, off = chain.link_anchor(link) if chain.has_link(link) else (None, None)
    if off is None:
        return None
    for geom in model.geometry.get(link, []):
        if geom.kind == 'sphere':
            mesh = trimesh.creation.icosphere(subdivisions=4, radius=geom.size[0])
        elif geom.kind == 'cylinder':
            mesh = trimesh.creation.cylinder(radius=geom.size[0], height=geom.size[1],
                                             sections=128)
        else:
            v, f = _element_mesh(geom, model.tolerance)
            mesh = trimesh.Trimesh(v, f)
        parts.append(mesh.apply_transform(off @ geom.origin))
    return trimesh.util.concatenate(parts) if parts else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--thirdparty', default='', help='directory holding MoveIt\'s '
                        'panda_description and panda_moveit_config (printed only)')
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cache = tempfile.mkdtemp(prefix='smcik-bench-covers-')
    cost, behind, covers = [], [], []
    for name, (urdf, base, tip, values) in ARMS.items():
        chain = Chain.from_urdf(urdf, base, tip)
        rows, model = cover_rows(name, urdf, chain, cache)
        covers += rows
        pairs = self_collision_pairs(model, conventional_srdf_path(urdf))
        q0 = home(chain, values)
        cost += cost_rows(name, chain, model, pairs, q0, rng)
        behind += behind_rows(name, chain, model, pairs, q0, rng)
    machine = _common.machine()
    cost_fields = ['arm', 'self_collision', 'obstacles', 'spheres', 'self_pairs',
                   'check_near_ms', 'check_random_ms', 'smc_step_mean_ms',
                   'smc_step_median_ms', 'smc_step_p95_ms', 'smc_step_no_collision_ms',
                   'extra_mean_ms']
    _common.print_table(cost, cost_fields, title=f'Collision cost, 100 particles ({machine}; '
                        'SMC step times are thread CPU time)')
    behind_fields = ['arm', 'solver', 'collision_constraint', 'goals', 'success_pct',
                     'success_behind_pct', 'colliding_answers', 'ms_per_solve']
    _common.print_table(behind, behind_fields, title='IK on goals behind a wall (half of them)')
    cover_fields = ['arm', 'link', 'spheres', 'excess_bound_mm', 'excess_mean_mm', 'swept',
                    'model_build_s']
    _common.print_table(covers, cover_fields, title='Cover tightness (tolerance 10 mm)')
    _common.write_csv('collision_cost', cost, cost_fields)
    _common.write_csv('collision_behind', behind, behind_fields)
    _common.write_csv('collision_covers', covers, cover_fields)
    _plot(cost, behind, covers)
    if args.thirdparty:
        _thirdparty(args.thirdparty, rng, cache, cost_fields, cover_fields)


def _plot(cost, behind, covers):
    plt = _common.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    labels = [f'{r["arm"]}\nself={"y" if r["self_collision"] else "n"} obs={r["obstacles"]}'
              for r in cost]
    x = np.arange(len(cost))
    axes[0].bar(x - 0.2, [r['smc_step_mean_ms'] for r in cost], 0.4, label='SMC step, mean')
    axes[0].bar(x + 0.2, [r['smc_step_p95_ms'] for r in cost], 0.4, label='p95')
    axes[0].axhline(cost[0]['smc_step_no_collision_ms'], color='k', ls=':',
                    label='step without collision')
    axes[0].set_xticks(x, labels, fontsize=7)
    axes[0].set_ylabel('ms (thread CPU)')
    axes[0].legend(fontsize=7)
    with_c = [r for r in behind if r['collision_constraint']]
    without = [r for r in behind if not r['collision_constraint']]
    x = np.arange(len(with_c))
    axes[1].bar(x - 0.2, [r['success_pct'] for r in with_c], 0.4, label='success % (with)')
    axes[1].bar(x + 0.2, [100.0 * r['colliding_answers'] / r['goals'] for r in without], 0.4,
                label='colliding answers % (without)')
    axes[1].set_xticks(x, [r['solver'] for r in with_c])
    axes[1].legend(fontsize=7)
    axes[1].set_title('goals behind a wall (arm7)', fontsize=9)
    axes[2].bar(np.arange(len(covers)), [r['excess_bound_mm'] for r in covers], label='bound')
    axes[2].bar(np.arange(len(covers)), [r['excess_mean_mm'] for r in covers], label='mean')
    axes[2].set_xticks(np.arange(len(covers)), [f'{r["arm"]}:{r["link"]}' for r in covers],
                       rotation=90, fontsize=6)
    axes[2].set_ylabel('cover excess [mm]')
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    _common.save_figure(fig, 'collision')


def _thirdparty(directory, rng, cache, cost_fields, cover_fields):
    """Print the Panda rows (never written to the repository)."""
    urdf, srdf, link, chain = _common.thirdparty_panda(directory)
    rows, model = cover_rows('panda', urdf, chain, cache, package_paths=[link])
    _common.print_table(rows, cover_fields, title='Panda covers (printed only)')
    pairs = self_collision_pairs(model, srdf)
    q0 = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    _common.print_table(cost_rows('panda', chain, model, pairs, q0, rng), cost_fields,
                        title='Panda collision cost (printed only)')


if __name__ == '__main__':
    main()
