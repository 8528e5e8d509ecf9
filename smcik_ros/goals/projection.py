"""Projection onto the hard constraints (issue 32, decision 4): one function that the SMC,
the gradient solvers and the command stream share.

The seed's rejection keeps an inequality (a particle inside the support polygon stays one)
but cannot hit an equality: a random walk leaves a planted foot by millimetres on every
draw. ``project`` moves configurations back onto them by Gauss-Newton steps:

- rows: every hard equality's residual (``Contact``, hard two-sided ``PlaneContact``, hard
  ``CenterOfMassLine``), each row divided by its ``tolerance`` (1 mm and 0.01 rad weigh
  alike), and the *violated* rows of the hard inequalities (``clearance`` < 0: the CoM
  polygon's edges it is outside of, a one-sided plane), which are pushed to a small
  clearance (an active set: a row that a step violates joins at the next iteration);
- the step: the minimal weighted joint change that zeroes the linearised rows, damped least
  squares dq = W^-1 A^T (A W^-1 A^T + lambda I)^-1 b, at most ``max_step`` per entry;
  lambda = ``damping`` (default ``DAMPING``, in squared tolerances per radian) leaves the
  well-conditioned directions alone and damps those in which a radian moves the rows by
  less than about a tolerance;
- joint limits: a joint that the step would carry beyond its limit is blocked (its column
  removed) and the step solved again; the result is clipped.

Configurations already within ``CONVERGED`` of their tolerances (and violating nothing)
are not touched. ``ok`` says whether each result keeps every hard constraint: equalities
within their tolerance, no inequality (nor any other hard constraint's ``violated``)
violated.
"""

import numpy as np

from ..errors import GoalError

__all__ = ['CONVERGED', 'INEQUALITY_SCALE', 'INEQUALITY_TARGET', 'KEPT_SHARE', 'project',
           'residual_share']

CONVERGED = 0.01          # a row within this fraction of its tolerance needs no step
# Undamped (1e-9 of the largest), a Unitree H1 answer 0.2 mm off its feet and pinned hand
# was projected by steps of 0.1-0.3 rad along a direction in which a radian moved the rows
# by 0.3 mm, each step leaving them farther off (up to 9 mm) than the one before, and was
# given up after 5: the commands then held the goal's hand 64 mm off its goal. Damped, it
# reaches them moving 0.03 rad. A direction of a metre's lever (1000 per radian) keeps
# its step to a millionth.
DAMPING = 1.0
# Share of its tolerance within which the SMC keeps each hard equality, and the command stream
# its commands (``control.base.HOLD``): particles beyond it are projected, refinement trials
# may not go beyond it (or beyond where they start). Within the whole tolerance, the filter
# used its slack: on Unitree H1 (a 4-DOF arm pinned, 5-DOF legs planted) an answer 0.56 of
# the tolerance off held the goal's elbow 1 mm from its goal, and the nearest configuration
# that keeps them exactly was 0.17-0.28 rad away and 188-237 mm from it; the commands,
# kept within this share, went there and the goal was missed (offline, 1 of 240 goals).
KEPT_SHARE = 0.25
INEQUALITY_SCALE = 0.001  # [m] an inequality row's unit (like a 1 mm tolerance)
INEQUALITY_TARGET = 1e-4  # [m] the clearance a violated inequality row is pushed to


def project(chain, q, constraints, iterations=5, tolerance=None, weights=None, max_step=0.5,
            damping=DAMPING):
    """Return (q, ok): configurations moved onto the hard constraints of ``constraints``.

    q: (nq,) or (N, nq) configurations; constraints: goal/constraint objects (soft ones are
    ignored; equalities must be anchored). iterations: Gauss-Newton steps at most.
    tolerance: None: each equality's own ``tolerance``; a number: one bound [m or rad] for
    every equality row. weights: (nv,) cost of each tangent entry's change (default 1:
    radians and metres alike). max_step [rad or m]: the largest entry of one step.
    damping: the steps' lambda (see the module doc; 0: the minimal-norm steps).
    Returns q of the input's shape and ok: bool, or (N,) bool.
    """
    arr = chain.check_configuration(q)
    single = arr.ndim == 1
    q2 = np.array(np.atleast_2d(arr), dtype=float)
    hard = [c for c in constraints or () if getattr(c, 'hard', False)]
    equalities = [c for c in hard if getattr(c, 'equality', False)]
    # Inequalities with clearance rows (``clearance(frames)``; the collision constraint's
    # ``clearance`` is a distance setting, not rows: it is kept by the rejection alone).
    inequalities = [c for c in hard
                    if not c.equality and callable(getattr(c, 'clearance', None))]
    w_inv = np.ones(chain.nv) if weights is None else 1.0 / _weights(weights, chain.nv)
    todo = np.arange(len(q2))
    if equalities or inequalities:
        for _ in range(int(iterations)):
            frames = chain.frames(q2[todo])
            A, b, done = _rows(frames, equalities, inequalities, tolerance)
            todo, A, b = todo[~done], A[~done], b[~done]
            if not len(todo):
                break
            q2[todo] = _step(chain, q2[todo], A, b, w_inv, max_step, damping)
    ok = _kept(chain.frames(q2), hard, tolerance)
    return (q2[0], bool(ok[0])) if single else (q2, ok)


