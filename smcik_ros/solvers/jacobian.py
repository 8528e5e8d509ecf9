"""Jacobian IK: transpose, SVD pseudo-inverse, damped and singularity-robust least squares.

One iteration from configuration q (seed 004; seed 000 section 3, eqs. 5-6):

1. primary task: the targets (and any *hard* constraints) stacked by ``stack_terms``: the
   residual r (N = 1, K) and Jacobian J (K, nv), rows scaled by sqrt(weight) / sigma, so
   J is in "task sigmas per rad" and every method sees position and orientation in the
   same units as the SMC likelihood. The wanted task change is e = -gain * r and:

   - ``transpose``: dq = alpha J^T e, alpha = <e, J J^T e> / <J J^T e, J J^T e>
     (Buss' step length: the exact line minimum of the linearised error along J^T e);
   - ``pinv``: dq = J^+ e from the SVD, singular values below
     ``singular_value_cutoff * s_max`` treated as zero;
   - ``dls``: dq = J^T (J J^T + lambda^2 I)^-1 e, lambda = ``damping``;
   - ``sr``: the same with an adaptive lambda (Nakamura & Hanafusa 1986):
     lambda = sr_max_damping * (1 - m / sr_threshold)^2 when the measure m drops below
     ``sr_threshold`` and 0 above it; m is the smallest singular value, or the
     manipulability sqrt(det(J J^T)) taken to the power 1/rank (the geometric mean of the
     singular values) so that both measures have the unit of a singular value.

2. secondary task in the null space (seed 000 eq. 6): dq += (I - J^+ J) z with
   z = posture_gain (q_posture - q) + limit_gain * (-grad H_limits)
   + constraint_gain * (-J_c^+ r_c) for the soft constraints. The posture is
   ``chain.neutral_configuration()`` unless PosturePreference constraints are set (then
   their references and joint weights). H_limits = 1/2 sum max(0, m_i - d_i)^2 where d_i
   is joint i's distance to its nearer limit and m_i = limit_margin * range_i: zero in the
   middle of the range, a growing push away from a limit inside the margin.

3. step control: the step is scaled so that no joint moves more than ``max_step``; joints
   that would cross a limit are clamped at it and dropped from J (their motion is taken
   off e and the step is recomputed with the others, as in Baerlocher & Boulic's clamping
   loop), so the solver never keeps pushing into a limit and every iterate is in limits.

J is analytic (each term's ``jacobian``: for orientations the exact derivative of the
rotation-vector residual, J_l^-1(r) J_w) or, with ``finite_difference``, central
differences of the residuals over FK (seed 000 section 6.2 compared methods with
finite-difference Jacobians): column j = (r(q + h e_j) - r(q - h e_j)) / 2h, the 2 nv
configurations in one batched FK call, so orientation rows are differenced on the same
rotation-vector residual the analytic rows differentiate.
"""

from dataclasses import dataclass

import numpy as np

from ..goals import PosturePreference
from .base import LocalSettings, LocalSolver, check_choice, check_fields, register, stack_terms
from .inequality import check_damper_settings, constrained_step, inequality_constraints

__all__ = ['DescentSettings', 'JacobianSettings', 'JacobianSolver', 'METHODS',
           'finite_difference_jacobian', 'nullspace_projector', 'limit_push', 'limited_step',
           'pinv_step', 'random_free_configuration']

METHODS = ('transpose', 'pinv', 'dls', 'sr')
SR_MEASURES = ('singular_value', 'manipulability')


@dataclass(frozen=True)
class DescentSettings(LocalSettings):
    """What the Jacobian solver's iteration reads: the settings 'jacobian' and 'distance'
    share (field names are the ROS parameter names)."""

    gain: float = 1.0                    # fraction of the task error corrected per solve() step
    online_gain: float = 0.5             # the same for step() (online use): smoother motion
    max_step: float = 0.5                # [rad or m] largest joint change of one iteration
    singular_value_cutoff: float = 1e-4  # singular values < cutoff * largest count as zero
    limit_gain: float = 0.2              # null-space push out of the limit margins, per iteration
    limit_margin: float = 0.1            # share of each joint range where the limit cost acts
    collision_influence_distance: float = 0.05  # [m] d_i: pairs closer than this get a damper
    collision_security_distance: float = 0.002  # [m] d_s: the (padded) distance dampers keep
    collision_damper_gain: float = 0.5   # xi: share of the margin d - d_s closable per step

    def validate(self):
        super().validate()
        check_damper_settings(self)
        check_fields(self, '(0, 1]', 'gain', 'online_gain')
        check_fields(self, '> 0', 'max_step', note=' [rad or m]')
        check_fields(self, '[0, 1)', 'singular_value_cutoff')
        check_fields(self, '[0, 1]', 'limit_gain')
        check_fields(self, '[0, 0.5]', 'limit_margin', note=' (share of the joint range)')


