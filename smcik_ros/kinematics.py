"""Kinematic chain model: URDF (or programmatic) -> batched forward kinematics and Jacobians.

The model is the sub-tree of a robot between ``base_link`` and one or several tip links.
Fixed joints are folded into static offsets at construction; per call only the joint
motions are built, batched over configurations, looping over joints (tree depth) and
never over configurations.

Configuration ``q`` has ``chain.nq`` entries: one per revolute, continuous or prismatic
joint [rad or m] and four per ball joint (a unit quaternion w, x, y, z). Velocities and
Jacobian columns live in the tangent space of ``chain.nv`` entries (three per ball joint,
a rotation vector in the joint's own frame). For URDF robots ``nq == nv == n``.
"""

import io
import os
from dataclasses import dataclass

import numpy as np

from . import kernels as _kernels
from . import model_cache
from .errors import ModelError
from .rotations import quat_from_rotvec, quat_multiply, quat_to_matrix, skew

__all__ = ['BODY_BALL', 'BODY_PRISMATIC', 'BODY_REVOLUTE', 'Chain', 'Frames', 'JointSpec']

_REVOLUTE, _PRISMATIC, _BALL = 0, 1, 2
# Public names of the body kinds (Chain.body_kind).
BODY_REVOLUTE, BODY_PRISMATIC, BODY_BALL = _REVOLUTE, _PRISMATIC, _BALL


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


class Frames:
    """The chain at a batch of configurations: cached forward kinematics.

    Solvers and goals read poses, points, Jacobians and the centre of mass from here
    instead of re-deriving kinematics. ``q`` is (N, nq). Body frames (the frames of the
    movable joints, after their motion) are stored body-major for speed: ``rot`` is
    (B, N, 3, 3) and ``pos`` (B, N, 3); use the methods rather than these arrays.
    """

    __slots__ = ('chain', 'q', 'rot', 'pos', 'single')

    def __init__(self, chain, q, rot, pos, single):
        self.chain = chain
        self.q = q
        self.rot = rot
        self.pos = pos
        self.single = single

    def __len__(self):
        return self.q.shape[0]

    def subset(self, index):
        """Return the frames of the configurations picked by ``index`` (array, mask or slice)."""
        return Frames(self.chain, self.q[index], self.rot[:, index], self.pos[:, index], False)

    def assign(self, index, other):
        """Overwrite rows ``index`` with the configurations and frames of ``other``."""
        self.q[index] = other.q
        self.rot[:, index] = other.rot
        self.pos[:, index] = other.pos

    def body_point(self, body, local):
        """Return (N, 3) base-frame positions of the point ``local`` (3,) fixed to ``body``."""
        if body < 0:
            return np.broadcast_to(local, (len(self), 3)).copy()
        n = len(self)
        return self.pos[body] + (self.rot[body].reshape(3 * n, 3) @ local).reshape(n, 3)

    def link_transform(self, link=None):
        """Return (rot (N, 3, 3), pos (N, 3)) of ``link`` in the base frame (no 4x4 built)."""
        body, offset = self.chain._link_anchor(link)
        n = len(self)
        if body < 0:
            return (np.broadcast_to(offset[:3, :3], (n, 3, 3)),
                    np.broadcast_to(offset[:3, 3], (n, 3)))
        if offset is self.chain._identity:
            return self.rot[body], self.pos[body]
        return self.rot[body] @ offset[:3, :3], self.body_point(body, offset[:3, 3])

    def link_pose(self, link=None):
        """Return the (N, 4, 4) poses of ``link`` (default: the first tip) in the base frame."""
        body, offset = self.chain._link_anchor(link)
        n = len(self)
        out = np.empty((n, 4, 4))
        out[:, 3] = (0.0, 0.0, 0.0, 1.0)
        if body < 0:
            out[:, :3] = offset[:3]
            return out
        rot = self.rot[body]
        out[:, :3, :3] = rot @ offset[:3, :3]
        out[:, :3, 3] = self.body_point(body, offset[:3, 3])
        return out

    def point(self, link=None, offset=None):
        """Return the (N, 3) base-frame positions of a point fixed on ``link``.

        offset: (3,) point in the link frame [m]; None is the link origin.
        """
        body, anchor = self.chain._link_anchor(link)
        local = anchor[:3, 3] if offset is None else anchor[:3, :3] @ offset + anchor[:3, 3]
        return self.body_point(body, local)

    def link_poses(self):
        """Return the (N, L, 4, 4) poses of every modelled link, in ``chain.link_names`` order."""
        chain = self.chain
        n = len(self)
        out = np.empty((n, len(chain.link_names), 4, 4))
        out[..., 3, :] = (0.0, 0.0, 0.0, 1.0)
        for i, (body, off) in enumerate(zip(chain._link_body, chain._link_offset)):
            if body < 0:
                out[:, i, :3] = off[:3]
            else:
                out[:, i, :3, :3] = self.rot[body] @ off[:3, :3]
                out[:, i, :3, 3] = self.body_point(body, off[:3, 3])
        return out

    def link_positions(self):
        """Return the (N, L, 3) origins of every modelled link (cheaper than link_poses)."""
        chain = self.chain
        out = np.empty((len(self), len(chain.link_names), 3))
        for i, (body, off) in enumerate(zip(chain._link_body, chain._link_offset)):
            out[:, i] = self.body_point(body, off[:3, 3])
        return out

    def jacobian(self, link=None, offset=None):
        """Return the (N, 6, nv) geometric Jacobian of a point on ``link``.

        Rows 0-2: linear velocity of the point, rows 3-5: angular velocity of the link,
        both in the base frame. offset: (3,) point in the link frame (None: link origin).
        """
        body, _ = self.chain._link_anchor(link)
        return self.jacobian_at(body, self.point(link, offset))

    def jacobian_at(self, body, point):
        """Return the (N, 6, nv) Jacobian of base-frame points (N, 3) moving with ``body``."""
        chain = self.chain
        n = len(self)
        jac = np.zeros((n, 6, chain.nv))
        if body < 0:
            return jac
        cols = chain._col_by_body[body]
        if len(cols) == 0:
            return jac
        if _kernels.ENABLED:
            # C-contiguous arguments (subsets may be views): one compiled specialisation,
            # none compiled inside a real-time tick.
            return _kernels.jacobian_at(np.ascontiguousarray(self.rot),
                                        np.ascontiguousarray(self.pos),
                                        np.ascontiguousarray(point, float),
                                        *chain.kernel_columns(body), chain.nv)
        cb = chain._col_body[cols]
        # World axes of the columns: R_body @ axis (C, N, 3).
        axes = np.einsum('cnij,cj->cni', self.rot[cb], chain._col_axis[cols])
        lever = point[None] - self.pos[cb]
        rot_mask = chain._col_is_rot[cols]
        lin = np.where(rot_mask[:, None, None], _cross(axes, lever), axes)
        ang = axes * rot_mask[:, None, None]
        scatter = chain._col_scatter[cols]            # (C, nv)
        # (N, 3, C) @ (C, nv)
        jac[:, :3] = np.transpose(lin, (1, 2, 0)) @ scatter
        jac[:, 3:] = np.transpose(ang, (1, 2, 0)) @ scatter
        return jac

    def _mass_points(self):
        """Return (B, N, 3): each body's mass times its centre of mass, in the base frame."""
        chain = self.chain
        n = len(self)
        local = chain._body_com_local                                   # (B, 3)
        # einsum, not a stack of (3, 3) @ (3, 1) matmuls: 2.5x faster on the 90-DOF chain's
        # 30 bodies x 50 particles, the same sums.
        pts = self.pos + np.einsum('bnij,bj->bni', self.rot, local)   # (B, N, 3)
        return pts * chain._body_mass[:, None, None], n

    def center_of_mass(self):
        """Return the (N, 3) centre of mass of the modelled links in the base frame [m]."""
        chain = self.chain
        if chain.total_mass <= 0.0:
            raise ModelError('the chain has no mass: give its links <inertial> elements (URDF) '
                             'or masses (JointSpec.mass) to use the centre of mass')
        weighted, _ = self._mass_points()
        return (weighted.sum(axis=0) + chain._base_mass_com) / chain.total_mass

    def com_jacobian(self):
        """Return the (N, 3, nv) Jacobian of the centre of mass.

        A rotation about column c's axis a (through o) moves every mass below it:
        d com = a x (W_sub - M_sub o) / M with W_sub, M_sub the subtree's weighted centre
        and mass; a translation moves it by M_sub a / M.
        """
        chain = self.chain
        weighted, n = self._mass_points()
        B = chain.num_bodies
        w_sub = (chain._desc_matrix @ weighted.reshape(B, 3 * n)).reshape(B, n, 3)
        cb = chain._col_body
        axes = np.einsum('cnij,cj->cni', self.rot[cb], chain._col_axis)       # (C, N, 3)
        m_sub = chain._desc_mass[cb][:, None, None]
        lever = w_sub[cb] - m_sub * self.pos[cb]
        cols = np.where(chain._col_is_rot[:, None, None], _cross(axes, lever), axes * m_sub)
        return (np.transpose(cols, (1, 2, 0)) @ chain._col_scatter) / chain.total_mass


