"""The goal inbox (newest goal per tick, stale goals, clocks going backwards) and goal frames
(every link of the URDF tree, including links above base_link), checked against yourdfpy."""

import io

import numpy as np
import pytest
import yourdfpy

from arm_urdfs import JOINTS, ur5_like_urdf
from smcik_ros.control.frames import FrameResolver
from smcik_ros.control.goal_inbox import GoalInbox
from smcik_ros.errors import GoalError, ParameterError
from smcik_ros.goals import PoseTarget, PositionTarget
from smcik_ros.model import Chain


@pytest.fixture(scope='module')
def ur5():
    xml = ur5_like_urdf(continuous=(1, 6))
    return Chain.from_urdf(xml, 'base_link', 'tool0'), xml


def reference_pose(xml, q, link, finger=0.0):
    """Pose of ``link`` in base_link by yourdfpy (an independent implementation)."""
    urdf = yourdfpy.URDF.load(io.StringIO(xml), build_scene_graph=True, load_meshes=False)
    cfg = dict(zip(JOINTS, q))
    if 'finger_joint' in urdf.actuated_joint_names:
        cfg['finger_joint'] = finger
    urdf.update_cfg(cfg)
    return urdf.get_transform(link, 'base_link')


@pytest.mark.parametrize('link', ['world', 'camera', 'base_link', 'link3', 'tool0'])
def test_every_static_or_chain_link_matches_yourdfpy(ur5, link):
    chain, xml = ur5
    resolver = FrameResolver(chain)
    q = chain.random_configuration(np.random.default_rng(4))
    assert resolver.kind(link) in ('model', 'static')
    assert np.allclose(resolver.pose(link, q), reference_pose(xml, q, link), atol=1e-9)


def test_world_above_base_is_static(ur5):
    chain, _ = ur5
    resolver = FrameResolver(chain)
    assert resolver.kind('world') == 'static'
    a = resolver.pose('world', chain.random_configuration(np.random.default_rng(1)))
    b = resolver.pose('world', chain.random_configuration(np.random.default_rng(2)))
    assert np.array_equal(a, b)
    # world -> base_link is xyz (0.5, -0.2, 0.8), yaw pi/2: base origin seen from world.
    assert (np.linalg.inv(a)[:3, 3] == pytest.approx([0.5, -0.2, 0.8]))


def test_a_link_moved_by_a_joint_outside_the_chain_names_that_joint(ur5):
    chain, _ = ur5
    resolver = FrameResolver(chain)
    assert resolver.kind('finger_pad') == 'moving'
    with pytest.raises(GoalError, match="prismatic joint 'finger_joint' \\(tool0 -> finger\\) "
                       'moves it and is not part of the modelled chain.*tf2'):
        resolver.pose('finger_pad', np.zeros(6))
    rail = Chain.from_urdf(ur5_like_urdf(rail=True), 'base_link', 'tool0')
    with pytest.raises(GoalError, match="prismatic joint 'rail'"):
        FrameResolver(rail).pose('world', np.zeros(6))
    with pytest.raises(GoalError, match="prismatic joint 'rail'"):
        FrameResolver(rail).pose('camera', np.zeros(6))


def test_unknown_frame_lists_the_links(ur5):
    chain, _ = ur5
    with pytest.raises(GoalError, match="unknown frame 'nowhere': expected an empty frame_id "
                       r'\(= base_link\) or a link of the model: world, base_link, camera, link1'):
        FrameResolver(chain).pose('nowhere', np.zeros(6))


def test_moving_frames_go_to_the_external_lookup(ur5):
    chain, _ = ur5
    asked = []

    def lookup(frame):
        asked.append(frame)
        out = np.eye(4)
        out[:3, 3] = (1.0, 2.0, 3.0)
        return out

    inbox = GoalInbox(FrameResolver(chain), 'tool0', lookup=lookup)
    goal = inbox.offer('point', [0.0, 0.0, 0.0], 'finger_pad', None, 0.0, np.zeros(6))
    assert asked == ['finger_pad'] and goal.display == pytest.approx([1.0, 2.0, 3.0])
    inbox.offer('point', [0.0, 0.0, 0.0], 'world', None, 0.0, np.zeros(6))
    assert asked == ['finger_pad'], 'a static link went to tf2'


