"""The SMC refinement: Levenberg-Marquardt move steps of a few particles, row by row.

One implementation of the move step (``solvers/smc/policies/refinement.py`` describes it):
``_trials`` writes a row's trial configurations and judges each (``_judge``), ``_pick`` picks
and ``_accept`` accepts one. ``refine`` runs every step of every row in here, for problems
whose terms the kernels evaluate: the targets (pose, position, orientation on any link, with
sigmas or a full covariance). A problem with other terms (constraints written in Python: the
collision model, the YAML constraints) runs the same functions one step at a time from
Python: ``begin``, then per step ``propose`` (with the other terms' whitened rows at the
row's configuration), Python adds their costs at the trials and the hard constraints'
verdicts, and ``choose`` judges, picks and accepts.

Records: the chain's bodies, columns and joints (``Chain.records``); ``targets``
(``records.TARGETS``); ``lm`` the steps (steps, alphas (A,), damping, max_step); ``motion``
the minimal-motion prior (``records.MOTION``; precise_fraction < 0: none, the plain LM
step). ``state``: per row (cost (K,), guard (K,; inf: none), precise (K,), dist2 (K,),
improved (K,), gained (K,), active (K,)), updated in place with q (K, nq).

Written for speed the way the fused kernels before it were: buffers allocated once per call
(``_workspace``), no array view per trial (1-D buffers are copied instead), and the scalar
joints' integration and clipping inline (ball joints through ``motion``'s helpers). Every
array a function binds (an argument, a record's field, each array of a tuple passed to an
inlined helper) costs a reference count, an atomic increment and decrement, wherever the
binding lives across a compiled call (``_fk_row``, ``_pose_rj_row``, an LM step): numba
cannot drop those counts past a call that may fail. So the loops over a step's trials run
inside one compiled call each (``_judge``, ``_moved``, ``_correct``), the records bound once
per step rather than per trial, and ``_judge`` gets only its buffers (``_judging``).
"""

import math

import numpy as np

from .fk import _fk_row
from .jit import njit
from .lm import _chol_solve, _lm_row, lm_null_step, lm_spring_step
from .motion import _clip_row, _integrate_row, _tangent_diff, blocked_joints
from .residuals import _pose_errors_row, _pose_rj_row, _position_rj_row, _row_work

__all__ = ['PULL_SHARES', 'begin', 'choose', 'first_solution', 'propose', 'refine',
           'state_of']

PULL_SHARES = np.array([1.0, 0.25, 0.0625, 0.0])    # precise rows: shares of the pull tried


@njit(cache=True)
def state_of(cost, guard):
    """Return a fresh state record for rows with costs (K,) and guards (K,)."""
    k_count = cost.shape[0]
    return (cost, guard, np.zeros(k_count, dtype=np.bool_), np.zeros(k_count),
            np.zeros(k_count, dtype=np.bool_), np.zeros(k_count),
            np.ones(k_count, dtype=np.bool_))


@njit(cache=True)
def _workspace(bodies, columns, targets, extra_rows, nq, count):
    """Return the buffers of one kernel call: (FK and pose work, res6 (6,), jac6 (1, 6, nv),
    r (1, m), jac (1, m, nv), a (m, m), y (m,), dv (1, nv), steps (count, nv), cand (nq,),
    diff (1, nv), tmp (nv,), blocked (nv,), r1 (m,), moved (1, nq)); m: the targets' rows
    and ``extra_rows``, count: the trials of a step."""
    nv = columns[6]
    m = targets[11] + extra_rows
    return (_row_work(bodies, nv), np.empty(6), np.zeros((1, 6, nv)), np.empty((1, m)),
            np.empty((1, m, nv)), np.empty((m, m)), np.empty(m), np.empty((1, nv)),
            np.empty((count, nv)), np.empty(nq), np.zeros((1, nv)), np.empty(nv),
            np.zeros(nv, dtype=np.bool_), np.empty(m), np.empty((1, nq)))


@njit(cache=True)
def _judging(ws):
    """Return the buffers ``_judge`` uses of the workspace ``ws``: (FK and pose work, res6,
    jac6, cand, tmp); it binds (counts) each array it gets once per call."""
    return ws[0], ws[1], ws[2], ws[9], ws[11]


