"""Shared entry-point logic of the package's nodes: init, spin, clean exit codes."""

import cProfile

import rclpy
from rclpy.executors import ExternalShutdownException

from .errors import SmcIkError

__all__ = ['run_node']


def run_node(factory, name, args=None, profile_path=None):
    """Create the node with ``factory()`` and spin it; return the process exit code.

    SIGINT/SIGTERM end it with 0; a SmcIkError at start-up (bad URDF, link or parameter)
    is logged as fatal with its message (which says how to fix it) and gives 1.
    profile_path: write cProfile statistics of the spin there (None: no profiling).
    """
    rclpy.init(args=args)
    profiler = cProfile.Profile() if profile_path else None
    node = None
    code = 0
    try:
        node = factory()
        if profiler:
            profiler.enable()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except SmcIkError as exc:
        rclpy.logging.get_logger(name).fatal(f'cannot start: {exc}')
        code = 1
    except Exception:
        if rclpy.ok():
            raise
        # SIGINT/SIGTERM shut the context down while a callback ran (e.g. a publish): clean.
    finally:
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile_path)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code
