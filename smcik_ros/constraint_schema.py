"""Constraint schema: YAML/JSON text <-> validated constraint specs <-> core constraint objects.

One schema serves the ``constraints`` node parameter (a string holding YAML) and the
``constraints`` topic (std_msgs/String). The text is a YAML (or JSON, which is YAML) list of
entries, or a mapping with a ``constraints`` key holding that list; an empty text or ``[]``
clears every constraint::

    - {type: keep_out_sphere, center: [0.4, 0.0, 0.3], radius: 0.1, frame: base_link}
    - {type: posture, q: {joint4: -1.57}, weights: 0.1}
    - {type: joint_coupling, joint: joint7, source: joint1, ratio: -1.0, offset: 0.0}
    - {type: plane_contact, link: tool0, normal: [0, 0, 1], offset: 0.05, frame: base_link}
    - {type: obstacle, shape: box, size: [0.6, 0.4, 0.02], position: [0.5, 0, 0.2], id: shelf}
    - {type: center_of_mass, support: [l_foot, r_foot], margin: 0.02}
    - {type: contact, link: l_sole}
    - {type: smoothness, joints: [l_hip_pitch, l_knee, l_ankle_pitch], sigma: 0.3}
    - {type: target, link: head, orientation: [0, 0, 0, 1], sigma_orientation: 0.1}

Entry types and keys (lengths in m, angles in rad; ``frame`` defaults to the chain's base,
the world frame with a floating base):

- ``keep_out_sphere``: ``center`` [x, y, z] (required), ``radius`` > 0 (required), ``frame``,
  ``links`` (names of links kept out; default all links of the chain), ``weight`` > 0.
- ``posture``: ``q`` (a list of one value per joint in chain order, or a mapping joint -> value;
  required), ``weights`` (a scalar, a list per joint, or a mapping joint -> weight; default 1),
  ``weight`` > 0.
- ``joint_coupling``: ``joint`` and ``source`` (joint names, required), ``ratio`` (default 1),
  ``offset`` (default 0): ``q[joint] = ratio * q[source] + offset``; ``weight`` > 0.
- ``plane_contact``: ``link`` (required), ``normal`` (non-zero 3-vector, normalised here;
  required), ``offset`` (default 0): the link origin lies on ``normal . p = offset`` in ``frame``;
  ``sigma`` > 0 (default 0.005), ``one_sided`` (stay above; default false), ``hard``
  (default false: two-sided an equality within 1 mm, one-sided an inequality), ``weight``.
- ``obstacle``: ``shape`` (``sphere``, ``box`` or ``cylinder``; required), ``position`` [x, y, z]
  (the shape's centre; required), its size: ``radius`` (sphere), ``size`` [x, y, z] side
  lengths (box), ``radius`` and ``height`` (cylinder, axis along its z); optional
  ``orientation`` [x, y, z, w] (quaternion, ROS order) or ``rpy`` [roll, pitch, yaw] (not both),
  ``frame``, ``id`` (a name or number; default the entry's index), ``links`` (the links kept
  out; default all), ``weight`` > 0.
- ``center_of_mass``: one of ``support`` (link names: the convex hull of their collision
  shapes projected along gravity, taken at the configuration the constraint is anchored at),
  ``polygon`` ([[x, y], ...] in ``frame``'s xy plane, at least 3 points) or ``point``
  [x, y, z] with ``direction`` (default [0, 0, 1]; the seed's line form, in ``frame``);
  ``margin`` >= 0 (the polygon shrunk by it; the line form: the distance that counts as on
  the line, default 1 mm), ``hard`` (default true), ``sigma`` > 0 (0.01), ``weight``.
- ``contact``: ``link`` (required) keeps its pose (hard): ``pose`` {position: [x, y, z],
  orientation: [x, y, z, w]} in ``frame``, or, without one, the pose at the configuration
  the constraint is anchored at; ``weight``.
- ``smoothness``: seed 000 eq. 16 over ``joints`` (names, in the order given: list each
  branch root to tip; default every joint), ``neighbours`` (integer >= 1, default 1),
  ``sigma`` > 0 (0.1), ``weight``.
- ``target``: ``link`` (required) with ``position`` [x, y, z] and/or ``orientation``
  [x, y, z, w] in ``frame``, ``sigma_position`` (0.01), ``sigma_orientation`` (0.05),
  ``weight``: a ``goals`` Target (pose, position or orientation) on any link of the chain.

Keep-out spheres are sphere obstacles: both become ``collision.KeepOutSphere`` /
``collision.KeepOutObstacle`` constraints (one collision mechanism), or, with
``build_constraints(..., skip_obstacles=True)`` and ``build_obstacles``, entries of the node's
collision scene (source 'constraints'). Entries that take something from a configuration
(``contact`` without ``pose``, ``center_of_mass`` with ``support``) are built unanchored
unless ``build_constraints`` is given ``q``; the caller anchors them later with
``anchor(frames_or_q)`` (``needs_anchor``).

This module imports no ROS package: it is plain Python + numpy + PyYAML and is unit-tested
without a running graph. Every refusal raises :class:`~smcik_ros.errors.GoalError` whose message
names the entry, what was expected and what arrived.
"""

