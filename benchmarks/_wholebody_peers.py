"""The peers of benchmarks/wholebody.py: PlaCo and pink on the same whole-body problems.

Run by wholebody.py with the Python of the peers' own venv (requirements/bench-wholebody.txt;
placo pins Pinocchio 3.8, which needs an older numpy than the project's), never imported by
the project: ``python _wholebody_peers.py problems.json results.json``. It reads the problems
(the URDF, the start, the goals, the contacts, the support polygon), solves each one with each
library by iterating its QP step until its own kinematics say the goals and contacts are within
tolerance (or ``max_iterations``), and writes per problem the final joint values, base pose,
wall time of the iterations [s] and their count. wholebody.py judges the results itself.

Both peers are set up as their documentation shows: PlaCo's KinematicsSolver with frame (or
position) tasks on the goal links, hard frame tasks on the contacts and its CoM polygon
constraint, a small regularisation; pink's solve_ik (daqp) with frame tasks, contacts as frame
tasks of high cost (pink has no hard equality or CoM polygon constraint) and a posture task.
"""

import json
import sys
import time

import numpy as np

PINK_CONTACT_COST = 100.0     # pink: contact frame tasks weigh this much more than the goals
PINK_POSTURE_COST = 1e-3
PLACO_REGULARIZATION = 1e-6


def _errors(pose, target):
    """Return (position error [m], orientation error [rad]) of two (4, 4) poses."""
    pos = float(np.linalg.norm(pose[:3, 3] - target[:3, 3]))
    cos = 0.5 * (np.trace(pose[:3, :3].T @ target[:3, :3]) - 1.0)
    return pos, float(np.arccos(np.clip(cos, -1.0, 1.0)))


def _done(problem, pose_of):
    """Return whether every goal and contact is within tolerance, by the peer's own FK."""
    pos_tol, ori_tol = problem['tolerance']
    for frame, target in problem['poses'].items():
        pos, ori = _errors(pose_of(frame), np.array(target))
        if pos > pos_tol or ori > ori_tol:
            return False
    for frame, target in problem['positions'].items():
        if np.linalg.norm(pose_of(frame)[:3, 3] - np.array(target)) > pos_tol:
            return False
    for frame, target in problem['contacts'].items():
        pos, ori = _errors(pose_of(frame), np.array(target))
        if pos > pos_tol or ori > ori_tol:
            return False
    return True


def _clockwise(polygon):
    """Return the polygon's vertices clockwise (PlaCo's CoM polygon constraint reads them so:
    counter-clockwise, a CoM well inside makes its QP infeasible)."""
    points = [np.array(p, dtype=float) for p in polygon]
    area = sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(points, points[1:] + points[:1]))
    return points[::-1] if area > 0.0 else points


class Placo:
    """PlaCo's whole-body KinematicsSolver."""

    name = 'placo'

    def __init__(self, spec):
        import placo
        self.placo = placo
        self.spec = spec
        self.robot = placo.RobotWrapper(spec['urdf'], placo.Flags.ignore_collisions)

    def solve(self, problem):
        placo, robot = self.placo, self.robot
        robot.state.q = robot.neutral_state().q.copy()
        for name, value in problem['start'].items():
            robot.set_joint(name, value)
        if self.spec['floating']:
            robot.set_T_world_fbase(np.array(problem['base']))
        robot.update_kinematics()
        solver = placo.KinematicsSolver(robot)
        solver.mask_fbase(not self.spec['floating'])
        solver.enable_joint_limits(True)
        solver.enable_velocity_limits(False)
        for frame, target in problem['poses'].items():
            solver.add_frame_task(frame, np.array(target)).configure(frame, 'soft', 1.0, 1.0)
        for frame, target in problem['positions'].items():
            solver.add_position_task(frame, np.array(target)).configure(frame, 'soft', 1.0)
        for frame, target in problem['contacts'].items():
            solver.add_frame_task(frame, np.array(target)).configure(frame, 'hard', 1.0, 1.0)
        if problem['polygon']:
            com = solver.add_com_polygon_constraint(_clockwise(problem['polygon']),
                                                    problem['margin'])
            com.configure('com_polygon', 'hard', 1.0)
        solver.add_regularization_task(PLACO_REGULARIZATION)
        start = time.perf_counter()
        iterations = 0
        while iterations < problem['max_iterations']:
            solver.solve(True)
            robot.update_kinematics()
            iterations += 1
            if _done(problem, robot.get_T_world_frame):
                break
        elapsed = time.perf_counter() - start
        joints = {name: float(robot.get_joint(name)) for name in problem['start']}
        base = robot.get_T_world_fbase().tolist() if self.spec['floating'] else None
        return {'joints': joints, 'base': base, 'time': elapsed, 'iterations': iterations}