def test_goal_in_world_is_converted_to_the_base_frame(ur5):
    chain, xml = ur5
    inbox = GoalInbox(FrameResolver(chain), 'tool0')
    q = np.zeros(6)
    world_in_base = reference_pose(xml, q, 'world')
    pose = np.eye(4)
    pose[:3, 3] = (0.9, 0.1, 1.2)
    goal = inbox.offer('pose', pose, 'world', None, 1.0, q, source='target_pose')
    assert np.allclose(goal.display, world_in_base @ pose)
    assert isinstance(goal.terms[0], PoseTarget) and goal.terms[0].link == 'tool0'
    assert goal.source == "target_pose in 'world'"
    point = inbox.offer('point', [0.9, 0.1, 1.2], '', None, 1.0, q)
    assert isinstance(point.terms[0], PositionTarget)
    assert point.display == pytest.approx([0.9, 0.1, 1.2])


def test_the_newest_goal_wins_and_a_flood_is_counted_not_logged(ur5):
    chain, _ = ur5
    inbox = GoalInbox(FrameResolver(chain), 'tool0')
    assert inbox.take(0.0) is None
    for k in range(1000):       # a 1 kHz stream within one 10 ms tick would be 10; here 1000
        inbox.offer('point', [0.1 + 1e-4 * k, 0.2, 0.3], '', k * 1e-3, k * 1e-3, np.zeros(6))
    goal = inbox.take(1.0)
    assert goal.display == pytest.approx([0.1 + 0.0999, 0.2, 0.3])
    assert goal.sequence == 1000
    assert (inbox.received, inbox.superseded, inbox.applied) == (1000, 999, 1)
    assert inbox.take(1.01) is None, 'a goal is applied once'


def test_a_publisher_clock_going_backwards_keeps_being_heard(ur5):
    chain, _ = ur5
    inbox = GoalInbox(FrameResolver(chain), 'tool0', goal_timeout=0.0)
    inbox.offer('point', [0.1, 0.2, 0.3], '', 100.0, 10.0, np.zeros(6))
    assert inbox.take(10.0) is not None
    later = inbox.offer('point', [0.3, 0.2, 0.1], '', 5.0, 10.1, np.zeros(6))  # stamp went back
    assert inbox.take(10.1) is later


def test_stale_goals_are_judged_by_the_node_clock(ur5):
    chain, _ = ur5
    inbox = GoalInbox(FrameResolver(chain), 'tool0', goal_timeout=0.5)
    with pytest.raises(GoalError, match=r'goal stamped 0.800 s ago \(goal_timeout = 0.5 s\): '
                       'dropped as stale'):
        inbox.offer('point', [0.1, 0.2, 0.3], '', 9.2, 10.0, np.zeros(6))
    fresh = inbox.offer('point', [0.1, 0.2, 0.3], '', 9.9, 10.0, np.zeros(6))
    unstamped = inbox.offer('point', [0.1, 0.2, 0.3], '', None, 10.0, np.zeros(6))
    assert inbox.take(100.0) is unstamped, 'an unstamped goal never goes stale'
    assert fresh.sequence == 1
    inbox.offer('point', [0.1, 0.2, 0.3], '', 10.0, 10.0, np.zeros(6))
    assert inbox.take(10.6) is None, 'went stale while waiting'
    assert inbox.stale == 2
    with pytest.raises(ParameterError, match='goal_timeout must be >= 0'):
        inbox.goal_timeout = -1.0


def test_bad_goals_leave_the_waiting_goal(ur5):
    chain, _ = ur5
    inbox = GoalInbox(FrameResolver(chain), 'tool0')
    kept = inbox.offer('point', [0.1, 0.2, 0.3], '', None, 0.0, np.zeros(6))
    with pytest.raises(GoalError, match='unknown frame'):
        inbox.offer('point', [0.1, 0.2, 0.3], 'nowhere', None, 0.0, np.zeros(6))
    with pytest.raises(GoalError, match='expected 3 coordinates'):
        inbox.offer('point', [0.1, 0.2], '', None, 0.0, np.zeros(6))
    assert inbox.take(0.0) is kept


# ---------------------------------------------------------------------- several tips
TWO_TIPS = str(__import__('pathlib').Path(__file__).parent / 'urdf' / 'two_tips.urdf')
TIPS = ('left_tool', 'right_tool')


@pytest.fixture(scope='module')
def two_tips():
    return Chain.from_urdf(TWO_TIPS, 'base_link', list(TIPS))


def _pose(x, y, z):
    out = np.eye(4)
    out[:3, 3] = (x, y, z)
    return out


