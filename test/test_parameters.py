"""The node's parameter table and how a change is routed (smcik_ros/ros/parameters.py), without
a ROS graph."""

import pytest

pytest.importorskip('rclpy', reason='the parameter table declares rclpy types')

from rcl_interfaces.msg import ParameterDescriptor  # noqa: E402

from smcik_ros.errors import ParameterError  # noqa: E402
from smcik_ros.ros.parameters import (ARRAY_PARAMETERS, NODE_PARAMETERS,  # noqa: E402
                                      ParameterChanges, check_choice, descriptor)

# Built at start-up for these values: changing them needs a restart.
START_UP = ('collision_padding', 'collision_cover_tolerance', 'collision_contact_tolerance',
            'collision_cover_wait',
            'solver_thread', 'robot_description', 'urdf_path', 'base_link', 'tip_link', 'use_tf',
            'robot_description_timeout')
# Read at every use, or applied by a handler at run time.
RUN_TIME = ('rate_hz', 'solver', 'command_type', 'command_topic', 'constraints',
            'self_collision', 'collision_clearance', 'srdf_path', 'pointcloud_topic',
            'marker_rate_hz', 'status_rate_hz', 'max_alternatives', 'goal_timeout')


def test_every_default_lies_in_its_declared_range():
    for name, (default, description, options) in NODE_PARAMETERS.items():
        assert description and not description.endswith(' '), name
        if 'range' in options:
            low, high = options['range']
            assert low <= default <= high, (name, default, options['range'])
            assert type(low) is type(default) or isinstance(default, float), name


def test_start_up_parameters_are_read_only_and_run_time_ones_are_not():
    assert all(NODE_PARAMETERS[name][2].get('read_only') for name in START_UP)
    assert ARRAY_PARAMETERS['package_paths'][3]
    assert not any(NODE_PARAMETERS[name][2].get('read_only') for name in RUN_TIME)


def test_descriptors_carry_ranges_by_type_and_read_only():
    rate = descriptor(*NODE_PARAMETERS['rate_hz'])
    assert isinstance(rate, ParameterDescriptor) and not rate.read_only
    assert (rate.floating_point_range[0].from_value, rate.floating_point_range[0].to_value) \
        == (1.0, 1000.0) and not rate.integer_range
    count = descriptor(*NODE_PARAMETERS['max_alternatives'])
    assert (count.integer_range[0].from_value, count.integer_range[0].to_value,
            count.integer_range[0].step) == (0, 20, 1) and not count.floating_point_range
    padding = descriptor(*NODE_PARAMETERS['collision_padding'])
    assert padding.read_only and padding.floating_point_range[0].to_value == 0.1
    assert 'fixed at start-up' in padding.description


class Handler:
    def __init__(self, log, name, refuse=None):
        self.log, self.name, self.refuse = log, name, refuse

    def check(self, changes, values):
        self.log.append(('check', self.name, dict(changes)))
        if self.refuse is not None and self.refuse in changes:
            raise ParameterError(f'{self.refuse} refused by {self.name}')

    def apply(self, changes, values):
        self.log.append(('apply', self.name, values['a'] if 'a' in values else None))


def test_every_handler_checks_before_any_applies_and_a_refusal_applies_nothing():
    log = []
    changes = ParameterChanges()
    first, second = Handler(log, 'first'), Handler(log, 'second', refuse='b')
    changes.add({'a', 'b'}, first.check, first.apply)
    changes.add(lambda name: name.startswith('b'), second.check, second.apply)
    changes.add({'z'}, apply=lambda c, v: log.append(('apply', 'z', None)))
    changes({'a': 1}, {'a': 1})
    assert log == [('check', 'first', {'a': 1}), ('apply', 'first', 1)]
    log.clear()
    with pytest.raises(ParameterError, match='b refused by second'):
        changes({'a': 2, 'b': 3}, {'a': 2, 'b': 3})
    assert [entry[0] for entry in log] == ['check', 'check'], log      # nothing applied
    log.clear()
    changes({'bb': 1, 'z': 0}, {'a': 0, 'bb': 1, 'z': 0})
    assert log == [('check', 'second', {'bb': 1, 'z': 0}), ('apply', 'second', 0),
                   ('apply', 'z', None)]
    assert len(changes.touched({'unknown': 1})) == 0


def test_a_choice_outside_the_list_names_the_valid_ones():
    check_choice('command_type', 'joint_state', ('joint_state', 'float64_multi_array'))
    with pytest.raises(ParameterError, match="command_type 'torque' is not one of "
                                             'joint_state, float64_multi_array'):
        check_choice('command_type', 'torque', ('joint_state', 'float64_multi_array'))
