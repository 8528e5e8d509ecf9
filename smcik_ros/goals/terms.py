"""The terms' common base and their validation: ``Term`` (residual, Jacobian, sigma,
weight, whitening, cost, ``violated``), ``Constraint``, ``check_terms``, and the checks every
term uses on its inputs (finite arrays, positive numbers, rotations, covariances).

Each term is a small object with one job:

- ``residual(frames) -> (N, k)``: zero when the term is satisfied (current minus desired);
- ``jacobian(frames) -> (N, k, nv)``: d residual / d tangent step (Jacobian and distance
  solvers, and the SMC refinement, use it; the SMC likelihood needs only the residual);
- ``sigma``: (k,) noise standard deviations of the residual: the SMC likelihood is
  ``exp(-sum((residual / sigma) ** 2))`` (seed 000 eq. 13-14, a diagonal covariance);
  gradient solvers weight rows by ``1 / sigma``;
- ``whiten(rows)``: the rows scaled so that their squared norm is the cost: by
  ``sqrt(weight) / sigma``, or by ``sqrt(weight) L^-1`` when the term has a full
  ``covariance`` Sigma = L L^T (pose and position targets from perception: Sigma_z of the
  paper, in the base frame, ROS order x y z rx ry rz; ``covariance_to_base`` rotates a
  covariance given in another frame);
- ``hard``, ``violated(frames) -> (N,) bool``: a hard constraint is kept, not traded
  (``body`` and ``projection`` describe the hard equalities and inequalities).

Poses are (4, 4) homogeneous matrices in the chain's base frame [m]; angles in rad.
"""

import math

import numpy as np

from ..errors import GoalError

__all__ = ['Constraint', 'Term', 'check_link', 'check_rotation', 'check_terms',
           'covariance_matrix', 'covariance_to_base', 'finite_array', 'positive',
           'symmetric_positive_definite']


def finite_array(value, shape, what):
    """Return ``value`` as a read-only float array of ``shape``; GoalError naming ``what``."""
    arr = np.array(value, dtype=float)
    if arr.shape != shape:
        raise GoalError(f'{what} must have shape {shape}; got {arr.shape}')
    if not np.isfinite(arr).all():
        raise GoalError(f'{what} contains NaN or infinite values: {arr.tolist()}')
    arr.setflags(write=False)
    return arr


def positive(value, what):
    """Return ``value`` as a positive finite float; GoalError naming ``what``."""
    value = float(value)
    if not math.isfinite(value) or value <= 0.0:
        raise GoalError(f'{what} must be a positive number; got {value}')
    return value


def covariance_matrix(value, k, what):
    """Return a validated, symmetric (k, k) covariance (read-only) from (k, k) or (k*k,)."""
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise GoalError(f'{what} must be a symmetric positive definite ({k}, {k}) matrix; '
                        f'got {type(value).__name__}') from None
    expected = (f'{what} must be a symmetric positive definite ({k}, {k}) matrix in the base '
                f'frame ({_COV_ORDER[k]})')
    if arr.shape == (k * k,):
        arr = arr.reshape(k, k)
    if arr.shape != (k, k):
        raise GoalError(f'{expected}; got shape {arr.shape}')
    if not np.all(np.isfinite(arr)):
        raise GoalError(f'{expected}; got NaN or infinite entries: {arr.tolist()}')
    arr = symmetric_positive_definite(arr, f'{expected};')
    arr.setflags(write=False)
    return arr


def symmetric_positive_definite(matrix, expected):
    """Return the square, finite ``matrix`` symmetrised, or raise GoalError.

    expected: the start of the error message (what was expected, with its punctuation);
    the message goes on with what arrived: a non-symmetric matrix (beyond 1e-9 relative) or
    the eigenvalues of one that is not positive definite.
    """
    asym = float(np.abs(matrix - matrix.T).max())
    if asym > 1e-9 * max(1.0, float(np.abs(matrix).max())):
        raise GoalError(f'{expected} got a non-symmetric matrix (max |S - S^T| = {asym:.3g})')
    matrix = 0.5 * (matrix + matrix.T)
    eig = np.linalg.eigvalsh(matrix)
    try:
        np.linalg.cholesky(matrix)
        spd = eig[0] > 0.0
    except np.linalg.LinAlgError:
        spd = False
    if not spd:
        raise GoalError(f'{expected} got eigenvalues {np.array2string(eig, precision=3)} '
                        '(not positive definite)')
    return matrix


_COV_ORDER = {6: 'x y z rx ry rz', 3: 'x y z or rx ry rz'}


