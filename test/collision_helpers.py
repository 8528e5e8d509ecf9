"""Independent collision checking for the collision tests: python-fcl on the URDF's own shapes.

Nothing here uses smcik_ros' covers or kinematics: the URDF is read with yourdfpy, link poses
come from yourdfpy's own forward kinematics, meshes are read with trimesh and primitives are
FCL's exact shapes. FCL meshes (BVHModel) are surfaces: a mesh entirely inside another is
not reported by FCL, so tests use it in the direction "FCL says these touch => smcik_ros
must say so too".
"""

import atexit
import itertools
import math
import os
import shutil
import tempfile
import textwrap
import xml.etree.ElementTree as ElementTree

import fcl
import numpy as np
import trimesh
import yourdfpy

from smcik_ros.collision import CollisionModel
from smcik_ros.model import Chain

_CACHE_DIR = tempfile.mkdtemp(prefix='smcik-test-covers-')
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
_MODELS = {}


def cover_cache_dir():
    """Return a cover cache directory shared by the tests of one pytest run (then removed)."""
    return _CACHE_DIR


def demo_model(urdf, base='base_link', tip='tool0'):
    """Return (chain, CollisionModel) of a URDF, built once per test run."""
    key = (urdf, base, tip)
    if key not in _MODELS:
        chain = Chain.from_urdf(urdf, base, tip)
        _MODELS[key] = (chain, CollisionModel.from_urdf(chain, urdf, cache_dir=_CACHE_DIR))
    return _MODELS[key]


class FclRobot:
    """The collision geometry of a URDF as FCL objects, posed by yourdfpy's FK.

    base: the link whose frame is the base frame; mesh_map: {prefix: directory} replacing
    URI prefixes such as 'package://NAME' (resolution kept independent of smcik_ros).
    """

    def __init__(self, urdf_path, base, mesh_map=None):
        self.urdf = yourdfpy.URDF.load(urdf_path, build_scene_graph=True, load_meshes=False,
                                       load_collision_meshes=False)
        self.base = base
        self.directory = os.path.dirname(os.path.abspath(urdf_path))
        self.mesh_map = dict(mesh_map or {})
        self.geometry = {}
        for link in self.urdf.robot.links:
            items = []
            for col in link.collisions:
                shape = self._shape(col.geometry)
                if shape is not None:
                    items.append((shape, np.eye(4) if col.origin is None else col.origin))
            if items:
                self.geometry[link.name] = items
        self._joints = self._tree_order()

    def _tree_order(self):
        """Return the joints parents first (None with a mimic joint: ``link_poses`` then asks
        yourdfpy's scene graph, which applies the mimic)."""
        joints = self.urdf.robot.joints
        if any(j.mimic is not None for j in joints):
            return None
        placed, order = {self.urdf.base_link}, []
        while len(order) < len(joints):
            ready = [j for j in joints if j.parent in placed and j.child not in placed]
            assert ready, 'the URDF is not a tree'
            order += ready
            placed.update(j.child for j in ready)
        return order

    def link_poses(self, cfg):
        """Return {link: (4, 4) pose in the base frame} at joint values ``cfg`` {joint: value}
        (joints not named: 0).

        yourdfpy's own joint transforms (``_forward_kinematics_joint``, what its
        ``update_cfg`` puts on the scene graph's edges) multiplied along the tree: the poses
        of ``update_cfg`` + ``get_transform``, ~30x faster than asking its scene graph link by
        link (test_collision_constraint checks they agree).
        """
        if self._joints is None:
            return self.scene_graph_poses(cfg)
        world = {self.urdf.base_link: np.eye(4)}
        for joint in self._joints:
            q = cfg.get(joint.name, 0.0) if joint.type != 'fixed' else None
            world[joint.child] = world[joint.parent] @ self.urdf._forward_kinematics_joint(
                joint, q=q)[0]
        to_base = np.linalg.inv(world[self.base])
        return {name: to_base @ world[name] for name in self.geometry}

    def scene_graph_poses(self, cfg):
        """Return ``link_poses`` through yourdfpy's ``update_cfg`` and ``get_transform``."""
        self.urdf.update_cfg({**dict.fromkeys(self.urdf.actuated_joint_names, 0.0), **cfg})
        return {name: self.urdf.get_transform(frame_to=name, frame_from=self.base)
                for name in self.geometry}

    def _mesh_file(self, uri):
        for prefix, directory in self.mesh_map.items():
            if uri.startswith(prefix):
                return os.path.join(directory, uri[len(prefix):].lstrip('/'))
        if uri.startswith('file://'):
            uri = uri[len('file://'):]
        return uri if os.path.isabs(uri) else os.path.join(self.directory, uri)

    def _shape(self, geo):
        if geo.box is not None:
            return fcl.Box(*np.ravel(geo.box.size))
        if geo.cylinder is not None:
            return fcl.Cylinder(geo.cylinder.radius, geo.cylinder.length)
        if geo.sphere is not None:
            return fcl.Sphere(geo.sphere.radius)
        if geo.mesh is not None:
            mesh = trimesh.load(self._mesh_file(geo.mesh.filename), force='mesh')
            scale = 1.0 if geo.mesh.scale is None else np.asarray(geo.mesh.scale, float)
            vertices = np.asarray(mesh.vertices) * scale
            bvh = fcl.BVHModel()
            bvh.beginModel(len(vertices), len(mesh.faces))
            bvh.addSubModel(vertices, np.asarray(mesh.faces))
            bvh.endModel()
            return bvh
        return None

    def objects(self, cfg):
        """Return {link: [fcl.CollisionObject]} at joint values ``cfg`` {joint: value}."""
        poses = self.link_poses(cfg)
        return {name: [fcl.CollisionObject(shape, _transform(poses[name] @ origin))
                       for shape, origin in items]
                for name, items in self.geometry.items()}



