"""Kinematic chain model: URDF (or programmatic) -> batched forward kinematics and Jacobians.

The model is the sub-tree of a robot between ``base_link`` and one or several tip links.
Fixed joints are folded into static offsets at construction (``builder``); per call the
compiled kernels (``kernels.fk``) build only the joint motions, batched over
configurations, from the chain's packed records (``Chain.records``).

Configuration ``q`` has ``chain.nq`` entries: one per revolute, continuous or prismatic
joint [rad or m] and four per ball joint (a unit quaternion w, x, y, z). Velocities and
Jacobian columns live in the tangent space of ``chain.nv`` entries (three per ball joint,
a rotation vector in the joint's own frame). For URDF robots ``nq == nv == n``.
"""

import numpy as np

from ..errors import ModelError
from ..kernels.fk import fk as _fk_kernel
from ..kernels.fk import jacobian_at as _jacobian_kernel
from ..kernels.fk import link_pose as _link_pose_kernel
from ..kernels.jit import as_rows
from ..kernels.motion import clip_ball_rows
from ..rotations import quat_from_rotvec, quat_multiply
from .builder import JointSpec, build, readonly
from .floating import FLOATING_JOINTS, base_coordinates, base_poses, floating_joints
from .passive import lumped_centres, passive_values
from .urdf import ordered_links, parse_urdf

__all__ = ['Chain', 'Frames', 'JointSpec', 'ball_chain']


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
        if isinstance(index, slice):
            return Frames(self.chain, self.q[index], self.rot[:, index], self.pos[:, index],
                          False)
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        # take: a third of the time of fancy indexing along the rows axis (~4 -> ~1.5 us)
        return Frames(self.chain, self.q.take(index, axis=0), self.rot.take(index, axis=1),
                      self.pos.take(index, axis=1), False)

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
        body, offset = self.chain.link_anchor(link)
        n = len(self)
        if body < 0:
            return (np.broadcast_to(offset[:3, :3], (n, 3, 3)),
                    np.broadcast_to(offset[:3, 3], (n, 3)))
        if offset is self.chain._identity:
            return self.rot[body], self.pos[body]
        return self.rot[body] @ offset[:3, :3], self.body_point(body, offset[:3, 3])

    def link_pose(self, link=None):
        """Return the (N, 4, 4) poses of ``link`` (default: the first tip) in the base frame."""
        body, offset = self.chain.link_anchor(link)
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
        body, anchor = self.chain.link_anchor(link)
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
        body, _ = self.chain.link_anchor(link)
        return self.jacobian_at(body, self.point(link, offset))

    def jacobian_at(self, body, point):
        """Return the (N, 6, nv) Jacobian of base-frame points (N, 3) moving with ``body``."""
        # C-contiguous arguments (subsets may be views): one compiled specialisation, none
        # compiled inside a real-time tick.
        return _jacobian_kernel(self.chain.records.columns, np.ascontiguousarray(self.rot),
                                np.ascontiguousarray(self.pos), int(body),
                                np.ascontiguousarray(point, float))

    def _mass_points(self):
        """Return ((B, N, 3) each body's mass times its centre of mass, (3,) the base's), in
        the base frame."""
        chain = self.chain
        n = len(self)
        local, base, _ = chain._centres               # (B, 3), (3,): one read (set_passive)
        # einsum, not a stack of (3, 3) @ (3, 1) matmuls: 2.5x faster on the 90-DOF chain's
        # 30 bodies x 50 particles, the same sums.
        pts = self.pos + np.einsum('bnij,bj->bni', self.rot, local)   # (B, N, 3)
        return pts * chain._body_mass[:, None, None], base

    def center_of_mass(self):
        """Return the (N, 3) centre of mass of the whole tree below the base link in the base
        frame [m] (off-path links at the chain's passive values, ``Chain.set_passive``)."""
        chain = self.chain
        if chain.total_mass <= 0.0:
            raise ModelError('the chain has no mass: give its links <inertial> elements (URDF) '
                             'or masses (JointSpec.mass) to use the centre of mass')
        weighted, base = self._mass_points()
        return (weighted.sum(axis=0) + base) / chain.total_mass

    def com_jacobian(self):
        """Return the (N, 3, nv) Jacobian of the centre of mass.

        A rotation about column c's axis a (through o) moves every mass below it:
        d com = a x (W_sub - M_sub o) / M with W_sub, M_sub the subtree's weighted centre
        and mass; a translation moves it by M_sub a / M.
        """
        chain = self.chain
        weighted, _ = self._mass_points()
        B, n = chain.num_bodies, len(self)
        w_sub = (chain._desc_matrix @ weighted.reshape(B, 3 * n)).reshape(B, n, 3)
        cb = chain.column_body
        axes = np.einsum('cnij,cj->cni', self.rot[cb], chain.column_axis)     # (C, N, 3)
        m_sub = chain._desc_mass[cb][:, None, None]
        lever = w_sub[cb] - m_sub * self.pos[cb]
        cols = np.where(chain.column_is_rotation[:, None, None], _cross(axes, lever),
                        axes * m_sub)
        return (np.transpose(cols, (1, 2, 0)) @ chain.column_scatter) / chain.total_mass


