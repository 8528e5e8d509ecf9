"""Scene obstacles: validation, RViz marker semantics, transactional updates, point clouds."""

import numpy as np
import pytest

from smcik_ros.collision import (MARKER_ADD, MARKER_CUBE, MARKER_CYLINDER, MARKER_DELETE,
                                 MARKER_DELETEALL, MARKER_SPHERE, CollisionConstraint,
                                 Obstacle, Scene, obstacle_from_marker, pointcloud_obstacle,
                                 pose_matrix)
from smcik_ros.errors import GoalError

from collision_helpers import demo_model
from conftest import ARM7_URDF


@pytest.mark.parametrize('make,match', [
    (lambda: Obstacle('box', (0.1, -0.2, 0.3)), r'3 positive finite number\(s\)'),
    (lambda: Obstacle('box', (0.1, 0.2)), 'side lengths x, y, z'),
    (lambda: Obstacle('sphere', (0.0,)), 'positive'),
    (lambda: Obstacle('cylinder', (0.1, float('nan'))), 'radius and height'),
    (lambda: Obstacle('cone', (0.1,)), 'shape must be one of sphere, box, cylinder'),
    (lambda: Obstacle('box', (1, 1, 1), np.diag([1.0, 1.0, -1.0, 1.0])), 'not a rotation'),
    (lambda: Obstacle('box', (1, 1, 1), np.full((4, 4), np.nan)), 'finite'),
    (lambda: Obstacle('sphere', ('a',)), 'must be numbers'),
    (lambda: Obstacle.sphere((0, 0, np.inf), 0.1), '3 finite numbers'),
    (lambda: Obstacle('box', (1, 1, 1), links=[]), 'non-empty list of link names'),
])
def test_malformed_obstacles_are_refused(make, match):
    with pytest.raises(GoalError, match=match):
        make()


def _marker(kind=MARKER_CUBE, action=MARKER_ADD, scale=(0.2, 0.3, 0.4), position=(1, 2, 3),
            orientation=(0, 0, 0, 1), **kwargs):
    return obstacle_from_marker(kind, action, 'obs', 7, position, orientation, scale, **kwargs)


def test_marker_scales_follow_rviz():
    _, key, box = _marker()
    assert key == ('obs', 7) and box.shape == 'box' and box.size == (0.2, 0.3, 0.4)
    np.testing.assert_allclose(box.center, (1, 2, 3))
    _, _, sphere = _marker(MARKER_SPHERE, scale=(0.5, 0.5, 0.5))
    assert sphere.shape == 'sphere' and sphere.radius == pytest.approx(0.25)
    _, _, cyl = _marker(MARKER_CYLINDER, scale=(0.2, 0.2, 1.0))
    assert cyl.shape == 'cylinder' and cyl.size == pytest.approx((0.1, 1.0))


def test_marker_orientation_and_frame_are_applied():
    half = np.sqrt(0.5)
    frame = pose_matrix((0.0, 0.0, 1.0), (0.0, 0.0, half, half))    # +90 deg about z, up 1 m
    _, _, box = _marker(position=(1, 0, 0), orientation=(half, 0, 0, half), frame_pose=frame)
    np.testing.assert_allclose(box.pose[:3, 3], (0.0, 1.0, 1.0), atol=1e-12)
    # Marker x axis stays x in the marker frame, then turns to +y in the base frame.
    np.testing.assert_allclose(box.pose[:3, 0], (0.0, 1.0, 0.0), atol=1e-12)
    _, _, unset = _marker(orientation=(0, 0, 0, 0))
    np.testing.assert_allclose(unset.pose[:3, :3], np.eye(3))
    _, _, scaled = _marker(orientation=(0, 0, 0, 2.0))
    np.testing.assert_allclose(scaled.pose[:3, :3], np.eye(3))


@pytest.mark.parametrize('kwargs,match', [
    (dict(kind=0), 'unsupported marker type 0'),
    (dict(kind=MARKER_SPHERE, scale=(0.2, 0.2, 0.3)), 'uniform scale'),
    (dict(kind=MARKER_CYLINDER, scale=(0.2, 0.3, 1.0)), 'elliptic cylinders'),
    (dict(scale=(0.2, 0.0, 0.3)), '3 positive finite numbers'),
    (dict(scale=(0.2, -1.0, 0.3)), '3 positive finite numbers'),
    (dict(position=(0, np.nan, 0)), '3 finite numbers'),
    (dict(orientation=(0, 0, np.nan, 1)), 'quaternion of 4 finite numbers'),
    (dict(action=1), 'expected action ADD'),
])
def test_bad_markers_are_refused_with_a_clear_message(kwargs, match):
    with pytest.raises(GoalError, match=match):
        _marker(**kwargs)