class FclArm:
    """An arm's collision shapes in FCL (``FclRobot``), the self pairs its SRDF leaves
    enabled, and the checks the DDS tests and benchmarks make at joint values q.

    joint_names: the order of q (default: the URDF's movable joints; others stay at 0).
    """

    def __init__(self, urdf_path, base, srdf_path, mesh_map=None, joint_names=None):
        self.robot = FclRobot(str(urdf_path), base, mesh_map)
        root = ElementTree.parse(srdf_path).getroot()
        disabled = {frozenset((e.get('link1'), e.get('link2')))
                    for e in root.iter('disable_collisions')}
        self.pairs = [(a, b) for a, b in itertools.combinations(sorted(self.robot.geometry), 2)
                      if frozenset((a, b)) not in disabled]
        self.joint_names = list(joint_names) if joint_names is not None else [
            j.name for j in self.robot.urdf.robot.joints if j.type != 'fixed']

    def contacts(self, q, obstacles=()):
        """Return the names of what touches at q: 'link / obstacle k', 'link / link'."""
        objects = self.robot.objects(dict(zip(self.joint_names, q)))
        request, out = fcl.CollisionRequest(), []
        for link, items in objects.items():
            for k, obstacle in enumerate(obstacles):
                if any(fcl.collide(a, obstacle, request, fcl.CollisionResult())
                       for a in items):
                    out.append(f'{link} / obstacle {k}')
        for a, b in self.pairs:
            if any(fcl.collide(x, y, request, fcl.CollisionResult())
                   for x in objects[a] for y in objects[b]):
                out.append(f'{a} / {b}')
        return out

    def distance(self, q, obstacle):
        """Return the smallest FCL distance [m] from the arm's shapes to ``obstacle``."""
        objects = self.robot.objects(dict(zip(self.joint_names, q)))
        best = math.inf
        for items in objects.values():
            for a in items:
                best = min(best, fcl.distance(a, obstacle, fcl.DistanceRequest(),
                                              fcl.DistanceResult()))
        return best

    def self_distance(self, q):
        """Return the smallest FCL distance [m] between the enabled self pairs at q."""
        objects = self.robot.objects(dict(zip(self.joint_names, q)))
        return min((fcl.distance(x, y, fcl.DistanceRequest(), fcl.DistanceResult())
                    for a, b in self.pairs for x in objects[a] for y in objects[b]),
                   default=math.inf)


