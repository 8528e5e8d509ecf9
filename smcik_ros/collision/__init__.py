"""Collision avoidance: sphere covers of the robot, scene obstacles, the collision constraint.

No ROS import; trimesh and scipy at start-up only (python-fcl for ``overlapping_parts``,
when installed). ``CollisionModel.from_urdf`` (covers of every link's <collision> geometry,
``covers``), ``self_collision_pairs`` (adjacent, SRDF, always and never rules),
``overlapping_parts`` (MoveIt's "Default" rule), ``Scene`` of ``Obstacle`` keyed by (ns, id)
(``obstacle_from_marker``, ``pointcloud_obstacle``), ``CollisionConstraint`` (the hard
constraint and soft clearance every solver respects), ``KeepOutSphere``/``KeepOutObstacle``
(one obstacle as a constraint) and ``support_polygon`` (links' collision shapes, not their
covers, for ``goals.CenterOfMassPolygon``). docs/collision.md describes the calls the node
makes.
"""

from .constraint import (DEFAULT_CLEARANCE, DEFAULT_PADDING, CollisionConstraint,
                         CollisionReport, KeepOutObstacle, KeepOutSphere)
from .covers import SphereCover, cover_mesh, default_cache_dir
from .model import (DEFAULT_TOLERANCE, MIN_TOLERANCE, CollisionModel, LinkGeometry,
                    collision_geometry, conventional_srdf_path, load_mesh, resolve_mesh_uri)
from .pairs import SelfCollisionPairs, Srdf, overlapping_parts, parse_srdf, self_collision_pairs
from .scene import (MARKER_ADD, MARKER_CUBE, MARKER_CYLINDER, MARKER_DELETE, MARKER_DELETEALL,
                    MARKER_SPHERE, Obstacle, Scene, obstacle_from_marker, pointcloud_obstacle,
                    pose_matrix)
from .support import support_points, support_polygon

__all__ = [
    'CollisionModel', 'LinkGeometry', 'SphereCover', 'CollisionConstraint', 'CollisionReport',
    'KeepOutObstacle', 'KeepOutSphere', 'Obstacle', 'Scene', 'SelfCollisionPairs', 'Srdf',
    'DEFAULT_PADDING', 'DEFAULT_CLEARANCE', 'DEFAULT_TOLERANCE', 'MIN_TOLERANCE', 'MARKER_ADD',
    'MARKER_CUBE', 'MARKER_CYLINDER',
    'MARKER_DELETE', 'MARKER_DELETEALL', 'MARKER_SPHERE', 'collision_geometry',
    'conventional_srdf_path',
    'cover_mesh', 'default_cache_dir', 'load_mesh', 'obstacle_from_marker',
    'overlapping_parts', 'parse_srdf',
    'pointcloud_obstacle', 'pose_matrix', 'resolve_mesh_uri', 'self_collision_pairs',
    'support_points', 'support_polygon',
]
