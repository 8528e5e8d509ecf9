"""Solver settings as ROS parameters, without ROS: declarations, values back to settings."""

import dataclasses

import pytest

from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain
from smcik_ros.ros.solver_parameters import (SolverChoice, make_solver_from, settings_changes,
                                             solver_parameters, solver_settings_yaml)
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
    with pytest.raises(ParameterError, match='num_particles must be >= 0'):
        make_solver_from(fields, 'smc', chain, dict(values, **{'smc.num_particles': -1}))


def test_settings_yaml_lists_every_solver_block():
    text = solver_settings_yaml()
    for solver in available_solvers():
        assert f'    {solver}:\n' in text


class _Loop:
    """What SolverChoice uses of a ControlLoop: set_solver and solver."""

    def __init__(self, solver):
        self.solver = solver
        self.switched = []

    def set_solver(self, solver):
        self.switched.append(solver)
        self.solver = solver


def test_solver_choice_checks_everything_first_then_switches_or_updates():
    """A switch builds the new solver and hands it the constraints before anything changes
    (a bad setting of it is refused, the running one stays); new settings of the running
    solver update it in place (its state kept); settings of another solver only build it."""
    declared, _ = solver_parameters()
    fields = fields_of(declared)
    values = {item.name: item.default for item in declared}
    values['solver'] = 'smc'
    chain = Chain.from_urdf('urdf/smcik_arm.urdf')
    logged, given = [], []

    class Constraints(list):
        pass
    choice = SolverChoice(fields, chain, 'smc', lambda: values,
                          lambda: given.append(1) or Constraints(), lambda *a: logged.append(a))
    running = choice.build(values)
    loop = _Loop(running)
    changes = {'smc.smoothing_alpha': 0.4}
    wanted = dict(values, **changes)
    choice.check(changes, wanted)
    choice.apply(loop, changes, wanted)
    assert loop.solver is running and running.settings.smoothing_alpha == 0.4
    assert loop.switched == [] and 'smoothing_alpha=0.4' in logged[-1][1]
    values.update(changes)
    changes = {'jacobian.gain': 0.3}
    choice.check(changes, dict(values, **changes))
    choice.apply(loop, changes, dict(values, **changes))
    assert loop.switched == [] and len(logged) == 1                 # nothing to say
    bad = {'solver': 'jacobian', 'jacobian.max_step': -1.0}
    with pytest.raises(ParameterError, match='max_step'):
        choice.check(bad, dict(values, **bad))
    assert choice.name == 'smc' and not given                       # refused before
    switch = {'solver': 'jacobian'}
    choice.check(switch, dict(values, **switch))
    assert given == [1]                                              # constraints checked
    choice.apply(loop, switch, dict(values, **switch))
    assert choice.name == 'jacobian' and type(loop.solver).__name__ == 'JacobianSolver'
    assert 'solver switched from smc to jacobian' in logged[-1][1]
    assert choice.owns('solver') and choice.owns('ccd.gain') and not choice.owns('rate_hz')
