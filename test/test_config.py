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
