"""Whole-body IK side by side with PlaCo and pink (PyPI) on third-party robots (issue 32 item 7).

    ./smcik bench wholebody                  # 20 problems per robot, both peers
    ./smcik bench wholebody --problems 50 --robots talos,baxter,allegro
    ./smcik bench wholebody --no-peers       # our library only (no install)

Robots (example-robot-data, read from /work/thirdparty or $SMCIK_THIRDPARTY):
- talos (humanoid, talos_reduced.urdf, 32 joints + a floating base): both grippers to goal
  poses, both soles planted (contacts), the centre of mass over the soles' support polygon;
- baxter (dual arm, fixed base): both grippers to goal poses anywhere in the joint ranges;
  baxter_near: the same within 0.5 rad of the start per joint (what local solvers are for);
- allegro (right hand, fixed palm): the four fingertips to goal positions.

The problems are the same for everyone: goals are the links' poses at random configurations
(the humanoid's drawn around its half-sitting posture, then projected so that the soles stay
where they stand and kept only when the whole figure's CoM is at least 2 cm inside the
polygon), solved from the start posture. Each result is judged here, independently of all
three libraries, with yourdfpy's forward kinematics and the URDF's inertials (whole tree):
success = every goal within 1 mm / 0.01 rad, every contact within 1 mm / 0.01 rad, the CoM
inside the support polygon, every joint within its limits.

Ours: ``smc`` and ``jacobian`` solve() (the goal list, with the contacts and the CoM polygon as
hard constraints where the library has them, else tight pose targets and the seed's CoM line),
and ``smc`` step() as the node calls it (``reset`` at the start, then one step per tick until
success, at most ``--steps``; its time is the sum of its steps, its iterations the steps).
Peers: PlaCo (its KinematicsSolver: frame tasks, hard contact
tasks, its CoM polygon constraint) and pink (solve_ik with daqp; contacts as heavy frame tasks;
pink has no polygon constraint), one QP step per iteration until their own kinematics say
done, at most ``--iterations``. Time per solve: wall time of the solve (peers: of their
iterations; set-up excluded on both sides), median over the problems; CPU figures on a shared
2-core machine are noisy (interleaved runs, single-threaded BLAS).

The peers need placo / pin-pink / Pinocchio, which are not runtime dependencies and need an
older numpy than the project pins: on first use they are installed (with a message) from
requirements/bench-wholebody.txt into a venv of their own ($SMCIK_BENCH_VENV, default
~/.cache/smcik_ros/venv-wholebody), and run there (benchmarks/_wholebody_peers.py).
Writes benchmarks/results/wholebody.csv and wholebody.png.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, machine, print_table, pyplot, save_figure, write_csv

import numpy as np  # noqa: E402  (after _common's BLAS pinning)

THIRDPARTY = os.environ.get('SMCIK_THIRDPARTY', '/work/thirdparty/example-robot-data')
REQUIREMENTS = os.path.join(ROOT, 'requirements', 'bench-wholebody.txt')
PEER_VENV = os.environ.get('SMCIK_BENCH_VENV', os.path.join(
    os.path.expanduser('~'), '.cache', 'smcik_ros', 'venv-wholebody'))
PEER_SCRIPT = os.path.join(ROOT, 'benchmarks', '_wholebody_peers.py')
TOLERANCE = (1e-3, 1e-2)          # [m], [rad]: goals and contacts
COM_SAFETY = 0.02                 # [m] generated problems keep the CoM this far inside
ROBOTS = {
    'talos': dict(urdf='robots/talos_data/robots/talos_reduced.urdf', base='base_link',
                  floating=True, goals=('gripper_left_base_link', 'gripper_right_base_link'),
                  contacts=('left_sole_link', 'right_sole_link'), kind='pose',
                  srdf='robots/talos_data/srdf/talos.srdf', state='half_sitting',
                  spread={'arm': 0.6, 'torso': 0.3, 'leg': 0.15}),
    'baxter': dict(urdf='robots/baxter_description/urdf/baxter.urdf', base='base',
                   floating=False, goals=('left_gripper', 'right_gripper'), contacts=(),
                   kind='pose'),
    'baxter_near': dict(urdf='robots/baxter_description/urdf/baxter.urdf', base='base',
                        floating=False, goals=('left_gripper', 'right_gripper'), contacts=(),
                        kind='pose', spread={'left': 0.5, 'right': 0.5}),
    'allegro': dict(urdf='robots/allegro_hand_description/urdf/allegro_right_hand.urdf',
                    base='palm_link', floating=False, kind='position', contacts=(),
                    goals=('link_3.0_tip', 'link_7.0_tip', 'link_11.0_tip', 'link_15.0_tip')),
}
FIELDS = ['robot', 'method', 'problems', 'success', 'median_ms', 'p90_ms', 'iterations',
          'goal_mm', 'contact_mm', 'contact_rad', 'com_inside_mm']


# ---------------------------------------------------------------------- the judge
class Judge:
    """Independent kinematics of a URDF (yourdfpy): link poses, whole-tree CoM, limits."""

    def __init__(self, urdf):
        import yourdfpy
        self.robot = yourdfpy.URDF.load(urdf, build_scene_graph=True, load_meshes=False,
                                        load_collision_meshes=False)
        self.joints = {j.name: j for j in self.robot.robot.joints if j.type != 'fixed'}
        self.inertials = [(link.name, link.inertial.mass,
                           np.eye(4) if link.inertial.origin is None else link.inertial.origin)
                          for link in self.robot.robot.links
                          if link.inertial is not None and link.inertial.mass > 0.0]
        self.root = self.robot.base_link

    def poses(self, joints, base, links):
        """Return {link: (4, 4) world pose} at joint values {name: value}, base (4, 4)."""
        self.robot.update_cfg({n: joints.get(n, 0.0) for n in self.robot.actuated_joint_names})
        base = np.eye(4) if base is None else np.asarray(base)
        return {link: base @ self.robot.get_transform(frame_to=link, frame_from=self.root)
                for link in links}

    def center_of_mass(self, joints, base):
        """Return the whole tree's (3,) world CoM [m]."""
        poses = self.poses(joints, base, [name for name, _, _ in self.inertials])
        total = sum(m for _, m, _ in self.inertials)
        return sum(m * (poses[n] @ o)[:3, 3] for n, m, o in self.inertials) / total

    def limit_excess(self, joints):
        """Return the largest excursion beyond a joint limit [rad or m] (0 within)."""
        worst = 0.0
        for name, value in joints.items():
            joint = self.joints[name]
            if joint.type in ('revolute', 'prismatic') and joint.limit is not None:
                worst = max(worst, joint.limit.lower - value, value - joint.limit.upper)
        return worst

    def assess(self, problem, joints, base):
        """Return the residuals and the success of a solution (see the module docstring)."""
        links = list(problem['poses']) + list(problem['positions']) + list(problem['contacts'])
        poses = self.poses(joints, base, links)
        goal = 0.0
        for link, target in problem['poses'].items():
            pos, ori = pose_errors(poses[link], np.array(target))
            goal = max(goal, pos, ori * TOLERANCE[0] / TOLERANCE[1])
        for link, target in problem['positions'].items():
            goal = max(goal, float(np.linalg.norm(poses[link][:3, 3] - target)))
        contact = [pose_errors(poses[link], np.array(target))
                   for link, target in problem['contacts'].items()]
        contact_pos = max((c[0] for c in contact), default=0.0)
        contact_ori = max((c[1] for c in contact), default=0.0)
        inside = np.inf
        if problem['polygon']:
            com = self.center_of_mass(joints, base)
            inside = inside_distance(np.array(problem['polygon']), com[:2])
        ok = (goal <= TOLERANCE[0] + 1e-9 and contact_pos <= TOLERANCE[0]
              and contact_ori <= TOLERANCE[1] and inside >= 0.0
              and self.limit_excess(joints) <= 1e-6)
        return {'ok': bool(ok), 'goal': goal, 'contact_pos': contact_pos,
                'contact_ori': contact_ori, 'com_inside': inside}