from collections import namedtuple
from dataclasses import MISSING, dataclass, field, fields
import math

import numpy as np
import yaml

from .errors import GoalError

__all__ = [
    'KeepOutSphereSpec', 'PostureSpec', 'JointCouplingSpec', 'PlaneContactSpec', 'ObstacleSpec',
    'CenterOfMassSpec', 'ContactSpec', 'SmoothnessSpec', 'TargetSpec',
    'CONSTRAINT_TYPES', 'OBSTACLE_SHAPES', 'COM_GUARD', 'parse_constraints', 'dump_constraints',
    'build_constraints', 'build_obstacles', 'needs_anchor',
]


@dataclass(frozen=True)
class KeepOutSphereSpec:
    """A sphere that links must stay out of: centre [m] in ``frame``, radius [m]."""

    center: tuple
    radius: float
    frame: str = ''
    links: tuple = ()
    weight: float = 1.0
    type: str = field(default='keep_out_sphere', init=False)


@dataclass(frozen=True)
class PostureSpec:
    """A soft preference for joint values: ``q`` and ``weights`` as joint -> value mappings."""

    q: tuple          # ((joint, value [rad or m]), ...)
    weights: tuple    # ((joint, weight), ...); joints not listed get weight 0
    weight: float = 1.0
    type: str = field(default='posture', init=False)


@dataclass(frozen=True)
class JointCouplingSpec:
    """``q[joint] = ratio * q[source] + offset``."""

    joint: str
    source: str
    ratio: float = 1.0
    offset: float = 0.0
    weight: float = 1.0
    type: str = field(default='joint_coupling', init=False)


@dataclass(frozen=True)
class PlaneContactSpec:
    """Keep ``link``'s origin on the plane ``normal . p = offset`` [m] given in ``frame``
    (``one_sided``: above it; ``hard``: kept, not traded)."""

    link: str
    normal: tuple
    offset: float = 0.0
    frame: str = ''
    weight: float = 1.0
    sigma: float = 0.005
    one_sided: bool = False
    hard: bool = False
    type: str = field(default='plane_contact', init=False)


@dataclass(frozen=True)
class ObstacleSpec:
    """An obstacle: ``shape`` with its ``size`` (sphere (radius,), box (x, y, z) side lengths,
    cylinder (radius, height)) [m], centre ``position`` [m] and orientation in ``frame``."""

    shape: str
    size: tuple
    position: tuple
    orientation: tuple = None    # (x, y, z, w) quaternion, or None
    rpy: tuple = None            # (roll, pitch, yaw) [rad], or None
    frame: str = ''
    id: object = None
    links: tuple = ()
    weight: float = 1.0
    type: str = field(default='obstacle', init=False)


@dataclass(frozen=True)
class CenterOfMassSpec:
    """The centre of mass over the ``support`` links' polygon or a ``polygon`` ((x, y), ...)
    [m] in ``frame``, less ``margin`` [m]; or on the line through ``point`` along
    ``direction`` (the seed's form)."""

    support: tuple = ()
    polygon: tuple = ()
    point: tuple = None
    direction: tuple = (0.0, 0.0, 1.0)
    frame: str = ''
    margin: float = 0.0
    hard: bool = True
    sigma: float = 0.01
    weight: float = 1.0
    type: str = field(default='center_of_mass', init=False)


@dataclass(frozen=True)
class ContactSpec:
    """``link`` keeps its pose: ``position`` [m] and ``orientation`` (x, y, z, w) in
    ``frame``, or (None) the pose where it is anchored."""

    link: str
    position: tuple = None
    orientation: tuple = None
    frame: str = ''
    weight: float = 1.0
    type: str = field(default='contact', init=False)


@dataclass(frozen=True)
class SmoothnessSpec:
    """Seed 000 eq. 16 over ``joints`` (empty: every joint) with ``neighbours`` pairs."""

    joints: tuple = ()
    neighbours: int = 1
    sigma: float = 0.1
    weight: float = 1.0
    type: str = field(default='smoothness', init=False)


@dataclass(frozen=True)
class TargetSpec:
    """A target for ``link``: ``position`` [m] and/or ``orientation`` (x, y, z, w) in
    ``frame``."""

    link: str
    position: tuple = None
    orientation: tuple = None
    frame: str = ''
    sigma_position: float = 0.01
    sigma_orientation: float = 0.05
    weight: float = 1.0
    type: str = field(default='target', init=False)


OBSTACLE_SHAPES = {'sphere': ('radius',), 'box': ('size',), 'cylinder': ('radius', 'height')}
# [m] A hard support polygon is kept this much farther inside than its ``margin``: the guard
# checks the command stream's motions at samples, on states whose base is fitted to the
# contacts but not yet projected onto them, and the projected commands (and a brake that
# may take only a share of its correction) can then pass the checked edge: a simple
# humanoid by 0.35 mm while braking; Unitree H1, its CoM moving out at 0.1 m/s when the
# guard refused, by 0.2-1.5 mm past its margin with a 1 mm guard (offline, one goal, 2 of
# 4 seeds), none with 3 mm.
COM_GUARD = 0.003

