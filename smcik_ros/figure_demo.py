"""The whole-figure demo (``./smcik demo --figure``): both hands reach, the feet stay planted.

The humanoid of urdf/smcik_figure.urdf runs in smcik_node with config/figure.yaml (tips: both
hands and both feet, a floating pelvis in ``world``) and sim_arm; ``smcik_ros.demo`` starts
them. This module is the sequence, the checks and the picture:

1. contacts on both soles and the centre of mass over their support polygon, sent as YAML on
   the ``constraints`` topic;
2. hand goals on ``targets/<hand>/pose`` (PoseStamped in ``world``): the left hand out to the
   side, the right hand out to the other side, both hands low (reachable only by crouching:
   the pelvis goes down, the feet stay), both hands back (standing up). The goals are the
   hands of configurations built here with the soles where they start, so they are
   reachable by construction;
3. every published command, paired by its header stamp with ``~/base_pose``, is checked: the
   soles within 1 mm and 0.01 rad of where they were, the whole figure's centre of mass
   (head included) inside the support polygon, every joint within its limits; a goal on one
   hand moves the other by at most 2 mm;
4. a PNG: front and side views of the figure at each goal, the support polygon and the
   projections of the centre of mass.

The figure's geometry and the checks are plain numpy over ``model.Chain`` (no ROS); ``run``
imports rclpy and talks to the node.
"""

from dataclasses import dataclass, field
from pathlib import Path
import time
import xml.etree.ElementTree as ElementTree

import numpy as np
import yaml

from .collision import parse_srdf
from .model import Chain

__all__ = ['URDF', 'PARAMS', 'HANDS', 'SOLES', 'SUPPORT', 'CONSTRAINTS', 'COM_MARGIN',
           'Figure', 'Goal', 'make_goals', 'CommandCheck', 'convex_hull', 'inside_distance',
           'run', 'plot', 'node_parameters']

ROOT = Path(__file__).resolve().parents[1]
URDF = ROOT / 'urdf' / 'smcik_figure.urdf'
PARAMS = ROOT / 'config' / 'figure.yaml'
HANDS = ('left_hand', 'right_hand')
SOLES = ('left_foot', 'right_foot')
SUPPORT = ('left_foot_link', 'right_foot_link')      # the links whose sole boxes support
WORLD = 'world'
COM_MARGIN = 0.02                                     # [m] the node keeps the CoM this far in
CONSTRAINTS = (f'- {{type: contact, link: {SOLES[0]}}}\n'
               f'- {{type: contact, link: {SOLES[1]}}}\n'
               f'- {{type: center_of_mass, support: [{", ".join(SUPPORT)}], '
               f'margin: {COM_MARGIN}}}\n')
CONTACT_TOLERANCE = (1e-3, 1e-2)                      # [m], [rad] on every command
HOLD_TOLERANCE = 2e-3                                 # [m] the hand without a new goal


def node_parameters():
    """Return smcik_node's extra 'name:=value' items: constraints come on the topic."""
    return ['constraints:="[]"']