def pose_errors(pose, target):
    """Return (position error [m], orientation error [rad])."""
    cos = 0.5 * (np.trace(pose[:3, :3].T @ target[:3, :3]) - 1.0)
    return (float(np.linalg.norm(pose[:3, 3] - target[:3, 3])),
            float(np.arccos(np.clip(cos, -1.0, 1.0))))


def inside_distance(polygon, point):
    """Signed distance [m] of (2,) point inside a CCW convex polygon (K, 2)."""
    edge = np.roll(polygon, -1, axis=0) - polygon
    normal = np.stack([-edge[:, 1], edge[:, 0]], 1) / np.linalg.norm(edge, axis=1)[:, None]
    return float(np.min(np.einsum('kj,kj->k', normal, point[None, :] - polygon)))


def convex_hull(points):
    """Return the CCW convex hull (K, 2) of (M, 2) points."""
    from scipy.spatial import ConvexHull
    points = np.asarray(points, float)
    return points[ConvexHull(points).vertices]


# ---------------------------------------------------------------------- the robots
def kinematic_urdf(spec, directory):
    """Write the robot's URDF without <visual>/<collision> into ``directory``; return its path.

    Every library (and the judge) reads this copy: whole-body IK needs the kinematics and
    the inertials only, and example-robot-data lacks some meshes (PlaCo refuses a URDF whose
    meshes are missing).
    """
    import re
    with open(os.path.join(THIRDPARTY, spec['urdf'])) as handle:
        text = handle.read()
    text = re.sub(r'<(visual|collision)\b.*?</\1>', '', text, flags=re.S)
    path = os.path.join(directory, os.path.basename(spec['urdf']))
    with open(path, 'w') as handle:
        handle.write(text)
    return path


