"""Exceptions of smcik_ros: one base class, one subclass per kind of misuse.

Every exception also derives from ``ValueError`` so callers that do not know the
package can still catch bad input the usual way.
"""

__all__ = ['SmcIkError', 'ModelError', 'GoalError', 'ParameterError']


class SmcIkError(ValueError):
    """Base class of every error raised on purpose by smcik_ros."""


class ModelError(SmcIkError):
    """The robot model (URDF, base/tip links, programmatic chain) is unusable."""


class GoalError(SmcIkError):
    """A goal or constraint is malformed (wrong shape, NaN, unknown link, ...)."""


class ParameterError(SmcIkError):
    """A solver or node setting is unknown or out of range."""
