"""Command shaping: the next joint command within position, velocity and acceleration limits.

Pure numpy, no ROS. One call per control tick: from the previous command ``q`` [rad or m],
its velocity ``v`` (what was published: ``(q_k - q_{k-1}) / dt_k``), the real elapsed time
``dt`` [s] since it and the solver's desired configuration, return the next command
``q + u dt`` and its velocity ``u``. Integrating exactly ``q_k = q_{k-1} + u_k dt_k`` makes the
velocities and accelerations a judge computes from the published positions and header stamps
the ones limited here, whatever the timer jitter.

One tick, three stages:

1. A desired velocity on the straight joint-space line to the desired configuration,
   ``u* = s e`` with ``e = desired - q`` and one path speed ``s`` [1/s] for every joint: the
   velocity limits, braking onto the desired configuration and braking inside the position
   limits (and the lead box) are all bounds on ``s``, so no joint is clipped on its own and
   the path does not bend. Braking uses the synchronized deceleration ``b_j = alpha |e_j|``
   with ``alpha = min_j a_j / |e_j|``, the rate at which all joints can slow down together.
2. The velocity change ``u* - v`` is scaled by one common factor so that no joint changes by
   more than ``a_j dt`` (the acceleration vector keeps its direction).
3. A per-joint safety net that holds on every tick by construction, in priority order:
   acceleration, velocity limit, position limits as a braking constraint, the lead box as a
   braking constraint. In steady operation it does not act (stage 1 already respects it);
   it acts when the situation changed under the command (the lead box moved, a new goal
   turned the line while the joints were moving).

Braking in discrete time, robust to jitter (``brake_speed``): moving ``w dt`` this tick and
then slowing by ``a h`` per later tick of any length ``h`` covers at most
``w dt + w^2 / (2 a)``, so a speed is allowed only when that fits in the distance left.
``sqrt(2 a d)`` alone ignores this tick's own motion and overshoots by a tick. A still target is
reached without overshoot; the last, tiny step lands exactly (``allowed_speed``: a landing
speed of at most ``LANDING a dt``, which the next tick can stop from if it is at least
``LANDING`` times as long).

A moving target (``desired_velocity``, from the solver's answers of consecutive ticks): braking
onto the target every tick makes a command lag a target moving at speed w by about
``w^2 / (2 a)`` (0.04 rad at 0.5 rad/s and 3 rad/s^2: 6 mm of tool error on a tracked circle). So
stage 1 plans relative to the target instead: ``u* = w + s (e - w dt)``, moving with the
target and closing the rest of the gap as for a still target, the sum scaled by one factor
into the velocity limits; stages 2 and 3 are unchanged, so every limit holds exactly as
before. A "velocity" of more than ``JUMP`` times a joint's limit is a jump (a new goal), not
a motion: no feed-forward then. When a moving target stops, the command overshoots by at most
its stopping distance and comes back; a still target is approached exactly as before
(time-optimal, no overshoot).

Joint limits and the continuous joints' coordinates: ``limits.py``.
"""

import math
from typing import NamedTuple

import numpy as np

__all__ = ['ShapedCommand', 'CommandShaper', 'brake_speed', 'allowed_speed', 'bound_speed',
           'LIMITERS', 'LANDING', 'JUMP', 'FOLLOW_GAP']

# What bounded a tick's command, most binding last (reported in ~/status as limited_by).
LIMITERS = ('none', 'target', 'velocity', 'acceleration', 'position_limit', 'lead', 'stop')

# Speeds up to LANDING * a dt are always allowed when the step does not pass the bound: from
# there the next tick can stop within the acceleration limit as long as it is at least
# LANDING times as long as this one (a tick at most 4x shorter than the one before). This
# lets the last, tiny step land exactly on a still target or limit instead of creeping.
LANDING = 0.25

# A desired configuration moving faster than JUMP times a joint's velocity limit jumped (a new
# goal, a branch change): no velocity feed-forward for it.
JUMP = 2.0