class Chain:
    """Kinematic model of the links between a base link and one or several tip links.

    Build with ``Chain.from_urdf`` or ``Chain.from_joints`` (ball joints, for the papers'
    articulated figures). Read-only after construction.
    """

    def __init__(self, joints, base_link, tip_links, robot_name='robot', link_inertials=None):
        """Build from a list of ``JointSpec`` forming a tree rooted at ``base_link``.

        link_inertials: optional {link: (mass [kg], (3,) centre in the link frame)} for links
        that no joint's ``mass`` describes (the base link's own inertial).
        """
        self.robot_name = robot_name
        self._extra_inertials = dict(link_inertials or {})
        self.base_link = base_link
        tip_links = [tip_links] if isinstance(tip_links, str) else list(tip_links)
        if not tip_links:
            raise ModelError('at least one tip link is needed')
        self.tip_links = tuple(tip_links)
        # Every joint the model was built from (for URDFs: the whole tree, including joints
        # above base_link and beside the chain), for frames outside the model (tree_joints).
        self.tree_joints = tuple(joints)
        self._build(list(joints))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(cls, path_or_xml, base_link='base_link', tip_link='tool0', cache_dir=None):
        """Load a chain from a URDF file path or XML string (e.g. ``robot_description``).

        tip_link: one link name, or a list of link names sharing one model (multi-effector).
        cache_dir: where the parsed joints are kept for the next start, keyed by the URDF's
        bytes (``model_cache``; None: its default directory, '': no cache).
        Raises ModelError with the parser's reason, or the list of links when a name is
        unknown.
        """
        joints, name, root_inertials = _parse_urdf(path_or_xml, cache_dir)
        links = {j.parent for j in joints} | {j.child for j in joints}
        if not joints:
            raise ModelError(f'URDF robot {name!r} has no joints: nothing to solve for')
        tips = [tip_link] if isinstance(tip_link, str) else list(tip_link)
        for what, link in [('base', base_link)] + [('tip', t) for t in tips]:
            if link not in links:
                raise ModelError(
                    f'unknown {what} link {link!r}; links in this URDF: '
                    f'{", ".join(_ordered_links(joints))}')
        return cls(joints, base_link, tips, robot_name=name, link_inertials=root_inertials)

    @classmethod
    def from_joints(cls, joints, base_link, tip_link, name='chain'):
        """Build a chain from ``JointSpec`` objects (for ball-jointed figures)."""
        return cls(joints, base_link, tip_link, robot_name=name)

    @classmethod
    def ball_chain(cls, num_segments, segment_length=1.0, max_angle=None, mass=1.0,
                   axis=(0.0, 0.0, 1.0), name='ball_chain'):
        """Return a serial chain of ``num_segments`` 3-DOF ball joints (seed 000, section 6).

        The segments point along ``axis`` at the identity configuration; each segment has
        ``mass`` [kg] at its middle. Links: ``base_link``, ``seg1`` ... ``segK``, tip ``tip``.
        max_angle: ball-joint limit [rad] (rotation angle from the identity); None: no limit.
        """
        axis = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
        limit = np.pi if max_angle is None else float(max_angle)
        joints = []
        parent = 'base_link'
        for i in range(num_segments):
            origin = np.eye(4)
            if i > 0:
                origin[:3, 3] = axis * segment_length
            child = f'seg{i + 1}'
            joints.append(JointSpec(
                name=f'ball{i + 1}', parent=parent, child=child, type='ball', origin=origin,
                upper=limit, mass=mass, com=tuple(axis * segment_length / 2.0)))
            parent = child
        tip = np.eye(4)
        tip[:3, 3] = axis * segment_length
        joints.append(JointSpec(name='tip_joint', parent=parent, child='tip', type='fixed',
                                origin=tip))
        return cls(joints, 'base_link', 'tip', robot_name=name)

    def _build(self, joints):
        by_child = {}
        for j in joints:
            if j.child in by_child:
                raise ModelError(f'link {j.child!r} has two parent joints '
                                 f'({by_child[j.child].name!r} and {j.name!r}): not a tree')
            by_child[j.child] = j
        joint_by_name = {j.name: j for j in joints}

        # Links on the paths base -> tips, checking each tip lies below the base.
        wanted = []
        for tip in self.tip_links:
            path = []
            link = tip
            while link != self.base_link:
                if link not in by_child:
                    raise ModelError(
                        f'tip link {tip!r} is not below base link {self.base_link!r} '
                        f'(its root is {link!r}); pick a base among its ancestors: '
                        f'{", ".join(reversed(_ancestors(tip, by_child)))}')
                path.append(link)
                link = by_child[link].parent
            wanted.extend(reversed(path))
        path_links = list(dict.fromkeys(wanted))
        # Keep fixed children of modelled links too (tool frames, sensors): useful frames.
        children = {}
        for j in joints:
            children.setdefault(j.parent, []).append(j)
        extra = []
        stack = [self.base_link] + path_links
        seen = set(stack)
        while stack:
            link = stack.pop()
            for j in children.get(link, []):
                if j.type == 'fixed' and j.child not in seen:
                    seen.add(j.child)
                    extra.append(j.child)
                    stack.append(j.child)
        model_links = path_links + extra
        order = {link: i for i, link in enumerate(_topological(self.base_link, children))}
        model_links.sort(key=lambda name: order.get(name, 0))

        # Actuated joints in tree order, then mimic sources that lie off the paths.
        for c in model_links:
            if by_child[c].type in ('floating', 'planar'):
                raise ModelError(f'joint {by_child[c].name!r} between {by_child[c].parent!r} and '
                                 f'{c!r} is {by_child[c].type}: only revolute, continuous, '
                                 'prismatic, fixed and ball joints can be on the modelled '
                                 'chain; pick a base link below it')
        movable = [by_child[c] for c in model_links if by_child[c].type != 'fixed']
        state = [j for j in movable if j.mimic is None]
        for j in movable:
            if j.mimic is not None:
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

        names, lower, upper, vel, q_index, v_index = [], [], [], [], {}, {}
        nq = nv = 0
        for j in state:
            names.append(j.name)
            q_index[j.name] = nq
            v_index[j.name] = nv
            if j.type == 'ball':
                lower += [-1.0] * 4
                upper += [1.0] * 4
                vel += [j.velocity] * 4
                nq += 4
                nv += 3
            else:
                lo, hi = _limits_of(j)
                lower.append(lo)
                upper.append(hi)
                vel.append(j.velocity if j.velocity is not None else np.inf)
                nq += 1
                nv += 1
        self.joint_names = tuple(names)
        self.nq, self.nv = nq, nv
        self.lower = _readonly(np.array(lower, dtype=float))
        self.upper = _readonly(np.array(upper, dtype=float))
        # random_configuration's draw: lower + span u is Generator.uniform's own arithmetic
        # (None where a span is not finite: uniform then raises as it always did).
        span = self.upper - self.lower
        self._span = _readonly(span) if np.isfinite(span).all() else None
        self.velocity_limits = _readonly(np.array(vel, dtype=float))
        self._q_index = q_index
        self._v_index = v_index
        self.joint_types = tuple(j.type for j in state)
        # (nq,) True for continuous joints: unbounded in reality; lower/upper hold an
        # artificial +-2pi working range for sampling and clipping.
        continuous = []
        for j in state:
            continuous += [j.type == 'continuous'] * (4 if j.type == 'ball' else 1)
        self.continuous = _readonly(np.array(continuous, dtype=bool))

        # Bodies: one per movable joint in the model, with folded static offsets.
        self._identity = _readonly(np.eye(4))
        body_of_link = {self.base_link: (-1, self._identity)}
        body_parent, body_origin, body_kind, body_axis = [], [], [], []
        body_q, body_mimic, body_joint = [], [], []
        mass_body, mass_com = [], []
        base_mass, base_mass_com = 0.0, np.zeros(3)
        if self.base_link in self._extra_inertials:
            m, c = self._extra_inertials[self.base_link]
            base_mass, base_mass_com = float(m), float(m) * np.asarray(c, dtype=float)
        elif self.base_link in by_child and by_child[self.base_link].mass:
            j = by_child[self.base_link]
            base_mass, base_mass_com = float(j.mass), float(j.mass) * np.asarray(j.com, float)
        link_body, link_offset = [], []
        for link in model_links:
            j = by_child[link]
            pbody, poff = body_of_link[j.parent]
            origin = poff @ _as_matrix(j.origin)
            if j.type == 'fixed':
                body_of_link[link] = (pbody, origin)
            else:
                b = len(body_parent)
                body_parent.append(pbody)
                body_origin.append(origin)
                body_kind.append({'prismatic': _PRISMATIC, 'ball': _BALL}.get(j.type, _REVOLUTE))
                axis = np.asarray(j.axis if j.axis is not None else (1.0, 0.0, 0.0), float)
                norm = np.linalg.norm(axis)
                if j.type != 'ball' and norm < 1e-9:
                    raise ModelError(f'joint {j.name!r} has a zero axis')
                body_axis.append(axis / max(norm, 1e-12))
                if j.mimic is not None:
                    src = joint_by_name[j.mimic[0]]
                    body_q.append(q_index[src.name])
                    body_mimic.append((float(j.mimic[1]), float(j.mimic[2]), v_index[src.name]))
                else:
                    body_q.append(q_index[j.name])
                    body_mimic.append(None)
                body_joint.append(j.name)
                body_of_link[link] = (b, self._identity)
            # Inertial of this link, expressed in its body frame.
            m = float(j.mass or 0.0)
            if m > 0.0:
                b, off = body_of_link[link]
                c = off[:3, :3] @ np.asarray(j.com, float) + off[:3, 3]
                if b < 0:
                    base_mass += m
                    base_mass_com += m * c
                else:
                    mass_body.append(b)
                    mass_com.append(m * np.append(c, 1.0))
        self.link_names = (self.base_link,) + tuple(model_links)
        for link in self.link_names:
            b, off = body_of_link[link]
            link_body.append(b)
            link_offset.append(off)
        # Read-only offsets (one array type for the kernels; callers cannot alter the model).
        self._body_of_link = {link: (b, off if off is self._identity else _readonly(off))
                              for link, (b, off) in body_of_link.items()}
        self._link_body = np.array(link_body, dtype=int)
        self._link_offset = _readonly(np.array(link_offset).reshape(-1, 4, 4))
        self.num_bodies = B = len(body_parent)
        self._body_parent = tuple(body_parent)
        self._body_kind = tuple(body_kind)
        self._body_joint = tuple(body_joint)
        self._body_q = tuple(body_q)
        self._body_mimic = tuple(body_mimic)
        self._body_origin = [_readonly(o) for o in body_origin]
        self._body_origins = _readonly(np.array(body_origin, dtype=float).reshape(-1, 4, 4))
        self._body_offsets = _readonly(self._body_origins[:, :3, 3].copy())
        self._body_axes = _readonly(np.array(body_axis, dtype=float).reshape(-1, 3))
        # Revolute motion: R_origin @ Rot(axis, t) = A0 + sin(t) A1 + (1 - cos(t)) A2.
        self._rev_terms = []
        for o, axis in zip(body_origin, body_axis):
            k = skew(axis)
            r0 = o[:3, :3]
            self._rev_terms.append(np.stack([r0 @ k, r0 @ k @ k]).reshape(2, 9))
        self._body_axis = body_axis
        self._body_offset = [_readonly(o[:3, 3].copy()) for o in body_origin]
        self._body_rot0 = _readonly(np.array([o[:3, :3].ravel() for o in body_origin])
                                    .reshape(B, 9))
        rev = [b for b in range(B) if body_kind[b] == _REVOLUTE]
        self._revolute_bodies = np.array(rev, dtype=int)
        self._rev_q = np.array([body_q[b] for b in rev], dtype=int)
        self._rev_mult = np.array([1.0 if body_mimic[b] is None else body_mimic[b][0]
                                   for b in rev])
        self._rev_add = np.array([0.0 if body_mimic[b] is None else body_mimic[b][1]
                                  for b in rev])
        self._rev_terms_all = np.array([self._rev_terms[b] for b in rev]).reshape(-1, 2, 9)
        self._rev_has_mimic = any(body_mimic[b] is not None for b in rev)
        self._all_revolute = len(rev) == B
        self._ball_bodies = tuple((b, body_q[b]) for b in range(B) if body_kind[b] == _BALL)
        self._prismatic_bodies = _readonly(
            np.array([b for b in range(B) if body_kind[b] == _PRISMATIC], dtype=int))
        self._descendants = tuple(tuple(d for d in range(B) if _is_ancestor(body_parent, b, d))
                                  for b in range(B))

        # Jacobian columns: one per revolute/prismatic body, three per ball body.
        col_body, col_axis, col_rot, col_scatter, col_v, col_mult = [], [], [], [], [], []
        for b in range(B):
            if body_kind[b] == _BALL:
                v0 = v_index[body_joint[b]]
                for k in range(3):
                    row = np.zeros(nv)
                    row[v0 + k] = 1.0
                    col_body.append(b)
                    col_axis.append(np.eye(3)[k])
                    col_rot.append(True)
                    col_scatter.append(row)
                    col_v.append(v0 + k)
                    col_mult.append(1.0)
            else:
                row = np.zeros(nv)
                if body_mimic[b] is None:
                    col_v.append(v_index[body_joint[b]])
                    col_mult.append(1.0)
                else:
                    col_v.append(body_mimic[b][2])
                    col_mult.append(body_mimic[b][0])
                row[col_v[-1]] = col_mult[-1]
                col_body.append(b)
                col_axis.append(body_axis[b])
                col_rot.append(body_kind[b] == _REVOLUTE)
                col_scatter.append(row)
        self._col_body = _readonly(np.array(col_body, dtype=int))
        self._col_axis = _readonly(np.array(col_axis, dtype=float).reshape(-1, 3))
        self._col_is_rot = _readonly(np.array(col_rot, dtype=bool))
        self._col_scatter = _readonly(np.array(col_scatter, dtype=float).reshape(-1, nv))
        # Columns acting on each body: those of its ancestors (and itself).
        ancestors = []
        for b in range(B):
            chain_b, a = set(), b
            while a >= 0:
                chain_b.add(a)
                a = body_parent[a]
            ancestors.append(chain_b)
        self._col_by_body = tuple(
            _readonly(np.array([c for c, cb in enumerate(col_body) if cb in ancestors[b]],
                               dtype=int)) for b in range(B))
        # Mass per body: total mass and mass-weighted centre in the body frame.
        self._body_mass = np.zeros(B)
        self._body_mass_com = np.zeros((B, 3))
        for b, mc in zip(mass_body, mass_com):
            self._body_mass[b] += mc[3]
            self._body_mass_com[b] += mc[:3]
        self._base_mass_com = base_mass_com
        self._massive_bodies = [b for b in range(B) if self._body_mass[b] > 0.0]
        self._body_com_local = np.where(self._body_mass[:, None] > 0.0,
                                        self._body_mass_com / np.maximum(self._body_mass, 1e-300)
                                        [:, None], 0.0)
        self._desc_matrix = np.array([[1.0 if _is_ancestor(body_parent, b, d) else 0.0
                                       for d in range(B)] for b in range(B)]).reshape(B, B)
        self._desc_mass = self._desc_matrix @ self._body_mass
        self.total_mass = float(base_mass + self._body_mass.sum())
        self._ball_slices = tuple((q_index[n], v_index[n], j.upper) for n, j in
                                  zip(names, state) if j.type == 'ball')
        scalar = [n for n, j in zip(names, state) if j.type != 'ball']
        self._scalar_q = _readonly(np.array([q_index[n] for n in scalar], dtype=int))
        self._scalar_v = _readonly(np.array([v_index[n] for n in scalar], dtype=int))
        self.has_ball_joints = bool(self._ball_slices)
        self.ball_limits = _readonly(np.array([s[2] for s in self._ball_slices], dtype=float))
        self._ball_q_idx = _readonly(np.array(
            [[s[0] + i for i in range(4)] for s in self._ball_slices], dtype=int).reshape(-1, 4))
        self._ball_v_idx = _readonly(np.array(
            [[s[1] + i for i in range(3)] for s in self._ball_slices], dtype=int).reshape(-1, 3))
        self._ball_body_idx = np.array([b for b, _ in self._ball_bodies], dtype=int)
        self._ball_body_q = np.array([[qi + i for i in range(4)] for _, qi in self._ball_bodies],
                                     dtype=int).reshape(-1, 4)
        self._ball_origin_rot = np.array([self._body_origin[b][:3, :3]
                                          for b, _ in self._ball_bodies]).reshape(-1, 1, 3, 3)
        # Flat arrays of the compiled kernels (smcik_ros.kernels).
        mimic_mult = [1.0 if m is None else m[0] for m in body_mimic]
        mimic_add = [0.0 if m is None else m[1] for m in body_mimic]
        self._k_fk = (np.array(body_parent, dtype=np.int64).reshape(-1),
                      np.array(body_kind, dtype=np.int64).reshape(-1),
                      np.array(body_q, dtype=np.int64).reshape(-1),
                      np.array(mimic_mult, dtype=float).reshape(-1),
                      np.array(mimic_add, dtype=float).reshape(-1),
                      np.ascontiguousarray(self._body_origins[:, :3, :3]),
                      np.array(self._rev_terms, dtype=float).reshape(-1, 2, 9),
                      np.ascontiguousarray(self._body_offsets),
                      np.ascontiguousarray(self._body_axes))
        self._pose_paths = {}     # link -> (bodies root first, link in its body) of fk's kernel
        self._k_cols = (self._col_body.astype(np.int64), np.ascontiguousarray(self._col_axis),
                        self._col_is_rot.copy(), np.array(col_v, dtype=np.int64),
                        np.array(col_mult, dtype=float))
        self._k_cols_of_body = tuple(c.astype(np.int64) for c in self._col_by_body)
        # Characteristic length [m]: sum of the static offsets, to scale position errors.
        self.length_scale = max(float(sum(np.linalg.norm(o[:3, 3]) for o in body_origin)
                                      + sum(np.linalg.norm(off[:3, 3]) for off in link_offset)),
                                1e-3)

    # ------------------------------------------------------------------ properties
    @property
    def n(self):
        """Number of configuration entries (``nq``)."""
        return self.nq

    @property
    def tip_link(self):
        """The first (default) tip link."""
        return self.tip_links[0]

    def joint_index(self, name):
        """Return the index of joint ``name`` in the configuration vector."""
        try:
            return self._q_index[name]
        except KeyError:
            raise ModelError(f'unknown joint {name!r}; joints of this chain: '
                             f'{", ".join(self.joint_names)}') from None

    def joint_velocity_index(self, name):
        """Return the index of joint ``name``'s first entry in tangent (velocity) vectors."""
        self.joint_index(name)
        return self._v_index[name]

    def link_anchor(self, link=None):
        """Return (body, offset) of ``link`` (default: the first tip).

        body: index of the movable-joint body the link is rigidly attached to (-1: the base);
        offset: read-only (4, 4) pose of the link in that body's frame [m]. Raises ModelError
        naming the chain's links when ``link`` is unknown.
        """
        if link is None:
            link = self.tip_links[0]
        try:
            return self._body_of_link[link]
        except KeyError:
            raise ModelError(f'unknown link {link!r}; links of this chain: '
                             f'{", ".join(self.link_names)}') from None

    _link_anchor = link_anchor

    def is_body_frame(self, link):
        """Return True when ``link``'s frame is a body frame (the child of a movable joint)."""
        body, offset = self.link_anchor(link)
        return body >= 0 and offset is self._identity

    def has_link(self, link):
        """Return True when ``link`` is part of the model."""
        return link in self._body_of_link

    # ------------------------------------------------------------------ structure
    # Read-only views of the model's arrays and index maps, for solvers, goals and
    # kernels. A "body" is one movable joint of the model (B = num_bodies, in tree order:
    # a parent's index is below its children's); fixed joints are folded into offsets.
    # A Jacobian "column" is one motion axis: one per revolute/prismatic body and three
    # per ball body (C columns in all).
    @property
    def body_parent(self):
        """(B,) tuple of int: each body's parent body (-1: the base)."""
        return self._body_parent

    @property
    def body_kind(self):
        """(B,) tuple of int: BODY_REVOLUTE, BODY_PRISMATIC or BODY_BALL."""
        return self._body_kind

    @property
    def body_joint(self):
        """(B,) tuple of str: the URDF/JointSpec joint name of each body."""
        return self._body_joint

    @property
    def body_q(self):
        """(B,) tuple of int: first configuration index driving each body (mimic: source's)."""
        return self._body_q

    @property
    def body_mimic(self):
        """(B,) tuple: None, or (multiplier, offset, source's tangent index) for mimic joints."""
        return self._body_mimic

    @property
    def body_origin(self):
        """(B, 4, 4) array: each body's joint frame in its parent body's frame at q = 0 [m]."""
        return self._body_origins

    @property
    def body_offset(self):
        """(B, 3) array: the translations of ``body_origin`` [m]."""
        return self._body_offsets

    @property
    def body_axis(self):
        """(B, 3) array: unit joint axes in the joint frames (x for ball bodies, unused)."""
        return self._body_axes

    @property
    def descendants(self):
        """(B,) tuple of tuples: each body and the bodies below it, in tree order."""
        return self._descendants

    @property
    def prismatic_bodies(self):
        """(P,) int array: the prismatic bodies."""
        return self._prismatic_bodies

    @property
    def ball_bodies(self):
        """Tuple of (body, first q index) of the ball-joint bodies."""
        return self._ball_bodies

    @property
    def ball_joints(self):
        """Tuple of (first q index, first tangent index, angle limit [rad]) per ball joint."""
        return self._ball_slices

    @property
    def scalar_q(self):
        """(S,) int array: configuration indices of the scalar (non-ball) joints."""
        return self._scalar_q

    @property
    def scalar_v(self):
        """(S,) int array: tangent indices of the scalar joints (same order as ``scalar_q``)."""
        return self._scalar_v

    @property
    def ball_q_index(self):
        """(K, 4) int array: configuration indices (w, x, y, z) of each ball joint."""
        return self._ball_q_idx

    @property
    def ball_v_index(self):
        """(K, 3) int array: tangent indices (rotation vector) of each ball joint."""
        return self._ball_v_idx

    @property
    def column_body(self):
        """(C,) int array: the body each Jacobian column moves."""
        return self._col_body

    @property
    def column_axis(self):
        """(C, 3) array: each column's unit axis in its body's frame."""
        return self._col_axis

    @property
    def column_is_rotation(self):
        """(C,) bool array: True for rotations (revolute, ball), False for translations."""
        return self._col_is_rot

    @property
    def column_scatter(self):
        """(C, nv) array: maps column rates to tangent entries (mimic multipliers included)."""
        return self._col_scatter

    def kernel_bodies(self):
        """Return the body arguments of ``kernels.fk``: (parent, kind, q index, mimic
        multiplier, mimic offset, rot0 (B, 3, 3), terms (B, 2, 9), offset (B, 3), axis (B, 3))."""
        return self._k_fk

    def kernel_columns(self, body):
        """Return the column arguments of the kernels (``smcik_ros.kernels``) for ``body``.

        (cols, column_body, column_axis, column_is_rotation, column tangent index, column
        factor): int64/float/bool arrays; each column drives one tangent entry, scaled by
        its factor (the mimic multiplier, else 1).
        """
        return (self._k_cols_of_body[body],) + self._k_cols

    @property
    def columns_of_body(self):
        """(B,) tuple of int arrays: the columns acting on each body (its ancestors' and own)."""
        return self._col_by_body

    # ------------------------------------------------------------------ configurations
    def neutral_configuration(self):
        """Return the (nq,) mid-range configuration (identity for ball joints)."""
        q = 0.5 * (self.lower + self.upper)
        if self.has_ball_joints:
            q[self._ball_q_idx] = (1.0, 0.0, 0.0, 0.0)
        return q

    def random_configuration(self, rng, size=None):
        """Return uniform random in-limit configurations: (nq,) or (size, nq).

        Ball joints are uniform over rotations within their angle limit.
        """
        shape = (1 if size is None else int(size), self.nq)
        if self._span is not None and isinstance(rng, np.random.Generator):
            # The numbers Generator.uniform(lower, upper, shape) returns, bit for bit (it
            # computes lower + (upper - lower) u from one double per entry, in C order):
            # without its broadcasting path, 1.5 instead of 26 us for solve()'s 7 rows.
            q = self.lower + self._span * rng.random(shape)
        else:
            q = rng.uniform(self.lower, self.upper, size=shape)
        if self.has_ball_joints:
            q[:, self._ball_q_idx] = _random_ball(rng, shape[0], self.ball_limits)
        return q[0] if size is None else q

    def within_limits(self, q, tol=1e-9):
        """Return whether configurations are inside the joint limits: bool or (N,) bool."""
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        q2 = np.atleast_2d(q)
        ok = np.all((q2 >= self.lower - tol) & (q2 <= self.upper + tol), axis=-1)
        ok &= np.all(np.isfinite(q2), axis=-1)
        if self.has_ball_joints:
            quat = q2[:, self._ball_q_idx]
            norm = np.sqrt(np.sum(quat * quat, axis=-1))
            angle = 2.0 * np.arccos(np.clip(np.abs(quat[..., 0]) / np.maximum(norm, 1e-12),
                                            0.0, 1.0))
            ok &= np.all((np.abs(norm - 1.0) < 1e-6) & (angle <= self.ball_limits + tol),
                         axis=-1)
        return bool(ok[0]) if single else ok

    def clip(self, q):
        """Return configurations projected into the joint limits (same shape as ``q``)."""
        if not self.has_ball_joints and isinstance(q, np.ndarray) and \
                q.dtype == np.float64 and q.shape == self.lower.shape:
            # One float configuration (solve(), reset): np.clip's own result, in two ufunc
            # calls instead of a copy, atleast_2d and np.clip's dispatch.
            return np.minimum(np.maximum(q, self.lower), self.upper)
        q = np.array(q, dtype=float)
        single = q.ndim == 1
        q2 = np.atleast_2d(q)
        np.clip(q2, self.lower, self.upper, out=q2)
        if self.has_ball_joints:
            q2[:, self._ball_q_idx] = _clip_ball(q2[:, self._ball_q_idx], self.ball_limits)
        return q2[0] if single else q2

    def integrate(self, q, dv):
        """Return q moved by tangent steps ``dv`` (N, nv) or (nv,); not clipped."""
        q = np.array(q, dtype=float)
        dv = np.asarray(dv, dtype=float)
        single = q.ndim == 1
        q2, dv2 = np.atleast_2d(q), np.atleast_2d(dv)
        if not self.has_ball_joints:
            q2 = q2 + dv2
        else:
            q2 = np.array(np.broadcast_to(q2, (max(len(q2), len(dv2)), self.nq)))
            q2[:, self._scalar_q] += dv2[:, self._scalar_v]
            bq = self._ball_q_idx
            q2[:, bq] = quat_multiply(q2[:, bq], quat_from_rotvec(dv2[:, self._ball_v_idx]))
        return q2[0] if single else q2

    def check_configuration(self, q, what='q'):
        """Return ``q`` as a float array of shape (nq,) or (N, nq), or raise ModelError."""
        arr = np.asarray(q, dtype=float)
        if arr.ndim not in (1, 2) or arr.shape[-1] != self.nq:
            raise ModelError(f'{what} must have shape ({self.nq},) or (N, {self.nq}) for joints '
                             f'{list(self.joint_names)}; got shape {arr.shape}')
        if not np.isfinite(arr).all():
            raise ModelError(f'{what} contains NaN or infinite values: {arr}')
        return arr

    # ------------------------------------------------------------------ kinematics
    def frames(self, q):
        """Return the ``Frames`` (cached forward kinematics) of (nq,) or (N, nq) configurations."""
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        q2 = np.atleast_2d(q)
        if q2.ndim != 2 or q2.shape[-1] != self.nq:
            raise ModelError(f'configuration must have {self.nq} entries (joints '
                             f'{list(self.joint_names)}); got shape {q.shape}')
        if _kernels.ENABLED:
            # C-contiguous and writable (one compiled specialisation for every caller).
            rot, pos = _kernels.fk(_kernels.as_rows(q2, self.nq), *self._k_fk)
            return Frames(self, q2, rot, pos, single)
        n = q2.shape[0]
        rot = self._local_rotations(q2)     # (B, N, 3, 3), chained in place below
        pos = np.empty((self.num_bodies, n, 3))
        for b, parent in enumerate(self._body_parent):
            offset = self._body_offset[b]
            if parent < 0:
                pos[b] = offset
            else:
                prot = rot[parent]
                np.matmul(prot, rot[b], out=rot[b])
                np.add(pos[parent], (prot.reshape(3 * n, 3) @ offset).reshape(n, 3), out=pos[b])
        if self._prismatic_bodies.size:
            self._add_prismatic(q2, rot, pos)
        return Frames(self, q2, rot, pos, single)

    def _local_rotations(self, q2):
        """Return (B, N, 3, 3): each body's rotation relative to its parent body frame."""
        n = q2.shape[0]
        B = self.num_bodies
        local = np.empty((B, n, 9))
        local[:] = self._body_rot0[:, None, :]
        rev = self._revolute_bodies
        if rev.size:
            value = q2[:, self._rev_q].T
            if self._rev_has_mimic:
                value = value * self._rev_mult[:, None] + self._rev_add[:, None]
            sc = np.empty((rev.size, n, 2))
            np.sin(value, out=sc[..., 0])
            np.cos(value, out=sc[..., 1])
            np.subtract(1.0, sc[..., 1], out=sc[..., 1])
            if self._all_revolute:
                local += sc @ self._rev_terms_all
            else:
                local[rev] += sc @ self._rev_terms_all
        local = local.reshape(B, n, 3, 3)
        if self._ball_bodies:
            rot = quat_to_matrix(q2[:, self._ball_body_q]).transpose(1, 0, 2, 3)
            local[self._ball_body_idx] = self._ball_origin_rot @ rot
        return local

    def _add_prismatic(self, q2, rot, pos):
        """Add the prismatic displacements along the axes, propagated to descendants."""
        n = q2.shape[0]
        for b in self._prismatic_bodies:
            value = q2[:, self._body_q[b]]
            mimic = self._body_mimic[b]
            if mimic is not None:
                value = mimic[0] * value + mimic[1]
            # The body frame is the joint frame (prismatic motion does not rotate it).
            shift = (rot[b].reshape(3 * n, 3) @ self._body_axis[b]).reshape(n, 3) * value[:, None]
            for d in self._descendants[b]:
                pos[d] += shift

    def fk(self, q, link=None):
        """Return the pose of ``link`` (default: the tip) in the base frame.

        q: (nq,) -> (4, 4); (N, nq) -> (N, 4, 4). Units: metres.
        """
        if _kernels.ENABLED:
            path, off = self._pose_path(link)
            if path is not None:
                q = np.asarray(q, dtype=float)
                q2 = np.atleast_2d(q)
                if q2.ndim != 2 or q2.shape[-1] != self.nq:
                    raise ModelError(f'configuration must have {self.nq} entries (joints '
                                     f'{list(self.joint_names)}); got shape {q.shape}')
                out = np.empty((q2.shape[0], 4, 4))
                _kernels.link_pose_path(_kernels.as_rows(q2, self.nq), path,
                                        *self._k_fk[1:], off, out)
                return out[0] if q.ndim == 1 else out
        frames = self.frames(q)
        pose = frames.link_pose(link)
        return pose[0] if frames.single else pose

    def _pose_path(self, link):
        """Return (path, off) for ``kernels.link_pose_path``: the bodies from the root to the
        link's body (int64) and the link in that body's frame (3, 4); (None, None) when a
        ball joint is on the path (the general ``frames`` then)."""
        try:
            return self._pose_paths[link]
        except KeyError:
            pass
        body, anchor = self.link_anchor(link)
        path = []
        while body >= 0:
            path.append(body)
            body = int(self._k_fk[0][body])
        path = np.array(path[::-1], dtype=np.int64)
        entry = (None, None) if np.any(self._k_fk[1][path] == 2) else \
            (path, np.ascontiguousarray(anchor[:3]))
        self._pose_paths[link] = entry
        return entry

    def link_poses(self, q):
        """Return every modelled link's pose: (L, 4, 4) for (nq,) q, (N, L, 4, 4) for (N, nq)."""
        frames = self.frames(q)
        poses = frames.link_poses()
        return poses[0] if frames.single else poses

    def jacobian(self, q, link=None, offset=None):
        """Return the geometric Jacobian of a point on ``link``: (6, nv) or (N, 6, nv).

        Rows: linear velocity of the point, then angular velocity, in the base frame.
        """
        frames = self.frames(q)
        jac = frames.jacobian(link, offset)
        return jac[0] if frames.single else jac

    def center_of_mass(self, q):
        """Return the centre of mass [m] in the base frame: (3,) or (N, 3)."""
        frames = self.frames(q)
        com = frames.center_of_mass()
        return com[0] if frames.single else com

    def __repr__(self):
        return (f'Chain({self.robot_name!r}, base={self.base_link!r}, tips={list(self.tip_links)},'
                f' joints={list(self.joint_names)})')


