"""Inequality constraints for the gradient solvers: velocity dampers and a small QP.

Hard constraints that can report distances (``inequality_rows(frames, influence)``, e.g.
``collision.CollisionConstraint``) are not pushed into the primary task as equalities:
each pair closer than the influence distance d_i becomes a linear inequality on the step,

    J_d dq >= -xi (d - d_s) / (d_i - d_s)          (velocity damper, Faverjon & Tournassoud
                                                    1987; mink and pink use the same form)

so a distance d above the security distance d_s may shrink by at most the share xi of its
margin per iteration, and one below it must grow. The solver's step dq0 is then projected
onto these inequalities (and the joint limits, and the step bound) in the metric of the task:

    minimise (dq - dq0)^T H (dq - dq0),  H = J^T J + mu I,   s.t. A dq >= b

so the correction uses the task's null space first. The QP is a least-distance problem after
the change of variables y = L^T (dq - dq0) (H = L L^T), solved exactly by NNLS (Lawson &
Hanson, "Solving Least Squares Problems", ch. 23), small and dense. ``nnls`` is the book's
active-set algorithm in numpy, not ``scipy.optimize.nnls``: importing ``scipy.optimize``
takes from 0.15 s to over a second, and the first use is in the control tick (a detour's
first collision-constrained solve; docs/benchmarks.md measured the gap in the stream).

A step is then checked on the real constraint along the motion (``check_motion``: sub-steps
no cover point moves more than the padding between): if some sub-step violates it (a distance
below zero that got deeper than at the current iterate), the step is halved up to
``MAX_HALVINGS`` times, then refused (the iterate holds). So a runtime switch between
'smc', 'jacobian' and 'distance' keeps the guarantee. ``solve`` (a one-shot query: only its
answer is used, no iterate is commanded) checks each step's end configuration alone; ``step``
(online: every iterate may become a command) checks the whole motion.
"""

import numpy as np

from .base import _check, check_fields

__all__ = ['check_damper_settings', 'damper_rows', 'project_step', 'constrained_step',
           'inequality_constraints', 'nnls', 'MAX_HALVINGS']

MAX_HALVINGS = 4


def inequality_constraints(constraints):
    """Return the hard constraints that provide ``inequality_rows`` (collision and keep-out)."""
    return [c for c in constraints if c.hard and hasattr(c, 'inequality_rows')]


def check_damper_settings(settings):
    """Validate the damper fields of a solver's settings (jacobian, distance)."""
    check_fields(settings, '>= 0', 'collision_security_distance', note=' [m]')
    _check(settings.collision_influence_distance > settings.collision_security_distance,
           f'collision_influence_distance must be > collision_security_distance '
           f'({settings.collision_security_distance}) [m]; got '
           f'{settings.collision_influence_distance}')
    check_fields(settings, '(0, 1]', 'collision_damper_gain')


def damper_rows(constraints, frames, influence, security, gain):
    """Return (A (m, nv), b (m,), d (m,)) of the velocity dampers at ``frames`` (one row).

    influence d_i [m], security d_s [m], gain xi: rows J_d dq >= -xi (d - d_s) / (d_i - d_s)
    for every pair closer than d_i.
    """
    nv = frames.chain.nv
    blocks_a, blocks_d = [], []
    for c in constraints:
        d, jac = c.inequality_rows(frames, influence)
        if len(d):
            blocks_a.append(jac)
            blocks_d.append(d)
    if not blocks_a:
        return np.zeros((0, nv)), np.zeros(0), np.zeros(0)
    A = np.concatenate(blocks_a)
    d = np.concatenate(blocks_d)
    b = -gain * (d - security) / (influence - security)
    return A, b, d


def project_step(dq0, A, b, H=None, lower=None, upper=None):
    """Return the dq closest to dq0 in the H metric with A dq >= b and lower <= dq <= upper.

    dq0 (n,); A (m, n), b (m,); H (n, n) symmetric positive definite (default identity);
    lower, upper (n,) bounds (None: none; +-inf entries are skipped). Returns None when the
    constraints have no common solution.
    """
    n = len(dq0)
    rows, rhs = [np.asarray(A, dtype=float).reshape(-1, n)], [np.asarray(b, dtype=float)]
    eye = np.eye(n)
    if lower is not None:
        keep = np.isfinite(lower)
        rows.append(eye[keep])
        rhs.append(np.asarray(lower, dtype=float)[keep])
    if upper is not None:
        keep = np.isfinite(upper)
        rows.append(-eye[keep])
        rhs.append(-np.asarray(upper, dtype=float)[keep])
    G = np.concatenate(rows)
    h = np.concatenate(rhs)
    if not len(G):
        return np.array(dq0, dtype=float)
    residual = G @ dq0 - h
    if np.all(residual >= -1e-12):
        return np.array(dq0, dtype=float)
    if H is None:
        L_inv_t = eye
    else:
        L = np.linalg.cholesky(H)
        L_inv_t = np.linalg.inv(L).T                     # dq - dq0 = L^-T y
    Gy = G @ L_inv_t
    hy = h - G @ dq0
    # Least-distance programming: min |y| s.t. Gy y >= hy, via NNLS on [Gy^T; hy^T] u = e.
    scale = max(float(np.abs(Gy).max()), float(np.abs(hy).max()), 1e-12)
    E = np.vstack([Gy.T, hy[None, :]]) / scale
    f = np.zeros(n + 1)
    f[n] = 1.0 / scale
    u = nnls(E, f, maxiter=50 * (len(hy) + n + 1))
    if u is None:
        return None
    r = E @ u - f
    if abs(r[n]) < 1e-12 * max(1.0, np.abs(r).max()) or np.linalg.norm(r) < 1e-14:
        return None
    y = -r[:n] / r[n]
    dq = dq0 + L_inv_t @ y
    # NNLS is exact up to rounding; report infeasible if the result is clearly off.
    slack = G @ dq - h
    if np.min(slack) < -1e-6 * (1.0 + np.abs(h).max()):
        return None
    return dq