@dataclass(frozen=True)
class JacobianSettings(DescentSettings):
    """Settings of the Jacobian IK solver.

    Damping values and singular-value thresholds are in the units of the weighted
    Jacobian: task sigmas (residual / sigma, e.g. 1 cm or 0.05 rad) per rad of joint motion.
    """

    method: str = 'dls'                  # 'transpose', 'pinv', 'dls' or 'sr'
    damping: float = 1.0                 # dls: lambda [task sigmas per rad]
    sr_threshold: float = 5.0            # sr: damping starts below this measure [sigmas/rad]
    sr_max_damping: float = 5.0          # sr: lambda at a singularity [sigmas/rad]
    sr_measure: str = 'singular_value'   # sr: 'singular_value' (smallest) or 'manipulability'
    posture_gain: float = 0.05           # null-space pull towards the posture, per iteration
    constraint_gain: float = 0.5         # share of the soft-constraint step taken per iteration
    finite_difference: bool = False      # J by central FK differences instead of analytic
    fd_step: float = 1e-6                # [rad or m] finite-difference step

    def validate(self):
        super().validate()
        check_choice(self, 'method', METHODS)
        check_choice(self, 'sr_measure', SR_MEASURES)
        check_fields(self, '>= 0', 'damping', 'sr_threshold', 'sr_max_damping',
                     note=' [task sigmas per rad]')
        check_fields(self, '[0, 1]', 'posture_gain', 'constraint_gain')
        check_fields(self, '(0, 0.01]', 'fd_step', note=' [rad or m]')


