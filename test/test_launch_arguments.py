"""What launch/arm.launch.py decides (smcik_ros/launch_arguments.py), without launch: the
URDF and its old argument name, params_file, xacro_args, srdf_path, package_paths, unknown
argument names, and why a launch failed (ExitWatch)."""

import ast
from pathlib import Path

import pytest

from smcik_ros import launch_arguments as la
from smcik_ros.errors import ModelError, ParameterError

ROOT = Path(__file__).resolve().parents[1]
SHARE = str(ROOT)          # the package's share directory has the repository's layout
ARM7 = ROOT / 'urdf' / 'smcik_arm.urdf'
ARM6 = ROOT / 'urdf' / 'smcik_arm6.urdf'


def _plan(**values):
    return la.plan(values, SHARE)


def test_by_default_the_demo_arm_of_params_file():
    plan = _plan()
    assert plan.urdf_path == str(ARM7.resolve())
    assert plan.params_file == str((ROOT / 'config' / 'arm.yaml').resolve())
    assert plan.robot_description == ARM7.read_text()
    node = plan.smcik_node
    assert node['urdf_path'] == plan.urdf_path and node['robot_description'] == ARM7.read_text()
    # params_file's chain and wiring, given to sim_arm too; nothing else overrides params_file
    assert node['base_link'] == 'base_link' and node['tip_link'] == 'tool0'
    assert node['command_type'] == 'joint_state' and node['command_topic'] == 'joint_commands'
    assert set(node) == {'robot_description', 'urdf_path', 'base_link', 'tip_link',
                         'command_type', 'command_topic'}
    assert plan.sim_arm == node
    assert plan.sim and plan.rviz and plan.rviz_config.endswith('config/arm.rviz')
    assert plan.notes == []


