"""The solver's state around the command stream: the floating base and the hard equalities.

Pure numpy, no ROS. The commands are the URDF's joints, (C,) in ``limits.commanded`` order;
the solver's state q (nq,) adds the floating base when the chain has one (``chain.base_index``:
six joints, ``model.floating``). The base is never measured: it follows from the contacts and
the commanded joints, and is held when there are none (issue 32, decision 6).
``FigureState`` keeps it:

- ``state(q)``: the state of a command: the joints with the base *fitted*: with contacts
  (``goals.Contact``: a link keeps its anchored pose, a hard equality), the base pose that puts
  the contact links where they were anchored (exact for one contact; for several, the mean of
  the poses each implies, the projection then closes the loop); without, the held base
  (``base``: ``initial_base_pose`` at start, then the base of the last command).
- ``keep(q, v, dt, shaped)``: the shaped command projected onto the hard equalities
  (``goals.project``: the contacts, planes kept as equalities) on every tick, so that a
  straight joint-space step between two good configurations does not leave the closed loop of
  two planted feet by millimetres; the position limits kept, and returned only when the
  velocity and acceleration limits still hold on the projected command (None otherwise: the
  loop brakes instead and keeps that brake, or the largest share of its correction that the
  limits allow: ``share=True``); the contacts and the CoM polygon before the pinned tips,
  where the limits or the polygon cannot keep all of them.
- ``solver_terms(constraints)``: what the solver keeps besides the constraint set: with a
  floating base and no contact, a Contact that holds the base link where it is (so that the
  solver does not float the base away to reach a goal).
- ``anchor(q)``: contacts and support polygons without a pose of their own take it at the
  state of the command ``q`` (when they arrive while the arm is commanded, else at the first
  joint_states); ``violations(q)``: the hard constraints violated there (accepted with a
  warning: the guard then passes only motion that reduces the violation).

A fixed-base chain without equalities costs nothing here: ``state`` is the identity and
``keep`` returns the shaped command itself.
"""

from dataclasses import dataclass, replace

import numpy as np

from ..goals import CenterOfMassPolygon, Contact, project
from ..goals.projection import CONVERGED, DAMPING, KEPT_SHARE, residual_share
from ..rotations import matrix_to_quat
from .limits import commanded
from .shaping import ShapedCommand, bound_speed

__all__ = ['APPROACH', 'FigureState', 'FigureView', 'MARGIN', 'base_pose_list', 'figure_view',
           'held_arms', 'largest_share', 'pending']

# Share of the velocity and acceleration limits kept free for the projection while hard
# equalities are kept: the shaper plans within (1 - MARGIN) of them, so that the projection's
# small per-tick correction (second order in the step: ~0.5 % of the velocity at 1 rad/s,
# 100 Hz, on a 1 m leg) fits inside the real limits that the command is checked against.
MARGIN = 0.05

# A correction that breaks a joint's limits is projected again with those joints blocked
# (this cost per unit of change; 1 for the others) up to REROUTES times before the loop
# takes a share of it or brakes: a knee near its limit must not stop two planted feet from
# being kept (romeo: the feet 0.3 mm and the other hand 1.9 mm off while braking instead).
BLOCKED = 1e12
REROUTES = 2

# Share of their tolerances within which a share of a correction, or a rerouted correction,
# must keep the equalities to be taken; beyond, the contacts are kept first and the pinned
# tips slip (``keep``). Within the tolerance alone, Unitree H1's feet went 0.8 mm off (and
# once 2.3 mm) in the black box; within this share, 0.3 mm.
HOLD = KEPT_SHARE     # the share the SMC keeps its answers within, too

# Share of their tolerances that a share of the whole correction may leave the contacts
# off before the pinned tips slip (``keep``: the contacts and the CoM first). Each slip
# took the feet's correction through the floating base, which carries the held tips with
# it: at HOLD, Unitree H1's feet (5-DOF legs) came back from 0.6 mm while its held elbow
# went 21 mm off (offline, one goal; 15 mm in the other seed).
FIRST = 0.6

# With contacts, where the answer is farther than REACH [rad, largest joint] from the
# command, the shaper heads for the point REACH along the straight line to it, projected
# onto what the commands keep (``toward``), not for the answer itself: a straight
# joint-space line between two points of a closed loop leaves it at first order in its
# length, so each tick's step along the whole line needed a correction beyond the limits'
# room (docs/node.md). Where that point lies less than STALL * REACH from the command (the
# line runs across the loop), the answer itself.
REACH = 0.1
STALL = 0.3

# Share of the deceleration the shaper brakes onto its target with while commands are
# projected (``CommandShaper.approach``): the projection bends the stream's path by the
# loop's curvature times the speed squared, and at full deceleration Unitree H1's elbows
# entered their goals' tolerance at up to 107 mm/s and went up to 5.2 mm past (5 of 24
# goals; black box, arm); at half, at most 35 mm/s and none past, 0.3 s later (median).
APPROACH = 0.5


def largest_share(u0, d, low, high):
    """Return the largest t in [0, 1] with low <= u0 + t d <= high (each (n,)); u0 must hold
    (t = 0 always does)."""
    t = 1.0
    up, down = d > 0.0, d < 0.0
    if up.any():
        t = min(t, float(np.min((high[up] - u0[up]) / d[up])))
    if down.any():
        t = min(t, float(np.min((low[down] - u0[down]) / d[down])))
    return max(0.0, t)


