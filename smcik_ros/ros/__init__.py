"""The rclpy layer of smcik_node and sim_arm: one module per ROS concern, over the ROS-free core.

- ``parameters``: the parameter table, its declaration (descriptors, read-only), and how a
  change is checked and applied (``ParameterChanges``).
- ``inputs``: goals and joint_states -> plain values for the control loop.
- ``scene``: constraints, obstacles, point clouds, the SRDF topic -> the collision guard.
- ``outputs``: commands, markers, ~/alternatives, /diagnostics and ~/status.
- ``health`` (plain): the status and the diagnostics, built from one dictionary.
- ``schedule`` (plain): the solver's step interval, the loop's settings, when markers are
  rebuilt, how often clouds are converted.
- ``conversions``: message <-> numpy; ``markers``: RViz marker messages;
  ``interface``: message types and QoS profiles.
- ``description``: URDF sources, which SRDF applies; ``solver_parameters``: solver settings as
  ``<solver>.<field>`` parameters; ``runner``: init, spin, signals, exit codes, and the core's
  log records on the node's log.

Modules are imported by name (``smcik_ros.ros.outputs``); this package re-exports nothing.
"""

__all__ = []
