"""What the arm may be commanded: pure, ROS-free classes the node wires to topics.

- ``command_shaping``: the next command within position, velocity and acceleration limits,
  synchronized along the straight joint-space line, braking in time (``CommandShaper``).
- ``arm_state``: WAITING -> ACTIVE -> STALE -> RESYNC from the measured joint_states
  (``ArmMonitor``).
- ``goal_inbox``: the newest goal per tick, stale goals, goal frames (``GoalInbox``).
- ``frames``: every link of the URDF tree in the base frame (``FrameResolver``).
- ``constraints``: the constraint set from the schema and keep-out markers (``ConstraintSet``).
- ``loop``: one control tick (arm state + goal + solver + validators + shaping + the
  exception policy) (``ControlLoop``).
- ``detour``: a collision-free joint-space path round an obstacle that blocks a still goal,
  planned over ticks and followed by the loop (``Detour``).
- ``alternatives``: the filter's alternatives for ~/alternatives, ~/status, the ghost arms and
  the deliberate move to one (``AlternativesBook``).
- ``side_work``: markers and alternatives run between control ticks, when they fit
  (``SideWork``).
- ``tick_timing``: late control ticks counted, a warning when they pile up (``TickTiming``).
"""

from .alternatives import AlternativesBook, BranchList, has_alternatives
from .arm_state import ArmMonitor, ArmSettings, ArmState
from .command_shaping import (CommandShaper, JointLimits, ShapedCommand, allowed_speed,
                              brake_speed, limits_for_chain, nearest_equivalent,
                              read_joint_limits_yaml, wrap_to_pi)
from .constraints import ConstraintSet
from .detour import Detour, DetourSettings
from .frames import FrameResolver
from .goal_inbox import Goal, GoalInbox
from .loop import Command, ControlLoop, HardConstraintValidator, Reporter
from .side_work import SideWork
from .tick_timing import TickTiming

__all__ = ['AlternativesBook', 'BranchList', 'has_alternatives',
           'ArmMonitor', 'ArmSettings', 'ArmState', 'CommandShaper', 'JointLimits',
           'ShapedCommand', 'allowed_speed', 'brake_speed', 'limits_for_chain',
           'nearest_equivalent', 'read_joint_limits_yaml', 'wrap_to_pi', 'ConstraintSet',
           'Detour', 'DetourSettings',
           'FrameResolver', 'Goal', 'GoalInbox', 'Command', 'ControlLoop',
           'HardConstraintValidator', 'Reporter', 'SideWork', 'TickTiming']