def _mean_pose(poses):
    """Return the (4, 4) pose nearest the (K, 4, 4) ``poses``: the mean position, the rotation
    nearest the sum of the rotations (chordal mean, by SVD)."""
    out = np.eye(4)
    out[:3, 3] = poses[:, :3, 3].mean(axis=0)
    u, _, vt = np.linalg.svd(poses[:, :3, :3].sum(axis=0))
    if np.linalg.det(u @ vt) < 0.0:
        u[:, -1] = -u[:, -1]
    out[:3, :3] = u @ vt
    return out


class FigureState:
    """The floating base and the hard equalities of one control loop (see the module doc).

    chain: the Chain; limits: the command stream's JointLimits (the commanded joints);
    base: (4, 4) the base pose in the world frame at start (floating base only; default the
    identity); report: callable(level, key, text, interval=...) (default: discard).
    """

    def __init__(self, chain, limits, base=None, report=None):
        self.chain = chain
        self.limits = limits
        self.report = report or (lambda *args, **kwargs: None)
        self.floating = bool(getattr(chain, 'floating', False))
        self.index = commanded(chain)
        self.base = np.eye(4) if base is None else np.array(base, dtype=float)
        if self.floating:       # a pose beyond the base joints' limits: GoalError here
            chain.with_base(np.zeros(len(self.index)), self.base)
        self.equalities = []        # the set's hard equalities (contacts, planes)
        self.inequalities = []      # its hard inequalities with rows (``_keep_inside``)
        self.contacts = []          # the anchored Contacts among them (the base's fit)
        self.pins = []              # Contacts keeping tips that the goal leaves where they are
        self.frozen = None          # (C,) bool: joints serving pinned tips only (``pin_tips``)
        self.own = None             # (C,) bool: pinned tips' joints that serve nothing else
        self.kept = []              # what the command stream projects onto (``_update``)
        self._hold = None           # the Contact holding the base link (no contact set)
        self._checked = set()       # ids of constraints checked for a violation on arrival
        self._passive = None        # passive joints' values waiting for the next tick
        self._free = None           # ``_keep_inside``'s weights (the joints it may move)
        self._tips = []             # the tips of the goal (``pin_tips``): kept by it too
        self._followed = (None,) * 4   # shaper_limits's last (q, pins, limits, factors)
        self.projected = 0          # commands projected
        self.shared = 0             # commands that took a share of their correction only
        self.unconverged = 0        # projections that did not reach the tolerances
        self.slipped = 0            # commands that kept the contacts and let the pins slip

    # ------------------------------------------------------------------ the state
    @property
    def active(self):
        """True when commands are projected (hard equalities or pinned tips)."""
        return bool(self.kept)

    @property
    def binds(self):
        """True when some joint moves a link that the commands are projected onto (a planted
        foot, a pinned tip): a joint-space path then leaves it (no detour)."""
        return any(self.chain.moving(c.link).any() for c in self.kept
                   if getattr(c, 'link', None))

    def command(self, q):
        """Return the commanded joints (..., C) of states (..., nq)."""
        q = np.asarray(q, dtype=float)
        return q[..., self.index] if self.floating else q

    def state(self, q, base=None):
        """Return the state (nq,) or (N, nq) of commands q (C,) or (N, C): the joints with
        ``base`` (4, 4), by default the fitted base (see the module doc)."""
        if not self.floating:
            return np.asarray(q, dtype=float)
        q = np.asarray(q, dtype=float)
        if base is None:
            base = self.fit(q) if self.contacts else self.base
        return self.chain.with_base(q, base)

    def fit(self, q):
        """Return the base pose(s) (4, 4) or (N, 4, 4) that put the contact links of commands
        q (C,) or (N, C) where they were anchored (the held base without contacts)."""
        q = np.asarray(q, dtype=float)
        if not self.floating or not self.contacts:
            return self.base if q.ndim == 1 else np.broadcast_to(self.base, (len(q), 4, 4))
        frames = self.chain.frames(self.chain.with_base(q, np.eye(4)))
        implied = np.stack([c.pose @ np.linalg.inv(frames.link_pose(c.link))
                            for c in self.contacts], axis=1)              # (N, K, 4, 4)
        fitted = np.array([_mean_pose(row) for row in implied])
        return fitted[0] if q.ndim == 1 else fitted

    def set_base(self, base):
        """Note the base (4, 4) of the last command: held from there when no contact is set
        (the next ``solver_terms`` holds it there)."""
        self.base = np.array(base, dtype=float)

    # ------------------------------------------------------------------ constraints
    def set_constraints(self, constraints):
        """Take the hard equalities of the constraint set; return the extra terms the solver
        keeps (``solver_terms``)."""
        self.equalities = [c for c in constraints
                           if getattr(c, 'hard', False) and getattr(c, 'equality', False)]
        self.inequalities = [c for c in constraints if getattr(c, 'hard', False)
                             and not getattr(c, 'equality', False)
                             and callable(getattr(c, 'clearance', None))]
        self.contacts = [c for c in self.equalities
                         if isinstance(c, Contact) and getattr(c, 'anchored', True)]
        self._free = None
        terms = self.solver_terms()
        self._update()
        return terms

    def pin_tips(self, goal, previous, q, tolerances, reached=False):
        """Pin the tips that the new ``goal`` leaves as they were: each tip that holds, or
        keeps the very goal it had in ``previous``, and is within ``tolerances`` (position
        [m], orientation [rad]) of its target at the command q (C,), or whose ``previous``
        goal was ``reached`` (at some tick since it arrived), keeps its pose there (a Contact
        the commands are projected onto) until the next goal. A reached hand a hair past the
        tolerance when the other hand's goal came was free, and the whole-body answer for
        the other hand moved it 55 mm (Talos, black box, 50 particles). A straight
        joint-space step between two configurations that both keep a tip moves it by
        millimetres on the way (the torso turns, the other arm compensates): a goal for the
        left hand must not move the right one. A tip with fewer than six joints of its own
        (on no path of the goal's moved tips) keeps its position only (Unitree H1's 4-DOF
        arms: with its pose held too, the commands moved the held hand 4.5-5.1 mm and the
        CoM 1.1-3.7 mm past its margin in 2 of 4 seeds, offline); a link that a contact
        keeps is not pinned again (two sets of rows for one link, at poses that the drift
        of the commands sets apart)."""
        pins = []
        if goal is not None and len(goal.terms) > 1:
            frames = self.chain.frames(self.state(q))
            planted = {c.link for c in self.equalities if isinstance(c, Contact)}
            held = [goal.tips[k] is None or (previous is not None
                                             and previous.tips[k] is goal.tips[k])
                    for k in range(len(goal.terms))]
            moved = np.zeros(self.chain.nv, dtype=bool)
            for term, kept in zip(goal.terms, held):
                if not kept:
                    moved |= self.chain.moving(term.link)
            for term, kept in zip(goal.terms, held):
                if not kept or term.link in planted:
                    continue
                pos, ori = (float(e[0]) for e in term.errors(frames))
                if reached or (pos <= tolerances[0] and ori <= tolerances[1]):
                    # A pose needs six joints of the tip's own: a 4-DOF arm (Unitree H1)
                    # keeps its hand's position while the torso turns, not its pose.
                    own = np.count_nonzero(self.chain.moving(term.link) & ~moved)
                    pose = frames.link_pose(term.link)[0]
                    pins.append(Contact(term.link, pose=pose, position_only=own < 6)
                                .bind(self.chain))
        self.pins, self._free = pins, None
        self._tips = [term.link for term in goal.terms] if goal is not None else []
        self.frozen, self.own = (None, None) if self.floating else held_arms(
            self.chain, goal, pins, self.equalities)
        self._update()
        return pins

    def _update(self):
        """What the commands are projected onto: the set's equalities and the pinned tips;
        with a floating base and no contact among them, the base held too."""
        kept = self.equalities + self.pins
        if kept and self.floating and not any(isinstance(c, Contact) for c in self.equalities):
            kept.append(self._hold or self._base_hold())
        self.kept = kept

    def solver_terms(self):
        """Return [the Contact holding the base link] with a floating base and no contact,
        else []: the solver must not move a base that nothing else places."""
        if not self.floating or any(isinstance(c, Contact) for c in self.equalities):
            self._hold = None
            return []
        if self._hold is None:
            self._hold = self._base_hold()
        return [self._hold]

    def _base_hold(self):
        link = self.chain.floating_link
        return Contact(link, pose=self.base).bind(self.chain)

    def anchor(self, constraints, q):
        """Anchor the ``pending`` constraints at the state of the command q (C,); return
        them. The base is fitted to the contacts anchored before (held without)."""
        waiting = pending(constraints)
        if waiting:
            frames = self.chain.frames(self.state(q))
            for constraint in waiting:
                constraint.anchor(frames)
            self.contacts = [c for c in self.equalities
                             if isinstance(c, Contact) and c.anchored]
            self._free = None
            self._update()
        return waiting

    def arrivals(self, constraints, q):
        """Warn once for each hard constraint of ``constraints`` that is violated at the
        command q (C,) when first checked there (it arrived violated: accepted, and the guard
        passes only motion that reduces the violation); return those."""
        anchored = [c for c in constraints if getattr(c, 'anchored', True)]
        fresh = [c for c in anchored if id(c) not in self._checked]
        self._checked = {id(c) for c in anchored}
        violated = self.violations(fresh, q)
        for constraint in violated:
            self.report('warn', f'violated:{type(constraint).__name__}', (
                f'hard constraint {type(constraint).__name__} is violated where the arm is '
                'now: accepted; only motion that reduces the violation passes'))
        return violated

    def set_passive(self, values):
        """Take measured values {joint: value [rad or m]} of the passive (off-path) joints;
        the model's masses follow them at the next ``apply_passive`` (the control tick)."""
        self._passive = dict(values) if self._passive is None else {**self._passive, **values}

    def apply_passive(self):
        """Hand the passive joints' values that arrived to the model (``Chain.set_passive``)."""
        if self._passive is None:
            return
        values, self._passive = self._passive, None
        try:
            self.chain.set_passive(values)
        except Exception as exc:   # noqa: BLE001 - a bad value: reported, the masses stay
            self.report('warn', 'passive', f'passive joint values refused: {exc}')

    def violations(self, constraints, q):
        """Return the hard constraints of ``constraints`` violated at the command q (C,)."""
        hard = [c for c in constraints if getattr(c, 'hard', False)
                and getattr(c, 'anchored', True) and not hasattr(c, 'check_motion')]
        if not hard:
            return []
        frames = self.chain.frames(self.state(q))
        return [c for c in hard if bool(np.asarray(c.violated(frames))[0])]

    # ------------------------------------------------------------------ projection
    def shaper_limits(self, limits, q=None):
        """Return the limits the shaper plans within: ``limits`` less MARGIN while commands
        are projected onto contacts (room for the correction), else ``limits`` itself; at
        the command q (C,), with pinned tips on a fixed base, the joints they share with
        the goal's tips no faster than the pinned arms can follow (``_followed_share``)."""
        if not self.kept:
            return limits
        scaled = _scaled(limits, 1.0 - MARGIN)
        if q is None or self.floating or not self.pins:
            return scaled
        # Every tick with pins: at rest (the same command, pins and limits) the last factors.
        last_q, last_pins, last_limits, share = self._followed
        if last_pins is not self.pins or last_limits is not limits or \
                not np.array_equal(last_q, q):
            share = _followed_share(self.chain, q, self.pins, self._tips, scaled.velocity)
            self._followed = (np.array(q, dtype=float), self.pins, limits, share)
        return scaled if share is None else replace(scaled, velocity=scaled.velocity * share)

    def keep(self, q, v, dt, shaped, share=False, lead_box=None, answer=None):
        """Return (ShapedCommand, base (4, 4) or None) for the ``shaped`` command from the
        last command q, v (C,) over dt [s]: projected onto the hard equalities, within the
        position limits; None when the projected command breaks a velocity or acceleration
        limit (``share``: then the largest share of its correction that keeps them).
        lead_box: None or (lo, hi) (C,), the box around the measurement that the command
        must be able to stop in (``ArmMonitor.lead_box``), kept like the position limits.
        answer: None or the answer (C,) the command heads for (``on_manifold``): a shaped
        command that keeps everything within HOLD, crosses no polygon and is no farther off
        than the answer is taken as it is (``_as_near``)."""
        if not self.kept:
            return shaped, (self.base if self.floating else None)
        if not np.any(shaped.q != q) and _holds(self.chain.frames(self.state(
                q, self.base if self.floating else None)), self.kept):
            # At rest within HOLD (the command and its base, ``set_base``): nothing to
            # project. Projected again on every tick, Unitree H1's held commands crept at
            # 0.02 rad/s along a direction in which its 5-DOF legs barely move a foot's roll
            # residual of 2-5 % of the tolerance, and a hand went 23 mm off its reached goal
            # in 5 s while joint_states were stale (black box).
            return ShapedCommand(q.copy(), np.zeros_like(q), shaped.limited_by), \
                (self.base if self.floating else None)
        state = self.state(shaped.q)
        if answer is not None and _as_near(self, q, state, answer):
            return shaped, (self.chain.base_pose(state) if self.floating else None)
        best = self._within(q, v, dt, state, shaped, self.kept, lead_box)
        held = [c for c in self.kept if c not in self.pins]
        if self.pins and held and (not best[1] or best[3] < 1.0 and not _holds(
                self.chain.frames(self.state(self.limits.clip(
                    shaped.q + best[3] * (best[2] - shaped.q)))), held, FIRST)):
            # The contacts and the CoM first: where the pinned tips keep the projection
            # from reaching the CoM polygon, or the limits cannot keep both the contacts and
            # the pins this tick and the share of both corrections they allow would leave
            # the contacts beyond FIRST of their tolerances, the pins slip (the node's own
            # hold, taken back as the limits allow) and the contacts hold (Unitree H1: a pin
            # on a 4-DOF arm, the feet 1.2-4.4 mm off while the limits took a share of both
            # corrections).
            first = self._within(q, v, dt, state, shaped, held, lead_box)
            if first[1] and (first[3] > best[3] or not best[1]):
                self.slipped += 1
                best = first
        projected, ok, q_new, t = best
        if not ok:
            self.unconverged += 1
            self.report('warn', 'unconverged', (
                'the projection of this command did not reach the contacts, pinned tips and '
                'centre-of-mass polygon within their tolerances: commanded as near as it got'),
                interval=1.0)
        if t < 1.0:
            q_share = self.limits.clip(shaped.q + t * (q_new - shaped.q))
            # A share that keeps them within HOLD is taken, as they are kept at rest: a
            # pinned hand at rest 0.19 mm off its pin (within HOLD, so not corrected at rest)
            # on a near-singular arm needed more than the acceleration limit to correct in
            # one tick, each step towards the goal braked to rest, and TIAGo dual stood still
            # for the goal's 10 s (offline, 2 of 48 goals).
            if not share and not _holds(self.chain.frames(self.state(q_share)), self.kept):
                return None
            self.shared += 1
            q_new = q_share
            projected = self.state(q_new)
        self.projected += 1
        base = self.chain.base_pose(projected) if self.floating else None
        return ShapedCommand(q_new, (q_new - q) / dt, shaped.limited_by), base

    def _within(self, q, v, dt, state, shaped, kept, lead_box):
        """Return (state, ok, q_new, t): the ``shaped`` command (its ``state``) projected
        onto ``kept`` and the polygons it crosses, whether it reached them, its command and
        the largest share of its correction that the limits allow (``_correction_share``);
        joints whose limits the correction breaks are blocked and it is projected again, up
        to REROUTES times."""
        # A trim (the command already within HOLD of every tolerance) holds the goal's tips
        # where the shaped command has them, where it can (as the answer is projected,
        # ``on_manifold``): a trim of 0.02 mm of Unitree H1's feet took 0.0018 rad of both
        # hip yaws (a direction in which a radian barely moves the feet) and carried the
        # elbow 1-4 mm off the goal its answer reached, on every command that came near it
        # (black box).
        frames = self.chain.frames(state)
        tips = _tips_at(self.chain, self._tips, kept, frames) if _holds(frames, kept) else []
        for held in ([tips] if tips else []) + [[]]:     # with the tips, else without
            weights, best = None, None
            for _ in range(1 + REROUTES):
                # The rerouted steps undamped: blocking a knee braking onto its limit leaves
                # the leg near singular, where damped steps took ticks more to reach the feet
                # (25 of the 3600 ticks of test_base's straightening braked, against 2).
                projected, ok = project(self.chain, state, kept + held, weights=weights,
                                        damping=DAMPING if weights is None else 0.0)
                projected, inside = self._keep_inside(q, projected, kept, weights)
                q_new = self.limits.clip(self.command(projected))
                ok = ok and inside and (
                    weights is None or _holds(self.chain.frames(self.state(q_new)), kept))
                t, over = _correction_share(self.limits, q, v, dt, shaped, q_new, lead_box)
                if best is None or (ok and t > best[3]):
                    best = (projected, ok, q_new, t)
                if t >= 1.0 or not ok or not over.any() or self.chain.has_ball_joints:
                    break
                # The joints whose limits the correction breaks are blocked, the rest take it
                # (kept only when that projection reaches the equalities and needs less
                # share).
                weights = np.ones(self.chain.nv) if weights is None else weights
                weights[self.index[over] if self.floating else over] = BLOCKED
            if best[1]:
                break
        return best

    def _keep_inside(self, q, state, kept, weights=None):
        """Return (state, ok): the projected ``state`` (nq,) moved back inside the hard
        inequalities with rows (the CoM over its polygon) that it crosses and the last
        command q (C,) kept, and whether that correction reached them; where it cannot (the
        goal's tips held too, then without them), ``state`` as it came and False: a
        least-squares compromise between the contacts and the polygon broke both (Unitree
        H1: 5-DOF legs, a pin on a 4-DOF arm; its feet 1.4 mm off, counted as kept).

        The projection onto the contacts moves the CoM: with the guard judging the shaped
        command, it carried talos's CoM 0.05-0.1 mm a tick beyond its polygon's margin where
        a goal held it there (issue 32). The correction moves the joints that move the
        contacts and the goal's tips (the legs, the floating base, the hands' arms), and
        keeps the tips where the state has them: by the legs alone, talos's held hand went 8
        mm off its pin while the other hand reached out, and a hand whose goal held the CoM
        at the margin rested 4 mm off it (each tick's correction carried it back). Other
        joints are left out (the head; with every arm joint free and no tip kept, an arm
        joint took the correction near its position limit and the next command broke the
        acceleration limit stopping it). A constraint that q violates (it arrived violated,
        or a share of a correction left it out) is corrected only where the state goes
        deeper than q: a simple humanoid's CoM went on 0.06 mm beyond the margin for two
        commands after one ended out (the guard passes motion that reduces a violation,
        checked at samples)."""
        after = self.chain.frames(state)
        crossed = _crossed(self, q, after)
        if not crossed:
            return state, True
        tips = _tips_at(self.chain, self._tips, kept, after)
        if self._free is None:
            moves = np.any([self.chain.moving(c.link) for c in self.contacts + self.pins
                            + tips], axis=0)
            self._free = np.where(moves, 1.0, BLOCKED)
        free = self._free if weights is None else np.maximum(self._free, weights)
        inside, ok = project(self.chain, state, kept + tips + crossed, weights=free)
        if not ok and tips:
            inside, ok = project(self.chain, state, kept + crossed, weights=free)
        return (inside, True) if ok else (state, False)

    def keep_within(self, q, v, dt, shaped, brake, lead_box=None):
        """Return (shaped, base): ``keep`` of the shaped command (within ``lead_box``);
        where its projection would break a velocity or acceleration limit, the brake
        (``brake()`` -> ShapedCommand) instead, projected as far as the limits allow."""
        if not self.kept:
            return shaped, (self.base if self.floating else None)
        kept = self.keep(q, v, dt, shaped, lead_box=lead_box)
        if kept is None:
            self.report('warn', 'projection', (
                'keeping the contacts would break a velocity or acceleration limit on this '
                'command: braking instead, the contacts corrected as far as the limits allow'),
                interval=1.0)
            kept = self.keep(q, v, dt, brake(), share=True, lead_box=lead_box)
        return kept

    def toward(self, q, desired):
        """Return where the shaper heads from the command q (C,) for the answer ``desired``
        (C,) or None: with contacts, the point REACH along the line to it projected onto
        what the commands keep; the answer itself within REACH, where that projection fails
        or stalls, and without contacts (pinned tips alone: not shown to help there; on one
        TIAGo dual goal the commands braked at rest, its held arm near a singular wrist)."""
        if not self.contacts or desired is None:
            return desired
        d = desired - q
        span = float(np.max(np.abs(d)))
        if span <= REACH:
            return desired
        projected, ok = project(self.chain, self.state(q + d * (REACH / span)), self.kept)
        ahead = self.limits.clip(self.command(projected))
        if not ok or float(np.max(np.abs(ahead - q))) < STALL * REACH:
            return desired
        return ahead

    def on_manifold(self, q, at=None):
        """Return the command q (C,) projected onto what the commands keep (the solver's
        answer: the commands then reach it and rest there), inside the limits; the
        ``frozen`` joints at the command ``at`` (C,) when given, the pinned arms' other
        ``own`` joints started from it. With ``at`` and no such arms, an answer already
        within HOLD and inside its polygons is taken as it is."""
        if not self.kept:
            return q
        if self.frozen is not None and at is not None:
            q = np.where(self.frozen, at, q)        # an arm of its own: held (``held_arms``)
        if self.own is None and at is not None:
            # An answer within HOLD, inside its polygons, is where the commands may rest: taken
            # as it is. Projected to zero, Unitree H1's answers (kept within HOLD by the SMC,
            # pinned 4-DOF arm, 5-DOF legs) moved 0.08-0.14 rad and 96-166 mm off their goals,
            # and the commands stopped there (offline).
            frames = self.chain.frames(self.state(q))
            if _holds(frames, self.kept) and not _crossed(self, at, frames):
                return self.limits.clip(q)
        projected, ok = None, False
        if self.own is not None and at is not None:
            # A held arm below a torso that the goal moves follows the torso from where it
            # is: the jacobian and distance solvers' answers took TIAGo dual's held arm 0.8
            # rad along its null space (the hand kept), and each command towards that broke
            # a limit to keep the pin; the figure braked at rest for the goal's 10 s (black
            # box). Where that projection fails, the answer as it came.
            projected, ok = _with_tips(self.chain, self.state(np.where(self.own, at, q)),
                                       self.kept, self._tips)
        if not ok:
            projected, _ = _with_tips(self.chain, self.state(q), self.kept, self._tips)
        if at is not None:
            # Inside the CoM polygon as the commands are kept (``_keep_inside``): an answer
            # projected onto the contacts alone lay 0.4 mm beyond Unitree H1's margin, and
            # each command that came near it was pushed back inside, 1-4 mm off its goal,
            # again and again (black box).
            projected, _ = self._keep_inside(at, projected, self.kept)
        return self.limits.clip(self.command(projected))

    def status(self):
        """Return the counters of the projection (JSON-ready)."""
        return {'projected': self.projected, 'projection_shared': self.shared,
                'projection_unconverged': self.unconverged, 'pins_slipped': self.slipped}


