"""Scene obstacles: spheres, boxes, cylinders and point-cloud sphere sets, keyed by (ns, id).

``Obstacle`` is one shape with a pose in the chain's base frame; ``Scene`` holds them keyed
by ``(ns, id)`` (RViz marker semantics) and remembers which source put each one there, so
that a DELETEALL on the ``obstacles`` topic does not drop the constraint YAML's obstacles.
Every change is validated first and applied as a whole: a bad shape refuses the whole
update and the previous scene stays.

``obstacle_from_marker`` converts RViz marker numbers (type, action, pose, scale as RViz
draws them: SPHERE scale.x = diameter, CUBE scale = side lengths, CYLINDER scale.x =
diameter and scale.z = height along the marker's z) into an update; the ROS layer turns a
``visualization_msgs/Marker`` into these numbers. ``pointcloud_obstacle`` turns (N, 3)
points into voxel spheres, without the points on the robot itself.
"""

import dataclasses
import math

import numpy as np

from ..errors import GoalError
from ..rotations import quat_to_matrix
from .shapes import BOX, CYLINDER, SPHERE

__all__ = ['Obstacle', 'Scene', 'MARKER_SPHERE', 'MARKER_CUBE', 'MARKER_CYLINDER',
           'MARKER_ADD', 'MARKER_DELETE', 'MARKER_DELETEALL', 'obstacle_from_marker',
           'pose_matrix', 'pointcloud_obstacle', 'SHAPES']

# visualization_msgs/Marker constants (numbers, so that this module needs no ROS package).
MARKER_CUBE, MARKER_SPHERE, MARKER_CYLINDER = 1, 2, 3
MARKER_ADD, MARKER_DELETE, MARKER_DELETEALL = 0, 2, 3
_MARKER_TYPES = {MARKER_SPHERE: 'sphere', MARKER_CUBE: 'box', MARKER_CYLINDER: 'cylinder'}
# Obstacle shapes: how many sizes each takes, and what they are.
_SIZES = {'sphere': (1, 'radius'), 'box': (3, 'side lengths x, y, z'),
          'cylinder': (2, 'radius and height'), 'spheres': (1, 'radius')}
SHAPES = tuple(_SIZES)


