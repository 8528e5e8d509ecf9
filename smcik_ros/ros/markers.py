"""RViz markers of the filter (particle chains, the MAP chain, each tip's target, keep-out
spheres), of the whole figure (the centre of mass and its projection, the support polygon,
the contacts) and of the collision model (cover spheres, obstacles, the closest pair).

Kept cheap (see ROS_ENV.md): all particles are ONE LINE_LIST marker with per-vertex colours
(green = high weight, red = low), and the number of drawn particles is capped by the caller
(highest weights first).
"""

import xml.etree.ElementTree as ElementTree

from geometry_msgs.msg import Point, Vector3
import numpy as np
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from ..model.urdf import declare_prefixes
from .conversions import matrix_to_pose

__all__ = ['NAMESPACES', 'COLLISION_NAMESPACES', 'link_segments', 'particle_marker',
           'particle_vertices', 'fill_vertices',
           'chain_marker', 'target_marker', 'sphere_markers', 'build_marker_array',
           'select_particles', 'collision_markers', 'alternative_markers',
           'ALTERNATIVE_NAMESPACE', 'FIGURE_NAMESPACES', 'figure_markers']

NAMESPACES = ('particles', 'map', 'target', 'keep_out')
COLLISION_NAMESPACES = ('collision_cover', 'collision_obstacles', 'collision_closest')
_COVER_BIN = 0.005  # [m] cover spheres are drawn in SPHERE_LIST markers per radius bin
_LINE_WIDTH = 0.004  # [m]
_MAP_WIDTH = 0.012  # [m]


def _header(marker, frame, stamp):
    marker.header.frame_id = frame
    if stamp is not None:
        marker.header.stamp = stamp
    return marker


def link_segments(urdf_xml, link_names):
    """Return (S, 2) index pairs (parent, child) into ``link_names`` from the URDF's joints.

    Only joints whose parent and child are both in ``link_names`` give a segment, so a
    sub-tree (several tips) is drawn correctly. Falls back to consecutive pairs when the XML
    cannot be read.
    """
    index = {name: i for i, name in enumerate(link_names)}
    pairs = []
    try:
        root = ElementTree.fromstring(declare_prefixes(urdf_xml))
    except ElementTree.ParseError:
        root = None
    if root is not None:
        for joint in root.iter('joint'):
            parent, child = joint.find('parent'), joint.find('child')
            if parent is None or child is None:
                continue
            a, b = index.get(parent.get('link')), index.get(child.get('link'))
            if a is not None and b is not None:
                pairs.append((a, b))
    if not pairs:
        pairs = [(i, i + 1) for i in range(len(link_names) - 1)]
    return np.array(sorted(pairs), dtype=int).reshape(-1, 2)


def select_particles(particles, weights, max_count):
    """Return (particles, weights) of at most ``max_count`` particles, highest weights first."""
    particles = np.asarray(particles, dtype=float)
    if weights is None:
        weights = np.full(len(particles), 1.0 / max(len(particles), 1))
    weights = np.asarray(weights, dtype=float)
    if len(particles) > max_count:
        keep = np.argsort(weights)[::-1][:max_count]
        particles, weights = particles[keep], weights[keep]
    return particles, weights


def particle_vertices(link_positions, weights, segments=None):
    """Return the particles' LINE_LIST vertices: (points (V, 3) [m], colors (V, 4) rgba).

    ``link_positions``: (N, L, 3) particle chains; ``segments``: (S, 2) link index pairs
    (default: consecutive links), two vertices each, particle by particle. Every vertex of
    a particle takes its colour: green for the highest weight, red for the lowest (relative
    to the maximum), more transparent as the weight drops.
    """
    positions = np.asarray(link_positions, dtype=float)
    if positions.ndim != 3 or positions.shape[0] == 0 or positions.shape[1] < 2:
        return np.zeros((0, 3)), np.zeros((0, 4))
    n_particles, n_links = positions.shape[:2]
    if segments is None:
        segments = np.stack([np.arange(n_links - 1), np.arange(1, n_links)], axis=1)
    vertex_links = np.asarray(segments, dtype=int).ravel()
    points = positions[:, vertex_links].reshape(-1, 3)
    weights = np.asarray(weights, dtype=float)
    top = float(np.max(weights)) if weights.size else 0.0
    level = weights / top if top > 0.0 and np.isfinite(top) else np.ones(n_particles)
    level = np.clip(np.nan_to_num(level), 0.0, 1.0)
    rgba = np.stack([1.0 - level, level, np.full_like(level, 0.15), 0.25 + 0.75 * level], axis=1)
    return points, np.repeat(rgba, len(vertex_links), axis=0)