def pending(constraints):
    """Return the constraints of a set that wait for a configuration to anchor at."""
    return [c for c in constraints if not getattr(c, 'anchored', True)]


def _as_near(figure, q, state, answer):
    """Return whether the shaped command of the FigureState ``figure`` (its ``state``),
    from the last command q, keeps what is kept within HOLD, is off it by no more than the
    ``answer`` (C,) it heads for (or CONVERGED, which a projection leaves as it is) and
    crosses no polygon; only within REACH of the answer, where the shaper heads for the
    answer itself (``toward``), and the cheaper checks first: a tick pays for them. Where the
    equalities are more than the joints can keep exactly (a pose pinned on a 4-DOF arm,
    5-DOF legs), the answer's projection and the command's settle on different compromises:
    each tick's projection took Unitree H1's command 0.0003 rad back from an answer 0.05
    rad off, as far as the shaper brought it nearer, and the elbow crept 2-3 mm short of
    its goal for the goal's 10 s (offline, 2 of 120 goals)."""
    if float(np.max(np.abs(answer - figure.command(state)))) > REACH:
        return False
    frames = figure.chain.frames(state)
    worst = _worst(frames, figure.kept)
    if worst > HOLD or worst > CONVERGED and worst > _worst(
            figure.chain.frames(figure.state(answer)), figure.kept):
        return False
    return not _crossed(figure, q, frames)