@njit(cache=True)
def _judged(count):
    """Return the judgement of ``count`` trials: cost, position error, squared distance
    from the reference, precise, orientation error."""
    return (np.empty(count), np.empty(count), np.empty(count),
            np.zeros(count, dtype=np.bool_), np.empty(count))


# ---------------------------------------------------------------------------- the targets
@njit(cache=True, inline='always')
def _target_rj(columns, targets, i, rot, pos, work, res6, jac6):
    """Write target i's residual res6 (6,) and Jacobian jac6 (1, 6, nv) at the frames in row
    0 of rot, pos; return (lo, hi), the rows of its kind (a position target: 0-3, computed
    alone; an orientation target: 3-6)."""
    body, offset, kind, goal = targets[0], targets[1], targets[2], targets[3]
    jac6[:] = 0.0
    if kind[i] == 1:
        _position_rj_row(columns, rot, pos, 0, body[i], offset, i, goal, i, res6, jac6, work)
    else:
        _pose_rj_row(columns, rot, pos, 0, body[i], offset, i, goal, i, res6, jac6, work)
    return (3 if kind[i] == 2 else 0), (3 if kind[i] == 1 else 6)


@njit(cache=True, inline='always')
def _target_rows(columns, targets, rot, pos, work, res6, jac6, r, jac):
    """Write the targets' whitened residual rows r[0, :m] and Jacobian rows jac[0, :m] at
    the frames in row 0 of rot, pos."""
    body, _, _, _, whiten, full, _, _, _, _, _, _ = targets
    nv = jac.shape[2]
    m0 = 0
    for i in range(body.shape[0]):
        lo, hi = _target_rj(columns, targets, i, rot, pos, work, res6, jac6)
        for a in range(lo, hi):
            row = m0 + a - lo
            if full[i]:
                s = 0.0
                for b in range(lo, hi):
                    s += whiten[i, a, b] * res6[b]
                r[0, row] = s
                for v in range(nv):
                    s = 0.0
                    for b in range(lo, hi):
                        s += whiten[i, a, b] * jac6[0, b, v]
                    jac[0, row, v] = s
            else:
                scale = whiten[i, a, a]
                r[0, row] = res6[a] * scale
                for v in range(nv):
                    jac[0, row, v] = jac6[0, a, v] * scale
        m0 += hi - lo


@njit(cache=True, inline='always')
def _errors(targets, rot, pos, pose):
    """Return (cost, worst position error [m], worst orientation error [rad]) of the
    targets at the frames in row 0 of rot, pos (pose: ``_pose_work``'s arrays). Targets with
    a full covariance are left out of the cost (``_full_costs``)."""
    body, offset, kind, goal, _, full, weight, sigma_p, sigma_o, _, _, _ = targets
    cost, worst_p, worst_o = 0.0, 0.0, 0.0
    for i in range(body.shape[0]):
        pe, oe = _pose_errors_row(rot, pos, 0, body[i], offset, i, goal, i, pose)
        if kind[i] == 2:
            pe = 0.0
        if kind[i] == 1:
            oe = 0.0
        if not full[i]:
            cost += weight[i] * ((pe / sigma_p[i]) ** 2 + (oe / sigma_o[i]) ** 2)
        if pe > worst_p or pe != pe:        # a NaN error stays NaN
            worst_p = pe
        if oe > worst_o or oe != oe:
            worst_o = oe
    return cost, worst_p, worst_o


@njit(cache=True)
def _costs(bodies, columns, targets, qrow, ws):
    """Return (cost, worst position error, worst orientation error) of the targets at
    qrow, full covariances included (``_judge`` for many trials)."""
    frame, pose = ws[0]
    rot, pos, loc, t = frame
    _fk_row(bodies, qrow, rot, pos, 0, loc, t)
    c, pe, oe = _errors(targets, rot, pos, pose)
    if targets[5].any():
        c += _full_costs(columns, targets, rot, pos, pose, ws[1], ws[2])
    return c, pe, oe


