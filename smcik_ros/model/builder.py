"""Build a chain model from joint specs: the modelled links, the configuration layout, the
bodies with their folded static offsets, the Jacobian columns, the masses, and the packed
records the kernels read (``kernels.records.CHAIN``).

``build(joints, base_link, tip_links, link_inertials)`` returns the attributes of a
``Chain`` (a dict); each step below is one plain function over the previous ones' results.
A "body" is one movable joint of the model (tree order: a parent's index is below its
children's); fixed joints are folded into the offsets. A Jacobian "column" is one motion
axis: one per revolute or prismatic body, three per ball body.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..kernels.records import BODIES, CHAIN, COLUMNS, JOINTS, LINKS
from ..rotations import skew
from .passive import passive_layout

__all__ = ['BODY_BALL', 'BODY_PRISMATIC', 'BODY_REVOLUTE', 'JointSpec', 'build', 'readonly']

# The body kinds (Chain.body_kind; the kernels' codes).
BODY_REVOLUTE, BODY_PRISMATIC, BODY_BALL = 0, 1, 2


@dataclass(frozen=True)
class JointSpec:
    """One joint of a programmatically built chain (see ``Chain.from_joints``).

    type: 'revolute', 'continuous', 'prismatic', 'ball' or 'fixed'.
    origin: (4, 4) pose of the joint frame in the parent link frame [m].
    axis: (3,) joint axis in the joint frame (ignored for ball and fixed joints).
    lower, upper: position limits [rad or m]; for a ball joint ``upper`` is the largest
        rotation angle [rad] away from the identity (a cone-like limit), ``lower`` unused.
    velocity: velocity limit [rad/s or m/s].
    mass, com: link inertial: mass [kg] and centre of mass (3,) in the child link frame.
    mimic: (source joint name, multiplier, offset) or None.
    """

    name: str
    parent: str
    child: str
    type: str = 'revolute'
    origin: tuple = None
    axis: tuple = (0.0, 0.0, 1.0)
    lower: float = -np.pi
    upper: float = np.pi
    velocity: float = np.inf
    mass: float = 0.0
    com: tuple = (0.0, 0.0, 0.0)
    mimic: tuple = None


def build(joints, base_link, tip_links, link_inertials):
    """Return the attributes of the chain between ``base_link`` and ``tip_links`` (a dict).

    joints: JointSpecs forming a tree; link_inertials: {link: (mass [kg], (3,) centre in the
    link frame)} for links no joint's ``mass`` describes. Raises ModelError naming what does
    not fit.
    """
    by_child = {}
    for j in joints:
        if j.child in by_child:
            raise ModelError(f'link {j.child!r} has two parent joints '
                             f'({by_child[j.child].name!r} and {j.name!r}): not a tree')
        by_child[j.child] = j
    links = _model_links(joints, by_child, base_link, tip_links)
    state = _state_joints(joints, by_child, links)
    out = _configuration(state)
    bodies = _bodies(by_child, links, base_link, out, link_inertials)
    out.update(bodies)
    out.update(_columns(out))
    out.update(passive_layout(joints, links, base_link, out['joint_names']))
    out.update(_masses(out, bodies['mass']))
    out['records'] = _records(out)
    del out['mass']
    return out


def readonly(arr):
    """Return ``arr`` made read-only (the model's arrays: callers cannot alter the model)."""
    arr.setflags(write=False)
    return arr


def _model_links(joints, by_child, base_link, tip_links):
    """Return the modelled links in tree order: those on the paths base -> tips, and the
    fixed children of modelled links (tool frames, sensors). Checks each tip lies below the
    base and that no floating or planar joint is on the model."""
    wanted = []
    for tip in tip_links:
        path = []
        link = tip
        while link != base_link:
            if link not in by_child:
                raise ModelError(
                    f'tip link {tip!r} is not below base link {base_link!r} '
                    f'(its root is {link!r}); pick a base among its ancestors: '
                    f'{", ".join(reversed(ancestors(tip, by_child)))}')
            path.append(link)
            link = by_child[link].parent
        wanted.extend(reversed(path))
    path_links = list(dict.fromkeys(wanted))
    children = {}
    for j in joints:
        children.setdefault(j.parent, []).append(j)
    extra = []
    stack = [base_link] + path_links
    seen = set(stack)
    while stack:
        link = stack.pop()
        for j in children.get(link, []):
            if j.type == 'fixed' and j.child not in seen:
                seen.add(j.child)
                extra.append(j.child)
                stack.append(j.child)
    links = path_links + extra
    order = {link: i for i, link in enumerate(topological(base_link, children))}
    links.sort(key=lambda name: order.get(name, 0))
    for c in links:
        j = by_child[c]
        if j.type in ('floating', 'planar'):
            raise ModelError(f'joint {j.name!r} between {j.parent!r} and {c!r} is {j.type}: '
                             'only revolute, continuous, prismatic, fixed and ball joints can '
                             'be on the modelled chain; pick a base link below it')
    return links


def _state_joints(joints, by_child, links):
    """Return the joints of the configuration: the movable joints in tree order, then the
    mimic sources that lie off the paths."""
    joint_by_name = {j.name: j for j in joints}
    movable = [by_child[c] for c in links if by_child[c].type != 'fixed']
    state = [j for j in movable if j.mimic is None]
    for j in movable:
        if j.mimic is None:
            continue
        src = joint_by_name.get(j.mimic[0])
        if src is None:
            raise ModelError(f'joint {j.name!r} mimics unknown joint {j.mimic[0]!r}')
        if src.mimic is not None:
            raise ModelError(f'joint {j.name!r} mimics {src.name!r}, which is a mimic '
                             'joint itself; chained mimics are not supported')
        if src.type == 'fixed':
            raise ModelError(f'joint {j.name!r} mimics fixed joint {src.name!r}')
        if src not in state:
            state.append(src)
    return state


def _configuration(state):
    """Return the configuration layout of the state joints: names, limits, indices (a ball
    joint has four configuration entries, a unit quaternion, and three tangent ones)."""
    names, lower, upper, vel, continuous, q_index, v_index = [], [], [], [], [], {}, {}
    nq = nv = 0
    for j in state:
        names.append(j.name)
        q_index[j.name], v_index[j.name] = nq, nv
        if j.type == 'ball':
            lower += [-1.0] * 4
            upper += [1.0] * 4
            vel += [j.velocity] * 4
            continuous += [False] * 4
            nq, nv = nq + 4, nv + 3
        else:
            lo, hi = _limits_of(j)
            lower.append(lo)
            upper.append(hi)
            vel.append(j.velocity if j.velocity is not None else np.inf)
            # Continuous joints are unbounded in reality; lower/upper hold an artificial
            # +-2pi working range for sampling and clipping.
            continuous.append(j.type == 'continuous')
            nq, nv = nq + 1, nv + 1
    lower = readonly(np.array(lower, dtype=float))
    upper = readonly(np.array(upper, dtype=float))
    span = upper - lower
    balls = tuple((q_index[n], v_index[n], j.upper) for n, j in zip(names, state)
                  if j.type == 'ball')
    scalar = [n for n, j in zip(names, state) if j.type != 'ball']
    return {
        'joint_names': tuple(names), 'nq': nq, 'nv': nv, 'lower': lower, 'upper': upper,
        # random_configuration's draw (None where a span is not finite)
        '_span': readonly(span) if np.isfinite(span).all() else None,
        'velocity_limits': readonly(np.array(vel, dtype=float)),
        '_q_index': q_index, '_v_index': v_index,
        'joint_types': tuple(j.type for j in state),
        'continuous': readonly(np.array(continuous, dtype=bool)),
        'ball_joints': balls, 'has_ball_joints': bool(balls),
        'ball_limits': readonly(np.array([b[2] for b in balls], dtype=float)),
        'scalar_q': readonly(np.array([q_index[n] for n in scalar], dtype=int)),
        'scalar_v': readonly(np.array([v_index[n] for n in scalar], dtype=int)),
        'ball_q_index': readonly(np.array([[b[0] + i for i in range(4)] for b in balls],
                                          dtype=int).reshape(-1, 4)),
        'ball_v_index': readonly(np.array([[b[1] + i for i in range(3)] for b in balls],
                                          dtype=int).reshape(-1, 3)),
    }


def _bodies(by_child, links, base_link, layout, inertials):
    """Return the bodies (one per movable joint, with the static offsets folded in), each
    link's anchor (its body and its pose there) and the inertials per body."""
    identity = readonly(np.eye(4))
    anchor = {base_link: (-1, identity)}
    parent, origin, kind, axis, body_q, mimic, joint = [], [], [], [], [], [], []
    masses = []                                       # (body, mass [kg], centre in the body)
    for link in links:
        j = by_child[link]
        pbody, poff = anchor[j.parent]
        frame = poff @ _as_matrix(j.origin)
        if j.type == 'fixed':
            anchor[link] = (pbody, frame)
        else:
            parent.append(pbody)
            origin.append(frame)
            kind.append({'prismatic': BODY_PRISMATIC, 'ball': BODY_BALL}.get(j.type,
                                                                             BODY_REVOLUTE))
            a = np.asarray(j.axis if j.axis is not None else (1.0, 0.0, 0.0), float)
            norm = np.linalg.norm(a)
            if j.type != 'ball' and norm < 1e-9:
                raise ModelError(f'joint {j.name!r} has a zero axis')
            axis.append(a / max(norm, 1e-12))
            source = j.name if j.mimic is None else j.mimic[0]
            body_q.append(layout['_q_index'][source])
            mimic.append(None if j.mimic is None else
                         (float(j.mimic[1]), float(j.mimic[2]), layout['_v_index'][source]))
            joint.append(j.name)
            anchor[link] = (len(parent) - 1, identity)
        m = float(j.mass or 0.0)
        if m > 0.0:                                   # the link's inertial in its body frame
            b, off = anchor[link]
            masses.append((b, m, off[:3, :3] @ np.asarray(j.com, float) + off[:3, 3]))
    base = by_child.get(base_link)                    # the base link's own inertial first
    if base_link in inertials:
        m, c = inertials[base_link]
        masses.insert(0, (-1, float(m), np.asarray(c, dtype=float)))
    elif base is not None and base.mass:
        masses.insert(0, (-1, float(base.mass), np.asarray(base.com, float)))
    link_names = (base_link,) + tuple(links)
    origins = readonly(np.array(origin, dtype=float).reshape(-1, 4, 4))
    B = len(parent)
    return {
        'link_names': link_names, 'num_bodies': B, '_identity': identity,
        '_body_of_link': {k: (b, off if off is identity else readonly(off))
                          for k, (b, off) in anchor.items()},
        '_link_index': {k: i for i, k in enumerate(link_names)},
        '_link_body': np.array([anchor[k][0] for k in link_names], dtype=int),
        '_link_offset': readonly(np.array([anchor[k][1] for k in link_names])
                                 .reshape(-1, 4, 4)),
        'body_parent': tuple(parent), 'body_kind': tuple(kind), 'body_joint': tuple(joint),
        'body_q': tuple(body_q), 'body_mimic': tuple(mimic), 'body_origin': origins,
        'body_offset': readonly(origins[:, :3, 3].copy()),
        'body_axis': readonly(np.array(axis, dtype=float).reshape(-1, 3)),
        'descendants': tuple(tuple(d for d in range(B) if is_ancestor(parent, b, d))
                             for b in range(B)),
        'prismatic_bodies': readonly(np.array([b for b in range(B)
                                               if kind[b] == BODY_PRISMATIC], dtype=int)),
        'ball_bodies': tuple((b, body_q[b]) for b in range(B) if kind[b] == BODY_BALL),
        'mass': masses,
    }


def _columns(model):
    """Return the Jacobian columns: one per revolute or prismatic body, three per ball body,
    each driving one tangent entry (by the mimic multiplier for a mimic joint)."""
    nv, kind = model['nv'], model['body_kind']
    body, axis, rot, scatter = [], [], [], []
    for b in range(model['num_bodies']):
        if kind[b] == BODY_BALL:
            v0 = model['_v_index'][model['body_joint'][b]]
            for k in range(3):
                body.append(b)
                axis.append(np.eye(3)[k])
                rot.append(True)
                scatter.append((v0 + k, 1.0))
        else:
            mimic = model['body_mimic'][b]
            scatter.append((model['_v_index'][model['body_joint'][b]], 1.0) if mimic is None
                           else (mimic[2], mimic[0]))
            body.append(b)
            axis.append(model['body_axis'][b])
            rot.append(kind[b] == BODY_REVOLUTE)
    matrix = np.zeros((len(body), nv))
    for c, (v, f) in enumerate(scatter):
        matrix[c, v] = f
    parents = model['body_parent']
    return {
        'column_body': readonly(np.array(body, dtype=int)),
        'column_axis': readonly(np.array(axis, dtype=float).reshape(-1, 3)),
        'column_is_rotation': readonly(np.array(rot, dtype=bool)),
        'column_scatter': readonly(matrix),
        '_column_tangent': [(int(v), float(f)) for v, f in scatter],
        # Columns acting on each body: those of its ancestors (and its own).
        'columns_of_body': tuple(
            readonly(np.array([c for c, cb in enumerate(body) if is_ancestor(parents, cb, b)],
                              dtype=int)) for b in range(model['num_bodies'])),
    }


def _masses(model, masses):
    """Return the mass model: per body its mass (the off-path links' lumped in, passive.py),
    the modelled links' mass-weighted centres in the body frames, the subtree sums the
    centre-of-mass Jacobian uses, the total, and the characteristic length."""
    B = model['num_bodies']
    body_mass = np.zeros(B)
    weighted = np.zeros((B, 3))
    base_mass, base_com = 0.0, np.zeros(3)
    for b, m, c in masses:
        if m <= 0.0:
            continue
        if b < 0:
            base_mass += m
            base_com = base_com + m * c
        else:
            body_mass[b] += m
            weighted[b] += m * c
    body_of = {}
    for step in model['_passive_steps']:      # off-path links ride on their anchor's body
        body_of[step.child] = body_of.get(step.parent,
                                          model['_body_of_link'].get(step.parent, (-1,))[0])
        if step.mass > 0.0:
            if body_of[step.child] < 0:
                base_mass += step.mass
            else:
                body_mass[body_of[step.child]] += step.mass
    parents = model['body_parent']
    desc = np.array([[1.0 if is_ancestor(parents, b, d) else 0.0 for d in range(B)]
                     for b in range(B)]).reshape(B, B)
    offsets = model['body_origin'][:, :3, 3]
    return {
        '_body_mass': readonly(body_mass), '_static_base': readonly(base_com),
        '_static_weighted': readonly(weighted),
        '_desc_matrix': desc, '_desc_mass': desc @ body_mass,
        'total_mass': float(base_mass + body_mass.sum()),
        # [m] sum of the static offsets, to scale position errors
        'length_scale': max(float(sum(np.linalg.norm(o) for o in offsets)
                                  + sum(np.linalg.norm(off[:3, 3])
                                        for off in model['_link_offset'])), 1e-3),
    }


def _records(model):
    """Return the chain's records for the kernels: a namedtuple of the bodies, columns,
    links and joints records (``kernels.records.CHAIN``)."""
    B = model['num_bodies']
    origins = model['body_origin']
    terms = np.array([np.stack([o[:3, :3] @ skew(a), o[:3, :3] @ skew(a) @ skew(a)])
                      for o, a in zip(origins, model['body_axis'])]).reshape(B, 2, 9)
    mimic = model['body_mimic']
    moves = np.zeros((B + 1, len(model['column_body'])), dtype=bool)
    for b in range(B):
        moves[b + 1, model['columns_of_body'][b]] = True
    scalar_q = model['scalar_q']
    return CHAIN.view(CHAIN.pack(
        bodies=BODIES.pack(
            parent=np.array(model['body_parent'], dtype=np.int64).reshape(-1),
            kind=np.array(model['body_kind'], dtype=np.int64).reshape(-1),
            q_index=np.array(model['body_q'], dtype=np.int64).reshape(-1),
            mimic_mult=np.array([1.0 if m is None else m[0] for m in mimic]).reshape(-1),
            mimic_add=np.array([0.0 if m is None else m[1] for m in mimic]).reshape(-1),
            rot0=origins[:, :3, :3], terms=terms, offset=model['body_offset'],
            axis=model['body_axis']),
        columns=COLUMNS.pack(
            body=model['column_body'], axis=model['column_axis'],
            is_rotation=model['column_is_rotation'],
            tangent=np.array([v for v, _ in model['_column_tangent']], dtype=np.int64),
            factor=np.array([f for _, f in model['_column_tangent']], dtype=float),
            moves=moves, nv=model['nv']),
        links=LINKS.pack(body=model['_link_body'], offset=model['_link_offset']),
        joints=JOINTS.pack(
            lower=model['lower'], upper=model['upper'], scalar_q=scalar_q,
            scalar_v=model['scalar_v'], continuous=model['continuous'][scalar_q],
            ball_q=model['ball_q_index'], ball_v=model['ball_v_index'],
            ball_limit=model['ball_limits'])))


# ---------------------------------------------------------------------- helpers
def _as_matrix(origin):
    if origin is None:
        return np.eye(4)
    m = np.asarray(origin, dtype=float)
    if m.shape != (4, 4):
        raise ModelError(f'joint origin must be a (4, 4) matrix; got shape {m.shape}')
    return m


def _limits_of(joint):
    if joint.type == 'continuous':
        # Finite working range so that sampling and clipping stay defined.
        return -2.0 * np.pi, 2.0 * np.pi
    lo, hi = joint.lower, joint.upper
    if lo is None or hi is None or not np.isfinite(lo) or not np.isfinite(hi):
        raise ModelError(f'joint {joint.name!r} ({joint.type}) has no finite <limit lower= '
                         'upper=>; URDF requires them on revolute and prismatic joints')
    if lo > hi:
        raise ModelError(f'joint {joint.name!r} has lower limit {lo} > upper limit {hi}')
    return float(lo), float(hi)


def is_ancestor(parents, a, d):
    """Return True when body ``a`` is ``d`` or one of its ancestors."""
    while d >= 0:
        if d == a:
            return True
        d = parents[d]
    return False


def ancestors(link, by_child):
    """Return ``link`` and its ancestor links, up to the root."""
    out = [link]
    while link in by_child:
        link = by_child[link].parent
        out.append(link)
    return out


def topological(root, children):
    """Return the links below ``root`` (children: {link: [JointSpec]}) in depth-first order."""
    order, stack = [], [root]
    while stack:
        link = stack.pop()
        order.append(link)
        stack.extend(reversed([j.child for j in children.get(link, [])]))
    return order