def _crossed(figure, q, after):
    """Return the hard inequalities with rows (the CoM over its polygon) of the FigureState
    ``figure`` that the state of ``after`` (Frames) crosses, or goes deeper into than the
    last command q (C,)."""
    ready = [c for c in figure.inequalities if getattr(c, 'anchored', True)]
    if not ready or not figure.contacts:
        return []
    crossed = [c for c in ready if bool(c.violated(after)[0])]
    if crossed:
        before = figure.chain.frames(figure.state(q))
        crossed = [c for c in crossed if not bool(c.violated(before)[0])
                   or _depth(c, after) > _depth(c, before)]
    return crossed


def _worst(frames, kept):
    """Return the largest residual of ``kept`` at ``frames`` (one configuration), in
    tolerances (0 for nothing kept)."""
    return float(residual_share(frames, kept)[0])


def _holds(frames, kept, share=HOLD):
    """Return whether ``frames`` (one configuration) keep ``kept`` within ``share`` of their
    tolerances."""
    return _worst(frames, kept) <= share


def _correction_share(lim, q, v, dt, shaped, q_new, lead_box=None):
    """Return (t, over) for the JointLimits ``lim``: the largest share t in [0, 1] of the
    correction q_new - shaped.q that keeps the velocity and acceleration limits from (q, v)
    over dt, and from which every joint can still brake inside its position limits (and
    ``lead_box``) at the shaper's deceleration (``bound_speed`` with (1 - MARGIN) of the
    acceleration limit): a correction that carried a joint towards its limit faster than
    that made a later command stop it beyond the acceleration limit (romeo, 1.41x and
    1.76x), and one that carries a held arm's joints away from a lagging measurement can
    put the command beyond max_lead of the arm (the likely cause of a 0.22 rad resync of
    TIAGo dual's held wrist on a first start). A shaped command that is itself faster than
    that (the shaper put the acceleration first) bounds it instead. over (C,) bool: the
    joints that the whole correction takes beyond those bounds."""
    lower, upper = lim.lower, lim.upper
    if lead_box is not None:
        lower, upper = np.maximum(lower, lead_box[0]), np.minimum(upper, lead_box[1])
    u0 = (shaped.q - q) / dt
    d = (q_new - shaped.q) / dt
    if not np.any(d):
        return 1.0, np.zeros(d.shape, dtype=bool)
    adt = lim.acceleration * dt
    low = np.maximum(-lim.velocity, v - adt)
    high = np.minimum(lim.velocity, v + adt)
    u0 = np.clip(u0, low, high)         # the shaped command holds them (rounding)
    brake = (1.0 - MARGIN) * lim.acceleration      # what the shaper brakes with next
    low = np.maximum(low, np.minimum(-bound_speed(q - lower, brake, dt), u0))
    high = np.minimum(high, np.maximum(bound_speed(upper - q, brake, dt), u0))
    full = u0 + d
    return largest_share(u0, d, low, high), (full > high) | (full < low)


