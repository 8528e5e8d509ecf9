"""IK driven by distances (Le Naour, Courty & Gibet; seed 002).

The task is a set of distance constraints between points: points of the chain, target
points and fixed world points. *Hard* constraints (a target reached, a contact) are solved
by Newton steps with the SVD pseudo-inverse (eq. 8); *soft* constraints (distances that
keep the style of a reference posture) are a secondary task projected into the null space
of the hard ones (eq. 11):

    x <- x - gain J0^+ F(x) + (I - J0^+ J0) (-soft_gain J1^+ G(x))

Two forms:

- ``DistanceSolver`` ('distance' in ``make_solver``): the unknowns are the chain's joint
  positions, the points are functions of them (so segment lengths hold by construction,
  and the output is a joint configuration inside the limits). Point Jacobians are analytic
  (eq. 10 chained with the point Jacobians of the kinematics). A pose target becomes point
  targets: the tool point and ``orientation_points`` points ``point_offset`` metres along
  the tool frame's axes, so the orientation is reached too.
- ``FreePointDistanceSolver``: the paper as written, 3n unknown point positions, segment
  lengths and pinned points as hard constraints, reference distances as soft ones; works
  on graphs with cycles (section VI-D). ``structured=True`` uses the block structure
  (each constraint row touches at most two points; eqs. 12-13: the soft Jacobian towards
  fixed reference points is block diagonal, so its pseudo-inverse is the blocks'
  pseudo-inverses) instead of dense SVDs of the full matrices.

Distance residuals. The paper's eq. 7 squares the residual, f = (|xi - xj|^2 - d^2)^2,
which has a double root: its gradient (eq. 10) vanishes at the solution and Newton slows
to linear convergence there. We use the unsquared, scaled residual
g = (|xi - xj|^2 - d^2) / (2 d) (same zero set; to first order |xi - xj| - d, in metres),
whose gradient (xi - xj)^T / d is eq. 10 without the vanishing factor. A zero distance
(a point on a target, a pinned point) is the paper's "equality between a point and an
other (g(x) = x_T)": three rows xi - xT, since |xi - xT|^2 has a zero gradient at the
solution in every direction.
"""

import time
from dataclasses import dataclass

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import (Constraint, OrientationTarget, PoseTarget, PositionTarget,
                     _check_link, _finite_array, _positive)
from ..rotations import skew
from .base import SolverSettings, _check, check_choice, check_fields, register, stack_terms
from .inequality import inequality_constraints
from .jacobian import (DescentSettings, JacobianSolver, limit_push, nullspace_projector,
                       pinv_step)

__all__ = ['DistanceSettings', 'DistanceSolver', 'PointDistance', 'FreePointSettings',
           'FreePointDistanceSolver', 'FreePointResult', 'reference_anchors']

SOFT_REFERENCES = ('anchors', 'points', 'none')
_DENSE_ROWS = 150     # free-point solver: below this many hard rows, solve J0 J0^T densely
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


# ---------------------------------------------------------------------- free points (paper)
@dataclass(frozen=True)
class FreePointSettings(SolverSettings):
    """Settings of the free-point distance solver (3n unknowns)."""

    gain: float = 1.0                    # fraction of the hard-constraint Newton step
    soft_gain: float = 0.1               # eq. 11 secondary-task gain
    soft_step_fraction: float = 0.2      # largest soft-step point move / shortest segment
    soft_decay: float = 0.95             # per-step factor on the soft task since reset/solve
    singular_value_cutoff: float = 1e-6  # dense pseudo-inverses: relative cut-off
    regularization: float = 1e-10        # structured solve: relative ridge on J0 J0^T
    structured: bool = True              # block-sparse solve (eqs. 12-13) instead of dense SVD

    def validate(self):
        check_fields(self, '(0, 1]', 'gain', 'soft_decay')
        check_fields(self, '[0, 1]', 'soft_gain')
        check_fields(self, '> 0', 'soft_step_fraction', note=' (share of the shortest segment)')
        check_fields(self, '[0, 1)', 'singular_value_cutoff', 'regularization')


