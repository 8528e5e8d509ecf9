"""The SMC refinement's fused kernels: LM steps on one pose target, row by row.

Records (``records``): the chain's bodies, columns, links and joints (``*Chain.records``);
``goal`` a pose goal (link index,
(4, 4) pose, weight, sigma_position [m], sigma_orientation [rad], the position and
orientation tolerances); ``lm`` the refinement's steps (steps, alphas (A,), damping,
max_step); ``motion`` the minimal-motion prior (``records.MOTION``). For chains without
ball joints (nq == nv) and one plain pose target (no covariance, no hard constraints).
"""

import math

import numpy as np

from .fk import _fk_row
from .jit import njit
from .lm import _chol_solve, _lm_row, lm_null_step, lm_spring_step
from .motion import _motion_d2, _motion_diff, blocked_joints
from .residuals import _pose_rj_row, _row_pose_errors, _row_work

__all__ = ['first_solution', 'refine_pose', 'refine_pose_motion']


@njit(cache=True, inline='always')
def _scale(goal):
    """Return the (6,) whitening of the pose residual: sqrt(weight) / sigma per row."""
    _, _, weight, sigma_p, sigma_o, _, _ = goal
    scale = np.empty(6)
    root = math.sqrt(weight)
    for r in range(3):
        scale[r] = root / sigma_p
        scale[r + 3] = root / sigma_o
    return scale


@njit(cache=True, inline='always')
def _goal_cost(goal, pe, oe):
    """Return the cost weight ((pe / sigma_p)^2 + (oe / sigma_o)^2) of pose errors."""
    _, _, weight, sigma_p, sigma_o, _, _ = goal
    return weight * ((pe / sigma_p) ** 2 + (oe / sigma_o) ** 2)


@njit(cache=True)
def refine_pose(bodies, columns, links, joints, goal, lm, q, cost):
    """Run the SMC refinement's LM steps on one pose target, each row on its own.

    The fused form of ``Refinement.move`` without motion prior, guard or hard constraints:
    per step, the whitened residual r and Jacobian J (rows times sqrt(weight) / sigma),
    lam = cost / 2 + damping, the LM step (again with the columns of the joints it pushes
    out of their limits removed), capped to max_step; the trials clip(q + alpha dv) for
    each alpha; the lowest-cost trial is taken when it lowers the cost weight
    ((p / sigma_p)^2 + (o / sigma_o)^2), else the row stops. q (K, nq) and cost (K,) are
    updated in place; returns improved (K,) bool.
    """
    steps, alphas, damping, max_step = lm
    lower, upper = joints[0], joints[1]
    link, target = goal[0], goal[1]
    body, off = links[0][link], links[1][link]
    scale = _scale(goal)
    k_count, nq = q.shape
    nv = nq
    n_alpha = alphas.shape[0]
    work = _row_work(bodies, nv)
    rot, pos, loc, t = work[0]
    res = np.empty(6)
    jac = np.zeros((1, 6, nv))
    jm = np.empty((6, nv))
    a = np.empty((6, 6))
    y = np.empty(6)
    dv = np.empty(nv)
    best_q = np.empty(nq)
    trial = np.empty(nq)
    blocked = np.zeros(nv, dtype=np.bool_)
    improved = np.zeros(k_count, dtype=np.bool_)
    for k in range(k_count):
        for _ in range(steps):
            _fk_row(bodies, q[k], rot, pos, 0, loc, t)
            jac[:] = 0.0
            _pose_rj_row(columns, rot, pos, 0, body, off, target, res, jac, work[1])
            for r in range(6):
                res[r] *= scale[r]
                for v in range(nv):
                    jm[r, v] = jac[0, r, v] * scale[r]
            lam = 0.5 * cost[k] + damping
            _lm_row(jm, res, lam, a, y, dv)
            any_blocked = False
            for v in range(nv):
                span = upper[v] - lower[v]
                eps = 1e-9 * (span if span > 1.0 else 1.0)
                blocked[v] = ((q[k, v] <= lower[v] + eps and dv[v] < 0.0)
                              or (q[k, v] >= upper[v] - eps and dv[v] > 0.0))
                any_blocked = any_blocked or blocked[v]
            if any_blocked:
                for r in range(6):
                    for v in range(nv):
                        if blocked[v]:
                            jm[r, v] = 0.0
                _lm_row(jm, res, lam, a, y, dv)
            biggest = 0.0
            for v in range(nv):
                biggest = max(biggest, abs(dv[v]))
            f = min(1.0, max_step / max(biggest, 1e-12))
            for v in range(nv):
                dv[v] *= f
            best = np.inf
            for j in range(n_alpha):
                for v in range(nv):
                    x = q[k, v] + alphas[j] * dv[v]
                    trial[v] = min(max(x, lower[v]), upper[v])
                pe, oe = _row_pose_errors(bodies, trial, body, off, target, work)
                c = _goal_cost(goal, pe, oe)
                if c != c:              # NaN: numpy's argmin picks the first one
                    best = c
                    break
                if c < best:
                    best = c
                    best_q[:] = trial
            if not best < cost[k]:
                break
            improved[k] = True
            cost[k] = best
            q[k] = best_q
    return improved


