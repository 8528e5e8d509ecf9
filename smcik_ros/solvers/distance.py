"""IK driven by distances (Le Naour, Courty & Gibet; seed 002), in the chain's joint space.

*Hard* rows (targets as point coincidences, contacts) take Newton steps with the SVD
pseudo-inverse (eq. 8); *soft* rows (the reference posture's distances to four anchors) are a
secondary task that leaves the hard ones alone to first order (``_secondary_step``). The
points are functions of the joints, so segment lengths hold by construction and the output
is a configuration inside the limits. A pose target becomes point targets: the tool point
and ``orientation_points`` points ``point_offset`` metres along the tool frame's axes. The
paper's own form (3n free points) is beside its benchmark (benchmarks/_free_point.py);
docs/solvers.md, section 2, says where this differs from the paper and why.

Distance rows are g = (|xi - xj|^2 - d^2) / (2 d) (to first order |xi - xj| - d [m]), not
eq. 7's square, whose double root makes eq. 10's gradient vanish at the solution (Newton
then converges linearly); a zero distance is three rows xi - xT, since |xi - xT|^2 has a
zero gradient there in every direction.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import GoalError
from ..goals import (Constraint, OrientationTarget, PoseTarget, PositionTarget,
                     _check_link, _finite_array, _positive)
from ..rotations import skew
from .base import _check, check_choice, check_fields, register, stack_terms
from .inequality import inequality_constraints
from .jacobian import (DescentSettings, JacobianSolver, limit_push, nullspace_projector,
                       pinv_step)

__all__ = ['DistanceSettings', 'DistanceSolver', 'PointDistance', 'reference_anchors']

SOFT_REFERENCES = ('anchors', 'points', 'none')
REFERENCE_POSTURES = ('neutral', 'reset')


def reference_anchors(scale, origin=(0.0, 0.0, 0.0)):
    """Return the (4, 3) fixed reference points of the paper's replay: origin + scale * basis."""
    return np.asarray(origin, dtype=float) + np.vstack([np.zeros(3), scale * np.eye(3)])


# ---------------------------------------------------------------------- a distance term
class PointDistance(Constraint):
    """Keep a point of ``link`` at ``distance`` [m] from a world point or a point of another link.

    link, offset: the point (offset (3,) in the link frame, None: its origin);
    point (3,): a fixed world point [m] in the base frame, or ``other_link`` (and
    ``other_offset``) for a point of the chain. distance 0 is a contact/coincidence (three
    rows, p - p_other); distance > 0 is one row (|p - p_other|^2 - d^2) / (2 d) [m].
    hard=True: the distance solver puts it in the primary task (eq. 11's F); soft: in the
    secondary task (G). Other solvers read its residual/jacobian/sigma like any constraint.
    """

    def __init__(self, link, distance=0.0, point=None, offset=None, other_link=None,
                 other_offset=None, hard=True, sigma=0.005, weight=1.0):
        self.link = link
        self.offset = None if offset is None else _finite_array(offset, (3,), 'point offset')
        if (point is None) == (other_link is None):
            raise GoalError('PointDistance needs either a world point (point=) or another '
                            'chain link (other_link=), not both or neither')
        self.point = None if point is None else _finite_array(point, (3,), 'world point')
        self.other_link = other_link
        self.other_offset = None if other_offset is None else _finite_array(
            other_offset, (3,), 'other point offset')
        self.distance = float(distance)
        if not np.isfinite(self.distance) or self.distance < 0.0:
            raise GoalError(f'distance must be a finite number >= 0 [m]; got {distance}')
        self.hard = bool(hard)
        k = 3 if self.distance == 0.0 else 1
        self.sigma = np.full(k, _positive(sigma, 'sigma'))
        self.weight = _positive(weight, 'weight')

    def bind(self, chain):
        _check_link(chain, self.link, 'PointDistance')
        _check_link(chain, self.other_link, 'PointDistance other_link')
        return self

    def _points(self, frames):
        pa = frames.point(self.link, self.offset)
        pb = (np.broadcast_to(self.point, pa.shape) if self.point is not None
              else frames.point(self.other_link, self.other_offset))
        return pa, pb

    def residual(self, frames):
        pa, pb = self._points(frames)
        diff = pa - pb
        if self.distance == 0.0:
            return diff
        d = self.distance
        return ((np.einsum('nk,nk->n', diff, diff) - d * d) / (2.0 * d))[:, None]

    def jacobian(self, frames):
        pa, pb = self._points(frames)
        jac = frames.jacobian(self.link, self.offset)[:, :3]
        if self.other_link is not None:
            jac = jac - frames.jacobian(self.other_link, self.other_offset)[:, :3]
        if self.distance == 0.0:
            return jac
        # eq. 10 without the vanishing factor: d g / dq = (pa - pb)^T (Ja - Jb) / d.
        return np.einsum('nk,nkv->nv', (pa - pb) / self.distance, jac)[:, None, :]

    def violated(self, frames):
        if not self.hard:
            return np.zeros(len(frames), dtype=bool)
        pa, pb = self._points(frames)
        return np.abs(np.linalg.norm(pa - pb, axis=-1) - self.distance) > 1e-3


