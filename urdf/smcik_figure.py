"""Write urdf/smcik_figure.urdf and .srdf: the whole-figure demo humanoid, authored here.

    ./smcik python urdf/smcik_figure.py            # rewrite smcik_figure.urdf from this file

The URDF and SRDF are the source of truth for users; this script is how they were made
(dimensions, masses and solid-shape inertias in one place) and is kept to change them
consistently. test/test_figure_model.py checks the result against yourdfpy and python-fcl
(the stance, the masses, the SRDF's disabled pairs).

Frame conventions: x forward, y left, z up. Units: m, kg, kg m^2, rad, rad/s, N m.
"""

import math
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------------- dimensions [m]
FOOT = (0.20, 0.09, 0.04)          # sole box (x, y, z)
FOOT_FORWARD = 0.03                # sole box centre ahead of the ankle axis
ANKLE_HEIGHT = 0.07                # ankle axes above the sole
SHANK = 0.38                       # knee to ankle
THIGH = 0.38                       # hip to knee
HIP_Y = 0.09                       # hip centre beside the pelvis origin
HIP_DOWN = 0.07                    # hip centre below the pelvis origin
PELVIS_HEIGHT = ANKLE_HEIGHT + SHANK + THIGH + HIP_DOWN     # 0.90: origin above the soles
WAIST_UP = 0.10                    # waist axes above the pelvis origin
SHOULDER_UP = 0.28                 # shoulder centres above the waist
SHOULDER_Y = 0.22
UPPER_ARM = 0.27
FOREARM = 0.24
HAND = 0.09                        # wrist centre to the palm frame
NECK_UP = 0.32                     # neck axis above the waist
READY_BEND = 0.25                  # group_state 'ready': hip pitch -b, knee 2b, ankle pitch -b
READY_HEIGHT = ANKLE_HEIGHT + (SHANK + THIGH) * math.cos(READY_BEND) + HIP_DOWN


def _box(m, x, y, z):
    return (m * (y * y + z * z) / 12, m * (x * x + z * z) / 12, m * (x * x + y * y) / 12)


def _cylinder_z(m, r, h):
    side = m * (3 * r * r + h * h) / 12
    return (side, side, m * r * r / 2)


def _sphere(m, r):
    i = 2 * m * r * r / 5
    return (i, i, i)


def _f(v):
    text = f'{v:.6g}'
    return '0' if text in ('-0', '0') else text


def _xyz(v):
    return ' '.join(_f(x) for x in v)


def _geometry(shape):
    kind, dims = shape
    if kind == 'box':
        return f'<box size="{_xyz(dims)}"/>'
    if kind == 'cylinder':
        return f'<cylinder radius="{_f(dims[0])}" length="{_f(dims[1])}"/>'
    return f'<sphere radius="{_f(dims[0])}"/>'


def link(name, mass=None, com=(0, 0, 0), inertia=None, shapes=(), material='white'):
    """Return a <link>: inertial (mass [kg], com, diagonal inertia), visual = collision."""
    out = [f'  <link name="{name}">']
    if mass is not None:
        ixx, iyy, izz = inertia
        out += ['    <inertial>',
                f'      <origin xyz="{_xyz(com)}" rpy="0 0 0"/>',
                f'      <mass value="{_f(mass)}"/>',
                f'      <inertia ixx="{_f(ixx)}" ixy="0" ixz="0" iyy="{_f(iyy)}" iyz="0" '
                f'izz="{_f(izz)}"/>',
                '    </inertial>']
    for origin, shape in shapes:
        geo = _geometry(shape)
        out += ['    <visual>', f'      <origin xyz="{_xyz(origin)}" rpy="0 0 0"/>',
                f'      <geometry>{geo}</geometry>', f'      <material name="{material}"/>',
                '    </visual>',
                '    <collision>', f'      <origin xyz="{_xyz(origin)}" rpy="0 0 0"/>',
                f'      <geometry>{geo}</geometry>', '    </collision>']
    out.append('  </link>')
    return '\n'.join(out)


def joint(name, parent, child, xyz=(0, 0, 0), axis=None, limits=None, comment=None):
    """Return a <joint>: revolute with ``axis`` and (lower, upper, effort, velocity), or fixed."""
    out = [f'  <!-- {comment} -->'] if comment else []
    kind = 'fixed' if axis is None else 'revolute'
    out += [f'  <joint name="{name}" type="{kind}">', f'    <parent link="{parent}"/>',
            f'    <child link="{child}"/>', f'    <origin xyz="{_xyz(xyz)}" rpy="0 0 0"/>']
    if axis is not None:
        lower, upper, effort, velocity = limits
        out += [f'    <axis xyz="{_xyz(axis)}"/>',
                f'    <limit lower="{_f(lower)}" upper="{_f(upper)}" effort="{_f(effort)}" '
                f'velocity="{_f(velocity)}"/>']
    out.append('  </joint>')
    return '\n'.join(out)


