"""Sphere covers: conservative (every vertex, surface and interior point inside) and tight."""

import os

import numpy as np
import pytest
import trimesh

from smcik_ros.collision import CollisionConstraint
from smcik_ros.collision.covers import (bisect_triangles, cover_box, cover_cylinder,
                                        cover_mesh, cylinder_sections)

from collision_helpers import demo_model, inside_cover, surface_points
from conftest import ARM6_URDF, ARM7_URDF

TOL = 0.01


def _meshes():
    rng = np.random.default_rng(0)
    hull = trimesh.convex.convex_hull(rng.normal(size=(40, 3)) * [0.08, 0.05, 0.12])
    ell = trimesh.boolean.union([trimesh.creation.box((0.3, 0.06, 0.06)),
                                 trimesh.creation.box((0.06, 0.06, 0.25)).apply_translation(
                                     (0.12, 0.0, 0.1))], engine='manifold') \
        if trimesh.boolean.engines_available else None
    torus = trimesh.creation.torus(major_radius=0.12, minor_radius=0.035, major_sections=24,
                                   minor_sections=12)
    out = {'box': trimesh.creation.box((0.2, 0.1, 0.05)),
           'capsule': trimesh.creation.capsule(height=0.2, radius=0.05),
           'hull': hull, 'torus': torus}
    if ell is not None and ell.is_watertight:
        out['ell'] = ell
    return out


MESHES = _meshes()


@pytest.fixture(scope='module')
def covers(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp('covers'))
    return {name: cover_mesh(m.vertices, m.faces, TOL, cache_dir=cache)
            for name, m in MESHES.items()}


@pytest.mark.parametrize('name', sorted(MESHES))
def test_cover_contains_vertices_surface_and_interior(covers, name):
    mesh, cover = MESHES[name], covers[name]
    pts = surface_points(mesh, 20000, seed=1)
    assert inside_cover(pts, cover.centers, cover.radii).all()
    grid = trimesh.sample.volume_mesh(mesh, 3000) if hasattr(trimesh.sample, 'volume_mesh') \
        else mesh.bounding_box.sample_volume(3000)
    grid = grid[mesh.contains(grid)]
    assert len(grid) > 100
    assert inside_cover(grid, cover.centers, cover.radii).all()


@pytest.mark.parametrize('name', sorted(MESHES))
def test_cover_excess_is_bounded_and_measured(covers, name):
    """Every sphere reaches at most its recorded excess beyond the solid (checked with
    trimesh's own signed distance), and the recorded excess stays within the tolerance."""
    mesh, cover = MESHES[name], covers[name]
    depth = trimesh.proximity.signed_distance(mesh, cover.centers)     # > 0 inside
    np.testing.assert_array_less(cover.radii - depth, cover.excess + 1e-6)
    assert cover.max_excess <= TOL + 1e-6
    # Points on the union's surface are within the excess of the mesh.
    k = np.arange(200) + 0.5
    phi, theta = np.arccos(1 - 2 * k / 200), np.pi * (1 + 5 ** 0.5) * k
    unit = np.stack([np.cos(theta) * np.sin(phi), np.sin(theta) * np.sin(phi), np.cos(phi)], 1)
    pts = (cover.centers[:, None] + cover.radii[:, None, None] * unit[None]).reshape(-1, 3)
    d = np.linalg.norm(pts[:, None] - cover.centers[None], axis=-1) - cover.radii[None]
    owner = np.repeat(np.arange(len(cover.radii)), len(unit))
    d[np.arange(len(pts)), owner] = np.inf
    boundary = pts[d.min(axis=1) > 0.0]
    outside = -trimesh.proximity.signed_distance(mesh, boundary)
    assert outside.max() <= cover.max_excess + 1e-6


def test_cover_of_a_box_is_tight_in_count_and_excess():
    """A 20 x 10 x 5 cm box at 1 cm: sharp edges cost spheres (a sphere reaching an edge point
    from depth t needs t <= 2.4 cm), so about 80; a regression guard on the count."""
    cover = cover_box((0.2, 0.1, 0.05), TOL, cache_dir='')
    assert cover.max_excess <= TOL + 1e-9
    assert len(cover) < 100
    looser = cover_box((0.2, 0.1, 0.05), 3 * TOL, cache_dir='')
    assert len(looser) < len(cover) / 2