@register('jacobian')
class JacobianSolver(LocalSolver):
    """Jacobian-based IK with null-space secondary tasks (see the module docstring)."""

    Settings = JacobianSettings

    def _on_constraints_changed(self):
        postures = [c for c in self.constraints if isinstance(c, PosturePreference)]
        if not postures:
            postures = [PosturePreference(self.chain.neutral_configuration()).bind(self.chain)]
        self._postures = postures
        # Hard constraints that report distances (collision, keep-out) are inequalities with
        # velocity dampers (see solvers.inequality); other hard ones join the primary task.
        self._inequalities = inequality_constraints(self.constraints)
        self._hard = [c for c in self.constraints if c.hard and c not in self._inequalities]
        self._soft = [c for c in self.constraints
                      if not c.hard and not isinstance(c, PosturePreference)]

    def _restart(self):
        return random_free_configuration(self.chain, self._rng, self._inequalities)

    # ------------------------------------------------------------------ one iteration
    def _task(self, targets):
        """Return (|r|^2, (r (K,), J (K, nv))): the targets' and hard constraints' rows."""
        primary = list(targets) + self._hard
        if self.settings.finite_difference:
            r = stack_terms(primary, self._frames, with_jacobian=False)[0]
            jac = finite_difference_jacobian(self.chain, self._q, primary, self.settings.fd_step)
        else:
            r, jac = stack_terms(primary, self._frames)
            r, jac = r[0], jac[0]
        return float(r @ r), (r, jac)

    def _update(self, targets, task, online):
        """Return the next configuration: the primary step for task change -gain r with the
        secondary step in the null space (``limited_step``), projected on the inequality
        constraints (``constrained_step``)."""
        s, chain, q = self.settings, self.chain, self._q
        r, jac = task
        gain = s.online_gain if online else s.gain
        z = self._secondary(task, gain)
        dv = limited_step(chain, q, jac, -gain * r, z, s, self._method_step)
        if self._inequalities:
            dv, info = constrained_step(chain, q, dv, self._frames, self._inequalities, jac, s,
                                        s.max_step, motion=online)
            self.last_info.update(info)
        return chain.clip(chain.integrate(q, dv))

    def _method_step(self, jac, e, svd):
        """Return the primary step (nf,) for the free-column Jacobian ``jac`` (K, nf)."""
        s = self.settings
        u, sv, vt = svd
        if s.method == 'transpose':
            g = jac.T @ e
            jjte = jac @ g
            den = float(jjte @ jjte)
            alpha = float(e @ jjte) / den if den > 1e-300 else 0.0
            return alpha * g
        if s.method == 'pinv':
            return pinv_step(jac, e, svd, s.singular_value_cutoff)
        if sv.size == 0:
            return np.zeros(jac.shape[1])
        lam = s.damping if s.method == 'dls' else self._sr_damping(sv)
        inv = sv / (sv * sv + lam * lam) if lam > 0.0 else \
            np.where(sv > 1e-12 * sv[0], 1.0 / np.maximum(sv, 1e-300), 0.0)
        return vt.T @ (inv * (u.T @ e))

    def _sr_damping(self, sv):
        """Return Nakamura & Hanafusa's adaptive damping for singular values ``sv``."""
        s = self.settings
        if s.sr_measure == 'singular_value':
            measure = float(sv[-1])
        else:
            measure = float(np.exp(np.mean(np.log(np.maximum(sv, 1e-300)))))
        if measure >= s.sr_threshold:
            return 0.0
        return s.sr_max_damping * (1.0 - measure / s.sr_threshold) ** 2

    def _secondary(self, task, gain):
        """Return the (nv,) secondary step z: posture, joint-limit margins, soft constraints."""
        s, frames = self.settings, self._frames
        z = np.zeros(self.chain.nv)
        if s.posture_gain > 0.0:
            for p in self._postures:
                # -grad of 1/2 |r|^2 with r = w (q - q_ref): -w^2 (q - q_ref).
                z -= s.posture_gain * p.residual(frames)[0] * p._w
        z += limit_push(self.chain, self._q, s)
        if s.constraint_gain > 0.0 and self._soft:
            r, jac = stack_terms(self._soft, frames)
            r, jac = r[0], jac[0]
            if np.any(r != 0.0):
                z -= s.constraint_gain * (np.linalg.pinv(jac, rcond=1e-6) @ r)
        return z


# ---------------------------------------------------------------------- shared helpers
def random_free_configuration(chain, rng, constraints, tries=20):
    """Return a random in-limit configuration that violates none of ``constraints``.

    Up to ``tries`` draws in one batch; the first free one is returned (the last draw when
    none is free, so a restart always happens).
    """
    q = chain.random_configuration(rng, tries if constraints else 1)
    if not constraints:
        return q[0]
    frames = chain.frames(q)
    bad = np.zeros(len(q), dtype=bool)
    for c in constraints:
        bad |= c.violated(frames)
    free = np.flatnonzero(~bad)
    return q[free[0]] if len(free) else q[-1]


def limit_push(chain, q, settings):
    """Return limit_gain * -grad H (nv,), H = 1/2 sum max(0, m - d)^2 over the 1-DOF joints.

    q (nq,); d: a joint's distance to its lower (upper) limit [rad or m];
    m = limit_margin * (upper - lower). Zero in the middle of the range; inside a margin it
    points away from the limit, with size m - d (times ``limit_gain``).
    """
    push = np.zeros(chain.nv)
    sq = chain.scalar_q
    if settings.limit_gain > 0.0 and settings.limit_margin > 0.0 and len(sq):
        lower, upper, qs = chain.lower[sq], chain.upper[sq], q[sq]
        m = settings.limit_margin * (upper - lower)
        push[chain.scalar_v] = settings.limit_gain * (
            np.maximum(0.0, m - (qs - lower)) - np.maximum(0.0, m - (upper - qs)))
    return push


def pinv_step(jac, e, svd, cutoff):
    """Return J^+ e (nf,) for J (K, nf) from its SVD (u, sv, vt), singular values at or
    below ``cutoff * sv[0]`` treated as zero."""
    u, sv, vt = svd
    if sv.size == 0:
        return np.zeros(jac.shape[1])
    keep = sv > cutoff * sv[0]
    inv = np.where(keep, 1.0 / np.where(keep, sv, 1.0), 0.0)
    return vt.T @ (inv * (u.T @ e))


