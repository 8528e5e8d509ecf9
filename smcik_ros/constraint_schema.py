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

Entry types and keys (lengths in m, angles in rad; ``frame`` defaults to the chain's base):

- ``keep_out_sphere``: ``center`` [x, y, z] (required), ``radius`` > 0 (required), ``frame``,
  ``links`` (names of links kept out; default all links of the chain), ``weight`` > 0.
- ``posture``: ``q`` (a list of one value per joint in chain order, or a mapping joint -> value;
  required), ``weights`` (a scalar, a list per joint, or a mapping joint -> weight; default 1),
  ``weight`` > 0.
- ``joint_coupling``: ``joint`` and ``source`` (joint names, required), ``ratio`` (default 1),
  ``offset`` (default 0): ``q[joint] = ratio * q[source] + offset``; ``weight`` > 0.
- ``plane_contact``: ``link`` (required), ``normal`` (non-zero 3-vector, normalised here;
  required), ``offset`` (default 0): the link origin lies on ``normal . p = offset`` in ``frame``;
  ``weight`` > 0.
- ``obstacle``: ``shape`` (``sphere``, ``box`` or ``cylinder``; required), ``position`` [x, y, z]
  (the shape's centre; required), its size: ``radius`` (sphere), ``size`` [x, y, z] side
  lengths (box), ``radius`` and ``height`` (cylinder, axis along its z); optional
  ``orientation`` [x, y, z, w] (quaternion, ROS order) or ``rpy`` [roll, pitch, yaw] (not both),
  ``frame``, ``id`` (a name or number; default the entry's index), ``links`` (the links kept
  out; default all), ``weight`` > 0.

Keep-out spheres are sphere obstacles: both become ``collision.KeepOutSphere`` /
``collision.KeepOutObstacle`` constraints (one collision mechanism), or, with
``build_constraints(..., skip_obstacles=True)`` and ``build_obstacles``, entries of the node's
collision scene (source 'constraints').

This module imports no ROS package: it is plain Python + numpy + PyYAML and is unit-tested
without a running graph. Every refusal raises :class:`~smcik_ros.errors.GoalError` whose message
names the entry, what was expected and what arrived.
"""

from dataclasses import dataclass, field
import math

import numpy as np
import yaml

from .errors import GoalError

__all__ = [
    'KeepOutSphereSpec', 'PostureSpec', 'JointCouplingSpec', 'PlaneContactSpec', 'ObstacleSpec',
    'CONSTRAINT_TYPES', 'OBSTACLE_SHAPES', 'parse_constraints', 'dump_constraints',
    'build_constraints', 'build_obstacles',
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
    """Keep ``link``'s origin on the plane ``normal . p = offset`` [m] given in ``frame``."""

    link: str
    normal: tuple
    offset: float = 0.0
    frame: str = ''
    weight: float = 1.0
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


OBSTACLE_SHAPES = {'sphere': ('radius',), 'box': ('size',), 'cylinder': ('radius', 'height')}

_REQUIRED = {
    'keep_out_sphere': ('center', 'radius'),
    'posture': ('q',),
    'joint_coupling': ('joint', 'source'),
    'plane_contact': ('link', 'normal'),
    'obstacle': ('shape', 'position'),
}
_OPTIONAL = {
    'keep_out_sphere': ('frame', 'links', 'weight'),
    'posture': ('weights', 'weight'),
    'joint_coupling': ('ratio', 'offset', 'weight'),
    'plane_contact': ('offset', 'frame', 'weight'),
    'obstacle': ('radius', 'size', 'height', 'orientation', 'rpy', 'frame', 'id', 'links',
                 'weight'),
}
CONSTRAINT_TYPES = tuple(_REQUIRED)


_LINKS = object()  # default of frame_names: the link names


def parse_constraints(source, joint_names=None, link_names=None, frame_names=_LINKS):
    """Return the list of constraint specs described by ``source``.

    ``source``: YAML/JSON text, or the already-loaded Python object (list of mappings, or a
    mapping with a ``constraints`` key). ``joint_names`` (chain order) and ``link_names``, when
    given, check every joint and link name; ``frame_names`` (default: ``link_names``) checks
    the ``frame`` keys (None: not checked here, e.g. frames looked up later with tf2).
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
    return [_parse_entry(i, entry, joint_names, link_names, frame_names)
            for i, entry in enumerate(data)]


def dump_constraints(specs):
    """Return the YAML text (flow style, one entry per line) describing ``specs``."""
    entries = []
    for spec in specs:
        if isinstance(spec, KeepOutSphereSpec):
            entry = {'type': spec.type, 'center': list(spec.center), 'radius': spec.radius}
            if spec.frame:
                entry['frame'] = spec.frame
            if spec.links:
                entry['links'] = list(spec.links)
        elif isinstance(spec, PostureSpec):
            entry = {'type': spec.type, 'q': dict(spec.q), 'weights': dict(spec.weights)}
        elif isinstance(spec, JointCouplingSpec):
            entry = {'type': spec.type, 'joint': spec.joint, 'source': spec.source,
                     'ratio': spec.ratio, 'offset': spec.offset}
        elif isinstance(spec, PlaneContactSpec):
            entry = {'type': spec.type, 'link': spec.link, 'normal': list(spec.normal),
                     'offset': spec.offset}
            if spec.frame:
                entry['frame'] = spec.frame
        elif isinstance(spec, ObstacleSpec):
            entry = {'type': spec.type, 'shape': spec.shape, 'position': list(spec.position)}
            if spec.shape == 'box':
                entry['size'] = list(spec.size)
            else:
                entry['radius'] = spec.size[0]
                if spec.shape == 'cylinder':
                    entry['height'] = spec.size[1]
            if spec.orientation is not None:
                entry['orientation'] = list(spec.orientation)
            if spec.rpy is not None:
                entry['rpy'] = list(spec.rpy)
            if spec.frame:
                entry['frame'] = spec.frame
            if spec.id is not None:
                entry['id'] = spec.id
            if spec.links:
                entry['links'] = list(spec.links)
        else:
            raise TypeError(f'not a constraint spec: {spec!r}')
        if spec.weight != 1.0:
            entry['weight'] = spec.weight
        entries.append(entry)
    if not entries:
        return '[]\n'
    return ''.join(yaml.safe_dump([e], default_flow_style=None, sort_keys=False, width=1000)
                   for e in entries)


def build_constraints(specs, chain, frame_to_base=None, collision_model=None,
                      skip_obstacles=False):
    """Return the core constraint objects (smcik_ros.goals, smcik_ros.collision) for ``specs``.

    ``frame_to_base(frame) -> (4, 4)``: pose of ``frame`` in the chain's base frame [m]; needed
    only for entries whose frame is not the base (default: refuse such frames).
    ``collision_model``: the robot's ``collision.CollisionModel``, checked by keep-out spheres
    and obstacles (None: a thin skeleton of the chain's segments). ``skip_obstacles``: leave
    keep-out spheres and obstacles out (the node puts them in its collision scene with
    ``build_obstacles`` instead); by default each becomes one constraint object.
    Raises GoalError when an entry cannot be built (unknown frame, the core refusing it).
    """
    from . import goals  # the pure-numpy core; imported here so parsing needs only PyYAML

    objects = []
    for i, spec in enumerate(specs):
        if skip_obstacles and isinstance(spec, (KeepOutSphereSpec, ObstacleSpec)):
            continue
        try:
            objects.append(_build_one(spec, chain, frame_to_base, goals, collision_model))
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


def _build_one(spec, chain, frame_to_base, goals, collision_model=None):
    if isinstance(spec, KeepOutSphereSpec):
        from .collision import KeepOutSphere

        transform = _frame_transform(spec.frame, chain, frame_to_base)
        center = transform[:3, :3] @ np.asarray(spec.center) + transform[:3, 3]
        kwargs = {'weight': spec.weight, 'model': collision_model}
        if spec.links:
            kwargs['links'] = list(spec.links)
        return KeepOutSphere(center, spec.radius, **kwargs).bind(chain)
    if isinstance(spec, ObstacleSpec):
        from .collision import KeepOutObstacle

        return KeepOutObstacle(_obstacle(spec, chain, frame_to_base), weight=spec.weight,
                               model=collision_model).bind(chain)
    if isinstance(spec, PostureSpec):
        index = {name: i for i, name in enumerate(chain.joint_names)}
        q = np.clip(0.5 * (chain.lower + chain.upper), -1e3, 1e3)
        weights = np.zeros(chain.n)
        for name, value in spec.q:
            q[index[name]] = value
        for name, value in spec.weights:
            weights[index[name]] = value
        return goals.PosturePreference(q, weights=weights, weight=spec.weight)
    if isinstance(spec, JointCouplingSpec):
        return goals.JointCoupling(spec.joint, spec.source, ratio=spec.ratio, offset=spec.offset,
                                   weight=spec.weight)
    if isinstance(spec, PlaneContactSpec):
        transform = _frame_transform(spec.frame, chain, frame_to_base)
        normal = transform[:3, :3] @ np.asarray(spec.normal)
        # A point of the plane, moved to the base frame, gives the offset there.
        offset = spec.offset + float(normal @ transform[:3, 3])
        return goals.PlaneContact(spec.link, normal, offset, weight=spec.weight)
    raise TypeError(f'not a constraint spec: {spec!r}')


def _frame_transform(frame, chain, frame_to_base):
    if not frame or frame == chain.base_link:
        return np.eye(4)
    if frame_to_base is None:
        raise GoalError(f'frame {frame!r} is not the base frame {chain.base_link!r} and no '
                        'frame lookup is available')
    return np.asarray(frame_to_base(frame), dtype=float)


# --- parsing helpers -------------------------------------------------------------------------

def _parse_entry(i, entry, joint_names, link_names, frame_names):
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
    if kind == 'keep_out_sphere':
        links = entry.get('links') or ()
        if isinstance(links, str):
            links = (links,)
        if not isinstance(links, (list, tuple)):
            raise GoalError(f'{where}: links: expected a list of link names, got '
                            f'{_short(links)}')
        return KeepOutSphereSpec(
            center=_vector(where, 'center', entry['center'], 3),
            radius=_positive(where, 'radius', entry['radius']),
            frame=_name(where, 'frame', entry.get('frame', ''), frame_names, 'frames',
                        allow_empty=True),
            links=tuple(_name(where, 'links', n, link_names, 'links') for n in links),
            weight=weight)
    if kind == 'posture':
        q = _per_joint(where, 'q', entry['q'], joint_names, scalar_ok=False)
        weights_in = entry.get('weights', 1.0)
        if _is_number(weights_in):
            value = _finite(where, 'weights', weights_in)
            if value < 0.0:
                raise GoalError(f'{where}: weights: expected >= 0, got {value}')
            weights = tuple((name, value) for name, _ in q)
        else:
            weights = _per_joint(where, 'weights', weights_in, joint_names, scalar_ok=False)
            if any(w < 0.0 for _, w in weights):
                raise GoalError(f'{where}: weights: expected values >= 0, got '
                                f'{_short(weights_in)}')
            unset = sorted({n for n, _ in weights} - {n for n, _ in q})
            if unset:
                raise GoalError(f'{where}: weights given for joint(s) {", ".join(unset)} '
                                'that have no value in q')
        return PostureSpec(q=q, weights=weights, weight=weight)
    if kind == 'joint_coupling':
        joint = _name(where, 'joint', entry['joint'], joint_names, 'joints')
        source = _name(where, 'source', entry['source'], joint_names, 'joints')
        if joint == source:
            raise GoalError(f'{where}: joint and source must differ, both are {joint!r}')
        return JointCouplingSpec(joint=joint, source=source,
                                 ratio=_finite(where, 'ratio', entry.get('ratio', 1.0)),
                                 offset=_finite(where, 'offset', entry.get('offset', 0.0)),
                                 weight=weight)
    if kind == 'obstacle':
        return _parse_obstacle(where, entry, link_names, frame_names, weight)
    normal = np.asarray(_vector(where, 'normal', entry['normal'], 3))
    norm = float(np.linalg.norm(normal))
    if norm < 1e-9:
        raise GoalError(f'{where}: normal: expected a non-zero 3-vector, got {list(normal)}')
    return PlaneContactSpec(
        link=_name(where, 'link', entry['link'], link_names, 'links'),
        normal=tuple(float(v) for v in normal / norm),
        offset=_finite(where, 'offset', entry.get('offset', 0.0)) / 1.0,
        frame=_name(where, 'frame', entry.get('frame', ''), frame_names, 'frames',
                    allow_empty=True),
        weight=weight)


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