def test_cylinder_cover_contains_the_true_cylinder_not_just_a_polygon():
    radius, length = 0.06, 0.14
    cover = cover_cylinder(radius, length, TOL, cache_dir='')
    rng = np.random.default_rng(2)
    angle = rng.uniform(0, 2 * np.pi, 20000)
    z = rng.uniform(-length / 2, length / 2, 20000)
    side = np.stack([radius * np.cos(angle), radius * np.sin(angle), z], 1)
    rho = radius * np.sqrt(rng.uniform(0, 1, 5000))
    ang = rng.uniform(0, 2 * np.pi, 5000)
    caps = np.stack([rho * np.cos(ang), rho * np.sin(ang),
                     np.where(rng.uniform(size=5000) < 0.5, -1, 1) * length / 2], 1)
    rim = np.stack([radius * np.cos(angle), radius * np.sin(angle),
                    np.sign(z) * length / 2], 1)
    assert inside_cover(np.vstack([side, caps, rim]), cover.centers, cover.radii).all()
    assert cover.max_excess <= 1.1 * TOL + 1e-9
    n = cylinder_sections(radius, 0.001)
    assert radius / np.cos(np.pi / n) - radius <= 0.001


def test_non_watertight_mesh_is_covered_through_its_hull():
    tube = trimesh.creation.cylinder(radius=0.05, height=0.2, sections=16)
    open_tube = trimesh.Trimesh(tube.vertices, tube.faces[np.abs(tube.face_normals[:, 2]) < 0.5])
    assert not open_tube.is_watertight
    cover = cover_mesh(open_tube.vertices, open_tube.faces, TOL, cache_dir='')
    assert cover.hull
    assert inside_cover(surface_points(open_tube, 5000), cover.centers, cover.radii).all()


def _turned(angle, offset=0.06):
    """(4, 4): a turn by ``angle`` [rad] about the z axis through (offset, 0, 0)."""
    c, s = np.cos(angle), np.sin(angle)
    pose = np.eye(4)
    pose[:2, :2] = [[c, -s], [s, c]]
    pose[:2, 3] = [offset - c * offset, -s * offset]
    return pose


def test_a_swept_cover_holds_every_pose_and_its_excess_bounds_the_union():
    """A finger-like box swept over 1.2 rad about an offset axis (16 poses, as a gripper
    finger's sweep): the surface at every pose and on the straight way between consecutive
    poses is inside the cover, and each sphere's recorded excess is at least its radius less
    its centre's depth in the union of all the copies (the depths are lower bounds)."""
    box = trimesh.creation.box((0.08, 0.02, 0.03))
    poses = np.array([_turned(a) for a in np.linspace(0.0, 1.2, 16)])
    cover = cover_mesh(box.vertices, box.faces, 0.006, poses=poses, cache_dir='')
    pts = surface_points(box, 1500, seed=2)
    placed = np.einsum('kij,pj->kpi', poses[:, :3, :3], pts) + poses[:, None, :3, 3]
    between = 0.5 * (placed[:-1] + placed[1:])
    assert inside_cover(np.vstack([placed.reshape(-1, 3), between.reshape(-1, 3)]),
                        cover.centers, cover.radii).all()
    copies = [box.copy().apply_transform(pose) for pose in poses]
    depth = np.max([trimesh.proximity.signed_distance(m, cover.centers) for m in copies], 0)
    np.testing.assert_array_less(cover.radii - depth, cover.excess + 1e-9)


def test_bisection_tiles_every_triangle_with_short_edges():
    rng = np.random.default_rng(3)
    tris = rng.normal(size=(30, 3, 3)) * [1.0, 0.02, 0.3]     # slivers included
    pieces = bisect_triangles(tris, 0.05)
    edges = np.linalg.norm(pieces[:, [1, 2, 0]] - pieces, axis=-1)
    assert edges.max() <= 0.05 + 1e-12

    def area(t):
        return 0.5 * np.linalg.norm(np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]), axis=1)
    assert area(pieces).sum() == pytest.approx(area(tris).sum(), rel=1e-9)