@njit(cache=True)
def _full_costs(columns, targets, rot, pos, work, res6, jac6):
    """Return the summed cost |W r|^2 of the targets with a full covariance (0 if none)."""
    body, _, _, _, whiten, full, _, _, _, _, _, _ = targets
    cost = 0.0
    for i in range(body.shape[0]):
        if not full[i]:
            continue
        lo, hi = _target_rj(columns, targets, i, rot, pos, work, res6, jac6)
        for a in range(lo, hi):
            s = 0.0
            for b in range(lo, hi):
                s += whiten[i, a, b] * res6[b]
            cost += s * s
    return cost


# ---------------------------------------------------------------------------- one step
@njit(cache=True, inline='always')
def _cap(step, max_step):
    """Scale ``step`` (nv,) in place to at most ``max_step`` per joint."""
    biggest = 0.0
    for v in range(step.shape[0]):
        biggest = max(biggest, abs(step[v]))
    f = min(1.0, max_step / max(biggest, 1e-12))
    for v in range(step.shape[0]):
        step[v] *= f


@njit(cache=True, inline='always')
def _moved(joints, qrow, steps, count, out):
    """Write clip(integrate(qrow, steps[j])) into out[j] (nq,) for the first ``count`` steps
    (count, nv): inline for scalar joints, through ``motion``'s helpers for ball joints. All
    of a step's trials at once: the joints stay bound (counted) across those helpers' calls
    once per step, not once per trial."""
    if joints[5].shape[0]:
        for j in range(count):
            _integrate_row(joints, qrow, steps[j], out[j])
            _clip_row(joints, out[j])
        return
    lower, upper = joints[0], joints[1]
    for j in range(count):
        for v in range(qrow.shape[0]):
            x = qrow[v] + steps[j, v]
            out[j, v] = min(max(x, lower[v]), upper[v])


@njit(cache=True, inline='always')
def _blocked(joints, qrow, dv, blocked):
    """Flag in ``blocked`` (nv,) the 1-DOF joints at a limit that dv (nv,) pushes outwards;
    return whether any is."""
    lower, upper, sq, sv, _, _, _, _ = joints
    found = False
    for j in range(sq.shape[0]):
        c, v = sq[j], sv[j]
        span = upper[c] - lower[c]
        eps = 1e-9 * (span if span > 1.0 else 1.0)
        blocked[v] = ((qrow[c] <= lower[c] + eps and dv[v] < 0.0)
                      or (qrow[c] >= upper[c] - eps and dv[v] > 0.0))
        found = found or blocked[v]
    return found


@njit(cache=True, inline='always')
def _rows(bodies, columns, targets, extra_r, extra_j, qrow, ws):
    """Write the whitened rows of a row's step into ws's r (1, m) and jac (1, m, nv): the
    targets', then ``extra`` rows (another term's, linearised at qrow)."""
    work, res6, jac6, r, jac = ws[0], ws[1], ws[2], ws[3], ws[4]
    rot, pos, loc, t = work[0]
    _fk_row(bodies, qrow, rot, pos, 0, loc, t)
    _target_rows(columns, targets, rot, pos, work[1], res6, jac6, r, jac)
    m_t = targets[11]
    for i in range(extra_r.shape[0]):
        r[0, m_t + i] = extra_r[i]
        for v in range(jac.shape[2]):
            jac[0, m_t + i, v] = extra_j[i, v]


@njit(cache=True, inline='always')
def _plain_trials(bodies, columns, joints, targets, lm, qrow, cost, trials, ws):
    """Write the plain LM step's trials of a row (the step capped to max_step, at each
    alpha), the joints it pushes out of their limits left out of it."""
    _, alphas, damping, max_step, cost_damping = lm
    r, jac, a, y, dv, steps, blocked = ws[3], ws[4], ws[5], ws[6], ws[7][0], ws[8], ws[12]
    lam = cost_damping * cost + damping
    jm, rm = jac[0], r[0]
    _lm_row(jm, rm, lam, a, y, dv)
    if _blocked(joints, qrow, dv, blocked):
        for v in range(jm.shape[1]):
            if blocked[v]:
                for i in range(jm.shape[0]):
                    jm[i, v] = 0.0
        _lm_row(jm, rm, lam, a, y, dv)
    _cap(dv, max_step)
    for j in range(alphas.shape[0]):
        for v in range(dv.shape[0]):
            steps[j, v] = alphas[j] * dv[v]
    _moved(joints, qrow, steps, alphas.shape[0], trials)