def pose_matrix(position=(0.0, 0.0, 0.0), orientation=None, what='obstacle'):
    """Return the (4, 4) pose of ``position`` (3,) [m] and a quaternion (x, y, z, w).

    The quaternion is in ROS message order. None or all zeros (an unset message field, which
    RViz also draws as the identity) is the identity; other quaternions are normalised.
    Raises GoalError for non-finite values.
    """
    pos = np.asarray(position, dtype=float).reshape(-1)
    if pos.shape != (3,) or not np.all(np.isfinite(pos)):
        raise GoalError(f'{what}: position must be 3 finite numbers [m]; got '
                        f'{np.asarray(position).tolist()}')
    out = np.eye(4)
    out[:3, 3] = pos
    if orientation is None:
        return out
    quat = np.asarray(orientation, dtype=float).reshape(-1)
    if quat.shape != (4,) or not np.all(np.isfinite(quat)):
        raise GoalError(f'{what}: orientation must be a quaternion of 4 finite numbers '
                        f'(x, y, z, w); got {np.asarray(orientation).tolist()}')
    norm = float(np.linalg.norm(quat))
    if norm < 1e-12:
        return out
    x, y, z, w = quat / norm
    out[:3, :3] = quat_to_matrix(np.array([w, x, y, z]))
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Obstacle:
    """One obstacle in the chain's base frame.

    shape: 'sphere' (size = (radius,)), 'box' (size = (x, y, z) side lengths), 'cylinder'
    (size = (radius, height), axis along the local z) or 'spheres' (a point-cloud sphere set:
    size = (radius,), ``centers`` (M, 3) in the obstacle frame); sizes in m.
    pose: (4, 4) pose in the base frame. links: names of the robot links it applies to
    (None: every link). Raises GoalError on a bad shape, size or pose.
    """

    shape: str
    size: tuple
    pose: np.ndarray = None
    centers: np.ndarray = None
    links: tuple = None

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise GoalError(f'obstacle shape must be one of {", ".join(SHAPES)}; got '
                            f'{self.shape!r}')
        want, what = _SIZES[self.shape]
        try:
            size = tuple(float(v) for v in np.ravel(np.asarray(self.size, dtype=float)))
        except (TypeError, ValueError):
            raise GoalError(f'{self.shape} obstacle: size must be numbers ({what}) [m]; got '
                            f'{self.size!r}') from None
        if len(size) != want or not all(math.isfinite(v) and v > 0.0 for v in size):
            raise GoalError(f'{self.shape} obstacle: size must be {want} positive finite '
                            f'number(s) ({what}) [m]; got {list(size)}')
        pose = np.eye(4) if self.pose is None else np.array(self.pose, dtype=float)
        if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
            raise GoalError(f'{self.shape} obstacle: pose must be a finite (4, 4) matrix; got '
                            f'shape {pose.shape}')
        rot = pose[:3, :3]
        if np.abs(rot @ rot.T - np.eye(3)).max() > 1e-6 or np.linalg.det(rot) < 0.0:
            raise GoalError(f'{self.shape} obstacle: pose rotation is not a rotation matrix')
        pose.setflags(write=False)
        object.__setattr__(self, 'size', size)
        object.__setattr__(self, 'pose', pose)
        if self.shape == 'spheres':
            centers = np.array(self.centers if self.centers is not None else np.zeros((0, 3)),
                               dtype=float).reshape(-1, 3)
            if not np.all(np.isfinite(centers)):
                raise GoalError('spheres obstacle: centres contain NaN or infinite values')
            centers.setflags(write=False)
            object.__setattr__(self, 'centers', centers)
        elif self.centers is not None:
            raise GoalError(f'{self.shape} obstacle: centers= is only for shape "spheres"')
        if self.links is not None:
            links = (self.links,) if isinstance(self.links, str) else tuple(self.links)
            if not links or not all(isinstance(n, str) and n for n in links):
                raise GoalError(f'{self.shape} obstacle: links must be a non-empty list of '
                                f'link names (or None for all); got {self.links!r}')
            object.__setattr__(self, 'links', links)

    @classmethod
    def sphere(cls, center, radius, links=None):
        """Return a sphere obstacle: centre (3,) [m] in the base frame, radius [m]."""
        return cls('sphere', (radius,), pose_matrix(center, what='sphere obstacle'),
                   links=links)

    @classmethod
    def box(cls, size, pose=None, links=None):
        """Return a box obstacle: side lengths (3,) [m], centre pose (4, 4) in the base frame."""
        return cls('box', tuple(np.ravel(size)), pose, links=links)

    @classmethod
    def cylinder(cls, radius, height, pose=None, links=None):
        """Return a cylinder obstacle (radius, height [m], axis = the pose's z)."""
        return cls('cylinder', (radius, height), pose, links=links)

    @property
    def center(self):
        """The (3,) centre [m] in the base frame (of the pose)."""
        return self.pose[:3, 3].copy()

    @property
    def radius(self):
        """The radius [m] of spheres, cylinders and sphere sets (NaN for boxes)."""
        return self.size[0] if self.shape != 'box' else float('nan')

    def primitives(self):
        """Return (kind (M,), rot (M, 3, 3), trans (M, 3), size (M, 3)) in the base frame."""
        rot, trans = self.pose[:3, :3], self.pose[:3, 3]
        if self.shape == 'spheres':
            m = len(self.centers)
            return (np.full(m, SPHERE), np.broadcast_to(rot, (m, 3, 3)).copy(),
                    self.centers @ rot.T + trans,
                    np.tile([self.size[0], 0.0, 0.0], (m, 1)))
        if self.shape == 'sphere':
            kind, size = SPHERE, (self.size[0], 0.0, 0.0)
        elif self.shape == 'box':
            kind, size = BOX, tuple(0.5 * v for v in self.size)
        else:
            kind, size = CYLINDER, (self.size[0], 0.5 * self.size[1], 0.0)
        return (np.array([kind]), rot[None].copy(), trans[None].copy(), np.array([size]))


