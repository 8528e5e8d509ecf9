"""config/arm.yaml stays in step with the solvers' settings dataclasses."""

import dataclasses
import os

import yaml

from smcik_ros.solvers import available_solvers, settings_type

ROOT = os.path.dirname(os.path.dirname(__file__))


def test_arm_yaml_solver_settings_equal_the_node_defaults():
    with open(os.path.join(ROOT, 'config', 'arm.yaml')) as f:
        params = yaml.safe_load(f)['smcik_node']['ros__parameters']
    for name in available_solvers():
        block = params.get(name)
        assert block is not None, f'config/arm.yaml has no {name}: block'
        for field in dataclasses.fields(settings_type(name)):
            if field.default == ():
                continue   # empty lists cannot be typed in ROS YAML: commented out there
            assert field.name in block, f'{name}.{field.name} missing from config/arm.yaml'
            default = field.default
            assert block[field.name] == default, (
                f'{name}.{field.name}: config/arm.yaml has {block[field.name]!r}, the default is '
                f'{default!r}; regenerate with python -m smcik_ros.node '
                '--solver-settings-yaml')


def test_arm_yaml_sets_every_node_parameter_and_nothing_else():
    """config/arm.yaml lists every parameter the node declares with its default (empty lists,
    which ROS YAML cannot type, commented out), and no parameter the node does not declare
    (a dead entry would be ignored by ROS without a word)."""
    import pytest
    pytest.importorskip('rclpy', reason='the parameter table declares rclpy types')
    from smcik_ros.ros.parameters import ARRAY_PARAMETERS, NODE_PARAMETERS
    from smcik_ros.ros.solver_parameters import solver_parameters

    path = os.path.join(ROOT, 'config', 'arm.yaml')
    with open(path) as f:
        text = f.read()
    params = yaml.safe_load(text)['smcik_node']['ros__parameters']

    def flat(tree, prefix=''):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from flat(value, f'{prefix}{key}.')
            else:
                yield prefix + key, value

    listed = dict(flat(params))
    declared = set(NODE_PARAMETERS) | set(ARRAY_PARAMETERS) | {
        item.name for item in solver_parameters()[0]}
    declared.discard('robot_description')      # the URDF text: the launch file sets it
    commented = {name for name in declared - set(listed)
                 if f'# {name.split(".")[-1]}: []' in text}
    assert not sorted(declared - set(listed) - commented), \
        'config/arm.yaml lacks these (`python -m smcik_ros.node --solver-settings-yaml`)'
    assert not sorted(set(listed) - declared), 'config/arm.yaml sets undeclared parameters'
    defaults = {name: spec[0] for name, spec in NODE_PARAMETERS.items()}
    # The YAML runs the demo arm: these name it; everything else is the declared default.
    for name, value in listed.items():
        if name in defaults and name not in ('urdf_path',):
            assert value == defaults[name], (name, value, defaults[name])