@njit(cache=True, inline='always')
def _prior_trials(bodies, columns, joints, targets, lm, motion, extra, qrow, cost, precise,
                  trials, ws):
    """Write the trials of a row's step with the minimal-motion prior; return mu, the
    spring's weight. Coarse rows: the LM step with the prior's spring at each alpha, then
    the task step alone. Precise rows: the task step plus shares (PULL_SHARES) of the pull
    d0 = gain (x_ref - q) projected on the task's null space, each slide of more than
    slide_min corrected by one Gauss-Newton task step (the step's Jacobian reused). Each
    step capped to max_step; joints at a limit a step pushes outwards left out of it."""
    _, alphas, damping, max_step, cost_damping = lm
    spring_w, spring_fade, tol_cost, gain, slide_min, fraction, w, ref = motion
    r, jac, steps, diff = ws[3], ws[4], ws[8], ws[10]
    nq, nv = qrow.shape[0], jac.shape[2]
    lam = cost_damping * cost + damping
    one = np.full(1, lam)
    mu = spring_w * min(1.0, cost / (spring_fade * tol_cost))
    _tangent_diff(joints, qrow, ref, diff[0])
    n_alpha = alphas.shape[0]
    if not precise:
        dv_c = lm_spring_step(jac, r, one, np.full(1, mu), w, diff)
        found, mask = blocked_joints(joints, qrow.reshape(1, nq), dv_c)
        if found:
            jb = jac.copy()
            db = diff.copy()
            for v in range(nv):
                if mask[0, v]:
                    db[0, v] = 0.0
                    for i in range(jac.shape[1]):
                        jb[0, i, v] = 0.0
            dv_c = lm_spring_step(jb, r, one, np.full(1, mu), w, db)
        for j in range(n_alpha):
            for v in range(nv):
                steps[j, v] = alphas[j] * dv_c[0, v]
            _cap(steps[j], max_step)
    winv2 = np.empty(nv)
    d0 = np.empty((1, nv))
    for v in range(nv):
        winv2[v] = 1.0 / (w[v] * w[v])
        d0[0, v] = gain * diff[0, v]
    dv_t, dv_p = lm_null_step(jac, r, one, d0, winv2, damping)
    found, mask = blocked_joints(joints, qrow.reshape(1, nq), dv_t + dv_p)
    if found:
        for v in range(nv):
            if mask[0, v]:
                d0[0, v] = 0.0
                for i in range(jac.shape[1]):
                    jac[0, i, v] = 0.0
        dv_t, dv_p = lm_null_step(jac, r, one, d0, winv2, damping)
    _cap(dv_p[0], max_step)
    if not precise:         # the coarse row's last trial: the task step alone
        for v in range(nv):
            steps[n_alpha, v] = dv_t[0, v]
        _cap(steps[n_alpha], max_step)
        _moved(joints, qrow, steps, n_alpha + 1, trials)
        return mu
    pull = 0.0
    for v in range(nv):
        pull = max(pull, abs(dv_p[0, v]))
    for j in range(PULL_SHARES.shape[0]):
        for v in range(nv):
            steps[j, v] = dv_t[0, v] + PULL_SHARES[j] * dv_p[0, v]
        _cap(steps[j], max_step)
    _moved(joints, qrow, steps, PULL_SHARES.shape[0], trials)
    if pull > slide_min:
        _correct(bodies, columns, joints, targets, extra, qrow, winv2, damping, trials, ws)
    return mu


