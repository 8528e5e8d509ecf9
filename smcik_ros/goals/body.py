"""Whole-body constraints: contacts and the support of the centre of mass (seed 000 6.3).

- ``Contact(link, pose=None)``: the link keeps a pose: a hard *equality* (6 rows: position
  and rotation-vector errors; ``tolerance`` 1 mm, 0.01 rad). Without a pose it is taken from
  the configuration given to ``anchor(frames_or_q)`` (the node: when the constraint arrives,
  or at the first joint_states).
- ``PlaneContact``: a point of a link on a plane (soft by default); ``hard=True`` makes it
  an equality (two-sided) or an inequality (``one_sided``: stay above).
- ``CenterOfMassPolygon``: the centre of mass's projection along gravity (-z of the base
  frame: the world with a floating base) inside a convex support polygon shrunk by
  ``margin``; hard by default: an *inequality*. The polygon is given (world xy), or taken
  at ``anchor`` from ``support`` points fixed on links (``collision.support_points``: the
  feet's collision shapes).

Hard equalities (``equality = True``) have ``residual``, ``jacobian`` and per-row
``tolerance``; hard inequalities have ``clearance(frames) -> (c (N, K), dc (N, K, nv))``,
each row >= 0 where kept, whose negative rows are the violated ones (the projection's active
set). Both have ``violated(frames) -> (N,) bool``. Constraints taking their pose or polygon
from a configuration have ``anchor(frames_or_q)`` and ``anchored``.
"""

import numpy as np

from ..errors import GoalError
from ..model.chain import Frames
from .targets import PoseTarget, PositionTarget
from .terms import Constraint, check_link, finite_array, positive

__all__ = ['CenterOfMassPolygon', 'Contact', 'PlaneContact', 'convex_hull', 'link_points']

INSIDE_SLACK = 1e-9    # [m] a clearance above -INSIDE_SLACK counts as kept (rounding)


def _frames_of(term, frames_or_q, what):
    """Return the Frames of ``frames_or_q`` (Frames, or q (nq,) of the bound chain)."""
    if isinstance(frames_or_q, Frames):
        return frames_or_q
    chain = getattr(term, '_chain', None)
    if chain is None:
        raise GoalError(f'{what}: anchor(q) needs the term bound to a chain (bind(chain)) or '
                        'Frames instead of q')
    return chain.frames(chain.check_configuration(frames_or_q, 'anchor configuration'))


class Contact(Constraint):
    """Keep ``link`` at a pose (4, 4) in the base frame: a planted foot, a hand holding a
    fixed object (a hard equality; seed 000 6.3 "the feet were constrained").

    pose: None takes the link's pose at the configuration given to ``anchor``; a pose given
    here is kept (``anchor`` leaves it). Residual (N, 6): position error [m] and rotation
    vector of R R_pose^T [rad] (``PoseTarget``'s rows, exact Jacobian). tolerance:
    (position [m], orientation [rad]) within which the contact holds (``violated``: beyond
    either, as Euclidean norms); sigma_position, sigma_orientation: the likelihood's scale.
    position_only: keep the link's origin alone (the first 3 rows; a ``PositionTarget``):
    the node's hold of a tip whose own joints cannot keep a whole pose (``control.base``).
    """

    hard = True
    equality = True

    def __init__(self, link, pose=None, tolerance=(0.001, 0.01), sigma_position=0.001,
                 sigma_orientation=0.01, weight=1.0, position_only=False):
        if not isinstance(link, str) or not link:
            raise GoalError(f'Contact: link must be a link name; got {link!r}')
        self.link = link
        tol = finite_array(tolerance, (2,), 'Contact tolerance (position, orientation)')
        self.tolerance = np.repeat([positive(tol[0], 'Contact position tolerance'),
                                    positive(tol[1], 'Contact orientation tolerance')], 3)
        self.sigma = np.repeat([positive(sigma_position, 'sigma_position'),
                                positive(sigma_orientation, 'sigma_orientation')], 3)
        self.weight = positive(weight, 'weight')
        self.position_only = bool(position_only)
        if self.position_only:
            self.sigma, self.tolerance = self.sigma[:3], self.tolerance[:3]
        self.given = pose is not None
        self.pose = None
        self._target = None
        self._chain = None
        if pose is not None:
            self._set_pose(pose)

    def _set_pose(self, pose):
        self._target = PoseTarget(pose, self.link, self.sigma[0], self.sigma[-1])
        self.pose = self._target.pose
        if self.position_only:
            self._target = PositionTarget(self.pose[:3, 3], self.link,
                                          sigma_position=self.sigma[0])

    @property
    def anchored(self):
        """True once the contact has a pose (given, or taken by ``anchor``)."""
        return self.pose is not None

    def bind(self, chain):
        check_link(chain, self.link, 'Contact')
        self._chain = chain
        return self

    def anchor(self, frames_or_q):
        """Take the link's pose at the first configuration of ``frames_or_q`` (Frames, or a
        (nq,) configuration of the bound chain), unless a pose was given; return self."""
        if not self.given:
            frames = _frames_of(self, frames_or_q, f'Contact on {self.link!r}')
            check_link(frames.chain, self.link, 'Contact')
            self._set_pose(frames.link_pose(self.link)[0])
        return self

    @property
    def target(self):
        """The PoseTarget of the contact's pose, at its sigmas (the same object until the
        contact is anchored again): its residual, and the kernels' pose target."""
        return self._require()

    def _require(self):
        if self._target is None:
            raise GoalError(f'Contact on {self.link!r} has no pose yet: give one, or call '
                            'anchor(frames) with the configuration it holds')
        return self._target

    def residual(self, frames):
        return self._require().residual(frames)

    def jacobian(self, frames):
        return self.residual_jacobian(frames)[1]

    def residual_jacobian(self, frames):
        """Return (residual (N, 6), jacobian (N, 6, nv)) from one pose evaluation (3 rows
        each for ``position_only``)."""
        target = self._require()
        if self.position_only:
            return target.residual(frames), target.jacobian(frames)
        return target.residual_jacobian(frames)

    def errors(self, frames):
        """Return (position error [m], orientation error [rad]), each (N,)."""
        return self._require().errors(frames)

    def violated(self, frames):
        pos, ori = self.errors(frames)
        return (pos > self.tolerance[0]) | (ori > self.tolerance[-1])


