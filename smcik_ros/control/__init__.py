"""What the arm may be commanded: pure, ROS-free classes the node wires to topics.

- ``tick``: one control tick as a pipeline, arm state -> goal inbox -> solver -> shaping ->
  guard -> the command, and the exception policy (``ControlLoop``, ``LoopSettings``).
- ``arm_state``: WAITING -> ACTIVE -> STALE -> RESYNC from the measured joint_states
  (``ArmMonitor``).
- ``goal_inbox``: the newest goal per tick, stale goals, goal frames (``GoalInbox``).
- ``stepping``: when the solver steps and what the ticks follow in between, in the tick or
  in a worker thread (``SolverStepper``; the thread: ``step_worker.StepWorker``).
- ``shaping``: the next command within position, velocity and acceleration limits,
  synchronized along the straight joint-space line, braking in time (``CommandShaper``).
- ``limits``: the joint limits (URDF, MoveIt YAML) and continuous joints' coordinates
  (``JointLimits``).
- ``guard``: validators judge each motion; a refusal falls back to another solver candidate
  or brakes on the validated line (``MotionGuard``, ``HardConstraintValidator``).
- ``collision_guard``: the collision model, scene and validator (``CollisionGuard``), with
  ``free_motion`` (motions proved free without a query) and ``cover_updates`` (SRDF and
  finer covers computed in the background).
- ``detour``: a path round an obstacle that blocks a still goal, triggered, planned over
  ticks (``detour_planner``) and followed by the loop (``Detour``, ``DetourDrive``).
- ``alternatives``: the filter's alternatives for ~/alternatives, ~/status, the ghost arms and
  the deliberate move to one (``AlternativesBook``).
- ``frames``: every link of the URDF tree in the base frame (``FrameResolver``).
- ``constraints``: the constraint set from the schema and keep-out markers (``ConstraintSet``).
- ``side_work``: markers and alternatives run between control ticks, when they fit
  (``SideWork``).
- ``tick_timing``: late control ticks counted, a warning when they pile up (``TickTiming``).
- ``reporter``: log lines once in full, then throttled with a count (``Reporter``).
"""

from .alternatives import AlternativesBook, BranchList, has_alternatives
from .arm_state import ArmMonitor, ArmSettings, ArmState, initial_configuration
from .constraints import ConstraintSet
from .detour import Detour, DetourSettings
from .frames import FrameResolver
from .goal_inbox import Goal, GoalInbox
from .guard import HardConstraintValidator, MotionGuard
from .limits import (JointLimits, limits_for_chain, nearest_equivalent, read_joint_limits_yaml,
                     wrap_to_pi)
from .reporter import Reporter
from .shaping import CommandShaper, ShapedCommand, allowed_speed, brake_speed
from .side_work import SideWork
from .tick import Command, ControlLoop, LoopSettings
from .tick_timing import TickTiming

__all__ = ['AlternativesBook', 'BranchList', 'has_alternatives',
           'ArmMonitor', 'ArmSettings', 'ArmState', 'initial_configuration', 'CommandShaper',
           'JointLimits', 'ShapedCommand', 'allowed_speed', 'brake_speed', 'limits_for_chain',
           'nearest_equivalent', 'read_joint_limits_yaml', 'wrap_to_pi', 'ConstraintSet',
           'Detour', 'DetourSettings', 'FrameResolver', 'Goal', 'GoalInbox', 'Command',
           'ControlLoop', 'LoopSettings', 'HardConstraintValidator', 'MotionGuard', 'Reporter',
           'SideWork', 'TickTiming']
