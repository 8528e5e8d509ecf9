"""Cyclic coordinate descent (seed 004; docs/solvers.md, section 3).

One iteration is one sweep from the tip to the base; each joint takes its best value with
the others held, in closed form. The task is weighted vector pairs (u, v): a point target
u = p - o, v = t - o (o: the joint centre), an orientation the frame axes u = R e_k,
v = R_target e_k; weights as the SMC cost (weight / sigma_position^2 for points, weight /
(2 sigma_orientation^2) for axes, times ``orientation_weight``). Rotating a revolute joint
by theta about its axis a changes the cost by -(A cos theta + B sin theta) + const with
A = sum w u_perp . v_perp, B = sum w a . (u_perp x v_perp): best at atan2(B, A) (Wang &
Chen's weighted CCD), else at the better end of the feasible interval. A prismatic joint
takes the weighted mean error along its axis; a ball joint solves Wahba's problem (SVD of
sum w v u^T), then its angle limit. Tip to base, a joint's axis depends only on joints not
yet updated: one FK call per sweep. Mimic joints are refused (ParameterError).
"""

import math
from dataclasses import dataclass

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import OrientationTarget, PoseTarget, PositionTarget
from ..model.builder import BODY_BALL, BODY_PRISMATIC
from ..rotations import (matrix_to_quat, matrix_to_rotvec, quat_conjugate, quat_multiply,
                         quat_to_matrix, rotvec_to_matrix)
from .base import LocalSettings, LocalSolver, check_fields, register

__all__ = ['CcdSettings', 'CcdSolver']


@dataclass(frozen=True)
class CcdSettings(LocalSettings):
    """Settings of the CCD solver (field names are the ROS parameter names)."""

    gain: float = 1.0                 # fraction of each joint's best change applied (solve)
    online_gain: float = 0.5          # the same for step() (online use)
    max_step: float = 3.2             # [rad or m] largest change of one joint update
    orientation_weight: float = 1.0   # multiplier on the orientation terms of pose targets

    def validate(self):
        super().validate()
        check_fields(self, '(0, 1]', 'gain', 'online_gain')
        check_fields(self, '> 0', 'max_step', note=' [rad or m]')
        check_fields(self, '>= 0', 'orientation_weight')