def fill_vertices(marker, points, colors):
    """Set a Marker's ``points`` (V, 3) [m] and per-vertex ``colors`` (V, 4) rgba."""
    marker.points = [Point(x=x, y=y, z=z)
                     for x, y, z in np.asarray(points, dtype=float).reshape(-1, 3).tolist()]
    marker.colors = [ColorRGBA(r=r, g=g, b=b, a=a)
                     for r, g, b, a in np.asarray(colors, dtype=float).reshape(-1, 4).tolist()]


def particle_marker(link_positions, weights, frame, stamp=None, segments=None):
    """Return one LINE_LIST marker drawing (N, L, 3) particle chains [m], coloured by weight
    (``particle_vertices``)."""
    marker = _header(Marker(), frame, stamp)
    marker.ns, marker.id = 'particles', 0
    marker.type, marker.action = Marker.LINE_LIST, Marker.ADD
    marker.pose.orientation.w = 1.0
    marker.scale.x = _LINE_WIDTH
    fill_vertices(marker, *particle_vertices(link_positions, weights, segments))
    return marker


def chain_marker(link_positions, frame, stamp=None, marker_id=0, rgba=(0.1, 0.4, 1.0, 1.0)):
    """Return a LINE_STRIP marker through (L, 3) link origins [m] (the MAP estimate)."""
    marker = _header(Marker(), frame, stamp)
    marker.ns, marker.id = 'map', marker_id
    marker.type, marker.action = Marker.LINE_STRIP, Marker.ADD
    marker.pose.orientation.w = 1.0
    marker.scale.x = _MAP_WIDTH
    marker.color = ColorRGBA(r=rgba[0], g=rgba[1], b=rgba[2], a=rgba[3])
    marker.points = [Point(x=x, y=y, z=z)
                     for x, y, z in np.asarray(link_positions, dtype=float).tolist()]
    return marker


def target_marker(target, frame, stamp=None, marker_id=0):
    """Return a goal marker: an ARROW along the tool z axis for (4, 4), a SPHERE for (3,);
    ``marker_id``: the tip's index."""
    marker = _header(Marker(), frame, stamp)
    marker.ns, marker.id = 'target', int(marker_id)
    marker.action = Marker.ADD
    target = np.asarray(target, dtype=float)
    if target.shape == (4, 4):
        marker.type = Marker.ARROW
        # An ARROW's shaft is its x axis: rotate so it shows the target's z (approach) axis.
        pose = target.copy()
        pose[:3, :3] = target[:3, :3] @ np.array([[0.0, 0.0, -1.0],
                                                  [0.0, 1.0, 0.0],
                                                  [1.0, 0.0, 0.0]])
        marker.pose = matrix_to_pose(pose)
        marker.scale = Vector3(x=0.08, y=0.012, z=0.012)
    else:
        marker.type = Marker.SPHERE
        marker.pose.position = Point(x=float(target[0]), y=float(target[1]), z=float(target[2]))
        marker.pose.orientation.w = 1.0
        marker.scale = Vector3(x=0.03, y=0.03, z=0.03)
    marker.color = ColorRGBA(r=1.0, g=0.85, b=0.0, a=0.9)
    return marker


