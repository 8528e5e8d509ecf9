"""Self-collision pairs: every non-adjacent link pair, minus what the SRDF and the sampling rules
disable.

Rules, in order (each disabled pair keeps its reason):

1. adjacent: links fixed together (one rigid body) or joined by one joint never count;
2. the SRDF's ``<disable_collisions link1= link2= reason=/>`` (MoveIt's convention), read
   from a file or an XML string; entries naming links the URDF lacks are ignored with one
   warning (in the returned ``warnings`` and the ``smcik_ros.collision`` logger);
3. always: pairs whose covers (with padding) overlap at every sampled in-limit
   configuration (MoveIt's "default/always" rule: such an overlap is a cover artefact of
   links that sit close by design, and would leave no configuration free); only pairs of
   two links with fine covers: a coarse cover (``CollisionModel.from_urdf(coarse=True)``,
   ``coarse_links``) overlaps where the fine one may not, and its pairs stay checked until
   the pairs are computed again with its fine cover;
4. never (optional, ``never_samples > 0``): pairs that never come within ``never_margin``
   in a large seeded sample of in-limit configurations (MoveIt's "never" rule). This rule
   is statistical: a pair that only meets in a small corner of the joint space can be
   missed, so it is off by default and the margin keeps a safety distance.
"""

import dataclasses
import logging
import os
import xml.etree.ElementTree as ElementTree

import numpy as np

from ..errors import ModelError
from .engine import RobotGeometry, query

__all__ = ['Srdf', 'overlapping_parts', 'parse_srdf', 'SelfCollisionPairs',
           'self_collision_pairs']

_LOG = logging.getLogger('smcik_ros.collision')


@dataclasses.dataclass(frozen=True)
class Srdf:
    """What the collision model reads from an SRDF.

    disabled: ((link1, link2, reason), ...); group_states: {name: {joint: value}} (e.g.
    MoveIt's 'ready' pose); source: the file path or 'robot_description_semantic string'.
    """

    robot_name: str
    disabled: tuple
    group_states: dict
    source: str = ''


def parse_srdf(source):
    """Return the ``Srdf`` of a file path or XML text (an ``Srdf`` as it is); ModelError when
    it is not an SRDF."""
    if isinstance(source, Srdf):
        return source
    text, where = source, 'robot_description_semantic string'
    if isinstance(source, os.PathLike) or (isinstance(source, str) and
                                           not source.lstrip().startswith('<')):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ModelError(f'SRDF file {path!r} does not exist; give an existing srdf_path or '
                             'the XML text in robot_description_semantic')
        with open(path, 'rb') as f:
            text = f.read()
        where = f'SRDF file {path!r}'
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ModelError(f'{where} is not well-formed XML: {exc}') from exc
    if root.tag != 'robot':
        raise ModelError(f'{where} is not an SRDF: root element is <{root.tag}>, expected '
                         '<robot>')
    disabled = []
    for k, el in enumerate(root.iter('disable_collisions')):
        a, b = el.get('link1'), el.get('link2')
        if not a or not b:
            raise ModelError(f'{where}: <disable_collisions> entry {k} needs link1 and link2; '
                             f'got {dict(el.attrib)}')
        disabled.append((a, b, el.get('reason') or ''))
    states = {}
    for el in root.iter('group_state'):
        joints = {}
        for j in el.iter('joint'):
            try:
                joints[j.get('name')] = float(j.get('value'))
            except (TypeError, ValueError):
                continue
        states[el.get('name')] = joints
    return Srdf(root.get('name', ''), tuple(disabled), states, where)


@dataclasses.dataclass
class SelfCollisionPairs:
    """The enabled self-collision pairs of a model and why the others are off.

    pairs: (P, 2) link indices (into ``model.link_names``), i < j; names: [(a, b)];
    disabled: {(a, b): reason} for every other pair of links with geometry; warnings.
    """

    pairs: np.ndarray
    names: list
    disabled: dict
    warnings: list

    def reason(self, a, b):
        """Return why the pair (a, b) is disabled, or None when it is checked."""
        return self.disabled.get((a, b)) or self.disabled.get((b, a))