@register('ccd')
class CcdSolver(LocalSolver):
    """Cyclic coordinate descent on joint values (see the module docstring)."""

    Settings = CcdSettings
    honours_constraints = False   # refused, not ignored (base.Solver.set_constraints)

    def __init__(self, chain, settings=None):
        mimics = [chain.body_joint[b] for b in range(chain.num_bodies)
                  if chain.body_mimic[b] is not None]
        if mimics:
            raise ParameterError(
                f'ccd updates one joint at a time and cannot follow mimic joints '
                f'({", ".join(mimics)}); use the jacobian, distance or smc solver for this chain')
        self._order = list(reversed(range(chain.num_bodies)))
        self._ball_q = {b: qi for b, qi in chain.ball_bodies}
        # moves[b, body]: joint b moves rows riding on ``body`` (last column: the base, -1).
        self._moves = np.zeros((chain.num_bodies, chain.num_bodies + 1), dtype=bool)
        for b in range(chain.num_bodies):
            self._moves[b, chain.descendants[b]] = True
        super().__init__(chain, settings)

    # ------------------------------------------------------------------ one sweep
    def _task(self, targets):
        """Return (weighted squared distance of the row pairs, the rows: ``_rows``)."""
        rows = self._rows(targets, self._frames)
        moving, goals, weights, _, _ = rows
        return float(weights @ np.sum((moving - goals) ** 2, axis=1)), rows

    def _update(self, targets, rows, online):
        """Return the configuration after one sweep, tip to base."""
        q = self._q.copy()
        gain = self.settings.online_gain if online else self.settings.gain
        for b in self._order:
            mask = self._moves[b, rows[4]]
            if mask.any():
                self._update_joint(q, b, self._frames, rows, mask, gain)
        return self.chain.clip(q)

    def _rows(self, targets, frames):
        """Return the task as vector pairs: moving (K, 3), goals (K, 3), weights (K,),
        is_point (K,) (a point, rotating about the joint centre, or a free frame axis) and
        the body each row rides on (K,)."""
        blocks = []     # (moving (k, 3), goals (k, 3), weight, is_point, body)
        for t in targets:
            if not isinstance(t, (PoseTarget, PositionTarget, OrientationTarget)):
                raise GoalError(f'ccd handles PoseTarget, PositionTarget and OrientationTarget; '
                                f'got {type(t).__name__}')
            body, _ = self.chain.link_anchor(t.link)
            point_weight = t.weight / t.sigma[0] ** 2
            if isinstance(t, PositionTarget):
                blocks.append((frames.point(t.link, t.offset)[:1], t.position[None],
                               point_weight, True, body))
                continue
            pose = frames.link_pose(t.link)[0]
            if isinstance(t, PoseTarget):
                blocks.append((pose[None, :3, 3], t.pose[None, :3, 3], point_weight, True, body))
            goal_rot = t.pose[:3, :3] if isinstance(t, PoseTarget) else t.rotation
            blocks.append((pose[:3, :3].T, goal_rot.T,                # rows: the frame's axes
                           self.settings.orientation_weight * t.weight / (2.0 * t.sigma[-1] ** 2),
                           False, body))
        moving, goals, weights, is_point, bodies = zip(*blocks)
        counts = [len(m) for m in moving]
        return (np.concatenate(moving).astype(float), np.concatenate(goals).astype(float),
                np.repeat(np.array(weights, dtype=float), counts), np.repeat(is_point, counts),
                np.repeat(np.array(bodies, dtype=int), counts))

    def _update_joint(self, q, b, frames, rows, mask, gain):
        """Set joint ``b`` to its best value with the others held; move the rows with it."""
        chain = self.chain
        moving, goals, weights, is_point, _ = rows
        kind = chain.body_kind[b]
        origin = frames.pos[b, 0]
        rot = frames.rot[b, 0]
        centre = is_point[mask, None] * origin            # points turn about the joint centre
        u = moving[mask] - centre
        v = goals[mask] - centre
        w = weights[mask]
        if kind == BODY_BALL:
            applied = self._update_ball(q, b, rot, u, v, w, gain)
            moving[mask] = u @ applied.T + centre
            return
        qi = chain.body_q[b]
        axis = rot @ chain.body_axis[b]
        step = self.settings.max_step
        lo = max(chain.lower[qi] - q[qi], -step)
        hi = min(chain.upper[qi] - q[qi], step)
        if kind == BODY_PRISMATIC:
            wp = w * is_point[mask]
            den = float(wp.sum())
            if den <= 0.0:
                return
            delta = gain * float(np.clip(wp @ ((v - u) @ axis) / den, lo, hi))
            q[qi] += delta
            moving[mask] += (delta * axis) * is_point[mask, None]
            return
        # With u_perp, v_perp the parts normal to the axis: A = sum w u_perp . v_perp and
        # B = sum w a . (u_perp x v_perp) = sum w u . (v x a).
        ua, va = u @ axis, v @ axis
        a_sum = float(w @ (np.einsum('kj,kj->k', u, v) - ua * va))
        v_x_a = v[:, [1, 2, 0]] * axis[[2, 0, 1]] - v[:, [2, 0, 1]] * axis[[1, 2, 0]]
        b_sum = float(w @ np.einsum('kj,kj->k', u, v_x_a))
        if a_sum == 0.0 and b_sum == 0.0:
            return
        delta = gain * _best_angle(a_sum, b_sum, lo, hi)
        q[qi] += delta
        moving[mask] = u @ _axis_angle_matrix(axis, delta).T + centre

    def _update_ball(self, q, b, rot, u, v, w, gain):
        """Wahba step for a ball joint; return the world rotation actually applied."""
        qi = self._ball_q[b]
        mat = (v * w[:, None]).T @ u
        # A weak pull towards no rotation: the shortest arc when one pair leaves a twist free.
        mat += 1e-6 * max(float(w @ np.sum(u * u, axis=1)), 1e-12) * np.eye(3)
        uu, _, vt = np.linalg.svd(mat)
        fix = np.diag([1.0, 1.0, np.linalg.det(uu @ vt)])
        delta_world = uu @ fix @ vt
        if gain < 1.0:
            delta_world = rotvec_to_matrix(gain * matrix_to_rotvec(delta_world))
        local = rot.T @ delta_world @ rot               # the rotation in the body frame
        old = q[qi:qi + 4].copy()
        turned = q.copy()
        turned[qi:qi + 4] = quat_multiply(old, matrix_to_quat(local))
        q[qi:qi + 4] = self.chain.clip(turned)[qi:qi + 4]
        # The limit may have cut the rotation short: move the rows by what was applied.
        return rot @ quat_to_matrix(quat_multiply(quat_conjugate(old), q[qi:qi + 4])) @ rot.T


# ---------------------------------------------------------------------- helpers
def _best_angle(a_sum, b_sum, lo, hi):
    """Return the angle in [lo, hi] (lo <= 0 <= hi) maximising A cos t + B sin t."""
    best = math.atan2(b_sum, a_sum)
    # The unconstrained optimum, or the 2 pi copy nearest to 0 inside the interval, wins.
    inside = [c for c in (best, best - 2.0 * math.pi, best + 2.0 * math.pi) if lo <= c <= hi]
    if inside:
        return min(inside, key=abs)
    # Otherwise the sinusoid is best at one of the interval's ends.
    f_lo = a_sum * math.cos(lo) + b_sum * math.sin(lo)
    f_hi = a_sum * math.cos(hi) + b_sum * math.sin(hi)
    return float(lo if f_lo > f_hi else hi)


def _axis_angle_matrix(axis, angle):
    """Return the (3, 3) rotation by ``angle`` [rad] about the unit ``axis`` (Rodrigues)."""
    x, y, z = axis
    c, s = np.cos(angle), np.sin(angle)
    t = 1.0 - c
    return np.array([[t * x * x + c, t * x * y - s * z, t * x * z + s * y],
                     [t * x * y + s * z, t * y * y + c, t * y * z - s * x],
                     [t * x * z - s * y, t * y * z + s * x, t * z * z + c]])