@dataclass(frozen=True)
class FreePointResult:
    """Outcome of ``FreePointDistanceSolver.solve``.

    points: (n, 3) [m]; success: every hard constraint within tolerance; hard_error: largest
    hard residual [m]; soft_error: RMS soft residual [m]; iterations; elapsed [s].
    """

    points: np.ndarray
    success: bool
    hard_error: float
    soft_error: float
    iterations: int
    elapsed: float = 0.0


class FreePointDistanceSolver:
    """The paper's distance IK on free points: unknowns X = (x_1 ... x_n), 3n numbers.

    reference: (n, 3) reference posture [m] (also the start); edges: (m, 2) point pairs whose
    reference lengths are hard constraints (segments; the graph may have cycles);
    pinned: indices of points held at their reference positions (hard);
    soft: 'anchors' (each point keeps its reference distances to four fixed reference
    points, the paper's replay set-up, eqs. 12-13), or 'none';
    soft_pairs: (s, 2) extra point pairs whose reference distances are soft (the dotted
    lines of Fig. 10). Targets, given per call, are hard point coincidences {index: (3,)}.
    """

    def __init__(self, reference, edges, pinned=(), soft='anchors', soft_pairs=(),
                 anchors=None, settings=None, **changes):
        ref = np.array(reference, dtype=float)
        if ref.ndim != 2 or ref.shape[1] != 3 or not np.all(np.isfinite(ref)):
            raise ParameterError(f'reference must be finite points of shape (n, 3); '
                                 f'got {ref.shape}')
        n = len(ref)
        self.num_points = n
        settings = settings or FreePointSettings()
        self.settings = settings.replace(**changes) if changes else settings
        self.edges = _pairs(edges, n, 'edges')
        self.soft_pairs = _pairs(soft_pairs, n, 'soft_pairs')
        self.pinned = np.array(sorted(set(int(i) for i in pinned)), dtype=int)
        if self.pinned.size and (self.pinned.min() < 0 or self.pinned.max() >= n):
            raise ParameterError(f'pinned indices must be in [0, {n - 1}]; got {pinned}')
        if soft not in ('anchors', 'none'):
            raise ParameterError(f"soft must be 'anchors' or 'none'; got {soft!r}")
        self.soft = soft
        self.reference = ref
        self.lengths = np.linalg.norm(ref[self.edges[:, 0]] - ref[self.edges[:, 1]], axis=-1)
        if np.any(self.lengths < 1e-9):
            raise ParameterError('edges must join distinct points of the reference (a zero '
                                 'segment length has no gradient)')
        span = float(np.ptp(ref, axis=0).max()) if n > 1 else 1.0
        centre = ref.mean(axis=0)
        self.anchors = (reference_anchors(max(span, 1e-3), centre - 0.5 * span)
                        if anchors is None else np.array(anchors, dtype=float).reshape(-1, 3))
        self.anchor_dist = np.linalg.norm(ref[:, None] - self.anchors[None], axis=-1)
        if self.soft == 'anchors' and np.any(self.anchor_dist < 1e-9):
            raise ParameterError('a reference point coincides with an anchor point; move the '
                                 'anchors (anchors=)')
        self.pair_dist = np.linalg.norm(ref[self.soft_pairs[:, 0]] - ref[self.soft_pairs[:, 1]],
                                        axis=-1)
        shortest = float(self.lengths.min()) if len(self.lengths) else max(span, 1e-3)
        self._soft_limit = self.settings.soft_step_fraction * shortest
        self.points = ref.copy()
        self._soft_scale = 1.0

    def reset(self, points=None):
        """Restart from ``points`` (n, 3) (default: the reference); the soft task is fresh."""
        self.points = self.reference.copy() if points is None else np.array(points, float)
        self._soft_scale = 1.0

    # ------------------------------------------------------------------ constraints
    def _targets(self, targets):
        idx, pos = [], []
        for i, p in dict(targets or {}).items():
            if not 0 <= int(i) < self.num_points:
                raise GoalError(f'target point index must be in [0, {self.num_points - 1}]; '
                                f'got {i}')
            idx.append(int(i))
            pos.append(_finite_array(p, (3,), f'target of point {i}'))
        for i in self.pinned:
            if i not in idx:
                idx.append(int(i))
                pos.append(self.reference[i])
        return np.array(idx, dtype=int), np.array(pos, dtype=float).reshape(-1, 3)

    def hard_rows(self, x, targets):
        """Return F (m0,) and the row structure of J0: the segments, then the targets.

        Each row touches at most two points: (coef_a (m0, 3), point_a (m0,),
        coef_b (m0, 3), point_b (m0,), point_b = -1 where only one point is touched).
        """
        ti, tp = targets
        e = self.edges
        f_seg, g_seg = _distance_rows(x[e[:, 0]] - x[e[:, 1]], self.lengths)
        k = len(ti)
        return (np.concatenate([f_seg, (x[ti] - tp).ravel()]),
                (np.concatenate([g_seg, np.tile(np.eye(3), (k, 1))]),
                 np.concatenate([e[:, 0], np.repeat(ti, 3)]),
                 np.concatenate([-g_seg, np.zeros((3 * k, 3))]),
                 np.concatenate([e[:, 1], np.full(3 * k, -1)])))

    def soft_anchor_rows(self, x):
        """Return G (n, 4) and the per-point (n, 4, 3) blocks of the anchor rows (eq. 13)."""
        return _distance_rows(x[:, None, :] - self.anchors[None], self.anchor_dist)

    def soft_rows(self, x):
        """Return G (m1,) and the row structure of J1 (as ``hard_rows``): each point's
        distances to the anchors (one-point rows), then the soft pairs."""
        p = self.soft_pairs
        g, grad = _distance_rows(x[p[:, 0]] - x[p[:, 1]], self.pair_dist)
        if self.soft != 'anchors':
            return g, (grad, p[:, 0], -grad, p[:, 1])
        n = self.num_points
        ga, blocks = self.soft_anchor_rows(x)
        return (np.concatenate([ga.ravel(), g]),
                (np.concatenate([blocks.reshape(-1, 3), grad]),
                 np.concatenate([np.repeat(np.arange(n), 4), p[:, 0]]),
                 np.concatenate([np.zeros((4 * n, 3)), -grad]),
                 np.concatenate([np.full(4 * n, -1), p[:, 1]])))

    # ------------------------------------------------------------------ one Newton step
    def step(self, targets=None):
        """Run one eq. 11 iteration towards ``targets`` {point index: (3,)}; return (n, 3).

        The secondary step z = -soft_gain J1^+ G is first shortened so that no point moves
        more than ``soft_step_fraction`` of the shortest segment: the projection keeps the
        hard constraints only to first order, and long secondary steps otherwise leave a
        second-order hard error that the next Newton step cannot remove before the soft
        task pushes again (we saw the hard error stall at 10-40 % of a segment). Then the
        soft step is scaled by ``soft_decay`` ** (steps since reset/solve): the paper's
        "parameter ... to limit the involvement of the secondary task at the end of the
        iteration", so the hard constraints converge to zero, not to a second-order error.
        """
        s = self.settings
        tg = self._targets(targets)
        x = self.points
        structured = s.structured
        scale = self._soft_scale
        self._soft_scale *= s.soft_decay
        z = self._soft_step(x, structured) if s.soft_gain * scale > 1e-6 else np.zeros(x.size)
        if z.any():
            biggest = np.max(np.linalg.norm(z.reshape(-1, 3), axis=1))
            if biggest > self._soft_limit:
                z *= self._soft_limit / biggest
            z *= scale
        if structured:
            dx = self._primary_structured(x, tg, z)
        else:
            dx = self._primary_dense(x, tg, z)
        self.points = x + dx
        return self.points.copy()

    def _soft_step(self, x, structured):
        """Return z = -soft_gain J1^+ G (3n,).

        structured: with only anchor rows J1 is block diagonal (eq. 12), so J1^+ G is each
        point's 4 x 3 block pseudo-inverse (eq. 13) applied to its rows, one batched call;
        with soft pairs, (J1^T J1)^-1 J1^T G by a sparse factorisation. Dense: one SVD of
        the whole (m1, 3n) matrix.
        """
        s = self.settings
        if self.soft != 'anchors' and not len(self.soft_pairs):
            return np.zeros(3 * self.num_points)
        if structured and not len(self.soft_pairs):
            g, blocks = self.soft_anchor_rows(x)                  # (n, 4), (n, 4, 3)
            return -s.soft_gain * np.einsum('nka,na->nk', np.linalg.pinv(blocks), g).ravel()
        g, rows = self.soft_rows(x)
        if not structured:
            j1 = _dense_rows(rows, 3 * self.num_points)
            return -s.soft_gain * (np.linalg.pinv(j1, rcond=max(s.singular_value_cutoff,
                                                                 1e-15)) @ g)
        j1 = _sparse_rows(rows, 3 * self.num_points)
        return -s.soft_gain * _sparse_solve(j1.T @ j1, max(s.regularization, 1e-12), j1.T @ g)

    def _primary_dense(self, x, tg, z):
        """Eq. 11 with dense matrices and an SVD pseudo-inverse (the unoptimised version)."""
        s = self.settings
        f, rows = self.hard_rows(x, tg)
        j0 = _dense_rows(rows, 3 * self.num_points)
        j0p = np.linalg.pinv(j0, rcond=max(s.singular_value_cutoff, 1e-15))
        dx = -s.gain * (j0p @ f) + z - j0p @ (j0 @ z)
        return dx.reshape(-1, 3)

    def _primary_structured(self, x, tg, z):
        """Eq. 11's hard part without the pseudo-inverse's SVD or a 3n x 3n matrix.

        -gain J0^+ F + (I - J0^+ J0) z = z - J0^T (J0 J0^T)^-1 (gain F + J0 z) for a J0 of
        full row rank (ridge ``regularization``, relative to the mean diagonal, for
        redundant hard constraints). Each hard row touches <= 2 points, so J0 J0^T is a
        sparse m0 x m0 matrix: factorised sparse for large problems, dense below
        ``_DENSE_ROWS`` rows where scipy's per-call overhead costs more than it saves.
        """
        s = self.settings
        n3 = 3 * self.num_points
        f, rows = self.hard_rows(x, tg)
        rhs = s.gain * f
        if len(f) <= _DENSE_ROWS:
            j0 = _dense_rows(rows, n3)
            jjt = j0 @ j0.T
            jjt[np.diag_indices_from(jjt)] += s.regularization * (np.trace(jjt) / len(f)
                                                                   + 1e-30)
            y = np.linalg.solve(jjt, rhs + j0 @ z)
        else:
            j0 = _sparse_rows(rows, n3)
            y = _sparse_solve(j0 @ j0.T, s.regularization, rhs + j0 @ z)
        return (z - j0.T @ y).reshape(-1, 3)

    # ------------------------------------------------------------------ loop
    def errors(self, x=None, targets=None):
        """Return (largest hard residual [m], RMS soft residual [m]) at points ``x``."""
        x = self.points if x is None else x
        f, _ = self.hard_rows(x, self._targets(targets))
        g = self.soft_rows(x)[0]
        hard = float(np.max(np.abs(f))) if f.size else 0.0
        return hard, float(np.sqrt(np.mean(g * g))) if g.size else 0.0

    def solve(self, targets=None, max_iters=100, tol=1e-6, points=None):
        """Iterate eq. 11 from ``points`` (default: the current points) until every hard
        residual is below ``tol`` [m] or ``max_iters`` steps; return a ``FreePointResult``."""
        start = time.perf_counter()
        self.reset(self.points if points is None else points)
        it = 0
        hard, soft = self.errors(targets=targets)
        while hard > tol and it < max_iters:
            self.step(targets)
            it += 1
            hard, soft = self.errors(targets=targets)
        ok = bool(hard <= tol) and bool(np.all(np.isfinite(self.points)))
        return FreePointResult(points=self.points.copy(), success=ok, hard_error=hard,
                               soft_error=soft, iterations=it,
                               elapsed=time.perf_counter() - start)

    @classmethod
    def from_chain(cls, chain, q=None, **kwargs):
        """Build from a chain's link origins at q (default neutral): the segments between
        consecutive distinct body origins are the edges; point 0 (the root) is pinned."""
        q = chain.neutral_configuration() if q is None else q
        frames = chain.frames(q)
        pts = [frames.point(chain.base_link)[0]]
        index_of_body = {-1: 0}
        edges = []
        for link in chain.link_names[1:]:
            body, _ = chain.link_anchor(link)
            p = frames.point(link)[0]
            parent = index_of_body.get(chain.body_parent[body] if body >= 0 else -1, 0)
            if np.linalg.norm(p - pts[parent]) < 1e-9:
                index_of_body[body] = parent
                continue
            pts.append(p)
            idx = len(pts) - 1
            edges.append((parent, idx))
            index_of_body[body] = idx
        kwargs.setdefault('pinned', (0,))
        return cls(np.array(pts), edges, **kwargs)