# ---------------------------------------------------------------------- geometry
def convex_hull(points):
    """Return the (K, 2) counter-clockwise convex hull of (M, 2) points (monotone chain)."""
    pts = sorted(set(map(tuple, np.round(np.asarray(points, float), 12))))
    if len(pts) < 3:
        return np.array(pts)

    def turn(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and turn(out[-2], out[-1], p) <= 0.0:
                out.pop()
            out.append(p)
        return out[:-1]
    return np.array(half(pts) + half(pts[::-1]))


def inside_distance(polygon, point):
    """Return the distance [m] of (2,) ``point`` inside the CCW convex ``polygon`` (K, 2):
    positive inside (to the nearest edge), negative outside."""
    a = polygon
    b = np.roll(polygon, -1, axis=0)
    edge = b - a
    normal = np.stack([-edge[:, 1], edge[:, 0]], axis=1) / np.linalg.norm(edge, axis=1)[:, None]
    return float(np.min(np.einsum('kj,kj->k', normal, np.asarray(point)[None, :2] - a)))


def _rotation_angle(a, b):
    cos = 0.5 * (np.trace(a[:3, :3].T @ b[:3, :3]) - 1.0)
    return float(np.arccos(np.clip(cos, -1.0, 1.0)))


class Figure:
    """The humanoid's whole tree at (commanded joints, base pose): world poses, centre of
    mass, soles, support polygon. Joint values are {name: value} [rad]; base poses (4, 4)."""

    def __init__(self, urdf=URDF):
        self.urdf = Path(urdf)
        # Every link with mass: both hands, both feet and the head (off the IK's tip paths).
        self.chain = Chain.from_urdf(str(self.urdf), 'pelvis', list(HANDS + SOLES) + ['head'])
        self.bones = [(j.parent, j.child) for j in self.chain.tree_joints]
        srdf = parse_srdf(self.urdf.with_suffix('.srdf'))
        self.ready = dict(srdf.group_states['ready'])
        params = yaml.safe_load(PARAMS.read_text())['smcik_node']['ros__parameters']
        self.ready_base = pose_matrix(params['initial_base_pose'])
        self.soles = _sole_boxes(self.urdf, SUPPORT)

    def configuration(self, values):
        """Return the chain's q (n,) from {joint: value}; joints not given are 0."""
        q = np.zeros(self.chain.n)
        for name, value in values.items():
            if name in self.chain.joint_names:
                q[self.chain.joint_index(name)] = value
        return q

    def world(self, values, base, link):
        """Return the (4, 4) world pose of ``link``."""
        return base @ self.chain.fk(self.configuration(values), link)

    def link_positions(self, values, base):
        """Return {link: (3,) world position} of every link."""
        poses = self.chain.link_poses(self.configuration(values))
        return {name: (base @ pose)[:3, 3] for name, pose in zip(self.chain.link_names, poses)}

    def center_of_mass(self, values, base):
        """Return the (3,) world centre of mass of the whole figure [m]."""
        return base[:3, :3] @ self.chain.center_of_mass(self.configuration(values)) + base[:3, 3]

    def base_for(self, values, anchor):
        """Return the base pose that puts the left sole at ``anchor`` (4, 4)."""
        return anchor @ np.linalg.inv(self.chain.fk(self.configuration(values), SOLES[0]))

    def support_polygon(self, values, base):
        """Return the (K, 2) CCW convex hull of the sole boxes' corners, projected on z = 0."""
        corners = []
        for link, (size, origin) in self.soles.items():
            pose = self.world(values, base, link) @ origin
            for dx in (-0.5, 0.5):
                for dy in (-0.5, 0.5):
                    for dz in (-0.5, 0.5):
                        corners.append((pose @ np.array([dx * size[0], dy * size[1],
                                                         dz * size[2], 1.0]))[:2])
        return convex_hull(corners)


def pose_matrix(xyz_xyzw):
    """Return the (4, 4) pose of [x, y, z, qx, qy, qz, qw] (ROS quaternion order)."""
    from .rotations import quat_to_matrix
    x, y, z, qx, qy, qz, qw = (float(v) for v in xyz_xyzw)
    out = np.eye(4)
    out[:3, :3] = quat_to_matrix(np.array([qw, qx, qy, qz]) / np.linalg.norm([qw, qx, qy, qz]))
    out[:3, 3] = (x, y, z)
    return out


def _sole_boxes(urdf, links):
    """Return {link: (size (3,), origin (4, 4))} of each link's collision box."""
    root = ElementTree.parse(urdf).getroot()
    out = {}
    for el in root.iter('link'):
        if el.get('name') in links:
            box = el.find('collision/geometry/box')
            origin = np.eye(4)
            origin[:3, 3] = [float(v) for v in el.find('collision/origin').get('xyz').split()]
            out[el.get('name')] = (np.array([float(v) for v in box.get('size').split()]), origin)
    return out


# ---------------------------------------------------------------------- the goals
@dataclass
class Goal:
    """Hand targets (world (4, 4) poses) and the configuration they come from."""

    name: str
    targets: dict          # {hand: (4, 4)}
    values: dict           # {joint: value} that reaches them with the soles anchored
    base: np.ndarray       # (4, 4) its base pose


def _legs(hip, knee):
    """Sagittal leg bend with flat soles: ankle pitch = -(hip + knee)."""
    return {f'{s}_{j}': v for s in ('left', 'right')
            for j, v in (('hip_pitch', hip), ('knee', knee), ('ankle_pitch', -(hip + knee)))}


def make_goals(figure):
    """Return the four goals: left side, right side, both low (crouch), both back."""
    ready = dict(figure.ready)
    anchor = figure.world(ready, figure.ready_base, SOLES[0])
    left = dict(ready, left_shoulder_pitch=-0.4, left_shoulder_roll=1.2, left_elbow=-0.7,
                left_wrist_yaw=0.5, left_wrist_pitch=0.3)
    both = dict(left, right_shoulder_pitch=-0.5, right_shoulder_roll=-1.1, right_elbow=-0.8,
                right_wrist_yaw=-0.4, right_wrist_pitch=0.2)
    low = dict(ready, **_legs(-1.0, 1.6), waist_pitch=0.6, left_shoulder_pitch=-0.45,
               left_shoulder_roll=0.15, left_elbow=-0.2, left_wrist_pitch=0.3,
               right_shoulder_pitch=-0.6, right_shoulder_roll=-0.2, right_elbow=-0.6,
               right_wrist_yaw=0.3)
    plan = [('left hand out to the side', left, ('left_hand',)),
            ('right hand out to the side', both, ('right_hand',)),
            ('both hands low: crouch', low, HANDS),
            ('both hands back: stand up', ready, HANDS)]
    goals = []
    for name, values, hands in plan:
        base = figure.base_for(values, anchor)
        goals.append(Goal(name, {h: figure.world(values, base, h) for h in hands}, values,
                          base))
    return goals


# ---------------------------------------------------------------------- the checks
@dataclass
class CommandCheck:
    """Check published commands: soles at their anchors, CoM inside the polygon, limits."""

    figure: Figure
    anchors: dict                       # {sole: (4, 4)} where the soles were planted
    polygon: np.ndarray                 # (K, 2) support polygon at the anchors
    count: int = 0
    sole_position: float = 0.0          # [m] worst over every command
    sole_orientation: float = 0.0       # [rad]
    com_inside: float = np.inf          # [m] smallest distance of the CoM inside the polygon
    limit_excess: float = 0.0           # [rad] worst excursion beyond a joint limit
    coms: list = field(default_factory=list)

    def __call__(self, values, base):
        """Check one command: joint values {name: value}, its base pose (4, 4)."""
        chain = self.figure.chain
        for sole, anchor in self.anchors.items():
            pose = self.figure.world(values, base, sole)
            self.sole_position = max(self.sole_position,
                                     float(np.linalg.norm(pose[:3, 3] - anchor[:3, 3])))
            self.sole_orientation = max(self.sole_orientation, _rotation_angle(pose, anchor))
        com = self.figure.center_of_mass(values, base)
        self.coms.append(com)
        self.com_inside = min(self.com_inside, inside_distance(self.polygon, com[:2]))
        q = self.figure.configuration(values)
        excess = np.maximum(chain.lower - q, q - chain.upper).max()
        self.limit_excess = max(self.limit_excess, float(excess))
        self.count += 1

    def failures(self):
        """Return the broken guarantees as text lines (empty: all held)."""
        out = []
        if self.count == 0:
            out.append('no command was checked (none paired with ~/base_pose)')
        if self.sole_position > CONTACT_TOLERANCE[0] or \
                self.sole_orientation > CONTACT_TOLERANCE[1]:
            out.append(f'soles moved {self.sole_position * 1e3:.2f} mm / '
                       f'{self.sole_orientation:.4f} rad (allowed 1 mm / 0.01 rad)')
        if self.com_inside < 0.0:
            out.append(f'CoM left the support polygon by {-self.com_inside * 1e3:.1f} mm')
        if self.limit_excess > 1e-9:
            out.append(f'a joint limit was exceeded by {self.limit_excess:.2e} rad')
        return out

    def summary(self):
        """Return one line of the worst figures."""
        return (f'{self.count} commands checked: soles within {self.sole_position * 1e3:.3f} mm '
                f'and {self.sole_orientation:.4f} rad of their anchors, CoM at least '
                f'{self.com_inside * 1e3:.1f} mm inside the support polygon (node margin '
                f'{COM_MARGIN * 1e3:.0f} mm), limits exceeded by at most '
                f'{max(self.limit_excess, 0.0):.1e} rad')


def hand_errors(figure, values, base, targets):
    """Return {hand: (position error [m], orientation error [rad])}."""
    out = {}
    for hand, target in targets.items():
        pose = figure.world(values, base, hand)
        out[hand] = (float(np.linalg.norm(pose[:3, 3] - target[:3, 3])),
                     _rotation_angle(pose, target))
    return out


# ---------------------------------------------------------------------- over DDS
class _Stream:
    """What the demo hears: measured joints, commands paired with ~/base_pose by stamp."""

    def __init__(self, node, joint_names):
        from geometry_msgs.msg import PoseStamped
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from .ros.conversions import pose_to_matrix, stamp_to_nanoseconds

        self.joint_names = set(joint_names)
        self.measured = None                  # {joint: value}, latest joint_states
        self.measured_at = 0.0
        self.paired = []                      # (monotonic time, {joint: value}, base (4, 4))
        self.check = None                     # CommandCheck, once the soles are anchored
        self.figure = None
        self.held = {}                        # {hand: (4, 4)} hands without a new goal
        self.held_worst = 0.0                 # [m] how far they moved, over every command
        self._commands, self._bases = {}, {}
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)

        def values(msg):
            return {n: float(p) for n, p in zip(msg.name, msg.position)}

        def on_state(msg):
            self.measured, self.measured_at = values(msg), time.monotonic()

        def on_command(msg):
            self._commands[stamp_to_nanoseconds(msg.header.stamp)] = values(msg)
            self._pair()

        def on_base(msg):
            self._bases[stamp_to_nanoseconds(msg.header.stamp)] = pose_to_matrix(msg.pose)
            self._pair()

        node.create_subscription(JointState, 'joint_states', on_state, reliable)
        node.create_subscription(JointState, 'joint_commands', on_command, reliable)
        node.create_subscription(PoseStamped, '/smcik_node/base_pose', on_base, reliable)

    def _pair(self):
        for stamp in sorted(set(self._commands) & set(self._bases)):
            values, base = self._commands.pop(stamp), self._bases.pop(stamp)
            if self.measured is not None:      # passive joints (the neck) as measured
                values = {**{k: v for k, v in self.measured.items()
                             if k not in values}, **values}
            self.paired.append((time.monotonic(), values, base))
            if self.check is not None:
                self.check(values, base)
            for hand, pose in self.held.items():
                moved = np.linalg.norm(self.figure.world(values, base, hand)[:3, 3]
                                       - pose[:3, 3])
                self.held_worst = max(self.held_worst, float(moved))
        for pending in (self._commands, self._bases):     # unpaired leftovers: keep 200
            for stamp in sorted(pending)[:-200]:
                del pending[stamp]

    def latest(self):
        return self.paired[-1] if self.paired else None