# [s] A target's velocity is taken from positions at most this far apart (and the solver
# stepper carries an answer on for at most this long): over a longer gap (a slow solver step,
# a low solver rate) a jump of the answer looked like a slow motion, and carrying it on for
# the next slow step took the demo arm's tool 23 mm past its goal (talos's hand 9 mm, its
# steps late under load).
FOLLOW_GAP = 0.1


class ShapedCommand(NamedTuple):
    """One shaped command: q (n,) [rad or m], v (n,) its velocity [rad/s or m/s] over the
    tick, limited_by: what bounded it (one of LIMITERS)."""

    q: np.ndarray
    v: np.ndarray
    limited_by: str


# Distances beyond this count as unbounded (continuous joints, no lead box) [rad or m].
_FAR = 1e12


def brake_speed(distance, accel, dt):
    """Return the largest speed w >= 0 that can still stop within ``distance``.

    Solves ``w dt + w^2 / (2 accel) = distance``: moving ``w dt`` during this tick of ``dt`` [s]
    and braking at ``accel`` afterwards, with ticks of any length, covers at most that much.
    distance: (...,) [rad or m], negative counts as 0, inf allowed (a very large speed);
    accel > 0 (broadcast). Returns an array of speeds [rad/s or m/s].
    """
    d = np.minimum(np.maximum(distance, 0.0), _FAR)
    a2d = 2.0 * accel * d
    adt = accel * dt
    # 2 a d / (sqrt(adt^2 + 2 a d) + adt): the same root without cancellation.
    return a2d / (np.sqrt(adt * adt + a2d) + adt)


def allowed_speed(distance, accel, dt):
    """Return the largest speed [unit/s] that can still stop within ``distance`` >= 0.

    ``brake_speed``, or ``min(distance / dt, LANDING accel dt)`` where that is larger: a step
    that lands on the bound (or short of it) slowly enough for the next tick to stop.
    """
    d = np.minimum(np.maximum(distance, 0.0), _FAR)
    return np.maximum(brake_speed(d, accel, dt), np.minimum(d / dt, LANDING * accel * dt))


def bound_speed(distance, accel, dt):
    """Return the signed speed limit towards a bound ``distance`` ahead (negative: behind).

    Inside (distance >= 0): allowed_speed. Outside: the bound acts as a target approached from
    behind, so the speed must be at most ``-allowed_speed(-distance)`` (move back towards it).
    """
    return np.copysign(allowed_speed(np.abs(distance), accel, dt), distance)


def _narrow(lo, hi, new_lo, new_hi):
    """Intersect [lo, hi] with [new_lo, new_hi] per joint; where they do not meet, keep the
    point of [lo, hi] nearest to the new interval (the earlier bounds have priority).
    Returns (lo, hi)."""
    out_lo = np.maximum(lo, new_lo)
    out_hi = np.minimum(hi, new_hi)
    empty = out_lo > out_hi
    if empty.any():
        above = new_lo > hi     # the new interval lies above [lo, hi]: take hi
        point = np.where(above, hi, lo)
        out_lo = np.where(empty, point, out_lo)
        out_hi = np.where(empty, point, out_hi)
    return out_lo, out_hi


class _Box(NamedTuple):
    """Where the command must be able to stop: the lead box (lead_lo, lead_hi (n,), None
    without one) and its intersection with the position limits (lo, hi (n,)) [rad or m]."""

    lead_lo: np.ndarray
    lead_hi: np.ndarray
    lo: np.ndarray
    hi: np.ndarray



