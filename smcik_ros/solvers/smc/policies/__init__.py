"""The policies ``filter_step`` adds to the paper's Algorithm 1, one module each."""

from .branch_hold import BranchHold
from .motion import MinimalMotion
from .recovery import Recovery
from .refinement import Refinement
from .restarts import Restarts
from .search import NearestSearch
from .seed_first import SeedFirst

__all__ = ['BranchHold', 'MinimalMotion', 'NearestSearch', 'Recovery', 'Refinement',
           'Restarts', 'SeedFirst']