def _publishers(node):
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    targets = {hand: node.create_publisher(PoseStamped, f'targets/{hand}/pose', reliable)
               for hand in HANDS}
    return node.create_publisher(String, 'constraints', latched), targets


def run(node, args, figure=None):
    """Run the sequence against a running smcik_node + sim_arm; return (ok, report).

    report: {'goals': [...], 'check': CommandCheck or None, 'failures': [text], 'figure'}.
    args: startup_timeout, timeout [s] per goal, settle [s], position_tolerance [m],
    orientation_tolerance [rad].
    """
    from std_msgs.msg import String

    figure = figure or Figure()
    report = {'goals': [], 'check': None, 'failures': [], 'figure': figure}
    session = _Session(node, figure)
    print('waiting for smcik_node (four tips, floating base) and sim_arm ...', flush=True)
    missing = session.wait_for_start(args.startup_timeout)
    if missing:
        report['failures'].append(f'within {args.startup_timeout:g} s: {missing}')
        return False, report
    session.constraints.publish(String(data=CONSTRAINTS))
    print('constraints sent: contacts on both soles, CoM over their support polygon '
          f'(margin {COM_MARGIN * 1e3:.0f} mm)', flush=True)
    _, values, base = session.stream.latest()    # at rest: where the node anchors the soles
    anchors = {sole: figure.world(values, base, sole) for sole in SOLES}
    check = session.stream.check = CommandCheck(figure, anchors,
                                                figure.support_polygon(values, base))
    session.spin_until(lambda: False, 1.0)        # the node takes them in
    goals = make_goals(figure)
    for k, goal in enumerate(goals, start=1):
        result = session.reach(goal, args)
        report['goals'].append(result)
        _print_goal(k, len(goals), result, args.timeout)
        if not result['ok']:
            report['failures'].append(f'goal {k} ({goal.name}) not reached within '
                                      f'{args.timeout:g} s')
        if result['held'] > HOLD_TOLERANCE:
            report['failures'].append(f'goal {k}: the other hand moved '
                                      f'{result["held"] * 1e3:.2f} mm (allowed 2 mm)')
    report['check'] = check
    report['failures'] += check.failures()
    print(check.summary(), flush=True)
    return not report['failures'], report