def sphere_markers(spheres, frame, stamp=None):
    """Return SPHERE markers for [(center (3,) [m] in ``frame``, radius [m]), ...]."""
    out = []
    for k, (center, radius) in enumerate(spheres):
        marker = _header(Marker(), frame, stamp)
        marker.ns, marker.id = 'keep_out', k
        marker.type, marker.action = Marker.SPHERE, Marker.ADD
        marker.pose.position = Point(x=float(center[0]), y=float(center[1]),
                                     z=float(center[2]))
        marker.pose.orientation.w = 1.0
        diameter = 2.0 * float(radius)
        marker.scale = Vector3(x=diameter, y=diameter, z=diameter)
        marker.color = ColorRGBA(r=0.9, g=0.1, b=0.1, a=0.35)
        out.append(marker)
    return out


def build_marker_array(frame, stamp=None, particle_positions=None, weights=None,
                       segments=None, map_positions=None, target=None, spheres=(),
                       clear=False):
    """Return the MarkerArray of one marker tick.

    ``clear``: start with a DELETEALL (when keep-out spheres or the target went away since the
    last tick, so RViz drops them).
    ``particle_positions``: (N, L, 3) [m]; ``segments``: (S, 2) link pairs;
    ``map_positions``: (L, 3) [m]; ``target``: (4, 4) or (3,) [m], or a list of them with
    None where a tip has no goal (one marker id per tip);
    ``spheres``: [(center (3,), radius)], all in ``frame``.
    """
    markers = []
    if clear:
        delete_all = _header(Marker(), frame, stamp)
        delete_all.action = Marker.DELETEALL
        markers.append(delete_all)
    if particle_positions is not None and len(particle_positions):
        markers.append(particle_marker(particle_positions, weights, frame, stamp, segments))
    if map_positions is not None:
        markers.append(chain_marker(map_positions, frame, stamp))
    targets = target if isinstance(target, (list, tuple)) else [target]
    for k, each in enumerate(targets):
        if each is not None:
            markers.append(target_marker(each, frame, stamp, k))
    markers.extend(sphere_markers(spheres, frame, stamp))
    return MarkerArray(markers=markers)


