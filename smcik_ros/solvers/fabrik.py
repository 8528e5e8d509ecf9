"""FABRIK: forward and backward reaching IK (Aristidou & Lasenby 2011; seed 004).

A pass pulls the end point onto the target and walks back to the root keeping every
segment's length, then pins the root and walks out again. Points are a pose of the chain
only when every joint can point its segment anywhere, so only serial ball-joint chains are
accepted (ParameterError otherwise: "FABRIK, then fit joint angles" on a revolute arm is
another, approximate solver). After the passes each ball joint turns, base to tip, by the
shortest arc onto its new segment direction (its twist kept), which reproduces the points
exactly; the angle limits are then a projection (``Chain.clip``), not the paper's per-joint
cone re-orientation. A PoseTarget fixes its link body's rotation: FABRIK reaches the
body's segment start at target - R offset, and the body takes the target's rotation. Points
after the target keep their joint rotations (docs/solvers.md, section 4).
"""

import math
from dataclasses import dataclass

import numpy as np

from ..errors import GoalError, ParameterError
from ..goals import PoseTarget, PositionTarget
from ..model.builder import BODY_BALL
from ..rotations import matrix_to_quat, quat_to_matrix, skew
from .base import LocalSettings, LocalSolver, check_fields, interpolate, register

__all__ = ['FabrikSettings', 'FabrikSolver']


@dataclass(frozen=True)
class FabrikSettings(LocalSettings):
    """Settings of the FABRIK solver (field names are the ROS parameter names)."""

    passes: int = 1                   # forward + backward passes per iteration
    online_gain: float = 0.5          # step(): slerp share of the way to the FABRIK result

    def validate(self):
        super().validate()
        check_fields(self, '>= 1', 'passes')
        check_fields(self, '(0, 1]', 'online_gain')


@register('fabrik')
class FabrikSolver(LocalSolver):
    """FABRIK on serial ball-joint chains (see the module docstring)."""

    Settings = FabrikSettings
    honours_constraints = False   # refused, not ignored (base.Solver.set_constraints)

    def __init__(self, chain, settings=None):
        self._segments = _check_chain(chain)
        self._lengths = np.linalg.norm(self._segments, axis=1)
        self._qi = [qi for _, qi in chain.ball_bodies]
        self._origin_rot = [chain.body_origin[b][:3, :3] for b in range(chain.num_bodies)]
        super().__init__(chain, settings)

    # ------------------------------------------------------------------ the task
    def _goal(self, targets):
        """Return (point index m, goal point (3,), body rotation (3, 3) or None)."""
        if len(targets) != 1 or not isinstance(targets[0], (PositionTarget, PoseTarget)):
            raise GoalError('fabrik takes one PositionTarget or PoseTarget on a serial chain; '
                            f'got {[type(t).__name__ for t in targets]}')
        t = targets[0]
        body, anchor = self.chain.link_anchor(t.link)
        if body < 0:
            raise GoalError(f'fabrik: link {t.link!r} does not move (it is fixed to the base)')
        local = anchor[:3, 3].copy()
        if isinstance(t, PositionTarget) and t.offset is not None:
            local = anchor[:3, :3] @ t.offset + local
        if np.linalg.norm(local) < 1e-9:
            index, local = body, np.zeros(3)
        elif np.linalg.norm(local - self._segments[body]) < 1e-9:
            index = body + 1
        elif isinstance(t, PoseTarget):
            index = body            # the pose fixes the body: reach its segment start
        else:
            raise GoalError(f'fabrik: the target point of link {t.link!r} is not a chain point '
                            f'(a segment start or the tip); FABRIK moves only those')
        if isinstance(t, PositionTarget):
            return index, np.array(t.position, dtype=float), None
        body_rot = t.pose[:3, :3] @ anchor[:3, :3].T
        # The body's segment start must sit where the pose puts it.
        return body, t.pose[:3, 3] - body_rot @ local, body_rot

    # ------------------------------------------------------------------ one iteration
    def _task(self, targets):
        """Return (squared miss of the target point (and body rotation), the goal and the
        chain points)."""
        frames = self._frames
        index, goal, body_rot = self._goal(targets)
        points = self._points(frames)
        miss = float(np.sum((points[index] - goal) ** 2))
        if body_rot is not None:
            miss += float(np.sum((frames.rot[index, 0] - body_rot) ** 2))
        return miss, (index, goal, body_rot, points)

    def _update(self, targets, task, online):
        """Return the configuration after ``passes`` FABRIK passes (slerped part of the way
        online)."""
        index, goal, body_rot, points = task
        for _ in range(self.settings.passes):
            points = _fabrik_pass(points, self._lengths, index, goal)
        q = self.chain.clip(self._joints_from_points(self._frames, points, index, body_rot))
        if online and self.settings.online_gain < 1.0:
            q = interpolate(self.chain, self._q, q, self.settings.online_gain)
        return q

    def _points(self, frames):
        """Return the (B + 1, 3) chain points: each ball joint's centre, then the tip."""
        pos = frames.pos[:, 0]
        tip = pos[-1] + frames.rot[-1, 0] @ self._segments[-1]
        return np.vstack([pos, tip])

    def _joints_from_points(self, frames, points, index, body_rot):
        """Turn each ball joint by the shortest arc onto the new segment directions."""
        q = self._q.copy()
        qi = self._qi
        local = quat_to_matrix(np.stack([q[i:i + 4] for i in qi]))       # (B, 3, 3)
        new_local = local.copy()
        parent_rot = np.eye(3)
        for b in range(len(qi)):
            frame = parent_rot @ self._origin_rot[b]
            current = frame @ local[b]
            if b < index:
                seg = current @ self._segments[b]
                new = _shortest_arc(seg, points[b + 1] - points[b]) @ current
            elif b == index and body_rot is not None:
                new = body_rot
            else:
                parent_rot = current
                continue
            new_local[b] = frame.T @ new
            parent_rot = new
        quats = matrix_to_quat(new_local)
        for b, i in enumerate(qi):
            q[i:i + 4] = quats[b]
        return q