@njit(cache=True)
def first_solution(bodies, columns, links, joints, goal, lm, q):
    """Refine the rows of ``q`` (K, nq) one after another, each alone by ``refine_pose``'s LM
    steps, until one meets the goal's tolerance; return its index (-1: none did).

    The SMC ``solve``'s first stage (``SmcSolver._seed_stage``): row 0 is the seed, the others
    draws of the filter's proposal. q is updated in place (refined rows); rows after the
    returned one are untouched. Returns (index, position error [m], orientation error [rad])
    of that row (errors NaN when none).
    """
    link, target, _, _, _, pos_tol, ori_tol = goal
    body, off = links[0][link], links[1][link]
    work = _row_work(bodies, columns[6])
    cost = np.empty(1)
    for r in range(q.shape[0]):
        row = q[r:r + 1]
        pe, oe = _row_pose_errors(bodies, row[0], body, off, target, work)
        if pe <= pos_tol and oe <= ori_tol:
            return r, pe, oe
        cost[0] = _goal_cost(goal, pe, oe)
        refine_pose(bodies, columns, links, joints, goal, lm, row, cost)
        pe, oe = _row_pose_errors(bodies, row[0], body, off, target, work)
        if pe <= pos_tol and oe <= ori_tol:
            return r, pe, oe
    return -1, math.nan, math.nan