def small(name):
    """A small link between co-located joint axes (a motor housing): mass, no geometry."""
    m = 0.3
    return link(name, m, (0, 0, 0), _sphere(m, 0.03))


def arm(side, sign):
    """Return the XML of one arm: shoulder pitch/roll/yaw, elbow, wrist yaw/pitch, hand."""
    s = side
    # Roll limits: outward (away from the torso) wide, inward small.
    roll = (-0.2, 2.6) if sign > 0 else (-2.6, 0.2)
    upper_r, fore_r = 0.04, 0.035
    parts = [
        joint(f'{s}_shoulder_pitch', 'torso', f'{s}_shoulder_pitch_link',
              (0, sign * SHOULDER_Y, SHOULDER_UP), (0, 1, 0), (-3.0, 1.0, 60, 3.0),
              f'{s} arm: shoulder pitch (negative raises the arm forward)'),
        small(f'{s}_shoulder_pitch_link'),
        joint(f'{s}_shoulder_roll', f'{s}_shoulder_pitch_link', f'{s}_shoulder_roll_link',
              axis=(1, 0, 0), limits=(*roll, 60, 3.0)),
        small(f'{s}_shoulder_roll_link'),
        joint(f'{s}_shoulder_yaw', f'{s}_shoulder_roll_link', f'{s}_upper_arm',
              axis=(0, 0, 1), limits=(-2.0, 2.0, 40, 3.0)),
        link(f'{s}_upper_arm', 1.8, (0, 0, -UPPER_ARM / 2),
             _cylinder_z(1.8, upper_r, UPPER_ARM),
             [((0, 0, -UPPER_ARM / 2 - 0.01), ('cylinder', (upper_r, UPPER_ARM - 0.06)))],
             'blue'),
        joint(f'{s}_elbow', f'{s}_upper_arm', f'{s}_forearm', (0, 0, -UPPER_ARM), (0, 1, 0),
              (-2.5, 0.0, 40, 3.0), 'elbow (negative bends the forearm forward)'),
        link(f'{s}_forearm', 1.1, (0, 0, -FOREARM / 2), _cylinder_z(1.1, fore_r, FOREARM),
             [((0, 0, 0), ('sphere', (0.045,))),
              ((0, 0, -FOREARM / 2 - 0.005), ('cylinder', (fore_r, FOREARM - 0.07)))]),
        joint(f'{s}_wrist_yaw', f'{s}_forearm', f'{s}_wrist_link', (0, 0, -FOREARM),
              (0, 0, 1), (-1.8, 1.8, 15, 4.0), 'wrist: yaw about the forearm, then pitch'),
        small(f'{s}_wrist_link'),
        joint(f'{s}_wrist_pitch', f'{s}_wrist_link', f'{s}_hand_link', axis=(0, 1, 0),
              limits=(-1.3, 1.3, 15, 4.0)),
        link(f'{s}_hand_link', 0.5, (0, 0, -0.05), _box(0.5, 0.04, 0.08, 0.10),
             [((0, 0, -0.06), ('box', (0.04, 0.08, 0.10)))], 'dark'),
        joint(f'{s}_hand_joint', f'{s}_hand_link', f'{s}_hand', (0, 0, -HAND),
              comment=f'tool frame of the {s} hand (palm centre; z along the forearm)'),
        link(f'{s}_hand'),
    ]
    return '\n'.join(parts)