def test_disk_cache_is_keyed_by_geometry_and_settings(tmp_path):
    mesh = MESHES['hull']
    first = cover_mesh(mesh.vertices, mesh.faces, TOL, cache_dir=str(tmp_path))
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].endswith('.npz')
    again = cover_mesh(mesh.vertices, mesh.faces, TOL, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(first.centers, again.centers)
    np.testing.assert_array_equal(first.radii, again.radii)
    cover_mesh(mesh.vertices, mesh.faces, 2 * TOL, cache_dir=str(tmp_path))
    cover_mesh(mesh.vertices * 1.01, mesh.faces, TOL, cache_dir=str(tmp_path))
    assert len(os.listdir(tmp_path)) == 3
    with open(os.path.join(tmp_path, files[0]), 'wb') as f:
        f.write(b'not an npz')
    rebuilt = cover_mesh(mesh.vertices, mesh.faces, TOL, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(first.radii, rebuilt.radii)


@pytest.mark.parametrize('urdf', [ARM7_URDF, ARM6_URDF])
def test_project_arms_covers_contain_their_urdf_primitives(urdf):
    """At random configurations, points of every link's true cylinders and spheres (posed by
    the chain's FK) lie inside the collision model's spheres."""
    chain, model = demo_model(urdf)
    assert set(model.link_names) == {n for n in chain.link_names if n in model.geometry}
    constraint = CollisionConstraint(model, self_collision=False)
    rng = np.random.default_rng(4)
    for q in chain.random_configuration(rng, 3):
        centers, radii, links = constraint.cover_spheres(q)
        for link, items in model.geometry.items():
            pose = chain.fk(q, link)
            sel = links == link
            for geom in items:
                pts = _primitive_points(geom, rng) @ (pose @ geom.origin)[:3, :3].T + \
                    (pose @ geom.origin)[:3, 3]
                assert inside_cover(pts, centers[sel], radii[sel]).all(), (link, geom.kind)
    assert model.link_excess.max() <= 1.1 * model.tolerance + 1e-9


def _primitive_points(geom, rng, count=4000):
    if geom.kind == 'sphere':
        v = rng.normal(size=(count, 3))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v * geom.size[0]
    if geom.kind == 'cylinder':
        radius, length = geom.size
        angle = rng.uniform(0, 2 * np.pi, count)
        rho = radius * np.where(rng.uniform(size=count) < 0.5, 1.0,
                                np.sqrt(rng.uniform(size=count)))
        z = np.where(rho < radius, np.where(rng.uniform(size=count) < 0.5, -0.5, 0.5) * length,
                     rng.uniform(-0.5, 0.5, count) * length)
        return np.stack([rho * np.cos(angle), rho * np.sin(angle), z], 1)
    mesh = trimesh.creation.box(extents=geom.size)
    return surface_points(mesh, count)


@pytest.mark.parametrize('width', [3, 6])
def test_ball_containment_matches_every_pair_checked(width):
    """The grid-bucketed kernel lists exactly the (ball, piece) pairs a check of every pair
    finds, including pieces of one repeated point and balls reaching outside the grid."""
    from smcik_ros.kernels.cover import ball_containment

    rng = np.random.default_rng(width)
    items = rng.uniform(-0.1, 0.1, size=(400, 1, 3)) + rng.normal(0, 0.01, (400, width, 3))
    items[:40] = items[:40, :1]                       # interior points: one point repeated
    centers = np.vstack([rng.uniform(-0.12, 0.12, size=(150, 3)), [[0.5, 0.5, 0.5]]])
    radius = np.append(rng.uniform(0.001, 0.08, size=150), 0.9)
    means = items.mean(axis=1)
    spread = np.sqrt(np.max(np.sum((items - means[:, None]) ** 2, axis=2), axis=1))
    indptr, indices = ball_containment(centers, radius, items, means, spread, 0.01)
    far = np.max(np.linalg.norm(items[None] - centers[:, None, None], axis=-1), axis=2)
    for c in range(len(centers)):
        expected = np.flatnonzero(far[c] <= radius[c] * (1.0 - 1e-12))
        np.testing.assert_array_equal(np.sort(indices[indptr[c]:indptr[c + 1]]), expected)
    assert indptr[-1] > 400      # the check is not vacuous: many pairs are contained


@pytest.mark.parametrize('width', [3, 6])
def test_best_fit_matches_every_pair_compared(width):
    """Each piece goes to the ball of least excess within the tolerance (the lowest index
    among equals), as comparing every piece with every ball finds, with the same distance;
    -1 where none fits. Some centres are outside the mesh (negative depth)."""
    from smcik_ros.kernels.cover import best_fit

    rng = np.random.default_rng(10 + width)
    items = rng.uniform(-0.1, 0.1, size=(500, 1, 3)) + rng.normal(0, 0.004, (500, width, 3))
    centers = rng.uniform(-0.12, 0.12, size=(300, 3))
    centers[1::7] = centers[::7][:len(centers[1::7])]     # equal balls: ties go low
    depths = rng.uniform(-0.01, 0.05, size=300)
    depths[1::7] = depths[::7][:len(depths[1::7])]
    tolerance = 0.01
    best, far = best_fit(centers, depths, items, items.mean(axis=1), tolerance, 0.01)
    all_far = np.sqrt(np.max(np.sum((items[None] - centers[:, None, None]) ** 2, axis=-1),
                             axis=2))                                      # (C, I)
    cost = np.where(all_far - depths[:, None] <= tolerance + 1e-12,
                    all_far - depths[:, None], np.inf)
    expected = np.where(np.isfinite(cost.min(axis=0)), np.argmin(cost, axis=0), -1)
    np.testing.assert_array_equal(best, expected)
    fitted = expected >= 0
    np.testing.assert_array_equal(far[fitted], all_far[expected[fitted], fitted])
    assert 0 < fitted.sum() < len(items)       # both cases occur


def test_shrinking_balls_of_a_sphere_are_the_sphere():
    """On a sphere of radius R (outward normals) the largest ball tangent inside that holds
    no sample is the sphere itself; outside nothing bounds it but ``cap``. Between two
    plates the opposite one bounds it (diameter: the gap, or more between its samples),
    and ``cap`` where smaller."""
    from smcik_ros.kernels.cover import shrinking_ball

    rng = np.random.default_rng(3)
    radius = 0.07
    unit = rng.normal(size=(400, 3))
    unit /= np.linalg.norm(unit, axis=1)[:, None]
    points = radius * unit
    np.testing.assert_allclose(shrinking_ball(points, unit, points, 1.0), radius, rtol=1e-9)
    assert np.all(shrinking_ball(points, -unit, points, 1.0) == 1.0)    # balls outside
    # Two parallel plates 0.04 m apart: a ball tangent to one is bounded by the other
    # (diameter 0.04) where samples lie opposite, by the cap where it is smaller.
    grid = rng.uniform(-0.2, 0.2, size=(600, 2))
    bottom = np.c_[grid[:300], np.zeros(300)]
    top = np.c_[grid[300:], np.full(300, 0.04)]
    down = np.tile([0.0, 0.0, -1.0], (20, 1))          # the bottom plate's outward normal
    samples = np.vstack([bottom, top])
    found = shrinking_ball(bottom[:20] * 0.1, down, samples, 1.0)
    assert np.all((found >= 0.02 * (1 - 1e-9)) & (found < 0.03))     # samples are sparse
    assert np.all(shrinking_ball(bottom[:20] * 0.1, down, samples, 0.01) == 0.01)


def test_the_cover_kernels_warmed_at_set_up_are_the_ones_a_cover_calls():
    """``compile_cover_kernels`` (run by ``./smcik`` when it creates the environment) gives
    the kernels the very types a cover computation uses: a swept and a fixed cover after it
    compile nothing more (else the covers' child process of a first start compiles them)."""
    from smcik_ros.kernels.cover import (ball_containment, best_fit, compile_cover_kernels,
                                         shrinking_ball)
    kernels = (ball_containment, best_fit, shrinking_ball)
    compile_cover_kernels()
    before = [len(k.signatures) for k in kernels]
    box = trimesh.creation.box((0.05, 0.02, 0.03))
    cover_mesh(box.vertices, box.faces, 0.01, cache_dir='')
    cover_mesh(box.vertices, box.faces, 0.01, cache_dir='',
               poses=np.array([_turned(a) for a in (0.0, 0.3, 0.6)]))
    assert [len(k.signatures) for k in kernels] == before