def covariance_to_base(covariance, rotation):
    """Return a covariance expressed in the base frame.

    covariance: (6, 6) or (36,) (ROS PoseWithCovariance order x y z rx ry rz, rotations
    about the fixed axes of its frame), or (3, 3) / (9,); rotation: (3, 3) rotation of that
    frame in the base frame. Each 3 x 3 block becomes R S R^T (the translational and the
    rotational axes turn alike). Validated like a target's covariance (GoalError).
    """
    rot = finite_array(rotation, (3, 3), 'covariance frame rotation')
    check_rotation(rot, 'covariance frame rotation')
    arr = np.asarray(covariance, dtype=float)
    k = 6 if arr.size == 36 else 3
    cov = covariance_matrix(arr, k, 'covariance')
    big = np.kron(np.eye(k // 3), rot)
    out = big @ cov @ big.T
    return covariance_matrix(0.5 * (out + out.T), k, 'rotated covariance')


def check_rotation(rot, what):
    """Raise GoalError naming ``what`` when ``rot`` (3, 3) is not a rotation matrix."""
    # On Python floats: a few microseconds, against ~18 us for the numpy expressions on a
    # 3 x 3 matrix (every solve() checks its goal).
    (a, b, c), (d, e, f), (g, h, k) = np.asarray(rot, dtype=float).tolist()
    err = max(abs(a * a + b * b + c * c - 1.0), abs(d * d + e * e + f * f - 1.0),
              abs(g * g + h * h + k * k - 1.0), abs(a * d + b * e + c * f),
              abs(a * g + b * h + c * k), abs(d * g + e * h + f * k))    # |R R^T - I|
    det = a * (e * k - f * h) - b * (d * k - f * g) + c * (d * h - e * g)
    if not err <= 1e-6 or det < 0.0:
        raise GoalError(f'{what} is not a rotation matrix (|R R^T - I| = {err:.2e}, '
                        f'det = {det:.3f}); re-orthonormalise it')


class Term:
    """Common base of targets and constraints."""

    hard = False
    equality = False     # a hard equality: residual within ``tolerance`` (per row), projected
    weight = 1.0

    def bind(self, chain):
        """Check the term against ``chain`` (links, joints); raise GoalError if it does not fit."""
        return self

    def residual(self, frames):  # pragma: no cover - interface
        raise NotImplementedError

    def jacobian(self, frames):  # pragma: no cover - interface
        raise NotImplementedError

    covariance = None
    _whitener = None

    def violated(self, frames):
        """Return (N,) bool: hard-constraint violation (False for soft terms)."""
        return np.zeros(len(frames), dtype=bool)

    def whiten(self, rows):
        """Return residual rows (N, k) or Jacobian rows (N, k, nv) whitened: their squared
        norm is the cost (sqrt(weight) / sigma per row, or sqrt(weight) L^-1 for a full
        covariance L L^T)."""
        if self._whitener is not None:
            if rows.ndim == 2:
                return rows @ self._whitener.T
            return np.einsum('ij,njv->niv', self._whitener, rows)
        scale = np.sqrt(self.weight) / self.sigma
        return rows * (scale if rows.ndim == 2 else scale[:, None])

    def cost(self, frames):
        """Return the (N,) negative log-likelihood weight * r^T Sigma^-1 r (diagonal Sigma:
        sum((residual / sigma) ** 2) * weight)."""
        if self._whitener is not None:
            r = self.whiten(self.residual(frames))
            return np.einsum('nk,nk->n', r, r)
        r = self.residual(frames) / self.sigma
        return self.weight * np.einsum('nk,nk->n', r, r)

    def _set_covariance(self, covariance, k, what):
        """Use a full (k, k) covariance: sigma = sqrt(diag), whitener sqrt(weight) L^-1."""
        self.covariance = covariance_matrix(covariance, k, what)
        chol = np.linalg.cholesky(self.covariance)
        self._whitener = np.sqrt(self.weight) * np.linalg.inv(chol)
        self.sigma = np.sqrt(np.diag(self.covariance))


def check_link(chain, link, what):
    """Raise GoalError naming ``what`` when ``link`` (None: the tip) is not in ``chain``."""
    if link is not None and not chain.has_link(link):
        raise GoalError(f'{what}: unknown link {link!r}; links of this chain: '
                        f'{", ".join(chain.link_names)}')


class Constraint(Term):
    """A soft (or hard) condition on the configuration; zero residual when satisfied."""


def check_terms(terms, chain):
    """Bind constraint terms to ``chain``; raise GoalError naming the bad one."""
    out = []
    for t in terms or ():
        if not isinstance(t, Term):
            raise GoalError(f'constraints must be goal/constraint objects from smcik_ros.goals; '
                            f'got {type(t).__name__}')
        out.append(t.bind(chain))
    return out
