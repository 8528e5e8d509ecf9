"""The node's alternatives without a ROS graph: control/alternatives.py (listing, publishing
decisions, status, selection through the real SMC filter), the goals with uncertainty
(ros_conversions covariance helpers, the goal inbox's rotation into the base frame) and the
ghost-arm markers."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip('visualization_msgs', reason='the ROS message packages are needed '
                    '(./smcik installs them; or a ROS install)')

from geometry_msgs.msg import Point, Pose, PoseWithCovariance, Quaternion  # noqa: E402
from visualization_msgs.msg import Marker  # noqa: E402

from arm_urdfs import ur5_like_urdf  # noqa: E402
from smcik_ros.ros import markers  # noqa: E402
from smcik_ros.ros import conversions as rc  # noqa: E402
from smcik_ros.collision import KeepOutSphere  # noqa: E402
from smcik_ros.control.alternatives import AlternativesBook, has_alternatives  # noqa: E402
from smcik_ros.control.arm_state import ArmSettings  # noqa: E402
from smcik_ros.control.limits import limits_for_chain  # noqa: E402
from smcik_ros.control.tick import ControlLoop  # noqa: E402
from smcik_ros.control.frames import FrameResolver  # noqa: E402
from smcik_ros.control.goal_inbox import GoalInbox  # noqa: E402
from smcik_ros.errors import GoalError, ParameterError  # noqa: E402
from smcik_ros.goals import PoseTarget, PositionTarget, covariance_to_base  # noqa: E402
from smcik_ros.model import Chain  # noqa: E402
from smcik_ros.rotations import quat_to_matrix, rotvec_to_matrix  # noqa: E402
from smcik_ros.solvers import make_solver  # noqa: E402

URDF = Path(__file__).resolve().parents[1] / 'urdf' / 'smcik_arm.urdf'


@pytest.fixture(scope='module')
def arm():
    return Chain.from_urdf(str(URDF), 'base_link', 'tool0')


def _random_rotation(rng):
    q = rng.normal(size=4)
    return quat_to_matrix(q / np.linalg.norm(q))


def _random_spd(rng, k, scale=1.0):
    a = rng.normal(size=(k, k))
    return scale * (a @ a.T + 0.1 * np.eye(k))


def _settled_filter(chain, seed, steps=150):
    """Return (solver, goal pose, q0): the SMC filter after ``steps`` steps on a nearby goal
    (the nearest search leaves several branches in its archive)."""
    rng = np.random.default_rng(seed)
    solver = make_solver('smc', chain, seed=seed)
    q0 = chain.clip(0.5 * rng.uniform(chain.lower, chain.upper))
    solver.reset(q0)
    goal = chain.fk(chain.clip(q0 + rng.uniform(-0.5, 0.5, chain.n)))
    for _ in range(steps):
        solver.step(goal)
    return solver, goal, q0



def test_the_list_is_reused_until_something_it_depends_on_changes(arm):
    """At rest the node asks for the alternatives while the filter's steps are skipped or
    are rest steps of a settled filter: the same records come back (not recomputed: the same
    objects); a step that is not a settled rest step, a branch selection, a constraint
    change or another count computes them afresh."""
    solver, goal, _ = _settled_filter(arm, seed=4)
    first = solver.alternatives(5)
    again = solver.alternatives(5)
    assert len(first) >= 2 and all(a is b for a, b in zip(first, again))
    assert not any(a is b for a, b in zip(first, solver.alternatives(3)))
    kept = solver.alternatives(5)
    assert solver.settled
    for _ in range(5):
        solver.step(goal)                   # rest steps: the particles move, the estimate not
        assert solver.settled
    assert all(a is b for a, b in zip(kept, solver.alternatives(5)))
    moved = goal.copy()
    moved[:3, 3] += 0.002
    solver.step(moved)                      # the estimate moves with the goal
    stepped = solver.alternatives(5)
    assert not any(a is b for a, b in zip(kept, stepped))
    other = next(i for i, r in enumerate(stepped) if not r.held)
    solver.select_alternative(other)
    assert not any(a is b for a, b in zip(stepped, solver.alternatives(5)))
    before = solver.alternatives(5)
    far = arm.fk(arm.neutral_configuration())[:3, 3] + np.array([0.0, 0.0, 5.0])
    solver.set_constraints([KeepOutSphere(far, 0.01)])
    assert not any(a is b for a, b in zip(before, solver.alternatives(5)))

# ---------------------------------------------------------------------------- the book
def test_lists_several_branches_and_publishes_only_on_change(arm):
    solver, goal, _ = _settled_filter(arm, seed=0)
    book = AlternativesBook(arm.n, max_alternatives=5)
    q_cmd = solver.estimate
    assert book.refresh(solver, 1, q_cmd, now=0.0), 'the first list must be published'
    listed = book.current
    assert 2 <= len(listed) <= 5
    assert listed.q.shape == (len(listed), arm.n)
    # Every listed configuration is its record's (no continuous joint on this arm).
    np.testing.assert_allclose(listed.q, [r.q for r in listed.records])
    held = [r for r in listed.records if r.held]
    assert len(held) == 1 and held[0].distance < 0.05
    # Distinct branches: some joint differs by more than the filter's branch_jump.
    for i in range(len(listed)):
        for j in range(i):
            assert np.max(np.abs(listed.q[i] - listed.q[j])) > solver.settings.branch_jump
    # Within tolerance first, then by cost; the reached ones by distance.
    reached = [r.within_tolerance for r in listed.records]
    assert reached == sorted(reached, reverse=True)
    distances = [r.distance for r in listed.records if r.within_tolerance]
    assert distances == sorted(distances)
    book.mark_published(0.0, 123)
    # Nothing changed: not republished before the interval, republished after it.
    assert not book.refresh(solver, 1, q_cmd, now=0.2)
    assert book.refresh(solver, 1, q_cmd, now=1.3)
    book.mark_published(1.3, 456)
    # A new goal id is a new set.
    assert book.refresh(solver, 2, q_cmd, now=1.4)


def test_status_describes_the_published_list(arm):
    solver, goal, _ = _settled_filter(arm, seed=1)
    book = AlternativesBook(arm.n)
    status = book.status(0.0)
    assert status['alternatives'] == [] and status['alternatives_stamp'] is None
    book.refresh(solver, 7, solver.estimate, now=1.0)
    book.mark_published(1.0, 10**18)
    status = book.status(1.5)
    records = book.published.records
    assert status['alternatives_goal_id'] == 7 and status['alternatives_stamp'] == 10**18
    assert len(status['alternatives']) == len(records)
    for entry, record in zip(status['alternatives'], records):
        assert entry['reached'] == record.within_tolerance and entry['held'] == record.held
        assert entry['distance'] == pytest.approx(record.distance, abs=1e-4)
        assert entry['cost'] == pytest.approx(record.cost, abs=1e-6)
    book.observe(solver, None, 1.5)
    assert status['branch_switch'] is None
    assert book.status(1.5)['confidence'] == pytest.approx(solver.last_info['confidence'],
                                                           abs=1e-4)


def test_a_resting_filter_is_reported_once_per_goal_and_in_the_status(arm):
    """A goal out of reach: once the filter rests (``online_restart_limit``) the book logs
    it once per goal, with the distance left, and ``~/status`` says ``resting``; a new goal
    clears it."""
    reports = []
    book = AlternativesBook(arm.n, report=lambda level, key, text: reports.append((key, text)))
    solver = make_solver('smc', arm, seed=3, online_restart_limit=3)
    solver.reset(arm.neutral_configuration())

    class Goal:
        sequence = 1

    far = PositionTarget(np.array([2.0, 0.5, 0.5]))
    for _ in range(150):
        solver.step(far)
        book.observe(solver, Goal, 0.0)
    assert solver.resting and book.status(0.0)['resting'] is True
    lines = [text for key, text in reports if key == 'resting']
    assert len(lines) == 1 and lines[0].startswith('goal 1: out of reach')
    assert f'{1e3 * solver.last_info["position_error"]:.1f} mm' in lines[0]
    Goal.sequence = 2
    solver.step(arm.fk(arm.neutral_configuration()))
    book.observe(solver, Goal, 0.1)
    assert book.status(0.1)['resting'] is False


def test_single_answer_solvers_have_no_alternatives(arm):
    solver, goal, _ = _settled_filter(arm, seed=2, steps=60)
    book = AlternativesBook(arm.n)
    assert book.refresh(solver, 1, solver.estimate, 0.0)
    book.mark_published(0.0, 1)
    jacobian = make_solver('jacobian', arm)
    jacobian.reset(solver.estimate)
    jacobian.step(goal)
    assert has_alternatives(solver) and not has_alternatives(jacobian)
    # The list becomes void: published once, empty; then nothing more.
    assert book.refresh(jacobian, 1, solver.estimate, 0.1)
    assert len(book.current) == 0
    book.mark_published(0.1, 2)
    assert not book.refresh(jacobian, 1, solver.estimate, 5.0)
    status = book.status(5.0)
    assert status['alternatives'] is None
    assert 'single answer' in status['alternatives_note']
    with pytest.raises(GoalError, match='single answer'):
        book.select(0, jacobian, 1, 5.0)
    # A fresh book with a single-answer solver publishes nothing at all.
    fresh = AlternativesBook(arm.n)
    assert not fresh.refresh(jacobian, 1, solver.estimate, 0.0)
    off = AlternativesBook(arm.n, max_alternatives=0)
    assert not off.refresh(solver, 1, solver.estimate, 0.0)
    assert off.status(0.0)['alternatives'] is None
    with pytest.raises(ParameterError, match='max_alternatives'):
        AlternativesBook(arm.n, max_alternatives=-1)


def test_selecting_an_alternative_moves_the_filter_there_and_it_stays(arm):
    moved = 0
    for seed in range(4):
        solver, goal, _ = _settled_filter(arm, seed=seed)
        book = AlternativesBook(arm.n)
        book.refresh(solver, 1, solver.estimate, 0.0)
        book.mark_published(0.0, 1)
        before = solver.estimate
        with pytest.raises(GoalError, match=r'out of range.*listed \d+ branch'):
            book.select(len(book.published), solver, 1, 0.1)
        np.testing.assert_array_equal(solver.estimate, before)     # nothing changed
        target = book.select(1, solver, 1, 0.1)
        np.testing.assert_allclose(solver.estimate, target)
        switch = book.status(0.2)['branch_switch']
        assert switch['reason'] == 'selected' and switch['goal_id'] == 1
        assert switch['distance'] == pytest.approx(np.max(np.abs(target - before)), abs=1e-3)
        assert book.status(0.2)['branch_switches'] == 1
        selected = book.status(0.2)['selected_alternative']
        assert selected['index'] == 1 and selected['alternatives_stamp'] == 1
        np.testing.assert_allclose(selected['q'], target, atol=1e-6)
        for _ in range(100):
            q = solver.step(goal)
        pos, ori = PoseTarget(goal).errors(arm.frames(q))
        if book.published.records[1].within_tolerance:
            assert pos[0] <= 1e-3 and ori[0] <= 1e-2
        # The filter stays on the selected branch (it does not swing back to the old one).
        if np.max(np.abs(q - target)) < solver.settings.branch_jump:
            moved += 1
    assert moved == 4


def test_continuous_joints_are_listed_near_the_command_and_selected_in_the_solver_range():
    chain = Chain.from_urdf(ur5_like_urdf(continuous=(1, 6)), 'base_link', 'tool0')
    limits, _ = limits_for_chain(chain, 0.5, 3.0)
    solver = make_solver('smc', chain, seed=5)
    q0 = np.array([0.3, -1.2, 1.4, -1.5, -1.2, 0.2])
    solver.reset(q0)
    goal = chain.fk(q0 + 0.3)
    for _ in range(80):
        solver.step(goal)
    book = AlternativesBook(chain.n, limits.continuous)
    q_cmd = solver.estimate + np.array([4 * np.pi, 0, 0, 0, 0, -2 * np.pi])   # unwrapped
    assert book.refresh(solver, 1, q_cmd, 0.0)
    listed = book.current
    assert np.all(np.abs(listed.q[:, 0] - q_cmd[0]) <= np.pi + 1e-9)
    assert np.all(np.abs(listed.q[:, 5] - q_cmd[5]) <= np.pi + 1e-9)
    for q, record in zip(listed.q, listed.records):
        turns = (q - record.q) / (2 * np.pi)
        np.testing.assert_allclose(turns, np.round(turns), atol=1e-9)
        np.testing.assert_allclose(np.round(turns)[1:5], 0.0)
    book.mark_published(0.0, 1)
    book.select(0, solver, 1, 0.1)
    # The solver gets its own coordinate (inside its working range), not the unwrapped one.
    np.testing.assert_allclose(solver.estimate, listed.records[0].q)


def test_a_selection_in_the_control_loop_moves_the_commands_within_the_limits(arm):
    """The real loop and filter, an arm that follows its commands one tick late: the book
    observes every step (confidence latched), a selection moves the commands to the selected
    branch along the limits (velocity and acceleration from the stamps), never by a jump."""
    limits, _ = limits_for_chain(arm, velocity_scale=0.5, max_acceleration=3.0)
    solver = make_solver('smc', arm, seed=4)
    loop = ControlLoop(arm, solver, limits, ArmSettings())
    book = AlternativesBook(arm.n, limits.continuous)
    loop.step_observers.append(book.observe)
    rng = np.random.default_rng(6)
    q0 = np.array([0.2, 0.3, -0.1, -1.4, 0.2, 1.2, 0.1])
    t, commands = 0.0, []

    def run(ticks):
        nonlocal t
        for _ in range(ticks):
            measured = commands[-2].q if len(commands) > 1 else q0
            loop.on_joint_states(measured, t, t)
            t += 0.01 * (1.0 + rng.uniform(-0.2, 0.2))
            command = loop.tick(t)
            if command is not None:
                commands.append(command)

    run(5)
    goal = arm.fk(arm.clip(q0 + rng.uniform(-0.4, 0.4, arm.n)))
    loop.offer_goal('pose', goal, '', None, t)
    run(300)
    assert book.confidence is not None and solver.last_info['within_tolerance']
    assert book.refresh(solver, loop.goal.sequence, loop.q, t)
    book.mark_published(t, 1)
    assert len(book.published) >= 2, 'this goal should have several branches'
    target = book.select(1, solver, loop.goal.sequence, t)
    start = len(commands)
    run(600)
    moved = commands[start - 1:]
    q = np.array([c.q for c in moved])
    stamps = np.array([c.stamp for c in moved])
    assert np.max(np.abs(q[-1] - target)) < 0.01
    assert np.max(np.abs(q[-1] - q[0])) > 0.5
    v = np.diff(q, axis=0) / np.diff(stamps)[:, None]
    v_prev = np.vstack([moved[0].v, v[:-1]])
    a = (v - v_prev) / np.diff(stamps)[:, None]
    assert np.max(np.abs(v) / limits.velocity) <= 1.0 + 1e-9
    assert np.max(np.abs(a) / limits.acceleration) <= 1.0 + 1e-9
    pos, ori = PoseTarget(goal).errors(arm.frames(q[-1]))
    assert pos[0] <= 1e-3 and ori[0] <= 1e-2
    assert book.status(t)['branch_switch']['reason'] == 'selected'


def test_every_switch_of_the_filter_is_latched_with_its_reason(arm):
    """The book observes every solver step through the loop's step_observers (two steps per
    tick here): its switch count follows the filter's own (``branch_switches`` since reset)
    step by step - a selection is counted once, not again when the next step is observed -
    and the last record carries the reason the filter gave. Selecting a branch that reaches
    the goal only approximately makes the filter itself switch on some seeds (seed 1 today:
    'held branch reaches the goal only approximately')."""
    limits, _ = limits_for_chain(arm, velocity_scale=0.5, max_acceleration=3.0)
    reasons = []
    selections = 0
    for seed in range(6):
        solver = make_solver('smc', arm, seed=seed)
        loop = ControlLoop(arm, solver, limits, ArmSettings(), iterations_per_tick=2)
        book = AlternativesBook(arm.n, limits.continuous)
        seen = []

        def watch(solver, goal, now, book=book, seen=seen):
            book.observe(solver, goal, now)
            seen.append((solver.last_info['branch_switches'], book.switches,
                         solver.last_info['branch_switch']))
        loop.step_observers.append(watch)
        rng = np.random.default_rng(seed)
        q0 = np.array([0.2, 0.3, -0.1, -1.4, 0.2, 1.2, 0.1])
        t, commands = 0.0, []
        for k in range(900):
            loop.on_joint_states(commands[-2].q if len(commands) > 1 else q0, t, t)
            t += 0.01
            if k == 5:
                loop.offer_goal('pose', arm.fk(arm.clip(q0 + rng.uniform(-0.4, 0.4, arm.n))),
                                '', None, t)
            if k == 300:
                book.refresh(solver, loop.goal.sequence, loop.q, t)
                book.mark_published(t, k)
                records = book.published.records
                approximate = [i for i, r in enumerate(records)
                               if not r.held and r.within_tolerance]
                if approximate:
                    worst = max(approximate, key=lambda i: records[i].cost)
                    book.select(worst, solver, loop.goal.sequence, t)
            command = loop.tick(t)
            if command is not None:
                commands.append(command)
        for solver_count, book_count, switch in seen:
            assert book_count == solver_count
        filter_switches = [sw for _, _, sw in seen if sw is not None]
        if filter_switches:
            assert book.last_switch['reason'] == filter_switches[-1]['reason']
            assert book.last_switch['distance'] == pytest.approx(filter_switches[-1]['distance'])
        reasons += [sw['reason'] for sw in filter_switches]
        selections += book.selections
    assert selections >= 4, 'the scenario should list several branches on most seeds'
    assert 'selected' not in reasons          # a selection is recorded by the book itself


# ---------------------------------------------------------------------------- covariance
def test_covariance_rotation_matches_a_direct_computation():
    rng = np.random.default_rng(3)
    for _ in range(10):
        rot = _random_rotation(rng)
        cov = _random_spd(rng, 6, 1e-3)
        out = covariance_to_base(cov, rot)
        # Direct: rotate each 3-vector of every sample pair; the covariance of R e.
        direct = np.zeros((6, 6))
        for i in range(6):
            for j in range(6):
                for a in range(3):
                    for b in range(3):
                        direct[i, j] += (rot[i % 3, a] * rot[j % 3, b]
                                         * cov[3 * (i // 3) + a, 3 * (j // 3) + b])
        np.testing.assert_allclose(out, direct, atol=1e-15)
        # The rotational rows turn like vectors: a small rotation w about the fixed axes of
        # the frame is the rotation R w about the base's axes (R exp(w) R^T = exp(R w)).
        w = rng.normal(scale=0.05, size=3)
        np.testing.assert_allclose(rot @ rotvec_to_matrix(w) @ rot.T,
                                   rotvec_to_matrix(rot @ w), atol=1e-12)
        # Position covariances (3, 3) rotate the same way.
        np.testing.assert_allclose(covariance_to_base(cov[:3, :3], rot), out[:3, :3],
                                   atol=1e-15)


def _pwc(cov, position=(0.3, 0.1, 0.4)):
    msg = PoseWithCovariance()
    msg.pose = Pose(position=Point(x=position[0], y=position[1], z=position[2]),
                    orientation=Quaternion(x=0.0, y=0.0, z=0.0, w=1.0))
    msg.covariance = [float(v) for v in np.asarray(cov, dtype=float).ravel()]
    return msg


@pytest.mark.parametrize('make, message', [
    (lambda c: np.where(np.eye(6, dtype=bool), np.nan, c), r'NaN/inf at entries \[0, 7'),
    (lambda c: np.r_[-1.0, np.zeros(35)], 'unknown covariance'),
    (lambda c: np.zeros(36), 'all 36 entries zero'),
    (lambda c: c + np.triu(np.full((6, 6), 1e-3), 1), 'non-symmetric'),
    (lambda c: c - 2.0 * np.eye(6), 'not positive definite'),
    (lambda c: np.diag([1e-4, 1e-4, 1e-4, 1e-2, 1e-2, 0.0]), 'not positive definite'),
])
def test_bad_covariances_are_refused_naming_the_fault(make, message):
    cov = np.diag([1e-4, 1e-4, 4e-4, 1e-2, 1e-2, 1e-2])
    bad = make(cov)
    with pytest.raises(GoalError, match=message) as info:
        rc.pose_with_covariance_to_goal(_pwc(bad))
    assert 'target_pose_with_covariance.pose.covariance' in str(info.value)


def test_covariance_message_is_read_row_major_and_huge_rotations_mean_position_only():
    rng = np.random.default_rng(8)
    cov = _random_spd(rng, 6, 1e-3)
    kind, value, out = rc.pose_with_covariance_to_goal(_pwc(cov))
    assert kind == 'pose' and value.shape == (4, 4)
    np.testing.assert_allclose(out, cov)
    loose = np.diag([1e-4, 2e-4, 3e-4, 1e6, 1e6, 1e6])
    loose[0, 1] = loose[1, 0] = 5e-5
    kind, value, out = rc.pose_with_covariance_to_goal(_pwc(loose))
    assert kind == 'point'
    np.testing.assert_allclose(value, [0.3, 0.1, 0.4])
    np.testing.assert_allclose(out, loose[:3, :3])
    # One rotational variance below the threshold: still a pose goal.
    loose[5, 5] = 1.0
    assert rc.pose_with_covariance_to_goal(_pwc(loose))[0] == 'pose'


def test_goal_inbox_rotates_the_covariance_of_a_goal_in_a_link_frame(arm):
    rng = np.random.default_rng(4)
    inbox = GoalInbox(FrameResolver(arm), arm.tip_link)
    q = arm.clip(rng.uniform(arm.lower, arm.upper))
    link = arm.fk(q, link='link3')
    rot = link[:3, :3]
    cov = _random_spd(rng, 6, 1e-4)
    pose = np.eye(4)
    pose[:3, 3] = [0.1, 0.0, 0.2]
    goal = inbox.offer('pose', pose, 'link3', None, 0.0, q, 'target_pose_with_covariance',
                       covariance=cov)
    target = goal.terms[0]
    assert isinstance(target, PoseTarget)
    big = np.kron(np.eye(2), rot)
    np.testing.assert_allclose(target.covariance, big @ cov @ big.T, atol=1e-15)
    np.testing.assert_allclose(goal.covariance, target.covariance)
    np.testing.assert_allclose(target.pose, link @ pose, atol=1e-12)
    # The whitened cost is r^T S^-1 r in the base frame.
    q2 = arm.clip(q + 0.05)
    frames = arm.frames(q2)
    r = target.residual(frames)[0]
    assert target.cost(frames)[0] == pytest.approx(r @ np.linalg.solve(target.covariance, r),
                                                   rel=1e-9)
    point = inbox.offer('point', pose[:3, 3], 'link3', None, 0.1, q, 'x',
                        covariance=cov[:3, :3])
    assert isinstance(point.terms[0], PositionTarget)
    np.testing.assert_allclose(point.terms[0].covariance, rot @ cov[:3, :3] @ rot.T,
                               atol=1e-15)
    # A bad covariance is refused and the waiting goal stays.
    with pytest.raises(GoalError, match='not positive definite'):
        inbox.offer('pose', pose, 'link3', None, 0.2, q, 'x', covariance=-cov)
    with pytest.raises(GoalError, match=r'expected a \(6, 6\)'):
        inbox.offer('pose', pose, 'link3', None, 0.2, q, 'x', covariance=cov[:3, :3])
    assert inbox.take(0.3) is point


def test_a_covariance_goal_weights_the_residual_the_solver_minimises(arm):
    """Out of reach, the filter trades the directions by the covariance: loose in x, the
    reached point misses in x and hardly in z; loose in z, it misses mostly in z."""
    point = np.array([0.9, 0.0, 0.9])
    for seed in range(3):
        misses = {}
        for axis in (0, 2):
            variances = np.full(3, 1e-6)
            variances[axis] = 1e-2
            solver = make_solver('smc', arm, seed=seed)
            solver.reset(arm.neutral_configuration())
            target = PositionTarget(point, link=arm.tip_link, covariance=np.diag(variances))
            for _ in range(150):
                q = solver.step([target])
            misses[axis] = np.abs(arm.fk(q)[:3, 3] - point)
        assert misses[0][0] > 10 * misses[0][2], (seed, misses)
        assert misses[2][2] > 2 * misses[2][0], (seed, misses)


# ---------------------------------------------------------------------------- messages
def test_alternatives_trajectory_lists_positions_at_time_zero():
    q = np.arange(6.0).reshape(2, 3)
    msg = rc.make_alternatives_trajectory(['a', 'b', 'c'], q)
    assert msg.joint_names == ['a', 'b', 'c'] and len(msg.points) == 2
    for point, row in zip(msg.points, q):
        assert list(point.positions) == row.tolist() and not point.velocities
        assert point.time_from_start.sec == 0 and point.time_from_start.nanosec == 0
    assert rc.make_alternatives_trajectory(['a', 'b', 'c'], np.zeros((0, 3))).points == []


def test_ghost_arms_one_namespace_each_and_deleted_when_gone():
    positions = np.random.default_rng(0).normal(size=(3, 5, 3))
    out = markers.alternative_markers(positions, [True, False, True], 'base_link')
    assert [(m.ns, m.id, m.type) for m in out] == [
        (f'alternative_{k}', i, t) for k in range(3)
        for i, t in ((0, Marker.LINE_STRIP), (1, Marker.TEXT_VIEW_FACING))]
    strip = out[0]
    assert len(strip.points) == 5 and strip.color.a < 0.5
    assert strip.points[4].x == positions[0, 4, 0]
    assert out[2].color.r > out[2].color.b          # not within tolerance: orange
    assert out[1].text == '0' and out[5].text == '2'
    fewer = markers.alternative_markers(positions[:1], [True], 'base_link', shown=3)
    deletes = [(m.ns, m.id) for m in fewer if m.action == Marker.DELETE]
    assert deletes == [('alternative_1', 0), ('alternative_1', 1), ('alternative_2', 0),
                       ('alternative_2', 1)]


def test_switching_the_alternatives_off_publishes_one_empty_list(arm):
    solver, goal, _ = _settled_filter(arm, seed=3, steps=60)
    book = AlternativesBook(arm.n)
    assert book.refresh(solver, 1, solver.estimate, 0.0)
    book.mark_published(0.0, 1)
    assert book.switch_off(0.1, 'alternatives_rate_hz is 0 (off)')
    book.mark_published(0.1, 2)
    assert len(book.published) == 0
    assert not book.switch_off(0.2, 'alternatives_rate_hz is 0 (off)')
    status = book.status(0.3)
    assert status['alternatives'] is None and 'off' in status['alternatives_note']
    # Switched on again: the next refresh lists the branches again.
    assert book.refresh(solver, 1, solver.estimate, 0.4) and len(book.current) >= 1
