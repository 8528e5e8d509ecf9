"""Solvers behind one interface: ``make_solver(name, chain, **settings)``.

Registered names: 'smc' (Sequential Monte Carlo filter, the default), and the classical
solvers as they land ('jacobian', 'distance', 'fabrik', 'ccd').
"""

from .base import (IKResult, Solver, SolverSettings, available_solvers, make_solver,
                   settings_type)
from . import smc  # noqa: F401  (registers 'smc')
from . import jacobian, distance, fabrik, ccd  # noqa: F401  (register the classical solvers)

__all__ = ['IKResult', 'Solver', 'SolverSettings', 'available_solvers', 'make_solver',
           'settings_type']
