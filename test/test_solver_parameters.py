"""Solver settings as ROS parameters, without ROS: declarations, values back to settings."""

import dataclasses

import pytest

from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain
from smcik_ros.solver_parameters import (make_solver_from, settings_changes, solver_parameters,
                                         solver_settings_yaml)
from smcik_ros.solvers import available_solvers, settings_type


def fields_of(declared):
    out = {}
    for item in declared:
        out.setdefault(item.solver, []).append(item.field)
    return out


def test_every_setting_of_every_solver_is_a_parameter_with_its_default_and_unit():
    declared, skipped = solver_parameters()
    assert skipped == []
    by_name = {item.name: item for item in declared}
    for solver in available_solvers():
        for field in dataclasses.fields(settings_type(solver)):
            item = by_name[f'{solver}.{field.name}']
            assert item.default == field.default and item.kind is type(field.default)
    assert '[m] task noise std, position' in by_name['smc.sigma_position'].description
    # Every setting's description is its field's comment (read from the settings class's
    # source), not the bare field name.
    bare = [item.name for item in declared
            if item.description.startswith(f'{item.solver} solver: {item.field} (default')]
    assert bare == []


def test_values_become_settings_and_changes_are_found():
    declared, _ = solver_parameters()
    fields = fields_of(declared)
    values = {item.name: item.default for item in declared}
    chain = Chain.from_urdf('urdf/smcik_arm.urdf')
    solver = make_solver_from(fields, 'smc', chain, dict(values, **{'smc.num_particles': 40}))
    assert solver.settings.num_particles == 40
    wanted = dict(values, **{'smc.smoothing_alpha': 0.5, 'jacobian.gain': 0.3})
    assert settings_changes(fields, 'smc', values, wanted) == {'smoothing_alpha': 0.5}
    as_ros = dict(values, **{'smc.joint_noise_per_joint': [0.05] * 7})   # ROS gives a list
    solver = make_solver_from(fields, 'smc', chain, as_ros)
    assert solver.settings.joint_noise_per_joint == (0.05,) * 7
    with pytest.raises(ParameterError, match="unknown solver 'nope'; available solvers: smc"):
        make_solver_from(fields, 'nope', chain, values)
    with pytest.raises(ParameterError, match='num_particles must be >= 1'):
        make_solver_from(fields, 'smc', chain, dict(values, **{'smc.num_particles': 0}))


def test_settings_yaml_lists_every_solver_block():
    text = solver_settings_yaml()
    for solver in available_solvers():
        assert f'    {solver}:\n' in text