@njit(cache=True)
def _correct(bodies, columns, joints, targets, extra, qrow, winv2, damping, trials, ws):
    """One Gauss-Newton task step on each slide (the trials with a share of the pull > 0)
    with the step's Jacobian (ws's jac, as masked): a slide along a curved solution set
    leaves it by a second-order error, corrected here so long slides stay precise (another
    term's rows: linearised at qrow). One call for a step's slides, as ``_judge``."""
    extra_r, extra_j = extra
    work, res6, jac6, jac, a, y, step, cand, r1, moved = ws[0], ws[1], ws[2], ws[4], ws[5], \
        ws[6], ws[7], ws[9], ws[13], ws[14]
    m_t = targets[11]
    m, nv = jac.shape[1], jac.shape[2]
    rot, pos, loc, t = work[0]
    rows = r1.reshape(1, m)
    spare = np.empty((1, m_t, nv))
    dq = np.empty(nv)
    for k in range(PULL_SHARES.shape[0]):
        if PULL_SHARES[k] <= 0.0:
            continue
        for v in range(cand.shape[0]):
            cand[v] = trials[k, v]
        _fk_row(bodies, cand, rot, pos, 0, loc, t)
        _target_rows(columns, targets, rot, pos, work[1], res6, jac6, rows, spare)
        if extra_r.shape[0]:
            _tangent_diff(joints, qrow, cand, dq)        # cand - qrow in the tangent space
            for i in range(extra_r.shape[0]):
                s = extra_r[i]
                for v in range(nv):
                    s += extra_j[i, v] * dq[v]
                r1[m_t + i] = s
        for i in range(m):
            for j in range(i + 1):
                s = 0.0
                for v in range(nv):
                    s += jac[0, i, v] * winv2[v] * jac[0, j, v]
                a[i, j] = s
            a[i, i] += damping
        _chol_solve(a, r1, y)
        for v in range(nv):
            s = 0.0
            for i in range(m):
                s += jac[0, i, v] * winv2[v] * y[i]
            step[0, v] = -s
        _moved(joints, cand, step, 1, moved)
        for v in range(cand.shape[0]):
            trials[k, v] = moved[0, v]


@njit(cache=True)
def _judge(bodies, columns, joints, targets, motion, trials, extra_cost, guard, stop, judged,
           ws):
    """Judge the trials (T, nq), in order, into ``judged``: cost (targets + ``extra_cost``
    (T,), inf where the guard or a hard constraint refuses), position error, squared
    distance from the reference, precise, orientation error. Return how many were judged:
    all, or those up to the first that costs less than ``stop`` (-inf: none stops).

    One call judges a row's trials, not one: a call binds (one reference count each) the
    arrays of its records for as long as it runs past a compiled call (``_fk_row`` here),
    so the trials' loop runs in here."""
    fraction, w, ref = motion[5], motion[6], motion[7]
    any_full = targets[5].any()
    frame, pose = ws[0]
    rot, pos, loc, t = frame
    cand, tmp = ws[3], ws[4]
    t_cost, t_pos, t_d2, t_prec, t_ori = judged
    for j in range(trials.shape[0]):
        for v in range(cand.shape[0]):
            cand[v] = trials[j, v]
        _fk_row(bodies, cand, rot, pos, 0, loc, t)
        c, pe, oe = _errors(targets, rot, pos, pose)
        if any_full:
            c += _full_costs(columns, targets, rot, pos, pose, ws[1], ws[2])
        c += extra_cost[j]
        if not pe <= guard + 1e-12:
            c = np.inf
        t_cost[j] = c
        t_pos[j] = pe
        t_ori[j] = oe
        if fraction < 0.0:
            t_d2[j] = 0.0
            t_prec[j] = False
        else:
            _tangent_diff(joints, cand, ref, tmp)
            s = 0.0
            for v in range(tmp.shape[0]):
                x = tmp[v] * w[v]
                s += x * x
            t_d2[j] = math.sqrt(s) ** 2     # MinimalMotion.distance squared, in its arithmetic
            t_prec[j] = pe <= fraction * targets[9] and oe <= fraction * targets[10] \
                and math.isfinite(c)
        if c < stop:
            return j + 1
    return trials.shape[0]


