"""The Sequential Monte Carlo IK filter of Courty & Arnaud (seed 000, Algorithm 1).

``filter.py``: the paper's step; ``policies/``: what is added to it, one module each;
``solver.py``: ``SmcSolver`` (the goal stream, ``step``, ``solve``); ``branches.py``: the
alternatives; ``settings.py``: ``SmcSettings``. docs/smc.md explains each part.
"""

from .filter import FilterModel, FilterState, Policies, filter_step, sample_qutem
from .settings import SmcSettings
from .solver import SmcSolver

__all__ = ['FilterModel', 'FilterState', 'Policies', 'SmcSettings', 'SmcSolver',
           'filter_step', 'sample_qutem']
