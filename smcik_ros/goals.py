"""Goals (targets) and constraints shared by every solver.

Each term is a small object with one job:

- ``residual(frames) -> (N, k)``: zero when the term is satisfied (current minus desired);
- ``jacobian(frames) -> (N, k, nv)``: d residual / d tangent step (Jacobian and distance
  solvers, and the SMC refinement, use it; the SMC likelihood needs only the residual);
- ``sigma``: (k,) noise standard deviations of the residual: the SMC likelihood is
  ``exp(-sum((residual / sigma) ** 2))`` (seed 000 eq. 13-14, a diagonal covariance);
  gradient solvers weight rows by ``1 / sigma``;
- ``whiten(rows)``: the rows scaled so that their squared norm is the cost: by
  ``sqrt(weight) / sigma``, or by ``sqrt(weight) L^-1`` when the term has a full
  ``covariance`` Sigma = L L^T (pose and position targets from perception: Sigma_z of the
  paper, in the base frame, ROS order x y z rx ry rz; ``covariance_to_base`` rotates a
  covariance given in another frame).

Targets (pose, position, orientation) are what "solved" is judged on; constraints
(centre of mass, smoothness, posture, plane contact, coupling; keep-out spheres and
obstacles live in ``collision``, built on its constraint) shape the
solution. ``hard = True`` constraints are enforced by the SMC filter by accept/reject
(see ``solvers.smc``) and reported as violated by ``violated(frames)``.

Poses are (4, 4) homogeneous matrices in the chain's base frame [m]; angles in rad.
"""

import math

import numpy as np

from .errors import GoalError
from .kernels.jit import as_rows
from .kernels.quat import quat_pair_rotvecs
from .kernels.residuals import pose_errors, pose_residual_jacobian
from .rotations import (left_jacobian_inverse, matrix_to_rotvec, quat_conjugate,
                        quat_multiply, quat_to_rotvec)

__all__ = [
    'Target', 'PoseTarget', 'PositionTarget', 'OrientationTarget', 'Constraint',
    'CenterOfMassLine', 'ChainSmoothness', 'PosturePreference',
    'PlaneContact', 'JointCoupling', 'as_goal', 'check_terms', 'task_errors',
    'covariance_to_base', 'symmetric_positive_definite',
]

def _finite_array(value, shape, what):
    arr = np.array(value, dtype=float)
    if arr.shape != shape:
        raise GoalError(f'{what} must have shape {shape}; got {arr.shape}')
    if not np.isfinite(arr).all():
        raise GoalError(f'{what} contains NaN or infinite values: {arr.tolist()}')
    arr.setflags(write=False)
    return arr


def _positive(value, what):
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise GoalError(f'{what} must be a positive number; got {value}')
    return value


def _covariance(value, k, what):
    """Return a validated, symmetric (k, k) covariance (read-only) from (k, k) or (k*k,)."""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise GoalError(f'{what} must be a symmetric positive definite ({k}, {k}) matrix; '
                        f'got {type(value).__name__}') from None
    expected = (f'{what} must be a symmetric positive definite ({k}, {k}) matrix in the base '
                f'frame ({_COV_ORDER[k]})')
    if arr.shape == (k * k,):
        arr = arr.reshape(k, k)
    if arr.shape != (k, k):
        raise GoalError(f'{expected}; got shape {arr.shape}')
    if not np.all(np.isfinite(arr)):
        raise GoalError(f'{expected}; got NaN or infinite entries: {arr.tolist()}')
    arr = symmetric_positive_definite(arr, f'{expected};')
    arr.setflags(write=False)
    return arr


def symmetric_positive_definite(matrix, expected):
    """Return the square, finite ``matrix`` symmetrised, or raise GoalError.

    expected: the start of the error message (what was expected, with its punctuation);
    the message goes on with what arrived: a non-symmetric matrix (beyond 1e-9 relative) or
    the eigenvalues of one that is not positive definite.
    """
    asym = float(np.abs(matrix - matrix.T).max())
    if asym > 1e-9 * max(1.0, float(np.abs(matrix).max())):
        raise GoalError(f'{expected} got a non-symmetric matrix (max |S - S^T| = {asym:.3g})')
    matrix = 0.5 * (matrix + matrix.T)
    eig = np.linalg.eigvalsh(matrix)
    try:
        np.linalg.cholesky(matrix)
        spd = eig[0] > 0.0
    except np.linalg.LinAlgError:
        spd = False
    if not spd:
        raise GoalError(f'{expected} got eigenvalues {np.array2string(eig, precision=3)} '
                        '(not positive definite)')
    return matrix


