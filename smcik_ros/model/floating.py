"""The floating base: a 6-DOF root (seed 000 section 6.3) as six 1-DOF joints.

``Chain.from_urdf(..., floating_base=True)`` puts six joints between a new root link, the
world frame (``world_frame``, default ``world``: gravity along its -z), and the URDF's
``base_link``:

- ``floating_base_x``, ``floating_base_y``, ``floating_base_z``: prismatic along the world
  axes [m], limits +-FLOATING_RANGE around the origin;
- ``floating_base_yaw``, ``floating_base_pitch``, ``floating_base_roll``: revolute about the
  z, then the new y, then the new x axis (intrinsic Z-Y-X Euler angles [rad]), so that the
  base pose is ``T(x, y, z) Rz(yaw) Ry(pitch) Rx(roll)``. Pitch is limited to
  +-FLOATING_PITCH_LIMIT (80 deg): the Euler angles' singularity (gimbal lock at +-90 deg)
  stays out of every standing or crouching posture. Yaw and roll: +-pi.

They are ordinary scalar joints for the kernels, the random walk and the motion metric; they
come first in the configuration (``Chain.base_index``: 0 ... 5) and are never commanded
(velocity limit inf). The world frame is the chain's base frame (``Chain.base_link``);
the URDF's ``base_link`` is ``Chain.floating_link``.
"""

import math

import numpy as np

from ..errors import GoalError, ModelError
from .builder import JointSpec

__all__ = ['FLOATING_JOINTS', 'FLOATING_PITCH_LIMIT', 'FLOATING_RANGE', 'base_coordinates',
           'base_poses', 'floating_joints']

FLOATING_JOINTS = ('floating_base_x', 'floating_base_y', 'floating_base_z',
                   'floating_base_yaw', 'floating_base_pitch', 'floating_base_roll')
FLOATING_RANGE = 10.0                       # [m] position limits around the world origin
FLOATING_PITCH_LIMIT = math.radians(80.0)   # [rad]
_AXES = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0),
         (0.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 0.0, 0.0))
_LIMITS = ((FLOATING_RANGE,) * 3 + (math.pi, FLOATING_PITCH_LIMIT, math.pi))


def floating_joints(joints, base_link, world_frame, link_inertials):
    """Return (joints, links added) with the six floating-base joints above ``base_link``.

    joints: the robot's JointSpecs; the joint whose child is ``base_link`` (and any whose
    child is ``world_frame``) is replaced: ``world_frame`` becomes a root. link_inertials:
    {link: (mass, centre)} of root links; ``base_link``'s own inertial (from there or from
    its former parent joint) moves onto ``floating_base_roll``. Raises ModelError when
    ``world_frame`` is ``base_link`` or below it, or a name is taken.
    """
    by_child = {j.child: j for j in joints}
    names = {j.name for j in joints}
    links = {j.parent for j in joints} | {j.child for j in joints}
    if not world_frame or not isinstance(world_frame, str):
        raise ModelError(f'world_frame must be a link name; got {world_frame!r}')
    below = _below(base_link, joints)
    if world_frame in below:
        raise ModelError(f'world_frame {world_frame!r} is {base_link!r} or a link below it: '
                         'the floating base needs a world frame above the base; pick another '
                         'name (default "world")')
    added = [world_frame] + [f'{n}_link' for n in FLOATING_JOINTS[:-1]]
    taken = sorted(set(FLOATING_JOINTS) & names) + sorted(set(added[1:]) & links)
    if taken:
        raise ModelError(f'the floating base adds joints {", ".join(FLOATING_JOINTS)} and links '
                         f'{", ".join(added[1:])}; this robot already has {", ".join(taken)}')
    mass, com = 0.0, (0.0, 0.0, 0.0)
    if base_link in link_inertials:
        mass, com = link_inertials[base_link]
    elif base_link in by_child:
        mass, com = by_child[base_link].mass, by_child[base_link].com
    kept = [j for j in joints if j.child not in (base_link, world_frame)]
    parents = added
    children = added[1:] + [base_link]
    base = [JointSpec(name=name, parent=parent, child=child,
                      type='prismatic' if k < 3 else 'revolute', origin=np.eye(4),
                      axis=_AXES[k], lower=-_LIMITS[k], upper=_LIMITS[k], velocity=np.inf,
                      mass=float(mass) if k == 5 else 0.0,
                      com=tuple(float(v) for v in com) if k == 5 else (0.0, 0.0, 0.0))
            for k, (name, parent, child) in enumerate(zip(FLOATING_JOINTS, parents, children))]
    return base + kept, tuple(added)


