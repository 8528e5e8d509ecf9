"""Shared pieces of the motion benchmarks (motion_quality, tracking, smc_ablation).

Not a benchmark itself. Import ``_common`` first (it pins BLAS to one thread).

- ``load_arms``: the project's arms (urdf/smcik_arm.urdf, smcik_arm6.urdf) and the Panda-,
  iiwa- and UR5-type arms that ``dh_round_trip.arms()`` writes from published DH tables.
- Plants (what the solver's estimate drives): ``IdealPlant`` (the arm is where the solver
  says, i.e. solver level) and ``StraightLineFollower`` (a synchronised straight-line
  follower within velocity and acceleration limits, like sim_arm.follow but with every joint
  on one line). A plant has ``reset(q)``, ``command(q_target) -> q`` (one tick) and ``dt``;
  the lead's command-shaping module can be plugged in through ``make_plant``.
- ``NearestSolution``: the IK solution nearest a start configuration, found independently
  of the filter: bounded Levenberg-Marquardt (scipy ``least_squares``) from the start, from
  perturbations of it and from uniform random seeds; every distinct solution is mapped to
  its 2 pi-equivalent nearest the start (joints whose range exceeds 2 pi) and slid along the
  solution manifold to a local minimum of the joint distance (scipy SLSQP with the task as
  equality constraints); the minimum over all of them is taken.
- Scenarios: ``run_point_goals`` (random reachable poses one after another) and
  ``run_tracking`` (a circle at 100 Hz with out-of-reach excursions).
"""

import numpy as np
from scipy.optimize import least_squares, minimize
from scipy.spatial.transform import Rotation

from smcik_ros.model import Chain

import _common as C

DT = 0.01
TOL = (1e-3, 1e-2)

# Home configurations per arm: the start of the point goals and the circle centre. Chosen
# so that the tracking circle stays well inside the workspace: along a least-squares IK
# continuation of the circle the smallest singular value of J is >= 0.1, every joint stays
# >= 0.6 rad from its limits and below 1.2 rad/s.
HOMES = {
    'arm7': [0.0, 0.6, 0.0, -2.2, 0.0, 1.2, 0.0],
    'arm6': [0.0, -1.3, 1.2, -1.4, 0.9, 0.0],
    'panda_like': [0.0, 0.3, 0.0, -2.2, 0.0, 2.4, 0.8],
    'iiwa_like': [0.0, 0.6, 0.0, -1.2, 0.0, 0.9, 0.0],
    'ur5_like': [0.0, -1.3, 1.6, -1.9, -1.57, 0.0],
}
SHOULDERS = {'arm7': [0.0, 0.0, 0.24], 'arm6': [0.0, 0.0, 0.145], 'panda_like': [0, 0, 0.333],
             'iiwa_like': [0.0, 0.0, 0.36], 'ur5_like': [0.0, 0.0, 0.089159]}
ARM_NAMES = tuple(HOMES)


def load_arms(names=ARM_NAMES):
    """Return {name: Chain} for the requested arms (URDF text built at run time for DH arms)."""
    import dh_round_trip
    dh = dh_round_trip.arms()
    out = {}
    for name in names:
        if name == 'arm7':
            out[name] = Chain.from_urdf(C.ARM7)
        elif name == 'arm6':
            out[name] = Chain.from_urdf(C.ARM6)
        else:
            out[name] = Chain.from_urdf(dh[name], 'base_link', 'tool0')
    return out


# ---------------------------------------------------------------------------- plants
class IdealPlant:
    """The arm is wherever the solver's estimate says (solver-level figures)."""

    name = 'ideal'

    def __init__(self, chain, dt=DT):
        self.chain, self.dt = chain, dt
        self.q = None

    def reset(self, q):
        self.q = np.array(q, dtype=float)

    def command(self, q_target):
        self.q = np.array(q_target, dtype=float)
        return self.q