class PlaneContact(Constraint):
    """Keep a point of ``link`` on the plane normal . x = offset (seed 000 section 6.3).

    normal (3,), offset [m], point (3,) on the link [m] (default its origin).
    one_sided=True turns it into 'stay above the plane' (residual only when below).
    hard=True keeps it: two-sided, an equality within ``tolerance`` [m]; one-sided, an
    inequality (``clearance``: the signed height above the plane).
    """

    def __init__(self, link, normal=(0.0, 0.0, 1.0), offset=0.0, point=None, sigma=0.005,
                 weight=1.0, one_sided=False, hard=False, tolerance=0.001):
        n = finite_array(normal, (3,), 'plane normal')
        norm = np.linalg.norm(n)
        if norm < 1e-9:
            raise GoalError('plane normal must be non-zero')
        self.normal = n / norm
        self.offset = float(offset) / norm
        self.link = link
        self.point = None if point is None else finite_array(point, (3,), 'contact point')
        self.sigma = np.full(1, positive(sigma, 'sigma'))
        self.weight = positive(weight, 'weight')
        self.one_sided = bool(one_sided)
        self.hard = bool(hard)
        self.equality = self.hard and not self.one_sided
        self.tolerance = np.full(1, positive(tolerance, 'PlaneContact tolerance'))

    def bind(self, chain):
        check_link(chain, self.link, 'PlaneContact')
        return self

    def _height(self, frames):
        return frames.point(self.link, self.point) @ self.normal - self.offset

    def residual(self, frames):
        d = self._height(frames)
        if self.one_sided:
            d = np.minimum(d, 0.0)
        return d[:, None]

    def jacobian(self, frames):
        jac = np.einsum('k,nkv->nv', self.normal, frames.jacobian(self.link, self.point)[:, :3])
        if self.one_sided:
            jac = jac * (self._height(frames) < 0.0)[:, None]
        return jac[:, None, :]

    def clearance(self, frames):
        """Return (height above the plane (N, 1) [m], its Jacobian (N, 1, nv))."""
        jac = np.einsum('k,nkv->nv', self.normal, frames.jacobian(self.link, self.point)[:, :3])
        return self._height(frames)[:, None], jac[:, None, :]

    def violated(self, frames):
        if not self.hard:
            return np.zeros(len(frames), dtype=bool)
        d = self._height(frames)
        if self.one_sided:
            return d < -INSIDE_SLACK
        return np.abs(d) > self.tolerance[0]