def collision_markers(frame, stamp=None, cover=None, obstacles=(), closest=None, clear=True):
    """Return the MarkerArray of the collision model and scene, all in ``frame``.

    cover: (centres (S, 3) [m], radii (S,) [m]) of the robot's cover spheres (e.g. from
    ``CollisionConstraint.cover_spheres(q)``) or None; drawn as a few SPHERE_LIST markers,
    one per 5 mm radius bin, each sphere drawn at its bin's upper radius (never smaller than
    the sphere). obstacles: ((ns, id), Obstacle) pairs (``Scene.items()``): CUBE, SPHERE,
    CYLINDER markers as RViz draws them, sphere sets as one SPHERE_LIST each. closest: (point
    a (3,), point b (3,), distance [m]) or None: a LINE_LIST between the two points, red when
    the distance is negative, orange below 2 cm, green otherwise. clear: start with a
    DELETEALL so that removed obstacles disappear.
    """
    markers = []
    if clear:
        delete_all = _header(Marker(), frame, stamp)
        delete_all.action = Marker.DELETEALL
        markers.append(delete_all)
    if cover is not None and len(cover[1]):
        centers = np.asarray(cover[0], dtype=float).reshape(-1, 3)
        radii = np.asarray(cover[1], dtype=float).reshape(-1)
        bins = np.ceil(radii / _COVER_BIN).astype(int)
        for k, b in enumerate(np.unique(bins)):
            marker = _header(Marker(), frame, stamp)
            marker.ns, marker.id = COLLISION_NAMESPACES[0], k
            marker.type, marker.action = Marker.SPHERE_LIST, Marker.ADD
            marker.pose.orientation.w = 1.0
            diameter = 2.0 * b * _COVER_BIN
            marker.scale = Vector3(x=diameter, y=diameter, z=diameter)
            marker.color = ColorRGBA(r=0.2, g=0.6, b=1.0, a=0.25)
            marker.points = [Point(x=x, y=y, z=z) for x, y, z in centers[bins == b].tolist()]
            markers.append(marker)
    for k, (_, obstacle) in enumerate(obstacles):
        marker = _header(Marker(), frame, stamp)
        marker.ns, marker.id = COLLISION_NAMESPACES[1], k
        marker.action = Marker.ADD
        marker.color = ColorRGBA(r=0.9, g=0.3, b=0.1, a=0.5)
        marker.pose = matrix_to_pose(obstacle.pose)
        if obstacle.shape == 'box':
            marker.type = Marker.CUBE
            marker.scale = Vector3(x=obstacle.size[0], y=obstacle.size[1], z=obstacle.size[2])
        elif obstacle.shape == 'sphere':
            marker.type = Marker.SPHERE
            d = 2.0 * obstacle.size[0]
            marker.scale = Vector3(x=d, y=d, z=d)
        elif obstacle.shape == 'cylinder':
            marker.type = Marker.CYLINDER
            d = 2.0 * obstacle.size[0]
            marker.scale = Vector3(x=d, y=d, z=obstacle.size[1])
        else:
            marker.type = Marker.SPHERE_LIST
            d = 2.0 * obstacle.size[0]
            marker.scale = Vector3(x=d, y=d, z=d)
            marker.points = [Point(x=x, y=y, z=z) for x, y, z in obstacle.centers.tolist()]
        markers.append(marker)
    if closest is not None:
        a, b, distance = closest
        if a is not None and np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
            marker = _header(Marker(), frame, stamp)
            marker.ns, marker.id = COLLISION_NAMESPACES[2], 0
            marker.type, marker.action = Marker.LINE_LIST, Marker.ADD
            marker.pose.orientation.w = 1.0
            marker.scale.x = 0.006
            if distance < 0.0:
                marker.color = ColorRGBA(r=1.0, g=0.0, b=0.0, a=1.0)
            elif distance < 0.02:
                marker.color = ColorRGBA(r=1.0, g=0.6, b=0.0, a=1.0)
            else:
                marker.color = ColorRGBA(r=0.1, g=0.8, b=0.2, a=1.0)
            marker.points = [Point(x=float(a[0]), y=float(a[1]), z=float(a[2])),
                             Point(x=float(b[0]), y=float(b[1]), z=float(b[2]))]
            markers.append(marker)
    return MarkerArray(markers=markers)


ALTERNATIVE_NAMESPACE = 'alternative_{}'   # one namespace per listed branch: toggled in RViz


def alternative_markers(link_positions, within_tolerance, frame, stamp=None, shown=0):
    """Return the ghost arms of the alternatives: markers for K branches, best first.

    link_positions: (K, L, 3) link origins [m] of each branch; within_tolerance: (K,) bool.
    Branch k is drawn in namespace ``alternative_k``: a translucent LINE_STRIP through its
    link origins (id 0; cyan when it satisfies the goal, orange when not) and a text label
    at its tip (id 1: ``k``, the index ``~/select_alternative`` takes). ``shown``: how many
    were drawn last time; the namespaces beyond K are deleted.
    """
    positions = np.asarray(link_positions, dtype=float)
    count = len(positions) if positions.ndim == 3 else 0
    markers = []
    for k in range(count):
        ok = bool(within_tolerance[k])
        ghost = _header(Marker(), frame, stamp)
        ghost.ns, ghost.id = ALTERNATIVE_NAMESPACE.format(k), 0
        ghost.type, ghost.action = Marker.LINE_STRIP, Marker.ADD
        ghost.pose.orientation.w = 1.0
        ghost.scale.x = _MAP_WIDTH
        ghost.color = (ColorRGBA(r=0.0, g=0.85, b=0.9, a=0.35) if ok
                       else ColorRGBA(r=1.0, g=0.55, b=0.1, a=0.3))
        ghost.points = [Point(x=x, y=y, z=z) for x, y, z in positions[k].tolist()]
        label = _header(Marker(), frame, stamp)
        label.ns, label.id = ghost.ns, 1
        label.type, label.action = Marker.TEXT_VIEW_FACING, Marker.ADD
        tip = positions[k, -1]
        label.pose.position = Point(x=float(tip[0]), y=float(tip[1]), z=float(tip[2]) + 0.04)
        label.pose.orientation.w = 1.0
        label.scale.z = 0.04
        label.color = ColorRGBA(r=1.0, g=1.0, b=1.0, a=0.8)
        label.text = str(k)
        markers.extend((ghost, label))
    for k in range(count, int(shown)):
        for marker_id in (0, 1):
            gone = _header(Marker(), frame, stamp)
            gone.ns, gone.id = ALTERNATIVE_NAMESPACE.format(k), marker_id
            gone.action = Marker.DELETE
            markers.append(gone)
    return markers


