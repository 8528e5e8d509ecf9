"""The detour round an obstacle (control/detour.py, ControlLoop hooks) on the demo arm.

The arm (urdf/smcik_arm.urdf + its SRDF, the real covers) starts on one side of a box and gets a
pose goal on the other: without the detour it stops at the margin. Every command and the motion
between commands are checked by python-fcl on the URDF's own shapes (collision_helpers), the
limits on every tick from the commands' positions and stamps.
"""


import dataclasses
import time

import fcl
import numpy as np
import pytest

from collision_helpers import FclRobot, demo_model, fcl_obstacle, substeps
from test_control_loop import SLACK, Log, Stream, follower, make_loop

from smcik_ros.collision import Obstacle, self_collision_pairs
from smcik_ros.control.base import FigureState
from smcik_ros.control.collision_guard import CollisionGuard
from smcik_ros.control.detour import Detour, DetourSettings, detour_hold
from smcik_ros.control.detour_planner import END_CLEARANCE, FREE_ITERATIONS, DetourPlanner
from smcik_ros.control.goal_inbox import Goal
from smcik_ros.control.limits import limits_for_chain
from smcik_ros.errors import ParameterError
from smcik_ros.model import Chain
from smcik_ros.goals import Contact, PoseTarget
from smcik_ros.solvers import make_solver

URDF = 'urdf/smcik_arm.urdf'
SRDF = 'urdf/smcik_arm.srdf'
BOX = (0.12, 0.12, 0.12)


@pytest.fixture(scope='module')
def demo():
    chain, model = demo_model(URDF)
    return chain, model, FclRobot(URDF, 'base_link')


def blocked_case(chain, model, trial):
    """Return (guard, q0, q_goal, box Obstacle): a box half way on the joint-1 swing."""
    rng = np.random.default_rng(trial)
    guard = CollisionGuard(model, self_collision_pairs(model, SRDF))
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0]) + rng.uniform(-0.2, 0.2, 7)
    q_goal = q0.copy()
    q_goal[0] += rng.uniform(1.2, 1.8) * rng.choice([-1.0, 1.0])
    pose = np.eye(4)
    pose[:3, 3] = chain.fk(0.5 * (q0 + q_goal))[:3, 3]
    box = Obstacle('box', BOX, pose)
    guard.scene.apply([('add', ('test', 1), box)], 'obstacles')
    return guard, q0, q_goal, box


def run_loop(chain, guard, q0, goal_pose, trial, ticks, detour=True, settings=None,
             during=None, validate=True):
    """Tick a loop with the guard (and a detour) until ``ticks``; ``during(stream, k)`` is
    called before each tick; without ``validate`` the guard is only the solver's constraint.
    Returns (loop, limits, stream, tick the goal was reached)."""
    loop, limits = make_loop(chain, solver=make_solver('smc', chain, seed=trial), log=Log())
    if validate:
        loop.validators.append(guard)
    loop.set_constraints([guard.constraint])
    if detour:
        loop.detour = Detour(chain, limits, settings or DetourSettings(seed=trial))
    stream = Stream(loop, seed=trial)
    stream.measure(q0)
    stream.tick()
    loop.offer_goal('pose', goal_pose, '', None, stream.t)
    reached = None
    arm = follower(1)
    for k in range(ticks):
        if during is not None:
            during(stream, k)
        arm(stream)
        stream.tick()
        if reached is None and loop.goal_reached:
            reached = k
        if reached is not None and k > reached + 50:
            break
    return loop, limits, stream, reached


def fcl_contacts(chain, robot, box, qs, resolution=0.004):
    """Return how many of the distinct commands, and sub-steps at most ``resolution`` apart
    on any joint between consecutive ones, touch the box (python-fcl, the URDF's own
    shapes)."""
    obstacle = fcl_obstacle(box)
    bad = 0
    request = fcl.CollisionRequest()
    for q in substeps(qs, resolution):
        objects = robot.objects(dict(zip(chain.joint_names, q)))
        if any(fcl.collide(o, obstacle, request, fcl.CollisionResult())
               for items in objects.values() for o in items):
            bad += 1
    return bad


def check_stream(chain, limits, stream):
    qs = np.array([c.q for c in stream.commands])
    assert np.all(np.isfinite(qs))
    assert np.all(qs >= limits.lower - SLACK) and np.all(qs <= limits.upper + SLACK)
    v_ratio, a_ratio = stream.worst_ratios(limits)
    assert v_ratio <= 1 + SLACK and a_ratio <= 1 + SLACK
    return qs