def test_delete_and_deleteall_markers():
    assert _marker(action=MARKER_DELETE) == ('delete', ('obs', 7))
    assert obstacle_from_marker(MARKER_CUBE, MARKER_DELETEALL) == ('deleteall', None)
    assert obstacle_from_marker(MARKER_CUBE, MARKER_DELETEALL, ns='left') == ('deleteall', 'left')


def test_scene_updates_are_transactional_and_sources_are_kept_apart():
    scene = Scene()
    scene.add(('constraints', 0), Obstacle.sphere((1, 0, 0), 0.1), source='constraints')
    scene.apply([_marker(), obstacle_from_marker(MARKER_SPHERE, MARKER_ADD, 'b', 1,
                                                 scale=(0.1, 0.1, 0.1))], source='obstacles')
    assert len(scene) == 3
    version = scene.version
    with pytest.raises(GoalError, match='scene update 1'):
        scene.apply([('delete', ('obs', 7)), ('add', ('x', 1), 'not an obstacle')],
                    source='obstacles')
    assert len(scene) == 3 and scene.version == version and ('obs', 7) in scene
    scene.apply([('deleteall', None)], source='obstacles')
    assert scene.keys() == [('constraints', 0)]
    scene.apply([_marker(), obstacle_from_marker(MARKER_SPHERE, MARKER_ADD, 'b', 1,
                                                 scale=(0.1, 0.1, 0.1))], source='obstacles')
    scene.apply([('deleteall', 'b')], source='obstacles')
    assert sorted(scene.keys()) == [('constraints', 0), ('obs', 7)]
    assert scene.remove(('obs', 7)) and not scene.remove(('obs', 7))
    assert scene.version > version
    assert scene[('constraints', 0)].radius == 0.1


def test_voxel_spheres_cover_the_points():
    rng = np.random.default_rng(0)
    points = rng.uniform(-0.5, 0.5, (5000, 3))
    points[:10] = np.nan
    obstacle = pointcloud_obstacle(points, voxel_size=0.1)
    centers = obstacle.centers
    ok = np.isfinite(points).all(axis=1)
    occupied = {tuple(c) for c in np.floor(points[ok] / 0.1).astype(int)}
    assert len(centers) == len(occupied) and obstacle.shape == 'spheres'
    assert {tuple(c) for c in np.floor(centers / 0.1).astype(int)} == occupied
    np.testing.assert_allclose(centers / 0.1 - np.floor(centers / 0.1), 0.5)
    d = np.linalg.norm(points[ok][:, None] - obstacle.centers[None], axis=-1).min(axis=1)
    assert d.max() <= obstacle.radius
    assert pointcloud_obstacle(np.full((3, 3), np.nan)) is None
    with pytest.raises(GoalError, match=r'shape \(N, 3\)'):
        pointcloud_obstacle(np.zeros((4, 2)))


def test_points_on_the_robot_are_filtered_by_its_own_cover():
    chain, model = demo_model(ARM7_URDF)
    robot = CollisionConstraint(model, self_collision=False, padding=0.005)
    q = chain.neutral_configuration()
    q[3] = -1.57
    centers, radii, _ = robot.cover_spheres(q)
    rng = np.random.default_rng(1)
    direction = rng.normal(size=(len(radii), 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    on_robot = centers + direction * radii[:, None] * 0.9
    far = rng.uniform([0.6, -0.3, 0.2], [0.9, 0.3, 0.6], (400, 3))
    obstacle = pointcloud_obstacle(np.vstack([on_robot, far]), voxel_size=0.03, robot=robot,
                                   q=q, robot_margin=0.02)
    assert obstacle is not None
    # Nothing of the cloud touches the robot at the measured configuration ...
    scene = Scene({('pointcloud', 0): obstacle})
    check = CollisionConstraint(model, scene, self_collision=False)
    assert not check.in_collision(chain.frames(q))[0]
    # ... and the far points are all still covered by the cloud's spheres.
    d = np.linalg.norm(far[:, None] - obstacle.centers[None], axis=-1).min(axis=1)
    assert d.max() <= obstacle.radius
    # Without the filter, the robot's own points make it collide with itself.
    raw = pointcloud_obstacle(on_robot, voxel_size=0.03)
    assert CollisionConstraint(model, Scene({('pc', 0): raw}),
                               self_collision=False).in_collision(chain.frames(q))[0]