@njit(cache=True, inline='always')
def _pick(plain, precise, cost, dist2, mu, count, judged):
    """Return the trial to accept, or -1. Plain and coarse rows: the lowest cost (with the
    prior: cost + mu d2), if lower than the row's. Precise rows: the nearest trial that stays
    precise if it is nearer, else the lowest cost if precise and lower."""
    t_cost, _, t_d2, t_prec, _ = judged
    lowest, lowest_merit, nearest = 0, 0, -1
    best_cost, best_merit, best_d2 = np.inf, np.inf, np.inf
    for j in range(count):
        m = t_cost[j] + mu * t_d2[j]
        if j == 0 or m < best_merit:
            best_merit, lowest_merit = m, j
        if j == 0 or t_cost[j] < best_cost:
            best_cost, lowest = t_cost[j], j
        dj = t_d2[j] if t_prec[j] else np.inf
        if nearest < 0 or dj < best_d2:
            best_d2, nearest = dj, j
    if plain:
        return lowest if t_cost[lowest] < cost else -1
    if precise:
        if t_prec[nearest] and t_d2[nearest] < dist2 - 1e-12:
            return nearest
        return lowest if (t_prec[lowest] and t_cost[lowest] < cost) else -1
    return lowest_merit if t_cost[lowest_merit] + mu * t_d2[lowest_merit] < \
        cost + mu * dist2 else -1


@njit(cache=True, inline='always')
def _accept(k, pick, q, state, trials, judged):
    """Move row k to its trial ``pick``; stop the row when none was accepted."""
    cost, guard, precise, dist2, improved, gained, active = state
    t_cost, t_pos, t_d2, t_prec, _ = judged
    if pick < 0:
        active[k] = False
        return
    improved[k] = True
    for v in range(q.shape[1]):
        q[k, v] = trials[pick, v]
    cost[k] = t_cost[pick]
    gained[k] += dist2[k] - t_d2[pick]
    dist2[k] = t_d2[pick]
    precise[k] = precise[k] or t_prec[pick]
    if math.isfinite(guard[k]):
        guard[k] = t_pos[pick]


@njit(cache=True)
def _trials(bodies, columns, joints, targets, lm, motion, extra, qrow, cost, precise,
            trials, ws):
    """Write a row's trials for one step (its rows first); return (their count, mu)."""
    _rows(bodies, columns, targets, extra[0], extra[1], qrow, ws)
    if motion[5] < 0.0:
        _plain_trials(bodies, columns, joints, targets, lm, qrow, cost, trials, ws)
        return lm[1].shape[0], 0.0
    mu = _prior_trials(bodies, columns, joints, targets, lm, motion, extra, qrow, cost,
                       precise, trials, ws)
    return lm[1].shape[0] + 1, mu


# ---------------------------------------------------------------------------- the kernels
@njit(cache=True)
def begin(bodies, columns, joints, targets, lm, motion, q, state):
    """Set the rows' precise flags and squared distances from the reference (before the
    first step: ``refine`` does it, the stepwise form calls it)."""
    fraction = motion[5]
    if fraction < 0.0:
        return
    _, _, precise, dist2, _, _, _ = state
    ws = _workspace(bodies, columns, targets, 0, q.shape[1], 0)
    k_count = q.shape[0]
    judged = _judged(k_count)
    _judge(bodies, columns, joints, targets, motion, q, np.zeros(k_count), np.inf, -np.inf,
           judged, _judging(ws))
    precise[:] = judged[3]
    dist2[:] = judged[2]


@njit(cache=True)
def refine(bodies, columns, joints, targets, lm, motion, q, state):
    """Run every step of the refinement on the rows of q (K, nq), each on its own, for a
    problem of targets alone; q and ``state`` are updated in place."""
    plain = motion[5] < 0.0
    count = lm[1].shape[0] + (0 if plain else 1)
    ws = _workspace(bodies, columns, targets, 0, q.shape[1], count)
    trials, judged, jw = np.empty((count, q.shape[1])), _judged(count), _judging(ws)
    none = (np.empty(0), np.empty((0, ws[7].shape[1])))
    no_cost = np.zeros(count)
    cost, guard, precise, dist2, _, _, active = state
    begin(bodies, columns, joints, targets, lm, motion, q, state)
    for k in range(q.shape[0]):
        for _ in range(lm[0]):
            if not active[k]:
                break
            count, mu = _trials(bodies, columns, joints, targets, lm, motion, none, q[k],
                                cost[k], precise[k], trials, ws)
            judged_count = _judge(bodies, columns, joints, targets, motion, trials, no_cost,
                                  guard[k], -np.inf, judged, jw)
            pick = _pick(plain, precise[k], cost[k], dist2[k], mu, judged_count, judged)
            _accept(k, pick, q, state, trials, judged)