def load_chain(urdf, spec):
    """Return our Chain over the goal and contact links (floating base where the robot has
    one: ``floating_base=True`` when the model supports it, else six joints added to the
    URDF text, the same joints)."""
    import inspect
    from smcik_ros.model import Chain
    tips = list(spec['goals']) + list(spec['contacts'])
    if not spec['floating']:
        return Chain.from_urdf(urdf, spec['base'], tips, cache_dir='')
    if 'floating_base' in inspect.signature(Chain.from_urdf).parameters:
        return Chain.from_urdf(urdf, spec['base'], tips, cache_dir='', floating_base=True)
    with open(urdf) as handle:
        return Chain.from_urdf(_with_floating_joints(handle.read(), spec['base']), 'world',
                               tips, cache_dir='')


FLOATING = ('floating_base_x', 'floating_base_y', 'floating_base_z', 'floating_base_yaw',
            'floating_base_pitch', 'floating_base_roll')


def _with_floating_joints(text, base):
    """Return URDF text with world -> x -> y -> z -> yaw -> pitch -> roll -> ``base``."""
    axes = ('1 0 0', '0 1 0', '0 0 1', '0 0 1', '0 1 0', '1 0 0')
    limits = (10.0, 10.0, 10.0, np.pi, np.radians(80.0), np.pi)
    links = ['world'] + [f'{n}_link' for n in FLOATING[:-1]] + [base]
    xml = ''.join(f'<link name="{name}"/>' for name in links[:-1])
    for k, name in enumerate(FLOATING):
        kind = 'prismatic' if k < 3 else 'revolute'
        xml += (f'<joint name="{name}" type="{kind}"><parent link="{links[k]}"/>'
                f'<child link="{links[k + 1]}"/><axis xyz="{axes[k]}"/>'
                f'<limit lower="{-limits[k]}" upper="{limits[k]}" effort="1" velocity="1"/>'
                '</joint>')
    start = text.index('<robot')
    close = text.index('>', start) + 1
    return text[:close] + xml + text[close:]


def base_to_values(pose):
    """Return (x, y, z, yaw, pitch, roll) of a (4, 4) pose (T Rz Ry Rx)."""
    r = pose[:3, :3]
    return np.array([*pose[:3, 3], np.arctan2(r[1, 0], r[0, 0]),
                     np.arcsin(np.clip(-r[2, 0], -1.0, 1.0)), np.arctan2(r[2, 1], r[2, 2])])


