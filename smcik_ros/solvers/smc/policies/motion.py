"""Minimal motion: the random walk's prior made explicit (policy ``minimal_motion``).

The random walk of eq. 12 says the configuration stays where it is; online, with a target
that moves, that is the preference a robot arm needs to be explicit: among the solutions of
a goal, the one nearest where the arm is. ``MinimalMotion`` is the prior
``N(x_ref, Sigma_motion)`` around a reference configuration and what follows from it: a
factor of the weights, the proposal of re-seeded particles, the refinement's pull towards
the reference in the task's null space, the nearest particle within tolerance as the
estimate, and whole-turn (2 pi) mapping of joints whose range exceeds a turn.
"""

import copy

import numpy as np

from .... import kernels as _kernels
from ..filter import sample_qutem

__all__ = ['MinimalMotion']

TWO_PI = 2.0 * np.pi


class MinimalMotion:
    """The motion prior ``N(x_ref, Sigma_motion)`` and what follows from it.

    Metric: the tangent difference ``d(q) = x_ref - q`` per joint (wrapped into (-pi, pi]
    for continuous joints; ``Log(q^-1 x_ref)`` for ball joints) weighted by
    ``w_j = joint_noise / sigma_j``, the random walk's own per-joint noise relative to the
    revolute one (eq. 12's Sigma_x): 1 for every revolute joint at the defaults,
    ``joint_noise / prismatic_noise`` = 5 rad/m for prismatic joints. The distance is
    ``|w * d|_2`` [rad]; the prior's log-density is ``-(distance / motion_sigma)^2`` (no
    factor 1/2, like the likelihood of eq. 13).
    """

    def __init__(self, chain, settings, scalar_noise, ball_noise):
        self.chain = chain
        self.sigma = float(settings.motion_sigma)
        self.spring = 1.0 / (self.sigma * self.sigma)     # weight of d^2 in -log prior
        self.gain = float(settings.nullspace_gain)
        self.reseed_fraction = float(settings.reseed_fraction)
        self.max_redraws = int(settings.max_redraws)
        w = np.ones(chain.nv)
        sq, sv = chain.scalar_q, chain.scalar_v
        w[sv] = settings.joint_noise / np.asarray(scalar_noise, dtype=float)
        if chain.has_ball_joints:
            w[chain.ball_v_index] = settings.joint_noise / np.asarray(ball_noise, dtype=float)
        self.weights = w
        scalar_types = [t for t in chain.joint_types if t != 'ball']
        revolute = np.array([t in ('revolute', 'continuous') for t in scalar_types], dtype=bool)
        span = chain.upper[sq] - chain.lower[sq]
        # Joints that can take a whole turn inside their limits: mapped towards the reference.
        self._turn_cols = sq[revolute & (span > TWO_PI + 1e-9)]
        self._turn_limits = [(int(c), float(chain.lower[c]), float(chain.upper[c]))
                             for c in self._turn_cols]
        # The compiled distance and jump (the layout only: the weights are read at each call).
        self._k_motion = chain.records.joints
        self.reference = None
        self.turn_reference = None
        self.weighted = True        # the prior is a factor of the weights
        self.pulling = self.gain > 0.0   # the refinement pulls towards the reference

    def selection_only(self):
        """Return a copy that only chooses and maps (no weight factor, no pull): what
        ``solve`` uses, so its global search is the same as without minimal motion."""
        other = copy.copy(self)
        other.weighted = other.pulling = False
        return other

    @property
    def has_turns(self):
        """True when some joint's range exceeds 2 pi (whole turns are possible)."""
        return len(self._turn_cols) > 0

    def distance(self, q, ref=None):
        """Return the (N,) weighted joint distances [rad] of q (N, nq) from ``ref``."""
        return self._compiled(q, ref)[0]

    def jump(self, q, other):
        """Return the (N,) largest weighted joint differences [rad] between q and ``other``."""
        return self._compiled(q, other)[1]

    def _compiled(self, q, ref):
        """``kernels.motion_distances`` of q against ``ref`` (None: the reference)."""
        nq = self.chain.nq
        ref = self.reference if ref is None else ref
        weights = np.ascontiguousarray(self.weights, dtype=float)
        return _kernels.motion_distances(self._k_motion, _kernels.as_rows(q, nq),
                                         _kernels.as_rows(ref, nq)[0], weights)

    def log_prior(self, q=None, distance=None):
        """Return the (N,) log prior ``-(distance / motion_sigma)^2`` of configurations q
        (or of their ``distance`` from the reference, when already known)."""
        d = self.distance(q) if distance is None else distance
        return -(d * d) / (self.sigma * self.sigma)

    def map_turns(self, q, ref):
        """Return q (N, nq) with whole turns of the joints whose range exceeds 2 pi moved
        towards ``ref`` (nq,), staying inside the limits (same poses, shortest travel)."""
        cols = self._turn_cols
        if not len(cols):
            return q
        if len(q) == 1:
            # One row (solve()'s answer): the same arithmetic on Python floats, without ten
            # numpy calls on arrays of a few entries (~20 us -> ~3 us).
            row, target = q[0].tolist(), ref.tolist()
            for c, lo, hi in self._turn_limits:
                v = row[c]
                v = v + TWO_PI * round((target[c] - v) / TWO_PI)
                if v > hi:
                    v -= TWO_PI
                if v < lo:
                    v += TWO_PI
                row[c] = v
            return np.array([row])
        lower, upper = self.chain.lower[cols], self.chain.upper[cols]
        v = q[:, cols]
        v = v + TWO_PI * np.round((ref[cols] - v) / TWO_PI)
        v = np.where(v > upper, v - TWO_PI, v)
        v = np.where(v < lower, v + TWO_PI, v)
        out = q.copy()
        out[:, cols] = v
        return out

    def sample(self, count, rng, spread=1.0):
        """Return (count, nq) draws of the motion prior around the reference, in limits.

        1-DOF joints: Gaussian with std ``spread * motion_sigma / w_j``, redrawn at most
        ``max_redraws`` times when outside the limits, then clipped; ball joints: QuTem.
        """
        chain = self.chain
        ref = self.reference
        out = np.tile(ref, (count, 1))
        sq, sv = chain.scalar_q, chain.scalar_v
        sigma = self.sigma * spread
        if len(sq):
            std = sigma / self.weights[sv]
            lower, upper = chain.lower[sq], chain.upper[sq]
            cand = ref[sq] + rng.standard_normal((count, len(sq))) * std
            for _ in range(self.max_redraws):
                bad = (cand < lower) | (cand > upper)
                if not bad.any():
                    break
                rows, cols = np.nonzero(bad)
                cand[rows, cols] = ref[sq][cols] + rng.standard_normal(len(rows)) * std[cols]
            out[:, sq] = cand
        if chain.has_ball_joints:
            bq = chain.ball_q_index
            std = sigma / self.weights[chain.ball_v_index]
            out[:, bq] = sample_qutem(np.broadcast_to(ref[bq], (count,) + bq.shape),
                                      np.broadcast_to(std, (count,) + std.shape), rng)
        return chain.clip(out)

    def nearest(self, q, mask):
        """Return the index of the particle nearest the reference among ``mask`` (N,) bool."""
        idx = np.flatnonzero(mask)
        return int(idx[np.argmin(self.distance(q[idx]))])

    def choose(self, step):
        """Make the estimate the particle nearest the reference among those within
        tolerance (online; ``solve`` chooses its result itself)."""
        if step.ok.any():
            step.index = self.nearest(step.particles, step.ok)