_REQUIRED = {
    'keep_out_sphere': ('center', 'radius'),
    'posture': ('q',),
    'joint_coupling': ('joint', 'source'),
    'plane_contact': ('link', 'normal'),
    'obstacle': ('shape', 'position'),
    'center_of_mass': (),
    'contact': ('link',),
    'smoothness': (),
    'target': ('link',),
}
_OPTIONAL = {
    'keep_out_sphere': ('frame', 'links', 'weight'),
    'posture': ('weights', 'weight'),
    'joint_coupling': ('ratio', 'offset', 'weight'),
    'plane_contact': ('offset', 'frame', 'sigma', 'one_sided', 'hard', 'weight'),
    'obstacle': ('radius', 'size', 'height', 'orientation', 'rpy', 'frame', 'id', 'links',
                 'weight'),
    'center_of_mass': ('support', 'polygon', 'point', 'direction', 'frame', 'margin', 'hard',
                       'sigma', 'weight'),
    'contact': ('pose', 'frame', 'weight'),
    'smoothness': ('joints', 'neighbours', 'sigma', 'weight'),
    'target': ('position', 'orientation', 'frame', 'sigma_position', 'sigma_orientation',
               'weight'),
}
CONSTRAINT_TYPES = tuple(_REQUIRED)
# The names an entry may use: joints, links and frames (None: not checked).
_Names = namedtuple('_Names', 'joints links frames')

_LINKS = object()  # default of frame_names: the link names


def parse_constraints(source, joint_names=None, link_names=None, frame_names=_LINKS):
    """Return the list of constraint specs described by ``source``.

    ``source``: YAML/JSON text, or the already-loaded Python object (list of mappings, or a
    mapping with a ``constraints`` key). ``joint_names`` (chain order) and ``link_names``, when
    given, check every joint and link name; ``frame_names`` (default: ``link_names``) checks
    the ``frame`` keys (None: not checked here, e.g. frames looked up later with tf2).
    ``center_of_mass`` support links are checked when built (any link below the base).
    Raises GoalError naming the first problem; nothing is returned partially.
    """
    if isinstance(source, (str, bytes)):
        text = source.decode() if isinstance(source, bytes) else source
        try:
            data = yaml.safe_load(text) if text.strip() else []
        except yaml.YAMLError as exc:
            raise GoalError(f'constraints: not valid YAML/JSON ({_one_line(exc)})') from None
    else:
        data = source
    if data is None:
        data = []
    if isinstance(data, dict):
        if set(data) != {'constraints'}:
            raise GoalError('constraints: expected a list of entries or a mapping with the '
                            f'single key "constraints", got a mapping with keys {sorted(data)}')
        data = data['constraints'] or []
    if not isinstance(data, (list, tuple)):
        raise GoalError(f'constraints: expected a list of entries, got {type(data).__name__} '
                        f'{_short(data)}')
    if frame_names is _LINKS:
        frame_names = link_names
    names = _Names(joint_names, link_names, frame_names)
    return [_parse_entry(i, entry, names) for i, entry in enumerate(data)]


def dump_constraints(specs):
    """Return the YAML text (flow style, one entry per line) describing ``specs``: the
    fields that differ from their defaults, as ``parse_constraints`` reads them back."""
    entries = []
    for spec in specs:
        if not isinstance(spec, _SPECS):
            raise TypeError(f'not a constraint spec: {spec!r}')
        entry = {'type': spec.type}
        for f in fields(spec):
            value = getattr(spec, f.name)
            if f.name != 'type' and (f.default is MISSING or value != f.default):
                entry[f.name] = _plain(value)
        entries.append(_dump_forms(spec, entry))
    if not entries:
        return '[]\n'
    return ''.join(yaml.safe_dump([e], default_flow_style=None, sort_keys=False, width=1000)
                   for e in entries)


def _plain(value):
    """Return ``value`` with tuples as lists (YAML's plain sequences)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _dump_forms(spec, entry):
    """Return ``entry`` in the schema's own forms where they differ from the fields."""
    if isinstance(spec, PostureSpec):
        entry['q'], entry['weights'] = dict(spec.q), dict(spec.weights)
    elif isinstance(spec, ObstacleSpec):
        size = entry.pop('size')
        if spec.shape == 'box':
            entry['size'] = size
        else:
            entry['radius'] = size[0]
            if spec.shape == 'cylinder':
                entry['height'] = size[1]
    elif isinstance(spec, ContactSpec) and spec.position is not None:
        entry['pose'] = {'position': entry.pop('position'),
                         'orientation': entry.pop('orientation')}
    return entry


