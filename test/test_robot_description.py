"""Robot description loading without a ROS graph: path resolution, URDF and .xacro files."""

from pathlib import Path

import pytest

from smcik_ros.errors import ModelError
from smcik_ros.model import Chain
from smcik_ros.robot_description import read_urdf_file, resolve_path

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