FIGURE_NAMESPACES = ('center_of_mass', 'support_polygon', 'contacts')
_HELD = ColorRGBA(r=0.1, g=0.8, b=0.2, a=0.8)
_LOST = ColorRGBA(r=1.0, g=0.1, b=0.1, a=0.9)


def figure_markers(frame, stamp=None, com=None, ground=0.0, polygons=(), contacts=(),
                   com_inside=True):
    """Return the markers of the whole figure, all in ``frame`` (the world with a floating
    base).

    com: (3,) centre of mass [m] or None: a SPHERE there (id 0) and a flat CYLINDER at its
    projection along gravity onto the height ``ground`` [m] (id 1), green while
    ``com_inside`` (its support polygon less the margin), else red. polygons: [(hull (H, 2),
    region (R, 2))] of the support polygons [m]: one closed LINE_STRIP each at ``ground``
    (id 2k; the region less the margin, id 2k + 1, thinner). contacts: [(pose (4, 4), held)]
    of the contact constraints' anchored poses: a flat CUBE each (green held, red not).
    """
    markers = []
    if com is not None:
        color = _HELD if com_inside else _LOST
        for marker_id, (z, size) in enumerate(((com[2], 0.05), (ground, 0.04))):
            marker = _header(Marker(), frame, stamp)
            marker.ns, marker.id = FIGURE_NAMESPACES[0], marker_id
            marker.type = Marker.SPHERE if marker_id == 0 else Marker.CYLINDER
            marker.action = Marker.ADD
            marker.pose.position = Point(x=float(com[0]), y=float(com[1]), z=float(z))
            marker.pose.orientation.w = 1.0
            marker.scale = Vector3(x=size, y=size, z=size if marker_id == 0 else 0.004)
            marker.color = color
            markers.append(marker)
    for k, (hull, region) in enumerate(polygons):
        for offset, (points, width) in enumerate(((hull, 0.008), (region, 0.004))):
            if points is None or not len(points):
                continue
            marker = _header(Marker(), frame, stamp)
            marker.ns, marker.id = FIGURE_NAMESPACES[1], 2 * k + offset
            marker.type, marker.action = Marker.LINE_STRIP, Marker.ADD
            marker.pose.orientation.w = 1.0
            marker.scale.x = width
            marker.color = ColorRGBA(r=0.9, g=0.7, b=0.1, a=1.0 if offset == 0 else 0.6)
            ring = np.vstack([points, points[:1]])
            marker.points = [Point(x=float(x), y=float(y), z=float(ground)) for x, y in ring]
            markers.append(marker)
    for k, (pose, held) in enumerate(contacts):
        marker = _header(Marker(), frame, stamp)
        marker.ns, marker.id = FIGURE_NAMESPACES[2], k
        marker.type, marker.action = Marker.CUBE, Marker.ADD
        marker.pose = matrix_to_pose(pose)
        marker.scale = Vector3(x=0.08, y=0.05, z=0.006)
        marker.color = _HELD if held else _LOST
        markers.append(marker)
    return markers