def substeps(positions, step):
    """Return every distinct command and points between consecutive ones, at most ``step``
    [rad] apart on any joint (K', n)."""
    positions = np.asarray(positions, dtype=float)
    keep = np.ones(len(positions), dtype=bool)
    keep[1:] = np.any(positions[1:] != positions[:-1], axis=1)
    positions = positions[keep]
    out = [positions[:1]]
    for a, b in zip(positions[:-1], positions[1:]):
        count = max(1, int(math.ceil(np.max(np.abs(b - a)) / step)))
        t = np.arange(1, count + 1)[:, None] / count
        out.append(a + t * (b - a))
    return np.vstack(out)

def _transform(pose):
    return fcl.Transform(pose[:3, :3], pose[:3, 3])


def fcl_distance(objects_a, objects_b):
    """Return the smallest distance between two lists of FCL objects (<= 0 when touching)."""
    best = np.inf
    for a in objects_a:
        for b in objects_b:
            if fcl.collide(a, b, fcl.CollisionRequest(), fcl.CollisionResult()) > 0:
                return 0.0
            best = min(best, fcl.distance(a, b, fcl.DistanceRequest(), fcl.DistanceResult()))
    return best


def fcl_obstacle(obstacle):
    """Return the FCL object of a sphere/box/cylinder ``collision.Obstacle``."""
    if obstacle.shape == 'sphere':
        shape = fcl.Sphere(obstacle.size[0])
    elif obstacle.shape == 'box':
        shape = fcl.Box(*obstacle.size)
    else:
        shape = fcl.Cylinder(obstacle.size[0], obstacle.size[1])
    return fcl.CollisionObject(shape, _transform(obstacle.pose))


_TWO_LINK = textwrap.dedent('''\
    <?xml version="1.0"?>
    <robot name="NAME">
      <link name="base_link"/>
      <joint name="j1" type="revolute">
        <parent link="base_link"/><child link="link1"/>
        <origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>
        <limit lower="-3" upper="3" effort="1" velocity="1"/>
      </joint>
      <link name="link1">
        <collision><geometry><mesh filename="MESH"/></geometry></collision>
      </link>
      <joint name="j2" type="revolute">
        <parent link="link1"/><child link="link2"/>
        <origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>
        <limit lower="-2" upper="2" effort="1" velocity="1"/>
      </joint>
      <link name="link2">
        <collision><origin xyz="0 0 0.1" rpy="0.3 0 0"/>
          <geometry><mesh filename="MESH" scale="0.5 0.5 1.0"/></geometry>
        </collision>
      </link>
      <joint name="j3" type="fixed">
        <parent link="link2"/><child link="tool0"/><origin xyz="0 0 0.25"/>
      </joint>
      <link name="tool0"/>
    EXTRA
    </robot>
    ''')


def write_two_link_urdf(directory, mesh_uri, extra_links='', name='gen'):
    """Write a small URDF whose link1 and link2 carry a mesh given by URI; return its path.

    extra_links: more URDF elements (links, joints) inserted before </robot>.
    """
    text = _TWO_LINK.replace('NAME', name).replace('MESH', mesh_uri).replace('EXTRA',
                                                                            extra_links)
    path = os.path.join(directory, f'{name}.urdf')
    with open(path, 'w') as f:
        f.write(text)
    return path


def surface_points(mesh, count, seed=0):
    """Return (count + V, 3): trimesh surface samples plus every vertex of ``mesh``."""
    samples, _ = trimesh.sample.sample_surface(mesh, count, seed=seed)
    return np.vstack([samples, mesh.vertices])


def inside_cover(points, centers, radii, tol=1e-9):
    """Return (P,) bool: each point lies in at least one sphere."""
    d = np.linalg.norm(points[:, None, :] - centers[None], axis=-1) - radii[None]
    return d.min(axis=1) <= tol