FOLLOW_SHARE = 0.3      # of a pinned arm's velocity limits that following shared joints may take
SINGULAR_FLOOR = 1e-3   # [m or rad per rad or m] smaller singular values count as this
# Never slower than this share of their limits: the shaper synchronises every joint, so a
# shared joint slowed to 1 % slowed the whole figure's motion to 1 % (Alex, black box).
MIN_SHARE = 0.1


def _followed_share(chain, q, pins, tips, velocity):
    """Return (nv,) factors of the velocity limits ``velocity`` (nv,), or None (all 1): each
    joint that a pinned tip shares with a goal's tip (a torso) at the speed from which the
    pinned tip's own joints keep it with ``FOLLOW_SHARE`` of their velocity limits, to
    first order at q (the inverse of their Jacobian, its singular values floored), and at
    no less than ``MIN_SHARE`` of their own limits. Alex's held arm has a rank-5 wrist: the
    floored direction slowed its spine to 1 % of its limits, and every joint of the
    synchronised motion with it (0.025 rad/s: a 0.25 rad goal took 10 s). Leaving such
    directions out instead let TIAGo dual's lift run at full speed where its held arm is
    near singular, and keeping the pin broke the limits 193 times in one run (each a brake).

    Moved at full speed, TIAGo dual's torso lift made the held arm's wrist roll follow at
    its velocity limit near a singular pose; on irregular ticks the projection, capped by
    the limits, fell behind and the held hand went 2.5-3.6 mm off its pin (offline, 2 of 4
    seeds; 4-9 mm in the node). At 0.3 of the arm's limits: under 0.42 mm in 4 of 4, and
    PR2's torso goals reach as fast as before (issue 32 notes, session 13). Pins on arms
    with fewer own joints than the pin's rows are left out (they cannot follow)."""
    goal_path = np.zeros(chain.nv, dtype=bool)
    pinned = {pin.link for pin in pins}
    for link in tips:
        if link not in pinned:
            goal_path |= chain.moving(link)
    factor = np.ones(chain.nv)
    for pin in pins:
        path = chain.moving(pin.link)
        shared, own = path & goal_path, path & ~goal_path
        rows = 3 if pin.position_only else 6
        if not shared.any() or np.count_nonzero(own) < rows:
            continue
        jac = chain.jacobian(q, pin.link)[:rows]
        gain = follow_gain(jac[:, own], jac[:, shared])
        need = gain @ velocity[shared]      # (own,): their speeds at full shared speed
        share = float(np.min(FOLLOW_SHARE * velocity[own] / np.maximum(need, 1e-12)))
        factor[shared] = np.minimum(factor[shared], min(1.0, max(share, MIN_SHARE)))
    return None if np.all(factor == 1.0) else factor


