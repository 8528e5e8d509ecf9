"""Seed 002's distance IK as written: free points, 3n unknowns (``FreePointDistanceSolver``).

The paper's own form, used by ``distance_paper.py`` to reproduce its section VI-B and VI-C
experiments (segment lengths and pinned points hard, reference distances soft; works on
graphs with cycles, VI-D). Not part of the node: the product's distance solver is
``smcik_ros.solvers.distance.DistanceSolver`` (joint positions as unknowns, segment lengths
held by construction, answers inside the joint limits); docs/solvers.md compares the two.
``structured=True`` uses the block structure (each constraint row touches at most two points;
eqs. 12-13: the soft Jacobian towards fixed reference points is block diagonal, so its
pseudo-inverse is the blocks' pseudo-inverses) instead of dense SVDs of the full matrices.
"""

from dataclasses import dataclass
import time

import numpy as np

from smcik_ros.errors import GoalError, ParameterError
from smcik_ros.goals import _finite_array
from smcik_ros.solvers.base import SolverSettings, check_fields
from smcik_ros.solvers.distance import reference_anchors

__all__ = ['FreePointSettings', 'FreePointResult', 'FreePointDistanceSolver']

_DENSE_ROWS = 150     # below this many hard rows, J0 J0^T is solved densely


@dataclass(frozen=True)
class FreePointSettings(SolverSettings):
    """Settings of the free-point distance solver (3n unknowns)."""

    gain: float = 1.0                    # fraction of the hard-constraint Newton step
    soft_gain: float = 0.1               # eq. 11 secondary-task gain
    soft_step_fraction: float = 0.2      # largest soft-step point move / shortest segment
    soft_decay: float = 0.95             # per-step factor on the soft task since reset/solve
    singular_value_cutoff: float = 1e-6  # dense pseudo-inverses: relative cut-off
    regularization: float = 1e-10        # structured solve: relative ridge on J0 J0^T
    structured: bool = True              # block-sparse solve (eqs. 12-13) instead of dense SVD

    def validate(self):
        check_fields(self, '(0, 1]', 'gain', 'soft_decay')
        check_fields(self, '[0, 1]', 'soft_gain')
        check_fields(self, '> 0', 'soft_step_fraction', note=' (share of the shortest segment)')
        check_fields(self, '[0, 1)', 'singular_value_cutoff', 'regularization')


@dataclass(frozen=True)
class FreePointResult:
    """Outcome of ``FreePointDistanceSolver.solve``.

    points: (n, 3) [m]; success: every hard constraint within tolerance; hard_error: largest
    hard residual [m]; soft_error: RMS soft residual [m]; iterations; elapsed [s].
    """

    points: np.ndarray
    success: bool
    hard_error: float
    soft_error: float
    iterations: int
    elapsed: float = 0.0


