"""The constraint set the node applies from the ``constraints`` parameter/topic (schema text).

Pure Python/numpy, no ROS. Entries are built in the base frame once, when the set is replaced
(``frame_to_base``). Keep-out spheres and obstacles are scene obstacles: with the robot's
collision ``model`` given, each one whose ``links`` (default: all) all have geometry in the
model goes to ``obstacles`` {('constraints', id): Obstacle}, for the node's collision scene
(the same mechanism as the ``obstacles`` topic, checked against the robot's covers); one
naming links the model has no geometry for is built as its own ``KeepOutObstacle`` constraint
(a thin skeleton of those links' segments), as are all of them without a model. A refused
replacement raises GoalError and leaves the whole set as it was.
"""

import collections

from ..constraint_schema import (KeepOutSphereSpec, ObstacleSpec, build_constraints,
                                 build_obstacles, parse_constraints)
from ..errors import GoalError

__all__ = ['ConstraintSet']

_OBSTACLE_SPECS = (KeepOutSphereSpec, ObstacleSpec)


class ConstraintSet:
    """Schema entries built into constraint objects and scene obstacles in the base frame.

    chain: the Chain; frame_to_base: callable frame -> (4, 4) pose in the base frame [m]
    (GoalError for an unknown frame); frame_names: frames the schema may name (None: any,
    checked when built, e.g. with tf2); model: the robot's CollisionModel (None: obstacles
    become constraint objects); urdf (XML text or path), urdf_path, package_paths: where the
    collision shapes of ``center_of_mass`` ``support`` links are read. Contacts without a pose
    and support polygons are built unanchored: the control loop anchors them where the arm is
    (``base.FigureState.anchor``).
    """

    def __init__(self, chain, frame_to_base, frame_names=None, model=None, urdf=None,
                 urdf_path=None, package_paths=()):
        self.chain = chain
        self.frame_to_base = frame_to_base
        self.frame_names = frame_names
        self.model = model
        self._urdf = {'urdf': urdf, 'urdf_path': urdf_path,
                      'package_paths': tuple(package_paths or ())}
        self.specs = []            # schema entries
        self.objects = []          # constraint objects handed to the solver and validators
        self.obstacles = {}        # {('constraints', id): Obstacle} for the collision scene
        self.drawn = []            # [((ns, id), Obstacle)] of obstacles built as objects

    def parse(self, text):
        """Return the schema entries of ``text`` (GoalError when malformed)."""
        return parse_constraints(
            text, joint_names=self.chain.joint_names, link_names=self.chain.link_names,
            frame_names=self.frame_names)

    def in_scene(self, spec):
        """Return True when the obstacle entry ``spec`` goes to the collision scene."""
        if self.model is None or not isinstance(spec, _OBSTACLE_SPECS):
            return False
        return all(self.model.has_link(name) for name in spec.links)

    def build(self, specs):
        """Return (objects, obstacles, drawn) for ``specs`` (GoalError if one is refused)."""
        obstacles = build_obstacles(specs, self.chain, self.frame_to_base)
        keys = [('constraints', spec.id if getattr(spec, 'id', None) is not None else i)
                for i, spec in enumerate(specs)]
        scene = {keys[i] for i, spec in enumerate(specs) if self.in_scene(spec)}
        objects = build_constraints(specs, self.chain, self.frame_to_base,
                                    skip_obstacles=True, **self._urdf)
        drawn = []
        for i, spec in enumerate(specs):
            if isinstance(spec, _OBSTACLE_SPECS) and keys[i] not in scene:
                try:
                    built = build_constraints(
                        [spec], self.chain, self.frame_to_base, collision_model=self.model)
                except GoalError as exc:     # name the entry by its index in ``specs``
                    raise GoalError(str(exc).replace('constraints[0]', f'constraints[{i}]',
                                                     1)) from None
                objects.extend(built)
                drawn.append((keys[i], obstacles[keys[i]]))
        return objects, {k: o for k, o in obstacles.items() if k in scene}, drawn

    def replace_specs(self, specs):
        """Apply new schema entries; return the new constraint objects (``obstacles`` and
        ``drawn`` are updated with them)."""
        self.objects, self.obstacles, self.drawn = self.build(specs)
        self.specs = list(specs)
        return self.objects

    def summary(self):
        """Return 'N type, ...' of the schema entries ('none' when empty)."""
        kinds = collections.Counter(spec.type for spec in self.specs)
        return ', '.join(f'{v} {k}' for k, v in kinds.items()) or 'none'