class Scene:
    """Obstacles keyed by (ns, id), each remembering its source; ``version`` counts changes.

    Sources let several inputs share one scene: the ``obstacles`` topic ('obstacles'), the
    constraint YAML ('constraints'), a point cloud ('pointcloud'). ``apply`` is
    transactional: every update is validated before any is applied.
    """

    def __init__(self, obstacles=None, source='user'):
        self._items = {}
        self.version = 0
        for key, obstacle in (obstacles or {}).items():
            self._items[_key(key)] = (obstacle, source)

    def __len__(self):
        return len(self._items)

    def __contains__(self, key):
        return _key(key) in self._items

    def __getitem__(self, key):
        return self._items[_key(key)][0]

    def items(self):
        """Return [((ns, id), Obstacle)] in insertion order."""
        return [(k, v[0]) for k, v in self._items.items()]

    def keys(self, source=None):
        """Return the keys (of one ``source``, or all)."""
        return [k for k, v in self._items.items() if source is None or v[1] == source]

    def source_of(self, key):
        """Return the source that added ``key``."""
        return self._items[_key(key)][1]

    def add(self, key, obstacle, source='user'):
        """Add or replace the obstacle at ``key`` = (ns, id)."""
        self.apply([('add', key, obstacle)], source)

    def remove(self, key):
        """Remove ``key`` if present; return True when something was removed."""
        key = _key(key)
        if key in self._items:
            self.apply([('delete', key)])
            return True
        return False

    def replace_source(self, obstacles, source):
        """Replace everything ``source`` added by ``obstacles`` {(ns, id): Obstacle}."""
        updates = [('deleteall', None)] + [('add', k, o) for k, o in obstacles.items()]
        self.apply(updates, source)

    def apply(self, updates, source='user'):
        """Apply updates ('add', key, Obstacle) / ('delete', key) / ('deleteall', ns or None).

        'deleteall' removes what ``source`` added (only in namespace ns, when given), as a
        DELETEALL marker removes what its own topic published. Every update is checked
        before any is applied; GoalError leaves the scene unchanged. Returns (added,
        removed) counts.
        """
        updates = list(updates)
        for k, update in enumerate(updates):
            if not isinstance(update, (tuple, list)) or not update:
                raise GoalError(f'scene update {k}: expected a tuple (action, ...); got '
                                f'{update!r}')
            action = update[0]
            if action == 'add':
                if len(update) != 3 or not isinstance(update[2], Obstacle):
                    raise GoalError(f'scene update {k}: expected (\'add\', (ns, id), Obstacle);'
                                    f' got {update!r}')
                _key(update[1])
            elif action == 'delete':
                if len(update) != 2:
                    raise GoalError(f"scene update {k}: expected ('delete', (ns, id))")
                _key(update[1])
            elif action != 'deleteall':
                raise GoalError(f'scene update {k}: unknown action {action!r}; expected add, '
                                'delete or deleteall')
        items = dict(self._items)
        added = removed = 0
        for update in updates:
            if update[0] == 'add':
                items[_key(update[1])] = (update[2], source)
                added += 1
            elif update[0] == 'delete':
                if items.pop(_key(update[1]), None) is not None:
                    removed += 1
            else:
                ns = update[1] if len(update) > 1 else None
                gone = [k for k, v in items.items()
                        if (source is None or v[1] == source) and (not ns or k[0] == ns)]
                for k in gone:
                    del items[k]
                removed += len(gone)
        if updates:
            self._items = items
            self.version += 1
        return added, removed

    def snapshot(self):
        """Return a copy of the scene as it is now (the same obstacles and ``version``), which
        later changes of this scene do not reach: what a solver stepping in another thread
        reads while callbacks change the live scene. Cheap: ``apply`` replaces the item table
        and never edits it in place, so the copy shares it. Safe from another thread: the
        version is read before the table and ``apply`` writes the table before the version,
        so a copy taken during a change has the older version and is taken again."""
        copy = Scene.__new__(Scene)
        copy.version = self.version
        copy._items = self._items
        return copy


def _key(key):
    if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)):
        raise GoalError(f'obstacle key must be a (ns, id) pair with a string ns; got {key!r}')
    return key


def obstacle_from_marker(marker_type, action, ns='', marker_id=0, position=(0.0, 0.0, 0.0),
                         orientation=None, scale=(1.0, 1.0, 1.0), frame_pose=None,
                         where='marker'):
    """Return the scene update for one RViz marker, given as plain numbers.

    marker_type: SPHERE (2), CUBE (1) or CYLINDER (3); action: ADD (0), DELETE (2) or
    DELETEALL (3); position (3,) [m] and orientation (x, y, z, w) of the marker pose in its
    frame; scale (3,) as RViz draws it (SPHERE: scale.x = diameter, all three equal; CUBE:
    side lengths; CYLINDER: scale.x = scale.y = diameter, scale.z = height along z);
    frame_pose: (4, 4) pose of the marker's frame in the base frame (None: the base frame).
    Returns ('add', (ns, id), Obstacle), ('delete', (ns, id)) or ('deleteall', ns or None).
    Raises GoalError naming ``where`` and the problem (unsupported type or action, sizes
    that are not positive and finite, a non-uniform sphere or cylinder scale, NaN poses).
    """
    key = (str(ns), int(marker_id))
    if action == MARKER_DELETEALL:
        return ('deleteall', key[0] or None)
    if action == MARKER_DELETE:
        return ('delete', key)
    if action != MARKER_ADD:
        raise GoalError(f'{where}: expected action ADD ({MARKER_ADD}), DELETE ({MARKER_DELETE})'
                        f' or DELETEALL ({MARKER_DELETEALL}); got {action}')
    if marker_type not in _MARKER_TYPES:
        raise GoalError(f'{where}: unsupported marker type {marker_type}; obstacles are '
                        f'SPHERE ({MARKER_SPHERE}), CUBE ({MARKER_CUBE}) or CYLINDER '
                        f'({MARKER_CYLINDER})')
    shape = _MARKER_TYPES[marker_type]
    sx, sy, sz = _scale(where, scale)
    pose = pose_matrix(position, orientation, where)
    if frame_pose is not None:
        frame_pose = np.asarray(frame_pose, dtype=float)
        if frame_pose.shape != (4, 4) or not np.all(np.isfinite(frame_pose)):
            raise GoalError(f'{where}: frame pose must be a finite (4, 4) matrix')
        pose = frame_pose @ pose
    tol = 1e-6 * max(sx, sy, sz)
    if shape == 'sphere':
        if abs(sx - sy) > tol or abs(sx - sz) > tol:
            raise GoalError(f'{where}: a SPHERE obstacle needs a uniform scale (scale.x = '
                            f'scale.y = scale.z = diameter); got ({sx}, {sy}, {sz}): '
                            'ellipsoids are not supported')
        obstacle = Obstacle('sphere', (0.5 * sx,), pose)
    elif shape == 'box':
        obstacle = Obstacle('box', (sx, sy, sz), pose)
    else:
        if abs(sx - sy) > tol:
            raise GoalError(f'{where}: a CYLINDER obstacle needs scale.x = scale.y = diameter; '
                            f'got ({sx}, {sy}): elliptic cylinders are not supported')
        obstacle = Obstacle('cylinder', (0.5 * sx, sz), pose)
    return ('add', key, obstacle)