class StraightLineFollower:
    """A synchronised straight-line follower: every joint on the line to the target.

    Per tick the wanted velocity points at the target with the largest speed that keeps
    each joint within ``velocity_scale`` x its URDF velocity limit and still lets it brake
    within ``acceleration`` [rad/s^2] (sqrt(2 a d) on the line); the velocity vector changes
    by at most ``acceleration * dt`` per joint and tick. The result is clipped to the limits.
    """

    name = 'follower'

    def __init__(self, chain, dt=DT, velocity_scale=0.5, acceleration=10.0):
        self.chain, self.dt = chain, dt
        v = np.where(np.isfinite(chain.velocity_limits), chain.velocity_limits, 1.0)
        self.v_max = velocity_scale * v
        self.a_max = float(acceleration)
        self.q = self.v = None

    def reset(self, q):
        self.q = np.array(q, dtype=float)
        self.v = np.zeros_like(self.q)

    def command(self, q_target):
        error = np.asarray(q_target, dtype=float) - self.q
        dist = float(np.linalg.norm(error))
        if dist < 1e-12:
            v_want = np.zeros_like(error)
        else:
            u = error / dist
            au = np.maximum(np.abs(u), 1e-12)
            v_line = np.min(self.v_max / au)
            a_line = np.min(self.a_max / au)
            speed = min(v_line, np.sqrt(2.0 * a_line * dist), dist / self.dt)
            v_want = u * speed
        dv = np.clip(v_want - self.v, -self.a_max * self.dt, self.a_max * self.dt)
        self.v = np.clip(self.v + dv, -self.v_max, self.v_max)
        q = self.q + self.v * self.dt
        clipped = self.chain.clip(q)
        self.v[clipped != q] = 0.0
        self.q = clipped
        return self.q

    def ideal_time(self, q_from, q_to):
        """Return the time [s] of a rest-to-rest straight move (trapezoid on the line)."""
        d = np.asarray(q_to) - np.asarray(q_from)
        dist = float(np.linalg.norm(d))
        if dist < 1e-12:
            return 0.0
        au = np.maximum(np.abs(d / dist), 1e-12)
        v, a = np.min(self.v_max / au), np.min(self.a_max / au)
        if dist <= v * v / a:
            return 2.0 * np.sqrt(dist / a)
        return dist / v + v / a


PLANTS = {'ideal': IdealPlant, 'follower': StraightLineFollower}


def make_plant(name, chain):
    """Return a plant by name ('ideal' or 'follower'); add the node's command shaping here."""
    return PLANTS[name](chain)


# ---------------------------------------------------------------------------- errors
def pose_errors(chain, q, pose):
    """Return (position error [m], orientation error [rad]) of q (nq,) or (N, nq) vs pose."""
    got = chain.fk(np.atleast_2d(q))
    pos = np.linalg.norm(got[:, :3, 3] - pose[:3, 3], axis=1)
    rel = np.einsum('ji,njk->nik', pose[:3, :3], got[:, :3, :3])
    cos = np.clip(0.5 * (np.trace(rel, axis1=1, axis2=2) - 1.0), -1.0, 1.0)
    ori = np.arccos(cos)
    return (pos[0], ori[0]) if np.ndim(q) == 1 else (pos, ori)


def within(chain, q, pose, tol=TOL):
    pos, ori = pose_errors(chain, q, pose)
    return (pos <= tol[0]) & (ori <= tol[1])