def follow_gain(own, shared):
    """Return (own, shared) |d own / d shared|: the own joints' speeds per unit speed of
    each shared joint that keep a pinned tip, for own (k, n_own) and shared (k, n_shared)
    Jacobian columns (singular values of ``own`` floored at SINGULAR_FLOOR)."""
    u, sv, vt = np.linalg.svd(own, full_matrices=False)
    return np.abs(vt.T @ ((u.T @ shared) / np.maximum(sv, SINGULAR_FLOOR)[:, None]))


def _with_tips(chain, state, kept, tips):
    """Return (state, ok): ``state`` projected onto ``kept`` and the goal's other ``tips``
    (links) where it has them (projected onto a pin alone, a torso that the pinned arm
    shares moved, and the goal's hand with it: PR2, an answer 0.9 mm from the goal
    commanded 3.1-3.5 mm from it, for good); where both cannot be kept, onto ``kept``
    alone (ok False)."""
    held = _tips_at(chain, tips, kept, chain.frames(state))
    projected, ok = project(chain, state, kept + held)
    if held and not ok:
        projected, _ = project(chain, state, kept)
    return projected, ok


def _tips_at(chain, tips, kept, frames):
    """Return Contacts holding the ``tips`` (links) that nothing ``kept`` holds (pins,
    contacts) at their poses in the first configuration of ``frames``."""
    held = {c.link for c in kept if isinstance(c, Contact)}
    return [Contact(link, pose=frames.link_pose(link)[0]).bind(chain)
            for link in tips if link not in held]


