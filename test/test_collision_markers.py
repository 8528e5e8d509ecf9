"""Collision markers: cover spheres, obstacles and the closest pair in one MarkerArray."""

import numpy as np
import pytest

pytest.importorskip('visualization_msgs', reason='the ROS message packages are needed '
                    '(./smcik installs them; or a ROS install)')

from visualization_msgs.msg import Marker  # noqa: E402

from smcik_ros.collision import CollisionConstraint, Obstacle, Scene, pose_matrix  # noqa: E402
from smcik_ros.ros.markers import COLLISION_NAMESPACES, collision_markers  # noqa: E402

from collision_helpers import demo_model  # noqa: E402
from conftest import ARM7_URDF  # noqa: E402


def test_collision_markers_draw_cover_obstacles_and_closest_pair():
    chain, model = demo_model(ARM7_URDF)
    half = np.sqrt(0.5)
    scene = Scene({('o', 1): Obstacle.box((0.1, 0.2, 0.3), pose_matrix((0.5, 0, 0.3),
                                                                       (0, 0, half, half))),
                   ('o', 2): Obstacle.sphere((0.4, 0.3, 0.2), 0.05),
                   ('o', 3): Obstacle.cylinder(0.04, 0.5, pose_matrix((0.3, -0.3, 0.25))),
                   ('pc', 0): Obstacle('spheres', (0.02,), centers=np.zeros((7, 3)))})
    c = CollisionConstraint(model, scene, self_collision=False)
    q = chain.neutral_configuration()
    centers, radii, _ = c.cover_spheres(q)
    status = c.status(q)
    array = collision_markers('base_link', cover=(centers, radii), obstacles=scene.items(),
                              closest=(status['points'][0], status['points'][1],
                                       status['min_distance']))
    markers = array.markers
    assert markers[0].action == Marker.DELETEALL
    cover = [m for m in markers if m.ns == COLLISION_NAMESPACES[0]]
    # Every sphere is drawn once, at a radius >= its own and < 5 mm larger.
    assert sum(len(m.points) for m in cover) == len(radii)
    assert len(cover) == len(np.unique(np.ceil(radii / 0.005)))
    for m in cover:
        assert m.type == Marker.SPHERE_LIST and m.header.frame_id == 'base_link'
        for p in m.points:
            k = np.argmin(np.linalg.norm(centers - (p.x, p.y, p.z), axis=1))
            assert radii[k] <= m.scale.x / 2 < radii[k] + 0.005 + 1e-12
    obstacles = {m.id: m for m in markers if m.ns == COLLISION_NAMESPACES[1]}
    box, sphere, cyl, cloud = (obstacles[k] for k in range(4))
    assert box.type == Marker.CUBE and (box.scale.x, box.scale.y, box.scale.z) == (0.1, 0.2, 0.3)
    assert abs(box.pose.orientation.z) == pytest.approx(abs(box.pose.orientation.w))
    assert sphere.type == Marker.SPHERE and abs(sphere.scale.x - 0.1) < 1e-12
    assert cyl.type == Marker.CYLINDER and abs(cyl.scale.x - 0.08) < 1e-12 and cyl.scale.z == 0.5
    assert cloud.type == Marker.SPHERE_LIST and len(cloud.points) == 7
    line = [m for m in markers if m.ns == COLLISION_NAMESPACES[2]][0]
    assert line.type == Marker.LINE_LIST and len(line.points) == 2


def test_collision_markers_group_spheres_instead_of_one_marker_each():
    chain, model = demo_model(ARM7_URDF)
    c = CollisionConstraint(model, self_collision=False)
    centers, radii, _ = c.cover_spheres(chain.neutral_configuration())
    markers = collision_markers('base_link', cover=(centers, radii), clear=False).markers
    # Few SPHERE_LIST markers for hundreds of spheres (the build time is measured by
    # benchmarks/collision.py, not asserted here).
    assert len(radii) > 300 and len(markers) <= 16
    empty = collision_markers('base_link', closest=(None, None, np.inf), clear=False)
    assert empty.markers == []


def test_figure_markers_draw_the_com_its_projection_the_polygons_and_the_contacts():
    from smcik_ros.ros.markers import FIGURE_NAMESPACES, figure_markers
    hull = np.array([[0.0, 0.0], [0.2, 0.0], [0.2, 0.1], [0.0, 0.1]])
    region = hull * 0.5 + 0.025
    contact = np.eye(4)
    contact[:3, 3] = (0.1, 0.05, 0.02)
    markers = figure_markers('world', None, com=(0.1, 0.05, 0.9), ground=0.02,
                             polygons=[(hull, region)], contacts=[(contact, True),
                                                                  (np.eye(4), False)],
                             com_inside=False)
    by_ns = {}
    for m in markers:
        by_ns.setdefault(m.ns, []).append(m)
    assert set(by_ns) == set(FIGURE_NAMESPACES)
    com, shadow = by_ns['center_of_mass']
    assert (com.type, shadow.type) == (Marker.SPHERE, Marker.CYLINDER)
    assert (com.pose.position.z, shadow.pose.position.z) == (0.9, 0.02)
    assert com.color.r == 1.0, 'red: the CoM is outside its support'
    strip, inner = by_ns['support_polygon']
    assert strip.type == Marker.LINE_STRIP and len(strip.points) == 5, 'a closed ring'
    assert [p.z for p in strip.points] == [0.02] * 5 and inner.id == 1
    held, lost = by_ns['contacts']
    assert held.pose.position.x == pytest.approx(0.1) and held.color.g > lost.color.g
    assert all(m.header.frame_id == 'world' for m in markers)
    assert figure_markers('world') == [], 'nothing to draw without a figure'