_COV_ORDER = {6: 'x y z rx ry rz', 3: 'x y z or rx ry rz'}


def covariance_to_base(covariance, rotation):
    """Return a covariance expressed in the base frame.

    covariance: (6, 6) or (36,) (ROS PoseWithCovariance order x y z rx ry rz, rotations
    about the fixed axes of its frame), or (3, 3) / (9,); rotation: (3, 3) rotation of that
    frame in the base frame. Each 3 x 3 block becomes R S R^T (the translational and the
    rotational axes turn alike). Validated like a target's covariance (GoalError).
    """
    rot = _finite_array(rotation, (3, 3), 'covariance frame rotation')
    _check_rotation(rot, 'covariance frame rotation')
    arr = np.asarray(covariance, dtype=float)
    k = 6 if arr.size == 36 else 3
    cov = _covariance(arr, k, 'covariance')
    big = np.kron(np.eye(k // 3), rot)
    out = big @ cov @ big.T
    return _covariance(0.5 * (out + out.T), k, 'rotated covariance')


def _check_rotation(rot, what):
    # On Python floats: a few microseconds, against ~18 us for the numpy expressions on a
    # 3 x 3 matrix (every solve() checks its goal).
    (a, b, c), (d, e, f), (g, h, k) = np.asarray(rot, dtype=float).tolist()
    err = max(abs(a * a + b * b + c * c - 1.0), abs(d * d + e * e + f * f - 1.0),
              abs(g * g + h * h + k * k - 1.0), abs(a * d + b * e + c * f),
              abs(a * g + b * h + c * k), abs(d * g + e * h + f * k))    # |R R^T - I|
    det = a * (e * k - f * h) - b * (d * k - f * g) + c * (d * h - e * g)
    if not err <= 1e-6 or det < 0.0:
        raise GoalError(f'{what} is not a rotation matrix (|R R^T - I| = {err:.2e}, '
                        f'det = {det:.3f}); re-orthonormalise it')


class Term:
    """Common base of targets and constraints."""

    hard = False
    weight = 1.0

    def bind(self, chain):
        """Check the term against ``chain`` (links, joints); raise GoalError if it does not fit."""
        return self

    def residual(self, frames):  # pragma: no cover - interface
        raise NotImplementedError

    def jacobian(self, frames):  # pragma: no cover - interface
        raise NotImplementedError

    covariance = None
    _whitener = None

    def violated(self, frames):
        """Return (N,) bool: hard-constraint violation (False for soft terms)."""
        return np.zeros(len(frames), dtype=bool)

    def whiten(self, rows):
        """Return residual rows (N, k) or Jacobian rows (N, k, nv) whitened: their squared
        norm is the cost (sqrt(weight) / sigma per row, or sqrt(weight) L^-1 for a full
        covariance L L^T)."""
        if self._whitener is not None:
            if rows.ndim == 2:
                return rows @ self._whitener.T
            return np.einsum('ij,njv->niv', self._whitener, rows)
        scale = np.sqrt(self.weight) / self.sigma
        return rows * (scale if rows.ndim == 2 else scale[:, None])

    def cost(self, frames):
        """Return the (N,) negative log-likelihood weight * r^T Sigma^-1 r (diagonal Sigma:
        sum((residual / sigma) ** 2) * weight)."""
        if self._whitener is not None:
            r = self.whiten(self.residual(frames))
            return np.einsum('nk,nk->n', r, r)
        r = self.residual(frames) / self.sigma
        return self.weight * np.einsum('nk,nk->n', r, r)

    def _set_covariance(self, covariance, k, what):
        """Use a full (k, k) covariance: sigma = sqrt(diag), whitener sqrt(weight) L^-1."""
        self.covariance = _covariance(covariance, k, what)
        chol = np.linalg.cholesky(self.covariance)
        self._whitener = np.sqrt(self.weight) * np.linalg.inv(chol)
        self.sigma = np.sqrt(np.diag(self.covariance))


def _check_link(chain, link, what):
    if link is not None and not chain.has_link(link):
        raise GoalError(f'{what}: unknown link {link!r}; links of this chain: '
                        f'{", ".join(chain.link_names)}')


class Target(Term):
    """A task-space goal for one link; solved when its errors are within tolerance."""

    link = None
    has_position = True
    has_orientation = True

    def bind(self, chain):
        _check_link(chain, self.link, type(self).__name__)
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
        pose = _finite_array(pose, (4, 4), 'pose target')
        _check_rotation(pose[:3, :3], 'pose target rotation')
        if max(abs(v - w) for v, w in zip(pose[3].tolist(), (0.0, 0.0, 0.0, 1.0))) > 1e-9:
            raise GoalError(f'pose target bottom row must be [0, 0, 0, 1]; got {pose[3].tolist()}')
        self.pose = pose
        self.link = link
        self.sigma = np.array([_positive(sigma_position, 'sigma_position')] * 3
                              + [_positive(sigma_orientation, 'sigma_orientation')] * 3)
        self.weight = _positive(weight, 'weight')
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
        self.position = _finite_array(position, (3,), 'position target')
        self.offset = None if offset is None else _finite_array(offset, (3,), 'point offset')
        self.link = link
        self.sigma = np.full(3, _positive(sigma_position, 'sigma_position'))
        self.weight = _positive(weight, 'weight')
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
        rot = _finite_array(rotation, (3, 3), 'orientation target')
        _check_rotation(rot, 'orientation target')
        self.rotation = rot
        self.link = link
        self.sigma = np.full(3, _positive(sigma_orientation, 'sigma_orientation'))
        self.weight = _positive(weight, 'weight')

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


# ---------------------------------------------------------------------------- constraints
class Constraint(Term):
    """A soft (or hard) condition on the configuration; zero residual when satisfied."""


class CenterOfMassLine(Constraint):
    """Keep the centre of mass on a vertical line (seed 000 section 6.1).

    point (3,) on the line [m] (default: the base origin, i.e. the root), direction (3,)
    (default: +z). The residual is the CoM's offset from the line, in the two directions
    perpendicular to it.
    """

    def __init__(self, point=(0.0, 0.0, 0.0), direction=(0.0, 0.0, 1.0), sigma=0.01,
                 weight=1.0, hard=False):
        self.point = _finite_array(point, (3,), 'line point')
        d = _finite_array(direction, (3,), 'line direction')
        norm = np.linalg.norm(d)
        if norm < 1e-9:
            raise GoalError('line direction must be non-zero')
        d = d / norm
        # Two unit vectors perpendicular to the line.
        helper = np.eye(3)[np.argmin(np.abs(d))]
        u = np.cross(d, helper)
        u /= np.linalg.norm(u)
        self._basis = np.stack([u, np.cross(d, u)])
        self.sigma = np.full(2, _positive(sigma, 'sigma'))
        self.weight = _positive(weight, 'weight')
        self.hard = bool(hard)

    def bind(self, chain):
        if chain.total_mass <= 0.0:
            raise GoalError('CenterOfMassLine needs link masses; this chain has none')
        return self

    def residual(self, frames):
        return (frames.center_of_mass() - self.point) @ self._basis.T

    def jacobian(self, frames):
        return np.einsum('kj,njv->nkv', self._basis, frames.com_jacobian())


class ChainSmoothness(Constraint):
    """Penalise differences between neighbouring joints (seed 000 eq. 16).

    For ball joints the residual of each pair (i, i + j), 1 <= j <= k, is the rotation
    vector Log(q_i^-1 q_{i+j}) (so the cost is the sum of squared geodesic distances; the
    paper sums the unsquared norms); for 1-DOF joints it is q_{i+j} - q_i.
    """

    def __init__(self, neighbours=1, sigma=0.1, weight=1.0):
        self.neighbours = int(neighbours)
        if self.neighbours < 1:
            raise GoalError(f'neighbours must be >= 1; got {neighbours}')
        self.sigma_value = _positive(sigma, 'sigma')
        self.weight = _positive(weight, 'weight')
        self._pairs = None

    def bind(self, chain):
        balls = [(qi, vi) for qi, vi, _ in chain.ball_joints]
        scalars = list(zip(chain.scalar_q, chain.scalar_v))
        self._ball_pairs = [(balls[i], balls[i + j]) for i in range(len(balls))
                            for j in range(1, self.neighbours + 1) if i + j < len(balls)]
        self._scalar_pairs = [(scalars[i], scalars[i + j]) for i in range(len(scalars))
                              for j in range(1, self.neighbours + 1) if i + j < len(scalars)]
        if self._ball_pairs:
            a = np.array([p[0][0] for p in self._ball_pairs])
            b = np.array([p[1][0] for p in self._ball_pairs])
            self._ball_q = (a[:, None] + np.arange(4), b[:, None] + np.arange(4))
            self._ball_first = (np.ascontiguousarray(a, dtype=np.int64),
                                np.ascontiguousarray(b, dtype=np.int64))
            va = np.array([p[0][1] for p in self._ball_pairs])
            vb = np.array([p[1][1] for p in self._ball_pairs])
            self._ball_v = (va[:, None] + np.arange(3), vb[:, None] + np.arange(3))
        k = 3 * len(self._ball_pairs) + len(self._scalar_pairs)
        if k == 0:
            raise GoalError('ChainSmoothness needs at least two joints of the same kind')
        self.sigma = np.full(k, self.sigma_value)
        self._pairs = True
        return self

    def residual(self, frames):
        if self._pairs is None:
            self.bind(frames.chain)
        q = frames.q
        parts = []
        if self._ball_pairs:
            parts.append(quat_pair_rotvecs(as_rows(q, q.shape[-1]), *self._ball_first))
        if self._scalar_pairs:
            ia = np.array([p[0][0] for p in self._scalar_pairs])
            ib = np.array([p[1][0] for p in self._scalar_pairs])
            parts.append(q[:, ib] - q[:, ia])
        return np.concatenate(parts, axis=-1)

    def jacobian(self, frames):
        if self._pairs is None:
            self.bind(frames.chain)
        chain = frames.chain
        n = len(frames)
        rows = []
        if self._ball_pairs:
            qa = frames.q[:, self._ball_q[0]]
            qb = frames.q[:, self._ball_q[1]]
            r = quat_to_rotvec(quat_multiply(quat_conjugate(qa), qb))     # (N, P, 3)
            jl_inv = left_jacobian_inverse(r)                               # (N, P, 3, 3)
            p_count = len(self._ball_pairs)
            block = np.zeros((n, p_count, 3, chain.nv))
            pairs = np.arange(p_count)
            # r = Log(qa^-1 qb): d r = J_r^-1(r) d_b - J_l^-1(r) d_a for body-frame steps,
            # with J_r^-1 = (J_l^-1)^T. (Advanced indices around a slice: pair axis first.)
            for k in range(3):
                block[:, pairs, :, self._ball_v[1][:, k]] = \
                    jl_inv[:, :, k, :].transpose(1, 0, 2)
                block[:, pairs, :, self._ball_v[0][:, k]] = \
                    -jl_inv[:, :, :, k].transpose(1, 0, 2)
            rows.append(block.reshape(n, 3 * p_count, chain.nv))
        if self._scalar_pairs:
            block = np.zeros((n, len(self._scalar_pairs), chain.nv))
            for r, ((_, va), (_, vb)) in enumerate(self._scalar_pairs):
                block[:, r, vb] = 1.0
                block[:, r, va] = -1.0
            rows.append(block)
        return np.concatenate(rows, axis=1)


class PosturePreference(Constraint):
    """Prefer a reference configuration (a 'rest' posture).

    q_ref (nq,), weights (n joints,) or scalar: per-joint weights; sigma [rad or m].
    """

    def __init__(self, q_ref, weights=1.0, sigma=0.5, weight=1.0):
        self.q_ref = np.array(q_ref, dtype=float)
        if self.q_ref.ndim != 1 or not np.all(np.isfinite(self.q_ref)):
            raise GoalError(f'posture q_ref must be a finite 1-D array; got {self.q_ref}')
        self.joint_weights = np.array(weights, dtype=float)
        self.sigma_value = _positive(sigma, 'sigma')
        self.weight = _positive(weight, 'weight')

    def bind(self, chain):
        if self.q_ref.shape != (chain.nq,):
            raise GoalError(f'posture q_ref must have {chain.nq} entries (joints '
                            f'{list(chain.joint_names)}); got {self.q_ref.shape[0]}')
        w = np.broadcast_to(self.joint_weights, (chain.nv,)) if self.joint_weights.ndim == 0 \
            else self.joint_weights
        if w.shape != (chain.nv,) or np.any(w < 0) or not np.all(np.isfinite(w)):
            raise GoalError(f'posture weights must be a scalar or {chain.nv} non-negative '
                            f'numbers; got {self.joint_weights}')
        self._w = np.array(w, dtype=float)
        self._chain = chain
        self.sigma = np.full(chain.nv, self.sigma_value)
        return self

    def residual(self, frames):
        chain = frames.chain
        if getattr(self, '_chain', None) is not chain:
            self.bind(chain)
        q = frames.q
        out = np.zeros((len(q), chain.nv))
        out[:, chain.scalar_v] = q[:, chain.scalar_q] - self.q_ref[chain.scalar_q]
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            rel = quat_multiply(quat_conjugate(self.q_ref[bq]), q[:, bq])
            out[:, chain.ball_v_index] = quat_to_rotvec(rel)
        return out * self._w

    def jacobian(self, frames):
        chain = frames.chain
        if getattr(self, '_chain', None) is not chain:
            self.bind(chain)
        jac = np.broadcast_to(np.diag(self._w), (len(frames),) + (chain.nv,) * 2)
        if not chain.has_ball_joints:
            return jac
        # Ball rows: d Log(q_ref^-1 q) = J_r^-1(r) d (body-frame step), J_r^-1 = (J_l^-1)^T.
        jac = jac.copy()
        bq, bv = chain.ball_q_index, chain.ball_v_index
        r = quat_to_rotvec(quat_multiply(quat_conjugate(self.q_ref[bq]), frames.q[:, bq]))
        jr_inv = np.swapaxes(left_jacobian_inverse(r), -1, -2)             # (N, B, 3, 3)
        for b in range(len(bv)):
            jac[:, bv[b][:, None], bv[b][None, :]] = self._w[bv[b]][None, :, None] * jr_inv[:, b]
        return jac


class PlaneContact(Constraint):
    """Keep a point of ``link`` on the plane normal . x = offset (seed 000 section 6.3).

    normal (3,), offset [m], point (3,) on the link [m] (default its origin).
    one_sided=True turns it into 'stay above the plane' (residual only when below).
    """

    def __init__(self, link, normal=(0.0, 0.0, 1.0), offset=0.0, point=None, sigma=0.005,
                 weight=1.0, one_sided=False):
        n = _finite_array(normal, (3,), 'plane normal')
        norm = np.linalg.norm(n)
        if norm < 1e-9:
            raise GoalError('plane normal must be non-zero')
        self.normal = n / norm
        self.offset = float(offset) / norm
        self.link = link
        self.point = None if point is None else _finite_array(point, (3,), 'contact point')
        self.sigma = np.full(1, _positive(sigma, 'sigma'))
        self.weight = _positive(weight, 'weight')
        self.one_sided = bool(one_sided)

    def bind(self, chain):
        _check_link(chain, self.link, 'PlaneContact')
        return self

    def residual(self, frames):
        d = frames.point(self.link, self.point) @ self.normal - self.offset
        if self.one_sided:
            d = np.minimum(d, 0.0)
        return d[:, None]

    def jacobian(self, frames):
        jac = np.einsum('k,nkv->nv', self.normal, frames.jacobian(self.link, self.point)[:, :3])
        if self.one_sided:
            below = (frames.point(self.link, self.point) @ self.normal - self.offset) < 0.0
            jac = jac * below[:, None]
        return jac[:, None, :]


class JointCoupling(Constraint):
    """Couple two 1-DOF joints: q[joint] = ratio * q[source] + offset (seed 000 section 6.4).

    Example: ``JointCoupling('j_last', 'j_prev', ratio=2/3)``. URDF mimic joints express a
    rigid coupling in the model itself; this is the soft version.
    """

    def __init__(self, joint, source, ratio=1.0, offset=0.0, sigma=0.01, weight=1.0):
        self.joint = joint
        self.source = source
        self.ratio = float(ratio)
        self.offset = float(offset)
        self.sigma = np.full(1, _positive(sigma, 'sigma'))
        self.weight = _positive(weight, 'weight')
        self._index = None

    def bind(self, chain):
        idx = []
        for name in (self.joint, self.source):
            if name not in chain.joint_names:
                raise GoalError(f'JointCoupling: unknown joint {name!r}; joints: '
                                f'{", ".join(chain.joint_names)}')
            if chain.joint_types[chain.joint_names.index(name)] == 'ball':
                raise GoalError(f'JointCoupling: joint {name!r} is a ball joint; only 1-DOF '
                                'joints can be coupled')
            idx.append((chain.joint_index(name), chain.joint_velocity_index(name)))
        self._index = idx
        return self

    def residual(self, frames):
        if self._index is None:
            self.bind(frames.chain)
        (qa, _), (qb, _) = self._index
        q = frames.q
        return (q[:, qa] - self.ratio * q[:, qb] - self.offset)[:, None]

    def jacobian(self, frames):
        if self._index is None:
            self.bind(frames.chain)
        (_, va), (_, vb) = self._index
        jac = np.zeros((len(frames), 1, frames.chain.nv))
        jac[:, 0, va] = 1.0
        jac[:, 0, vb] = -self.ratio
        return jac


# ---------------------------------------------------------------------------- helpers
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


def check_terms(terms, chain):
    """Bind constraint terms to ``chain``; raise GoalError naming the bad one."""
    out = []
    for t in terms or ():
        if not isinstance(t, Term):
            raise GoalError(f'constraints must be goal/constraint objects from smcik_ros.goals; '
                            f'got {type(t).__name__}')
        out.append(t.bind(chain))
    return out


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