def needs_anchor(objects):
    """Return the objects of ``objects`` that still take their pose or polygon from a
    configuration: call ``obj.anchor(frames_or_q)`` with the configuration they hold."""
    return [o for o in objects if hasattr(o, 'anchor') and not o.anchored]


# The inputs of the builders, besides the spec: the chain, ``frame_to_base``, the collision
# model, the URDF (text or path, the file the text came from, package paths: support
# polygons) and the configuration to anchor at (None: later).
_Context = namedtuple('_Context', 'chain frame_to_base collision_model urdf urdf_path '
                                  'package_paths q')


def build_constraints(specs, chain, frame_to_base=None, collision_model=None,
                      skip_obstacles=False, urdf=None, package_paths=(), urdf_path=None,
                      q=None):
    """Return the core constraint objects (smcik_ros.goals, smcik_ros.collision) for ``specs``.

    ``frame_to_base(frame) -> (4, 4)``: pose of ``frame`` in the chain's base frame [m]; needed
    only for entries whose frame is not the base (default: refuse such frames).
    ``collision_model``: the robot's ``collision.CollisionModel``, checked by keep-out spheres
    and obstacles (None: a thin skeleton of the chain's segments). ``skip_obstacles``: leave
    keep-out spheres and obstacles out (the node puts them in its collision scene with
    ``build_obstacles`` instead); by default each becomes one constraint object.
    ``urdf`` (a URDF file path or its XML text), ``urdf_path`` (the file the text came from)
    and ``package_paths``: where ``center_of_mass`` ``support`` links' collision shapes are
    read. ``q`` (nq,): the configuration that ``contact`` entries without a pose and support
    polygons are anchored at (None: left unanchored, see ``needs_anchor``).
    ``target`` entries give Target objects (the caller may move them to its goal list).
    Raises GoalError when an entry cannot be built (unknown frame, the core refusing it).
    """
    context = _Context(chain, frame_to_base, collision_model, urdf, urdf_path,
                       tuple(package_paths or ()), q)
    objects = []
    for i, spec in enumerate(specs):
        if skip_obstacles and isinstance(spec, (KeepOutSphereSpec, ObstacleSpec)):
            continue
        try:
            objects.append(_BUILDERS[type(spec)](spec, context))
        except KeyError:
            raise TypeError(f'not a constraint spec: {spec!r}') from None
        except GoalError as exc:
            raise GoalError(f'constraints[{i}] ({spec.type}): {exc}') from None
        except (TypeError, ValueError) as exc:
            raise GoalError(f'constraints[{i}] ({spec.type}): {_one_line(exc)}') from None
    return objects


def build_obstacles(specs, chain, frame_to_base=None, ns='constraints'):
    """Return {(ns, id): collision.Obstacle} of the keep-out sphere and obstacle entries.

    Keys: (ns, the entry's ``id``, or its index in ``specs``). Frames as ``build_constraints``.
    Raises GoalError naming the entry (unknown frame, bad shape, duplicate id).
    """
    out = {}
    for i, spec in enumerate(specs):
        if not isinstance(spec, (KeepOutSphereSpec, ObstacleSpec)):
            continue
        try:
            obstacle = _obstacle(spec, chain, frame_to_base)
        except GoalError as exc:
            raise GoalError(f'constraints[{i}] ({spec.type}): {exc}') from None
        key = (ns, spec.id if getattr(spec, 'id', None) is not None else i)
        if key in out:
            raise GoalError(f'constraints[{i}] ({spec.type}): duplicate obstacle id {key[1]!r}')
        out[key] = obstacle
    return out


def _obstacle(spec, chain, frame_to_base):
    from .collision.scene import Obstacle, pose_matrix

    transform = _frame_transform(spec.frame, chain, frame_to_base)
    links = tuple(spec.links) or None
    if isinstance(spec, KeepOutSphereSpec):
        return Obstacle('sphere', (spec.radius,), transform @ pose_matrix(spec.center),
                        links=links)
    pose = pose_matrix(spec.position, spec.orientation, 'obstacle')
    if spec.rpy is not None:
        from .rotations import rotvec_to_matrix
        roll, pitch, yaw = spec.rpy     # URDF convention: R = Rz(yaw) Ry(pitch) Rx(roll)
        pose[:3, :3] = (rotvec_to_matrix(np.array([0.0, 0.0, yaw])) @
                        rotvec_to_matrix(np.array([0.0, pitch, 0.0])) @
                        rotvec_to_matrix(np.array([roll, 0.0, 0.0])))
    return Obstacle(spec.shape, spec.size, transform @ pose, links=links)


# --- building (the core imported here, so that parsing needs only PyYAML) ---------------------

def _build_keep_out(spec, ctx):
    from .collision import KeepOutObstacle, KeepOutSphere

    if isinstance(spec, ObstacleSpec):
        return KeepOutObstacle(_obstacle(spec, ctx.chain, ctx.frame_to_base),
                               weight=spec.weight, model=ctx.collision_model).bind(ctx.chain)
    transform = _frame_transform(spec.frame, ctx.chain, ctx.frame_to_base)
    center = transform[:3, :3] @ np.asarray(spec.center) + transform[:3, 3]
    kwargs = {'weight': spec.weight, 'model': ctx.collision_model}
    if spec.links:
        kwargs['links'] = list(spec.links)
    return KeepOutSphere(center, spec.radius, **kwargs).bind(ctx.chain)


