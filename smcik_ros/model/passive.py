"""Passive (off-path) joints and the whole tree's masses.

The chain's state holds the joints on the paths from the base to the tips. The rest of the
tree below the base (the other arm when one hand is the tip, the head, the fingers) is
carried along: its joints are *passive*, held at values the caller sets
(``Chain.set_passive``: measured ones in the node; default 0 clipped into the limits), and
its links' masses are lumped into the nearest body of the model (or the base) at those
values, so that ``Frames.center_of_mass`` counts the whole tree below the base link.

A passive joint is a movable (revolute, continuous, prismatic) joint off the paths that is
not in the state; an off-path mimic of a passive joint follows its source. Off-path
floating, planar and ball joints, and off-path mimic sources that the state holds, are
held at their origin (value 0 clipped into the limits).
"""

from collections import namedtuple

import numpy as np

from ..errors import ModelError
from ..rotations import rotvec_to_matrix

__all__ = ['PassiveStep', 'lumped_centres', 'passive_layout', 'passive_values']

# One off-path link: its parent link, the joint's origin, kind ('fixed', 'revolute',
# 'prismatic'), unit axis, the passive value driving it (index, -1: none) as
# mult * value + add, and the link's mass [kg] and centre (3,) in its frame [m].
PassiveStep = namedtuple('PassiveStep', 'child parent origin kind axis index mult add mass com')

_MOVABLE = ('revolute', 'continuous', 'prismatic')


def passive_layout(joints, links, base_link, state_names):
    """Return the passive joints of the tree and the steps that place the off-path links.

    joints: every JointSpec of the robot; links: the modelled links (base excluded);
    state_names: the chain's joint names. Returns a dict: ``passive_joint_names`` (tuple),
    ``_passive_default`` (read-only (P,) values), ``_passive_steps`` (PassiveStep per
    off-path link below the base, parents first).
    """
    modelled = set(links) | {base_link}
    children = {}
    for j in joints:
        children.setdefault(j.parent, []).append(j)
    off_path = []
    stack = [j for link in reversed((base_link,) + tuple(links))
             for j in reversed(children.get(link, [])) if j.child not in modelled]
    while stack:
        j = stack.pop()
        off_path.append(j)
        stack.extend(reversed(children.get(j.child, [])))
    movable = {j.name for j in off_path if j.type in _MOVABLE and j.name not in state_names}
    passive = [j for j in off_path if j.name in movable
               and not (j.mimic is not None and j.mimic[0] in movable)]
    index = {j.name: i for i, j in enumerate(passive)}
    steps = []
    for j in off_path:
        kind = {'continuous': 'revolute', 'revolute': 'revolute',
                'prismatic': 'prismatic'}.get(j.type, 'fixed')
        slot, mult, add = index.get(j.name, -1), 1.0, 0.0
        if j.mimic is not None and j.mimic[0] in index and j.name not in index:
            slot, mult, add = index[j.mimic[0]], float(j.mimic[1]), float(j.mimic[2])
        elif slot < 0 and kind != 'fixed':
            add = _default(j)          # a state joint off the paths: held at its default
        axis = np.asarray(j.axis if j.axis is not None else (1.0, 0.0, 0.0), dtype=float)
        origin = np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float)
        steps.append(PassiveStep(j.child, j.parent, origin, kind,
                                 axis / max(np.linalg.norm(axis), 1e-12), slot, mult, add,
                                 float(j.mass or 0.0), np.asarray(j.com, dtype=float)))
    default = np.array([_default(j) for j in passive], dtype=float)
    default.setflags(write=False)
    return {'passive_joint_names': tuple(j.name for j in passive),
            '_passive_default': default, '_passive_steps': tuple(steps)}


def _default(joint):
    """Return 0 clipped into ``joint``'s limits (no limit: unbounded)."""
    lo = -np.inf if joint.type == 'continuous' or joint.lower is None else float(joint.lower)
    hi = np.inf if joint.type == 'continuous' or joint.upper is None else float(joint.upper)
    return float(np.clip(0.0, lo, hi)) if lo <= hi else 0.0


def lumped_centres(chain, values):
    """Return (body_com_local (B, 3), base weighted centre (3,), anchors) at passive
    ``values`` (P,): each body's centre of mass in its frame [m] with the off-path links
    lumped in, the base's mass times its centre, and {off-path link: (body, (4, 4) pose in
    that body's frame)} (body -1: the base)."""
    weighted = chain._static_weighted.copy()
    base = chain._static_base.copy()
    anchors = {}
    for step in chain._passive_steps:
        body, off = anchors.get(step.parent) or chain.link_anchor(step.parent)
        pose = off @ step.origin
        if step.kind != 'fixed':
            value = step.add + (step.mult * values[step.index] if step.index >= 0 else 0.0)
            motion = np.eye(4)
            if step.kind == 'prismatic':
                motion[:3, 3] = value * step.axis
            else:
                motion[:3, :3] = rotvec_to_matrix(value * step.axis)
            pose = pose @ motion
        pose.setflags(write=False)
        anchors[step.child] = (body, pose)
        if step.mass > 0.0:
            centre = step.mass * (pose[:3, :3] @ step.com + pose[:3, 3])
            if body < 0:
                base += centre
            else:
                weighted[body] += centre
    mass = chain._body_mass
    local = np.where(mass[:, None] > 0.0, weighted / np.maximum(mass, 1e-300)[:, None], 0.0)
    return local, base, anchors


def passive_values(chain, values):
    """Return ``values`` ({joint: value} or (P,) array in ``passive_joint_names`` order) as a
    (P,) array over the chain's current passive values; ModelError for a bad shape, a
    non-finite value or a name the robot does not have."""
    names = chain.passive_joint_names
    out = np.array(chain.passive_values, dtype=float)
    if isinstance(values, dict):
        known = {j.name for j in chain.tree_joints}
        index = {n: i for i, n in enumerate(names)}
        for name, value in values.items():
            if name in index:
                out[index[name]] = float(value)
            elif name not in known:
                raise ModelError(f'set_passive: unknown joint {name!r}; passive joints of this '
                                 f'chain: {", ".join(names) or "none"}')
    else:
        arr = np.asarray(values, dtype=float)
        if arr.shape != (len(names),):
            raise ModelError(f'set_passive: expected {len(names)} values (passive joints '
                             f'{list(names)}) or a mapping joint -> value; got shape '
                             f'{arr.shape}')
        out = arr.copy()
    if not np.isfinite(out).all():
        raise ModelError(f'set_passive: values must be finite; got {out.tolist()}')
    out.setflags(write=False)
    return out