class CommandShaper:
    """Per-tick limiter: synchronized, acceleration-limited, braking in time (see module doc).

    limits: JointLimits. Stateless apart from the limits: the caller keeps (q, v) of the last
    published command and passes the real elapsed ``dt`` of each tick.
    """

    def __init__(self, limits):
        self.limits = limits
        # Share of the deceleration it brakes onto a target with (1: time-optimal; the
        # control loop lowers it while commands are projected onto contacts, ``base``).
        self.approach = 1.0

    def step(self, q, v, dt, desired=None, lead_box=None, desired_velocity=None):
        """Return the ShapedCommand of the next tick.

        q, v: (n,) the last published command [rad or m] and its velocity [rad/s or m/s];
        dt: (float) real time since that command [s], > 0; desired: (n,) the configuration
        to move towards along the straight line (None: brake to a stop on the current line);
        lead_box: None or (lo (n,), hi (n,)): an extra box the command must be able to stop
        in (the lead bound around the latest measurement); desired_velocity: None or (n,)
        [rad/s or m/s] how fast ``desired`` itself moves (a tracked target): the approach is
        then planned relative to the moving target (see ``feedforward``), so a target moving
        within the limits is followed without the lag of braking onto it every tick.
        """
        q = np.asarray(q, dtype=float)
        v = np.asarray(v, dtype=float)
        if not (dt > 0.0 and math.isfinite(dt)):
            raise ValueError(f'dt must be a finite time > 0 [s]; got {dt!r}')
        box = self._boxes(lead_box)
        if desired is None:
            return self._shape(q, v, dt, None, None, box)
        desired = np.asarray(desired, dtype=float)
        ff = self.feedforward(desired_velocity)
        if ff is None and not v.any() and desired.shape == q.shape and (desired == q).all() \
                and (q >= box.lo).all() and (q <= box.hi).all():
            # At rest on a still target (a held goal): u* = 0, no velocity change, and inside
            # the position limits and the lead box every bound of stage 3 admits 0, so the
            # stages return u = +0.0 and 'target': the same command from about 12 numpy calls
            # instead of about 100 (test_command_shaping compares the two).
            q_new = self.limits.clip(q + 0.0)
            return ShapedCommand(q_new, (q_new - q) / dt, 'target')
        return self._shape(q, v, dt, desired, ff, box)

    def _boxes(self, lead_box):
        """Return the _Box of ``lead_box`` (None or (lo, hi) (n,) [rad or m])."""
        lim = self.limits
        if lead_box is None:
            return _Box(None, None, lim.lower, lim.upper)
        lead_lo, lead_hi = (np.asarray(b, dtype=float) for b in lead_box)
        return _Box(lead_lo, lead_hi, np.maximum(lim.lower, lead_lo),
                    np.minimum(lim.upper, lead_hi))

    def _shape(self, q, v, dt, desired, ff, box):
        """The three stages of ``step`` (module doc): q, v, desired (or None) float arrays,
        ff the target velocity to move with (``feedforward``) or None, box a _Box.
        Returns the ShapedCommand."""
        if desired is None:
            u_star, limited = np.zeros_like(q), 'stop'
        elif ff is not None:
            u_star, limited = self._with_moving_target(q, desired - q, ff, dt, box)
        else:
            u_star, limited = self._on_the_line(q, desired - q, dt, box)
        u, limited = self._within_acceleration(u_star, v, dt, limited)
        return self._safety_net(q, v, u, dt, box, limited)

    def _on_the_line(self, q, e, dt, box):
        """Stage 1 for a still target ``e`` = desired - q away: return (u*, limiter), the
        velocity u* = s e of one path speed s [1/s] for every joint, the largest that the
        velocity limits, braking onto the target and braking inside the box allow."""
        lim = self.limits
        abs_e = np.abs(e)
        moving = abs_e > 0.0
        if not moving.any():
            return np.zeros_like(q), 'target'
        inv = np.zeros_like(abs_e)
        inv[moving] = 1.0 / abs_e[moving]
        s_velocity = float(np.min(lim.velocity[moving] * inv[moving]))
        alpha = float(np.min(lim.acceleration[moving] * inv[moving]))   # path accel [1/s^2]
        s_target = float(allowed_speed(1.0, self.approach * alpha, dt))   # distance |e|
        sync_accel = alpha * abs_e[moving]                              # b_j <= a_j
        ahead = np.where(e > 0.0, box.hi - q, q - box.lo)[moving]
        s_box = allowed_speed(ahead, sync_accel, dt) * inv[moving]
        k = int(np.argmin(s_box))
        s = min(s_velocity, s_target, float(s_box[k]))
        if s == s_target:
            limited = 'target'
        elif s == s_velocity:
            limited = 'velocity'
        else:
            limited = self._box_limiter(box, np.flatnonzero(moving)[k], e)
        return s * e, limited

    def _with_moving_target(self, q, e, ff, dt, box):
        """Stage 1 relative to a target moving at ``ff`` (n,): return (u*, limiter), moving
        with it (its motion during this tick is ff dt) and closing the rest of the gap like
        a still target; the sum within the velocity limits (one common factor) and able to
        stop inside the box."""
        lim = self.limits
        a = lim.acceleration
        u_star = ff
        limited = 'target'
        gap = e - ff * dt
        abs_gap = np.abs(gap)
        closing = abs_gap > 0.0
        if closing.any():
            alpha = float(np.min(a[closing] / abs_gap[closing]))
            u_star = ff + float(allowed_speed(1.0, self.approach * alpha, dt)) * gap
        speed = np.abs(u_star) / lim.velocity
        if speed.max() > 1.0:
            u_star = u_star / speed.max()
            limited = 'velocity'
        # Able to stop inside the position limits and the lead box: a synchronized stop
        # from u slows joint j at b_j = |u_j| / T, T = max_k |u_k| / a_k (independent of
        # the scale of u), so scale u until each joint's speed towards its bound allows
        # braking at b_j within the distance left.
        speed = np.abs(u_star)
        going = speed > 0.0
        if going.any():
            stop_time = float(np.max(speed[going] / a[going]))
            ahead = np.where(u_star > 0.0, box.hi - q, q - box.lo)[going]
            cap = allowed_speed(ahead, speed[going] / stop_time, dt) / speed[going]
            k = int(np.argmin(cap))
            if cap[k] < 1.0:
                u_star = u_star * float(cap[k])
                limited = self._box_limiter(box, np.flatnonzero(going)[k], u_star)
        return u_star, limited

    def _box_limiter(self, box, j, direction):
        """Return 'lead' when joint j, moving along ``direction`` (n,), is bounded by the
        lead box rather than its position limit, else 'position_limit'."""
        lim = self.limits
        on_lead = box.lead_lo is not None and (
            (direction[j] > 0.0 and box.lead_hi[j] < lim.upper[j])
            or (direction[j] < 0.0 and box.lead_lo[j] > lim.lower[j]))
        return 'lead' if on_lead else 'position_limit'

    def _within_acceleration(self, u_star, v, dt, limited):
        """Stage 2: return (u, limiter), the velocity change u* - v scaled by one common
        factor so that no joint changes by more than a_j dt (its direction kept)."""
        adt = self.limits.acceleration * dt
        delta = u_star - v
        need = np.abs(delta)
        over = need > adt
        if not over.any():
            return u_star, limited
        scale = float(np.min(adt[over] / need[over]))
        return v + scale * delta, limited if limited == 'stop' else 'acceleration'

    def _safety_net(self, q, v, u, dt, box, limited):
        """Stage 3: return the ShapedCommand of u clamped per joint, in priority order, by
        the acceleration, the velocity limit, the position limits and the lead box as braking
        constraints (it acts only when the situation changed under the command)."""
        lim = self.limits
        a = lim.acceleration
        adt = a * dt
        lo, hi = v - adt, v + adt
        lo, hi = _narrow(lo, hi, -lim.velocity, lim.velocity)
        lo, hi = _narrow(lo, hi, -bound_speed(q - lim.lower, a, dt),
                         bound_speed(lim.upper - q, a, dt))
        if box.lead_lo is not None:
            lo, hi = _narrow(lo, hi, -bound_speed(q - box.lead_lo, a, dt),
                             bound_speed(box.lead_hi - q, a, dt))
        u_safe = np.minimum(np.maximum(u, lo), hi)
        if (np.abs(u_safe - u) > 1e-12 * (1.0 + np.abs(u))).any():
            limited = self._clamp_reason(q, u, u_safe, dt, box)
        q_new = lim.clip(q + u_safe * dt)
        return ShapedCommand(q_new, (q_new - q) / dt, limited)

    def feedforward(self, desired_velocity):
        """Return the target velocity (n,) the command may move with, or None.

        None when there is none to use: not given, not finite, zero, or faster than
        ``JUMP`` times a joint's velocity limit (a new goal or a branch change, not a motion
        the arm could follow: the command then brakes onto it as onto a still target).
        Otherwise the velocity, scaled down by one common factor to the velocity limits.
        A target that stops after moving costs at most its stopping distance
        ``v^2 / (2 a)`` of overshoot, taken back within the limits.
        """
        if desired_velocity is None:
            return None
        w = np.asarray(desired_velocity, dtype=float)
        if w.shape != (self.limits.n,) or not np.all(np.isfinite(w)) or not np.any(w):
            return None
        ratio = float(np.max(np.abs(w) / self.limits.velocity))
        if ratio > JUMP:
            return None
        return w / ratio if ratio > 1.0 else w

    def target_velocity(self, desired, previous, dt, previous_velocity=None):
        """Return the velocity (n,) of a target at ``desired`` that was at ``previous`` (n,)
        ``dt`` [s] earlier, or None when it cannot be followed as a motion: ``dt`` is over
        ``FOLLOW_GAP``, or its change of velocity since ``previous_velocity`` (n,) needs more
        than a joint's acceleration limit (a turn the arm cannot make: moving with it would
        overshoot and ring, so the command brakes onto it as onto a still target instead)."""
        if previous is None or not 0.0 < dt <= FOLLOW_GAP:
            return None
        w = (np.asarray(desired, dtype=float) - np.asarray(previous, dtype=float)) / dt
        if previous_velocity is not None and np.any(
                np.abs(w - previous_velocity) > self.limits.acceleration * dt):
            return None
        return w

    def brake(self, q, v, dt, lead_box=None):
        """Return the ShapedCommand that slows down on the current line (see ``step``)."""
        return self.step(q, v, dt, None, lead_box)

    def _clamp_reason(self, q, u, u_safe, dt, box):
        """Return what the safety net clamped the most: 'lead', 'velocity' or
        'position_limit'."""
        lim = self.limits
        a = lim.acceleration
        j = int(np.argmax(np.abs(u_safe - u)))
        if box.lead_lo is not None:
            up = bound_speed(box.lead_hi[j] - q[j], a[j], dt)
            down = -bound_speed(q[j] - box.lead_lo[j], a[j], dt)
            if (u_safe[j] <= up + 1e-12 and u[j] > up) or (
                    u_safe[j] >= down - 1e-12 and u[j] < down):
                return 'lead'
        if abs(u_safe[j]) >= lim.velocity[j] * (1.0 - 1e-12):
            return 'velocity'
        return 'position_limit'

    def stopping_point(self, q, v):
        """Return where a synchronized stop from (q, v) ends at the latest, (n,).

        Braking all joints together at the rate of the slowest to stop moves each by at most
        ``v_j T / 2`` with ``T = max_j |v_j| / a_j``, along the current velocity direction.
        """
        v = np.asarray(v, dtype=float)
        stop_time = float((np.abs(v) / self.limits.acceleration).max())
        return np.asarray(q, dtype=float) + 0.5 * stop_time * v

    def trapezoid_time(self, q_from, q_to):
        """Return the time-optimal time [s] of a synchronized straight-line move at rest.

        The path has speed limit min_j v_j / |e_j| and acceleration min_j a_j / |e_j| (in
        path units, distance 1): a trapezoid, or a triangle when the top speed is not
        reached. The benchmark and the tests compare the shaped moves with it.
        """
        e = np.abs(np.asarray(q_to, dtype=float) - np.asarray(q_from, dtype=float))
        moving = e > 0.0
        if not np.any(moving):
            return 0.0
        speed = float(np.min(self.limits.velocity[moving] / e[moving]))
        accel = float(np.min(self.limits.acceleration[moving] / e[moving]))
        if speed * speed / accel >= 1.0:          # triangle: top speed not reached
            return 2.0 * math.sqrt(1.0 / accel)
        return 1.0 / speed + speed / accel