# ---------------------------------------------------------------------- settings
def test_settings_are_validated():
    with pytest.raises(ParameterError, match='margin'):
        DetourSettings(margin=-1.0)
    with pytest.raises(ParameterError, match='goal_seeds'):
        DetourSettings(goal_seeds=0)
    with pytest.raises(ParameterError, match='max_attempts'):
        DetourSettings(max_attempts=1.5)
    with pytest.raises(ParameterError, match='unknown detour setting'):
        DetourSettings().replace(budgett=1.0)
    assert DetourSettings(budget='0.01').budget == 0.01


# ---------------------------------------------------------------------- the legs
def test_a_certified_leg_passes_the_guards_own_motion_check(demo):
    """Every leg the planner certifies free is free for the guard's sub-stepped check (the
    validator of every command), and the certification is not trivial: some legs fail."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    planner = DetourPlanner(chain, make_loop(chain)[1], DetourSettings(seed=0))
    planner.prepare((guard.constraint,), None, ())
    rng = np.random.default_rng(1)
    certified = refused = 0
    for _ in range(60):
        a = q0 + rng.normal(0.0, 0.3, 7)
        b = q_goal + rng.normal(0.0, 0.3, 7)
        a, b = chain.clip(a), chain.clip(b)
        free = _run_generator(planner._leg(a, b))
        if free:
            certified += 1
            assert guard.check_many(a, b[None])[0], 'a certified leg collides'
            assert guard.check_many(b, a[None])[0], 'a certified leg collides backwards'
        else:
            refused += 1
    assert certified >= 5 and refused >= 5, (certified, refused)


def test_a_slow_clearance_is_certified_in_small_units_with_the_same_verdicts(demo,
                                                                           monkeypatch):
    """Each unit of a leg's certification (one yield, one clearance batch) is sized to
    about UNIT_SECONDS of its measured cost per sample: with clearance made to cost 2 ms a
    sample (a big robot's covers), the batches after the first hold one sample, and every
    leg gets the verdict it gets with the fast clearance."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    rng = np.random.default_rng(2)
    legs = [(chain.clip(q0 + rng.normal(0.0, 0.3, 7)),
             chain.clip(q_goal + rng.normal(0.0, 0.3, 7))) for _ in range(20)]
    fast = DetourPlanner(chain, make_loop(chain)[1], DetourSettings(seed=0))
    fast.prepare((guard.constraint,), None, ())
    verdicts = [_run_generator(fast._leg(a, b)) for a, b in legs]
    slow = DetourPlanner(chain, make_loop(chain)[1], DetourSettings(seed=0))
    slow.prepare((guard.constraint,), None, ())
    sizes, clearance = [], DetourPlanner.clearance

    def costly(self, qs, constraints=None):
        sizes.append(len(np.atleast_2d(qs)))
        time.sleep(0.002 * sizes[-1])
        return clearance(self, qs, constraints)
    monkeypatch.setattr(DetourPlanner, 'clearance', costly)
    assert [_run_generator(slow._leg(a, b)) for a, b in legs] == verdicts
    assert True in verdicts and False in verdicts
    batches = sizes[2:]            # after the first leg's ends (2) and unmeasured batch (8)
    assert batches and max(batches) <= 2, sizes


def _run_generator(work):
    try:
        while True:
            next(work)
    except StopIteration as result:
        return result.value


def _at_the_margin(chain, guard, q0, q_goal, margin):
    """Return the configuration on the straight line q0 -> q_goal where the padded clearance
    first drops below ``margin`` / 3 (bisection on the line)."""
    clear = lambda q: guard.constraint.distances(chain.frames(q[None])).distance[0]
    low, high = 0.0, 0.5        # the box is half way
    assert clear(q0) > margin and clear(q0 + high * (q_goal - q0)) < 0.0
    for _ in range(40):
        mid = 0.5 * (low + high)
        if clear(q0 + mid * (q_goal - q0)) > margin / 3.0:
            low = mid
        else:
            high = mid
    return q0 + low * (q_goal - q0)


def test_the_push_out_leaves_the_margin_by_a_short_free_motion(demo):
    """An arm stopped at the margin with no recent commands to go back along (it came there
    on a detour's leg, or the goal sits at the box): the retreat pushes it out along the
    closest pairs' gradients to at least twice the margin, by a short motion the guard's own
    sub-stepped check accepts."""
    chain, model, _ = demo
    for trial in range(6):
        guard, q0, q_goal, _ = blocked_case(chain, model, trial)
        planner = DetourPlanner(chain, make_loop(chain)[1], DetourSettings(seed=trial))
        margin = planner.settings.margin
        start = _at_the_margin(chain, guard, q0, q_goal, margin)
        planner.prepare((guard.constraint,),
                        lambda a, b: bool(guard.check_many(a, b[None])[0]), ())
        assert planner.clearance(start[None])[0] < margin
        out = _run_generator(planner._retreat(start))
        assert out is not None, f'trial {trial}: no way out of the margin'
        assert planner.clearance(out[None])[0] >= 2.0 * margin
        assert guard.check_many(start, out[None])[0]
        assert np.max(np.abs(out - start)) < 0.6, np.abs(out - start)


def test_a_goal_whose_nearest_solution_collides_is_found_with_the_collision_constraints(
        demo):
    """The goal search's second pass: a sphere put on the unconstrained IK solution from a
    seed (so that solution collides) while the goal's own configuration stays free. The
    collision-constrained solve from the same seed finds a free solution of the goal in
    most cases; no answer it gives closer than the end clearance is taken."""
    chain, model, _ = demo
    rng = np.random.default_rng(5)
    free_ik = make_solver('jacobian', chain, seed=0)
    cases = found = 0
    while cases < 10:
        guard = CollisionGuard(model, self_collision_pairs(model, SRDF))
        q_goal = chain.random_configuration(rng)
        seed = chain.random_configuration(rng)
        terms = [PoseTarget(chain.fk(q_goal))]
        plain = free_ik.solve(terms, seed, max_iters=100, tol=(5e-4, 5e-3))
        if not plain.success or np.max(np.abs(plain.q - q_goal)) < 0.3:
            continue
        pose = np.eye(4)
        pose[:3, 3] = chain.fk(plain.q, 'link4')[:3, 3]
        guard.scene.apply([('add', ('test', 3), Obstacle('sphere', (0.04,), pose))],
                          'obstacles')
        clear = guard.constraint.distances(chain.frames(np.array([plain.q, q_goal])))
        if clear.distance[0] >= 0.0 or clear.distance[1] < 0.01 or \
                guard.constraint.in_collision(chain.frames(seed[None]))[0]:
            continue
        cases += 1
        planner = DetourPlanner(chain, make_loop(chain)[1], DetourSettings(seed=cases))
        planner.prepare((guard.constraint,), None, ())
        result = _run_generator(planner.free_solver.solve_steps(
            terms, seed, max_iters=FREE_ITERATIONS, tol=(5e-4, 5e-3)))
        q = planner._goal_configuration(result, seed, [])
        if q is not None:
            found += 1
            assert planner.clearance(q[None])[0] >= END_CLEARANCE
            assert guard.constraint.distances(chain.frames(q[None])).distance[0] >= 0.0
    assert found >= 6, f'{found}/{cases} goals found with the collision constraints'


# ---------------------------------------------------------------------- going round
def test_without_the_detour_the_arm_stops_at_the_margin(demo):
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    loop, _, _, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 0, 500, detour=False)
    assert reached is None and loop.guard.holds > 0
    assert loop.status(0.0)['detour'] == 'off'


