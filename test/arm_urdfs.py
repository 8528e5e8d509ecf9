"""URDFs generated at run time for the command-stream tests (kinematics only, no meshes).

``ur5_like_urdf`` builds a 6-DOF arm from the UR5's published standard DH table, with the
frame layout third-party UR5 URDFs have: a ``world`` link above ``base_link`` (``world
-fixed-> base_link``), optionally continuous joints, a camera fixed to ``world`` beside the
arm, a gripper finger on a prismatic joint below ``tool0`` (a frame the chain does not move),
and optionally a linear rail (prismatic) between ``world`` and ``base_link``.
``panda_like_urdf`` builds a 7-DOF arm from the Franka Panda's published kinematic
parameters and joint limits (offset elbow and wrist: a curved self-motion).
"""

import math

__all__ = ['UR5_DH', 'ur5_like_urdf', 'JOINTS', 'PANDA', 'panda_like_urdf']

# UR5 standard DH: (d, a, alpha) per joint [m, m, rad].
UR5_DH = [(0.089159, 0.0, math.pi / 2), (0.0, -0.425, 0.0), (0.0, -0.39225, 0.0),
          (0.10915, 0.0, math.pi / 2), (0.09465, 0.0, -math.pi / 2), (0.0823, 0.0, 0.0)]
JOINTS = [f'joint{i}' for i in range(1, 7)]


def ur5_like_urdf(continuous=(), world=True, camera=True, finger=True, rail=False,
                  velocity=3.15, name='ur5_like'):
    """Return URDF text; ``continuous``: 1-based joint numbers that are continuous."""
    parts = [f'<robot name="{name}">']
    if world:
        parts.append('<link name="world"/>')
        if rail:
            parts.append(
                '<link name="rail_carriage"/><joint name="rail" type="prismatic">'
                '<parent link="world"/><child link="rail_carriage"/><axis xyz="1 0 0"/>'
                '<limit lower="-1" upper="1" velocity="0.5" effort="100"/></joint>'
                '<joint name="carriage_to_base" type="fixed"><parent link="rail_carriage"/>'
                '<child link="base_link"/><origin xyz="0 0 0.1" rpy="0 0 0"/></joint>')
        else:
            parts.append('<joint name="world_joint" type="fixed"><parent link="world"/>'
                         '<child link="base_link"/><origin xyz="0.5 -0.2 0.8" '
                         'rpy="0 0 1.5707963"/></joint>')
        if camera:
            parts.append('<link name="camera"/><joint name="camera_mount" type="fixed">'
                         '<parent link="world"/><child link="camera"/>'
                         '<origin xyz="1.5 0.3 1.6" rpy="0 0.6 3.1"/></joint>')
    parts.append('<link name="base_link"/>')
    parent, previous = 'base_link', (0.0, 0.0)
    for i, (d, a, alpha) in enumerate(UR5_DH, start=1):
        # Standard DH -> URDF: the previous joint's (a, alpha) move into this origin.
        prev_alpha, prev_a = previous
        x, y, z = prev_a, -math.sin(prev_alpha) * d, math.cos(prev_alpha) * d
        kind = 'continuous' if i in continuous else 'revolute'
        limit = (f'<limit effort="150" velocity="{velocity}"/>' if kind == 'continuous' else
                 f'<limit lower="{-2 * math.pi:.6f}" upper="{2 * math.pi:.6f}" effort="150" '
                 f'velocity="{velocity}"/>')
        parts.append(
            f'<link name="link{i}"/><joint name="joint{i}" type="{kind}">'
            f'<parent link="{parent}"/><child link="link{i}"/>'
            f'<origin xyz="{x:.6f} {y:.6f} {z:.6f}" rpy="{prev_alpha:.9f} 0 0"/>'
            f'<axis xyz="0 0 1"/>{limit}</joint>')
        parent, previous = f'link{i}', (alpha, a)
    parts.append(f'<link name="tool0"/><joint name="tool0_joint" type="fixed">'
                 f'<parent link="{parent}"/><child link="tool0"/>'
                 f'<origin xyz="0 0 0" rpy="{previous[0]:.9f} 0 0"/></joint>')
    if finger:
        parts.append('<link name="finger"/><joint name="finger_joint" type="prismatic">'
                     '<parent link="tool0"/><child link="finger"/><axis xyz="0 1 0"/>'
                     '<origin xyz="0 0 0.05"/>'
                     '<limit lower="0" upper="0.04" velocity="0.1" effort="10"/></joint>'
                     '<link name="finger_pad"/><joint name="finger_pad_joint" type="fixed">'
                     '<parent link="finger"/><child link="finger_pad"/>'
                     '<origin xyz="0 0 0.02"/></joint>')
    parts.append('</robot>')
    return ''.join(parts)