# ---------------------------------------------------------------------- joint-space solver
@dataclass(frozen=True)
class DistanceSettings(DescentSettings):
    """Settings of the distance solver: the iteration's (``DescentSettings``: ``gain`` is
    the fraction of the hard-constraint Newton step), then the distance task's."""

    soft_gain: float = 0.3               # eq. 11 secondary-task gain (limits its involvement)
    soft_max_step: float = 0.1           # [rad or m] largest joint change of the soft step
    soft_decay: float = 0.95             # per-iteration factor on the secondary task after a
    #                                      new goal (1: constant): it guides, then fades
    point_offset: float = 0.1            # [m] distance of the orientation points from the tool
    orientation_points: int = 3          # points along the tool axes per orientation (2 or 3)
    soft_reference: str = 'anchors'      # 'anchors', 'points' or 'none' (see the docs)
    reference_posture: str = 'neutral'   # posture whose distances are kept: 'neutral' or 'reset'
    reference_sigma: float = 0.05        # [m] soft reference rows are divided by this

    def validate(self):
        super().validate()
        check_choice(self, 'soft_reference', SOFT_REFERENCES)
        check_choice(self, 'reference_posture', REFERENCE_POSTURES)
        check_fields(self, '(0, 1]', 'soft_decay')
        check_fields(self, '[0, 1]', 'soft_gain')
        check_fields(self, '> 0', 'soft_max_step', note=' [rad or m]')
        check_fields(self, '> 0', 'point_offset', 'reference_sigma', note=' [m]')
        _check(self.orientation_points in (2, 3),
               f'orientation_points must be 2 or 3; got {self.orientation_points}')


