"""Every link of the robot's URDF tree in the base frame, by the robot's own kinematics.

Pure numpy, no ROS. Links of the modelled chain move with the configuration (``chain.fk``);
links joined to the base or to the chain through fixed joints only are static (e.g. ``world``
above ``base_link`` in a UR5 URDF: ``world -fixed-> base_link``, or a camera mount beside the
base); a link separated by a movable joint that is not part of the chain (a gripper finger, a
linear rail under the base) is not static: its pose needs tf2, and without tf2 the error
names the joint that makes it move.
"""

import numpy as np

from ..errors import GoalError

__all__ = ['FrameResolver']


def _origin(joint):
    return np.eye(4) if joint.origin is None else np.asarray(joint.origin, dtype=float)


class FrameResolver:
    """Poses of the links of ``chain.tree_joints`` (the whole URDF) in the chain's base frame.

    ``pose(link, q)`` returns the (4, 4) pose [m]; ``kind(link)`` says how it is known:
    'model' (moves with q), 'static', 'moving' (needs tf2) or 'unknown'.
    """

    def __init__(self, chain):
        self.chain = chain
        self.base_link = chain.base_link
        joints = list(chain.tree_joints)
        self._by_child = {j.child: j for j in joints}
        links = []
        for j in joints:
            for link in (j.parent, j.child):
                if link not in links:
                    links.append(link)
        if self.base_link not in links:
            links.insert(0, self.base_link)
        self.links = tuple(links)
        self._static = {}        # link -> (4, 4) pose in the base frame
        self._moving = {}        # link -> the joint that makes it move (JointSpec)
        base_path = self._path_to_root(self.base_link)       # [(link, joint to its parent)]
        base_ancestors = {link: i for i, (link, _) in enumerate(base_path)}
        for link in self.links:
            if chain.has_link(link):
                continue
            path = self._path_to_root(link)
            # Nearest ancestor that is a model link (the link hangs below the chain) ...
            below = next((i for i, (a, _) in enumerate(path) if chain.has_link(a)), None)
            if below is not None:
                anchor = path[below][0]
                mover = self._first_movable(path[:below])
                if mover is not None:
                    self._moving[link] = mover
                else:
                    self._static[link] = ('below', anchor, self._down(path[:below]))
                continue
            # ... or the lowest common ancestor with the base link (above or beside the base).
            common = next((i for i, (a, _) in enumerate(path) if a in base_ancestors), None)
            if common is None:        # a separate tree (not connected to the base)
                continue
            up = base_ancestors[path[common][0]]
            mover = self._first_movable(base_path[:up]) or self._first_movable(path[:common])
            if mover is not None:
                self._moving[link] = mover
                continue
            common_to_base = self._down(base_path[:up])
            common_to_link = self._down(path[:common])
            self._static[link] = ('static', np.linalg.inv(common_to_base) @ common_to_link)

    def _path_to_root(self, link):
        """Return [(link, joint above it)] from ``link`` up to the root (root's joint None)."""
        out, seen = [], set()
        while link is not None and link not in seen:
            seen.add(link)
            joint = self._by_child.get(link)
            out.append((link, joint))
            link = joint.parent if joint is not None else None
        return out

    @staticmethod
    def _first_movable(segment):
        for _, joint in segment:
            if joint is not None and joint.type != 'fixed':
                return joint
        return None

    @staticmethod
    def _down(segment):
        """Return the pose of segment[0]'s link in the frame of the parent of segment[-1]."""
        out = np.eye(4)
        for _, joint in reversed(segment):
            out = out @ _origin(joint)
        return out

    def kind(self, link):
        """Return 'model', 'static', 'moving' or 'unknown' for ``link``."""
        if not link or self.chain.has_link(link):
            return 'model'
        if link in self._static:
            return 'static'
        if link in self._moving:
            return 'moving'
        return 'unknown'

    def pose(self, link, q):
        """Return the (4, 4) pose of ``link`` in the base frame [m] at configuration q (n,).

        An empty name is the base frame. Raises GoalError for a link that is not in the URDF
        or that a movable joint outside the chain moves (naming that joint).
        """
        if not link or link == self.base_link:
            return np.eye(4)
        if self.chain.has_link(link):
            return self.chain.fk(q, link=link)
        entry = self._static.get(link)
        if entry is not None:
            if entry[0] == 'below':
                return self.chain.fk(q, link=entry[1]) @ entry[2]
            return entry[1].copy()
        joint = self._moving.get(link)
        if joint is not None:
            raise GoalError(
                f'frame {link!r} is not static in {self.base_link!r}: the {joint.type} joint '
                f'{joint.name!r} ({joint.parent} -> {joint.child}) moves it and is not part of '
                'the modelled chain; its pose comes from tf2 only (install tf2_ros, run '
                'robot_state_publisher, keep use_tf: true) - or give the goal in a link of '
                'the chain')
        raise GoalError(f'unknown frame {link!r}: expected an empty frame_id (= '
                        f'{self.base_link}) or a link of the model: {", ".join(self.links)}')