# ---------------------------------------------------------------------------- nearest IK
class NearestSolution:
    """The IK solution of a pose nearest (Euclidean joint distance) a start configuration.

    Independent of the filter under test: a batched, bounded (projected) damped Newton
    iteration on the pose residual (position, rotation vector from scipy) from the start,
    12 perturbations of it (0.3 and 1 rad stds) and ``starts`` (300) uniform random seeds; every
    distinct solution (residual < 1e-9) is mapped to its 2 pi-equivalent nearest the start
    (joints whose range exceeds 2 pi); for redundant arms the ``polish`` nearest are slid
    along the solution set to a local minimum of the distance (scipy SLSQP with the task as
    equality constraints). The minimum over all of them is taken. With 300 seeds it agreed
    with 200-seed runs on every goal checked (a 32-seed version missed a nearer branch in 3
    goals of 30 on the iiwa-type arm; 150 seeds with 60 iterations missed one).
    """

    def __init__(self, chain, starts=300, seed=0, iterations=100):
        self.chain = chain
        self.starts = starts
        self.iterations = iterations
        self.rng = np.random.default_rng(seed)
        self.lower, self.upper = chain.lower, chain.upper
        span = chain.upper - chain.lower
        self.wraps = span > 2.0 * np.pi + 1e-9

    def _residual(self, q, pose):
        T = self.chain.fk(q)
        rel = Rotation.from_matrix(T[:3, :3] @ pose[:3, :3].T).as_rotvec()
        return np.r_[T[:3, 3] - pose[:3, 3], rel]

    def _residuals(self, q, pose):
        T = self.chain.fk(q)
        rel = Rotation.from_matrix(T[:, :3, :3] @ pose[:3, :3].T).as_rotvec()
        return np.concatenate([T[:, :3, 3] - pose[:3, 3], rel], axis=1)

    def _jac(self, q, pose):
        return self.chain.jacobian(q)

    def _map_turns(self, q, ref):
        """Move joints with a range over 2 pi by whole turns towards ``ref``, inside limits."""
        q = q.copy()
        for j in np.flatnonzero(self.wraps):
            k = np.round((ref[j] - q[j]) / (2 * np.pi))
            for kk in (k, k - 1, k + 1):
                cand = q[j] + 2 * np.pi * kk
                if self.lower[j] <= cand <= self.upper[j] and abs(cand - ref[j]) <= np.pi + 1e-9:
                    q[j] = cand
                    break
        return q

    def solve_all(self, pose, q_start):
        """Return the distinct solutions (K, n) found (mapped towards q_start)."""
        chain = self.chain
        seeds = [q_start[None]]
        for s in (0.3, 1.0):
            seeds.append(chain.clip(q_start + s * self.rng.standard_normal((6, chain.nq))))
        seeds.append(chain.random_configuration(self.rng, self.starts))
        q = np.concatenate(seeds)
        eye = np.eye(6)
        for _ in range(self.iterations):
            r = self._residuals(q, pose)
            jac = chain.jacobian(q)
            err = np.einsum('ki,ki->k', r, r)
            lam = 1e-3 * err + 1e-9
            jjt = jac @ np.swapaxes(jac, 1, 2) + lam[:, None, None] * eye
            step = -np.einsum('kiv,ki->kv', jac, np.linalg.solve(jjt, r[..., None])[..., 0])
            big = np.max(np.abs(step), axis=1, keepdims=True)
            q = np.clip(q + step * np.minimum(1.0, 0.5 / np.maximum(big, 1e-12)),
                        self.lower, self.upper)
        r = self._residuals(q, pose)
        good = ((np.linalg.norm(r[:, :3], axis=1) < 1e-9)
                & (np.linalg.norm(r[:, 3:], axis=1) < 1e-8))
        sols = []
        for x in q[good]:
            x = self._map_turns(x, q_start)
            if not any(np.max(np.abs(x - p)) < 1e-3 for p in sols):
                sols.append(x)
        return np.array(sols).reshape(-1, chain.nq)

    def slide(self, q0, pose, q_start):
        """Return a local minimum of |q - q_start| on the solution set, started at q0."""
        cons = {'type': 'eq', 'fun': lambda q: self._residual(q, pose),
                'jac': lambda q: self._jac(q, pose)}
        res = minimize(lambda q: 0.5 * np.sum((q - q_start) ** 2), q0,
                       jac=lambda q: q - q_start, method='SLSQP', constraints=[cons],
                       bounds=list(zip(self.lower, self.upper)),
                       options={'maxiter': 200, 'ftol': 1e-12})
        q = self.chain.clip(res.x)
        if np.linalg.norm(self._residual(q, pose)) < 1e-6:
            return q
        return q0

    def __call__(self, pose, q_start, polish=16, free=None):
        """Return (q_nearest (n,), distance [rad], number of distinct solutions found);
        ``free(q) -> bool``: only solutions it accepts count (collision-free ones)."""
        sols = self.solve_all(pose, q_start)
        if free is not None:
            sols = sols[[bool(free(q)) for q in sols]] if len(sols) else sols
        if len(sols) == 0:
            return None, np.inf, 0
        order = np.argsort(np.linalg.norm(sols - q_start, axis=1))
        best, best_d = None, np.inf
        redundant = self.chain.nq > 6
        for q in sols[order[:polish if redundant else len(order)]]:
            if redundant:
                slid = self.slide(q, pose, q_start)
                q = slid if free is None or free(slid) else q
            d = float(np.linalg.norm(q - q_start))
            if d < best_d:
                best, best_d = q, d
        return best, best_d, len(sols)