def values_to_base(values):
    """Return the (4, 4) pose of (x, y, z, yaw, pitch, roll)."""
    x, y, z, yaw, pitch, roll = values
    cz, sz, cy, sy, cx, sx = (np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch),
                              np.cos(roll), np.sin(roll))
    out = np.eye(4)
    out[:3, :3] = (np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
                   @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
                   @ np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]]))
    out[:3, 3] = (x, y, z)
    return out


class Model:
    """One robot: its kinematic URDF, our chain, the judge, the start posture."""

    def __init__(self, name, directory):
        self.name, self.spec = name, ROBOTS[name]
        self.urdf = kinematic_urdf(self.spec, directory)
        self.chain = load_chain(self.urdf, self.spec)
        self.judge = Judge(self.urdf)
        self.start, self.base = self._start()

    def _start(self):
        """Return (start joint values {name: value} for every movable joint, base (4, 4))."""
        joints = {}
        for name, joint in self.judge.joints.items():
            lo, hi = (joint.limit.lower, joint.limit.upper) if joint.limit is not None else (0, 0)
            joints[name] = 0.0 if (lo is None or lo <= 0.0 <= hi) else 0.5 * (lo + hi)
        base = np.eye(4) if self.spec['floating'] else None
        if self.spec.get('srdf'):
            import xml.etree.ElementTree as ElementTree
            root = ElementTree.parse(os.path.join(THIRDPARTY, self.spec['srdf'])).getroot()
            state = next(s for s in root.iter('group_state')
                         if s.get('name') == self.spec['state'])
            for el in state.iter('joint'):
                values = [float(v) for v in el.get('value').split()]
                if el.get('name') in joints:
                    joints[el.get('name')] = values[0]
                elif len(values) == 7:                      # the root: x y z qx qy qz qw
                    from smcik_ros.rotations import quat_to_matrix
                    base = np.eye(4)
                    qx, qy, qz, qw = values[3:]
                    base[:3, :3] = quat_to_matrix(np.array([qw, qx, qy, qz]))
                    base[:3, 3] = values[:3]
        return joints, base

    def q_of(self, joints, base):
        """Return our chain's q for joint values and a base pose."""
        q = np.zeros(self.chain.n)
        for k, name in enumerate(self.chain.joint_names):
            if name in FLOATING:
                q[k] = base_to_values(base)[FLOATING.index(name)]
            else:
                q[k] = joints[name]
        return q

    def joints_of(self, q):
        """Return ({name: value} for every movable joint, base pose or None) of our q."""
        joints = dict(self.start)
        values = np.zeros(6)
        for k, name in enumerate(self.chain.joint_names):
            if name in FLOATING:
                values[FLOATING.index(name)] = q[k]
            else:
                joints[name] = float(q[k])
        return joints, (values_to_base(values) if self.spec['floating'] else None)


# ---------------------------------------------------------------------- the problems
def support_polygon(model, anchors, size=(0.20, 0.12)):
    """Return the (K, 2) hull of the soles' rectangles (length, width [m]) at the anchors."""
    corners = [(pose @ np.array([dx * size[0] / 2, dy * size[1] / 2, 0.0, 1.0]))[:2]
               for pose in anchors.values() for dx in (-1, 1) for dy in (-1, 1)]
    return convex_hull(corners)