def _pairs(pairs, n, what):
    arr = np.array(pairs, dtype=int).reshape(-1, 2)
    if arr.size and (arr.min() < 0 or arr.max() >= n or np.any(arr[:, 0] == arr[:, 1])):
        raise ParameterError(f'{what} must be pairs of distinct point indices in [0, {n - 1}]; '
                             f'got {arr.tolist()}')
    return arr


def _dense_rows(rows, n3):
    coef_a, pa, coef_b, pb = rows
    m = len(pa)
    jac = np.zeros((m, n3))
    r = np.arange(m)
    for k in range(3):
        jac[r, 3 * pa + k] += coef_a[:, k]
        two = pb >= 0
        jac[r[two], 3 * pb[two] + k] += coef_b[two, k]
    return jac


def _distance_rows(diff, d):
    """Return the distance residuals g = (|diff|^2 - d^2) / (2 d) (...,) [m] of point
    differences ``diff`` (..., 3) from reference distances ``d`` (...,), and their gradient
    diff / d (..., 3) with respect to the first point."""
    g = (np.einsum('...k,...k->...', diff, diff) - d * d) / (2.0 * d)
    return g, diff / d[..., None]


def _sparse_solve(a, relative_ridge, rhs):
    """Return (A + mu I)^-1 rhs for a sparse symmetric A, mu = relative_ridge * mean diag A."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    a = a.tocsc()
    ridge = relative_ridge * (a.diagonal().mean() + 1e-30)
    return splu(a + ridge * sp.identity(a.shape[0], format='csc')).solve(rhs)


def _sparse_rows(rows, n3):
    import scipy.sparse as sp

    coef_a, pa, coef_b, pb = rows
    m = len(pa)
    two = pb >= 0
    r = np.concatenate([np.repeat(np.arange(m), 3), np.repeat(np.arange(m)[two], 3)])
    c = np.concatenate([(3 * pa[:, None] + np.arange(3)).ravel(),
                        (3 * pb[two][:, None] + np.arange(3)).ravel()])
    v = np.concatenate([coef_a.ravel(), coef_b[two].ravel()])
    return sp.csr_matrix((v, (r, c)), shape=(m, n3))
