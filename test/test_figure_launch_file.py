"""launch/figure.launch.py, config/figure.rviz, config/figure.yaml and the goal markers,
checked without launch (test_launch_figure.py runs the launch under colcon test).

The launch file imports launch and launch_ros, which the PyPI venv has not: it is read with
``ast`` here, and its two pure helpers are compiled from that tree and called.
"""

import ast
from pathlib import Path
import types

import numpy as np
import pytest
import yaml

from smcik_ros.ros import goal_markers

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'figure.launch.py'
RVIZ = ROOT / 'config' / 'figure.rviz'
PARAMS = ROOT / 'config' / 'figure.yaml'
REQUIRED = {'tip_links', 'floating_base', 'world_frame', 'urdf_path', 'params_file', 'rviz'}


@pytest.fixture(scope='module')
def tree():
    return ast.parse(LAUNCH.read_text())


def _declared(tree):
    """Return {argument: default (str, or the joined path parts)} of DeclareLaunchArgument."""
    out = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == 'DeclareLaunchArgument':
            name = call.args[0].value
            default = next(k.value for k in call.keywords if k.arg == 'default_value')
            if isinstance(default, ast.Call):       # PathJoinSubstitution([share, 'a', 'b'])
                default = '/'.join(e.value for e in default.args[0].elts
                                   if isinstance(e, ast.Constant))
            elif isinstance(default, ast.JoinedStr):
                default = None                       # an f-string: checked below
            else:
                default = default.value
            out[name] = default
    return out


def _helpers(tree):
    """Compile parse_tip_links, parse_flag and DEFAULT_TIPS out of the launch file's tree."""
    keep = [node for node in tree.body
            if (isinstance(node, ast.FunctionDef) and node.name in ('parse_tip_links',
                                                                     'parse_flag'))
            or (isinstance(node, ast.Assign) and node.targets[0].id == 'DEFAULT_TIPS')]
    module = types.ModuleType('figure_launch_helpers')
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(LAUNCH), 'exec'), module.__dict__)
    return module


def _node_params():
    return yaml.safe_load(PARAMS.read_text())['smcik_node']['ros__parameters']


def test_launch_arguments_and_their_defaults(tree):
    declared = _declared(tree)
    assert REQUIRED <= set(declared)
    assert declared['urdf_path'] == 'urdf/smcik_figure.urdf'
    assert declared['params_file'] == 'config/figure.yaml'
    assert declared['rviz_config'] == 'config/figure.rviz'
    for relative in (declared['urdf_path'], declared['params_file'], declared['rviz_config']):
        assert (ROOT / relative).is_file(), relative
    assert declared['floating_base'] == 'true' and declared['world_frame'] == 'world'
    assert declared['base_link'] == _node_params()['base_link']
    helpers = _helpers(tree)
    assert helpers.parse_tip_links(f'[{helpers.DEFAULT_TIPS}]') == _node_params()['tip_links']


def test_tip_links_and_flags_parse_like_a_user_types_them(tree):
    helpers = _helpers(tree)
    for text in ('[left_hand, right_hand]', 'left_hand,right_hand', 'left_hand right_hand',
                 "['left_hand', 'right_hand']", ' [ "left_hand" ,"right_hand" ] '):
        assert helpers.parse_tip_links(text) == ['left_hand', 'right_hand'], text
    with pytest.raises(RuntimeError, match='expected link names'):
        helpers.parse_tip_links('[]')
    assert helpers.parse_flag('rviz', 'True') and not helpers.parse_flag('rviz', '0')
    with pytest.raises(RuntimeError, match="rviz:='yes': expected true or false"):
        helpers.parse_flag('rviz', 'yes')


def test_launch_starts_goal_markers_only_when_installed_and_says_so_otherwise(tree):
    text = LAUNCH.read_text()
    assert "executable='goal_markers'" in text and 'interactive_markers is not installed' in text
    setup = (ROOT / 'setup.py').read_text()
    assert "'goal_markers = smcik_ros.ros.goal_markers:main'" in setup


