"""Goals (targets) and constraints shared by every solver, and the projection onto the hard
ones. Pure numpy over the model's ``Frames``; no ROS.

- ``terms``: ``Term`` (residual, jacobian, sigma, weight, whiten, cost, violated),
  ``Constraint``, ``check_terms``, covariances;
- ``targets``: ``PoseTarget``, ``PositionTarget``, ``OrientationTarget`` on any link (what
  "solved" is judged on), ``as_goal``, ``task_errors``;
- ``constraints``: ``CenterOfMassLine`` (seed 000 6.1), ``ChainSmoothness`` (eq. 16),
  ``PosturePreference``, ``JointCoupling`` (6.4);
- ``body``: ``Contact`` (a link keeps its pose: a hard equality), ``PlaneContact``,
  ``CenterOfMassPolygon`` (the centre of mass over the support), ``convex_hull``;
- ``projection``: ``project`` (Gauss-Newton onto the hard equalities and the violated rows
  of the hard inequalities, minimal joint change, joint limits kept).

Soft terms enter the SMC likelihood (eq. 14) and the gradient solvers' costs; ``hard = True``
constraints are kept: inequalities (``violated``, ``clearance``) by rejection and the
projection's active set, equalities (``equality = True``, ``tolerance``) by projection.
Poses are (4, 4) homogeneous matrices in the chain's base frame [m] (the world frame with a
floating base); angles in rad.
"""

from .body import CenterOfMassPolygon, Contact, PlaneContact, convex_hull
from .constraints import CenterOfMassLine, ChainSmoothness, JointCoupling, PosturePreference
from .projection import project
from .targets import (OrientationTarget, PoseTarget, PositionTarget, Target, as_goal,
                      task_errors)
from .terms import (Constraint, Term, check_terms, covariance_to_base,
                    symmetric_positive_definite)
# The checks' names before goals became a package (solvers.distance imports them; new code
# imports check_link, finite_array and positive from goals.terms).
from .terms import check_link as _check_link, finite_array as _finite_array  # noqa: F401
from .terms import positive as _positive  # noqa: F401

__all__ = [
    'Target', 'PoseTarget', 'PositionTarget', 'OrientationTarget', 'Constraint',
    'CenterOfMassLine', 'CenterOfMassPolygon', 'ChainSmoothness', 'Contact', 'PosturePreference',
    'PlaneContact', 'JointCoupling', 'Term', 'as_goal', 'check_terms', 'convex_hull',
    'project', 'task_errors', 'covariance_to_base', 'symmetric_positive_definite',
]