# ---------------------------------------------------------------------------- scenarios
def reachable_goals(chain, count, seed):
    """Return ``count`` random reachable poses (FK of uniform in-limit configurations)."""
    rng = np.random.default_rng(seed)
    return [chain.fk(chain.random_configuration(rng)) for _ in range(count)]


def turn_count(q_final, q_nearest, wraps):
    """Return how many joints end a whole turn (2 pi k, k != 0, within 0.3 rad) away from
    the nearest solution."""
    d = np.abs(q_final - q_nearest)
    k = np.round(d / (2 * np.pi))
    return int(np.sum((k >= 1) & (np.abs(d - 2 * np.pi * k) < 0.3)))


def run_point_goals(chain, solver, plant, goals, q0, nearest, tol=TOL, timeout=10.0,
                    settle=0.3, constraint=None):
    """Drive ``plant`` with ``solver.step`` (one per tick) through ``goals`` one after another.

    Per goal: the arm starts where the previous goal left it; a goal ends when the arm has
    been within ``tol`` for ``settle`` seconds (or after ``timeout``). Returns one record per
    goal: reached, time [s] (first tick within tol), path (sum of joint-step norms [rad]),
    straight distance to the nearest solution [rad], path ratio, L-inf distance of the final
    configuration to the nearest solution, whole-turn joints, the ideal straight-move time.
    ``constraint``: a collision constraint the solver respects (its reference is the plant's
    configuration, as the node sets it to the command): the nearest solution is then the
    nearest collision-free one (a goal without one has ``nearest`` inf).
    """
    plant.reset(q0)
    solver.reset(q0)
    wraps = (chain.upper - chain.lower) > 2 * np.pi + 1e-9
    records = []
    for goal in goals:
        q_start = plant.q.copy()
        free = None if constraint is None else \
            (lambda q: not constraint.in_collision(chain.frames(q))[0])
        q_near, d_near, n_sols = nearest(goal, q_start, free=free)
        path, t_reach, inside_for = 0.0, None, 0.0
        ticks = int(round(timeout / plant.dt))
        switches = 0
        for k in range(ticks):
            if constraint is not None:
                constraint.set_reference(plant.q)
            q_cmd = solver.step(goal)
            if solver.last_info.get('branch_switch'):
                switches += 1
            q_prev = plant.q.copy()
            q = plant.command(q_cmd)
            path += float(np.linalg.norm(q - q_prev))
            if within(chain, q, goal, tol):
                if t_reach is None:
                    t_reach = (k + 1) * plant.dt
                inside_for += plant.dt
                if inside_for >= settle:
                    break
            else:
                inside_for = 0.0
        q_final = plant.q.copy()
        if q_near is None:      # no collision-free solution: not a goal the arm may reach
            q_near = np.full(chain.nq, np.nan)
        ideal = plant.ideal_time(q_start, q_near) if hasattr(plant, 'ideal_time') else np.nan
        records.append(dict(
            reached=t_reach is not None, time=np.nan if t_reach is None else t_reach,
            path=path, nearest=d_near, solutions=n_sols,
            ratio=path / d_near if d_near > 1e-3 else (1.0 if path < 1e-3 else np.inf),
            far=float(np.max(np.abs(q_final - q_near))), turns=turn_count(q_final, q_near, wraps),
            ideal_time=ideal, switches=switches,
            final_distance=float(np.linalg.norm(q_final - q_start)),
            q_start=q_start, q_final=q_final, q_nearest=q_near,
            final_error=tuple(float(v) for v in pose_errors(chain, q_final, goal))))
    return records


