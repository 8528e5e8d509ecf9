"""Robot description loading without a ROS graph: path resolution, URDF and .xacro files,
the URDF file behind the model and which SRDF applies."""

import os
from pathlib import Path

import pytest

from conftest import private_domain_id
from smcik_ros.errors import ModelError
from smcik_ros.model import Chain
from smcik_ros.ros.description import (SEMANTIC_TOPIC, SrdfSources, read_urdf_file,
                                       resolve_path, urdf_file_of)

ROOT = Path(__file__).resolve().parents[1]

XACRO = """<?xml version="1.0"?>
<robot xmlns:xacro="http://www.ros.org/wiki/xacro" name="two">
  <xacro:property name="length" value="0.3"/>
  <link name="base_link"/>
  <xacro:macro name="segment" params="i parent">
    <link name="link${i}"/>
    <joint name="joint${i}" type="revolute">
      <parent link="${parent}"/><child link="link${i}"/><origin xyz="0 0 ${length}"/>
      <axis xyz="0 1 0"/><limit lower="-2" upper="2" velocity="1" effort="1"/>
    </joint>
  </xacro:macro>
  <xacro:segment i="1" parent="base_link"/>
  <xacro:segment i="2" parent="link1"/>
  <link name="tool0"/>
  <joint name="tool" type="fixed"><parent link="link2"/><child link="tool0"/></joint>
</robot>
"""


def _installed_share(prefix):
    """Make ``prefix`` an install prefix whose ament index knows smcik_ros; return its share
    directory (holding urdf/smcik_arm.urdf, a copy)."""
    index = prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    (index / 'smcik_ros').write_text('')
    share = prefix / 'share' / 'smcik_ros'
    (share / 'urdf').mkdir(parents=True)
    (share / 'urdf' / 'smcik_arm.urdf').write_text(
        (ROOT / 'urdf' / 'smcik_arm.urdf').read_text())
    return share


def test_relative_paths_resolve_against_the_cwd_first(tmp_path, monkeypatch):
    (tmp_path / 'urdf').mkdir()
    (tmp_path / 'urdf' / 'smcik_arm.urdf').write_text('<robot name="here"/>')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'no_prefix'))
    assert resolve_path('urdf/smcik_arm.urdf') == tmp_path / 'urdf' / 'smcik_arm.urdf'


