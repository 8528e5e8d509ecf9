"""Targets: what "solved" is judged on. A pose, a position or an orientation for any link
of the chain (default: the first tip), and the helpers that turn a goal into targets
(``as_goal``) and report the worst errors (``task_errors``).
"""

import numpy as np

from ..errors import GoalError
from ..kernels.residuals import pose_errors, pose_residual_jacobian
from ..rotations import left_jacobian_inverse, matrix_to_rotvec
from .terms import Term, check_link, check_rotation, finite_array, positive

__all__ = ['OrientationTarget', 'PoseTarget', 'PositionTarget', 'Target', 'as_goal',
           'task_errors']


class Target(Term):
    """A task-space goal for one link; solved when its errors are within tolerance."""

    link = None
    has_position = True
    has_orientation = True

    def bind(self, chain):
        check_link(chain, self.link, type(self).__name__)
        return self

    def errors(self, frames):
        """Return (position_error [m], orientation_error [rad]), each (N,)."""
        raise NotImplementedError  # pragma: no cover

    def cost_and_errors(self, frames):
        """Return (cost (N,), position_error (N,), orientation_error (N,)) in one pass."""
        pos, ori = self.errors(frames)
        return self.cost(frames), pos, ori


class PoseTarget(Target):
    """Reach a full (4, 4) pose with ``link`` (default: the chain's tip).

    sigma_position [m], sigma_orientation [rad]: task noise (seed 000 Sigma_z) that trades
    position against orientation. covariance: optional full (6, 6) task covariance in the
    base frame, ROS order x y z rx ry rz (a goal from perception with its uncertainty); it
    replaces the sigmas (symmetric positive definite, else GoalError).
    """

    def __init__(self, pose, link=None, sigma_position=0.01, sigma_orientation=0.05,
                 weight=1.0, covariance=None):
        pose = finite_array(pose, (4, 4), 'pose target')
        check_rotation(pose[:3, :3], 'pose target rotation')
        if max(abs(v - w) for v, w in zip(pose[3].tolist(), (0.0, 0.0, 0.0, 1.0))) > 1e-9:
            raise GoalError(f'pose target bottom row must be [0, 0, 0, 1]; got {pose[3].tolist()}')
        self.pose = pose
        self.link = link
        self.sigma = np.array([positive(sigma_position, 'sigma_position')] * 3
                              + [positive(sigma_orientation, 'sigma_orientation')] * 3)
        self.weight = positive(weight, 'weight')
        if covariance is not None:
            self._set_covariance(covariance, 6, 'pose target covariance')

    def residual(self, frames):
        rot, pos = frames.link_transform(self.link)
        out = np.empty((len(frames), 6))
        out[:, :3] = pos - self.pose[:3, 3]
        out[:, 3:] = matrix_to_rotvec(rot @ self.pose[:3, :3].T)
        return out

    def jacobian(self, frames):
        return self.residual_jacobian(frames)[1]

    def residual_jacobian(self, frames):
        """Return (residual (N, 6), jacobian (N, 6, nv)) sharing one pose evaluation.

        The orientation rows are J_l^-1(r) J_w: exact, not only near the target.
        """
        chain = frames.chain
        # C-contiguous frames (subsets may be views): one compiled specialisation.
        return pose_residual_jacobian(chain.records.columns, chain.records.links,
                                      np.ascontiguousarray(frames.rot),
                                      np.ascontiguousarray(frames.pos),
                                      chain.link_index(self.link), self.pose)

    def cost(self, frames):
        if self._whitener is not None:
            return super().cost(frames)
        # Same value as the base class, without building the rotation vectors.
        pos, ori = self.errors(frames)
        return self.weight * ((pos / self.sigma[0]) ** 2 + (ori / self.sigma[3]) ** 2)

    def cost_and_errors(self, frames):
        pos, ori = self.errors(frames)
        if self._whitener is not None:
            return super().cost(frames), pos, ori
        return self.weight * ((pos / self.sigma[0]) ** 2 + (ori / self.sigma[3]) ** 2), pos, ori

    def errors(self, frames):
        chain = frames.chain
        return pose_errors(chain.records.links, np.ascontiguousarray(frames.rot),
                           np.ascontiguousarray(frames.pos), chain.link_index(self.link),
                           self.pose)