class _Session:
    """The demo's side of the graph: the stream it hears, the goal and constraint
    publishers, and spinning until something holds."""

    def __init__(self, node, figure):
        from rclpy.executors import SingleThreadedExecutor

        self.node, self.figure = node, figure
        self.stream = _Stream(node, figure.chain.joint_names)
        self.stream.figure = figure
        self.constraints, self.targets = _publishers(node)
        self.executor = SingleThreadedExecutor(context=node.context)
        self.executor.add_node(node)

    def spin_until(self, predicate, timeout):
        """Spin until ``predicate()`` holds (True) or ``timeout`` [s] passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.01)
            if predicate():
                return True
        return False

    def wait_for_start(self, timeout):
        """Return '' once the node, sim_arm and ~/base_pose are there, else what is missing."""
        def lacking():
            stream = self.stream
            return [what for what, ok in (
                ('no subscriber on targets/<hand>/pose (tip_links)',
                 all(p.get_subscription_count() for p in self.targets.values())),
                ('no joint_states (sim_arm)', stream.measured is not None),
                ('no command paired with /smcik_node/base_pose (floating_base)',
                 bool(stream.paired))) if not ok]
        self.spin_until(lambda: not lacking(), timeout)
        return ', '.join(lacking())

    def reach(self, goal, args):
        """Send ``goal``'s hand targets; return its result once reached (or timed out)."""
        from geometry_msgs.msg import PoseStamped

        from .ros.conversions import matrix_to_pose

        figure, stream = self.figure, self.stream
        _, values, base = stream.latest()
        stream.held = {h: figure.world(values, base, h) for h in HANDS if h not in goal.targets}
        stream.held_worst = 0.0
        stamp = self.node.get_clock().now().to_msg()
        for hand, target in goal.targets.items():
            msg = PoseStamped()
            msg.header.stamp, msg.header.frame_id = stamp, WORLD
            msg.pose = matrix_to_pose(target)
            self.targets[hand].publish(msg)
        sent = time.monotonic()

        def reached():
            when, values, base = stream.latest()
            if when <= sent or stream.measured_at <= sent:
                return False
            errors = hand_errors(figure, values, base, goal.targets)
            settled = max(abs(stream.measured.get(j, v) - v) for j, v in values.items())
            return settled <= 1e-3 and all(
                p <= args.position_tolerance and o <= args.orientation_tolerance
                for p, o in errors.values())

        ok = self.spin_until(reached, args.timeout)
        elapsed = time.monotonic() - sent
        self.spin_until(lambda: False, args.settle)
        _, values, base = stream.latest()
        held, stream.held = stream.held_worst, {}
        return {'name': goal.name, 'goal': goal, 'ok': ok, 'time': elapsed,
                'errors': hand_errors(figure, values, base, goal.targets), 'values': values,
                'base': base, 'held': held}


