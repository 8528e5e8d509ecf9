"""Distance kernels of the collision primitives against exact formulas and python-fcl."""

import fcl
import numpy as np
import pytest

from smcik_ros.collision import shapes
from smcik_ros.collision.scene import Obstacle, pose_matrix
from smcik_ros.rotations import rotvec_to_matrix

from collision_helpers import fcl_obstacle


BOX = np.array([0.1, 0.2, 0.3])    # half sizes


@pytest.mark.parametrize('point,expected', [
    ((0.3, 0.0, 0.0), 0.2),                                  # face x
    ((0.0, -0.5, 0.1), 0.3),                                 # face y
    ((0.4, 0.6, 0.0), np.hypot(0.3, 0.4)),                   # edge
    ((0.2, 0.4, 0.7), np.sqrt(0.1 ** 2 + 0.2 ** 2 + 0.4 ** 2)),  # corner
    ((0.0, 0.0, 0.0), -0.1),                                 # centre: nearest face x
    ((0.05, 0.15, 0.0), -0.05),                              # inside, nearest faces x and y
    ((0.0, 0.0, -0.28), -0.02),                              # inside, near face -z
    ((0.1, 0.0, 0.0), 0.0),                                  # on the surface
])
def test_point_box_distance_exact(point, expected):
    assert shapes.point_box_distance(np.array(point), BOX) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize('point,expected', [
    ((0.5, 0.0, 0.0), 0.3),                                  # side
    ((0.0, 0.3, 0.1), 0.1),                                  # side, off axis height
    ((0.1, 0.0, 0.6), 0.3),                                  # cap (above the disc)
    ((0.0, 0.0, -0.5), 0.2),                                 # cap below
    ((0.3, 0.4, 0.7), np.hypot(0.5 - 0.2, 0.4)),             # rim: radial 0.3, axial 0.4
    ((0.0, 0.0, 0.0), -0.2),                                 # centre: side nearest (r 0.2 < h 0.3)
    ((0.0, 0.0, 0.25), -0.05),                               # inside near the cap
    ((0.15, 0.0, 0.0), -0.05),                               # inside near the side
    ((0.2, 0.0, 0.3), 0.0),                                  # on the rim
])
def test_point_cylinder_distance_exact(point, expected):
    d = shapes.point_cylinder_distance(np.array(point), 0.2, 0.3)
    assert d == pytest.approx(expected, abs=1e-12)


def _random_primitives(rng, count):
    out = []
    for k in range(count):
        pose = np.eye(4)
        pose[:3, :3] = rotvec_to_matrix(rng.normal(size=3))
        pose[:3, 3] = rng.uniform(-0.5, 0.5, 3)
        kind = k % 3
        if kind == 0:
            out.append(Obstacle('sphere', (rng.uniform(0.05, 0.3),), pose))
        elif kind == 1:
            out.append(Obstacle('box', tuple(rng.uniform(0.05, 0.5, 3)), pose))
        else:
            out.append(Obstacle('cylinder', (rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.6)),
                                pose))
    return out


def _arrays(obstacles):
    parts = [o.primitives() for o in obstacles]
    return [np.concatenate([p[i] for p in parts]) for i in range(4)]


def test_primitive_distances_match_fcl_for_spheres_outside_and_touching():
    """A sphere of radius r at p: FCL's sphere-primitive distance (or contact) agrees with
    signed distance(p) - r on posed spheres, boxes and cylinders."""
    rng = np.random.default_rng(0)
    obstacles = _random_primitives(rng, 60)
    kind, rot, trans, size = _arrays(obstacles)
    checked_far = checked_contact = 0
    reach = shapes.primitive_bounding_radius(kind, size)
    for _ in range(20):
        # Points around each primitive, from deep inside to well outside it.
        direction = rng.normal(size=(len(obstacles), 3))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        points = trans + direction * (reach * rng.uniform(0.0, 1.6, len(obstacles)))[:, None]
        radius = 0.03
        ours = shapes.point_primitive_distance(points, kind, rot, trans, size) - radius
        for k, obstacle in enumerate(obstacles):
            probe = fcl.CollisionObject(fcl.Sphere(radius), fcl.Transform(points[k]))
            other = fcl_obstacle(obstacle)
            touching = fcl.collide(probe, other, fcl.CollisionRequest(),
                                   fcl.CollisionResult()) > 0
            if touching:
                assert ours[k] <= 1e-6, (obstacle, points[k], ours[k])
                checked_contact += 1
            else:
                d = fcl.distance(probe, other, fcl.DistanceRequest(), fcl.DistanceResult())
                # FCL's GJK distance for curved shapes is accurate to ~1e-6 m.
                assert ours[k] == pytest.approx(d, abs=2e-5), obstacle
                checked_far += 1
    assert checked_far > 500 and checked_contact > 50


def test_gradients_are_unit_and_match_finite_differences():
    rng = np.random.default_rng(1)
    obstacles = _random_primitives(rng, 30)
    kind, rot, trans, size = _arrays(obstacles)
    points = rng.uniform(-1.0, 1.0, (len(obstacles), 3))
    grad = shapes.point_primitive_gradient(points, kind, rot, trans, size)
    np.testing.assert_allclose(np.linalg.norm(grad, axis=1), 1.0, atol=1e-12)
    h = 1e-6
    for axis in range(3):
        step = np.zeros(3)
        step[axis] = h
        plus = shapes.point_primitive_distance(points + step, kind, rot, trans, size)
        minus = shapes.point_primitive_distance(points - step, kind, rot, trans, size)
        np.testing.assert_allclose((plus - minus) / (2 * h), grad[:, axis], atol=1e-5)


def test_gradient_inside_points_to_the_nearest_face():
    box = Obstacle('box', (0.2, 0.4, 0.6), pose_matrix((1.0, 0.0, 0.0)))
    kind, rot, trans, size = box.primitives()
    g = shapes.point_primitive_gradient(np.array([[1.05, 0.0, 0.1]]), kind, rot, trans, size)
    np.testing.assert_allclose(g[0], [1.0, 0.0, 0.0])
    cyl = Obstacle('cylinder', (0.2, 0.6), np.eye(4))
    kind, rot, trans, size = cyl.primitives()
    g = shapes.point_primitive_gradient(np.array([[0.0, 0.01, -0.28]]), kind, rot, trans, size)
    np.testing.assert_allclose(g[0], [0.0, 0.0, -1.0])


def test_bounding_radius_contains_the_primitive():
    kind = np.array([shapes.SPHERE, shapes.BOX, shapes.CYLINDER])
    size = np.array([[0.3, 0, 0], [0.1, 0.2, 0.2], [0.3, 0.4, 0]])
    np.testing.assert_allclose(shapes.primitive_bounding_radius(kind, size), [0.3, 0.3, 0.5])