def test_each_tip_has_its_slot_and_a_tip_without_a_goal_holds_its_pose(two_tips):
    chain = two_tips
    q = chain.random_configuration(np.random.default_rng(3))
    inbox = GoalInbox(FrameResolver(chain), TIPS)
    goal = inbox.offer('pose', _pose(0.3, 0.2, 0.8), '', None, 1.0, q, tip='right_tool')
    assert [t.link for t in goal.terms] == list(TIPS), 'one target per tip, in tip order'
    assert goal.tips[0] is None and goal.tips[1].tip == 'right_tool'
    assert goal.goal_tips == (1,) and not goal.empty
    hold = goal.terms[0]
    assert isinstance(hold, PoseTarget)
    assert np.allclose(hold.pose, chain.fk(q, 'left_tool'), atol=1e-12), 'held where it was'
    assert np.allclose(goal.terms[1].pose, _pose(0.3, 0.2, 0.8))
    # A goal for the left tip keeps the right one's goal: both slots filled, no hold.
    both = inbox.offer('point', [0.1, 0.4, 0.9], '', None, 1.1, q, tip='left_tool')
    assert isinstance(both.terms[0], PositionTarget) and both.terms[1] is goal.terms[1]
    assert both.goal_tips == (0, 1) and both.sequence == 2
    assert inbox.take(1.2) is both
    with pytest.raises(GoalError, match="'tool0' is not a tip; tips: left_tool, right_tool"):
        inbox.offer('point', [0.1, 0.4, 0.9], '', None, 1.1, q, tip='tool0')


def test_a_release_holds_the_tip_where_it_is_and_the_last_release_empties_the_goal(two_tips):
    chain = two_tips
    rng = np.random.default_rng(5)
    q0, q1 = chain.random_configuration(rng), chain.random_configuration(rng)
    inbox = GoalInbox(FrameResolver(chain), TIPS)
    inbox.hold_at(q0)
    inbox.offer('point', [0.1, 0.4, 0.9], '', None, 0.0, q0, tip='left_tool')
    inbox.offer('point', [0.1, -0.4, 0.9], '', None, 0.0, q0, tip='right_tool')
    inbox.take(0.0)
    released = inbox.release('left_tool', 1.0, q1)
    assert released.tips[0] is None and released.display is None
    assert np.allclose(released.terms[0].pose, chain.fk(q1, 'left_tool'), atol=1e-12), \
        'held at the configuration of the release, not at the start'
    assert inbox.take(1.0) is released and not released.empty
    last = inbox.release('right_tool', 2.0, q1)
    assert last.empty and inbox.released == 2
    assert last.sequence == 4, 'every change of the goals is a new goal'


def test_a_resync_takes_new_hold_poses_for_the_same_goal(two_tips):
    chain = two_tips
    rng = np.random.default_rng(6)
    q0, q1 = chain.random_configuration(rng), chain.random_configuration(rng)
    inbox = GoalInbox(FrameResolver(chain), TIPS)
    inbox.hold_at(q0)
    applied = inbox.offer('point', [0.1, 0.4, 0.9], '', None, 0.0, q0, tip='left_tool')
    assert inbox.take(0.0) is applied
    inbox.hold_at(q1)
    renewed = inbox.take(0.5)
    assert renewed is not None and renewed.sequence == applied.sequence
    assert renewed.terms[0] is applied.terms[0]
    assert np.allclose(renewed.terms[1].pose, chain.fk(q1, 'right_tool'), atol=1e-12)
    assert not np.allclose(applied.terms[1].pose, renewed.terms[1].pose)
    # Every tip with a goal: a resync changes nothing.
    inbox.offer('point', [0.1, -0.4, 0.9], '', None, 1.0, q1, tip='right_tool')
    inbox.take(1.0)
    inbox.hold_at(q0)
    assert inbox.take(1.5) is None


def test_goals_for_every_tip_at_once_are_refused_whole_for_another_count(two_tips):
    chain = two_tips
    q = chain.random_configuration(np.random.default_rng(7))
    inbox = GoalInbox(FrameResolver(chain), TIPS)
    kept = inbox.offer('point', [0.1, 0.4, 0.9], '', None, 0.0, q)
    one = [inbox.convert('pose', _pose(0.3, 0.2, 0.8), '', q, 'left_tool')]
    with pytest.raises(GoalError, match=r'expected 2 goals, one per tip \(left_tool, '
                       r'right_tool\); got 1'):
        inbox.offer_all(one, None, 0.1, q)
    assert inbox.take(0.2) is kept, 'a refused set changes nothing'
    with pytest.raises(GoalError, match=r'expected 2 poses, one per tip'):
        inbox.offer_poses([_pose(0.3, 0.2, 0.8)] * 3, '', None, 0.1, q)
    with pytest.raises(GoalError, match='unknown frame'):
        inbox.offer_poses([_pose(0.3, 0.2, 0.8)] * 2, 'nowhere', None, 0.1, q)
    assert inbox.take(0.2) is None, 'nothing was accepted'
    both = inbox.offer_poses([_pose(0.3, y, 0.8) for y in (0.2, -0.2)], 'torso_link', None,
                             0.3, q, 'target_poses')
    assert both.goal_tips == (0, 1) and both.sequence == 2
    torso = chain.fk(q, 'torso_link')
    assert np.allclose(both.terms[1].pose, torso @ _pose(0.3, -0.2, 0.8), atol=1e-12)