# ---------------------------------------------------------------------- helpers
def _readonly(arr):
    arr.setflags(write=False)
    return arr


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


def _cross(a, b):
    """Return the cross products of (..., 3) arrays (numpy.cross costs more on small arrays)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out[..., 0] = a1 * b2 - a2 * b1
    out[..., 1] = a2 * b0 - a0 * b2
    out[..., 2] = a0 * b1 - a1 * b0
    return out


def _is_ancestor(parents, a, d):
    """Return True when body ``a`` is ``d`` or one of its ancestors."""
    while d >= 0:
        if d == a:
            return True
        d = parents[d]
    return False


def _ancestors(link, by_child):
    out = [link]
    while link in by_child:
        link = by_child[link].parent
        out.append(link)
    return out


def _topological(root, children):
    order, stack = [], [root]
    while stack:
        link = stack.pop()
        order.append(link)
        stack.extend(reversed([j.child for j in children.get(link, [])]))
    return order


def _ordered_links(joints):
    children, childs = {}, set()
    for j in joints:
        children.setdefault(j.parent, []).append(j)
        childs.add(j.child)
    roots = [j.parent for j in joints if j.parent not in childs]
    out = []
    for root in dict.fromkeys(roots):
        out += _topological(root, children)
    return out


def _random_ball(rng, n, limits):
    """Return (n, B, 4) quaternions uniform over rotations of angle <= limits (B,)."""
    limits = np.asarray(limits, dtype=float)
    # Uniform on SO(3) has angle density (1 - cos a) / pi: invert its CDF a - sin a.
    grid = np.linspace(0.0, 1.0, 1024)[:, None] * np.minimum(limits, np.pi)
    cdf = grid - np.sin(grid)
    u = rng.uniform(size=(n, len(limits)))
    angle = np.empty((n, len(limits)))
    for b in range(len(limits)):
        angle[:, b] = np.interp(u[:, b] * cdf[-1, b], cdf[:, b], grid[:, b])
    axis = rng.normal(size=(n, len(limits), 3))
    axis /= np.linalg.norm(axis, axis=-1, keepdims=True)
    return quat_from_rotvec(axis * angle[..., None])


def _clip_ball(quat, limits):
    """Return unit quaternions (w >= 0) whose rotation angle is at most ``limits``.

    quat: (..., B, 4); limits: (B,) [rad].
    """
    if _kernels.ENABLED and quat.ndim >= 2 and quat.shape[-2] == limits.shape[0]:
        return _kernels.clip_ball_rows(_kernels.as_rows(quat, 4),
                                       np.ascontiguousarray(limits, dtype=float)
                                       ).reshape(quat.shape)
    quat = quat / np.maximum(np.sqrt(np.sum(quat * quat, axis=-1, keepdims=True)), 1e-12)
    quat = np.where(quat[..., :1] < 0.0, -quat, quat)
    cos_half = np.cos(0.5 * np.minimum(limits, np.pi))
    over = quat[..., 0] < cos_half - 1e-15
    if np.any(over):
        vec = quat[..., 1:]
        vec = vec / np.maximum(np.sqrt(np.sum(vec * vec, axis=-1, keepdims=True)), 1e-12)
        sin_half = np.sqrt(1.0 - cos_half * cos_half)
        clipped = np.concatenate([np.broadcast_to(cos_half, quat.shape[:-1])[..., None],
                                  vec * sin_half[..., None]], axis=-1)
        quat = np.where(over[..., None], clipped, quat)
    return quat


def _parse_urdf(path_or_xml, cache_dir=None):
    """Return (list of JointSpec, robot name, root inertials) parsed with yourdfpy, or read
    from the model cache (``model_cache``; cache_dir '' : none); ModelError on failure."""
    text, source = _urdf_bytes(path_or_xml)
    key = None
    if cache_dir != '':
        code = model_cache.source_digest(os.path.abspath(__file__))
        key = None if code is None else model_cache.digest(
            'urdf-joints', code, model_cache.versions('yourdfpy', 'lxml'), text)
        hit = model_cache.load(cache_dir, 'urdf', key)
        if hit is not None:
            try:
                meta, arrays = hit
                return (joints_from_records(meta['joints'], arrays['origins']), meta['name'],
                        {k: (v[0], np.asarray(v[1])) for k, v in meta['inertials'].items()})
            except (KeyError, TypeError, ValueError, IndexError):
                pass            # an entry of another layout: parse again
    joints, name, root_inertials = _parse_urdf_text(text, source)
    if key is not None:
        records, origins = joints_to_records(joints)
        model_cache.store(cache_dir, 'urdf', key, {
            'joints': records, 'name': name,
            'inertials': {k: [float(m), [float(v) for v in c]]
                          for k, (m, c) in root_inertials.items()}}, {'origins': origins})
    return joints, name, root_inertials


def joints_to_records(joints):
    """Return ([dict per JointSpec, JSON-able], (J, 4, 4) origins): the specs as data."""
    records, origins = [], []
    for j in joints:
        records.append({
            'name': j.name, 'parent': j.parent, 'child': j.child, 'type': j.type,
            'axis': None if j.axis is None else [float(v) for v in j.axis],
            'lower': None if j.lower is None else float(j.lower),
            'upper': None if j.upper is None else float(j.upper),
            'velocity': float(j.velocity), 'mass': float(j.mass),
            'com': [float(v) for v in j.com], 'origin': j.origin is not None,
            'mimic': None if j.mimic is None else [j.mimic[0], float(j.mimic[1]),
                                                   float(j.mimic[2])]})
        origins.append(np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float))
    return records, np.array(origins, dtype=float).reshape(len(records), 4, 4)


def joints_from_records(records, origins):
    """Return the JointSpecs that ``joints_to_records`` gave ``records`` and ``origins`` for."""
    return [JointSpec(
        name=r['name'], parent=r['parent'], child=r['child'], type=r['type'],
        origin=np.array(origins[i], dtype=float) if r['origin'] else None,
        axis=None if r['axis'] is None else tuple(r['axis']), lower=r['lower'],
        upper=r['upper'], velocity=r['velocity'], mass=r['mass'], com=tuple(r['com']),
        mimic=None if r['mimic'] is None else tuple(r['mimic']))
        for i, r in enumerate(records)]


def _urdf_bytes(path_or_xml):
    """Return (the URDF's bytes, where they came from) for a file path or the XML text."""
    text = path_or_xml
    source = 'robot_description string'
    if isinstance(path_or_xml, os.PathLike) or (
            isinstance(path_or_xml, str) and not path_or_xml.lstrip().startswith('<')):
        path = os.fspath(path_or_xml)
        if not os.path.isfile(path):
            raise ModelError(f'URDF file {path!r} does not exist (cwd {os.getcwd()!r}); give an '
                             'existing path or the XML text itself')
        with open(path, 'rb') as f:
            text = f.read()
        source = f'URDF file {path!r}'
    if isinstance(text, str):
        text = text.encode('utf-8')
    return text, source


def require_robot_name(root, source):
    """Raise ModelError when the <robot> element ``root`` has no name (yourdfpy would fail
    with a bare KeyError 'name'; ROS's own parser, urdfdom, rejects it too)."""
    if root.get('name') is None:
        raise ModelError(f'{source}: the <robot> element has no name attribute, which the URDF '
                         'format requires (robot_state_publisher and MoveIt reject it too); '
                         'write <robot name="..."> (any name)')


def _parse_urdf_text(text, source):
    """Return (list of JointSpec, robot name, root inertials): ``text`` parsed with yourdfpy."""
    try:
        from lxml import etree
        import yourdfpy
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise ModelError(f'the URDF parser is not installed ({exc}); '
                         'pip install yourdfpy') from exc
    # Strict XML parse first: yourdfpy silently 'recovers' broken XML.
    try:
        root = etree.fromstring(text, parser=etree.XMLParser(remove_blank_text=True))
    except etree.XMLSyntaxError as exc:
        raise ModelError(f'{source} is not well-formed XML: {exc}') from exc
    if root.tag != 'robot':
        raise ModelError(f'{source} is not a URDF: root element is <{root.tag}>, expected <robot>')
    require_robot_name(root, source)
    try:
        urdf = yourdfpy.URDF.load(io.BytesIO(text), build_scene_graph=False, load_meshes=False,
                                  build_collision_scene_graph=False)
    except Exception as exc:
        raise ModelError(f'{source} could not be parsed as URDF: {exc}') from exc
    links = {link.name: link for link in urdf.robot.links}
    joints = []
    for j in urdf.robot.joints:
        if j.type not in ('revolute', 'continuous', 'prismatic', 'fixed', 'floating', 'planar'):
            raise ModelError(f'joint {j.name!r} has unknown type {j.type!r}')
        for end in (j.parent, j.child):
            if end not in links:
                raise ModelError(f'joint {j.name!r} refers to link {end!r}, which the URDF does '
                                 f'not define; links: {", ".join(links)}')
        lim = j.limit
        mass, com = 0.0, (0.0, 0.0, 0.0)
        inertial = links[j.child].inertial
        if inertial is not None and inertial.mass:
            mass = float(inertial.mass)
            if inertial.origin is not None:
                com = tuple(np.asarray(inertial.origin)[:3, 3])
        mimic = None
        if j.mimic is not None:
            mimic = (j.mimic.joint, 1.0 if j.mimic.multiplier is None else j.mimic.multiplier,
                     0.0 if j.mimic.offset is None else j.mimic.offset)
        joints.append(JointSpec(
            name=j.name, parent=j.parent, child=j.child, type=j.type,
            origin=np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float),
            axis=(1.0, 0.0, 0.0) if j.axis is None else tuple(j.axis),
            lower=None if lim is None else lim.lower,
            upper=None if lim is None else lim.upper,
            velocity=np.inf if lim is None or lim.velocity is None else float(lim.velocity),
            mass=mass, com=com, mimic=mimic))
    # Inertials of root links (no joint carries them): base_link's own mass.
    children = {j.child for j in joints}
    root_inertials = {}
    for name, link in links.items():
        if name not in children and link.inertial is not None and link.inertial.mass:
            origin = np.eye(4) if link.inertial.origin is None else link.inertial.origin
            root_inertials[name] = (float(link.inertial.mass), np.asarray(origin)[:3, 3])
    return joints, urdf.robot.name, root_inertials
