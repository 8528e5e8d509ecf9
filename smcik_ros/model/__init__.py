"""The robot model: the kinematic chain (URDF -> tree, limits, inertia), its packed records
for the compiled kernels, and the start-up cache.

- ``chain``: ``Chain`` (batched FK, Jacobians, centre of mass, configurations),
  ``Frames`` (the chain at a batch of configurations) and ``ball_chain`` (seed 000's
  serial figure of ball joints);
- ``builder``: joint specs -> the chain's structure and records (``JointSpec``);
- ``floating``: the floating base's six joints and its pose <-> coordinates;
- ``passive``: the off-path joints and the whole tree's lumped masses;
- ``urdf``: URDF parsing (yourdfpy), joint specs as plain data;
- ``cache``: the disk cache of what start-up derives from a URDF.
"""

from .builder import BODY_BALL, BODY_PRISMATIC, BODY_REVOLUTE, JointSpec
from .chain import Chain, Frames, ball_chain
from .floating import FLOATING_JOINTS, FLOATING_PITCH_LIMIT, FLOATING_RANGE

__all__ = ['BODY_BALL', 'BODY_PRISMATIC', 'BODY_REVOLUTE', 'Chain', 'FLOATING_JOINTS',
           'FLOATING_PITCH_LIMIT', 'FLOATING_RANGE', 'Frames', 'JointSpec', 'ball_chain']