def _below(link, joints):
    """Return ``link`` and every link below it."""
    children = {}
    for j in joints:
        children.setdefault(j.parent, []).append(j.child)
    out, stack = set(), [link]
    while stack:
        name = stack.pop()
        out.add(name)
        stack.extend(children.get(name, []))
    return out


def base_poses(coordinates):
    """Return the (..., 4, 4) base poses T(x, y, z) Rz(yaw) Ry(pitch) Rx(roll) of (..., 6)
    coordinates (x, y, z [m], yaw, pitch, roll [rad])."""
    c = np.asarray(coordinates, dtype=float)
    cy, sy = np.cos(c[..., 3]), np.sin(c[..., 3])
    cp, sp = np.cos(c[..., 4]), np.sin(c[..., 4])
    cr, sr = np.cos(c[..., 5]), np.sin(c[..., 5])
    out = np.zeros(c.shape[:-1] + (4, 4))
    out[..., 0, 0] = cy * cp
    out[..., 0, 1] = cy * sp * sr - sy * cr
    out[..., 0, 2] = cy * sp * cr + sy * sr
    out[..., 1, 0] = sy * cp
    out[..., 1, 1] = sy * sp * sr + cy * cr
    out[..., 1, 2] = sy * sp * cr - cy * sr
    out[..., 2, 0] = -sp
    out[..., 2, 1] = cp * sr
    out[..., 2, 2] = cp * cr
    out[..., :3, 3] = c[..., :3]
    out[..., 3, 3] = 1.0
    return out


def base_coordinates(pose):
    """Return the (..., 6) coordinates (x, y, z, yaw, pitch, roll) of (..., 4, 4) base poses.

    Raises GoalError for a non-finite pose, a rotation that is not one, a pitch beyond
    +-FLOATING_PITCH_LIMIT or a position beyond +-FLOATING_RANGE (the base joints' limits).
    """
    pose = np.asarray(pose, dtype=float)
    if pose.shape[-2:] != (4, 4):
        raise GoalError(f'base pose must be a (4, 4) homogeneous matrix (or (N, 4, 4)); got '
                        f'shape {pose.shape}')
    if not np.isfinite(pose).all():
        raise GoalError('base pose contains NaN or infinite values')
    rot = pose[..., :3, :3]
    err = np.abs(rot @ np.swapaxes(rot, -1, -2) - np.eye(3)).max()
    if err > 1e-6 or (np.linalg.det(rot) < 0.0).any():
        raise GoalError(f'base pose rotation is not a rotation matrix (|R R^T - I| = {err:.2e}); '
                        're-orthonormalise it')
    out = np.empty(pose.shape[:-2] + (6,))
    out[..., :3] = pose[..., :3, 3]
    pitch = np.arcsin(np.clip(-rot[..., 2, 0], -1.0, 1.0))
    out[..., 3] = np.arctan2(rot[..., 1, 0], rot[..., 0, 0])
    out[..., 4] = pitch
    out[..., 5] = np.arctan2(rot[..., 2, 1], rot[..., 2, 2])
    worst = float(np.abs(pitch).max(initial=0.0))
    if worst > FLOATING_PITCH_LIMIT + 1e-9:
        raise GoalError(f'base pose pitch {math.degrees(worst):.1f} deg is beyond the floating '
                        f'base\'s limit +-{math.degrees(FLOATING_PITCH_LIMIT):.0f} deg '
                        '(floating_base_pitch, intrinsic Z-Y-X Euler angles): tilt the base '
                        'less')
    far = float(np.abs(out[..., :3]).max(initial=0.0))
    if far > FLOATING_RANGE:
        raise GoalError(f'base pose position {far:.3f} m from the world origin along an axis is '
                        f'beyond the floating base\'s range +-{FLOATING_RANGE:g} m')
    return out
