"""Constraints on the configuration that shape the solution: the centre of mass on a line
(seed 000 section 6.1), smoothness between neighbouring joints (eq. 16), a rest posture and
joint couplings (section 6.4). Contacts and the support polygon live in ``body``.
"""

import numpy as np

from ..errors import GoalError
from ..kernels.jit import as_rows
from ..kernels.quat import quat_pair_rotvecs
from ..rotations import (left_jacobian_inverse, quat_conjugate, quat_multiply,
                         quat_to_rotvec)
from .terms import Constraint, finite_array, positive

__all__ = ['CenterOfMassLine', 'ChainSmoothness', 'JointCoupling', 'PosturePreference']


class CenterOfMassLine(Constraint):
    """Keep the centre of mass on a vertical line (seed 000 section 6.1).

    point (3,) on the line [m] (default: the base origin, i.e. the root), direction (3,)
    (default: +z). The residual is the CoM's offset from the line, in the two directions
    perpendicular to it. hard=True keeps it: an equality (``goals.body``) within
    ``tolerance`` [m] of the line (``violated`` beyond).
    """

    def __init__(self, point=(0.0, 0.0, 0.0), direction=(0.0, 0.0, 1.0), sigma=0.01,
                 weight=1.0, hard=False, tolerance=0.001):
        self.point = finite_array(point, (3,), 'line point')
        d = finite_array(direction, (3,), 'line direction')
        norm = np.linalg.norm(d)
        if norm < 1e-9:
            raise GoalError('line direction must be non-zero')
        d = d / norm
        # Two unit vectors perpendicular to the line.
        helper = np.eye(3)[np.argmin(np.abs(d))]
        u = np.cross(d, helper)
        u /= np.linalg.norm(u)
        self._basis = np.stack([u, np.cross(d, u)])
        self.sigma = np.full(2, positive(sigma, 'sigma'))
        self.weight = positive(weight, 'weight')
        self.hard = bool(hard)
        self.equality = self.hard
        self.tolerance = np.full(2, positive(tolerance, 'CenterOfMassLine tolerance'))

    def bind(self, chain):
        if chain.total_mass <= 0.0:
            raise GoalError('CenterOfMassLine needs link masses; this chain has none')
        return self

    def residual(self, frames):
        return (frames.center_of_mass() - self.point) @ self._basis.T

    def violated(self, frames):
        if not self.hard:
            return np.zeros(len(frames), dtype=bool)
        return np.linalg.norm(self.residual(frames), axis=1) > self.tolerance[0]

    def jacobian(self, frames):
        return np.einsum('kj,njv->nkv', self._basis, frames.com_jacobian())


class ChainSmoothness(Constraint):
    """Penalise differences between neighbouring joints (seed 000 eq. 16).

    For ball joints the residual of each pair (i, i + j), 1 <= j <= k, is the rotation
    vector Log(q_i^-1 q_{i+j}) (so the cost is the sum of squared geodesic distances; the
    paper sums the unsquared norms); for 1-DOF joints it is q_{i+j} - q_i.

    joints: the joint names whose neighbours are compared, in the order given (list one
    branch root to tip; in a tree the order of the list is the chain: the last joint of one
    branch listed before the first of the next are neighbours); None: every joint in the
    chain's order (which crosses branches in a tree), the floating base's aside. Ball and
    1-DOF joints pair among their own kind.
    """

    def __init__(self, neighbours=1, sigma=0.1, weight=1.0, joints=None):
        self.neighbours = int(neighbours)
        if self.neighbours < 1:
            raise GoalError(f'neighbours must be >= 1; got {neighbours}')
        self.sigma_value = positive(sigma, 'sigma')
        self.weight = positive(weight, 'weight')
        if joints is not None:
            if isinstance(joints, str) or not all(isinstance(j, str) for j in joints):
                raise GoalError(f'ChainSmoothness joints must be a list of joint names; got '
                                f'{joints!r}')
            twice = sorted({j for j in joints if list(joints).count(j) > 1})
            if twice:
                raise GoalError(f'ChainSmoothness joints must differ; listed twice: '
                                f'{", ".join(twice)}')
        self.joints = None if joints is None else tuple(joints)
        self._pairs = None

    def bind(self, chain):
        base = {chain.joint_names[i] for i in chain.base_index}
        names = self.joints if self.joints is not None else [
            n for n in chain.joint_names if n not in base]
        unknown = [n for n in names if n not in chain.joint_names]
        if unknown:
            raise GoalError(f'ChainSmoothness: unknown joint(s) {", ".join(unknown)}; joints '
                            f'of this chain: {", ".join(chain.joint_names)}')
        kinds = dict(zip(chain.joint_names, chain.joint_types))
        index = [(n, chain.joint_index(n), chain.joint_velocity_index(n)) for n in names]
        balls = [(qi, vi) for n, qi, vi in index if kinds[n] == 'ball']
        scalars = [(qi, vi) for n, qi, vi in index if kinds[n] != 'ball']
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
        self.sigma_value = positive(sigma, 'sigma')
        self.weight = positive(weight, 'weight')

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
        self.sigma = np.full(1, positive(sigma, 'sigma'))
        self.weight = positive(weight, 'weight')
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
