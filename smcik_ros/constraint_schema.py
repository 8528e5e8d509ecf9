"""Constraint schema: YAML/JSON text <-> validated constraint specs <-> core constraint objects.

One schema serves the ``constraints`` node parameter (a string holding YAML) and the
``constraints`` topic (std_msgs/String). The text is a YAML (or JSON, which is YAML) list of
entries, or a mapping with a ``constraints`` key holding that list; an empty text or ``[]``
clears every constraint::

    - {type: keep_out_sphere, center: [0.4, 0.0, 0.3], radius: 0.1, frame: base_link}
    - {type: posture, q: {joint4: -1.57}, weights: 0.1}
    - {type: joint_coupling, joint: joint7, source: joint1, ratio: -1.0, offset: 0.0}
    - {type: plane_contact, link: tool0, normal: [0, 0, 1], offset: 0.05, frame: base_link}

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
    'KeepOutSphereSpec', 'PostureSpec', 'JointCouplingSpec', 'PlaneContactSpec',
    'CONSTRAINT_TYPES', 'parse_constraints', 'dump_constraints', 'build_constraints',
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


_REQUIRED = {
    'keep_out_sphere': ('center', 'radius'),
    'posture': ('q',),
    'joint_coupling': ('joint', 'source'),
    'plane_contact': ('link', 'normal'),
}
_OPTIONAL = {
    'keep_out_sphere': ('frame', 'links', 'weight'),
    'posture': ('weights', 'weight'),
    'joint_coupling': ('ratio', 'offset', 'weight'),
    'plane_contact': ('offset', 'frame', 'weight'),
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
        else:
            raise TypeError(f'not a constraint spec: {spec!r}')
        if spec.weight != 1.0:
            entry['weight'] = spec.weight
        entries.append(entry)
    if not entries:
        return '[]\n'
    return ''.join(yaml.safe_dump([e], default_flow_style=None, sort_keys=False, width=1000)
                   for e in entries)


def build_constraints(specs, chain, frame_to_base=None):
    """Return the core constraint objects (smcik_ros.goals) for ``specs`` on ``chain``.

    ``frame_to_base(frame) -> (4, 4)``: pose of ``frame`` in the chain's base frame [m]; needed
    only for entries whose frame is not the base (default: refuse such frames).
    Raises GoalError when an entry cannot be built (unknown frame, the core refusing it).
    """
    from . import goals  # the pure-numpy core; imported here so parsing needs only PyYAML

    objects = []
    for i, spec in enumerate(specs):
        try:
            objects.append(_build_one(spec, chain, frame_to_base, goals))
        except GoalError as exc:
            raise GoalError(f'constraints[{i}] ({spec.type}): {exc}') from None
        except (TypeError, ValueError) as exc:
            raise GoalError(f'constraints[{i}] ({spec.type}): {_one_line(exc)}') from None
    return objects


def _build_one(spec, chain, frame_to_base, goals):
    if isinstance(spec, KeepOutSphereSpec):
        transform = _frame_transform(spec.frame, chain, frame_to_base)
        center = transform[:3, :3] @ np.asarray(spec.center) + transform[:3, 3]
        kwargs = {'weight': spec.weight}
        if spec.links:
            kwargs['links'] = list(spec.links)
        return goals.KeepOutSphere(center, spec.radius, **kwargs)
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