def test_a_detour_runs_beside_an_equality_it_cannot_leave_and_never_beside_a_contact(demo):
    """A detour's joint-space legs leave the contacts that the commands are projected onto:
    every projection back was refused and PR2 (example-robot-data, a goal on one gripper,
    the other pinned, before pins were held) braked for the rest of the goal. So no detour
    is planned while a contact's link moves with the joints (``FigureState.binds``; a
    pinned tip is held instead: the next test); a hard contact that no joint moves (the
    base link's) leaves the detour as it was."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    base = Contact('base_link', pose=np.eye(4)).bind(chain)

    def keep_the_base(stream, k):
        if k == 0:
            stream.loop.set_constraints([guard.constraint, base])

    loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 0, 1500,
                                             during=keep_the_base)
    assert loop.figure.active and not loop.figure.binds
    assert reached is not None and loop.status(stream.t)['detours']['completed'] >= 1
    check_stream(chain, limits, stream)
    two = Chain.from_urdf('test/urdf/two_tips.urdf', 'base_link', ['left_tool', 'right_tool'])
    figure = FigureState(two, limits_for_chain(two, 0.5, 3.0)[0])
    figure.set_constraints([Contact('right_tool', pose=np.eye(4)).bind(two)])
    assert figure.binds and detour_hold(figure) is None, 'a contact moves: no detour'


def _pinned_right(chain, q, left_goal):
    """Return a FigureState of ``chain`` whose right tip is pinned where q puts it while the
    left one has ``left_goal`` (4, 4)."""
    figure = FigureState(chain, limits_for_chain(chain, 0.5, 3.0)[0])
    right = chain.frames(q).link_pose('right_tool')[0]
    goal = Goal(terms=(PoseTarget(left_goal, link='left_tool').bind(chain),
                       PoseTarget(right, link='right_tool').bind(chain)),
                display=None, source='', stamp=0.0, received=0.0, sequence=1,
                tips=('left', None))
    assert len(figure.pin_tips(goal, None, q, (1e-3, 1e-2))) == 1 and figure.binds
    return figure, goal


@pytest.mark.parametrize('base', ['torso_link', 'base_link'])
def test_a_pinned_tip_is_held_where_it_is_through_a_detour(base):
    """Two arms on a torso, a goal for the left tip, the right one pinned. The detour holds
    every joint on the pinned tip's path (``detour_hold``): the right arm, and the torso
    joint where the chain has it (from base_link: it moves both tips). Seeded boxes across
    the left arm's swing: the planned paths keep those joints at the start on every
    waypoint (so the pinned tip stays exactly), their legs are certified free, and they end
    at the left goal."""
    chain, model = demo_model('test/urdf/two_tips.urdf', base, ('left_tool', 'right_tool'))
    right = chain.moving('right_tool')
    planned = 0
    for trial in range(6):
        rng = np.random.default_rng(trial)
        start = np.r_[[0.0] * (chain.nq - 6), -0.8, 1.0, 0.0, 0.8, 1.0, 0.0]
        q0 = chain.clip(rng.uniform(-0.3, 0.3, chain.nq) + start)
        q_goal = q0.copy()
        shoulder = chain.nq - 6             # the left shoulder (after the torso, if any)
        q_goal[shoulder] += 1.6 if q0[shoulder] < 0 else -1.6
        q_goal = chain.clip(q_goal)
        figure, goal = _pinned_right(chain, q0, chain.fk(q_goal, 'left_tool'))
        held = detour_hold(figure)
        assert held is not None and np.array_equal(held, right)
        guard = CollisionGuard(model, self_collision_pairs(model, None))
        pose = np.eye(4)
        pose[:3, 3] = chain.fk(0.5 * (q0 + q_goal), 'left_tool')[:3, 3]
        guard.scene.apply([('add', ('test', 1), Obstacle('box', (0.08, 0.08, 0.08), pose))],
                          'obstacles')
        assert not guard.check_many(q0, q_goal[None])[0], 'the box does not block the swing'
        planner = DetourPlanner(chain, limits_for_chain(chain, 0.5, 3.0)[0],
                                DetourSettings(seed=trial))
        planner.prepare((guard.constraint,), lambda a, b: bool(guard.check_many(a, b[None])[0]),
                        (), held)
        path, reason = _run_generator(planner.plan(q0, goal.terms, (1e-3, 1e-2)))
        if path is None:
            continue
        planned += 1
        assert np.array_equal(path[:, right], np.tile(q0[right], (len(path), 1)))
        assert planner.certify(path)
        pos, ori = goal.terms[0].errors(chain.frames(path[-1:]))
        assert pos[0] <= 1e-3 and ori[0] <= 1e-2, (trial, pos, ori)
    assert planned >= 4, planned


def test_the_detour_reaches_goals_behind_a_box_without_collision(demo):
    """Seeded statistics over box placements and start/goal draws: >= 80 % reached within
    15 s of simulated time, no command or motion between commands touching the box (FCL),
    the limits hold on every tick."""
    chain, model, robot = demo
    trials = 10
    reached_count = 0
    for trial in range(trials):
        guard, q0, q_goal, box = blocked_case(chain, model, trial)
        loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), trial,
                                                 1500)
        qs = check_stream(chain, limits, stream)
        assert fcl_contacts(chain, robot, box, qs) == 0, f'trial {trial}: a contact'
        status = loop.status(stream.t)
        if reached is not None:
            reached_count += 1
            assert status['detours']['completed'] >= 1, status
            assert status['detour'] == 'done' and 'reached' in status['detour_text']
    assert reached_count >= 0.8 * trials, f'{reached_count}/{trials} reached'


def test_a_start_resting_in_contact_plans_and_never_gets_deeper(demo):
    """The arm's base stands on a table whose box overlaps the base's cover (the covers
    are conservative; Unitree Z1 folded at its zero pose rests likewise on its own links).
    No joint moves the base, so no push out can clear the margin there: the detour's
    start check ignores the pairs resting in contact, and its legs hold them to their
    depth by the command stream's own check. Seeded trials: >= 70 % reached, no command
    touching the box (FCL), the table pair never deeper than at the start."""
    chain, model, robot = demo
    table = Obstacle('box', (1.2, 1.2, 0.1), _translation(0.0, 0.0, -0.052))
    trials, reached_count, planned = 6, 0, 0
    for trial in range(trials):
        guard, q0, q_goal, box = blocked_case(chain, model, trial)
        guard.scene.apply([('add', ('test', 2), table)], 'obstacles')
        start = _table_depth(guard, chain, q0)
        assert start < -0.005           # the cover penetrates the table
        loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), trial,
                                                 1500)
        qs = check_stream(chain, limits, stream)
        assert fcl_contacts(chain, robot, box, qs) == 0, f'trial {trial}: a contact'
        depths = [_table_depth(guard, chain, q) for q in qs[::10]]
        assert min(depths) >= start - 1e-6, (trial, min(depths), start)
        status = loop.status(stream.t)
        planned += status['detours']['planned']
        reached_count += reached is not None
    assert planned >= trials and reached_count >= 0.7 * trials, (planned, reached_count)


def _translation(x, y, z):
    pose = np.eye(4)
    pose[:3, 3] = (x, y, z)
    return pose


def _table_depth(guard, chain, q):
    """The padded distance of the closest pair at q that involves the table (obstacle 2)."""
    report = guard.constraint.distances(chain.frames(np.asarray(q)[None]))
    assert report.names[0] == ('base_link', 'test/2'), report.names
    return float(report.distance[0])


def test_held_at_the_margin_is_a_block_and_an_answer_within_tolerance_is_not(demo):
    """The trigger's second test (no refusal needed: the solvers keep out of collision, so
    on some arms the answer itself stops at the margin): blocked when the solver's answer is
    outside the goal's tolerance and the command within ``near`` of the box; not when the
    answer reaches the goal (a selected alternative, a goal being reached), nor during a
    hold (no answer: the refusal is the trigger then)."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    loop, _, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 0, 300,
                                        detour=False)
    assert reached is None and loop.guard.holds > 0, 'the set-up: held at the margin'
    detour = Detour(chain, make_loop(chain)[1], DetourSettings(seed=0))
    assert loop.estimate is None and not detour._held_at_margin(loop)   # a hold: no answer
    # One tick with the solver's answer and no validator: outside tolerance, at the margin.
    loop.validators.remove(guard)
    stream.run(1, follower(1))
    assert loop.estimate is not None and detour._held_at_margin(loop)
    # A goal back at the (free) start: once the answer is within tolerance, no block.
    loop.offer_goal('pose', chain.fk(q0), '', None, stream.t)
    for _ in range(300):
        stream.run(1, follower(1))
        pos, ori = (float(v[0]) for v in loop.goal.terms[0].errors(chain.frames(loop.estimate)))
        if pos <= loop.tolerances[0] and ori <= loop.tolerances[1]:
            break
    assert pos <= loop.tolerances[0] and ori <= loop.tolerances[1]
    assert not detour._held_at_margin(loop)


