"""collision.support: the support polygon of links' collision shapes, against yourdfpy's FK of
the same shapes and closed forms (a box's footprint, a sphere's disk), at configurations
with the feet tilted and the base moved."""

import math

import numpy as np
import pytest
import trimesh
import yourdfpy
from scipy.spatial import ConvexHull

from smcik_ros.collision import support_points, support_polygon
from smcik_ros.errors import GoalError
from smcik_ros.goals import CenterOfMassPolygon
from smcik_ros.model import Chain
from smcik_ros.rotations import rotvec_to_matrix

from test_goals_body import BIPED, TIPS, standing


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(BIPED, 'pelvis', TIPS, floating_base=True)


def _area(polygon):
    x, y = polygon[:, 0], polygon[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def test_feet_boxes_give_their_corners_hull_at_any_configuration(biped):
    ref = yourdfpy.URDF.load(BIPED, build_scene_graph=True, load_meshes=False)
    rng = np.random.default_rng(51)
    for trial in range(5):
        q = standing(biped) if trial == 0 else biped.random_configuration(rng)
        if trial:
            q[biped.base_index] = (*rng.uniform(-1, 1, 2), 0.9, *rng.uniform(-0.5, 0.5, 3))
        polygon = support_polygon(biped, BIPED, ['l_foot', 'r_foot'], q)
        ref.update_cfg({biped.joint_names[i]: q[i] for i in biped.command_index})
        corners = []
        for link in ('l_foot', 'r_foot'):
            box = ref.link_map[link].collisions[0]
            half = 0.5 * np.asarray(box.geometry.box.size)
            pose = biped.base_pose(q) @ ref.get_transform(link, 'pelvis') @ box.origin
            for sign in np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3):
                corners.append((pose @ np.append(sign * half, 1.0))[:2])
        corners = np.array(corners)
        expected = corners[ConvexHull(corners).vertices]
        assert len(polygon) == len(expected)
        for v in expected:
            assert np.min(np.linalg.norm(polygon - v, axis=1)) < 1e-9
        assert _area(polygon) > 0
    # Standing: the two 0.24 x 0.1 boxes at y = +-0.1, centred 0.03 ahead of the ankles.
    standing_polygon = support_polygon(biped, BIPED, ['l_foot', 'r_foot'], standing(biped))
    np.testing.assert_allclose(
        [standing_polygon[:, 0].min(), standing_polygon[:, 0].max(),
         standing_polygon[:, 1].min(), standing_polygon[:, 1].max()],
        [-0.09, 0.15, -0.15, 0.15], atol=1e-9)


def test_spheres_and_cylinders_are_inscribed_in_their_shadows(biped):
    q = standing(biped)
    head = support_polygon(biped, BIPED, ['head'], q)       # a passive link (the neck)
    area = math.pi * 0.1 ** 2
    assert 0.98 * area < _area(head) <= area
    biped.set_passive({'neck': 0.5})
    moved = support_polygon(biped, BIPED, ['head'], q)
    assert moved[:, 0].mean() > head[:, 0].mean() + 0.04   # the head leans forwards
    biped.set_passive({'neck': 0.0})
    shin = support_polygon(biped, BIPED, ['l_shin'], q)
    # A cylinder of radius 0.05, length 0.4, tilted 0.3 rad: a stadium 0.1 wide.
    width = shin[:, 1].max() - shin[:, 1].min()
    assert 0.0995 < width <= 0.1 + 1e-12
    length = shin[:, 0].max() - shin[:, 0].min()
    expected = 0.4 * math.sin(0.3) + 2 * 0.05 * math.cos(0.3)
    assert expected * 0.995 < length <= expected + 1e-12


def test_mesh_shapes_use_their_vertices(tmp_path):
    mesh = trimesh.creation.box(extents=(0.2, 0.1, 0.05))
    mesh.export(tmp_path / 'foot.stl')
    urdf = f"""<robot name="footed">
      <link name="base_link"/>
      <joint name="j" type="revolute"><parent link="base_link"/><child link="foot"/>
        <axis xyz="0 0 1"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
      <link name="foot"><collision><origin xyz="0.1 0 0" rpy="0 0 0"/><geometry>
        <mesh filename="foot.stl" scale="2 1 1"/></geometry></collision></link>
    </robot>"""
    path = tmp_path / 'footed.urdf'
    path.write_text(urdf)
    chain = Chain.from_urdf(str(path), 'base_link', 'foot', cache_dir='')
    points = support_points(str(path), ['foot'])['foot']
    np.testing.assert_allclose(np.sort(np.unique(points[:, 0].round(6))), [-0.1, 0.3])
    polygon = support_polygon(chain, str(path), ['foot'], [math.pi / 2])
    rotated = (rotvec_to_matrix(np.array([0, 0, math.pi / 2]))[:2, :2]
               @ np.array([[-0.1, -0.05], [0.3, -0.05], [0.3, 0.05], [-0.1, 0.05]]).T).T
    for v in rotated:       # (an STL holds float32 vertices)
        assert np.min(np.linalg.norm(polygon - v, axis=1)) < 1e-6
    # The same from the XML text with the file it came from.
    again = support_points(urdf, ['foot'], urdf_path=str(path))['foot']
    np.testing.assert_array_equal(again, points)


def test_support_points_feed_the_com_polygon(biped):
    term = CenterOfMassPolygon(support=support_points(BIPED, ['l_foot', 'r_foot']),
                               margin=0.01).bind(biped).anchor(standing(biped))
    np.testing.assert_allclose([term.region[:, 0].min(), term.region[:, 0].max()],
                               [-0.08, 0.14], atol=1e-9)


def test_unusable_supports_say_why():
    with pytest.raises(GoalError, match="support link 'l_sole' has no <collision> shape"):
        support_points(BIPED, ['l_sole'])
    with pytest.raises(GoalError, match="unknown link.* l_toe; links in this URDF: pelvis"):
        support_points(BIPED, ['l_foot', 'l_toe'])
    with pytest.raises(GoalError, match='at least one link'):
        support_points(BIPED, [])
    missing = ('<robot name="r"><link name="a"/><joint name="j" type="fixed"><parent link="a"/>'
               '<child link="b"/></joint><link name="b"><collision><geometry>'
               '<mesh filename="package://nowhere/foot.stl"/></geometry></collision></link>'
               '</robot>')
    with pytest.raises(GoalError, match="support links: mesh 'package://nowhere/foot.stl' "
                                        'not found'):
        support_points(missing, ['b'])
    fixed = Chain.from_urdf(BIPED, 'torso', 'l_palm')
    with pytest.raises(GoalError, match="support link 'l_foot' is not below the base link "
                                        "'torso'"):
        support_polygon(fixed, BIPED, ['l_foot'], np.zeros(fixed.nq))