class PositionTarget(Target):
    """Bring a point of ``link`` (default: the tip origin) to ``position`` (3,) [m].

    covariance: optional full (3, 3) position covariance in the base frame [m^2]; it
    replaces ``sigma_position`` (symmetric positive definite, else GoalError).
    """

    has_orientation = False

    def __init__(self, position, link=None, offset=None, sigma_position=0.01, weight=1.0,
                 covariance=None):
        self.position = finite_array(position, (3,), 'position target')
        self.offset = None if offset is None else finite_array(offset, (3,), 'point offset')
        self.link = link
        self.sigma = np.full(3, positive(sigma_position, 'sigma_position'))
        self.weight = positive(weight, 'weight')
        if covariance is not None:
            self._set_covariance(covariance, 3, 'position target covariance')

    def residual(self, frames):
        return frames.point(self.link, self.offset) - self.position

    def jacobian(self, frames):
        return frames.jacobian(self.link, self.offset)[:, :3]

    def cost(self, frames):
        if self._whitener is not None:
            return super().cost(frames)
        r = self.residual(frames)
        return self.weight * np.einsum('nk,nk->n', r, r) / self.sigma[0] ** 2

    def errors(self, frames):
        pos = np.linalg.norm(self.residual(frames), axis=-1)
        return pos, np.zeros_like(pos)


class OrientationTarget(Target):
    """Turn ``link`` to the (3, 3) rotation ``rotation`` (base frame)."""

    has_position = False

    def __init__(self, rotation, link=None, sigma_orientation=0.05, weight=1.0):
        rot = finite_array(rotation, (3, 3), 'orientation target')
        check_rotation(rot, 'orientation target')
        self.rotation = rot
        self.link = link
        self.sigma = np.full(3, positive(sigma_orientation, 'sigma_orientation'))
        self.weight = positive(weight, 'weight')

    def residual(self, frames):
        return matrix_to_rotvec(frames.link_transform(self.link)[0] @ self.rotation.T)

    def jacobian(self, frames):
        return left_jacobian_inverse(self.residual(frames)) @ frames.jacobian(self.link)[:, 3:]

    def errors(self, frames):
        ori = _rotation_angle(frames.link_pose(self.link)[:, :3, :3], self.rotation)
        return np.zeros_like(ori), ori


def _rotation_angle(rot, target):
    """Return the (N,) angles [rad] between rotations (N, 3, 3) and a target (3, 3).

    atan2 of the skew and symmetric parts of R target^T: accurate near 0 and near pi,
    where arccos of the trace alone loses half the digits.
    """
    rel = rot @ target.T
    x = rel[:, 2, 1] - rel[:, 1, 2]
    y = rel[:, 0, 2] - rel[:, 2, 0]
    z = rel[:, 1, 0] - rel[:, 0, 1]
    trace = rel[:, 0, 0] + rel[:, 1, 1] + rel[:, 2, 2]
    return np.arctan2(0.5 * np.sqrt(x * x + y * y + z * z), 0.5 * (trace - 1.0))


def as_goal(goal, chain=None, sigma_position=None, sigma_orientation=None):
    """Return a list of Target objects from a (4, 4) pose, a Target, or a list of Targets.

    sigma_position [m], sigma_orientation [rad]: task noise of the targets built from arrays
    (None: the targets' defaults); Target objects keep their own.
    """
    if isinstance(goal, Target):
        targets = [goal]
    elif isinstance(goal, (list, tuple)) and goal and all(isinstance(g, Term) for g in goal):
        targets = list(goal)
    else:
        arr = np.asarray(goal, dtype=float) if not isinstance(goal, (str, bytes)) else None
        if arr is None or arr.shape not in ((4, 4), (3,)):
            raise GoalError('goal must be a (4, 4) pose in the base frame, a (3,) position, a '
                            f'Target or a list of Targets; got {type(goal).__name__} '
                            f'{getattr(arr, "shape", "")}')
        kw = {} if sigma_position is None else {'sigma_position': sigma_position}
        if arr.shape == (4, 4):
            if sigma_orientation is not None:
                kw['sigma_orientation'] = sigma_orientation
            targets = [PoseTarget(arr, **kw)]
        else:
            targets = [PositionTarget(arr, **kw)]
    if not any(isinstance(t, Target) for t in targets):
        raise GoalError('the goal holds no Target (pose, position or orientation)')
    if chain is not None:
        for t in targets:
            t.bind(chain)
    return targets


def task_errors(targets, frames):
    """Return the worst (position_error, orientation_error) over targets, each (N,)."""
    pos = np.zeros(len(frames))
    ori = np.zeros(len(frames))
    for t in targets:
        if isinstance(t, Target):
            p, o = t.errors(frames)
            pos = np.maximum(pos, p)
            ori = np.maximum(ori, o)
    return pos, ori