def test_a_stale_goal_leaves_the_slots_of_the_last_applied_goal(two_tips):
    chain = two_tips
    q = chain.random_configuration(np.random.default_rng(8))
    inbox = GoalInbox(FrameResolver(chain), TIPS, goal_timeout=0.5)
    inbox.offer('point', [0.1, 0.4, 0.9], '', 10.0, 10.0, q, tip='left_tool')
    inbox.take(10.0)
    inbox.offer('point', [0.1, -0.4, 0.9], '', 10.0, 10.0, q, tip='right_tool')
    assert inbox.take(11.0) is None, 'went stale while waiting'
    later = inbox.offer('point', [0.2, 0.4, 0.9], '', 11.0, 11.0, q, tip='left_tool')
    assert later.tips[1] is None, "the stale right goal did not stay in its slot"


def test_a_tip_that_met_its_goal_once_is_held_when_another_goal_comes():
    """A tip that was within the tolerances of its goal at some command holds where it is
    at the next goal, though it passed on beyond them (Unitree H1's elbow, its goal kept
    after a pass, went 116 mm off during the other elbow's goal); one that never met its
    goal keeps it, and a new goal for the tip forgets that it met the old one."""
    from smcik_ros.control.goal_inbox import Goal, TipGoal, TipProgress

    def goal(*tips):
        return Goal(terms=(), display=None, source='', stamp=0.0, received=0.0, sequence=1,
                    tips=tips)

    progress, tolerances = TipProgress(), (1e-3, 1e-2)
    left, right = TipGoal('left', None, None, '', None), TipGoal('right', None, None, '', None)
    both = goal(left, right)
    for t, errors in enumerate([[(0.05, 0.0), (0.05, 0.0)],
                                [(0.0009, 0.009), (0.0011, 0.0)],   # left within, right not
                                [(0.004, 0.0), (0.003, 0.0)]]):     # both beyond
        progress.note(both, errors, tolerances, 0.1 * t)
    assert progress.stalled(both, ['left', 'right'], 0.3) == {
        'left': 'met an earlier goal within the tolerances'}
    progress.note(goal(left, None), [(0.004, 0.02), None], tolerances, 0.4)
    assert 'left' in progress.stalled(both, ['left'], 0.4), 'the same goal stays met'
    renewed = goal(TipGoal('left', None, None, '', None), right)
    progress.note(renewed, [(0.004, 0.0), (0.003, 0.0)], tolerances, 0.5)
    assert progress.stalled(renewed, ['left', 'right'], 0.6) == {}


def test_a_tip_that_has_not_reached_its_goal_in_patience_is_held_though_it_closes_in():
    """TipProgress, on the clock of the ticks that note the errors: a tip closing in on its
    goal keeps it until PATIENCE; after that it is held when another tip's goal comes (Talos's
    left hand, still 20-135 mm short after 10 s, moved on by that much during the right
    hand's next goal). One that comes no nearer is held after STALL_TIME, and each new goal
    of a tip (a teleoperation stream) starts its clocks again."""
    from smcik_ros.control.goal_inbox import PATIENCE, STALL_TIME, Goal, TipGoal, TipProgress

    def goal(*tips):
        return Goal(terms=(), display=None, source='', stamp=0.0, received=0.0, sequence=1,
                    tips=tips)

    left = TipGoal('left', None, None, '', None)
    progress, tolerances, dt = TipProgress(), (1e-3, 1e-2), 0.01
    closing = goal(left, None)
    errors = [(0.3, 0.0), (0.0, 0.0)]
    t = 0.0
    while t < PATIENCE - 0.1:       # 10 mm/s nearer: 5 % of the error every 1.5 s or less
        progress.note(closing, errors, tolerances, t)
        assert progress.stalled(closing, ['left'], t) == {}, t
        errors[0] = (errors[0][0] - 0.01 * dt, 0.0)
        t += dt
    t = PATIENCE + 0.05
    progress.note(closing, errors, tolerances, t)
    assert progress.stalled(closing, ['left'], t) == {
        'left': f'did not reach an earlier goal in {PATIENCE:g} s'}
    assert progress.stalled(closing, ['right'], t) == {}      # only the tips asked about
    renewed = goal(TipGoal('left', None, None, '', None), None)
    progress.note(renewed, errors, tolerances, t)
    assert progress.stalled(renewed, ['left'], t + 0.5 * STALL_TIME) == {}
    assert progress.stalled(renewed, ['left'], t + STALL_TIME) == {
        'left': f'came no nearer an earlier goal for {STALL_TIME:g} s'}