def convex_hull(points):
    """Return the (H, 2) counter-clockwise convex hull of (P, 2) points (no collinear
    vertices; Andrew's monotone chain). Raises GoalError for fewer than three points not on
    one line."""
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != 2 or not np.isfinite(pts).all():
        raise GoalError(f'a polygon must be finite (P, 2) points [[x, y], ...]; got '
                        f'{"shape " + str(pts.shape) if np.isfinite(pts).all() else "NaN"}')
    pts = np.unique(pts, axis=0)
    if len(pts) < 3:
        raise GoalError(f'a support polygon needs at least 3 distinct points; got {len(pts)}')

    def half(seq):
        out = []
        for p in seq:
            while len(out) >= 2 and _cross2(out[-2], out[-1], p) <= 1e-15:
                out.pop()
            out.append(p)
        return out
    lower, upper = half(pts), half(pts[::-1])
    hull = np.array(lower[:-1] + upper[:-1])
    area = 0.5 * sum(_cross2(hull[0], hull[i], hull[i + 1]) for i in range(1, len(hull) - 1))
    if len(hull) < 3 or area < 1e-12:
        raise GoalError(f'a support polygon needs points that span an area; these are on one '
                        f'line: {pts.tolist()}')
    return hull


def _cross2(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _edges(hull):
    """Return (outward unit normals (H, 2), offsets (H,)): inside is normals . p <= offsets."""
    edge = np.roll(hull, -1, axis=0) - hull
    normals = np.stack([edge[:, 1], -edge[:, 0]], axis=1)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    return normals, np.einsum('hk,hk->h', normals, hull)


def _shrunk(hull, margin):
    """Return the hull with every edge moved ``margin`` [m] inwards (clipped polygon)."""
    normals, offsets = _edges(hull)
    region = hull
    for n, d in zip(normals, offsets - margin):
        h = region @ n - d                          # > 0: outside this half-plane
        out = []
        for i in range(len(region)):
            a, b, ha, hb = region[i], region[(i + 1) % len(region)], h[i], h[(i + 1) % len(h)]
            if ha <= 0.0:
                out.append(a)
            if (ha <= 0.0) != (hb <= 0.0):
                out.append(a + (b - a) * (ha / (ha - hb)))
        region = np.array(out).reshape(-1, 2)
        if len(region) < 3:
            break
    width = min(float(np.max(d - hull @ n)) for n, d in zip(normals, offsets))
    try:
        return convex_hull(region)
    except GoalError:
        raise GoalError(f'margin {margin} m leaves nothing of the support polygon (it is '
                        f'{width:.4f} m across at its narrowest: give a margin below '
                        f'{width / 2:.4f} m)') from None


class CenterOfMassPolygon(Constraint):
    """Keep the centre of mass over the support: its projection along gravity (-z of the
    chain's base frame) inside a convex polygon shrunk by ``margin`` [m].

    polygon: (P, 2) world xy points [m] (their convex hull is used); or None with
    ``support``: {link: (K, 3) points in the link frame} (``collision.support_points``),
    whose hull is taken at ``anchor(frames_or_q)``. guard [m]: the CoM is kept this much
    farther inside than ``margin`` (the node's command stream: see ``constraint_schema``);
    ``region`` is the polygon less ``margin`` (drawn, reported), the checks below use it
    less ``guard`` too. Residual (N, 1): the distance [m] outside that guarded polygon (0
    inside); ``clearance``: one row per edge of it, the distance inside its line (>= 0
    where kept); ``violated``: outside it.
    """

    def __init__(self, polygon=None, margin=0.0, hard=True, sigma=0.01, weight=1.0,
                 support=None, guard=0.0):
        self.margin, self.guard = float(margin), float(guard)
        if not np.isfinite(self.margin) or self.margin < 0.0:
            raise GoalError(f'CenterOfMassPolygon margin must be a number >= 0 [m]; got {margin}')
        if not np.isfinite(self.guard) or self.guard < 0.0:
            raise GoalError(f'CenterOfMassPolygon guard must be a number >= 0 [m]; got {guard}')
        self.hard = bool(hard)
        self.sigma = np.full(1, positive(sigma, 'sigma'))
        self.weight = positive(weight, 'weight')
        self.support = None
        self.polygon = self.region = self._kept = None
        self._chain = None
        if (polygon is None) == (support is None):
            raise GoalError('CenterOfMassPolygon: give a polygon (P, 2) or support points '
                            '{link: (K, 3)}, not both and not neither')
        if support is not None:
            if not isinstance(support, dict) or not support:
                raise GoalError(f'CenterOfMassPolygon support must be a non-empty mapping '
                                f'link -> (K, 3) points; got {type(support).__name__}')
            self.support = {link: _points3(link, pts) for link, pts in support.items()}
        else:
            self._set_polygon(polygon)

    def _set_polygon(self, polygon):
        hull = convex_hull(polygon)
        region = _shrunk(hull, self.margin) if self.margin > 0.0 else hull
        self.polygon, self.region = hull, region
        self._kept = _shrunk(hull, self.margin + self.guard) if self.guard > 0.0 else region
        self._normals, self._offsets = _edges(self._kept)

    @property
    def anchored(self):
        """True once the polygon is known (given, or taken by ``anchor``)."""
        return self.polygon is not None

    def bind(self, chain):
        if chain.total_mass <= 0.0:
            raise GoalError('CenterOfMassPolygon needs link masses; this chain has none')
        for link in self.support or ():
            if not chain.has_link(link) and link not in chain.passive_anchors:
                raise GoalError(f'CenterOfMassPolygon: unknown support link {link!r}; links of '
                                f'this chain: {", ".join(chain.link_names)}')
        self._chain = chain
        return self

    def anchor(self, frames_or_q):
        """Take the support polygon from the ``support`` points at the first configuration of
        ``frames_or_q`` (Frames, or (nq,) of the bound chain); a given polygon is kept."""
        if self.support is not None:
            frames = _frames_of(self, frames_or_q, 'CenterOfMassPolygon')
            self.bind(frames.chain)
            first = frames if len(frames) == 1 else frames.subset([0])
            self._set_polygon(np.concatenate([link_points(first, link, pts)[0, :, :2]
                                              for link, pts in self.support.items()]))
        return self

    def _com_xy(self, frames):
        if self.polygon is None:
            raise GoalError('CenterOfMassPolygon has no polygon yet: call anchor(frames) with '
                            'the configuration that stands on its support')
        return frames.center_of_mass()[:, :2]

    def _nearest(self, p):
        """Return (outside (N,) bool, distance (N,) [m], unit direction (N, 2) from the
        nearest point of the shrunk polygon)."""
        outside = (p @ self._normals.T - self._offsets).max(axis=1) > 0.0
        a = self._kept
        e = np.roll(a, -1, axis=0) - a
        t = np.clip(np.einsum('nhk,hk->nh', p[:, None] - a, e) / np.einsum('hk,hk->h', e, e),
                    0.0, 1.0)
        diff = p[:, None] - (a + t[..., None] * e)                         # (N, H, 2)
        dist = np.linalg.norm(diff, axis=2)
        best = np.argmin(dist, axis=1)
        rows = np.arange(len(p))
        d = dist[rows, best]
        u = diff[rows, best] / np.maximum(d, 1e-300)[:, None]
        return outside, np.where(outside, d, 0.0), u * outside[:, None]

    def residual(self, frames):
        return self._nearest(self._com_xy(frames))[1][:, None]

    def jacobian(self, frames):
        _, _, u = self._nearest(self._com_xy(frames))
        return np.einsum('nk,nkv->nv', u, frames.com_jacobian()[:, :2])[:, None, :]

    def clearance(self, frames):
        """Return (distance inside each edge's line (N, H) [m], Jacobian (N, H, nv))."""
        p = self._com_xy(frames)
        jac = -np.einsum('hk,nkv->nhv', self._normals, frames.com_jacobian()[:, :2])
        return self._offsets - p @ self._normals.T, jac

    def violated(self, frames):
        if not self.hard:
            return np.zeros(len(frames), dtype=bool)
        p = self._com_xy(frames)
        return (p @ self._normals.T - self._offsets).max(axis=1) > INSIDE_SLACK


def _points3(link, points):
    arr = np.array(points, dtype=float).reshape(-1, 3) if np.size(points) else np.zeros((0, 3))
    if not len(arr) or not np.isfinite(arr).all():
        raise GoalError(f'support points of link {link!r} must be finite (K, 3) points in the '
                        f'link frame; got {np.shape(points)}')
    arr.setflags(write=False)
    return arr


def link_points(frames, link, local):
    """Return the (N, K, 3) base-frame positions of points ``local`` (K, 3) fixed on ``link``,
    a modelled link or an off-path one (``Chain.passive_anchors``, at the passive values)."""
    chain = frames.chain
    if chain.has_link(link):
        body, offset = chain.link_anchor(link)
    else:
        body, offset = chain.passive_anchors[link]
    pts = local @ offset[:3, :3].T + offset[:3, 3]                          # in the body
    if body < 0:
        return np.broadcast_to(pts, (len(frames),) + pts.shape).copy()
    return np.einsum('nij,kj->nki', frames.rot[body], pts) + frames.pos[body][:, None]