class Chain:
    """Kinematic model of the links between a base link and one or several tip links.

    Build with ``Chain.from_urdf`` or ``Chain.from_joints`` (ball joints, for the papers'
    articulated figures). Read-only after construction, except the passive joints' values
    (``set_passive``).

    Floating base (``floating_base=True``, ``model.floating``): ``floating`` (bool),
    ``base_index`` (the q indices of the six base joints; empty for a fixed base),
    ``command_index`` (the q indices of the URDF's joints), ``floating_link`` (the URDF's
    base link; None for a fixed base), ``floating_links`` (the links the base adds, the world
    frame first), ``base_pose(q)``, ``with_base(q_joints, pose)``; ``base_link`` is then the
    world frame. Passive joints (``model.passive``): ``passive_joint_names``,
    ``passive_values``, ``passive_anchors`` ({off-path link: (body, (4, 4) offset)}),
    ``set_passive(values)``.

    Besides the configuration layout (joint_names, nq, nv, lower, upper, velocity_limits,
    joint_types, continuous, scalar_q/scalar_v, ball_joints, ball_q_index/ball_v_index,
    ball_limits) and the links (link_names), its structure is public, for solvers, goals
    and the collision model (``builder``): bodies (num_bodies; body_parent, body_kind,
    body_joint, body_q, body_mimic, body_origin, body_offset, body_axis, descendants,
    prismatic_bodies, ball_bodies), Jacobian columns (column_body, column_axis,
    column_is_rotation, column_scatter, columns_of_body), total_mass, length_scale, and
    ``records``: the same packed for the compiled kernels, a namedtuple of the bodies,
    columns, links and joints records (``kernels.records.CHAIN``).
    """

    def __init__(self, joints, base_link, tip_links, robot_name='robot', link_inertials=None,
                 floating_base=False, world_frame='world'):
        """Build from a list of ``JointSpec`` forming a tree rooted at ``base_link``.

        link_inertials: optional {link: (mass [kg], (3,) centre in the link frame)} for links
        that no joint's ``mass`` describes (the base link's own inertial).
        floating_base: put the six floating-base joints (``model.floating``) between a new
        root ``world_frame`` and ``base_link``; the chain's base frame is then the world.
        """
        self.robot_name = robot_name
        tip_links = [tip_links] if isinstance(tip_links, str) else list(tip_links)
        if not tip_links:
            raise ModelError('at least one tip link is needed')
        self.tip_links = tuple(tip_links)
        self.tip_link = self.tip_links[0]      # the first (default) tip link
        joints = list(joints)
        link_inertials = dict(link_inertials or {})
        self.floating = bool(floating_base)
        self.floating_link = base_link if self.floating else None
        self.floating_links = ()
        if self.floating:
            joints, self.floating_links = floating_joints(joints, base_link, world_frame,
                                                          link_inertials)
            base_link, link_inertials = world_frame, {}
        self.base_link = base_link
        # Every joint the model was built from (for URDFs: the whole tree, including joints
        # above base_link and beside the chain), for frames outside the model (tree_joints).
        self.tree_joints = tuple(joints)
        self.__dict__.update(build(joints, base_link, self.tip_links, link_inertials))
        self.n = self.nq                        # number of configuration entries
        base = [self._q_index[name] for name in FLOATING_JOINTS] if self.floating else []
        self.base_index = readonly(np.array(base, dtype=int))
        self.command_index = readonly(np.array(
            [i for i in range(self.nq) if i not in set(base)], dtype=int))
        self.passive_values = self._passive_default
        self._centres = lumped_centres(self, self.passive_values)
        self.passive_anchors = self._centres[2]

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(cls, path_or_xml, base_link='base_link', tip_link='tool0', cache_dir=None,
                  floating_base=False, world_frame='world'):
        """Load a chain from a URDF file path or XML string (e.g. ``robot_description``).

        tip_link: one link name, or a list of link names sharing one model (multi-effector).
        cache_dir: where the parsed joints are kept for the next start, keyed by the URDF's
        bytes (``model.cache``; None: its default directory, '': no cache).
        floating_base: put ``base_link``'s 6-DOF pose in the state (``model.floating``): six
        joints under a new root link ``world_frame``, which becomes the chain's base frame
        (the joint above ``base_link`` in the URDF, if any, is replaced).
        Raises ModelError with the parser's reason, or the list of links when a name is
        unknown.
        """
        joints, name, root_inertials = parse_urdf(path_or_xml, cache_dir)
        links = {j.parent for j in joints} | {j.child for j in joints}
        if not joints:
            raise ModelError(f'URDF robot {name!r} has no joints: nothing to solve for')
        tips = [tip_link] if isinstance(tip_link, str) else list(tip_link)
        for what, link in [('base', base_link)] + [('tip', t) for t in tips]:
            if link not in links:
                raise ModelError(
                    f'unknown {what} link {link!r}; links in this URDF: '
                    f'{", ".join(ordered_links(joints))}')
        return cls(joints, base_link, tips, robot_name=name, link_inertials=root_inertials,
                   floating_base=floating_base, world_frame=world_frame)

    @classmethod
    def from_joints(cls, joints, base_link, tip_link, name='chain', floating_base=False,
                    world_frame='world'):
        """Build a chain from ``JointSpec`` objects (for ball-jointed or authored figures);
        floating_base and world_frame as in ``from_urdf``."""
        return cls(joints, base_link, tip_link, robot_name=name, floating_base=floating_base,
                   world_frame=world_frame)

    # ------------------------------------------------------------------ names
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

    def link_index(self, link=None):
        """Return the index of ``link`` (default: the first tip) in ``link_names``: how the
        kernels name a link (``records``). Raises ModelError like ``link_anchor``."""
        try:
            return self._link_index[self.tip_links[0] if link is None else link]
        except KeyError:
            self.link_anchor(link)
            raise

    def moving(self, link):
        """Return (nv,) bool: the tangent entries that move ``link`` (its path from the base:
        a planted foot's leg and the floating base). Raises ModelError like ``link_anchor``."""
        body = self.link_anchor(link)[0]
        if body < 0:
            return np.zeros(self.nv, dtype=bool)
        return np.any(self.column_scatter[self.columns_of_body[body]] != 0.0, axis=0)

    def is_body_frame(self, link):
        """Return True when ``link``'s frame is a body frame (the child of a movable joint)."""
        body, offset = self.link_anchor(link)
        return body >= 0 and offset is self._identity

    def has_link(self, link):
        """Return True when ``link`` is part of the model."""
        return link in self._body_of_link

    # ------------------------------------------------------------------ configurations
    def neutral_configuration(self):
        """Return the (nq,) mid-range configuration (identity for ball joints)."""
        q = 0.5 * (self.lower + self.upper)
        if self.has_ball_joints:
            q[self.ball_q_index] = (1.0, 0.0, 0.0, 0.0)
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
            q[:, self.ball_q_index] = _random_ball(rng, shape[0], self.ball_limits)
        return q[0] if size is None else q

    def within_limits(self, q, tol=1e-9):
        """Return whether configurations are inside the joint limits: bool or (N,) bool."""
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        q2 = np.atleast_2d(q)
        ok = np.all((q2 >= self.lower - tol) & (q2 <= self.upper + tol), axis=-1)
        ok &= np.all(np.isfinite(q2), axis=-1)
        if self.has_ball_joints:
            quat = q2[:, self.ball_q_index]
            norm = np.sqrt(np.sum(quat * quat, axis=-1))
            angle = 2.0 * np.arccos(np.clip(np.abs(quat[..., 0]) / np.maximum(norm, 1e-12),
                                            0.0, 1.0))
            ok &= np.all((np.abs(norm - 1.0) < 1e-6) & (angle <= self.ball_limits + tol),
                         axis=-1)
        return bool(ok[0]) if single else ok

    def clip(self, q):
        """Return configurations projected into the joint limits (same shape as ``q``).

        Ball joints: normalised, in the hemisphere w >= 0, and turned back onto their angle
        limit about the same axis where they exceed it.
        """
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
            quat = q2[:, self.ball_q_index]
            q2[:, self.ball_q_index] = clip_ball_rows(self.records.joints,
                                                      as_rows(quat, 4)).reshape(quat.shape)
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
            q2[:, self.scalar_q] += dv2[:, self.scalar_v]
            bq = self.ball_q_index
            q2[:, bq] = quat_multiply(q2[:, bq], quat_from_rotvec(dv2[:, self.ball_v_index]))
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
        q, q2 = _rows(self, q)
        # C-contiguous and writable (one compiled specialisation for every caller).
        rot, pos = _fk_kernel(self.records.bodies, as_rows(q2, self.nq))
        return Frames(self, q2, rot, pos, q.ndim == 1)

    def fk(self, q, link=None):
        """Return the pose of ``link`` (default: the tip) in the base frame.

        q: (nq,) -> (4, 4); (N, nq) -> (N, 4, 4). Units: metres. Only the link's body and
        its ancestors are computed (``kernels.link_pose``).
        """
        q, q2 = _rows(self, q)
        out = np.empty((q2.shape[0], 4, 4))
        records = self.records
        _link_pose_kernel(records.bodies, records.links, as_rows(q2, self.nq),
                          self.link_index(link), out)
        return out[0] if q.ndim == 1 else out

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

    # ------------------------------------------------------------------ floating base, passive
    def base_pose(self, q):
        """Return the pose of the floating link in the world frame: (4, 4) for (nq,) q,
        (N, 4, 4) for (N, nq) (``model.floating``); the identity for a fixed base."""
        q, q2 = _rows(self, q)
        if self.floating:
            poses = base_poses(q2[:, self.base_index])
        else:
            poses = np.broadcast_to(np.eye(4), (len(q2), 4, 4)).copy()
        return poses[0] if q.ndim == 1 else poses

    def with_base(self, q_joints, pose):
        """Return the configuration(s) of commanded joints ``q_joints`` with the base ``pose``.

        q_joints: (C,) or (N, C) values of the URDF joints in ``command_index`` order (or
        whole configurations (nq,) / (N, nq), whose base entries are replaced); pose: (4, 4)
        or (N, 4, 4) pose of the floating link in the world frame [m]. Returns (nq,) or
        (N, nq). Raises GoalError for a pose beyond the base joints' limits (pitch beyond
        +-80 deg, a position beyond +-10 m), ModelError for a fixed-base chain or a shape.
        """
        if not self.floating:
            raise ModelError(f'with_base: the chain {self.robot_name!r} has a fixed base; '
                             'build it with floating_base=True')
        arr = np.asarray(q_joints, dtype=float)
        if arr.shape[-1:] not in ((len(self.command_index),), (self.nq,)) or arr.ndim > 2:
            raise ModelError(f'with_base: q_joints must have {len(self.command_index)} entries '
                             f'(joints {[self.joint_names[i] for i in self.command_index]}) or '
                             f'{self.nq}; got shape {arr.shape}')
        coords = base_coordinates(pose)
        rows = max(len(arr) if arr.ndim == 2 else 1, len(coords) if coords.ndim == 2 else 1)
        q = np.zeros((rows, self.nq))
        if arr.shape[-1] == self.nq:
            q[:] = arr
        else:
            q[:, self.command_index] = arr
        q[:, self.base_index] = coords
        return q[0] if arr.ndim == 1 and coords.ndim == 1 else q

    def set_passive(self, values):
        """Set the passive (off-path) joints' values and re-lump the masses they carry.

        values: {joint: value [rad or m]} (names of other joints of the robot are ignored,
        joints not named keep their values) or a (P,) array in ``passive_joint_names``
        order. ``Frames.center_of_mass`` and ``com_jacobian`` count the whole tree below the
        base link at these values (``model.passive``); Frames built before this call see the
        new values too. Raises ModelError for an unknown name, a shape or a non-finite value.
        """
        values = passive_values(self, values)
        if np.array_equal(values, self.passive_values):
            return
        centres = lumped_centres(self, values)
        # One assignment each: a reader on another thread sees the old or the new centres.
        self._centres = centres
        self.passive_anchors = centres[2]
        self.passive_values = values

    def __repr__(self):
        return (f'Chain({self.robot_name!r}, base={self.base_link!r}, tips={list(self.tip_links)},'
                f' joints={list(self.joint_names)})')


def ball_chain(num_segments, segment_length=1.0, max_angle=None, mass=1.0,
               axis=(0.0, 0.0, 1.0), name='ball_chain'):
    """Return a serial Chain of ``num_segments`` 3-DOF ball joints (seed 000, section 6).

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
    return Chain(joints, 'base_link', 'tip', robot_name=name)


# ---------------------------------------------------------------------- helpers
def _rows(chain, q):
    """Return (q as a float array, its (N, nq) rows), or raise ModelError."""
    q = np.asarray(q, dtype=float)
    q2 = np.atleast_2d(q)
    if q2.ndim != 2 or q2.shape[-1] != chain.nq:
        raise ModelError(f'configuration must have {chain.nq} entries (joints '
                         f'{list(chain.joint_names)}); got shape {q.shape}')
    return q, q2


def _cross(a, b):
    """Return the cross products of (..., 3) arrays (numpy.cross costs more on small arrays)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape))
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out[..., 0] = a1 * b2 - a2 * b1
    out[..., 1] = a2 * b0 - a0 * b2
    out[..., 2] = a0 * b1 - a1 * b0
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