def _depth(constraint, frames):
    """Return how far the first configuration of ``frames`` is outside ``constraint`` [m]."""
    return float(np.linalg.norm(constraint.residual(frames)[0]))


def held_arms(chain, goal, pins, equalities=()):
    """Return (frozen, own), (nv,) bool each or None: ``own``, the joints of the ``pins``'
    links that nothing else that ``goal``'s other terms or the ``equalities`` need moves
    (a dual arm's held arm, below a torso it may share); ``frozen``, those of the pins whose
    whole path is their own (one arm of a fixed-base dual arm). ``FigureState.on_manifold``
    holds those where they are, and starts the others there: the solver's answer drifts
    in that arm's null space, and commanding the drift made the projection pull the arm
    back every tick, at the acceleration bound, so that the whole robot braked for seconds
    (baxter, issue 32). Not for a floating base (it moves every tip)."""
    if not pins or chain.has_ball_joints:
        return None, None
    pinned = {pin.link for pin in pins}
    busy = np.zeros(chain.nv, dtype=bool)
    for link in [t.link for t in goal.terms if t.link not in pinned] + \
            [c.link for c in equalities if getattr(c, 'link', None)]:
        busy |= chain.moving(link)
    frozen = np.zeros(chain.nv, dtype=bool)
    own = np.zeros(chain.nv, dtype=bool)
    for link in pinned:
        path = chain.moving(link)
        own |= path & ~busy
        if not (path & busy).any():
            frozen |= path
    return (frozen if frozen.any() else None), (own if own.any() else None)