@register('distance')
class DistanceSolver(JacobianSolver):
    """Distance-constraint IK in the chain's joint space (see the module docstring): the
    Jacobian solver's iteration (``limited_step``, dampers) on point rows, with the pseudo-
    inverse as primary step and the reference distances as secondary task."""

    Settings = DistanceSettings

    def __init__(self, chain, settings=None):
        # The moving link origins: the points whose reference distances are kept.
        bodies, offsets = [], []
        seen = set()
        for link in chain.link_names:
            body, off = chain.link_anchor(link)
            key = (body, tuple(np.round(off[:3, 3], 12)))
            if body < 0 or key in seen:
                continue
            seen.add(key)
            bodies.append(body)
            offsets.append(off[:3, 3].copy())
        self._ref_bodies = np.array(bodies, dtype=int)
        self._ref_offsets = np.array(offsets, dtype=float).reshape(-1, 3)
        self._point_cols = np.zeros((len(bodies), len(chain.column_body)), dtype=bool)
        for p, b in enumerate(bodies):       # (P, C): Jacobian column c moves point p's body
            self._point_cols[p, chain.columns_of_body[b]] = True
        self._anchors = reference_anchors(chain.length_scale)
        super().__init__(chain, settings)

    # ------------------------------------------------------------------ setup
    def _on_constraints_changed(self):
        # Collision and keep-out constraints are inequalities with velocity dampers (see
        # solvers.inequality), not distance equalities.
        self._inequalities = inequality_constraints(self.constraints)
        self._hard = [c for c in self.constraints if c.hard and c not in self._inequalities]
        self._soft = [c for c in self.constraints if not c.hard]

    def _reset(self, q):
        super()._reset(q)
        # The reference posture's link points and their distances to the anchors; rows
        # with a (near) zero reference distance carry no gradient: they are left out.
        reference = q if self.settings.reference_posture == 'reset' else \
            self.chain.neutral_configuration()
        self._ref_points = self._link_points(self.chain.frames(reference))
        self._ref_dist = np.linalg.norm(self._ref_points[:, None, :] - self._anchors[None],
                                        axis=-1)                                   # (P, 4)
        self._ref_rows = self._ref_dist > 1e-6
        self._secondary_scale = 1.0

    def _on_goal_changed(self, targets):
        self._secondary_scale = 1.0

    def _restart(self):
        self._secondary_scale = 1.0
        return super()._restart()

    def _link_points(self, frames):
        """Return the (P, 3) reference link origins of the first configuration of frames."""
        b = self._ref_bodies
        return frames.pos[b, 0] + np.einsum('pij,pj->pi', frames.rot[b, 0], self._ref_offsets)

    # ------------------------------------------------------------------ the task
    def hard_terms(self, targets, frames):
        """Return the hard residual F (K0,) [m] and its Jacobian J0 (K0, nv) at ``frames``."""
        res, jac = [], []
        for t in targets:
            r, j = self._target_rows(t, frames)
            w = np.sqrt(t.weight)
            res.append(w * r)
            jac.append(w * j)
        if self._hard:
            r, j = stack_terms(self._hard, frames)
            # Hard constraints are in sigma units; bring them to metres-like rows.
            res.append(r[0] * 0.01)
            jac.append(j[0] * 0.01)
        return np.concatenate(res), np.concatenate(jac, axis=0)

    def _target_rows(self, target, frames):
        """Return the point-coincidence rows (residual, Jacobian) of one target."""
        s = self.settings
        a = s.point_offset
        axes = np.eye(3)[:s.orientation_points]
        if isinstance(target, PositionTarget):
            r = frames.point(target.link, target.offset)[0] - target.position
            return r, frames.jacobian(target.link, target.offset)[0, :3]
        if not isinstance(target, (PoseTarget, OrientationTarget)):
            raise GoalError(f'the distance solver handles PoseTarget, PositionTarget and '
                            f'OrientationTarget; got {type(target).__name__}')
        pose = frames.link_pose(target.link)[0]
        jac6 = frames.jacobian(target.link)[0]
        rot = pose[:3, :3]
        # Offset points p_k = p + a R e_k: dp_k = dp - [a R e_k]x w.
        arms = a * rot @ axes.T                               # (3, k) columns
        res, rows = [], []
        if isinstance(target, PoseTarget):
            goal_rot, goal_pos = target.pose[:3, :3], target.pose[:3, 3]
            res.append(pose[:3, 3] - goal_pos)
            rows.append(jac6[:3])
        else:
            goal_rot = target.rotation
        goal_arms = a * goal_rot @ axes.T
        for k in range(axes.shape[0]):
            res.append(arms[:, k] - goal_arms[:, k])
            rows.append(-skew(arms[:, k]) @ jac6[3:])
        return np.concatenate(res), np.concatenate(rows, axis=0)

    def soft_terms(self, frames):
        """Return the soft residual G (K1,) and Jacobian J1 (K1, nv) (reference distances)."""
        s = self.settings
        res, jac = [], []
        if s.soft_reference != 'none' and len(self._ref_bodies):
            pts = self._link_points(frames)
            pj = _point_jacobians(frames, self._ref_bodies, pts, self._point_cols)  # (P, 3, nv)
            if s.soft_reference == 'points':
                res.append((pts - self._ref_points).ravel())
                jac.append(pj.reshape(-1, self.chain.nv))
            else:
                diff = pts[:, None, :] - self._anchors[None]           # (P, 4, 3)
                d = np.where(self._ref_rows, self._ref_dist, 1.0)
                g = (np.einsum('pak,pak->pa', diff, diff) - d * d) / (2.0 * d)
                rows = np.einsum('pak,pkv->pav', diff / d[..., None], pj)
                res.append(g[self._ref_rows])
                jac.append(rows[self._ref_rows])
            res[-1] = res[-1] / s.reference_sigma
            jac[-1] = jac[-1] / s.reference_sigma
        if self._soft:
            r, j = stack_terms(self._soft, frames)
            res.append(r[0])
            jac.append(j[0])
        if not res:
            return np.zeros(0), np.zeros((0, self.chain.nv))
        return np.concatenate(res), np.concatenate(jac, axis=0)

    # ------------------------------------------------------------------ one iteration
    def _task(self, targets):
        """Return (|F|^2, (F, J0)): the hard rows (``hard_terms``)."""
        f, j0 = self.hard_terms(targets, self._frames)
        self.last_info['hard_error'] = float(np.sqrt(f @ f))
        return float(f @ f), (f, j0)

    def _method_step(self, jac, e, svd):
        return pinv_step(jac, e, svd, max(self.settings.singular_value_cutoff, 1e-12))

    def _secondary(self, task, gain):
        """Return the (nv,) secondary step z: the soft rows' correction (at most
        ``soft_max_step``) and the joint-limit push, times ``soft_decay`` ** (iterations
        since the goal, a reset or a restart): the paper's "parameter ... to limit the
        involvement of the secondary task at the end of the iteration", so the hard
        constraints converge to zero rather than to a second-order error."""
        s = self.settings
        z = np.zeros(self.chain.nv)
        scale = self._secondary_scale
        self._secondary_scale *= s.soft_decay
        g, j1 = self.soft_terms(self._frames)
        if s.soft_gain * scale > 1e-6 and g.size:
            z -= s.soft_gain * self._secondary_step(*task, g, j1, gain)
            biggest = np.max(np.abs(z))
            if biggest > s.soft_max_step:
                z *= s.soft_max_step / biggest
        z += limit_push(self.chain, self._q, s)
        return z * scale

    def _secondary_step(self, f, j0, g, j1, gain):
        """Return the (unscaled) soft correction: minus the step that reduces G.

        The task-priority solution (Nakamura, Hanafusa & Yoshikawa 1987)
        N (J1 N)^+ (G + J1 dx0) with dx0 = -gain J0^+ F, damped (``_least_squares``): the
        best soft correction that leaves the hard constraints alone to first order. Eq. 11's
        projected J1^+ G is not always a descent direction for |G|^2 (J1 N J1^+ is not
        positive semi-definite for a tall J1): on the 7-DOF arm it raised the soft error in
        4 of 10 trials (docs/solvers.md).
        """
        u, sv, vt = np.linalg.svd(j0, full_matrices=False)
        dx0 = self._method_step(j0, -gain * f, (u, sv, vt))
        proj = nullspace_projector(vt, sv, self.settings.singular_value_cutoff)
        return proj @ _least_squares(j1 @ proj, g + j1 @ dx0)


