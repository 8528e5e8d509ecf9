"""The support polygon: the convex hull of links' collision *shapes* projected along gravity.

The feet's (or any support links') ``<collision>`` elements, not their sphere covers (a
cover overshoots the shape by up to its tolerance, and a support polygon that is too large
lets the centre of mass over the edge). Each shape becomes points in its link's frame that
span its shadow from any direction, on or inside the shape (a polygon inscribed in a
circle: the support they give is never larger than the real one):

- box: its 8 corners; cylinder: ``samples`` points on each end circle; sphere: a
  latitude-longitude grid (``samples`` around, ``samples / 2`` from pole to pole); capsule:
  the two end spheres' grids; mesh: the vertices of its convex hull (the mesh read as the
  collision model reads it).

``support_points`` gives those points per link (for ``goals.CenterOfMassPolygon(support=)``,
which takes the hull when it is anchored); ``support_polygon`` the hull at a configuration.
Gravity is -z of the chain's base frame (the world frame with a floating base).
"""

import math

import numpy as np

from ..errors import GoalError, ModelError
from ..goals.body import convex_hull, link_points
from .model import collision_geometry, load_mesh

__all__ = ['support_points', 'support_polygon']


def support_points(urdf, links, package_paths=(), urdf_path=None, samples=24):
    """Return {link: (K, 3) points [m] in the link frame} spanning the collision shapes of
    ``links`` (see the module docstring).

    urdf: a URDF file path or its XML text; urdf_path: the file the text came from;
    package_paths: directories holding ROS packages (``package://`` meshes). Raises
    GoalError naming a link that is unknown, has no collision shape, or whose mesh cannot be
    read.
    """
    links = [links] if isinstance(links, str) else list(links)
    if not links:
        raise GoalError('a support needs at least one link')
    try:
        geometry = collision_geometry(urdf, links, package_paths, urdf_path)
    except ModelError as exc:
        raise GoalError(f'support links: {exc}') from None
    out = {}
    for link in links:
        items = geometry[link]
        if not items:
            raise GoalError(f'support link {link!r} has no <collision> shape (box, cylinder, '
                            'sphere, capsule or mesh) to stand on')
        try:
            local = [_shape_points(g, int(samples)) for g in items]
        except ModelError as exc:
            raise GoalError(f'support link {link!r}: {exc}') from None
        pts = np.concatenate([pts @ g.origin[:3, :3].T + g.origin[:3, 3]
                              for g, pts in zip(items, local)])
        pts.setflags(write=False)
        out[link] = pts
    return out


def support_polygon(chain, urdf, links, q, package_paths=(), urdf_path=None, samples=24):
    """Return the (P, 2) counter-clockwise support polygon [m] of ``links`` at configuration
    ``q`` (nq,): the convex hull of their collision shapes' points projected along -z of
    the chain's base frame. Links: modelled links of ``chain`` or off-path ones (at the
    chain's passive values). Raises GoalError as ``support_points`` and for a link the
    chain does not carry."""
    points = support_points(urdf, links, package_paths, urdf_path, samples)
    for link in points:
        if not chain.has_link(link) and link not in chain.passive_anchors:
            raise GoalError(f'support link {link!r} is not below the base link '
                            f'{chain.base_link!r} of this chain')
    frames = chain.frames(chain.check_configuration(q, 'support configuration'))
    first = frames if len(frames) == 1 else frames.subset([0])
    return convex_hull(np.concatenate([link_points(first, link, pts)[0, :, :2]
                                       for link, pts in points.items()]))


def _shape_points(geom, samples):
    """Return (K, 3) points of one collision shape in its own frame."""
    if geom.kind == 'box':
        half = 0.5 * np.asarray(geom.size, dtype=float)
        return np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * half
    if geom.kind == 'cylinder':
        radius, length = geom.size
        ring = _ring(radius, samples)
        return np.concatenate([ring + (0.0, 0.0, -0.5 * length), ring + (0.0, 0.0, 0.5 * length)])
    if geom.kind == 'sphere':
        return _ball(geom.size[0], samples)
    if geom.kind == 'capsule':
        radius, length = geom.size
        ball = _ball(radius, samples)
        return np.concatenate([ball + (0.0, 0.0, -0.5 * length), ball + (0.0, 0.0, 0.5 * length)])
    vertices, _ = load_mesh(geom.mesh_path, geom.scale)
    return _hull_vertices(vertices)


def _ring(radius, samples):
    angle = np.linspace(0.0, 2.0 * math.pi, max(int(samples), 8), endpoint=False)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), np.zeros_like(angle)], 1)


def _ball(radius, samples):
    rings = [_ring(radius * math.sin(t), samples) + (0.0, 0.0, radius * math.cos(t))
             for t in np.linspace(0.0, math.pi, max(int(samples) // 2, 4) + 1)]
    return np.concatenate(rings)


def _hull_vertices(vertices):
    """Return the vertices of the 3-D convex hull of ``vertices`` (all of them when qhull
    cannot build one: flat or tiny meshes)."""
    try:
        from scipy.spatial import ConvexHull
        return vertices[ConvexHull(vertices).vertices]
    except (ImportError, RuntimeError, ValueError):     # qhull refuses degenerate inputs
        return vertices