def leg(side, sign):
    """Return the XML of one leg: hip yaw/roll/pitch, knee, ankle pitch/roll, foot, sole."""
    s = side
    roll = (-0.4, 0.6) if sign > 0 else (-0.6, 0.4)        # outward wider than inward
    thigh_r, shank_r = 0.06, 0.05
    foot_centre = (FOOT_FORWARD, 0, -ANKLE_HEIGHT + FOOT[2] / 2)
    parts = [
        joint(f'{s}_hip_yaw', 'pelvis', f'{s}_hip_yaw_link', (0, sign * HIP_Y, -HIP_DOWN),
              (0, 0, 1), (-0.8, 0.8, 100, 3.0), f'{s} leg: hip yaw, roll, pitch (one centre)'),
        small(f'{s}_hip_yaw_link'),
        joint(f'{s}_hip_roll', f'{s}_hip_yaw_link', f'{s}_hip_roll_link', axis=(1, 0, 0),
              limits=(*roll, 150, 3.0)),
        small(f'{s}_hip_roll_link'),
        joint(f'{s}_hip_pitch', f'{s}_hip_roll_link', f'{s}_thigh', axis=(0, 1, 0),
              limits=(-2.0, 0.5, 200, 3.0)),
        link(f'{s}_thigh', 4.5, (0, 0, -THIGH / 2), _cylinder_z(4.5, thigh_r, THIGH),
             [((0, 0, -THIGH / 2 - 0.01), ('cylinder', (thigh_r, THIGH - 0.14)))], 'blue'),
        joint(f'{s}_knee', f'{s}_thigh', f'{s}_shank', (0, 0, -THIGH), (0, 1, 0),
              (0.0, 2.4, 200, 3.0), 'knee (positive bends it; straight at 0)'),
        link(f'{s}_shank', 2.6, (0, 0, -SHANK / 2), _cylinder_z(2.6, shank_r, SHANK),
             [((0, 0, 0), ('sphere', (0.065,))),
              ((0, 0, -SHANK / 2 + 0.005), ('cylinder', (shank_r, SHANK - 0.15)))]),
        joint(f'{s}_ankle_pitch', f'{s}_shank', f'{s}_ankle_link', (0, 0, -SHANK), (0, 1, 0),
              (-1.0, 0.8, 100, 3.0), 'ankle pitch, roll (one centre)'),
        small(f'{s}_ankle_link'),
        joint(f'{s}_ankle_roll', f'{s}_ankle_link', f'{s}_foot_link', axis=(1, 0, 0),
              limits=(-0.5, 0.5, 80, 3.0)),
        link(f'{s}_foot_link', 1.0, foot_centre, _box(1.0, *FOOT),
             [(foot_centre, ('box', FOOT))], 'dark'),
        joint(f'{s}_sole_joint', f'{s}_foot_link', f'{s}_foot',
              (FOOT_FORWARD, 0, -ANKLE_HEIGHT),
              comment=f'sole frame of the {s} foot: centre of the sole, z up'),
        link(f'{s}_foot'),
    ]
    return '\n'.join(parts)


HEADER = f'''<?xml version="1.0"?>
<!--
  smcik_figure: a 1.5 m humanoid authored by hand for smcik_ros's whole-figure demo (seed 000,
  section 6.3: hands, feet and centre of mass solved at once, the root position in the state).
  Original design, not derived from any vendor model; written by urdf/smcik_figure.py.
  Units: lengths in m, angles in rad, mass in kg, inertia in kg m^2, effort in N m, velocity
  in rad/s. Geometry is primitives only (boxes, cylinders, spheres; no meshes); x forward,
  y left, z up.

  Tree: pelvis (the root) - waist_yaw, waist_pitch - torso - neck_yaw - head (off every tip
  path: a passive joint for the IK);
        torso - <side>_shoulder_pitch, _roll, _yaw - <side>_upper_arm - <side>_elbow -
          <side>_forearm - <side>_wrist_yaw, _wrist_pitch - <side>_hand_link - <side>_hand
          (tool frame, fixed: palm centre, z along the forearm);
        pelvis - <side>_hip_yaw, _roll, _pitch - <side>_thigh - <side>_knee - <side>_shank -
          <side>_ankle_pitch, _roll - <side>_foot_link - <side>_foot (sole frame, fixed:
          centre of the sole, z up), for side in left, right.
  Total mass 48.4 kg. 26 joints (12 leg, 12 arm, 2 waist) plus neck_yaw.

  Standing: at q = 0 (straight legs, arms hanging) the soles are flat on z = 0 when the
  pelvis is at x y z = 0 0 {PELVIS_HEIGHT:.2f}, identity orientation: initial_base_pose
  [0, 0, {PELVIS_HEIGHT:.2f}, 0, 0, 0, 1]. The SRDF's group_state "ready" bends the knees
  (hip pitch -0.25, knee 0.5, ankle pitch -0.25: the soles stay flat and under the hips);
  its base pose is [0, 0, {READY_HEIGHT:.6f}, 0, 0, 0, 1] (config/figure.yaml).
-->'''


def build():
    """Return the URDF text."""
    pelvis_box = (0.16, 0.26, 0.12)
    torso_box = (0.18, 0.28, 0.30)
    parts = [
        HEADER,
        '<robot name="smcik_figure">',
        '  <material name="white"><color rgba="0.92 0.92 0.92 1"/></material>',
        '  <material name="blue"><color rgba="0.16 0.36 0.72 1"/></material>',
        '  <material name="dark"><color rgba="0.18 0.18 0.2 1"/></material>',
        '  <material name="orange"><color rgba="0.95 0.5 0.1 1"/></material>',
        '',
        link('pelvis', 6.0, (0, 0, 0), _box(6.0, *pelvis_box),
             [((0, 0, 0), ('box', pelvis_box))], 'orange'),
        joint('waist_yaw', 'pelvis', 'waist_link', (0, 0, WAIST_UP), (0, 0, 1),
              (-1.0, 1.0, 100, 2.0), 'waist: yaw, then pitch (one centre)'),
        small('waist_link'),
        joint('waist_pitch', 'waist_link', 'torso', axis=(0, 1, 0),
              limits=(-0.3, 0.9, 150, 2.0)),
        link('torso', 12.0, (0, 0, 0.17), _box(12.0, *torso_box),
             [((0, 0, 0.17), ('box', torso_box))], 'white'),
        joint('neck_yaw', 'torso', 'head', (0, 0, NECK_UP), (0, 0, 1), (-1.2, 1.2, 10, 3.0),
              'head: off every tip path (a passive joint, held at its measured value)'),
        link('head', 3.5, (0, 0, 0.10), _sphere(3.5, 0.10),
             [((0, 0, 0.10), ('sphere', (0.10,)))], 'white'),
        arm('left', 1), arm('right', -1), leg('left', 1), leg('right', -1),
        '</robot>', '',
    ]
    return '\n'.join(parts[:6]) + '\n\n' + '\n\n'.join(parts[7:-2]) + '\n</robot>\n'