def _build_posture(spec, ctx):
    from .goals import PosturePreference

    chain = ctx.chain
    index = {name: i for i, name in enumerate(chain.joint_names)}
    q = np.clip(0.5 * (chain.lower + chain.upper), -1e3, 1e3)
    weights = np.zeros(chain.n)
    for name, value in spec.q:
        q[index[name]] = value
    for name, value in spec.weights:
        weights[index[name]] = value
    return PosturePreference(q, weights=weights, weight=spec.weight)


def _build_coupling(spec, ctx):
    from .goals import JointCoupling

    return JointCoupling(spec.joint, spec.source, ratio=spec.ratio, offset=spec.offset,
                         weight=spec.weight)


def _build_plane(spec, ctx):
    from .goals import PlaneContact

    transform = _frame_transform(spec.frame, ctx.chain, ctx.frame_to_base)
    normal = transform[:3, :3] @ np.asarray(spec.normal)
    # A point of the plane, moved to the base frame, gives the offset there.
    offset = spec.offset + float(normal @ transform[:3, 3])
    return PlaneContact(spec.link, normal, offset, weight=spec.weight, sigma=spec.sigma,
                        one_sided=spec.one_sided, hard=spec.hard)


def _build_com(spec, ctx):
    from .goals import CenterOfMassLine, CenterOfMassPolygon

    chain = ctx.chain
    transform = _frame_transform(spec.frame, chain, ctx.frame_to_base)
    options = {'hard': spec.hard, 'sigma': spec.sigma, 'weight': spec.weight}
    if spec.point is not None:
        point = transform[:3, :3] @ np.asarray(spec.point) + transform[:3, 3]
        return CenterOfMassLine(point, transform[:3, :3] @ np.asarray(spec.direction),
                                tolerance=spec.margin or 0.001, **options).bind(chain)
    guard = COM_GUARD if spec.hard else 0.0
    if spec.polygon:
        xy = np.asarray(spec.polygon, dtype=float)
        points = xy @ transform[:3, :2].T + transform[:3, 3]     # the frame's xy plane
        return CenterOfMassPolygon(points[:, :2], margin=spec.margin, guard=guard,
                                   **options).bind(chain)
    if ctx.urdf is None:
        raise GoalError('support links need the URDF (build_constraints(..., urdf=...)) to '
                        'read their collision shapes')
    from .collision.support import support_points

    term = CenterOfMassPolygon(
        support=support_points(ctx.urdf, spec.support, ctx.package_paths, ctx.urdf_path),
        margin=spec.margin, guard=guard, **options).bind(chain)
    return term if ctx.q is None else term.anchor(ctx.q)


def _build_contact(spec, ctx):
    from .goals import Contact

    pose = None
    if spec.position is not None:
        pose = _pose(spec, ctx, 'contact pose')
    term = Contact(spec.link, pose, weight=spec.weight).bind(ctx.chain)
    return term if ctx.q is None else term.anchor(ctx.q)


def _build_smoothness(spec, ctx):
    from .goals import ChainSmoothness

    return ChainSmoothness(spec.neighbours, spec.sigma, spec.weight,
                           joints=spec.joints or None).bind(ctx.chain)


def _build_target(spec, ctx):
    from .goals import OrientationTarget, PoseTarget, PositionTarget

    pose = _pose(spec, ctx, 'target')
    if spec.position is None:
        return OrientationTarget(pose[:3, :3], spec.link, spec.sigma_orientation,
                                 spec.weight).bind(ctx.chain)
    if spec.orientation is None:
        return PositionTarget(pose[:3, 3], spec.link, sigma_position=spec.sigma_position,
                              weight=spec.weight).bind(ctx.chain)
    return PoseTarget(pose, spec.link, spec.sigma_position, spec.sigma_orientation,
                      spec.weight).bind(ctx.chain)


def _pose(spec, ctx, what):
    """Return the (4, 4) base-frame pose of a spec's position and orientation in its frame."""
    from .collision.scene import pose_matrix

    transform = _frame_transform(spec.frame, ctx.chain, ctx.frame_to_base)
    position = (0.0, 0.0, 0.0) if spec.position is None else spec.position
    return transform @ pose_matrix(position, spec.orientation, what)


_BUILDERS = {
    KeepOutSphereSpec: _build_keep_out, ObstacleSpec: _build_keep_out,
    PostureSpec: _build_posture, JointCouplingSpec: _build_coupling,
    PlaneContactSpec: _build_plane, CenterOfMassSpec: _build_com, ContactSpec: _build_contact,
    SmoothnessSpec: _build_smoothness, TargetSpec: _build_target,
}
_SPECS = tuple(_BUILDERS)


