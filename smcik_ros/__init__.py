"""smcik_ros: online inverse kinematics with a Sequential Monte Carlo filter.

The core (``model``, ``kernels``, ``goals``, ``collision``, ``solvers``, ``control``: numpy and
numba) imports no ROS module; the rclpy layer (``node``, ``sim_arm`` and the ``ros`` package)
sits on top of it.
"""

from .errors import GoalError, ModelError, ParameterError, SmcIkError

__all__ = ['GoalError', 'ModelError', 'ParameterError', 'SmcIkError']
__version__ = '0.1.0'