class FreePointDistanceSolver:
    """The paper's distance IK on free points: unknowns X = (x_1 ... x_n), 3n numbers.

    reference: (n, 3) reference posture [m] (also the start); edges: (m, 2) point pairs whose
    reference lengths are hard constraints (segments; the graph may have cycles);
    pinned: indices of points held at their reference positions (hard);
    soft: 'anchors' (each point keeps its reference distances to four fixed reference
    points, the paper's replay set-up, eqs. 12-13), or 'none';
    soft_pairs: (s, 2) extra point pairs whose reference distances are soft (the dotted
    lines of Fig. 10). Targets, given per call, are hard point coincidences {index: (3,)}.
    """

    def __init__(self, reference, edges, pinned=(), soft='anchors', soft_pairs=(),
                 anchors=None, settings=None, **changes):
        ref = np.array(reference, dtype=float)
        if ref.ndim != 2 or ref.shape[1] != 3 or not np.all(np.isfinite(ref)):
            raise ParameterError(f'reference must be finite points of shape (n, 3); '
                                 f'got {ref.shape}')
        n = len(ref)
        self.num_points = n
        settings = settings or FreePointSettings()
        self.settings = settings.replace(**changes) if changes else settings
        self.edges = _pairs(edges, n, 'edges')
        self.soft_pairs = _pairs(soft_pairs, n, 'soft_pairs')
        self.pinned = np.array(sorted(set(int(i) for i in pinned)), dtype=int)
        if self.pinned.size and (self.pinned.min() < 0 or self.pinned.max() >= n):
            raise ParameterError(f'pinned indices must be in [0, {n - 1}]; got {pinned}')
        if soft not in ('anchors', 'none'):
            raise ParameterError(f"soft must be 'anchors' or 'none'; got {soft!r}")
        self.soft = soft
        self.reference = ref
        self.lengths = np.linalg.norm(ref[self.edges[:, 0]] - ref[self.edges[:, 1]], axis=-1)
        if np.any(self.lengths < 1e-9):
            raise ParameterError('edges must join distinct points of the reference (a zero '
                                 'segment length has no gradient)')
        span = float(np.ptp(ref, axis=0).max()) if n > 1 else 1.0
        centre = ref.mean(axis=0)
        self.anchors = (reference_anchors(max(span, 1e-3), centre - 0.5 * span)
                        if anchors is None else np.array(anchors, dtype=float).reshape(-1, 3))
        self.anchor_dist = np.linalg.norm(ref[:, None] - self.anchors[None], axis=-1)
        if self.soft == 'anchors' and np.any(self.anchor_dist < 1e-9):
            raise ParameterError('a reference point coincides with an anchor point; move the '
                                 'anchors (anchors=)')
        self.pair_dist = np.linalg.norm(ref[self.soft_pairs[:, 0]] - ref[self.soft_pairs[:, 1]],
                                        axis=-1)
        shortest = float(self.lengths.min()) if len(self.lengths) else max(span, 1e-3)
        self._soft_limit = self.settings.soft_step_fraction * shortest
        self.points = ref.copy()
        self._soft_scale = 1.0

    def reset(self, points=None):
        """Restart from ``points`` (n, 3) (default: the reference); the soft task is fresh."""
        self.points = self.reference.copy() if points is None else np.array(points, float)
        self._soft_scale = 1.0

    # ------------------------------------------------------------------ constraints
    def _targets(self, targets):
        idx, pos = [], []
        for i, p in dict(targets or {}).items():
            if not 0 <= int(i) < self.num_points:
                raise GoalError(f'target point index must be in [0, {self.num_points - 1}]; '
                                f'got {i}')
            idx.append(int(i))
            pos.append(_finite_array(p, (3,), f'target of point {i}'))
        for i in self.pinned:
            if i not in idx:
                idx.append(int(i))
                pos.append(self.reference[i])
        return np.array(idx, dtype=int), np.array(pos, dtype=float).reshape(-1, 3)

    def hard_rows(self, x, targets):
        """Return F (m0,) and the row structure of J0: the segments, then the targets.

        Each row touches at most two points: (coef_a (m0, 3), point_a (m0,),
        coef_b (m0, 3), point_b (m0,), point_b = -1 where only one point is touched).
        """
        ti, tp = targets
        e = self.edges
        f_seg, g_seg = _distance_rows(x[e[:, 0]] - x[e[:, 1]], self.lengths)
        k = len(ti)
        return (np.concatenate([f_seg, (x[ti] - tp).ravel()]),
                (np.concatenate([g_seg, np.tile(np.eye(3), (k, 1))]),
                 np.concatenate([e[:, 0], np.repeat(ti, 3)]),
                 np.concatenate([-g_seg, np.zeros((3 * k, 3))]),
                 np.concatenate([e[:, 1], np.full(3 * k, -1)])))

    def soft_anchor_rows(self, x):
        """Return G (n, 4) and the per-point (n, 4, 3) blocks of the anchor rows (eq. 13)."""
        return _distance_rows(x[:, None, :] - self.anchors[None], self.anchor_dist)

    def soft_rows(self, x):
        """Return G (m1,) and the row structure of J1 (as ``hard_rows``): each point's
        distances to the anchors (one-point rows), then the soft pairs."""
        p = self.soft_pairs
        g, grad = _distance_rows(x[p[:, 0]] - x[p[:, 1]], self.pair_dist)
        if self.soft != 'anchors':
            return g, (grad, p[:, 0], -grad, p[:, 1])
        n = self.num_points
        ga, blocks = self.soft_anchor_rows(x)
        return (np.concatenate([ga.ravel(), g]),
                (np.concatenate([blocks.reshape(-1, 3), grad]),
                 np.concatenate([np.repeat(np.arange(n), 4), p[:, 0]]),
                 np.concatenate([np.zeros((4 * n, 3)), -grad]),
                 np.concatenate([np.full(4 * n, -1), p[:, 1]])))

    # ------------------------------------------------------------------ one Newton step
    def step(self, targets=None):
        """Run one eq. 11 iteration towards ``targets`` {point index: (3,)}; return (n, 3).

        The secondary step z = -soft_gain J1^+ G is first shortened so that no point moves
        more than ``soft_step_fraction`` of the shortest segment: the projection keeps the
        hard constraints only to first order, and long secondary steps otherwise leave a
        second-order hard error that the next Newton step cannot remove before the soft
        task pushes again (we saw the hard error stall at 10-40 % of a segment). Then the
        soft step is scaled by ``soft_decay`` ** (steps since reset/solve): the paper's
        "parameter ... to limit the involvement of the secondary task at the end of the
        iteration", so the hard constraints converge to zero, not to a second-order error.
        """
        s = self.settings
        tg = self._targets(targets)
        x = self.points
        structured = s.structured
        scale = self._soft_scale
        self._soft_scale *= s.soft_decay
        z = self._soft_step(x, structured) if s.soft_gain * scale > 1e-6 else np.zeros(x.size)
        if z.any():
            biggest = np.max(np.linalg.norm(z.reshape(-1, 3), axis=1))
            if biggest > self._soft_limit:
                z *= self._soft_limit / biggest
            z *= scale
        if structured:
            dx = self._primary_structured(x, tg, z)
        else:
            dx = self._primary_dense(x, tg, z)
        self.points = x + dx
        return self.points.copy()

    def _soft_step(self, x, structured):
        """Return z = -soft_gain J1^+ G (3n,).

        structured: with only anchor rows J1 is block diagonal (eq. 12), so J1^+ G is each
        point's 4 x 3 block pseudo-inverse (eq. 13) applied to its rows, one batched call;
        with soft pairs, (J1^T J1)^-1 J1^T G by a sparse factorisation. Dense: one SVD of
        the whole (m1, 3n) matrix.
        """
        s = self.settings
        if self.soft != 'anchors' and not len(self.soft_pairs):
            return np.zeros(3 * self.num_points)
        if structured and not len(self.soft_pairs):
            g, blocks = self.soft_anchor_rows(x)                  # (n, 4), (n, 4, 3)
            return -s.soft_gain * np.einsum('nka,na->nk', np.linalg.pinv(blocks), g).ravel()
        g, rows = self.soft_rows(x)
        if not structured:
            j1 = _dense_rows(rows, 3 * self.num_points)
            return -s.soft_gain * (np.linalg.pinv(j1, rcond=max(s.singular_value_cutoff,
                                                                 1e-15)) @ g)
        j1 = _sparse_rows(rows, 3 * self.num_points)
        return -s.soft_gain * _sparse_solve(j1.T @ j1, max(s.regularization, 1e-12), j1.T @ g)

    def _primary_dense(self, x, tg, z):
        """Eq. 11 with dense matrices and an SVD pseudo-inverse (the unoptimised version)."""
        s = self.settings
        f, rows = self.hard_rows(x, tg)
        j0 = _dense_rows(rows, 3 * self.num_points)
        j0p = np.linalg.pinv(j0, rcond=max(s.singular_value_cutoff, 1e-15))
        dx = -s.gain * (j0p @ f) + z - j0p @ (j0 @ z)
        return dx.reshape(-1, 3)

    def _primary_structured(self, x, tg, z):
        """Eq. 11's hard part without the pseudo-inverse's SVD or a 3n x 3n matrix.

        -gain J0^+ F + (I - J0^+ J0) z = z - J0^T (J0 J0^T)^-1 (gain F + J0 z) for a J0 of
        full row rank (ridge ``regularization``, relative to the mean diagonal, for
        redundant hard constraints). Each hard row touches <= 2 points, so J0 J0^T is a
        sparse m0 x m0 matrix: factorised sparse for large problems, dense below
        ``_DENSE_ROWS`` rows where scipy's per-call overhead costs more than it saves.
        """
        s = self.settings
        n3 = 3 * self.num_points
        f, rows = self.hard_rows(x, tg)
        rhs = s.gain * f
        if len(f) <= _DENSE_ROWS:
            j0 = _dense_rows(rows, n3)
            jjt = j0 @ j0.T
            jjt[np.diag_indices_from(jjt)] += s.regularization * (np.trace(jjt) / len(f)
                                                                   + 1e-30)
            y = np.linalg.solve(jjt, rhs + j0 @ z)
        else:
            j0 = _sparse_rows(rows, n3)
            y = _sparse_solve(j0 @ j0.T, s.regularization, rhs + j0 @ z)
        return (z - j0.T @ y).reshape(-1, 3)

    # ------------------------------------------------------------------ loop
    def errors(self, x=None, targets=None):
        """Return (largest hard residual [m], RMS soft residual [m]) at points ``x``."""
        x = self.points if x is None else x
        f, _ = self.hard_rows(x, self._targets(targets))
        g = self.soft_rows(x)[0]
        hard = float(np.max(np.abs(f))) if f.size else 0.0
        return hard, float(np.sqrt(np.mean(g * g))) if g.size else 0.0

    def solve(self, targets=None, max_iters=100, tol=1e-6, points=None):
        """Iterate eq. 11 from ``points`` (default: the current points) until every hard
        residual is below ``tol`` [m] or ``max_iters`` steps; return a ``FreePointResult``."""
        start = time.perf_counter()
        self.reset(self.points if points is None else points)
        it = 0
        hard, soft = self.errors(targets=targets)
        while hard > tol and it < max_iters:
            self.step(targets)
            it += 1
            hard, soft = self.errors(targets=targets)
        ok = bool(hard <= tol) and bool(np.all(np.isfinite(self.points)))
        return FreePointResult(points=self.points.copy(), success=ok, hard_error=hard,
                               soft_error=soft, iterations=it,
                               elapsed=time.perf_counter() - start)

    @classmethod
    def from_chain(cls, chain, q=None, **kwargs):
        """Build from a chain's link origins at q (default neutral): the segments between
        consecutive distinct body origins are the edges; point 0 (the root) is pinned."""
        q = chain.neutral_configuration() if q is None else q
        frames = chain.frames(q)
        pts = [frames.point(chain.base_link)[0]]
        index_of_body = {-1: 0}
        edges = []
        for link in chain.link_names[1:]:
            body, _ = chain.link_anchor(link)
            p = frames.point(link)[0]
            parent = index_of_body.get(chain.body_parent[body] if body >= 0 else -1, 0)
            if np.linalg.norm(p - pts[parent]) < 1e-9:
                index_of_body[body] = parent
                continue
            pts.append(p)
            idx = len(pts) - 1
            edges.append((parent, idx))
            index_of_body[body] = idx
        kwargs.setdefault('pinned', (0,))
        return cls(np.array(pts), edges, **kwargs)