@njit(cache=True)
def propose(bodies, columns, joints, targets, lm, motion, extra, q, state):
    """Return (trials (K, T, nq), mu (K,)): one step's trials of the active rows (the others'
    are copies of their row), with ``extra`` (r (K, m), J (K, m, nv)): the whitened rows of
    the terms the kernels do not evaluate, at q."""
    extra_r, extra_j = extra
    count = lm[1].shape[0] + (0 if motion[5] < 0.0 else 1)
    k_count, nq = q.shape
    trials = np.empty((k_count, count, nq))
    mu = np.zeros(k_count)
    ws = _workspace(bodies, columns, targets, extra_r.shape[1], nq, count)
    cost, _, precise, _, _, _, active = state
    for k in range(k_count):
        if not active[k]:
            for j in range(count):
                trials[k, j] = q[k]
            continue
        _, mu[k] = _trials(bodies, columns, joints, targets, lm, motion,
                           (extra_r[k], extra_j[k]), q[k], cost[k], precise[k], trials[k], ws)
    return trials, mu


@njit(cache=True)
def choose(bodies, columns, joints, targets, motion, q, state, trials, mu, extra_cost):
    """Judge ``propose``'s trials with the other terms' costs ``extra_cost`` (K, T; inf where
    a hard constraint refuses the trial), pick and accept one per active row."""
    plain = motion[5] < 0.0
    k_count, count, nq = trials.shape
    judged = _judged(count)
    ws = _workspace(bodies, columns, targets, 0, nq, 0)
    cost, guard, precise, dist2, _, _, active = state
    jw = _judging(ws)
    for k in range(k_count):
        if not active[k]:
            continue
        _judge(bodies, columns, joints, targets, motion, trials[k], extra_cost[k], guard[k],
               -np.inf, judged, jw)
        pick = _pick(plain, precise[k], cost[k], dist2[k], mu[k], count, judged)
        _accept(k, pick, q, state, trials[k], judged)


@njit(cache=True)
def first_solution(bodies, columns, joints, targets, lm, motion, q):
    """Refine the rows of ``q`` (K, nq) one after another, each alone by plain LM steps
    (``motion``: the plain record) until one meets the targets' tolerance; return (its
    index, position error [m], orientation error [rad]), or (-1, NaN, NaN) when none did.

    The SMC ``solve``'s first stage (``policies/seed_first.py``): row 0 is the seed, the
    others draws of the filter's proposal. Each step takes its longest trial that lowers
    the cost (the shorter ones are not judged); a row stops when it meets the tolerance or
    no trial lowers its cost. q is updated in place (refined rows); rows after the returned
    one are untouched. ``refine``'s step without its per-row state: this loop runs on every
    solve(), where that bookkeeping cost a third of the kernel's time."""
    tol_p, tol_o = targets[9], targets[10]
    k_count, nq = q.shape
    count = lm[1].shape[0]
    ws = _workspace(bodies, columns, targets, 0, nq, count)
    trials, judged, jw = np.empty((count, nq)), _judged(count), _judging(ws)
    none = (np.empty(0), np.empty((0, ws[7].shape[1])))
    no_cost = np.zeros(count)
    t_cost, t_pos, _, _, t_ori = judged
    for k in range(k_count):
        row = q[k]
        cost, pe, oe = _costs(bodies, columns, targets, row, ws)
        for _ in range(lm[0]):
            if pe <= tol_p and oe <= tol_o:
                break
            _rows(bodies, columns, targets, none[0], none[1], row, ws)
            _plain_trials(bodies, columns, joints, targets, lm, row, cost, trials, ws)
            last = _judge(bodies, columns, joints, targets, motion, trials, no_cost, np.inf,
                          cost, judged, jw) - 1
            if not t_cost[last] < cost:
                break
            for v in range(nq):
                row[v] = trials[last, v]
            cost, pe, oe = t_cost[last], t_pos[last], t_ori[last]
        if pe <= tol_p and oe <= tol_o:
            return k, pe, oe
    return -1, math.nan, math.nan
