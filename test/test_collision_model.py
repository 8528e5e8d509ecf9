"""Collision model from URDF: mesh URIs, formats, off-chain links, base ancestors, skeleton."""

import logging
import os
import re
import textwrap

import numpy as np
import pytest
import trimesh

from smcik_ros.collision import (CollisionConstraint, CollisionModel, KeepOutSphere,
                                 conventional_srdf_path, resolve_mesh_uri)
from smcik_ros.collision.model import SWEEP_BATCH, link_covers
from smcik_ros.errors import ModelError
from smcik_ros.model import Chain

from collision_helpers import (FclRobot, cover_cache_dir, inside_cover, surface_points,
                               write_two_link_urdf)


def _mesh():
    rng = np.random.default_rng(7)
    return trimesh.convex.convex_hull(rng.normal(size=(30, 3)) * [0.03, 0.02, 0.06])


def _write_mesh(path, mesh, unit=None):
    """Write STL, OBJ or DAE; for DAE with ``unit`` [m], vertices are written in that unit."""
    if path.endswith('.dae'):
        scaled = mesh.copy()
        if unit is not None:
            scaled.apply_scale(1.0 / unit)
        text = scaled.export(file_type='dae')
        text = text.decode() if isinstance(text, bytes) else text
        if unit is not None:
            text = text.replace('<asset>', f'<asset>\n    <unit meter="{unit}" name="unit"/>', 1)
        with open(path, 'w') as f:
            f.write(text)
    else:
        mesh.export(path)


def _package(tmp_path, name='gen_description', dirname=None, package_xml=False):
    root = tmp_path / (dirname or name)
    (root / 'meshes').mkdir(parents=True)
    (root / 'urdf').mkdir()
    if package_xml:
        (root / 'package.xml').write_text(f'<package format="3"><name>{name}</name></package>')
    return root


def _check_model_contains_meshes(urdf, mesh_file, mesh_map, package_paths=(), unit=1.0,
                                 model=None):
    """The model's covers (default: built here) contain the mesh file's surface (as written:
    STL stores float32) on both links, posed by yourdfpy's forward kinematics."""
    mesh = trimesh.load(mesh_file, force='mesh')
    mesh.apply_scale(unit)
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0') if model is None else model.chain
    if model is None:
        model = CollisionModel.from_urdf(chain, urdf, package_paths=package_paths,
                                         cache_dir=cover_cache_dir())
    assert model.link_names == ('link1', 'link2')
    fcl_robot = FclRobot(urdf, 'base_link', mesh_map)
    constraint = CollisionConstraint(model, self_collision=False)
    rng = np.random.default_rng(0)
    for q in chain.random_configuration(rng, 4):
        centers, radii, links = constraint.cover_spheres(q)
        fcl_robot.urdf.update_cfg(dict(zip(chain.joint_names, q)))
        for link, scale in (('link1', 1.0), ('link2', (0.5, 0.5, 1.0))):
            col = [lk for lk in fcl_robot.urdf.robot.links if lk.name == link][0].collisions[0]
            origin = np.eye(4) if col.origin is None else col.origin
            pose = fcl_robot.urdf.get_transform(frame_to=link, frame_from='base_link') @ origin
            pts = surface_points(mesh, 3000) * scale
            pts = pts @ pose[:3, :3].T + pose[:3, 3]
            sel = links == link
            assert inside_cover(pts, centers[sel], radii[sel]).all(), link
    return model


@pytest.mark.parametrize('ext', ['stl', 'obj', 'dae'])
def test_package_uri_through_package_paths_in_every_format(tmp_path, ext):
    root = _package(tmp_path / 'ws')
    path = str(root / 'meshes' / f'part.{ext}')
    unit = 0.001 if ext == 'dae' else None
    _write_mesh(path, _mesh(), unit=unit)
    urdf = write_two_link_urdf(str(tmp_path), f'package://gen_description/meshes/part.{ext}')
    _check_model_contains_meshes(urdf, path, {'package://gen_description': str(root)},
                                 package_paths=[str(tmp_path / 'nothing'), str(tmp_path / 'ws')],
                                 unit=unit or 1.0)