def test_rviz_config_has_the_per_tip_goal_tools_and_views():
    config = yaml.safe_load(RVIZ.read_text())['Visualization Manager']
    assert config['Global Options']['Fixed Frame'] == _node_params()['world_frame']
    topics = [tool['Topic']['Value'] for tool in config['Tools']
              if tool['Class'] == 'rviz_default_plugins/PublishPoint']
    assert topics == ['/targets/left_hand/point', '/targets/right_hand/point']
    displays = {d['Class']: d for d in config['Displays']}
    assert displays['rviz_default_plugins/InteractiveMarkers'][
        'Interactive Markers Namespace'] == '/' + goal_markers.SERVER_NAMESPACE
    for needed in ('RobotModel', 'TF', 'MarkerArray'):
        assert f'rviz_default_plugins/{needed}' in displays
    markers = [d['Topic']['Value'] for d in config['Displays']
               if d['Class'] == 'rviz_default_plugins/MarkerArray']
    assert '/smcik_node/particles' in markers


def test_figure_yaml_sets_only_parameters_the_nodes_declare():
    """A dead entry would be ignored by ROS without a word. Until the figure's node
    parameters land (figure-node), those few are the only ones allowed to be unknown."""
    pytest.importorskip('rclpy', reason='the parameter table declares rclpy types')
    from smcik_ros.ros.parameters import ARRAY_PARAMETERS, NODE_PARAMETERS
    from smcik_ros.ros.solver_parameters import solver_parameters

    declared = set(NODE_PARAMETERS) | set(ARRAY_PARAMETERS) | {
        item.name for item in solver_parameters()[0]}
    pending = {'tip_links', 'floating_base', 'world_frame', 'initial_base_pose',
               'publish_base_tf'}
    unknown = set(_node_params()) - declared
    if 'tip_links' in declared:
        assert unknown == set()
    else:
        assert unknown <= pending


def test_goal_marker_is_a_6dof_marker_named_after_its_tip():
    pytest.importorskip('visualization_msgs')
    from geometry_msgs.msg import Pose
    from visualization_msgs.msg import InteractiveMarkerControl

    marker = goal_markers.make_marker('left_hand', 'world', Pose(), scale=0.3)
    assert (marker.name, marker.header.frame_id, marker.scale) == ('left_hand', 'world', 0.3)
    moves = [c for c in marker.controls
             if c.interaction_mode == InteractiveMarkerControl.MOVE_AXIS]
    turns = [c for c in marker.controls
             if c.interaction_mode == InteractiveMarkerControl.ROTATE_AXIS]
    assert len(moves) == len(turns) == 3

    def axis(control):       # the x axis of the control's orientation
        o = control.orientation
        w, x, y, z = o.w, o.x, o.y, o.z
        return np.array([1 - 2 * (y * y + z * z), 2 * (x * y + w * z), 2 * (x * z - w * y)])
    for group in (moves, turns):
        axes = np.array([axis(c) for c in group])
        np.testing.assert_allclose(np.abs(axes), np.eye(3), atol=1e-12)


def test_feedback_becomes_the_tips_goal():
    pytest.importorskip('visualization_msgs')
    from visualization_msgs.msg import InteractiveMarkerFeedback

    feedback = InteractiveMarkerFeedback(marker_name='right_hand')
    feedback.header.frame_id = 'world'
    feedback.pose.position.x, feedback.pose.orientation.w = 0.4, 1.0
    tip, goal = goal_markers.feedback_to_goal(feedback)
    assert tip == 'right_hand'
    assert goal.header.frame_id == 'world' and goal.pose.position.x == 0.4


def test_goal_markers_without_interactive_markers_says_so_and_exits_0(capsys):
    if goal_markers.interactive_markers_available():
        pytest.skip('interactive_markers is installed here')
    assert goal_markers.main([]) == 0
    assert 'interactive_markers package is not installed' in capsys.readouterr().out


def test_what_the_figure_launch_takes_from_elsewhere_exists(tree):
    """Every function it calls on launch/arm.launch.py is defined there, and what it imports
    from smcik_ros is there (a renamed reader once broke the launch only under ros2 launch)."""
    arm_tree = ast.parse((ROOT / 'launch' / 'arm.launch.py').read_text())
    defined = {n.name for n in arm_tree.body if isinstance(n, ast.FunctionDef)}
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == 'arm'}
    assert used and used <= defined, used - defined
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('smcik_ros'):
            module = __import__(node.module, fromlist=['_'])
            for alias in node.names:
                assert hasattr(module, alias.name), f'{node.module}.{alias.name}'