def _frame_transform(frame, chain, frame_to_base):
    if not frame or frame == chain.base_link:
        return np.eye(4)
    if frame_to_base is None:
        raise GoalError(f'frame {frame!r} is not the base frame {chain.base_link!r} and no '
                        'frame lookup is available')
    return np.asarray(frame_to_base(frame), dtype=float)


# --- parsing ---------------------------------------------------------------------------------

def _parse_entry(i, entry, names):
    where = f'constraints[{i}]'
    if not isinstance(entry, dict):
        raise GoalError(f'{where}: expected a mapping with a "type" key, got '
                        f'{type(entry).__name__} {_short(entry)}')
    kind = entry.get('type')
    if kind not in _REQUIRED:
        raise GoalError(f'{where}: unknown type {kind!r}; valid types: '
                        f'{", ".join(CONSTRAINT_TYPES)}')
    where = f'{where} ({kind})'
    allowed = ('type',) + _REQUIRED[kind] + _OPTIONAL[kind]
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise GoalError(f'{where}: unknown key(s) {", ".join(map(str, unknown))}; valid keys: '
                        f'{", ".join(allowed)}')
    missing = [k for k in _REQUIRED[kind] if k not in entry]
    if missing:
        raise GoalError(f'{where}: missing required key(s) {", ".join(missing)}')
    weight = _positive(where, 'weight', entry.get('weight', 1.0))
    return _PARSERS[kind](where, entry, names, weight)


def _frame(where, entry, names):
    return _name(where, 'frame', entry.get('frame', ''), names.frames, 'frames',
                 allow_empty=True)


def _links(where, entry, names):
    links = entry.get('links') or ()
    if isinstance(links, str):
        links = (links,)
    if not isinstance(links, (list, tuple)):
        raise GoalError(f'{where}: links: expected a list of link names, got {_short(links)}')
    return tuple(_name(where, 'links', n, names.links, 'links') for n in links)


def _parse_keep_out(where, entry, names, weight):
    return KeepOutSphereSpec(
        center=_vector(where, 'center', entry['center'], 3),
        radius=_positive(where, 'radius', entry['radius']),
        frame=_frame(where, entry, names), links=_links(where, entry, names), weight=weight)


def _parse_posture(where, entry, names, weight):
    q = _per_joint(where, 'q', entry['q'], names.joints, scalar_ok=False)
    weights_in = entry.get('weights', 1.0)
    if _is_number(weights_in):
        value = _finite(where, 'weights', weights_in)
        if value < 0.0:
            raise GoalError(f'{where}: weights: expected >= 0, got {value}')
        weights = tuple((name, value) for name, _ in q)
    else:
        weights = _per_joint(where, 'weights', weights_in, names.joints, scalar_ok=False)
        if any(w < 0.0 for _, w in weights):
            raise GoalError(f'{where}: weights: expected values >= 0, got '
                            f'{_short(weights_in)}')
        unset = sorted({n for n, _ in weights} - {n for n, _ in q})
        if unset:
            raise GoalError(f'{where}: weights given for joint(s) {", ".join(unset)} '
                            'that have no value in q')
    return PostureSpec(q=q, weights=weights, weight=weight)


def _parse_coupling(where, entry, names, weight):
    joint = _name(where, 'joint', entry['joint'], names.joints, 'joints')
    source = _name(where, 'source', entry['source'], names.joints, 'joints')
    if joint == source:
        raise GoalError(f'{where}: joint and source must differ, both are {joint!r}')
    return JointCouplingSpec(joint=joint, source=source,
                             ratio=_finite(where, 'ratio', entry.get('ratio', 1.0)),
                             offset=_finite(where, 'offset', entry.get('offset', 0.0)),
                             weight=weight)


def _parse_plane(where, entry, names, weight):
    normal = np.asarray(_vector(where, 'normal', entry['normal'], 3))
    norm = float(np.linalg.norm(normal))
    if norm < 1e-9:
        raise GoalError(f'{where}: normal: expected a non-zero 3-vector, got {list(normal)}')
    return PlaneContactSpec(
        link=_name(where, 'link', entry['link'], names.links, 'links'),
        normal=tuple(float(v) for v in normal / norm),
        offset=_finite(where, 'offset', entry.get('offset', 0.0)),
        frame=_frame(where, entry, names), weight=weight,
        sigma=_positive(where, 'sigma', entry.get('sigma', 0.005)),
        one_sided=_flag(where, 'one_sided', entry.get('one_sided', False)),
        hard=_flag(where, 'hard', entry.get('hard', False)))