# Franka Panda: per joint (origin xyz [m], origin roll [rad], lower, upper [rad], velocity
# [rad/s]); every joint turns about its own z, the flange is 0.107 m along the last z and the
# hand turned -pi/4 about it.
PANDA = [((0, 0, 0.333), 0.0, -2.8973, 2.8973, 2.175),
         ((0, 0, 0), -math.pi / 2, -1.7628, 1.7628, 2.175),
         ((0, -0.316, 0), math.pi / 2, -2.8973, 2.8973, 2.175),
         ((0.0825, 0, 0), math.pi / 2, -3.0718, -0.0698, 2.175),
         ((-0.0825, 0.384, 0), -math.pi / 2, -2.8973, 2.8973, 2.61),
         ((0, 0, 0), math.pi / 2, -0.0175, 3.7525, 2.61),
         ((0.088, 0, 0), math.pi / 2, -2.8973, 2.8973, 2.61)]


def panda_like_urdf():
    """Return URDF text of a Panda-like arm: panda_link0 -> panda_hand (kinematics only)."""
    return ''.join(['<robot name="panda_like"><link name="panda_link0"/>',
                    *_panda_arm('', 'panda_link0'), '</robot>'])


def dual_panda_urdf():
    """Return URDF text of a TIAGo-dual-like robot (kinematics only): base_link, a prismatic
    torso_lift (0.35 m), and on the torso two Panda-like arms, left_ and right_ (prefixes of
    panda_like_urdf's names; tips left_panda_hand, right_panda_hand)."""
    parts = ['<robot name="dual_panda"><link name="base_link"/><link name="torso"/>'
             '<joint name="torso_lift" type="prismatic"><parent link="base_link"/>'
             '<child link="torso"/><axis xyz="0 0 1"/>'
             '<limit lower="0" upper="0.35" velocity="0.07" effort="100"/></joint>']
    for side, y, roll in (('left_', 0.15, -math.pi / 2), ('right_', -0.15, math.pi / 2)):
        parts.append(f'<link name="{side}mount"/><joint name="{side}mount_joint" type="fixed">'
                     f'<parent link="torso"/><child link="{side}mount"/>'
                     f'<origin xyz="0 {y} 0.8" rpy="{roll} 0 0"/></joint>')
        parts += _panda_arm(side, f'{side}mount')
    return ''.join(parts + ['</robot>'])


def _panda_arm(prefix, root):
    """Return the URDF elements of a Panda-like arm below the link ``root``, names prefixed."""
    parts = []
    for i, (xyz, roll, lower, upper, velocity) in enumerate(PANDA, start=1):
        parent = root if i == 1 else f'{prefix}panda_link{i - 1}'
        parts.append(
            f'<link name="{prefix}panda_link{i}"/>'
            f'<joint name="{prefix}panda_joint{i}" type="revolute">'
            f'<parent link="{parent}"/><child link="{prefix}panda_link{i}"/>'
            f'<origin xyz="{xyz[0]} {xyz[1]} {xyz[2]}" rpy="{roll} 0 0"/><axis xyz="0 0 1"/>'
            f'<limit lower="{lower}" upper="{upper}" velocity="{velocity}" effort="87"/>'
            '</joint>')
    parts.append(f'<link name="{prefix}panda_hand"/>'
                 f'<joint name="{prefix}panda_hand_joint" type="fixed">'
                 f'<parent link="{prefix}panda_link7"/><child link="{prefix}panda_hand"/>'
                 f'<origin xyz="0 0 0.107" rpy="0 0 {-math.pi / 4}"/></joint>')
    return parts