def make_problems(model, count, seed, max_iterations):
    """Return ``count`` problems (JSON-ready dicts), goals drawn as the module says."""
    rng = np.random.default_rng(seed)
    spec, chain, judge = model.spec, model.chain, model.judge
    anchors = judge.poses(model.start, model.base, spec['contacts'])
    polygon = support_polygon(model, anchors) if spec['contacts'] else None
    problems = []
    attempts = 0
    while len(problems) < count:
        attempts += 1
        if attempts > 200 * count:
            raise RuntimeError(f'{model.name}: only {len(problems)} problems in {attempts} draws')
        joints = _draw(model, rng)
        if spec['contacts']:
            joints, base = _plant(model, joints, anchors)
            if joints is None:
                continue
            com = judge.center_of_mass(joints, base)
            if inside_distance(polygon, com[:2]) < COM_SAFETY:
                continue
        else:
            base = model.base
        poses = judge.poses(joints, base, spec['goals'])
        problems.append({
            'start': model.start,
            'base': None if model.base is None else model.base.tolist(),
            'poses': {k: v.tolist() for k, v in poses.items()} if spec['kind'] == 'pose'
            else {},
            'positions': {k: v[:3, 3].tolist() for k, v in poses.items()}
            if spec['kind'] == 'position' else {},
            'contacts': {k: v.tolist() for k, v in anchors.items()},
            'polygon': None if polygon is None else polygon.tolist(), 'margin': 0.0,
            'tolerance': list(TOLERANCE), 'max_iterations': max_iterations,
            'goal_joints': joints})
    return problems


def _draw(model, rng):
    """Return random joint values: the humanoid around its start, others in their ranges."""
    joints = dict(model.start)
    spread = model.spec.get('spread')
    for name in model.chain.joint_names:
        if name in FLOATING:
            continue
        joint = model.judge.joints[name]
        lo, hi = joint.limit.lower, joint.limit.upper
        if spread:
            group = next((g for g in spread if name.startswith(g)), None)
            width = spread.get(group, 0.0)
            value = joints[name] + rng.uniform(-width, width)
        else:
            value = rng.uniform(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo))
        joints[name] = float(np.clip(value, lo, hi))
    return joints


def _plant(model, joints, anchors, iterations=60):
    """Return (joints, base) moved (Gauss-Newton, all joints) so that the contact links are
    at their anchors, or (None, None) when that fails within the limits."""
    from smcik_ros.goals import PoseTarget
    chain = model.chain
    q = model.q_of(joints, model.base)
    targets = [PoseTarget(anchor, link=link).bind(chain) for link, anchor in anchors.items()]
    for _ in range(iterations):
        frames = chain.frames(q)
        r = np.concatenate([t.residual(frames)[0] for t in targets])
        if np.abs(r).max() < 1e-12:
            break
        jac = np.concatenate([t.jacobian(frames)[0] for t in targets])
        q = chain.clip(q - np.linalg.lstsq(jac, r, rcond=None)[0])
    joints, base = model.joints_of(q)
    poses = model.judge.poses(joints, base, list(anchors))
    if any(pose_errors(poses[k], v)[0] > 1e-7 for k, v in anchors.items()) or \
            model.judge.limit_excess(joints) > 0.0:
        return None, None
    return joints, base


# ---------------------------------------------------------------------- our library
def our_terms(model, problem):
    """Return (goal list, constraints) of one problem for our solvers.

    Contacts and the CoM polygon are hard constraints (``Contact``, ``CenterOfMassPolygon``)
    where smcik_ros.goals has them; before that, tight pose targets on the soles and the
    seed's vertical CoM line through the polygon's centre (soft).
    """
    from smcik_ros import goals as terms
    chain = model.chain
    goal = [terms.PoseTarget(np.array(pose), link=link)
            for link, pose in problem['poses'].items()]
    goal += [terms.PositionTarget(np.array(point), link=link)
             for link, point in problem['positions'].items()]
    constraints = []
    if problem['contacts']:
        polygon = np.array(problem['polygon'])
        if hasattr(terms, 'Contact') and hasattr(terms, 'CenterOfMassPolygon'):
            constraints = [terms.Contact(link, pose=np.array(pose))
                           for link, pose in problem['contacts'].items()]
            constraints.append(terms.CenterOfMassPolygon(polygon=polygon, margin=0.0))
        else:
            goal += [terms.PoseTarget(np.array(pose), link=link, sigma_position=1e-3,
                                      sigma_orientation=1e-2)
                     for link, pose in problem['contacts'].items()]
            centre = polygon.mean(axis=0)
            constraints = [terms.CenterOfMassLine(point=(centre[0], centre[1], 0.0),
                                                  sigma=0.05)]
    return [g.bind(chain) for g in goal], [c.bind(chain) for c in constraints]