# Links with collision geometry, and the pairs joined through geometry-less links only
# (MoveIt's 'Adjacent': the motor housings between co-located axes have no geometry).
ADJACENT = [('pelvis', 'torso'), ('torso', 'head')] + [
    pair for side in ('left', 'right') for pair in (
        ('torso', f'{side}_upper_arm'), (f'{side}_upper_arm', f'{side}_forearm'),
        (f'{side}_forearm', f'{side}_hand_link'), ('pelvis', f'{side}_thigh'),
        (f'{side}_thigh', f'{side}_shank'), (f'{side}_shank', f'{side}_foot_link'))]


def build_srdf(joint_names):
    """Return the SRDF text: groups, the 'zero' and 'ready' states, the disabled pairs."""
    ready = {f'{s}_{j}': v for s in ('left', 'right') for j, v in (
        ('hip_pitch', -READY_BEND), ('knee', 2 * READY_BEND), ('ankle_pitch', -READY_BEND))}
    ready.update({f'{s}_elbow': -0.3 for s in ('left', 'right')})

    def state(name, values):
        rows = [f'    <joint name="{j}" value="{_f(values.get(j, 0.0))}"/>' for j in joint_names]
        return '\n'.join([f'  <group_state name="{name}" group="whole_body">', *rows,
                          '  </group_state>'])

    groups = '\n'.join(
        [f'  <group name="{s}_{part}"><chain base_link="pelvis" tip_link="{s}_{part}"/></group>'
         for s in ('left', 'right') for part in ('hand', 'foot')]
        + ['  <group name="whole_body">'] + [f'    <group name="{s}_{part}"/>'
                                              for s in ('left', 'right')
                                              for part in ('hand', 'foot')]
        + ['    <joint name="neck_yaw"/>', '  </group>'])
    pairs = '\n'.join(f'  <disable_collisions link1="{a}" link2="{b}" reason="Adjacent"/>'
                      for a, b in ADJACENT)
    return f'''<?xml version="1.0"?>
<!--
  Semantic description of smcik_figure (urdf/smcik_figure.urdf), MoveIt's SRDF format, written
  by urdf/smcik_figure.py. smcik_ros reads its <disable_collisions> entries (self-collision pairs
  not checked) and group states (sim_arm's initial_state); it is found beside the URDF.

  Disabled pairs, checked with python-fcl on the URDF's own shapes (test/test_figure_model.py):
  - Adjacent: links joined by one joint, or through links without collision geometry (the
    motor housings between co-located axes of the shoulders, wrists, hips, ankles, waist).
    They are also the only pairs in contact at q = 0 (head/torso rest on each other) and the
    only pairs touching at every sampled configuration (always-touching: upper arm/forearm,
    thigh/shank, through the elbow and knee spheres).
  Every other pair stays checked: at q = 0 and 'ready' they are at least 3 cm apart
  (hands/thighs, forearms/torso closest); thighs, shanks, feet, hands, head, pelvis and
  torso meet each other at some configurations within the limits.

  States: 'zero' is q = 0 (straight legs; pelvis at z = {PELVIS_HEIGHT:.2f} puts the soles on
  z = 0); 'ready' bends the knees for the whole-figure demo (pelvis at z = {READY_HEIGHT:.6f}).
-->
<robot name="smcik_figure">
{groups}
{state('zero', dict())}
{state('ready', ready)}
{pairs}
</robot>
'''


def joint_names(urdf_text):
    """Return the movable joints of ``urdf_text`` in file order."""
    import re
    return re.findall(r'<joint name="([^"]+)" type="revolute">', urdf_text)


if __name__ == '__main__':
    text = build()
    (HERE / 'smcik_figure.urdf').write_text(text)
    (HERE / 'smcik_figure.srdf').write_text(build_srdf(joint_names(text)))
    print(f'wrote {HERE / "smcik_figure.urdf"} and {HERE / "smcik_figure.srdf"}')