def _least_squares(jac, res, ridge=1e-2):
    """Return the damped least-squares solution (J^T J + mu I)^-1 J^T r (n,) for (K, n) J.

    mu = ridge * the mean diagonal of J^T J: directions the soft rows barely see (a last
    joint that moves no reference point; two aligned axes near a singularity) get a small
    step instead of a huge pseudo-inverse one, which made the secondary task overshoot and
    cycle in our runs.
    """
    jtj = jac.T @ jac
    ridge = ridge * (np.trace(jtj) / max(len(jtj), 1) + 1e-300)
    jtj[np.diag_indices_from(jtj)] += ridge
    return np.linalg.solve(jtj, jac.T @ res)


def _point_jacobians(frames, bodies, points, masks):
    """Return (P, 3, nv) linear Jacobians of points (P, 3) on ``bodies``, first row of frames.

    All points at once: column c contributes axis_c x (p - o_c) (rotational) or axis_c
    (prismatic) where it moves the point's body; same maths as ``Frames.jacobian_at``.
    """
    chain = frames.chain
    cb = chain.column_body
    axes = np.einsum('cij,cj->ci', frames.rot[cb, 0], chain.column_axis)      # (C, 3)
    origins = frames.pos[cb, 0]                                             # (C, 3)
    lever = points[:, None, :] - origins[None]                              # (P, C, 3)
    lin = np.where(chain.column_is_rotation[None, :, None], np.cross(axes[None], lever),
                   axes[None])
    lin = lin * masks[..., None]
    return np.einsum('pck,cv->pkv', lin, chain.column_scatter)
