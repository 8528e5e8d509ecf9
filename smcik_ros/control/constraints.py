"""The constraint set the node applies: the schema's entries plus keep-out spheres from markers.

Pure Python/numpy, no ROS. Two sources replace their own part of the set: the ``constraints``
parameter/topic (schema text, smcik_ros/constraint_schema.py) and keep-out spheres given as
markers (already converted from the message: {key: (frame, centre (3,), radius)}). Frames are
converted to the base frame once, when a part is replaced (``frame_to_base``). A refused
replacement raises GoalError and leaves the whole set as it was.
"""

import collections

from .. import constraint_schema
from ..goals import KeepOutSphere

__all__ = ['ConstraintSet']


class ConstraintSet:
    """Schema entries + marker spheres, built into goal objects in the base frame.

    chain: the Chain; frame_to_base: callable frame -> (4, 4) pose in the base frame [m]
    (GoalError for an unknown frame); frame_names: frames the schema may name (None: any,
    checked when built, e.g. with tf2).
    """

    def __init__(self, chain, frame_to_base, frame_names=None):
        self.chain = chain
        self.frame_to_base = frame_to_base
        self.frame_names = frame_names
        self.specs = []            # schema entries
        self.markers = {}          # key -> (centre (3,) in the base frame [m], radius [m])
        self.objects = []          # goal objects handed to the solver and the validators
        self.spheres = []          # [(centre (3,), radius)] of every keep-out sphere (drawing)

    def parse(self, text):
        """Return the schema entries of ``text`` (GoalError when malformed)."""
        return constraint_schema.parse_constraints(
            text, joint_names=self.chain.joint_names, link_names=self.chain.link_names,
            frame_names=self.frame_names)

    def build(self, specs, markers):
        """Return (objects, spheres) for ``specs`` and ``markers`` (GoalError if refused)."""
        objects = constraint_schema.build_constraints(specs, self.chain, self.frame_to_base)
        spheres = [(obj.center, obj.radius) for spec, obj in zip(specs, objects)
                   if isinstance(spec, constraint_schema.KeepOutSphereSpec)]
        for center, radius in markers.values():
            objects.append(KeepOutSphere(center, radius))
            spheres.append((center, radius))
        return objects, spheres

    def replace_specs(self, specs):
        """Apply new schema entries (keeping the marker spheres); return the new objects."""
        self.objects, self.spheres = self.build(specs, self.markers)
        self.specs = list(specs)
        return self.objects

    def replace_markers(self, spheres):
        """Apply keep-out spheres {key: (frame, centre (3,), radius)}; return the objects."""
        in_base = {}
        for key, (frame, center, radius) in spheres.items():
            to_base = self.frame_to_base(frame)
            in_base[key] = (to_base[:3, :3] @ center + to_base[:3, 3], radius)
        self.objects, self.spheres = self.build(self.specs, in_base)
        self.markers = in_base
        return self.objects

    def marker_frames(self):
        """Return the marker spheres as {key: (base frame name, centre, radius)}."""
        base = self.chain.base_link
        return {key: (base, center, radius) for key, (center, radius) in self.markers.items()}

    def summary(self):
        """Return 'N type, ...' of the schema entries ('none' when empty)."""
        kinds = collections.Counter(spec.type for spec in self.specs)
        return ', '.join(f'{v} {k}' for k, v in kinds.items()) or 'none'