def self_collision_pairs(model, srdf=None, padding=0.002, always_samples=100, never_samples=0,
                         never_margin=0.05, seed=0, configurations=None, urdf_links=None):
    """Return the ``SelfCollisionPairs`` of ``model`` (see the module docstring).

    srdf: an ``Srdf``, a path or XML text, or None. padding [m]: the padding the covers are
    checked with. always_samples: random in-limit configurations of the 'always' rule (0:
    off; never for a pair with a coarse cover); the neutral configuration, ``configurations``
    (M, nq) and the SRDF's group states of this chain's joints are added to them, so a pair
    overlapping at, e.g., MoveIt's 'ready' pose is never called 'always'. never_samples,
    never_margin [m]: the statistical 'never' rule (0: off). seed: the sampling seed (the
    result is reproducible).
    urdf_links: every link name of the URDF (to tell SRDF typos from links without
    geometry); default: ``model.urdf_links``.
    """
    names = model.link_names
    L = len(names)
    index = {n: i for i, n in enumerate(names)}
    disabled, warnings = {}, []
    for i, j in sorted(model.adjacent_links()):
        disabled[(names[i], names[j])] = 'adjacent'
    if srdf is not None:
        if not isinstance(srdf, Srdf):
            srdf = parse_srdf(srdf)
        known = set(urdf_links if urdf_links is not None else
                    getattr(model, 'urdf_links', names))
        unknown = sorted({n for a, b, _ in srdf.disabled for n in (a, b) if n not in known})
        if unknown:
            warnings.append(f'{srdf.source}: <disable_collisions> names link(s) '
                            f'{", ".join(unknown)} that the URDF lacks: those entries are '
                            'ignored')
        for a, b, reason in srdf.disabled:
            if a in index and b in index and a != b:
                key = (a, b) if index[a] < index[b] else (b, a)
                disabled.setdefault(key, f'srdf ({reason or "no reason given"})')
    candidates = [(i, j) for i in range(L) for j in range(i + 1, L)
                  if (names[i], names[j]) not in disabled]
    chain = model.chain
    coarse = set(getattr(model, 'coarse_links', ()))
    fine = [k for k, (i, j) in enumerate(candidates)
            if names[i] not in coarse and names[j] not in coarse]
    if candidates and (always_samples > 0 or never_samples > 0):
        rng = np.random.default_rng(seed)
        robot = RobotGeometry(model)
        pairs = np.array(candidates, dtype=np.int64).reshape(-1, 2)
        if always_samples > 0 and fine:
            q = [chain.neutral_configuration()[None],
                 chain.random_configuration(rng, int(always_samples))]
            if configurations is not None:
                q.append(chain.clip(np.atleast_2d(np.asarray(configurations, dtype=float))))
            if srdf is not None:
                q.extend(_group_states(chain, srdf))
            q = np.concatenate(q)
            hits = _colliding_counts(robot, chain, q, pairs[fine], 0.0, padding)
            for k in np.asarray(fine)[hits == len(q)]:
                i, j = candidates[k]
                disabled[(names[i], names[j])] = (
                    f'always (covers + padding overlap at all {len(q)} sampled configurations)')
        if never_samples > 0:
            alive = [k for k, (i, j) in enumerate(candidates)
                     if (names[i], names[j]) not in disabled]
            q = chain.random_configuration(rng, int(never_samples))
            hits = _colliding_counts(robot, chain, q, pairs[alive], never_margin, padding)
            for k, h in zip(alive, hits):
                if h == 0:
                    i, j = candidates[k]
                    disabled[(names[i], names[j])] = (
                        f'never (statistical: farther than {never_margin:g} m in all '
                        f'{len(q)} sampled configurations)')
    enabled = [(i, j) for i, j in candidates if (names[i], names[j]) not in disabled]
    for w in warnings:
        _LOG.warning('%s', w)
    return SelfCollisionPairs(np.array(enabled, dtype=np.int64).reshape(-1, 2),
                              [(names[i], names[j]) for i, j in enabled], disabled, warnings)


def _group_states(chain, srdf):
    out = []
    for joints in srdf.group_states.values():
        known = {n: v for n, v in joints.items() if n in chain.joint_names}
        if not known:
            continue
        q = chain.neutral_configuration()
        for n, v in known.items():
            q[chain.joint_index(n)] = v
        out.append(chain.clip(q)[None])
    return out


def _colliding_counts(robot, chain, q, pairs, threshold, padding, chunk=256):
    """Return (P,) the number of configurations where each pair's distance < threshold."""
    counts = np.zeros(len(pairs), dtype=np.int64)
    for start in range(0, len(q), chunk):
        frames = chain.frames(q[start:start + chunk])
        # One leaf per (configuration, pair): links that overlap by design (a head on its
        # column) give millions of sphere pairs otherwise (TIAGo: 16 s instead of 1).
        leaves = query(robot, robot.world(frames), pairs, None, threshold, padding,
                       per_pair=True)
        counts += np.bincount(leaves.pair, minlength=len(pairs))
    return counts


def overlapping_parts(model, q, pairs, joints=2):
    """Return the link pairs of ``pairs`` [(a, b)] at most ``joints`` joints apart in the
    URDF's tree whose own shapes (meshes and primitives, not their covers) intersect at q
    (nq,), by python-fcl; None when python-fcl is not installed.

    MoveIt's setup assistant disables such pairs ("Default": in collision at the default
    pose): a forearm mesh that enters the upper arm's at the elbow (Alex, example-robot-data,
    whose SRDF disables nothing) is a modelling overlap, not a contact, and held at its depth
    it blocks the elbow. Only near pairs: a hand resting on a thigh stays checked."""
    try:
        import fcl
    except ImportError:
        return None
    objects, frames = {}, model.chain.frames(np.asarray(q, dtype=float))

    def shapes(link):
        if link not in objects:
            placed = model.placed_shapes(link, frames) or ()
            objects[link] = []
            for vertices, faces in placed:
                bvh = fcl.BVHModel()
                bvh.beginModel(len(vertices), len(faces))
                bvh.addSubModel(np.asarray(vertices, dtype=float),
                                np.asarray(faces, dtype=np.int64))
                bvh.endModel()
                objects[link].append(fcl.CollisionObject(bvh, fcl.Transform()))
        return objects[link]

    out = []
    for a, b in pairs:
        if _joints_apart(model, a, b) > joints:
            continue
        if any(fcl.collide(x, y, fcl.CollisionRequest(), fcl.CollisionResult())
               for x in shapes(a) for y in shapes(b)):
            out.append((a, b))
    return out


def _joints_apart(model, a, b):
    """Return how many joints join links a and b in the URDF's tree (0: one rigid group)."""
    parent = model.group_parent

    def ancestors(link):
        g, out = int(model.link_group[model.link_index(link)]), []
        while g >= 0 and g not in out:
            out.append(g)
            g = int(parent[g]) if g < len(parent) else -1
        return out

    up_a, up_b = ancestors(a), ancestors(b)
    common = next((g for g in up_a if g in up_b), None)
    if common is None:
        return len(up_a) + len(up_b)
    return up_a.index(common) + up_b.index(common)