def run_ours(model, problems, method, seed, steps, timeout):
    """Return one result per problem for 'smc', 'jacobian' (solve) or 'smc step'."""
    from smcik_ros.solvers import make_solver
    online = method.endswith(' step')
    solver = make_solver(method.split()[0], model.chain, seed=seed)
    out = []
    for problem in [problems[0]] + problems:                # the first is a warm-up
        goal, constraints = our_terms(model, problem)
        solver.set_constraints(constraints)
        q0 = model.q_of(problem['start'], None if problem['base'] is None
                        else np.array(problem['base']))
        if online:
            result = _steps(model, solver, goal, q0, problem, steps)
        else:
            start = time.perf_counter()
            solved = solver.solve(goal, q0, max_iters=1000, tol=TOLERANCE, timeout=timeout)
            result = {'q': solved.q, 'time': time.perf_counter() - start,
                      'iterations': solved.iterations}
        joints, base = model.joints_of(result.pop('q'))
        out.append(dict(result, joints=joints, base=base))
    return out[1:]


def _steps(model, solver, goal, q0, problem, steps):
    """Step the solver as the node does until our own kinematics say solved (or ``steps``)."""
    from smcik_ros.goals import task_errors
    solver.reset(q0)
    contacts = [(link, np.array(pose)) for link, pose in problem['contacts'].items()]
    elapsed, k, q = 0.0, 0, q0
    while k < steps:
        start = time.perf_counter()
        q = solver.step(goal)
        elapsed += time.perf_counter() - start
        k += 1
        frames = model.chain.frames(q)
        pos, ori = task_errors(goal, frames)
        if np.max(pos) <= TOLERANCE[0] and np.max(ori) <= TOLERANCE[1] and all(
                max(pose_errors(frames.link_pose(link)[0], pose)) <= TOLERANCE[0]
                for link, pose in contacts):
            break
    return {'q': np.array(q), 'time': elapsed, 'iterations': k}


# ---------------------------------------------------------------------- the peers
def peer_python(install):
    """Return the peers' Python, installing them first when asked; None when unavailable."""
    python = os.path.join(PEER_VENV, 'bin', 'python')
    check = [python, '-c', 'import placo, pink, pinocchio, qpsolvers']
    if os.path.exists(python) and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    if not install:
        print(f'PlaCo / pink are not installed in {PEER_VENV}: peers skipped '
              '(run without --no-install to install them)')
        return None
    print(f'Installing the benchmark-only peers (placo, pin-pink, Pinocchio; not runtime '
          f'dependencies) from {os.path.relpath(REQUIREMENTS, ROOT)} into their own venv '
          f'{PEER_VENV} (they need an older numpy than the project): about a minute ...',
          flush=True)
    subprocess.run([sys.executable, '-m', 'venv', PEER_VENV], check=True)
    subprocess.run([python, '-m', 'pip', 'install', '-q', '-r', REQUIREMENTS], check=True)
    if subprocess.run(check, capture_output=True).returncode != 0:
        print('the peers still do not import: skipped', file=sys.stderr)
        return None
    return python


def run_peers(model, problems, python, directory):
    """Return {'placo': [results], 'pink': [results]} from the peers' own process."""
    job = {'robot': {'urdf': model.urdf, 'floating': model.spec['floating']},
           'problems': [{k: v for k, v in p.items() if k != 'goal_joints'} for p in problems]}
    src = os.path.join(directory, f'{model.name}_problems.json')
    dst = os.path.join(directory, f'{model.name}_peers.json')
    with open(src, 'w') as handle:
        json.dump(job, handle)
    env = dict(os.environ, OPENBLAS_NUM_THREADS='1', OMP_NUM_THREADS='1', PYTHONPATH='')
    subprocess.run([python, PEER_SCRIPT, src, dst], check=True, env=env)
    with open(dst) as handle:
        out = json.load(handle)
    for name, results in out.items():
        if isinstance(results, dict):
            print(f'{model.name}: {name} failed: {results["error"]}', file=sys.stderr)
            continue
        for r in results:
            r['base'] = None if r['base'] is None else np.array(r['base'])
    return {k: v for k, v in out.items() if isinstance(v, list)}