def _scaled(limits, factor):
    """Return JointLimits with the velocity and acceleration limits times ``factor``."""
    return replace(limits, velocity=limits.velocity * factor,
                   acceleration=limits.acceleration * factor)



@dataclass(frozen=True)
class FigureView:
    """The whole figure at one state, for the view and the health (JSON-ready lists).

    com: (3,) centre of mass [m] or None (no mass, or nothing that asks for it);
    com_margin: the smallest distance [m] of its projection inside a support polygon less
    its margin (negative: outside), None without one; polygons: [(hull (H, 2), region
    (R, 2))] [m]; contacts: [{'link', 'position_error' [m], 'orientation_error' [rad],
    'held'}] of the anchored Contacts; contact_poses: their anchored (4, 4) poses; ground:
    the height [m] the projection is drawn at (the lowest contact, else 0).
    """

    com: tuple = None
    com_margin: float = None
    polygons: tuple = ()
    contacts: tuple = ()
    contact_poses: tuple = ()
    ground: float = 0.0


def figure_view(chain, constraints, state, floating=False):
    """Return the FigureView of ``constraints`` at the solver state (nq,) (the centre of mass
    is shown with a support polygon, or with a floating base)."""
    contacts = [c for c in constraints if isinstance(c, Contact) and c.anchored]
    supports = [c for c in constraints if isinstance(c, CenterOfMassPolygon) and c.anchored]
    if not contacts and not supports and not floating:
        return FigureView()
    frames = chain.frames(state)
    rows, poses = [], []
    for c in contacts:
        pos, ori = (float(e[0]) for e in c.errors(frames))
        rows.append({'link': c.link, 'position_error': round(pos, 6),
                     'orientation_error': round(ori, 6),
                     'held': bool(not np.asarray(c.violated(frames))[0])})
        poses.append(c.pose)
    com = margin = None
    if chain.total_mass > 0.0:
        com = tuple(round(float(v), 6) for v in frames.center_of_mass()[0])
        if supports:
            margin = round(min(float(c.clearance(frames)[0].min()) + c.guard
                               for c in supports), 6)
    ground = min((float(p[2, 3]) for p in poses), default=0.0)
    return FigureView(com=com, com_margin=margin,
                      polygons=tuple((c.polygon, c.region) for c in supports),
                      contacts=tuple(rows), contact_poses=tuple(poses), ground=ground)


def base_pose_list(base):
    """Return the (4, 4) base pose as [x, y, z, qx, qy, qz, qw] (ROS order), rounded."""
    w, x, y, z = matrix_to_quat(np.asarray(base, dtype=float)[:3, :3])
    return [round(float(v), 6) for v in (*base[:3, 3], x, y, z, w)]