def residual_share(frames, equalities):
    """Return (N,) the largest residual of ``equalities`` at ``frames`` as a share of its
    tolerance (0 without any)."""
    if not equalities:
        return np.zeros(len(frames))
    return np.max([np.abs(c.residual(frames) / c.tolerance).max(axis=1) for c in equalities],
                  axis=0)


def _weights(weights, nv):
    w = np.asarray(weights, dtype=float)
    if w.shape != (nv,) or not np.isfinite(w).all() or (w <= 0.0).any():
        raise GoalError(f'project: weights must be {nv} positive numbers (one per tangent '
                        f'entry); got {w.tolist()}')
    return w


def _rows(frames, equalities, inequalities, tolerance):
    """Return (A (N, m, nv), b (N, m), done (N,) bool): the whitened rows to zero and the
    configurations that need no step."""
    blocks_a, blocks_b = [], []
    worst = np.zeros(len(frames))
    for c in equalities:
        if hasattr(c, 'residual_jacobian'):
            r, jac = c.residual_jacobian(frames)
        else:
            r, jac = c.residual(frames), c.jacobian(frames)
        tol = c.tolerance if tolerance is None else np.full(r.shape[1], float(tolerance))
        blocks_a.append(jac / tol[:, None])
        blocks_b.append(-r / tol)
        worst = np.maximum(worst, np.abs(r / tol).max(axis=1))
    violated = np.zeros(len(frames), dtype=bool)
    for c in inequalities:
        clearance, jac = c.clearance(frames)
        bad = clearance < 0.0
        violated |= bad.any(axis=1)
        blocks_a.append(jac * (bad[..., None] / INEQUALITY_SCALE))
        blocks_b.append(np.where(bad, (INEQUALITY_TARGET - clearance) / INEQUALITY_SCALE, 0.0))
    done = (worst <= CONVERGED) & ~violated
    return np.concatenate(blocks_a, axis=1), np.concatenate(blocks_b, axis=1), done


def _solve(A, b, w_inv, damping):
    """Return the (N, nv) minimal W-weighted steps with A dq = b (damped least squares);
    w_inv (N, nv): inverse weights (0: a blocked entry)."""
    aw = A * w_inv[:, None, :]
    M = aw @ np.swapaxes(A, 1, 2)
    diag = np.einsum('nii->ni', M)
    lam = 1e-9 * diag.max(axis=1, keepdims=True) + damping + 1e-12
    M[:, np.arange(M.shape[1]), np.arange(M.shape[1])] += lam
    y = np.linalg.solve(M, b[..., None])
    return np.einsum('nmv,nm->nv', aw, y[..., 0])


def _step(chain, q, A, b, w_inv, max_step, damping):
    """Return q after one projection step, joints that would leave their limits blocked."""
    w = np.broadcast_to(w_inv, (len(q), chain.nv)).copy()
    sq, sv = chain.scalar_q, chain.scalar_v
    for _ in range(2):
        dq = _solve(A, b, w, damping)
        big = np.abs(dq).max(axis=1, keepdims=True)
        dq *= np.minimum(1.0, max_step / np.maximum(big, 1e-300))
        moved = q[:, sq] + dq[:, sv]
        out = ((moved < chain.lower[sq]) | (moved > chain.upper[sq])) & (w[:, sv] > 0.0)
        if not out.any():
            break
        w[:, sv] = np.where(out, 0.0, w[:, sv])
    return chain.clip(chain.integrate(q, dq))


def _kept(frames, hard, tolerance):
    """Return (N,) bool: every hard constraint kept at ``frames``."""
    ok = np.ones(len(frames), dtype=bool)
    for c in hard:
        if c.equality and tolerance is not None:
            ok &= np.abs(c.residual(frames)).max(axis=1) <= float(tolerance)
        else:
            ok &= ~np.asarray(c.violated(frames), dtype=bool)
    return ok