class Pink:
    """pink's differential IK (one QP per step, daqp)."""

    name = 'pink'

    def __init__(self, spec):
        import pinocchio as pin
        self.pin = pin
        self.spec = spec
        if spec['floating']:
            self.model = pin.buildModelFromUrdf(spec['urdf'], pin.JointModelFreeFlyer())
        else:
            self.model = pin.buildModelFromUrdf(spec['urdf'])
        self.data = self.model.createData()

    def _q(self, joints, base):
        pin, model = self.pin, self.model
        q = pin.neutral(model)
        for name, value in joints.items():
            joint = model.joints[model.getJointId(name)]
            if joint.nq == 1:
                q[joint.idx_q] = value
            else:                                   # continuous: (cos, sin)
                q[joint.idx_q:joint.idx_q + 2] = np.cos(value), np.sin(value)
        if self.spec['floating']:
            q[:7] = pin.SE3ToXYZQUAT(pin.SE3(np.array(base)))
        return q

    def _joints(self, q, names):
        model, out = self.model, {}
        for name in names:
            joint = model.joints[model.getJointId(name)]
            out[name] = float(q[joint.idx_q] if joint.nq == 1 else
                              np.arctan2(q[joint.idx_q + 1], q[joint.idx_q]))
        return out

    def solve(self, problem):
        import pink
        from pink.tasks import FrameTask, PostureTask
        pin = self.pin
        q0 = self._q(problem['start'], problem['base'])
        configuration = pink.Configuration(self.model, self.data, q0)
        tasks = []
        for frame, target in problem['poses'].items():
            tasks.append(FrameTask(frame, position_cost=1.0, orientation_cost=1.0))
            tasks[-1].set_target(pin.SE3(np.array(target)))
        for frame, target in problem['positions'].items():
            tasks.append(FrameTask(frame, position_cost=1.0, orientation_cost=0.0))
            tasks[-1].set_target(pin.SE3(np.eye(3), np.array(target)))
        for frame, target in problem['contacts'].items():
            tasks.append(FrameTask(frame, position_cost=PINK_CONTACT_COST,
                                   orientation_cost=PINK_CONTACT_COST))
            tasks[-1].set_target(pin.SE3(np.array(target)))
        posture = PostureTask(cost=PINK_POSTURE_COST)
        posture.set_target(q0)
        tasks.append(posture)

        def pose_of(frame):
            return configuration.get_transform_frame_to_world(frame).homogeneous

        start = time.perf_counter()
        iterations = 0
        while iterations < problem['max_iterations']:
            velocity = pink.solve_ik(configuration, tasks, 1.0, solver='daqp',
                                     safety_break=False)
            configuration.integrate_inplace(velocity, 1.0)
            iterations += 1
            if _done(problem, pose_of):
                break
        elapsed = time.perf_counter() - start
        q = configuration.q
        base = (pin.XYZQUATToSE3(q[:7]).homogeneous.tolist() if self.spec['floating']
                else None)
        return {'joints': self._joints(q, problem['start']), 'base': base, 'time': elapsed,
                'iterations': iterations}


def main(argv):
    """Solve every problem of argv[1] with each peer; write the results to argv[2]."""
    with open(argv[1]) as handle:
        job = json.load(handle)
    out = {}
    for kind in (Placo, Pink):
        try:
            peer = kind(job['robot'])
            for problem in job['problems'][:1]:     # warm-up (first-call allocations)
                peer.solve(problem)
            out[kind.name] = [peer.solve(problem) for problem in job['problems']]
        except Exception as exc:                     # report, and keep the other peer
            out[kind.name] = {'error': f'{type(exc).__name__}: {exc}'}
    with open(argv[2], 'w') as handle:
        json.dump(out, handle)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