@njit(cache=True)
def refine_pose_motion(bodies, columns, links, joints, goal, lm, motion, q, cost, guard):
    """``Refinement.move`` with the minimal-motion prior on one pose target, row by row.

    The fused form for one plain ``PoseTarget`` without hard constraints: coarse rows take
    the LM step with the prior's spring, precise rows the task step plus shares (1, 1/4,
    1/16, 0) of the null-space pull, with the Gauss-Newton corrector on slides; the trial
    is picked as in ``move``. q (K, nq), cost (K,) and guard (K,; inf: none) are updated in
    place. Returns (improved (K,) bool, gained (K,) [rad^2]).
    """
    steps, alphas, damping, max_step = lm
    spring_w, spring_fade, tol_cost, gain, slide_min, precise_fraction, w, ref = motion
    lower, upper, _, _, cont, _, _, _ = joints
    link, target, weight, sigma_p, sigma_o, tol_p, tol_o = goal
    body, off = links[0][link], links[1][link]
    scale = _scale(goal)
    k_count, nq = q.shape
    nv = nq
    n_alpha = alphas.shape[0]
    n_trials = n_alpha + 1
    work = _row_work(bodies, nv)
    rot, pos, loc, t = work[0]
    res = np.empty(6)
    res1 = np.empty(6)
    jac = np.zeros((1, 6, nv))
    jac1 = np.zeros((1, 6, nv))
    jm = np.empty((1, 6, nv))
    jb = np.empty((1, 6, nv))
    r2 = np.empty((1, 6))
    one = np.empty(1)
    one_mu = np.empty(1)
    diff = np.empty((1, nv))
    diffb = np.empty((1, nv))
    d0 = np.empty((1, nv))
    dsum = np.empty((1, nv))
    winv2 = np.empty(nv)
    for v in range(nv):
        winv2[v] = 1.0 / (w[v] * w[v])
    tmpv = np.empty(nv)
    steps_k = np.empty((n_trials, nv))
    trials = np.empty((n_trials, nq))
    t_cost = np.empty(n_trials)
    t_pos = np.empty(n_trials)
    t_d2 = np.empty(n_trials)
    t_prec = np.zeros(n_trials, dtype=np.bool_)
    pull_share = np.array([1.0, 0.25, 0.0625, 0.0])
    a = np.empty((6, 6))
    y = np.empty(6)
    improved = np.zeros(k_count, dtype=np.bool_)
    gained = np.zeros(k_count)
    for k in range(k_count):
        # Start: distance to the reference and precision of the row.
        pe, oe = _row_pose_errors(bodies, q[k], body, off, target, work)
        precise = pe <= precise_fraction * tol_p and oe <= precise_fraction * tol_o
        dist2 = _motion_d2(q[k], ref, cont, w, tmpv)
        for _ in range(steps):
            _fk_row(bodies, q[k], rot, pos, 0, loc, t)
            jac[:] = 0.0
            _pose_rj_row(columns, rot, pos, 0, body, off, target, res, jac, work[1])
            for r in range(6):
                r2[0, r] = res[r] * scale[r]
                for v in range(nv):
                    jm[0, r, v] = jac[0, r, v] * scale[r]
            lam = 0.5 * cost[k] + damping
            one[0] = lam
            mu = spring_w * min(1.0, cost[k] / (spring_fade * tol_cost))
            one_mu[0] = mu
            _motion_diff(q[k], ref, cont, diff[0])
            if not precise:
                dv_c = lm_spring_step(jm, r2, one, one_mu, w, diff)
                found, mask = blocked_joints(joints, q[k:k + 1], dv_c)
                if found:
                    for r in range(6):
                        for v in range(nv):
                            jb[0, r, v] = 0.0 if mask[0, v] else jm[0, r, v]
                    for v in range(nv):
                        diffb[0, v] = 0.0 if mask[0, v] else diff[0, v]
                    dv_c = lm_spring_step(jb, r2, one, one_mu, w, diffb)
            else:
                dv_c = np.zeros((1, nv))
            for v in range(nv):
                d0[0, v] = gain * diff[0, v]
            dv_t, dv_p = lm_null_step(jm, r2, one, d0, winv2, damping)
            for v in range(nv):
                dsum[0, v] = dv_t[0, v] + dv_p[0, v]
            found, mask = blocked_joints(joints, q[k:k + 1], dsum)
            if found:
                for r in range(6):
                    for v in range(nv):
                        if mask[0, v]:
                            jm[0, r, v] = 0.0
                for v in range(nv):
                    if mask[0, v]:
                        d0[0, v] = 0.0
                dv_t, dv_p = lm_null_step(jm, r2, one, d0, winv2, damping)
            biggest = 0.0
            for v in range(nv):
                biggest = max(biggest, abs(dv_p[0, v]))
            f = min(1.0, max_step / max(biggest, 1e-12))
            pull_size = 0.0
            for v in range(nv):
                dv_p[0, v] *= f
                pull_size = max(pull_size, abs(dv_p[0, v]))
            for j in range(n_trials):
                for v in range(nv):
                    if precise:
                        steps_k[j, v] = dv_t[0, v] + pull_share[j] * dv_p[0, v]
                    elif j < n_alpha:
                        steps_k[j, v] = alphas[j] * dv_c[0, v]
                    else:
                        steps_k[j, v] = dv_t[0, v]
                big = 0.0
                for v in range(nv):
                    big = max(big, abs(steps_k[j, v]))
                fs = min(1.0, max_step / max(big, 1e-12))
                for v in range(nv):
                    x = q[k, v] + steps_k[j, v] * fs
                    trials[j, v] = min(max(x, lower[v]), upper[v])
            slide = precise and pull_size > slide_min
            for j in range(n_trials):
                if slide and j < 3:
                    # Gauss-Newton task correction with the step's Jacobian (jm, masked).
                    _fk_row(bodies, trials[j], rot, pos, 0, loc, t)
                    jac1[:] = 0.0
                    _pose_rj_row(columns, rot, pos, 0, body, off, target, res1, jac1, work[1])
                    for r in range(6):
                        res1[r] *= scale[r]
                    for i in range(6):
                        for jj in range(i + 1):
                            s = 0.0
                            for v in range(nv):
                                s += jm[0, i, v] * winv2[v] * jm[0, jj, v]
                            a[i, jj] = s
                        a[i, i] += damping
                    _chol_solve(a, res1, y)
                    for v in range(nv):
                        s = 0.0
                        for i in range(6):
                            s += jm[0, i, v] * winv2[v] * y[i]
                        x = trials[j, v] + (-s)
                        trials[j, v] = min(max(x, lower[v]), upper[v])
                pe, oe = _row_pose_errors(bodies, trials[j], body, off, target, work)
                c = weight * ((pe / sigma_p) ** 2 + (oe / sigma_o) ** 2)
                if not pe <= guard[k] + 1e-12:
                    c = np.inf
                t_cost[j] = c
                t_pos[j] = pe
                t_d2[j] = _motion_d2(trials[j], ref, cont, w, tmpv)
                t_prec[j] = (pe <= precise_fraction * tol_p and oe <= precise_fraction * tol_o
                             and math.isfinite(c))
            lowest_merit = 0
            lowest = 0
            nearest = -1
            best_merit = np.inf
            best_cost = np.inf
            best_d2 = np.inf
            for j in range(n_trials):
                m = t_cost[j] + mu * t_d2[j]
                if j == 0 or m < best_merit:
                    best_merit = m
                    lowest_merit = j
                if j == 0 or t_cost[j] < best_cost:
                    best_cost = t_cost[j]
                    lowest = j
                dj = t_d2[j] if t_prec[j] else np.inf
                if nearest < 0 or dj < best_d2:
                    best_d2 = dj
                    nearest = j
            moves_nearer = t_prec[nearest] and t_d2[nearest] < dist2 - 1e-12
            if precise:
                pick = nearest if moves_nearer else lowest
            else:
                pick = lowest_merit
            new_cost = t_cost[pick]
            if precise:
                ok = moves_nearer or (t_prec[pick] and new_cost < cost[k])
            else:
                ok = t_cost[pick] + mu * t_d2[pick] < cost[k] + mu * dist2
            if not ok:
                break
            improved[k] = True
            q[k] = trials[pick]
            cost[k] = new_cost
            gained[k] += dist2 - t_d2[pick]
            dist2 = t_d2[pick]
            precise = precise or t_prec[pick]
            if math.isfinite(guard[k]):
                guard[k] = t_pos[pick]
    return improved, gained