def test_relative_paths_resolve_against_the_repository_without_an_install(tmp_path,
                                                                          monkeypatch):
    """No ament index that knows smcik_ros (this checkout, not sourced): the repository."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv('AMENT_PREFIX_PATH', raising=False)
    assert resolve_path('urdf/smcik_arm.urdf') == ROOT / 'urdf' / 'smcik_arm.urdf'
    with pytest.raises(ModelError, match="joint_limits_path 'nope.yaml' not found; tried"):
        resolve_path('nope.yaml', 'joint_limits_path')
    with pytest.raises(ModelError, match="urdf_path '/nope.urdf' does not exist"):
        resolve_path('/nope.urdf')


def test_relative_paths_resolve_against_the_installed_share_before_the_repository(
        tmp_path, monkeypatch):
    """A sourced install (colcon test runs the suite there): its share directory answers
    before the repository."""
    pytest.importorskip('ament_index_python', reason='ament_index_python is not installed')
    share = _installed_share(tmp_path / 'install')
    monkeypatch.setenv('AMENT_PREFIX_PATH', str(tmp_path / 'install'))
    monkeypatch.chdir(tmp_path)
    assert resolve_path('urdf/smcik_arm.urdf') == share / 'urdf' / 'smcik_arm.urdf'
    with pytest.raises(ModelError) as err:
        resolve_path('nope.yaml', 'joint_limits_path')
    assert str(share / 'nope.yaml') in str(err.value) and str(ROOT / 'nope.yaml') in str(
        err.value)


def test_a_urdf_path_with_spaces_is_read(tmp_path):
    path = tmp_path / 'my robot' / 'arm.urdf'
    path.parent.mkdir()
    path.write_text((ROOT / 'urdf' / 'smcik_arm.urdf').read_text())
    assert Chain.from_urdf(read_urdf_file(path)).n == 7


def test_xacro_goes_through_xacro_or_says_how_to_get_it(tmp_path):
    path = tmp_path / 'two.urdf.xacro'
    path.write_text(XACRO)
    try:
        import xacro  # noqa: F401
    except ImportError:
        with pytest.raises(ModelError, match='xacro package is not installed: install it'):
            read_urdf_file(path)
        return
    chain = Chain.from_urdf(read_urdf_file(path))
    assert chain.joint_names == ('joint1', 'joint2')


def test_the_urdf_file_is_kept_only_for_the_same_robot(tmp_path):
    """The file behind the model (its relative meshes, the SRDF beside it): urdf_path when the
    XML came from it, or from elsewhere when the file describes the same robot; another robot
    is warned about and not used."""
    arm = str(ROOT / 'urdf' / 'smcik_arm.urdf')
    xml = Path(arm).read_text()
    assert urdf_file_of('', xml, 'the robot_description parameter') == (None, None)
    assert urdf_file_of(arm, xml, f'urdf_path {arm!r}') == (arm, None)
    assert urdf_file_of(arm, xml, 'the robot_description parameter') == (arm, None)
    other = tmp_path / 'two.urdf.xacro'
    other.write_text(XACRO)
    path, note = urdf_file_of(str(ROOT / 'urdf' / 'smcik_arm6.urdf'), xml, 'the topic')
    assert path is None and 'describes another robot than the XML from the topic' in note
    assert urdf_file_of(str(tmp_path / 'missing.urdf'), xml, 'the topic') == (None, None)
    # A .xacro is judged by its unexpanded robot name: another literal name is another robot;
    # a name its arguments decide (the launch file expanded it with xacro_args) is taken.
    path, note = urdf_file_of(str(other), xml, 'the robot_description parameter')
    assert path is None and 'describes another robot' in note
    named = tmp_path / 'named.urdf.xacro'
    named.write_text(XACRO.replace('name="two"', 'name="$(arg name)"'))
    assert urdf_file_of(str(named), xml, 'the robot_description parameter') == (str(named), None)


def test_the_srdf_parameters_win_over_the_topic_and_the_convention():
    """robot_description_semantic, else srdf_path, else the topic's SRDF, else the one beside
    the URDF; the topic is taken only while no parameter names an SRDF and only when it
    brings another SRDF than the one applied."""
    arm = str(ROOT / 'urdf' / 'smcik_arm.urdf')
    srdf = str(ROOT / 'urdf' / 'smcik_arm.srdf')
    sources = SrdfSources(arm)
    none = {'robot_description_semantic': '', 'srdf_path': ''}
    assert sources.topic_wanted(none)
    assert sources.choose(none) == (srdf, f'{srdf!r} (found beside the URDF)', False)
    assert sources.choose(none, '<robot/>') == ('<robot/>', f'the {SEMANTIC_TOPIC} topic',
                                                True)
    path = dict(none, srdf_path='urdf/smcik_arm6.srdf')
    source, where, explicit = sources.choose(path, '<robot/>')
    assert source.endswith('smcik_arm6.srdf') and explicit and not sources.topic_wanted(path)
    text = dict(none, robot_description_semantic='<robot name="x"/>', srdf_path=srdf)
    assert sources.choose(text, '<robot/>')[0] == '<robot name="x"/>'
    sources.applied = '<robot/>'
    assert not sources.take_topic('<robot/>', none)          # the one applied
    assert not sources.take_topic('  ', none)
    assert not sources.take_topic('<robot a="1"/>', path)      # a parameter names one
    assert sources.take_topic('<robot a="1"/>', none)
    with pytest.raises(ModelError, match="srdf_path 'nowhere.srdf' not found"):
        sources.choose(dict(none, srdf_path='nowhere.srdf'))
def test_xacro_arguments_reach_the_xacro(tmp_path):
    pytest.importorskip('xacro', reason='xacro is not installed (apt: ros-$ROS_DISTRO-xacro)')
    path = tmp_path / 'named.urdf.xacro'
    path.write_text(XACRO.replace('name="two"', 'name="$(arg name)"'))
    assert '<robot name="mine"' in read_urdf_file(path, {'name': 'mine'})
    with pytest.raises(ModelError, match='no arguments'):
        read_urdf_file(path)


def test_the_wait_for_the_robot_description_names_its_topic_every_period():
    """No robot_description, no urdf_path: the wait logs the topic it waits on (as
    remapped) at its start and every log_period, then fails naming it."""
    rclpy = pytest.importorskip('rclpy', reason='rclpy is needed for the wait')
    from smcik_ros.ros.description import load_robot_description

    topic = f'/smcik_wait_test_{os.getpid()}/robot_description'
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=private_domain_id(os.getpid() + 71))
    node = rclpy.create_node('smcik_wait_test', context=context, cli_args=[
        '--ros-args', '-r', f'/robot_description:={topic}'])
    lines = []

    class Recorder:
        def info(self, text):
            lines.append(text)
    node.get_logger = Recorder
    try:
        node.declare_parameter('robot_description', '')
        node.declare_parameter('urdf_path', '')
        with pytest.raises(ModelError, match=f'nothing arrived on {topic} within 0.7 s'):
            load_robot_description(node, 0.7, log_period=0.2)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert lines and f'waiting up to 0.7 s for the robot description on {topic}' in lines[0]
    notices = [line for line in lines[1:] if line.startswith('still waiting')]
    assert len(notices) >= 2 and len(notices) == len(lines) - 1, lines
    assert all(topic in line and 'urdf_path' in line for line in notices), notices