# ---------------------------------------------------------------------- helpers
def _check_chain(chain):
    """Return the (B, 3) segment vectors of a serial ball-joint chain, or raise ParameterError."""
    why = None
    if len(chain.tip_links) != 1:
        why = f'it has {len(chain.tip_links)} tips (FABRIK here handles one serial chain)'
    else:
        for b in range(chain.num_bodies):
            if chain.body_kind[b] != BODY_BALL:
                kind = chain.joint_types[chain.joint_names.index(chain.body_joint[b])] \
                    if chain.body_joint[b] in chain.joint_names else 'mimic'
                why = (f'joint {chain.body_joint[b]!r} is {kind}: FABRIK places joint '
                       'positions freely, which only ball (3-DOF) joints can follow')
                break
            if chain.body_parent[b] != b - 1:
                why = 'it branches (FABRIK here handles one serial chain)'
                break
    if why is None:
        tip_body, tip_anchor = chain.link_anchor(chain.tip_link)
        if tip_body != chain.num_bodies - 1:
            why = f'its tip {chain.tip_link!r} is not on the last ball joint'
        else:
            segs = [chain.body_offset[b + 1] for b in range(chain.num_bodies - 1)]
            segs.append(tip_anchor[:3, 3])
            segs = np.array(segs, dtype=float).reshape(-1, 3)
            if np.any(np.linalg.norm(segs, axis=1) < 1e-9):
                why = 'two consecutive joints (or the last joint and the tip) coincide'
    if why is not None:
        raise ParameterError(
            f'fabrik cannot represent chain {chain.robot_name!r}: {why}. FABRIK here works on '
            "serial ball-joint chains (smcik_ros.model.ball_chain); use 'ccd', 'jacobian', "
            "'distance' or 'smc' for this chain")
    return segs


def _fabrik_pass(points, lengths, index, goal):
    """Return the points after one forward + backward reaching pass on points[0..index]."""
    p = points.copy()
    root = p[0].copy()
    seg = lengths[:index]
    if index == 0:
        return p
    dist = np.linalg.norm(goal - root)
    if dist >= seg.sum():
        # Unreachable: stretch the chain straight towards the goal.
        direction = (goal - root) / max(dist, 1e-12)
        p[1:index + 1] = root + np.cumsum(seg)[:, None] * direction
        return p
    # Forward reaching: the end on the goal, back to the root.
    p[index] = goal
    for i in range(index - 1, -1, -1):
        p[i] = _place(p[i + 1], p[i], seg[i])
    # Backward reaching: the root back on its place, out to the end.
    p[0] = root
    for i in range(index):
        p[i + 1] = _place(p[i], p[i + 1], seg[i])
    return p


def _place(anchor, toward, length):
    """Return the point at ``length`` from ``anchor`` on the line towards ``toward``."""
    d = toward - anchor
    n = math.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
    if n < 1e-12:
        return anchor + np.array([0.0, 0.0, length])
    return anchor + d * (length / n)


def _shortest_arc(a, b):
    """Return the (3, 3) rotation taking direction ``a`` to direction ``b`` by the shortest arc."""
    a = a / math.sqrt(float(a @ a))
    b = b / max(math.sqrt(float(b @ b)), 1e-12)
    v = np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])
    c = float(a @ b)
    s2 = float(v @ v)
    if s2 < 1e-24:
        if c > 0.0:
            return np.eye(3)
        # Opposite: half a turn about any axis normal to a.
        helper = np.eye(3)[np.argmin(np.abs(a))]
        axis = np.cross(a, helper)
        axis /= np.linalg.norm(axis)
        return 2.0 * np.outer(axis, axis) - np.eye(3)
    k = skew(v)
    return np.eye(3) + k + k @ k * ((1.0 - c) / s2)
