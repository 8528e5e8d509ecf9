"""Motions the collision validator proves free without a full query, without ROS.

The command stream asks the collision guard about every tick's motion; most are tiny (a held
or settling arm). ``FreeMotionProofs`` remembers what makes such a motion free cheaply:

- The anchor: the end of the last motion found free, with a lower bound of its padded
  distances. A motion that stays so near the anchor that no distance can reach 0 (the
  constraint's lever arms bound how far a cover point moves per radian) is free without a
  query: a held or slowly settling arm costs a few microseconds per tick.
- The last motion the full check found free, with what the verdict depends on (constraint,
  pairs, padding, scene): the same motion asked again (a held arm: the same command every
  tick) is free without a query. The anchor proves nothing where a padded distance is
  already below 0 (covers that overlap at rest, e.g. a Panda's hand and link 5 at its zero
  configuration); this does.
- The coarse pass: sub-steps ``coarse_resolution`` apart that are all at least
  ``coarse_resolution - padding`` clear prove the motion between them free.

Every proof carries a key (the constraint by identity, its pairs' version, its padding, the
scene's version): a new scene, padding or constraint drops it.
"""

import numpy as np

__all__ = ['FreeMotionProofs', 'motion_key']


def motion_key(constraint, scene):
    """Return what a verdict of ``constraint`` (CollisionConstraint) on ``scene`` depends on."""
    return (constraint, constraint._pairs_version, constraint.padding, scene.version)


class FreeMotionProofs:
    """The collision validator's memory of free motions (see the module doc).

    ``free_motion``: (key, q_from bytes, q_to bytes) of the last motion the full check found
    free. The proofs read the chain and covers of the constraint they are given.
    """

    ANCHOR_SEARCH = 0.05    # [m] distances searched at the anchor (larger ones: this bound)

    def __init__(self):
        self.free_motion = None
        self._anchor = None      # (key, q (nq,), distance lower bound [m]) of a free q

    def anchor(self, constraint, key, q):
        """Remember a lower bound of every padded distance at q (nq,): the smallest one,
        capped at ``ANCHOR_SEARCH`` (nothing nearer than that: the cap is the bound)."""
        chain = constraint.model.chain
        if chain.has_ball_joints or not len(constraint.model.radii):
            return
        report = constraint.distances(chain.frames(q), search=(self.ANCHOR_SEARCH,))
        self._anchor = (key, q.copy(), min(float(report.distance[0]), self.ANCHOR_SEARCH))

    def near_anchor(self, constraint, key, q_from, q_to):
        """True when the anchor proves the motion free: every point of the straight motion
        is within |dq| <= max(|q_from - q_a|, |q_to - q_a|) per joint of the anchor q_a, so
        no cover point moves more than ``lever @ |dq|`` [m] from where it was at q_a, and no
        padded distance shrinks by more than twice that (both spheres of a self pair move):
        free when that is below the anchor's smallest distance (then every distance stays
        >= 0 and no sub-step of ``check_motion`` could be refused). Conservative: a False
        only means the full check decides."""
        state = self._anchor
        if state is None or state[0] != key or not state[2] > 0.0:
            return False
        q_a = state[1]
        dq = np.maximum(np.abs(q_from - q_a), np.abs(q_to - q_a))
        if not np.isfinite(dq).all():
            return False
        lever = constraint.lever
        moved = float((lever @ dq).max()) if len(lever) else 0.0
        return 2.0 * moved < state[2]

    def coarse_pass(self, constraint, key, q_from, q_to, coarse):
        """The coarse pass at ``coarse`` [m]: True when every coarse sub-step (ends included)
        is at least ``coarse - padding`` clear (then no point between comes closer than 0);
        False when one is not; None when there is no coarse pass (off, or the motion is so
        short that the fine pass is as cheap). A free pass anchors at q_to. Skipped (False)
        while the arm rests in contact (``allowances``: a pair within CONTACT_RELEASE at the
        reference, less than the coarse pass needs): it could not pass (docs/collision.md,
        section 4, has the cost it saves)."""
        if not coarse > constraint.padding or len(constraint.allowances()[0]):
            return False
        count, _ = constraint.motion_substeps(q_from, q_to, coarse)
        fine, _ = constraint.motion_substeps(q_from, q_to)
        if fine <= count + 1:          # the fine pass is as cheap
            return None
        s = np.arange(0, count + 1)[:, None] / count
        path = q_from[None] + s * (q_to - q_from)[None]
        margin = coarse - constraint.padding
        chain = constraint.model.chain
        report = constraint.distances(chain.frames(path), search=(margin,))
        if not np.all(report.distance >= margin):
            return False
        if not chain.has_ball_joints:
            self._anchor = (key, q_to.copy(), min(float(report.distance[-1]), margin))
        return True