def test_urdf_path_wins_over_params_file_and_reaches_the_nodes_as_a_path(tmp_path,
                                                                         monkeypatch):
    """The issue's case: a user's arm given as urdf_path (relative to the shell's cwd) while
    params_file (config/arm.yaml) names the demo arm: the nodes get the user's file, as a
    path too (relative meshes, the SRDF beside it)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'arm6.urdf').write_text(ARM6.read_text())
    plan = _plan(urdf_path='arm6.urdf', tip_link='tool0', srdf_path=str(ROOT / 'urdf' /
                                                                        'smcik_arm6.srdf'))
    assert plan.urdf_path == str(tmp_path / 'arm6.urdf')
    for params in (plan.smcik_node, plan.sim_arm):
        assert params['urdf_path'] == str(tmp_path / 'arm6.urdf')
        assert params['robot_description'] == ARM6.read_text()
        assert params['srdf_path'] == str((ROOT / 'urdf' / 'smcik_arm6.srdf').resolve())


def test_the_old_name_urdf_warns_and_disagreeing_with_urdf_path_is_an_error(tmp_path):
    plan = _plan(urdf=str(ARM6))
    assert plan.urdf_path == str(ARM6.resolve())
    ((level, text),) = plan.notes
    assert level == 'warning' and 'old name of urdf_path' in text and 'urdf_path:=' in text
    plan = _plan(urdf=str(ARM6), urdf_path=str(ARM6))
    assert plan.urdf_path == str(ARM6.resolve()) and plan.notes[0][0] == 'warning'
    with pytest.raises(ParameterError, match='name different files: urdf is the old name of '
                                             'urdf_path, give urdf_path only'):
        _plan(urdf=str(ARM6), urdf_path=str(ARM7))


def test_a_missing_urdf_names_the_argument():
    with pytest.raises(ModelError, match="launch argument urdf_path '/no/such.urdf' does not "
                                         'exist'):
        _plan(urdf_path='/no/such.urdf')


def test_a_params_file_of_the_users_own_names_the_robot(tmp_path):
    """No urdf_path argument: params_file's smcik_node urdf_path (wildcard sections too) is
    the robot, for robot_state_publisher as well."""
    params = tmp_path / 'mine.yaml'
    params.write_text(f'/**:\n  ros__parameters:\n    tip_link: link6\n'
                      f'smcik_node:\n  ros__parameters:\n    urdf_path: {ARM6}\n'
                      f'    base_link: base_link\n    solver: jacobian\n')
    plan = _plan(params_file=str(params))
    assert plan.urdf_path == str(ARM6.resolve())
    assert plan.robot_description == ARM6.read_text()
    assert plan.sim_arm['tip_link'] == 'link6' and plan.sim_arm['base_link'] == 'base_link'
    assert 'solver' not in plan.smcik_node        # params_file's own, not overridden
    assert _plan(params_file=str(params), tip_link='tool0').sim_arm['tip_link'] == 'tool0'
    empty = tmp_path / 'empty.yaml'
    empty.write_text('sim_arm:\n  ros__parameters:\n    rate_hz: 10.0\n')
    with pytest.raises(ParameterError, match='no robot: give urdf_path'):
        _plan(params_file=str(empty))
    broken = tmp_path / 'broken.yaml'
    broken.write_text('smcik_node: [\n')
    with pytest.raises(ParameterError, match='params_file .* cannot be read'):
        _plan(params_file=str(broken))


def test_launch_arguments_given_override_params_file_typed():
    plan = _plan(solver='jacobian', max_acceleration='2.5', max_lead='0.2',
                 joint_limits_path='/x/joint_limits.yaml', command_topic='/arm/commands')
    node = plan.smcik_node
    assert node['solver'] == 'jacobian'
    assert node['max_acceleration'] == 2.5 and isinstance(node['max_acceleration'], float)
    assert node['max_lead'] == 0.2 and isinstance(node['max_lead'], float)
    assert node['joint_limits_path'] == '/x/joint_limits.yaml'
    assert plan.sim_arm['command_topic'] == '/arm/commands' and 'solver' not in plan.sim_arm
    with pytest.raises(ParameterError, match="max_lead:='far': expected a number"):
        _plan(max_lead='far')
    with pytest.raises(ParameterError, match="sim:='yes': expected true or false"):
        _plan(sim='yes')
    assert not _plan(sim='false', rviz='0').sim


def test_package_paths(tmp_path):
    (tmp_path / 'a').mkdir()
    (tmp_path / 'b').mkdir()
    want = [str(tmp_path / 'a'), str(tmp_path / 'b')]
    for text in (f'{tmp_path}/a:{tmp_path}/b', f'{tmp_path}/a, {tmp_path}/b',
                 f'[{tmp_path}/a, {tmp_path}/b]'):
        assert la.parse_package_paths(text) == want, text
    assert _plan(package_paths=f'{tmp_path}/a').smcik_node['package_paths'] == want[:1]
    assert 'package_paths' not in _plan().smcik_node       # params_file's
    with pytest.raises(ParameterError, match="package_paths entry '/no/such' is not a "
                                             'directory'):
        la.parse_package_paths('/no/such')


def test_xacro_args():
    assert la.parse_xacro_args("ur_type:=ur5 name:=ur 'prefix:=left arm_'") == {
        'ur_type': 'ur5', 'name': 'ur', 'prefix': 'left arm_'}
    assert la.parse_xacro_args('') == {}
    with pytest.raises(ParameterError, match="'ur5' is not name:=value"):
        la.parse_xacro_args('ur_type:=ur5 ur5')
    plan = _plan(xacro_args='ur_type:=ur5')          # a .urdf: ignored, said so
    assert plan.notes == [('warning', f"xacro_args ignored: params_file's urdf_path "
                                      f"{str(ARM7.resolve())!r} is not a .xacro")]


XACRO = ARM6.read_text().replace('<robot name="smcik_arm6"',
                                 '<robot xmlns:xacro="http://www.ros.org/wiki/xacro" '
                                 'name="$(arg name)"')


def test_a_xacro_with_arguments(tmp_path):
    pytest.importorskip('xacro', reason='xacro is not installed (apt: ros-$ROS_DISTRO-xacro)')
    path = tmp_path / 'arm.urdf.xacro'
    path.write_text(XACRO)
    srdf = tmp_path / 'arm.srdf.xacro'
    srdf.write_text((ROOT / 'urdf' / 'smcik_arm6.srdf').read_text().replace(
        'name="smcik_arm6"', 'xmlns:xacro="http://www.ros.org/wiki/xacro" name="$(arg name)"'))
    plan = _plan(urdf_path=str(path), xacro_args='name:=mine', srdf_path=str(srdf))
    assert '<robot name="mine"' in plan.robot_description
    assert plan.smcik_node['robot_description'] == plan.robot_description
    # smcik_node would read the file again without the arguments: it gets the XML alone
    assert plan.smcik_node['urdf_path'] == '' and plan.notes[0][0] == 'info'
    # a .xacro SRDF is expanded with the same arguments and given as XML
    assert 'name="mine"' in plan.smcik_node['robot_description_semantic']
    assert plan.smcik_node['srdf_path'] == '' and 'srdf_path' not in plan.sim_arm
    with pytest.raises(ModelError, match='xacro failed on .*no arguments'):
        _plan(urdf_path=str(path))


def test_unknown_argument_names_are_an_error_listing_the_valid_ones():
    la.check_names(['urdf_path', 'tip_link', 'launch-prefix'])
    with pytest.raises(ParameterError) as err:
        la.check_names(['urdf_pth', 'tip_link'])
    text = str(err.value)
    assert 'unknown launch argument urdf_pth (did you mean urdf_path?)' in text
    assert 'ignore it silently' in text and ', '.join(la.ARGUMENT_NAMES) in text
    with pytest.raises(ParameterError, match=r'description_file \(did you mean urdf_path\?\), '
                                             r'launch_rviz \(did you mean rviz\?\)'):
        la.check_names(['description_file', 'launch_rviz'])
    with pytest.raises(ParameterError, match=r"ur_type \(an argument of the .xacro\? give it "
                                             r"as xacro_args:='ur_type:=...'\)"):
        la.check_names(['ur_type'], xacro=True)
    assert la.given_names(['urdf_path:=/a.urdf', 'x:=1:=2', 'urdf_path:=/b', 'noise']) == [
        'urdf_path', 'x']


def test_only_a_launch_file_named_on_the_command_line_checks_its_names():
    here = '/ws/install/smcik_ros/share/smcik_ros/launch/arm.launch.py'
    assert la.named_on_command_line(['launch', 'smcik_ros', 'arm.launch.py', 'a:=b'], here)
    assert la.named_on_command_line(['launch', '/x/arm.launch.py'], here)
    assert not la.named_on_command_line(['launch', 'my_robot', 'bringup.launch.py',
                                         'arm.launch.py:=x'], here)
    assert not la.named_on_command_line(['test/test_launch.py'], here)


def test_every_argument_is_declared_by_the_launch_file_and_documented():
    """arm.launch.py declares exactly ARGUMENTS (it imports them); docs/node.md names each."""
    tree = ast.parse((ROOT / 'launch' / 'arm.launch.py').read_text())
    declared = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(
        node.func, 'id', None) == 'DeclareLaunchArgument']
    assert len(declared) == 1 and 'launch_arguments.ARGUMENTS' in ast.unparse(tree)
    doc = (ROOT / 'docs' / 'node.md').read_text()
    run_it = doc[doc.index('## Run it'):doc.index('### Goals from RViz')]
    missing = [name for name in la.ARGUMENT_NAMES if f'`{name}`' not in run_it]
    assert not missing, missing


# --------------------------------------------------------------------- why a launch failed
FATAL = ('\x1b[31m[FATAL] [1732851234.123456789] [smcik_node]: cannot start: unknown solver '
         "'nope'; available solvers: smc, jacobian\x1b[0m\n")


def test_a_node_that_cannot_start_fails_the_launch_with_its_reason_once_all_exited():
    watch = la.ExitWatch()
    for name in ('robot_state_publisher', 'smcik_node', 'sim_arm'):
        watch.expect(name)
    watch.output('smcik_node', b'[INFO] [1.0] [smcik_node]: model from ...\n[FATAL] [1.')
    watch.output('smcik_node', FATAL[len('\x1b[31m[FATAL] [1.'):].encode())
    assert watch.exited('smcik_node', 1) is None            # the others still run
    watch.shutdown('smcik_node exited', False)
    assert watch.exited('robot_state_publisher', 0) is None
    assert watch.exited('sim_arm', 0) == (
        "smcik_node exited with code 1: cannot start: unknown solver 'nope'; available "
        'solvers: smc, jacobian')


def test_ctrl_c_is_no_failure_and_a_crash_names_its_last_line():
    watch = la.ExitWatch()
    watch.expect('smcik_node')
    watch.expect('rviz2')
    watch.shutdown('ctrl-c (SIGINT)', True)
    assert watch.exited('rviz2', -2) is None                 # ended by launch's SIGINT
    assert watch.exited('smcik_node', 0) is None
    assert watch.message() is None
    watch = la.ExitWatch()                      # the terminal's SIGINT came before launch's
    for name in ('robot_state_publisher', 'smcik_node', 'sim_arm'):
        watch.expect(name)
    assert watch.exited('robot_state_publisher', -2) is None
    watch.shutdown('ctrl-c (SIGINT)', True)
    assert watch.exited('sim_arm', -9) is None               # launch's escalation
    assert watch.exited('smcik_node', -11) == 'smcik_node exited with code -11'   # SIGSEGV
    watch = la.ExitWatch()
    watch.expect('sim_arm')
    watch.output('sim_arm', 'Traceback (most recent call last):\n  File "x"\n'
                            'ValueError: bad thing')
    assert watch.exited('sim_arm', 1) == 'sim_arm exited with code 1: ValueError: bad thing'
    watch = la.ExitWatch()
    watch.expect('a')
    watch.expect('b')
    watch.output('a', '[ERROR] [1.0] [a]: first\n[ERROR] [2.0] [a]: second\n')
    assert watch.exited('a', 2) is None
    assert watch.exited('b', -9) == 'a exited with code 2: second (then also b (code -9))'