def circle_poses(chain, name, radius=0.075, speed=0.1, laps=1.0, dt=DT):
    """Return (poses (K, 4, 4), phase (K,)): a circle of ``radius`` [m] at ``speed`` [m/s]
    around the tool position of the arm's home configuration, in the vertical plane facing
    the shoulder, with the orientation turning (about the tool's z axis by 0.5 sin(phi) and
    about the circle's tangent by 0.15 sin(2 phi))."""
    home = np.asarray(HOMES[name])
    pose0 = chain.fk(home)
    centre = pose0[:3, 3]
    radial = centre - np.asarray(SHOULDERS[name])
    radial[2] = 0.0
    radial /= np.linalg.norm(radial)
    tangent = np.cross([0.0, 0.0, 1.0], radial)
    up = np.array([0.0, 0.0, 1.0])
    omega = speed / radius
    steps = int(round(laps * 2 * np.pi / omega / dt))
    phi = np.arange(steps + 1) * omega * dt
    poses = np.tile(np.eye(4), (len(phi), 1, 1))
    poses[:, :3, 3] = (centre + radius * (np.cos(phi)[:, None] - 1.0) * tangent
                       + radius * np.sin(phi)[:, None] * up)
    z_tool = pose0[:3, 2]
    spin = Rotation.from_rotvec(0.5 * np.sin(phi)[:, None] * z_tool)
    tilt = Rotation.from_rotvec(0.15 * np.sin(2 * phi)[:, None] * tangent)
    poses[:, :3, :3] = (tilt * spin).as_matrix() @ pose0[:3, :3]
    return poses, phi


def _pose_residual(chain, q, pose):
    t = chain.fk(q)
    return np.r_[t[:3, 3] - pose[:3, 3],
                 Rotation.from_matrix(t[:3, :3] @ pose[:3, :3].T).as_rotvec()]


def max_reach(chain, shoulder, samples=20000):
    q = chain.random_configuration(np.random.default_rng(5), samples)
    return float(np.max(np.linalg.norm(chain.fk(q)[:, :3, 3] - shoulder, axis=1)))


def excursion_poses(pose, shoulder, reach, kind, dt=DT, beyond=0.15, hold=1.5, back_hold=2.5,
                    speed=0.1):
    """Return (poses, out_mask, still_mask, back_index) of an out-of-reach excursion from
    ``pose``: 'jump' = the target jumps ``beyond`` [m] past the reach (radially from the
    shoulder), stays ``hold`` s, jumps back; 'drag' = it moves out and back at ``speed``."""
    radial = pose[:3, 3] - shoulder
    dist = np.linalg.norm(radial)
    radial /= dist
    out_len = reach - dist + beyond
    if kind == 'jump':
        s = np.r_[np.full(int(hold / dt), out_len)]
        still = np.r_[False, np.ones(len(s) - 1, dtype=bool)]
    else:
        ramp = np.arange(1, int(out_len / (speed * dt)) + 1) * speed * dt
        s = np.r_[ramp, np.full(int(hold / dt), out_len), ramp[::-1][1:]]
        still = np.zeros(len(s), dtype=bool)
        still[len(ramp) + 1:len(ramp) + int(hold / dt)] = True
    s = np.r_[s, np.zeros(int(back_hold / dt))]
    still = np.r_[still, np.zeros(int(back_hold / dt), dtype=bool)]
    poses = np.tile(pose, (len(s), 1, 1))
    poses[:, :3, 3] += s[:, None] * radial
    out = s > 0.0
    back = int(np.flatnonzero(out)[-1]) + 1
    return poses, out, still, back