def _parse_com(where, entry, names, weight):
    forms = [k for k in ('support', 'polygon', 'point') if k in entry]
    if len(forms) != 1:
        raise GoalError(f'{where}: expected one of support (links), polygon ([[x, y], ...]) or '
                        f'point (+ direction, the line form); got '
                        f'{", ".join(forms) or "none of them"}')
    if 'direction' in entry and forms != ['point']:
        raise GoalError(f'{where}: direction belongs to the line form (with point)')
    if 'frame' in entry and forms == ['support']:
        raise GoalError(f'{where}: frame applies to polygon and point, not to support links '
                        '(their polygon is where the links are)')
    margin = _finite(where, 'margin', entry.get('margin', 0.0))
    if margin < 0.0:
        raise GoalError(f'{where}: margin: expected a number >= 0 [m], got {margin}')
    options = {'frame': _frame(where, entry, names), 'margin': margin, 'weight': weight,
               'hard': _flag(where, 'hard', entry.get('hard', True)),
               'sigma': _positive(where, 'sigma', entry.get('sigma', 0.01))}
    if forms == ['point']:
        direction = _vector(where, 'direction', entry.get('direction', (0.0, 0.0, 1.0)), 3)
        if math.sqrt(sum(v * v for v in direction)) < 1e-9:
            raise GoalError(f'{where}: direction: expected a non-zero 3-vector, got '
                            f'{list(direction)}')
        return CenterOfMassSpec(point=_vector(where, 'point', entry['point'], 3),
                                direction=direction, **options)
    if forms == ['polygon']:
        polygon = entry['polygon']
        if not isinstance(polygon, (list, tuple)) or len(polygon) < 3:
            raise GoalError(f'{where}: polygon: expected at least 3 points [[x, y], ...], got '
                            f'{_short(polygon)}')
        return CenterOfMassSpec(polygon=tuple(_vector(where, f'polygon[{k}]', p, 2)
                                              for k, p in enumerate(polygon)), **options)
    support = entry['support']
    if isinstance(support, str):
        support = [support]
    if not isinstance(support, (list, tuple)) or not support:
        raise GoalError(f'{where}: support: expected a list of link names, got '
                        f'{_short(support)}')
    return CenterOfMassSpec(support=tuple(_name(where, 'support', n, None, 'links')
                                          for n in support), **options)


def _parse_contact(where, entry, names, weight):
    position = orientation = None
    if 'pose' in entry:
        pose = entry['pose']
        if not isinstance(pose, dict) or set(pose) != {'position', 'orientation'}:
            raise GoalError(f'{where}: pose: expected {{position: [x, y, z], orientation: '
                            f'[x, y, z, w]}}, got {_short(pose)}')
        position = _vector(where, 'pose.position', pose['position'], 3)
        orientation = _quaternion(where, 'pose.orientation', pose['orientation'])
    elif 'frame' in entry:
        raise GoalError(f'{where}: frame applies to a given pose; without one the contact '
                        'keeps the pose where it is anchored')
    return ContactSpec(link=_name(where, 'link', entry['link'], names.links, 'links'),
                       position=position, orientation=orientation,
                       frame=_frame(where, entry, names), weight=weight)


def _parse_smoothness(where, entry, names, weight):
    joints = entry.get('joints', ())
    if isinstance(joints, str) or not isinstance(joints, (list, tuple)):
        raise GoalError(f'{where}: joints: expected a list of joint names, got '
                        f'{_short(joints)}')
    neighbours = entry.get('neighbours', 1)
    if not isinstance(neighbours, int) or isinstance(neighbours, bool) or neighbours < 1:
        raise GoalError(f'{where}: neighbours: expected an integer >= 1, got '
                        f'{_short(neighbours)}')
    return SmoothnessSpec(joints=tuple(_name(where, 'joints', n, names.joints, 'joints')
                                       for n in joints), neighbours=neighbours,
                          sigma=_positive(where, 'sigma', entry.get('sigma', 0.1)),
                          weight=weight)


def _parse_target(where, entry, names, weight):
    if 'position' not in entry and 'orientation' not in entry:
        raise GoalError(f'{where}: expected position [x, y, z] and/or orientation '
                        '[x, y, z, w]; got neither')
    return TargetSpec(
        link=_name(where, 'link', entry['link'], names.links, 'links'),
        position=(_vector(where, 'position', entry['position'], 3) if 'position' in entry
                  else None),
        orientation=(_quaternion(where, 'orientation', entry['orientation'])
                     if 'orientation' in entry else None),
        frame=_frame(where, entry, names),
        sigma_position=_positive(where, 'sigma_position', entry.get('sigma_position', 0.01)),
        sigma_orientation=_positive(where, 'sigma_orientation',
                                    entry.get('sigma_orientation', 0.05)),
        weight=weight)


def _parse_obstacle_entry(where, entry, names, weight):
    return _parse_obstacle(where, entry, names.links, names.frames, weight)


_PARSERS = {
    'keep_out_sphere': _parse_keep_out, 'posture': _parse_posture,
    'joint_coupling': _parse_coupling, 'plane_contact': _parse_plane,
    'obstacle': _parse_obstacle_entry, 'center_of_mass': _parse_com,
    'contact': _parse_contact, 'smoothness': _parse_smoothness, 'target': _parse_target,
}


def _flag(where, key, value):
    if not isinstance(value, bool):
        raise GoalError(f'{where}: {key}: expected true or false, got {_short(value)}')
    return value