def _pairs(pairs, n, what):
    arr = np.array(pairs, dtype=int).reshape(-1, 2)
    if arr.size and (arr.min() < 0 or arr.max() >= n or np.any(arr[:, 0] == arr[:, 1])):
        raise ParameterError(f'{what} must be pairs of distinct point indices in [0, {n - 1}]; '
                             f'got {arr.tolist()}')
    return arr


def _dense_rows(rows, n3):
    coef_a, pa, coef_b, pb = rows
    m = len(pa)
    jac = np.zeros((m, n3))
    r = np.arange(m)
    for k in range(3):
        jac[r, 3 * pa + k] += coef_a[:, k]
        two = pb >= 0
        jac[r[two], 3 * pb[two] + k] += coef_b[two, k]
    return jac


def _distance_rows(diff, d):
    """Return the distance residuals g = (|diff|^2 - d^2) / (2 d) (...,) [m] of point
    differences ``diff`` (..., 3) from reference distances ``d`` (...,), and their gradient
    diff / d (..., 3) with respect to the first point."""
    g = (np.einsum('...k,...k->...', diff, diff) - d * d) / (2.0 * d)
    return g, diff / d[..., None]


def _sparse_solve(a, relative_ridge, rhs):
    """Return (A + mu I)^-1 rhs for a sparse symmetric A, mu = relative_ridge * mean diag A."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    a = a.tocsc()
    ridge = relative_ridge * (a.diagonal().mean() + 1e-30)
    return splu(a + ridge * sp.identity(a.shape[0], format='csc')).solve(rhs)


def _sparse_rows(rows, n3):
    import scipy.sparse as sp

    coef_a, pa, coef_b, pb = rows
    m = len(pa)
    two = pb >= 0
    r = np.concatenate([np.repeat(np.arange(m), 3), np.repeat(np.arange(m)[two], 3)])
    c = np.concatenate([(3 * pa[:, None] + np.arange(3)).ravel(),
                        (3 * pb[two][:, None] + np.arange(3)).ravel()])
    v = np.concatenate([coef_a.ravel(), coef_b[two].ravel()])
    return sp.csr_matrix((v, (r, c)), shape=(m, n3))