# ---------------------------------------------------------------------- the table
def summarize(model, method, problems, results):
    """Return one table row: judged success, times, residuals."""
    verdicts = [model.judge.assess(p, r['joints'], r['base']) for p, r in zip(problems, results)]
    times = np.array([r['time'] for r in results]) * 1e3
    inside = [v['com_inside'] for v in verdicts if np.isfinite(v['com_inside'])]
    return {'robot': model.name, 'method': method, 'problems': len(problems),
            'success': float(np.mean([v['ok'] for v in verdicts])),
            'median_ms': float(np.median(times)), 'p90_ms': float(np.percentile(times, 90)),
            'iterations': float(np.median([r['iterations'] for r in results])),
            'goal_mm': float(np.median([v['goal'] for v in verdicts])) * 1e3,
            'contact_mm': max(v['contact_pos'] for v in verdicts) * 1e3,
            'contact_rad': max(v['contact_ori'] for v in verdicts),
            'com_inside_mm': min(inside) * 1e3 if inside else float('nan')}


def plot(rows, name='wholebody'):
    """Bar charts: success rate and median time per robot and method."""
    plt = pyplot()
    robots = list(dict.fromkeys(r['robot'] for r in rows))
    methods = list(dict.fromkeys(r['method'] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        for ax, field in zip(axes, ('success', 'median_ms')):
            values = [next((r[field] for r in rows if r['robot'] == robot
                            and r['method'] == method), np.nan) for robot in robots]
            ax.bar(np.arange(len(robots)) + k * width, values, width, label=method)
    for ax, label in zip(axes, ('success rate (judged with yourdfpy)', 'median time per solve '
                                '[ms] (log)')):
        ax.set_xticks(np.arange(len(robots)) + 0.4 - width / 2, robots)
        ax.set_title(label)
        ax.grid(True, axis='y', alpha=0.3)
    axes[1].set_yscale('log')
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, name)


def main(argv=None):
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--robots', default=','.join(ROBOTS), help='comma-separated')
    parser.add_argument('--problems', type=int, default=20, help='problems per robot')
    parser.add_argument('--seed', type=int, default=3)
    parser.add_argument('--steps', type=int, default=300, help='online steps at most')
    parser.add_argument('--iterations', type=int, default=300,
                        help='peer QP iterations at most per solve')
    parser.add_argument('--timeout', type=float, default=1.0, help='our solve() timeout [s]')
    parser.add_argument('--no-peers', action='store_true', help='our library only')
    parser.add_argument('--no-install', action='store_true',
                        help='do not install the peers when missing')
    args = parser.parse_args(argv)
    python = None if args.no_peers else peer_python(not args.no_install)
    rows = []
    with tempfile.TemporaryDirectory(prefix='smcik-wholebody-') as directory:
        for name in args.robots.split(','):
            model = Model(name, directory)
            problems = make_problems(model, args.problems, args.seed, args.iterations)
            contacts = ', '.join(model.spec['contacts'])
            print(f'{name}: {len(problems)} problems, {model.chain.n} state joints '
                  f'(goals {", ".join(model.spec["goals"])}'
                  f'{"; contacts " + contacts if contacts else ""})', flush=True)
            for method in ('smc', 'jacobian', 'smc step'):
                results = run_ours(model, problems, method, args.seed, args.steps, args.timeout)
                rows.append(summarize(model, method, problems, results))
            if python:
                for peer, results in run_peers(model, problems, python, directory).items():
                    rows.append(summarize(model, peer, problems, results))
    print_table(rows, FIELDS, title=f'whole-body IK, judged with yourdfpy ({machine()})')
    print('csv:', write_csv('wholebody', rows, FIELDS))
    print('png:', plot(rows))
    return 0


if __name__ == '__main__':
    sys.exit(main())