def run_tracking(chain, name, solver, plant, excursions=('jump', 'drag'), laps=1.0,
                 tol=TOL):
    """Track the circle (one step per 10 ms tick), inserting each excursion at a point of
    the circle. Returns (record dict, time series dict)."""
    poses, phi = circle_poses(chain, name, laps=laps)
    shoulder = np.asarray(SHOULDERS[name])
    reach = max_reach(chain, shoulder)
    # Start on the circle: solve the first pose from home.
    home = np.asarray(HOMES[name])
    start = least_squares(lambda q: _pose_residual(chain, q, poses[0]), home,
                          bounds=(chain.lower, chain.upper)).x
    plant.reset(start)
    solver.reset(start)
    # Insert the excursions at evenly spaced points of the lap.
    cuts = np.linspace(0, len(poses), len(excursions) + 2).astype(int)[1:-1]
    segments, kinds = [], []
    last = 0
    for cut, kind in zip(cuts, excursions):
        segments.append(('circle', poses[last:cut], None))
        exc = excursion_poses(poses[cut - 1], shoulder, reach, kind)
        segments.append((kind, exc[0], exc))
        last = cut
    segments.append(('circle', poses[last:], None))
    circle_err, circle_ori, plant_err = [], [], []
    series = dict(pos=[], ori=[], plant_pos=[], kind=[])
    exc_records = []
    for kind, seg, exc in segments:
        if kind == 'circle':
            for pose in seg:
                q = solver.step(pose)
                qp = plant.command(q)
                p, o = pose_errors(chain, q, pose)
                pp, _ = pose_errors(chain, qp, pose)
                circle_err.append(p)
                circle_ori.append(o)
                plant_err.append(pp)
                series['pos'].append(p)
                series['ori'].append(o)
                series['plant_pos'].append(pp)
                series['kind'].append(0)
            continue
        _, out, still, back = exc
        q_before = solver.estimate.copy()
        qp_before = plant.q.copy()
        errs, recover, recover_plant, worst_rise = [], None, None, 0.0
        for i, pose in enumerate(seg):
            q = solver.step(pose)
            qp = plant.command(q)
            p, o = pose_errors(chain, q, pose)
            pp, po = pose_errors(chain, qp, pose)
            if still[i] and errs:
                worst_rise = max(worst_rise, p - errs[-1])
            errs.append(p)
            series['pos'].append(p)
            series['ori'].append(o)
            series['plant_pos'].append(pp)
            series['kind'].append(1)
            if i >= back:
                if recover is None and p <= tol[0] and o <= tol[1]:
                    recover = (i - back + 1) * DT
                if recover_plant is None and pp <= tol[0] and po <= tol[1]:
                    recover_plant = (i - back + 1) * DT
        exc_records.append(dict(
            kind=kind, recover_s=np.inf if recover is None else recover,
            recover_plant_s=np.inf if recover_plant is None else recover_plant,
            branch_dist=float(np.max(np.abs(solver.estimate - q_before))),
            branch_dist_plant=float(np.max(np.abs(plant.q - qp_before))),
            worst_rise_m=worst_rise))
    circle_err = np.array(circle_err)
    circle_ori = np.array(circle_ori)
    plant_err = np.array(plant_err)
    rec = dict(median_pos_mm=1e3 * np.median(circle_err),
               p95_pos_mm=1e3 * np.percentile(circle_err, 95),
               max_pos_mm=1e3 * np.max(circle_err),
               median_ori_mrad=1e3 * np.median(circle_ori),
               p95_ori_mrad=1e3 * np.percentile(circle_ori, 95),
               plant_median_pos_mm=1e3 * np.median(plant_err),
               plant_p95_pos_mm=1e3 * np.percentile(plant_err, 95),
               excursions=exc_records)
    return rec, {k: np.array(v) for k, v in series.items()}