def _print_goal(k, count, result, timeout):
    what = (f'reached in {result["time"]:5.2f} s' if result['ok']
            else f'NOT reached within {timeout:g} s')
    errors = '; '.join(f'{hand} {p * 1e3:.2f} mm {o:.4f} rad'
                       for hand, (p, o) in result['errors'].items())
    held = f'; other hand moved {result["held"] * 1e3:.2f} mm' if len(result['errors']) < 2 \
        else ''
    print(f'goal {k}/{count} {result["name"]}: {what}; {errors}; pelvis at z = '
          f'{result["base"][2, 3]:.3f} m{held}', flush=True)


# ---------------------------------------------------------------------- the picture
def plot(report, path):
    """Write the PNG: front and side views at each goal, the support polygon, the CoM."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    figure, results, check = report['figure'], report['goals'], report['check']
    columns = max(len(results), 1)
    fig, axes = plt.subplots(2, columns + 1, figsize=(3.2 * (columns + 1), 7.5),
                             squeeze=False)
    polygon = check.polygon if check is not None else None
    for k, result in enumerate(results):
        values, base = result['values'], result['base']
        points = figure.link_positions(values, base)
        com = figure.center_of_mass(values, base)
        for row, (axis, label) in enumerate(((1, 'front (y, z)'), (0, 'side (x, z)'))):
            ax = axes[row][k]
            for parent, child in figure.bones:
                if parent in points and child in points:
                    ax.plot([points[parent][axis], points[child][axis]],
                            [points[parent][2], points[child][2]], '-o', color='tab:blue',
                            lw=2, ms=2)
            head = figure.world(values, base, 'head') @ np.array([0.0, 0.0, 0.1, 1.0])
            ax.add_patch(plt.Circle((head[axis], head[2]), 0.1, fill=False,
                                    color='tab:blue'))
            if polygon is not None:
                ax.plot([polygon[:, axis].min(), polygon[:, axis].max()], [0, 0], '-',
                        color='tab:green', lw=5, alpha=0.6, label='support polygon')
            ax.plot([com[axis], com[axis]], [0, com[2]], ':', color='tab:red', lw=1)
            ax.plot(com[axis], com[2], 'o', color='tab:red', ms=6, label='CoM')
            ax.plot(com[axis], 0.0, 'x', color='tab:red', ms=8)
            for hand, target in result['goal'].targets.items():
                ax.plot(target[axis, 3], target[2, 3], '*', ms=12,
                        color='tab:green' if result['ok'] else 'tab:red')
            ax.axhline(0.0, color='grey', lw=0.8)
            ax.set_xlim(-0.8, 0.8)
            ax.set_ylim(-0.05, 1.6)
            ax.set_aspect('equal')
            ax.grid(True, alpha=0.3)
            ax.set_title(f'{k + 1}: {result["name"]}\n{label}' if row == 0 else label,
                         fontsize=8)
    top = axes[0][columns]
    if polygon is not None:
        closed = np.vstack([polygon, polygon[:1]])
        top.fill(closed[:, 0], closed[:, 1], color='tab:green', alpha=0.25,
                 label='support polygon')
        coms = np.array(check.coms) if check.coms else np.zeros((0, 3))
        top.plot(coms[:, 0], coms[:, 1], '.', color='tab:red', ms=2,
                 label='CoM projection, every command')
    for k, result in enumerate(results):
        com = figure.center_of_mass(result['values'], result['base'])
        top.annotate(str(k + 1), com[:2], fontsize=8)
    top.set_aspect('equal')
    top.set_title('top (x, y): support polygon and CoM', fontsize=8)
    top.legend(fontsize=7, loc='lower left')
    top.grid(True, alpha=0.3)
    text = axes[1][columns]
    text.axis('off')
    lines = [check.summary() if check is not None else 'no command checked']
    lines += report['failures'] or ['every guarantee held']
    text.text(0.0, 1.0, '\n'.join(_wrap(line, 46) for line in lines), va='top', fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _wrap(line, width):
    import textwrap
    return '\n'.join(textwrap.wrap(line, width))