def test_package_found_by_package_xml_name_in_package_paths(tmp_path):
    root = _package(tmp_path / 'src', name='moveit_resources_gen', dirname='gen',
                    package_xml=True)
    path = str(root / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    urdf = write_two_link_urdf(str(tmp_path), 'package://moveit_resources_gen/meshes/part.stl')
    _check_model_contains_meshes(urdf, path, {'package://moveit_resources_gen': str(root)},
                                 package_paths=[str(tmp_path / 'src')])


@pytest.mark.parametrize('by_name', [True, False])
def test_ament_less_fallback_to_the_urdf_directory_tree(tmp_path, by_name, monkeypatch):
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    root = _package(tmp_path, name='gen_description',
                    dirname=None if by_name else 'checkout', package_xml=not by_name)
    path = str(root / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    urdf = write_two_link_urdf(str(root / 'urdf'), 'package://gen_description/meshes/part.stl')
    _check_model_contains_meshes(urdf, path, {'package://gen_description': str(root)})


def test_a_package_beside_the_urdfs_own_is_found(tmp_path, monkeypatch):
    """An unsourced workspace: the URDF in src/arm_description/urdf refers to
    package://arm_meshes/..., a package beside it (found by its package.xml, under another
    directory name); one more level up than SIBLING_LEVELS allows is not searched."""
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    from smcik_ros.collision import model as collision_model
    src = tmp_path / 'ws' / 'src'
    meshes = _package(src, name='arm_meshes', dirname='meshes_checkout', package_xml=True)
    path = str(meshes / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    urdf_dir = src / 'arm_description' / 'urdf'
    urdf_dir.mkdir(parents=True)
    urdf = write_two_link_urdf(str(urdf_dir), 'package://arm_meshes/meshes/part.stl',
                               name='beside')
    _check_model_contains_meshes(urdf, path, {'package://arm_meshes': str(meshes)})
    deep = urdf_dir / 'a' / 'b'                     # src is SIBLING_LEVELS + 1 up
    assert collision_model.SIBLING_LEVELS == 3
    with pytest.raises(ModelError, match='nor a directory in the ancestors up to 3'):
        resolve_mesh_uri('package://arm_meshes/meshes/part.stl', str(deep))
    assert resolve_mesh_uri('package://arm_meshes/meshes/part.stl', str(urdf_dir / 'a')) == path


def test_a_package_in_the_urdfs_own_directory_is_found(tmp_path, monkeypatch):
    """pybullet_data's xarm: xarm/xarm6_robot.urdf refers to package://xarm_description/...,
    a directory in the URDF's own directory (no package.xml). All six of its links' meshes
    went unread, and the arm ran without self-collision checks."""
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    urdf_dir = tmp_path / 'xarm'
    meshes = _package(urdf_dir, name='xarm_description', dirname=None, package_xml=False)
    path = str(meshes / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    urdf = write_two_link_urdf(str(urdf_dir), 'package://xarm_description/meshes/part.stl',
                               name='inside')
    _check_model_contains_meshes(urdf, path, {'package://xarm_description': str(meshes)})


def test_ament_index_is_used_when_it_knows_the_package(tmp_path, monkeypatch):
    pytest.importorskip('ament_index_python', reason='ament_index_python is not installed')
    prefix = tmp_path / 'install'
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages').mkdir(parents=True)
    (prefix / 'share' / 'ament_index' / 'resource_index' / 'packages' /
     'gen_description').write_text('')
    share = prefix / 'share' / 'gen_description' / 'meshes'
    share.mkdir(parents=True)
    mesh = _mesh()
    _write_mesh(str(share / 'part.stl'), mesh)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(prefix))
    assert resolve_mesh_uri('package://gen_description/meshes/part.stl', str(tmp_path)) == \
        str(share / 'part.stl')


def test_file_uris_and_relative_paths_are_relative_to_the_urdf(tmp_path):
    (tmp_path / 'm').mkdir()
    _write_mesh(str(tmp_path / 'm' / 'part.obj'), _mesh())
    urdf = write_two_link_urdf(str(tmp_path), 'm/part.obj', name='rel')
    _check_model_contains_meshes(urdf, str(tmp_path / 'm' / 'part.obj'), {})
    absolute = f'file://{tmp_path}/m/part.obj'
    assert resolve_mesh_uri(absolute) == str(tmp_path / 'm' / 'part.obj')


def test_urdf_text_with_urdf_path_resolves_relative_meshes(tmp_path):
    mesh = _mesh()
    (tmp_path / 'm').mkdir()
    _write_mesh(str(tmp_path / 'm' / 'part.stl'), mesh)
    urdf = write_two_link_urdf(str(tmp_path), 'm/part.stl', name='text')
    with open(urdf) as f:
        xml = f.read()
    chain = Chain.from_urdf(xml, 'base_link', 'tool0')
    model = CollisionModel.from_urdf(chain, xml, urdf_path=urdf, cache_dir=cover_cache_dir())
    assert model.link_names == ('link1', 'link2')
    elsewhere = CollisionModel.from_urdf(chain, xml, cache_dir='',
                                         urdf_path=str(tmp_path / 'elsewhere' / 'x.urdf'))
    assert elsewhere.link_names == ()
    assert all('part.stl' in w for w in elsewhere.warnings), elsewhere.warnings


def test_a_missing_mesh_leaves_its_link_out_with_one_warning(tmp_path, monkeypatch, logged):
    """A collision mesh that cannot be found never stops the model: one warning (in
    ``warnings`` and on the smcik_ros.collision logger, also where that logger does not
    propagate, as under launch) names the link, the URI and every place looked; the other
    links keep their covers."""
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    monkeypatch.setattr(logging.getLogger('smcik_ros.collision'), 'propagate', False)
    _write_mesh(str(tmp_path / 'part.stl'), _mesh())
    extra = textwrap.dedent("""
      <joint name="flange" type="fixed"><parent link="link2"/><child link="hand"/>
        <origin xyz="0 0 0.3"/></joint>
      <link name="hand"><collision><geometry>
        <mesh filename="package://no_such_pkg/meshes/hand.stl"/></geometry></collision>
        <collision><geometry><box size="0.05 0.05 0.05"/></geometry></collision></link>""")
    urdf = write_two_link_urdf(str(tmp_path), 'part.stl', extra_links=extra, name='missing')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    log = logged('smcik_ros.collision', logging.WARNING)
    model = CollisionModel.from_urdf(chain, urdf, package_paths=[str(tmp_path / 'ws')],
                                     cache_dir='')
    assert model.link_names == ('link1', 'link2')
    assert 'hand' not in model.geometry
    (warning,) = [w for w in model.warnings if 'hand' in w]
    assert log.messages == [warning]
    assert "link 'hand'" in warning and 'package://no_such_pkg/meshes/hand.stl' in warning
    assert 'no collision checks for it' in warning
    assert 'ament index' in warning and str(tmp_path / 'ws') in warning
    assert f'no ancestor of {str(tmp_path)!r}' in warning and 'package_paths' in warning
    # The same robot through the model cache: still one warning, still without the hand.
    cache = str(tmp_path / 'cache')
    log.clear()
    first = CollisionModel.from_urdf(chain, urdf, cache_dir=cache)
    second = CollisionModel.from_urdf(chain, urdf, cache_dir=cache)
    assert first.link_names == second.link_names == ('link1', 'link2')
    assert sum('hand.stl' in m for m in log.messages) == 2       # once per build


def test_a_mesh_that_cannot_be_read_leaves_its_link_out(tmp_path, logged):
    """A mesh file that is there but is no mesh (empty, or not a format trimesh reads):
    its link is left out with one warning naming the link and the URI."""
    _write_mesh(str(tmp_path / 'part.stl'), _mesh())
    (tmp_path / 'broken.stl').write_bytes(b'')
    extra = textwrap.dedent("""
      <joint name="flange" type="fixed"><parent link="link2"/><child link="hand"/>
        <origin xyz="0 0 0.3"/></joint>
      <link name="hand"><collision><geometry><mesh filename="broken.stl"/></geometry>
        </collision></link>""")
    urdf = write_two_link_urdf(str(tmp_path), 'part.stl', extra_links=extra, name='broken')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    log = logged('smcik_ros.collision', logging.WARNING)
    model = CollisionModel.from_urdf(chain, urdf, cache_dir=str(tmp_path / 'cache'))
    assert model.link_names == ('link1', 'link2')
    assert [m for m in log.messages if 'hand' in m] == [
        w for w in model.warnings if 'hand' in w]
    (warning,) = [w for w in model.warnings if 'hand' in w]
    assert "link 'hand'" in warning and "'broken.stl'" in warning


def test_resolve_mesh_uri_still_names_every_place_looked(tmp_path, monkeypatch):
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    with pytest.raises(ModelError) as err:
        resolve_mesh_uri('package://no_such_pkg/meshes/part.stl', str(tmp_path),
                         [str(tmp_path / 'ws')])
    text = str(err.value)
    assert "package://no_such_pkg/meshes/part.stl" in text
    assert 'ament index' in text and str(tmp_path / 'ws') in text


def test_a_copied_description_finds_its_meshes_by_the_tail_of_the_uri(tmp_path, monkeypatch):
    """A description copied out of its package (a URDF dataset keeps Drake's Atlas in
    drake/atlas/urdf, its URIs package://drake/examples/atlas/urdf/meshes/...): the mesh is
    found under the URDF's ancestors by the URI's tail, a directory and the file at least;
    a file of the same name alone is not taken."""
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    urdf_dir = tmp_path / 'drake' / 'atlas' / 'urdf'
    (urdf_dir / 'meshes').mkdir(parents=True)
    path = str(urdf_dir / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    assert resolve_mesh_uri('package://drake/examples/atlas/urdf/meshes/part.stl',
                            str(urdf_dir)) == path
    _write_mesh(str(urdf_dir / 'other.stl'), _mesh())
    with pytest.raises(ModelError, match='nor a tail of'):
        resolve_mesh_uri('package://drake/examples/parts/other.stl', str(urdf_dir))


def test_package_uris_with_three_slashes_resolve(tmp_path, monkeypatch):
    """``package:///NAME/rest``, as some exporters write it, is ``package://NAME/rest``."""
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    root = _package(tmp_path / 'src', name='gen_description', dirname=None, package_xml=False)
    path = str(root / 'meshes' / 'part.stl')
    _write_mesh(path, _mesh())
    assert resolve_mesh_uri('package:///gen_description/meshes/part.stl', str(tmp_path),
                            [str(tmp_path / 'src')]) == path


GRIPPER = '''
  <joint name="flange" type="fixed"><parent link="link2"/><child link="hand"/>
    <origin xyz="0 0 0.3"/></joint>
  <link name="hand"><collision><geometry><box size="0.04 0.16 0.05"/></geometry></collision>
  </link>
  <joint name="finger_left" type="prismatic"><parent link="hand"/><child link="left"/>
    <origin xyz="0 0 0.05"/><axis xyz="0 1 0"/>
    <limit lower="0" upper="0.04" effort="1" velocity="0.1"/></joint>
  <link name="left"><collision><origin xyz="0 0.01 0.025"/>
    <geometry><box size="0.02 0.02 0.05"/></geometry></collision></link>
  <joint name="finger_right" type="prismatic"><parent link="hand"/><child link="right"/>
    <origin xyz="0 0 0.05"/><axis xyz="0 -1 0"/>
    <limit lower="0" upper="0.04" effort="1" velocity="0.1"/>
    <mimic joint="finger_left"/></joint>
  <link name="right"><collision><origin xyz="0 -0.01 0.025"/>
    <geometry><box size="0.02 0.02 0.05"/></geometry></collision></link>
  <joint name="right_tip" type="fixed"><parent link="right"/><child link="right_pad"/>
    <origin xyz="0 0 0.05"/></joint>
  <link name="right_pad"><collision><geometry><sphere radius="0.01"/></geometry></collision>
  </link>
  <joint name="flap" type="revolute"><parent link="hand"/><child link="flap"/>
    <origin xyz="0.03 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-0.5" upper="0.5" effort="1" velocity="0.1"/></joint>
  <link name="flap"><collision><origin xyz="0.04 0 0"/>
    <geometry><box size="0.08 0.01 0.01"/></geometry></collision></link>
  <joint name="flap_tip" type="revolute"><parent link="flap"/><child link="flap_tip"/>
    <origin xyz="0.08 0 0"/><axis xyz="0 0 1"/>
    <limit lower="-0.5" upper="0.5" effort="1" velocity="0.1"/></joint>
  <link name="flap_tip"><collision><geometry><sphere radius="0.01"/></geometry></collision>
  </link>
  <link name="world"><collision><origin xyz="0 0 -0.05"/>
    <geometry><box size="0.2 0.2 0.1"/></geometry></collision></link>
  <joint name="world_base" type="fixed"><parent link="world"/><child link="base_link"/>
    <origin xyz="0.2 0 0.1" rpy="0 0 0.5"/></joint>
  <link name="rail"><collision><geometry><box size="0.1 0.1 0.1"/></geometry></collision>
  </link>
  <joint name="rail_joint" type="prismatic"><parent link="world"/><child link="rail"/>
    <axis xyz="1 0 0"/><limit lower="0" upper="1" effort="1" velocity="1"/></joint>
'''


@pytest.fixture(scope='module')
def gripper(tmp_path_factory):
    directory = tmp_path_factory.mktemp('gripper')
    mesh = _mesh()
    _write_mesh(str(directory / 'part.stl'), mesh)
    urdf = write_two_link_urdf(str(directory), 'part.stl', extra_links=GRIPPER, name='gripper')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    model = CollisionModel.from_urdf(chain, urdf, cache_dir=cover_cache_dir())
    return urdf, chain, model


def test_off_chain_fingers_are_covered_over_their_whole_range(gripper):
    urdf, chain, model = gripper
    assert {'left', 'right', 'right_pad', 'flap'} <= set(model.swept_links)
    assert 'hand' in model.link_names and 'hand' not in model.swept_links
    fcl_robot = FclRobot(urdf, 'base_link')
    constraint = CollisionConstraint(model, self_collision=False)
    rng = np.random.default_rng(1)
    for q in chain.random_configuration(rng, 3):
        centers, radii, links = constraint.cover_spheres(q)
        for finger in np.linspace(0.0, 0.04, 9):
            for flap in np.linspace(-0.5, 0.5, 7):
                cfg = dict(zip(chain.joint_names, q), finger_left=finger, flap=flap)
                fcl_robot.urdf.update_cfg(cfg)
                for link in ('left', 'right', 'right_pad', 'flap'):
                    pts = _link_points(fcl_robot, link)
                    sel = links == link
                    assert inside_cover(pts, centers[sel], radii[sel]).all(), (link, finger)


def test_a_high_poly_swept_finger_is_covered_through_a_convex_proxy(tmp_path, logged):
    """A 20480-face finger on an off-chain revolute joint (the pieces times the steps exceed
    SWEPT_PIECES: before, millions of pieces and an out-of-memory kill on Unitree Z1's
    gripper): the poses are thinned to a tolerance-sized chord, a lattice-hull proxy is
    covered (logged, flagged hull), and every vertex of the finger at joint values between
    the samples and at both ends lies inside the finger's spheres."""
    from smcik_ros.collision import model as collision_model
    finger = trimesh.creation.icosphere(subdivisions=5)
    finger.apply_scale((0.03, 0.01, 0.01))
    finger.apply_translation((0.03, 0.0, 0.0))
    assert len(finger.faces) == 20480
    _write_mesh(str(tmp_path / 'part.stl'), _mesh())
    _write_mesh(str(tmp_path / 'finger.stl'), finger)
    extra = textwrap.dedent("""
      <joint name="hinge" type="revolute"><parent link="link2"/><child link="finger"/>
        <origin xyz="0 0 0.3"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <link name="finger"><collision><geometry><mesh filename="finger.stl"/></geometry>
      </collision></link>""")
    urdf = write_two_link_urdf(str(tmp_path), 'part.stl', extra_links=extra, name='hinged')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    log = logged('smcik_ros.collision', logging.INFO)
    model = CollisionModel.from_urdf(chain, urdf, cache_dir='')
    assert 'finger' in model.swept_links
    text = log.text
    assert re.search(r'swept finger.stl \(20480 faces, \d+ poses\): covering a convex proxy',
                     text), text
    poses = int(re.search(r'20480 faces, (\d+) poses', text).group(1))
    assert poses < 201 // 4          # a 6 cm finger: the 0.01 rad sampling thinned
    constraint = CollisionConstraint(model, self_collision=False)
    vertices = np.asarray(finger.vertices)
    rng = np.random.default_rng(3)
    for q in chain.random_configuration(rng, 2):
        centers, radii, links = constraint.cover_spheres(q)
        sel = links == 'finger'
        mount = chain.fk(q, 'link2') @ np.array(
            [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.3], [0, 0, 0, 1.0]])
        for angle in np.r_[-1.0, 1.0, rng.uniform(-1.0, 1.0, 12)]:
            c, s = np.cos(angle), np.sin(angle)
            pose = mount @ np.array([[c, -s, 0, 0], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1.0]])
            points = vertices @ pose[:3, :3].T + pose[:3, 3]
            assert inside_cover(points, centers[sel], radii[sel]).all(), angle
    assert collision_model.SWEPT_PIECES == 200_000
    # A first start's coarse cover holds this fine one, and bounds the proxy by the lattice
    # cell the fine cover used (logged), not by the 4 x tolerance a lattice may reach: that
    # bound put the coarse spheres 9 cm beyond a finger (TIAGo's head: its shoulders froze).
    coarse = CollisionModel.from_urdf(chain, urdf, cache_dir='', coarse=True)
    assert coarse.coarse and 'finger' in coarse.coarse_links
    cell = float(re.search(r'lattice ([0-9.]+) m', text).group(1))
    assert cell < 0.04
    d = rng.normal(size=(64, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    fine, rough = _link_spheres(model, 'finger'), _link_spheres(coarse, 'finger')
    shell = (fine[:, None, :3] + fine[:, None, 3:] * d).reshape(-1, 3)
    assert inside_cover(shell, rough[:, :3], rough[:, 3], tol=1e-7).all()
    assert coarse.link_excess[coarse.link_index('finger')] < 0.06


def test_the_sweep_travel_is_the_longest_vertex_path_found_on_the_hull(tmp_path):
    """The travel bound of a swept element (links on joints off the chain beyond MAX_SWEEP
    are left out) places only the convex hull's vertices: a point's path length over the
    poses is convex in the point, so the largest is at a hull vertex. Same value as placing
    every vertex, for meshes whose farthest point is inside a face's fan (an off-axis,
    rotated, translated ellipsoid) over revolute and screw-like pose sets."""
    from smcik_ros.collision import model as collision_model
    rng = np.random.default_rng(4)
    for trial in range(4):
        body = trimesh.creation.icosphere(subdivisions=3)
        body.apply_scale(rng.uniform(0.01, 0.05, 3))
        body.apply_translation(rng.uniform(-0.05, 0.05, 3))
        path = str(tmp_path / f'part{trial}.stl')
        _write_mesh(path, body)
        origin = np.eye(4)
        origin[:3, 3] = rng.uniform(-0.02, 0.02, 3)
        geom = collision_model.LinkGeometry('part', 'mesh', origin, mesh_path=path)
        angles = np.linspace(-1.0, rng.uniform(0.5, 2.0), 40)
        poses = np.tile(np.eye(4), (len(angles), 1, 1))
        poses[:, 0, 0] = poses[:, 1, 1] = np.cos(angles)
        poses[:, 0, 1], poses[:, 1, 0] = -np.sin(angles), np.sin(angles)
        poses[:, 2, 3] = 0.01 * trial * angles              # a screw for trials > 0
        att = collision_model._Attachment(0, poses, 1)
        vertices, _ = collision_model.load_mesh(path, (1.0, 1.0, 1.0))
        placed = vertices @ origin[:3, :3].T + origin[:3, 3]
        placed = np.einsum('kij,vj->kvi', poses[:, :3, :3], placed) + poses[:, None, :3, 3]
        brute = np.linalg.norm(np.diff(placed, axis=0), axis=-1).sum(axis=0).max()
        travel = collision_model._sweep_travel(geom, att, 0.01)
        assert travel == pytest.approx(brute, rel=1e-12, abs=1e-15), trial


def test_a_link_over_the_sphere_budget_is_covered_coarser(tmp_path, logged, monkeypatch):
    """A link whose cover exceeds LINK_SPHERES is covered again at twice the tolerance (up
    to 8x), logged; its cover still contains the geometry, with the larger excess
    recorded (Baxter's 0.9 m pedestal from example-robot-data: about 19 000
    spheres at 1 cm, 1401 at 2 cm; the node at 100 Hz with goals 63.9 -> 21.8 % of a core)."""
    from smcik_ros.collision import model as collision_model
    assert collision_model.LINK_SPHERES == 2000
    mesh = trimesh.creation.box(extents=(0.3, 0.2, 0.4))
    _write_mesh(str(tmp_path / 'part.stl'), mesh)
    urdf = write_two_link_urdf(str(tmp_path), 'part.stl', name='budget')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    fine = CollisionModel.from_urdf(chain, urdf, cache_dir='')
    counts = dict(zip(fine.link_names, fine.link_count))
    budget = int(min(counts.values())) - 1          # both links over it
    monkeypatch.setattr(collision_model, 'LINK_SPHERES', budget)
    log = logged('smcik_ros.collision', logging.INFO)
    coarse = CollisionModel.from_urdf(chain, urdf, cache_dir='')
    assert re.search(r"link 'link1': its cover at tolerance 0.01 m has more than \d+ "
                     r'spheres; covered at 0.0[248] m', log.text), log.text
    for name, count, excess in zip(coarse.link_names, coarse.link_count, coarse.link_excess):
        assert count <= budget or 'at 0.08 m' in log.text
        assert count < counts[name] and excess > fine.link_excess[
            fine.link_names.index(name)]
    constraint = CollisionConstraint(coarse, self_collision=False)
    rng = np.random.default_rng(4)
    for q in chain.random_configuration(rng, 3):
        centers, radii, links = constraint.cover_spheres(q)
        pose = chain.fk(q, 'link1')                  # link1's mesh: no origin, no scale
        points = surface_points(mesh, 400) @ pose[:3, :3].T + pose[:3, 3]
        sel = links == 'link1'
        assert inside_cover(points, centers[sel], radii[sel]).all()


def test_the_root_bodys_links_are_coarsened_at_most_twice(tmp_path, logged, monkeypatch):
    """Over the sphere budget, a link on the root body (a mobile base, a pedestal: it never
    moves, and its spheres cost only near a moving link) is covered at most at
    ROOT_COARSEST times the tolerance, where a moving link goes on to 8x (TIAGo's base: 16 319
    spheres at 2 cm, 669 at 8 cm, where FCL put a goal's arm 15 mm clear)."""
    from smcik_ros.collision import model as collision_model
    assert collision_model.ROOT_COARSEST == 2.0
    mesh = trimesh.creation.box(extents=(0.3, 0.2, 0.4))
    _write_mesh(str(tmp_path / 'part.stl'), mesh)
    collision = '<collision><geometry><mesh filename="part.stl"/></geometry></collision>'
    urdf = tmp_path / 'root.urdf'
    urdf.write_text(f'''<robot name="root">
      <link name="base_link">{collision}</link>
      <joint name="j1" type="revolute"><parent link="base_link"/><child link="link1"/>
        <origin xyz="0 0 1"/><axis xyz="0 0 1"/>
        <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
      <link name="link1">{collision}</link>
    </robot>''')
    chain = Chain.from_urdf(str(urdf), 'base_link', 'link1')
    fine = CollisionModel.from_urdf(chain, str(urdf), cache_dir='')
    counts = dict(zip(fine.link_names, fine.link_count))
    monkeypatch.setattr(collision_model, 'LINK_SPHERES', 1)        # nothing fits
    log = logged('smcik_ros.collision', logging.INFO)
    coarse = CollisionModel.from_urdf(chain, str(urdf), cache_dir='')
    assert "link 'base_link': its cover at tolerance 0.01 m has more than 1 spheres; " \
        'covered at 0.02 m' in log.text, log.text
    assert "link 'link1': its cover at tolerance 0.01 m has more than 1 spheres; " \
        'covered at 0.08 m' in log.text, log.text
    excess = dict(zip(coarse.link_names, coarse.link_excess))
    assert excess['base_link'] <= 1.1 * 0.02 < excess['link1']
    assert 1 < dict(zip(coarse.link_names, coarse.link_count))['base_link'] < counts['base_link']


def _link_points(fcl_robot, link):
    lk = [x for x in fcl_robot.urdf.robot.links if x.name == link][0]
    out = []
    for col in lk.collisions:
        geo = col.geometry
        if geo.box is not None:
            pts = surface_points(trimesh.creation.box(extents=geo.box.size), 500)
        else:
            v = np.random.default_rng(2).normal(size=(500, 3))
            pts = v / np.linalg.norm(v, axis=1, keepdims=True) * geo.sphere.radius
        pose = fcl_robot.urdf.get_transform(frame_to=link, frame_from='base_link')
        pose = pose @ (np.eye(4) if col.origin is None else col.origin)
        out.append(pts @ pose[:3, :3].T + pose[:3, 3])
    return np.vstack(out)


def _element_points(fcl_robot, link):
    """Points of ``link``'s <collision> elements (boxes, spheres, meshes: surface samples
    and vertices, and for meshes interior samples too) in the base frame, posed by
    yourdfpy's forward kinematics (independent of smcik_ros)."""
    lk = [x for x in fcl_robot.urdf.robot.links if x.name == link][0]
    out = []
    for col in lk.collisions:
        geo = col.geometry
        if geo.mesh is None:
            continue
        mesh = trimesh.load(os.path.join(fcl_robot.directory, geo.mesh.filename),
                            force='mesh')
        mesh.apply_scale(1.0 if geo.mesh.scale is None else geo.mesh.scale)
        pts = np.vstack([surface_points(mesh, 400),
                         trimesh.sample.volume_mesh(mesh, 400)])
        pose = fcl_robot.urdf.get_transform(frame_to=link, frame_from='base_link')
        pose = pose @ (np.eye(4) if col.origin is None else col.origin)
        out.append(pts @ pose[:3, :3].T + pose[:3, 3])
    if any(col.geometry.mesh is None for col in lk.collisions):
        out.append(_link_points(fcl_robot, link))
    return np.vstack(out)


def test_coarse_covers_hold_the_geometry_over_every_sweep_and_the_fine_covers(
        gripper, tmp_path, monkeypatch):
    """``from_urdf(coarse=True)`` on a cold cache computes no fine cover (the fine covering
    is made to fail here) and gives the fine model's links, bodies, groups and sweeps, with
    far fewer spheres; every point of every element (meshes, boxes, spheres; the fingers
    and the flap anywhere in their ranges, poses from yourdfpy) lies inside its link's
    coarse spheres, and so does every fine sphere (sampled on its surface): a superset.
    ``fine()`` gives the fine model sphere for sphere and stores it, so the next
    ``from_urdf(coarse=True)`` returns it."""
    from smcik_ros.collision import model as collision_model
    urdf, chain, fine = gripper
    cache = str(tmp_path / 'cache')

    def no_fine_cover(*args):
        raise AssertionError('a fine cover was computed')
    with monkeypatch.context() as patch:
        patch.setattr(collision_model, '_link_cover', no_fine_cover)
        coarse = CollisionModel.from_urdf(chain, urdf, cache_dir=cache, coarse=True)
    assert coarse.coarse and not fine.coarse and len(coarse.radii) < len(fine.radii)
    assert coarse.link_names == fine.link_names and coarse.swept_links == fine.swept_links
    for name in ('link_body', 'link_group', 'group_parent'):
        assert np.array_equal(getattr(coarse, name), getattr(fine, name)), name
    fcl_robot = FclRobot(urdf, 'base_link')
    rng = np.random.default_rng(4)
    d = rng.normal(size=(32, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    for q in chain.random_configuration(rng, 2):
        coarse_spheres = CollisionConstraint(coarse, self_collision=False).cover_spheres(q)
        centers, radii, links = CollisionConstraint(fine, self_collision=False) \
            .cover_spheres(q)
        for finger, flap in ((0.0, -0.5), (0.013, 0.21), (0.04, 0.5)):
            cfg = dict(zip(chain.joint_names, q), finger_left=finger, flap=flap)
            fcl_robot.urdf.update_cfg(cfg)
            for link in coarse.link_names:
                sel = coarse_spheres[2] == link
                pts = _element_points(fcl_robot, link)
                assert inside_cover(pts, coarse_spheres[0][sel], coarse_spheres[1][sel]).all(), \
                    (link, finger, flap)
        for link in coarse.link_names:
            sel, mine = coarse_spheres[2] == link, links == link
            shell = (centers[mine][:, None] + radii[mine][:, None, None] * d).reshape(-1, 3)
            assert inside_cover(shell, coarse_spheres[0][sel], coarse_spheres[1][sel],
                                tol=1e-7).all(), link
    assert coarse.refined(['link2'], 0.004) == (coarse, [])
    assert coarse.refine_inputs(['link2'], 0.004)[0] == {}
    model = coarse.fine()
    assert not model.coarse and model.link_names == fine.link_names
    assert np.array_equal(model.radii, fine.radii) and np.array_equal(model.centers,
                                                                     fine.centers)
    assert fine.fine() is fine
    again = CollisionModel.from_urdf(chain, urdf, cache_dir=cache, coarse=True)
    assert not again.coarse and np.array_equal(again.radii, fine.radii)


def _link_spheres(model, name):
    i = model.link_index(name)
    part = slice(model.link_start[i], model.link_start[i] + model.link_count[i])
    return np.hstack([model.centers[part], model.radii[part, None]])


def test_a_coarse_model_turns_fine_in_stages_the_chain_links_first(gripper, tmp_path):
    """``next_fine_links``: the links riding on the chain come before those swept over
    off-chain joints (seconds against up to a minute each on a real robot), the light swept
    ones together before the heavy one; ``fine`` with
    the covers of some links keeps the others coarse and stores nothing until none is; a
    contact refinement of a fine link keeps its finer cover when the swept links' fine
    covers come in, and the disk cache gets the cover at the model's tolerance."""
    urdf, chain, fine = gripper
    cache = str(tmp_path)
    coarse = CollisionModel.from_urdf(chain, urdf, cache_dir=cache, coarse=True)
    first = coarse.next_fine_links()
    assert first and not set(first) & set(coarse.swept_links)
    assert set(first) | set(coarse.swept_links) == set(coarse.coarse_links)
    half = coarse.fine(link_covers(*coarse.fine_inputs(first))[0])
    assert half.coarse and set(half.coarse_links) == set(coarse.swept_links)
    work = {n: half._sweep_work(n) for n in half.coarse_links}
    heavy = max(work, key=work.get)
    assert half.next_fine_links() == [n for n in half.coarse_links if n != heavy]  # light ones
    assert heavy == 'flap' and all(work[n] <= SWEEP_BATCH * work[heavy] for n in work
                                   if n != heavy)
    assert half.link_names == coarse.link_names
    for name in coarse.link_names:
        expected = fine if name in first else coarse
        assert np.array_equal(_link_spheres(half, name), _link_spheres(expected, name)), name
    assert CollisionModel.from_urdf(chain, urdf, cache_dir=cache, coarse=True).coarse
    assert half.refine_inputs(list(half.coarse_links), 0.004)[0] == {}
    refined, names = half.refined(['hand'], 0.004)
    assert names == ['hand'] and refined.coarse_links == half.coarse_links
    swept = link_covers(*half.fine_inputs())[0]
    whole = refined.fine(swept)          # the refined hand stays; the disk gets its 1 cm cover
    assert not whole.coarse
    for name in coarse.link_names:
        expected = refined if name == 'hand' else fine
        assert np.array_equal(_link_spheres(whole, name), _link_spheres(expected, name)), name
    assert not np.array_equal(_link_spheres(whole, 'hand'), _link_spheres(fine, 'hand'))
    again = CollisionModel.from_urdf(chain, urdf, cache_dir=cache, coarse=True)
    assert not again.coarse and np.array_equal(again.radii, fine.radii)
    assert np.array_equal(again.centers, fine.centers)
    assert np.array_equal(half.fine(swept).radii, fine.radii)


def test_swept_links_of_alike_work_are_computed_together(gripper, monkeypatch):
    """Swept links whose work is within twice the smallest go in one job, whatever the
    largest (Unitree H2_Plus: six alike finger links took 8 s in six jobs, each followed by
    the pairs again); one three times heavier waits for its own."""
    urdf, chain, _ = gripper
    coarse = CollisionModel.from_urdf(chain, urdf, cache_dir='', coarse=True)
    half = coarse.fine(link_covers(*coarse.fine_inputs(coarse.next_fine_links()))[0])
    swept = sorted(half.coarse_links)
    assert len(swept) >= 3
    work = dict.fromkeys(swept, 10.0)
    monkeypatch.setattr(type(half), '_sweep_work', lambda self, name: work[name])
    assert sorted(half.next_fine_links()) == swept
    work[swept[0]] = 30.0
    assert sorted(half.next_fine_links()) == swept[1:]


def _poll_until_fine(guard):
    """Wait for and poll the guard's updates until its model is fine and none is left;
    return the texts of the events."""
    texts = []
    while guard.model.coarse or guard.updating:
        assert guard.wait_for_update(120.0)
        while (event := guard.poll()) is not None:
            texts.append(event[1])
    return texts


def test_a_first_start_applies_the_chain_links_fine_covers_then_the_swept_ones(gripper,
                                                                               tmp_path):
    """The guard's first start: the chain's links get their fine covers within the wait
    (the swept links stay coarse, named in the warning); the swept ones are computed when
    asked (the node: after the first command's contact refinement, which goes first): the
    light ones in one job, then the heavy 'flap' (its mesh over its sampled poses). The
    pairs are computed again after the chain's links (the 'always' rule judges the pairs of
    fine covers) and after each swept job. The guard ends with the fine model."""
    from smcik_ros.control.collision_guard import CollisionGuard
    urdf, chain, fine = gripper
    guard, notes = CollisionGuard.from_urdf(chain, urdf, urdf_path=urdf, cache_dir=str(tmp_path),
                                            cover_wait=300.0)
    model = guard.model
    assert set(model.coarse_links) == set(model.swept_links)
    texts = [t for _, t in notes]
    assert texts[0].startswith('fine covers in') and 'stay until' in texts[0], texts
    warned = [t for level, t in notes if level == 'warn' and 'more motions' in t]
    assert warned and all(name in warned[0] for name in model.coarse_links), notes
    assert len([t for t in texts if 'pairs of the fine' in t]) == 1, texts
    light = model.next_fine_links()   # the light ones together, then each heavy one alone
    assert 'flap' not in light and len(light) > 1
    assert guard.start_fine_covers() and not guard.start_fine_covers()
    texts = _poll_until_fine(guard)
    covers = [t for t in texts if t.startswith('fine covers in')]
    assert len(covers) == 2 and f'on {len(light)} link' in covers[0], texts
    assert 'on 1 link' in covers[1], texts
    assert len([t for t in texts if t.startswith('self-collision pairs of the fine')]) == 2, texts
    assert np.array_equal(guard.model.radii, fine.radii)
    assert not guard.start_fine_covers()


def test_a_swept_link_in_contact_at_the_first_command_gets_its_fine_cover_first(gripper,
                                                                                 tmp_path):
    """At the first command a box touches the coarse cover of the swept 'flap', not its
    fine one: the first job is the flap's fine cover alone (Unitree R1's head, in contact
    with its shoulders, came after the hips' refinement: two missed goals), the refinement
    and the other swept links after it. The guard ends with the fine model, out of
    contact."""
    from smcik_ros.collision import Obstacle
    from smcik_ros.control.collision_guard import CollisionGuard
    urdf, chain, fine = gripper
    guard, _ = CollisionGuard.from_urdf(chain, urdf, urdf_path=urdf, cache_dir=str(tmp_path),
                                        cover_wait=300.0)
    q = chain.neutral_configuration()
    reach, middle = {}, None
    for name, model in (('coarse', guard.model), ('fine', fine)):
        centers, radii, links = CollisionConstraint(model, self_collision=False) \
            .cover_spheres(q)
        reach[name] = float(np.max((centers[:, 2] + radii)[links == 'flap']))
        middle = centers[links == 'flap'].mean(axis=0)
    assert reach['coarse'] > reach['fine'] + 0.01, reach
    box = np.eye(4)
    box[:3, 3] = middle
    box[2, 3] = 0.5 * (reach['coarse'] + reach['fine']) + 0.05
    guard.replace({('t', 1): Obstacle('box', (0.02, 0.02, 0.1), box)}, 'obstacles')
    assert dict(guard.constraint.contacts(q))[('flap', 't/1')] < 0.0
    assert guard.start_contact_refinement(q) == []
    texts = _poll_until_fine(guard)
    covers = [t for t in texts if t.startswith('fine covers in')]
    assert len(covers) >= 2 and 'on 1 link' in covers[0], texts
    assert 'flap' not in covers[0], texts       # the flap: not among those still coarse
    assert 'flap' not in guard.model.coarse_links and not guard.model.coarse
    assert not guard.constraint.contacts(q)


def test_cover_updates_run_one_after_the_other_in_the_order_started():
    """``BackgroundUpdates.start(covers=True)``: a cover update waits for the one started
    before it (one child process at a time); other updates do not wait."""
    import threading
    from smcik_ros.control.cover_updates import BackgroundUpdates
    updates, order = BackgroundUpdates(), []
    release, other_done = threading.Event(), threading.Event()

    def first():
        release.wait(30.0)
        order.append('first')
        return {}

    def other():
        order.append('other')
        other_done.set()
        return {}
    updates.start('a', first, str, covers=True)
    updates.start('b', lambda: order.append('second') or {}, str, covers=True)
    updates.start('c', other, str)
    assert other_done.wait(30.0) and order == ['other'] and updates.busy('b')
    release.set()
    updates.wait(30.0)
    assert order == ['other', 'first', 'second'] and not updates.running


def test_rigid_ancestors_are_included_and_moving_ones_reported(gripper):
    urdf, chain, model = gripper
    world = model.link_index('world')
    assert model.link_body[world] == -1
    # The world's table sits 0.1 m under the base, turned by 0.5 rad about z.
    constraint = CollisionConstraint(model, self_collision=False)
    centers, radii, links = constraint.cover_spheres(chain.neutral_configuration())
    sel = links == 'world'
    corner = np.array([0.1, 0.1, -0.1]) - [0.2, 0.0, 0.1]
    c, s = np.cos(-0.5), np.sin(-0.5)
    corner = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ corner
    assert inside_cover(corner[None], centers[sel], radii[sel]).all()
    assert not model.has_link('rail') and not model.has_link('flap_tip')
    text = ' '.join(model.warnings)
    assert "link 'rail'" in text and 'moves up to 1.00 m' in text
    assert "'flap_tip'" in text and 'two movable joints away' in text


def test_adjacency_treats_fixed_links_as_one_body(gripper):
    _, _, model = gripper
    names = model.link_names
    adjacent = {(names[i], names[j]) for i, j in model.adjacent_links()}

    def adj(a, b):
        return (a, b) in adjacent or (b, a) in adjacent
    assert adj('link2', 'hand')           # fixed together: one body
    assert adj('hand', 'left') and adj('link2', 'left')   # one joint from that body
    assert adj('right', 'right_pad')
    # Siblings swept over their own joints on one body: the chain never moves one against
    # the other (their covers hold their whole ranges), so checking them could only refuse
    # every motion (TIAGo's coarse fingers did) or nothing.
    assert adj('left', 'right')
    assert model.link_body[names.index('left')] == model.link_body[names.index('right')]
    assert adj('world', 'link1') and not adj('world', 'link2')


def test_skeleton_covers_the_chain_segments():
    chain = Chain.from_urdf(os.path.join(os.path.dirname(__file__), '..', 'urdf',
                                         'smcik_arm.urdf'))
    model = CollisionModel.skeleton(chain, radius=0.01)
    assert model.source == 'skeleton' and set(model.link_names) == set(chain.link_names[1:])
    constraint = CollisionConstraint(model, self_collision=False)
    q = chain.random_configuration(np.random.default_rng(3))
    centers, radii, _ = constraint.cover_spheres(q)
    origins = chain.link_poses(q)[:, :3, 3]
    for a, b in zip(origins[1:-1], origins[2:]):
        pts = a + np.linspace(0, 1, 50)[:, None] * (b - a)
        assert inside_cover(pts, centers, radii).all()


def test_keep_out_sphere_works_on_a_urdf_without_collision_geometry(tmp_path):
    text = open(os.path.join(os.path.dirname(__file__), '..', 'urdf', 'smcik_arm.urdf')).read()
    bare = re.sub(r'<collision>.*?</collision>', '', text, flags=re.S)
    chain = Chain.from_urdf(bare)
    model = CollisionModel.from_urdf(chain, bare, cache_dir=cover_cache_dir())
    assert not model.has_geometry
    q = chain.neutral_configuration()
    tool = chain.fk(q)[:3, 3]
    keep_out = KeepOutSphere(tool, 0.05, model=model).bind(chain)
    assert keep_out.violated(chain.frames(q))[0]
    assert not KeepOutSphere(tool + (1.0, 0, 0), 0.05).bind(chain).violated(chain.frames(q))[0]



def test_computing_covers_is_announced_once_says_how_far_it_is_and_not_when_cached(
        tmp_path, logged, monkeypatch):
    """The first start with a robot computes its covers (seconds): one log line says so
    before the work, naming the cache, and the computation is not silent: every
    PROGRESS_PERIOD a line names the link being covered and how many are done. A start from
    the cache says nothing of either. (One cover computation of the demo arm shows both.)"""
    import time
    from smcik_ros.collision import model as collision_model
    assert collision_model.PROGRESS_PERIOD == 3.0
    monkeypatch.setattr(collision_model, 'PROGRESS_PERIOD', 0.05)
    slow = collision_model._link_cover

    def slow_cover(*args, **kwargs):
        time.sleep(0.15)      # 3 periods a link at least: >= 30 lines for 10 links
        return slow(*args, **kwargs)
    monkeypatch.setattr(collision_model, '_link_cover', slow_cover)
    from conftest import ARM7_URDF
    chain = Chain.from_urdf(ARM7_URDF)
    log = logged('smcik_ros.collision', logging.INFO)
    model = CollisionModel.from_urdf(chain, ARM7_URDF, cache_dir=str(tmp_path))
    said = [m for m in log.messages if m.startswith('computing the sphere covers')]
    assert len(said) == 1 and str(tmp_path) in said[0], said
    assert log.messages[0] == said[0], 'the announcement comes before the work'
    said = [m for m in log.messages if m.startswith('still computing the sphere covers')]
    assert len(said) >= len(model.link_names), log.text
    assert all(re.search(r"link '\w+', \d+ of \d+ links with <collision> done", m)
               for m in said), said
    assert {re.search(r"link '(\w+)'", m).group(1) for m in said} <= set(model.link_names)
    log.clear()
    time.sleep(0.2)
    CollisionModel.from_urdf(chain, ARM7_URDF, cache_dir=str(tmp_path))
    assert not [m for m in log.messages if 'computing the sphere covers' in m], log.text


def test_refined_covers_are_finer_contain_the_mesh_and_leave_the_other_links(tmp_path):
    """``CollisionModel.refined`` (the node's contact refinement): the named links' covers
    are computed again at the finer tolerance, from a model loaded from the disk cache too
    (its geometry records where the meshes are): their excess bound drops to about it, more
    spheres, the mesh still inside; every other link keeps its spheres bit for bit, in the
    same order (pair ids stay valid). Unknown names and links already that fine are left."""
    (tmp_path / 'm').mkdir()
    mesh_file = str(tmp_path / 'm' / 'part.stl')
    _write_mesh(mesh_file, _mesh())
    urdf = write_two_link_urdf(str(tmp_path), 'm/part.stl', name='fine')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    cache = str(tmp_path / 'cache')
    built = CollisionModel.from_urdf(chain, urdf, tolerance=0.01, cache_dir=cache)
    model = CollisionModel.from_urdf(chain, urdf, tolerance=0.01, cache_dir=cache)
    assert model is not built and np.array_equal(model.radii, built.radii)
    coarse = dict(zip(model.link_names, model.link_excess))
    assert coarse['link2'] > 0.004, coarse          # something to refine
    refined, names = model.refined(['link2', 'no_such_link', 'link2'], 0.003)
    assert names == ['link2'] and refined is not model
    assert refined.link_names == model.link_names
    one, two = (refined.link_index(n) for n in ('link1', 'link2'))
    assert refined.link_excess[two] <= 0.003 * 1.25 < coarse['link2']
    assert refined.link_count[two] > model.link_count[two]
    rows = slice(model.link_start[one], model.link_start[one] + model.link_count[one])
    new_rows = slice(refined.link_start[one], refined.link_start[one] + refined.link_count[one])
    assert np.array_equal(refined.centers[new_rows], model.centers[rows])
    assert np.array_equal(refined.radii[new_rows], model.radii[rows])
    assert refined.tolerance == model.tolerance and refined.cache_dir == cache
    _check_model_contains_meshes(urdf, mesh_file, {}, model=refined)
    # The covers computed elsewhere (the node: in a child process) from refine_inputs.
    inputs = model.refine_inputs(['link2', 'no_such_link'], 0.003)
    assert list(inputs[0]) == ['link2'] and inputs[2] == 0.003 and inputs[4] == cache
    given, names = model.refined(['link2'], 0.003, covers=link_covers(*inputs)[0])
    assert names == ['link2'] and np.array_equal(given.centers, refined.centers)
    assert np.array_equal(given.radii, refined.radii)
    assert refined.refine_inputs(['link2'], 0.004)[0] == {}
    again, none = refined.refined(['link2'], 0.004)
    assert again is refined and none == []
    with pytest.raises(ModelError, match='tolerance'):
        model.refined(['link2'], 0.0005)


def test_a_refinement_over_the_sphere_budget_keeps_the_finer_cover_it_had(tmp_path,
                                                                          monkeypatch):
    """A cover asked for at a finer tolerance but made coarser for its sphere budget
    (``LINK_SPHERES``: TIAGo's torso_lift_link, 1830 spheres at 1 cm, came back at 1.2 cm
    when asked for 6 mm) is not swapped in: ``refined`` keeps the link as it was; one
    predicted to be far over it is not even computed."""
    import smcik_ros.collision.model as model_module
    (tmp_path / 'm').mkdir()
    mesh_file = str(tmp_path / 'm' / 'part.stl')
    _write_mesh(mesh_file, _mesh())
    urdf = write_two_link_urdf(str(tmp_path), 'm/part.stl', name='budget')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    model = CollisionModel.from_urdf(chain, urdf, tolerance=0.01, cache_dir=str(tmp_path / 'c'))
    two = model.link_index('link2')
    count, excess = int(model.link_count[two]), float(model.link_excess[two])
    inputs = model.refine_inputs(['link2'], 0.006)
    finer = link_covers(*inputs)[0]['link2']
    assert len(finer) > count and finer.max_excess < excess       # finer: more spheres
    monkeypatch.setattr(model_module, 'LINK_SPHERES', count)      # 6 mm is over budget
    over = link_covers(*inputs)[0]['link2']
    assert over.max_excess > excess, (over.max_excess, excess)    # doubled to 12 mm
    assert model.refined(['link2'], 0.006) == (model, [])
    monkeypatch.setattr(model_module, 'LINK_SPHERES', count // 4)  # far over: not computed
    assert model.refine_inputs(['link2'], 0.006)[0] == {}
    monkeypatch.setattr(model_module, 'LINK_SPHERES', len(finer))
    refined, names = model.refined(['link2'], 0.006)
    assert names == ['link2'] and refined.link_excess[two] < excess


def test_the_sphere_budget_prediction_follows_how_a_refined_link_grew():
    """A refined link's next step is predicted from how its cover grew at the last one
    (Unitree H2's shoulder: 348 spheres at 1 cm, 1559 at 6 mm, 7474 at 4 mm; the square
    of the excess ratio predicted 3508, under 2 x 2000, and the job computing it held up the
    torso's cover for 13 s): far over the budget, it is not computed; a link that grew
    slower than the square is still predicted by the square."""
    from smcik_ros.collision.covers import SphereCover
    from smcik_ros.collision.model import LINK_SPHERES, _far_over_budget

    def cover(count, excess):
        return SphereCover(np.zeros((count, 3)), np.full(count, 0.01), np.full(count, excess))
    shoulder = cover(1559, 0.006)
    assert 2 * LINK_SPHERES == 4000
    assert not _far_over_budget(shoulder, 0.004)                       # the square: 3508
    assert _far_over_budget(shoulder, 0.004, before=cover(348, 0.01))  # its growth: 5130
    assert not _far_over_budget(shoulder, 0.004, before=cover(1000, 0.01))  # slower: square


def test_conventional_srdf_paths(tmp_path):
    assert conventional_srdf_path(None) is None
    (tmp_path / 'a').mkdir()
    urdf = tmp_path / 'a' / 'robot.urdf'
    urdf.write_text('<robot/>')
    assert conventional_srdf_path(str(urdf)) is None
    (tmp_path / 'a' / 'robot.srdf').write_text('<robot/>')
    assert conventional_srdf_path(str(urdf)) == str(tmp_path / 'a' / 'robot.srdf')
    (tmp_path / 'arm_description' / 'urdf').mkdir(parents=True)
    (tmp_path / 'arm_moveit_config' / 'config').mkdir(parents=True)
    urdf = tmp_path / 'arm_description' / 'urdf' / 'arm.urdf.xacro'
    urdf.write_text('<robot/>')
    srdf = tmp_path / 'arm_moveit_config' / 'config' / 'arm.srdf'
    srdf.write_text('<robot/>')
    assert conventional_srdf_path(str(urdf)) == str(srdf)


def test_srdf_folders_and_robot_names_of_other_layouts(tmp_path):
    """example-robot-data's layout: <pkg>/robots/x.urdf or <pkg>/urdf/x.urdf with
    <pkg>/srdf/; by stem first, else the SRDF naming the URDF's robot: the only one, or the
    one whose stem is that name among several; other ties and other names give None."""
    def package(name, folder, urdf_name, text):      # <name>/<folder>/<urdf_name>, srdf/
        (tmp_path / name / folder).mkdir(parents=True)
        (tmp_path / name / 'srdf').mkdir()
        urdf = tmp_path / name / folder / urdf_name
        urdf.write_text(text)
        return tmp_path / name, urdf

    pkg, urdf = package('kinova_description', 'robots', 'kinova.urdf',
                        '<?xml version="1.0"?>\n<!-- <robot name="comment"> -->\n'
                        '<robot name="kinova" xmlns:xacro="x"/>')
    (pkg / 'srdf' / 'kinova.srdf').write_text('<robot name="kinova"/>')
    assert conventional_srdf_path(str(urdf)) == str(pkg / 'srdf' / 'kinova.srdf')
    ur, robot = package('ur_description', 'urdf', 'ur5_robot.urdf',
                        "<?xml version='1.0'?><!-- generated from <robot name='ur'> -->\n"
                        "<robot name='ur5'/>")
    assert conventional_srdf_path(str(robot)) is None
    (ur / 'srdf' / 'ur5_gripper.srdf').write_text('<robot name="ur5"/>')
    assert conventional_srdf_path(str(robot)) == str(ur / 'srdf' / 'ur5_gripper.srdf')
    (ur / 'srdf' / 'ur3_gripper.srdf').write_text('<robot name="ur5"/>')
    assert conventional_srdf_path(str(robot)) is None           # two, neither named ur5
    (ur / 'srdf' / 'ur5.srdf').write_text('<robot name="ur5"/>')
    assert conventional_srdf_path(str(robot)) == str(ur / 'srdf' / 'ur5.srdf')
    other = ur / 'urdf' / 'ur10_robot.urdf'
    other.write_text('<robot name="ur10"/>')
    assert conventional_srdf_path(str(other)) is None


def test_the_demo_arm_srdf_is_found_beside_its_urdf():
    here = os.path.join(os.path.dirname(__file__), '..', 'urdf')
    assert conventional_srdf_path(os.path.join(here, 'smcik_arm.urdf')) == \
        os.path.abspath(os.path.join(here, 'smcik_arm.srdf'))


def test_a_chain_from_another_urdf_is_refused(tmp_path, gripper):
    urdf, _, _ = gripper
    other = Chain.from_urdf(os.path.join(os.path.dirname(__file__), '..', 'urdf',
                                         'smcik_arm.urdf'))
    with pytest.raises(ModelError, match='does not match the chain'):
        CollisionModel.from_urdf(other, urdf)


def test_zero_size_contact_points_stay_out_of_collision_but_span_the_support(caplog):
    """Drake's Atlas and Valkyrie mark their soles' contact points with spheres of radius 0
    beside the sole's box or mesh: the robot starts (it failed fast on them), the points are
    left out of the collision model with one note, and a support polygon counts them."""
    from smcik_ros.collision import support_polygon
    corners = ''.join(f'<collision><origin xyz="{x} {y} -0.01"/><geometry><sphere radius="0"/>'
                      '</geometry></collision>' for x in (-0.15, 0.15) for y in (-0.08, 0.08))
    text = textwrap.dedent(f'''\
        <robot name="sole"><link name="base_link"/>
          <joint name="j" type="revolute"><parent link="base_link"/><child link="foot"/>
            <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
          <link name="foot"><collision><geometry><box size="0.2 0.1 0.02"/></geometry>
          </collision>{corners}</link></robot>''')
    chain = Chain.from_urdf(text, 'base_link', 'foot')
    with caplog.at_level(logging.INFO, logger='smcik_ros.collision'):
        model = CollisionModel.from_urdf(chain, text, cache_dir='')
    assert [g.kind for g in model.geometry['foot']] == ['box']
    assert any("'foot': 4 <collision> shape(s) of zero size" in r.getMessage()
               for r in caplog.records)
    polygon = support_polygon(chain, text, ['foot'], np.zeros(1))
    np.testing.assert_allclose(sorted(map(tuple, np.round(polygon, 9))),
                               [(-0.15, -0.08), (-0.15, 0.08), (0.15, -0.08), (0.15, 0.08)])


def test_bad_collision_sizes_fail_fast(tmp_path):
    text = textwrap.dedent('''\
        <robot name="bad"><link name="base_link"/>
          <joint name="j" type="revolute"><parent link="base_link"/><child link="l"/>
            <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
          <link name="l"><collision><geometry><box size="0.1 -0.2 0.1"/></geometry>
          </collision></link></robot>''')
    chain = Chain.from_urdf(text, 'base_link', 'l')
    with pytest.raises(ModelError, match='box size must be 3 non-negative numbers'):
        CollisionModel.from_urdf(chain, text)