def _quaternion(where, key, value):
    quat = _vector(where, key, value, 4)
    if math.sqrt(sum(v * v for v in quat)) < 1e-9:
        raise GoalError(f'{where}: {key}: expected a non-zero quaternion [x, y, z, w], got '
                        f'{list(quat)}')
    return quat


def _parse_obstacle(where, entry, link_names, frame_names, weight):
    shape = entry['shape']
    if shape not in OBSTACLE_SHAPES:
        raise GoalError(f'{where}: shape: expected one of {", ".join(OBSTACLE_SHAPES)}, got '
                        f'{_short(shape)}')
    wanted = OBSTACLE_SHAPES[shape]
    for key in ('radius', 'size', 'height'):
        if key in entry and key not in wanted:
            raise GoalError(f'{where}: {key}: not a dimension of a {shape} (give '
                            f'{", ".join(wanted)})')
    missing = [k for k in wanted if k not in entry]
    if missing:
        raise GoalError(f'{where}: a {shape} needs {", ".join(missing)}')
    if shape == 'box':
        size = _vector(where, 'size', entry['size'], 3)
        if any(v <= 0.0 for v in size):
            raise GoalError(f'{where}: size: expected side lengths > 0, got {list(size)}')
    else:
        size = (_positive(where, 'radius', entry['radius']),)
        if shape == 'cylinder':
            size += (_positive(where, 'height', entry['height']),)
    if 'orientation' in entry and 'rpy' in entry:
        raise GoalError(f'{where}: give orientation or rpy, not both')
    orientation = rpy = None
    if 'orientation' in entry:
        orientation = _vector(where, 'orientation', entry['orientation'], 4)
        if math.sqrt(sum(v * v for v in orientation)) < 1e-9:
            raise GoalError(f'{where}: orientation: expected a non-zero quaternion [x, y, z, w],'
                            f' got {list(orientation)}')
    if 'rpy' in entry:
        rpy = _vector(where, 'rpy', entry['rpy'], 3)
    ident = entry.get('id')
    if ident is not None and not (isinstance(ident, str) and ident or
                                  isinstance(ident, int) and not isinstance(ident, bool)):
        raise GoalError(f'{where}: id: expected a name or an integer, got {_short(ident)}')
    links = entry.get('links') or ()
    if isinstance(links, str):
        links = (links,)
    if not isinstance(links, (list, tuple)):
        raise GoalError(f'{where}: links: expected a list of link names, got {_short(links)}')
    return ObstacleSpec(
        shape=shape, size=tuple(size), position=_vector(where, 'position', entry['position'], 3),
        orientation=orientation, rpy=rpy,
        frame=_name(where, 'frame', entry.get('frame', ''), frame_names, 'frames',
                    allow_empty=True),
        id=ident, links=tuple(_name(where, 'links', n, link_names, 'links') for n in links),
        weight=weight)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(where, key, value):
    if not _is_number(value) or not math.isfinite(value):
        raise GoalError(f'{where}: {key}: expected a finite number, got {_short(value)}')
    return float(value)


def _positive(where, key, value):
    value = _finite(where, key, value)
    if value <= 0.0:
        raise GoalError(f'{where}: {key}: expected a number > 0, got {value}')
    return value


def _vector(where, key, value, length):
    if (not isinstance(value, (list, tuple)) or len(value) != length
            or not all(_is_number(v) and math.isfinite(v) for v in value)):
        raise GoalError(f'{where}: {key}: expected a list of {length} finite numbers, got '
                        f'{_short(value)}')
    return tuple(float(v) for v in value)


def _name(where, key, value, known, what, allow_empty=False):
    if not isinstance(value, str) or (not value and not allow_empty):
        raise GoalError(f'{where}: {key}: expected a name (string), got {_short(value)}')
    if value and known is not None and value not in known:
        raise GoalError(f'{where}: {key}: unknown name {value!r}; {what} of this chain: '
                        f'{", ".join(known)}')
    return value


def _per_joint(where, key, value, joint_names, scalar_ok):
    if isinstance(value, dict):
        items = [(_name(where, key, k, joint_names, 'joints'), _finite(where, f'{key}.{k}', v))
                 for k, v in value.items()]
        if not items:
            raise GoalError(f'{where}: {key}: expected at least one joint')
        return tuple(items)
    if isinstance(value, (list, tuple)):
        if joint_names is None:
            raise GoalError(f'{where}: {key}: a list needs the chain joint names; give a '
                            'mapping joint -> value instead')
        if len(value) != len(joint_names):
            raise GoalError(f'{where}: {key}: expected {len(joint_names)} values (one per '
                            f'joint: {", ".join(joint_names)}), got {len(value)}')
        return tuple((name, _finite(where, f'{key}[{j}]', v))
                     for j, (name, v) in enumerate(zip(joint_names, value)))
    raise GoalError(f'{where}: {key}: expected a list (one value per joint) or a mapping '
                    f'joint -> value, got {_short(value)}')


def _short(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _one_line(exc):
    return ' '.join(str(exc).split())
