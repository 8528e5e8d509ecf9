"""Collision avoidance: sphere covers of the robot, scene obstacles, the collision constraint.

Pure numpy (plus trimesh and scipy at start-up); no ROS import. The pieces:

- ``CollisionModel.from_urdf(chain, urdf, package_paths=...)``: conservative, tight sphere
  covers of every link's <collision> geometry (``covers``, cached on disk);
- ``self_collision_pairs(model, srdf=...)``: the link pairs to check (adjacent, SRDF,
  always and never rules) and ``parse_srdf``, ``conventional_srdf_path``;
- ``Scene`` of ``Obstacle`` (spheres, boxes, cylinders, point-cloud sphere sets) keyed by
  (ns, id), ``obstacle_from_marker`` (RViz marker numbers), ``pointcloud_obstacle``;
- ``CollisionConstraint``: the hard constraint (and soft clearance term) every solver
  respects, with ``distances``, ``check_motion``, ``inequality_rows``;
- ``KeepOutSphere`` / ``KeepOutObstacle``: one obstacle as a standalone constraint;
- ``support_points`` / ``support_polygon``: the support polygon of links' collision shapes
  (not their covers), for ``goals.CenterOfMassPolygon``.

See docs/collision.md for the calls the node makes.
"""

from .constraint import (DEFAULT_CLEARANCE, DEFAULT_PADDING, CollisionConstraint,
                         CollisionReport, KeepOutObstacle, KeepOutSphere)
from .covers import SphereCover, cover_mesh, default_cache_dir
from .model import (DEFAULT_TOLERANCE, MIN_TOLERANCE, CollisionModel, LinkGeometry,
                    collision_geometry, conventional_srdf_path, load_mesh, resolve_mesh_uri)
from .pairs import SelfCollisionPairs, Srdf, parse_srdf, self_collision_pairs
from .scene import (MARKER_ADD, MARKER_CUBE, MARKER_CYLINDER, MARKER_DELETE, MARKER_DELETEALL,
                    MARKER_SPHERE, Obstacle, Scene, obstacle_from_marker, pointcloud_obstacle,
                    pose_matrix, voxel_downsample)
from .support import support_points, support_polygon

__all__ = [
    'CollisionModel', 'LinkGeometry', 'SphereCover', 'CollisionConstraint', 'CollisionReport',
    'KeepOutObstacle', 'KeepOutSphere', 'Obstacle', 'Scene', 'SelfCollisionPairs', 'Srdf',
    'DEFAULT_PADDING', 'DEFAULT_CLEARANCE', 'DEFAULT_TOLERANCE', 'MIN_TOLERANCE', 'MARKER_ADD',
    'MARKER_CUBE', 'MARKER_CYLINDER',
    'MARKER_DELETE', 'MARKER_DELETEALL', 'MARKER_SPHERE', 'collision_geometry',
    'conventional_srdf_path',
    'cover_mesh', 'default_cache_dir', 'load_mesh', 'obstacle_from_marker', 'parse_srdf',
    'pointcloud_obstacle', 'pose_matrix', 'resolve_mesh_uri', 'self_collision_pairs',
    'support_points', 'support_polygon', 'voxel_downsample',
]
