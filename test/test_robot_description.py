"""Robot description loading without a ROS graph: path resolution, URDF and .xacro files,
the URDF file behind the model and which SRDF applies."""

from pathlib import Path

import pytest

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


def test_relative_paths_resolve_against_the_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path('urdf/smcik_arm.urdf') == ROOT / 'urdf' / 'smcik_arm.urdf'
    with pytest.raises(ModelError, match="joint_limits_path 'nope.yaml' not found; tried"):
        resolve_path('nope.yaml', 'joint_limits_path')
    with pytest.raises(ModelError, match="urdf_path '/nope.urdf' does not exist"):
        resolve_path('/nope.urdf')


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