def _scale(where, scale):
    arr = np.asarray(scale, dtype=float).reshape(-1)
    if arr.shape != (3,) or not np.all(np.isfinite(arr)) or np.any(arr <= 0.0):
        raise GoalError(f'{where}: scale must be 3 positive finite numbers [m]; got '
                        f'{np.asarray(scale).tolist()}')
    return (float(arr[0]), float(arr[1]), float(arr[2]))


def pointcloud_obstacle(points, voxel_size=0.03, robot=None, q=None, robot_margin=0.02,
                        reach=None):
    """Return a 'spheres' Obstacle for (N, 3) points [m] in the base frame (or None if empty).

    Points are binned in voxels of edge ``voxel_size`` [m]; each occupied voxel becomes a
    sphere at its centre whose radius, half the voxel diagonal, contains every point of the
    voxel (the cover is conservative for the points; between points it is only as good as
    the sensor's sampling). Non-finite points (invalid returns) are dropped, and so are points
    farther than ``reach`` [m] (+ two voxels) from the base origin (they cannot touch the
    arm; None: none). robot, q: a ``CollisionConstraint`` (anything with ``points_on_robot``)
    and the measured configuration: points within the robot's own cover plus padding plus
    ``robot_margin`` [m] are removed first, so the arm does not avoid itself (tested one by
    one only in the voxels whose centre is near the cover: a camera's cloud is mostly
    elsewhere), and so are voxel spheres that would still reach into the padded cover (the
    measured configuration stays free).
    """
    voxel = float(voxel_size)
    if not voxel > 0.0:
        raise GoalError(f'voxel_size must be > 0 [m]; got {voxel_size}')
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 3:
        raise GoalError(f'points must have shape (N, 3); got {points.shape}')
    points = points[np.isfinite(points).all(axis=1)]
    radius = 0.5 * math.sqrt(3.0) * voxel
    if reach is not None and len(points):
        limit = float(reach) + 2.0 * voxel
        points = points[np.einsum('ij,ij->i', points, points) <= limit * limit]
    if not len(points):
        return None
    cells = np.floor(points / voxel).astype(np.int64)
    low = cells.min(axis=0)
    cells -= low
    dims = cells.max(axis=0) + 1
    keys = (cells[:, 0] * dims[1] + cells[:, 1]) * dims[2] + cells[:, 2]
    unique, inverse = np.unique(keys, return_inverse=True)

    def centres(key):
        cell = np.stack([key // (dims[1] * dims[2]), (key // dims[2]) % dims[1], key % dims[2]],
                        axis=1)
        return (cell + low + 0.5) * voxel

    filtered = robot is not None and q is not None
    if filtered:
        near = robot.points_on_robot(centres(unique), q, robot_margin, point_radius=radius)
        if near.any():
            near_points = near[inverse.reshape(-1)]
            on_robot = robot.points_on_robot(points[near_points], q, robot_margin)
            unique = np.union1d(unique[~near], keys[near_points][~on_robot])
    result = centres(unique)
    if filtered and len(result):
        result = result[~robot.points_on_robot(result, q, 0.0, point_radius=radius)]
    if not len(result):
        return None
    return Obstacle('spheres', (radius,), np.eye(4), centers=result)