def nnls(A, b, maxiter=None):
    """Return x >= 0 minimising |A x - b| (A (m, n), b (m,)), or None when ``maxiter``
    (default 3 n) least-squares solves did not converge.

    Lawson & Hanson's active-set algorithm (NNLS, ch. 23): the variable with the largest
    gradient of the residual joins the passive (free) set, the least-squares solution on the
    passive set is taken where it stays positive, and otherwise the iterate moves towards it
    until a variable reaches zero and returns to the active (zero) set.
    """
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    m, n = A.shape
    maxiter = 3 * n if maxiter is None else int(maxiter)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10.0 * np.finfo(float).eps * max(m, n) * max(float(np.abs(A).sum(axis=0).max(
        initial=0.0)), 1.0)
    w = A.T @ b
    solves = 0
    skip = np.zeros(n, dtype=bool)      # rejected this round: its solve went non-positive
    while True:
        free = ~passive & ~skip
        if not free.any():
            return x
        j = int(np.argmax(np.where(free, w, -np.inf)))
        if w[j] <= tol:
            return x
        passive[j] = True
        first = True
        while True:
            solves += 1
            if solves > maxiter:
                return None
            idx = np.flatnonzero(passive)
            z = np.linalg.lstsq(A[:, idx], b, rcond=None)[0]
            if first and z[idx == j][0] <= tol:
                # Rounding: the variable that should enter cannot; try the next one.
                passive[j] = False
                skip[j] = True
                break
            first = False
            if np.all(z > tol):
                x[:] = 0.0
                x[idx] = z
                skip[:] = False
                break
            xi = x[idx]
            neg = z <= tol
            alpha = float(np.min(xi[neg] / (xi[neg] - z[neg])))
            x[idx] = xi + alpha * (z - xi)
            out = idx[x[idx] <= tol]
            passive[out] = False
            x[out] = 0.0
        w = A.T @ (b - A @ x)


def _motion_ok(constraint, q_from, q_to, motion=True):
    check = getattr(constraint, 'check_motion', None) if motion else None
    if check is not None:
        return check(q_from, q_to)[0]
    frames = constraint.model.chain.frames(q_to)
    return not bool(constraint.violated(frames, reference=q_from)[0])


def constrained_step(chain, q, dv0, frames, constraints, jac_task, settings, max_step,
                     motion=True):
    """Return (dv, info): the step dv0 projected on the dampers and checked on the constraints.

    q (nq,), frames: its Frames; jac_task (K, nv): the weighted primary-task Jacobian for the
    metric; settings: has collision_influence_distance, collision_security_distance,
    collision_damper_gain; max_step [rad or m]: bound on every entry of the step.
    motion: check the whole straight motion q -> q + dv in sub-steps (online use: the iterates
    are commands); False checks the end configuration only (a one-shot solve returns one
    configuration, not a path: 10-20 times cheaper with collision meshes).
    """
    info = {'inequality_rows': 0, 'step_scale': 1.0, 'refused': False}
    A, b, d = damper_rows(constraints, frames, settings.collision_influence_distance,
                          settings.collision_security_distance, settings.collision_damper_gain)
    info['inequality_rows'] = len(b)
    info['min_distance'] = float(d.min()) if len(d) else float('inf')
    nv = chain.nv
    lower = np.full(nv, -max_step)
    upper = np.full(nv, max_step)
    sv, sq = chain.scalar_v, chain.scalar_q
    lower[sv] = np.maximum(lower[sv], chain.lower[sq] - q[sq])
    upper[sv] = np.minimum(upper[sv], chain.upper[sq] - q[sq])
    lower = np.minimum(lower, 0.0)
    upper = np.maximum(upper, 0.0)
    dv = np.clip(dv0, lower, upper)
    if len(b):
        jtj = jac_task.T @ jac_task if jac_task is not None and len(jac_task) else \
            np.zeros((nv, nv))
        mu = 1e-3 * (np.trace(jtj) / nv if np.trace(jtj) > 0.0 else 1.0) + 1e-9
        projected = project_step(dv, A, b, jtj + mu * np.eye(nv), lower, upper)
        if projected is None:
            info['refused'] = True
            return np.zeros(nv), info
        dv = projected
    # Check the real constraint along the step (sub-steps as the command stream does: never
    # deeper than now, nothing crossed between iterates), or at its end only.
    scale = 1.0
    for _ in range(MAX_HALVINGS + 1):
        q_new = chain.clip(chain.integrate(q, scale * dv))
        if all(_motion_ok(c, q, q_new, motion) for c in constraints):
            info['step_scale'] = scale
            return scale * dv, info
        scale *= 0.5
    info['refused'] = True
    info['step_scale'] = 0.0
    return np.zeros(nv), info