def test_held_at_the_margin_is_computed_once_per_command_answer_and_scene(demo, monkeypatch):
    """An arm held short of its goal asks ``_held_at_margin`` every tick with the same
    command and answer: one distance query then, not one per tick; a new command, a scene
    change (the constraint's version) or a new goal is asked again, with the verdict a
    fresh detour object gives."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    loop, _, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 0, 300,
                                        detour=False)
    loop.validators.remove(guard)
    stream.run(1, follower(1))
    detour = Detour(chain, make_loop(chain)[1], DetourSettings(seed=0))
    calls = []
    clearance = DetourPlanner.clearance
    monkeypatch.setattr(DetourPlanner, 'clearance',
                        lambda self, *a, **k: (calls.append(1), clearance(self, *a, **k))[1])
    held = detour._held_at_margin(loop)
    assert held and len(calls) == 1
    for _ in range(20):
        assert detour._held_at_margin(loop) == held
    assert len(calls) == 1

    def fresh():
        return Detour(chain, make_loop(chain)[1], DetourSettings(seed=0))._held_at_margin(loop)

    guard.scene.apply([('add', ('test', 'far'), Obstacle.sphere((3.0, 3.0, 3.0), 0.1))],
                      'test')
    assert detour._held_at_margin(loop) == fresh() and len(calls) == 3
    for _ in range(2):                      # the next command, then a new goal
        stream.run(1, follower(1))
        assert detour._held_at_margin(loop) == fresh()
        assert detour._margin_memo[0][0] == np.asarray(loop.q, dtype=float).tobytes()
        assert detour._margin_memo[0][3].objects[0] is loop.goal
        loop.offer_goal('pose', chain.fk(q0), '', None, stream.t)


def test_patience_starts_a_detour_while_the_error_still_decreases(demo):
    """A filter that keeps switching branches round an obstacle lowers its error in small
    steps for many seconds, so 'no progress for trigger_time' may never hold: a blocked goal
    not reached after ``patience`` starts a detour anyway, and not before."""
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 0)
    loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 0, 300,
                                             detour=False)
    assert reached is None and loop.guard.holds > 0, 'the set-up: held at the margin'
    stream.run(1, follower(1))
    assert loop.refusal(within=50) is not None, 'the set-up: a recent refusal'
    now = stream.t
    # Progress never stalls for trigger_time here (60 s): only patience can fire.
    detour = Detour(chain, limits, DetourSettings(seed=0, trigger_time=60.0, patience=1.0))
    assert not detour.observe(loop, now)              # the goal is seen: patience starts
    assert not detour.observe(loop, now + 0.9)
    assert detour.observe(loop, now + 1.1)
    assert detour.trigger.startswith('not reached after 1.1 s')
    patient = Detour(chain, limits, DetourSettings(seed=0, trigger_time=60.0, patience=600.0))
    assert not any(patient.observe(loop, now + t) for t in (0.0, 1.1, 30.0))
    # The stalled trigger still says so.
    stalled = Detour(chain, limits, DetourSettings(seed=0, trigger_time=0.5, patience=600.0))
    assert not stalled.observe(loop, now) and stalled.observe(loop, now + 0.6)
    assert stalled.trigger == 'without progress for 0.5 s'
    # The same goal again (a new Goal object, the same signature) keeps the patience
    # running; another goal starts it again.
    again = Detour(chain, limits, DetourSettings(seed=0, trigger_time=60.0, patience=1.0))
    assert not again.observe(loop, now)
    loop.goal = dataclasses.replace(loop.goal, sequence=loop.goal.sequence + 1)
    assert not again.observe(loop, now + 0.5) and again.observe(loop, now + 1.1)
    loop.goal = dataclasses.replace(loop.goal, terms=(PoseTarget(chain.fk(q0)),))
    assert not again.observe(loop, now + 1.2) and not again.observe(loop, now + 2.1)
    assert again.observe(loop, now + 2.3)
    with pytest.raises(ParameterError, match='patience'):
        DetourSettings(patience=-1.0)


# ---------------------------------------------------------------------- cancelling
def _first_following(stream):
    return stream.loop.detour is not None and stream.loop.detour.state == 'following'


def test_a_new_goal_cancels_the_detour_and_the_solver_follows_it(demo):
    chain, model, robot = demo
    guard, q0, q_goal, box = blocked_case(chain, model, 1)
    sent = {}

    def during(stream, k):
        if not sent and _first_following(stream):
            sent['at'] = k
            sent['q'] = stream.loop.q.copy()
            stream.loop.offer_goal('pose', chain.fk(q0), '', None, stream.t)

    loop, limits, stream, _ = run_loop(chain, guard, q0, chain.fk(q_goal), 1, 1200,
                                       during=during)
    assert sent, 'the detour never started'
    status = loop.status(stream.t)
    assert status['detours']['cancelled'] == 1
    assert any(key == 'detour:cancelled' and 'new goal' in text
               for _, key, text, _ in loop._report.events)
    assert loop.goal_reached, 'the new goal (the start, on this side) is reached'
    qs = check_stream(chain, limits, stream)
    assert fcl_contacts(chain, robot, box, qs) == 0


def test_an_obstacle_on_the_path_cancels_the_detour_and_nothing_collides(demo):
    """A second box dropped on the planned path while it is followed: the detour is cancelled
    (the remaining path is re-checked on the scene change) or a validator refuses; the arm
    brakes and no command touches either box."""
    chain, model, robot = demo
    guard, q0, q_goal, box = blocked_case(chain, model, 2)
    dropped = {}

    def during(stream, k):
        detour = stream.loop.detour
        if not dropped and detour.state == 'following' and detour.index >= 1:
            middle = 0.5 * (detour.path[detour.index] + detour.path[-1])
            pose = np.eye(4)
            pose[:3, 3] = chain.fk(middle)[:3, 3]
            dropped['box'] = Obstacle('sphere', (0.08,), pose)
            guard.scene.apply([('add', ('test', 2), dropped['box'])], 'obstacles')

    loop, limits, stream, _ = run_loop(chain, guard, q0, chain.fk(q_goal), 2, 400,
                                       during=during)
    assert dropped, 'the detour never started'
    assert loop.detour.counts['cancelled'] >= 1, loop.detour.status()
    qs = check_stream(chain, limits, stream)
    assert fcl_contacts(chain, robot, box, qs) == 0
    assert fcl_contacts(chain, robot, dropped['box'], qs) == 0


def test_a_stop_cancels_the_detour_and_the_arm_comes_to_rest(demo):
    chain, model, robot = demo
    guard, q0, q_goal, box = blocked_case(chain, model, 3)

    def during(stream, k):
        if not stream.loop.stopping and _first_following(stream):
            stream.loop.request_stop()

    loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 3, 600,
                                             during=during)
    assert loop.stopping and loop.stopped and reached is None
    assert loop.detour.counts['cancelled'] == 1 and loop.detour.reason == 'stopping'
    qs = check_stream(chain, limits, stream)
    assert fcl_contacts(chain, robot, box, qs) == 0


def test_switching_the_detour_off_cancels_it(demo):
    chain, model, _ = demo
    guard, q0, q_goal, _ = blocked_case(chain, model, 4)

    def during(stream, k):
        if stream.loop.detour.state == 'planning':
            stream.loop.set_detour_enabled(False)

    loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 4, 300,
                                             during=during)
    assert loop.detour.state == 'off' and loop.detour.counts['cancelled'] == 1
    assert reached is None
    check_stream(chain, limits, stream)


@pytest.mark.parametrize('state', ['planning', 'following'])
def test_a_collision_model_swap_replans_a_planned_detour_and_cancels_a_followed_one(demo,
                                                                                   state):
    """``replan_detour`` (the node calls it when finer covers or an SRDF's pairs are swapped
    in): at the next tick a detour being planned starts its plan again on the loop's
    constraints (no cancel, no brake, no retry wait) and the goal is reached through it; one
    being followed (certified on the old model) is cancelled with the reason. Either way
    the stream keeps its limits and nothing collides."""
    chain, model, robot = demo
    guard, q0, q_goal, box = blocked_case(chain, model, 5)
    asked = {}

    def during(stream, k):
        if not asked and stream.loop.detour.state == state:
            asked['at'] = k
            stream.loop.replan_detour('the collision model changed')

    loop, limits, stream, reached = run_loop(chain, guard, q0, chain.fk(q_goal), 5, 1200,
                                             during=during)
    assert asked, f'the detour was never {state}'
    events = [(key, text) for _, key, text, _ in loop._report.events]
    if state == 'planning':
        assert loop.detour.counts['cancelled'] == 0, loop.detour.status()
        assert ('detour:replan', 'planning the detour again: the collision model changed') \
            in events
        assert loop.detour.counts['completed'] >= 1 and reached is not None, \
            loop.detour.status()
    else:
        assert loop.detour.counts['cancelled'] >= 1, loop.detour.status()
        assert any(key == 'detour:cancelled' and 'the collision model changed' in text
                   for key, text in events)
        assert not any(key == 'detour:replan' for key, _ in events)
    qs = check_stream(chain, limits, stream)
    assert fcl_contacts(chain, robot, box, qs) == 0