def nullspace_projector(vt, sv, cutoff):
    """Return I - V_r V_r^T (n, n): the projector onto the null space of J = U S V^T.

    vt: (r0, n) right singular vectors, sv: (r0,) singular values (descending); the rank
    counts singular values above ``cutoff * sv[0]``.
    """
    n = vt.shape[1]
    if sv.size == 0 or sv[0] <= 0.0:
        return np.eye(n)
    rank = int(np.count_nonzero(sv > max(cutoff, 1e-12) * sv[0]))
    vr = vt[:rank]
    return np.eye(n) - vr.T @ vr


def limited_step(chain, q, jac, e, z, settings, method_step):
    """Return the tangent step (nv,) for task change ``e`` with joint-limit clamping.

    jac: (K, nv) task Jacobian; e: (K,) wanted task change; z: (nv,) secondary step that is
    projected into the null space of the free columns of ``jac``; method_step(jac_f, e, svd)
    gives the primary step of the free columns. 1-DOF joints whose step would cross a limit
    are set exactly onto it and removed from the Jacobian (their motion is taken off e), and
    the step is recomputed, so a saturated joint never keeps pushing into its limit. The
    whole step is then scaled so that no entry exceeds ``settings.max_step``.
    """
    nv = chain.nv
    sq, sv_idx = chain.scalar_q, chain.scalar_v
    lower, upper = chain.lower[sq], chain.upper[sq]
    qs = q[sq]
    free = np.ones(nv, dtype=bool)
    fixed = np.zeros(nv)
    e_work = np.array(e, dtype=float)
    # Drop rows that carry no information (inactive inequality constraints).
    rows = np.any(jac != 0.0, axis=1) | (e_work != 0.0)
    jac = jac[rows]
    e_work = e_work[rows]
    dv = np.zeros(nv)
    for _ in range(len(sq) + 1):
        jf = jac[:, free]
        if jf.shape[0] and jf.shape[1]:
            u, sv, vt = np.linalg.svd(jf, full_matrices=False)
        else:
            u, sv, vt = (np.zeros((jf.shape[0], 0)), np.zeros(0), np.zeros((0, jf.shape[1])))
        primary = method_step(jf, e_work, (u, sv, vt))
        proj = nullspace_projector(vt, sv, settings.singular_value_cutoff)
        dv = fixed.copy()
        dv[free] += primary + proj @ z[free]
        biggest = np.max(np.abs(dv)) if nv else 0.0
        if biggest > settings.max_step:
            dv *= settings.max_step / biggest
        new = qs + dv[sv_idx]
        over = free[sv_idx] & ((new > upper) | (new < lower))
        if not over.any():
            break
        for k in np.flatnonzero(over):
            v = sv_idx[k]
            target = upper[k] if new[k] > upper[k] else lower[k]
            fixed[v] = target - qs[k]
            free[v] = False
            e_work = e_work - jac[:, v] * fixed[v]
    return dv


def finite_difference_jacobian(chain, q, terms, step=1e-6):
    """Return the (K, nv) weighted Jacobian of ``terms`` at q (nq,) by central FK differences.

    Column j is (r(q + h e_j) - r(q - h e_j)) / 2h, each term's residual evaluated on the
    forward kinematics of configurations moved by +-h along tangent direction j
    (``Chain.integrate``: exact for ball joints too), one batched FK call for all 2 nv of
    them. Rows are whitened like ``stack_terms`` (``term.whiten``). For orientation
    residuals, the rotation vector log(R R_target^T), this is d log / dq, the same quantity
    as the analytic rows (J_l^-1(r) J_w); it is only wrong within h of an orientation
    error of pi, where the rotation vector jumps.
    """
    nv = chain.nv
    q = np.asarray(q, dtype=float)
    steps = np.concatenate([np.eye(nv), -np.eye(nv)]) * step
    frames = chain.frames(chain.integrate(np.tile(q, (2 * nv, 1)), steps))
    blocks = []
    for t in terms:
        res = t.residual(frames)
        blocks.append(t.whiten(((res[:nv] - res[nv:]).T / (2.0 * step))[None])[0])
    return np.concatenate(blocks, axis=0)
