"""The tick's guard alone (control/guard.py), property-tested over random limits, states and
refusals: a brake never leaves the motions the validators accepted and keeps every limit,
and a refused estimate is replaced by a motion every validator accepted that takes the tool
no farther from the goal, or by a brake with the solver restarted at its stop. The loop's
end-to-end tests (test_control_loop.py) check the same through the SMC."""

from hypothesis import given, strategies as st
import numpy as np
import pytest

from smcik_ros.control.goal_inbox import Goal
from smcik_ros.control.guard import HardConstraintValidator, MotionGuard
from smcik_ros.control.shaping import CommandShaper
from smcik_ros.goals import PositionTarget, project
from smcik_ros.model import Chain

from test_base import _half_plane, _planted, biped  # noqa: F401  (biped: a chain fixture)
from test_command_shaping import PROPERTY, RATE_DT, TIGHT, judge, make_limits

ON_LINE = 1e-7          # [rad] a point this close to a segment lies on it


class Stepper:
    """What the guard uses of the SolverStepper: the last answer's info, restarts, forgets."""

    def __init__(self, step_info=None):
        self.step_info = step_info or {}
        self.resets = []
        self.forgotten = 0

    def reset(self, q):
        self.resets.append(np.array(q, dtype=float))

    def forget_answer(self):
        self.forgotten += 1


class Refusing:
    """A validator that refuses a seeded share of the motions and records what it accepted;
    ``batched``: it also has ``check_many``; ``refuse_next``: refuse the next motion."""

    def __init__(self, seed, share, batched=False):
        self.rng = np.random.default_rng(seed)
        self.share = share
        self.accepted = []
        self.refuse_next = False
        self.reason = 'refused at random'
        if batched:
            self.check_many = lambda q, q_tos: np.array([self(q, b) for b in q_tos])

    def __call__(self, q_from, q_to):
        ok = not self.refuse_next and self.rng.uniform() >= self.share
        self.refuse_next = False
        if ok:
            self.accepted.append((np.array(q_from, float), np.array(q_to, float)))
        return ok

    def accepts(self, q_from, q_to):
        return any(np.array_equal(q_from, a) and np.array_equal(q_to, b)
                   for a, b in self.accepted)


def _on_segment(point, segment, tol=ON_LINE):
    a, b = segment
    span = b - a
    length2 = float(span @ span)
    t = 0.0 if length2 == 0.0 else float((point - a) @ span) / length2
    return -tol <= t <= 1.0 + tol and np.max(np.abs(point - a - t * span)) <= tol


def _quiet(*args, **kwargs):
    pass


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7), jitter=st.floats(0.0, 0.5),
       cruise=st.integers(1, 60), share=st.sampled_from([0.0, 0.5, 1.0]),
       shift=st.floats(0.0, 0.3))
def test_a_brake_stays_on_the_accepted_motions_and_within_the_limits(seed, n, jitter, cruise,
                                                                     share, shift):
    """A command cruises (its motions admitted while nothing refuses), then the arm freezes,
    its lead box shifted back by ``shift``, and the validators refuse ``share`` of the
    motions while the guard brakes: every step lies on the last motion validated before it
    or on one a validator accepted (the shaper's brake on the line, its bent path accepted,
    else the line brake), velocities and accelerations from the positions and stamps stay
    within the limits, and the command comes to rest, inside the lead box unless a line
    brake was needed (at rest outside it, the command moves back in, along the validated
    line or on a path a validator accepts)."""
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng, span=(1.0, 3.0))
    shaper = CommandShaper(limits)
    guard = MotionGuard(None, limits, shaper, Stepper(), _quiet)
    q = rng.uniform(0.5 * limits.lower, 0.5 * limits.upper)
    v = np.zeros(n)
    guard.validated = (q.copy(), q.copy())
    desired = rng.uniform(1.2 * limits.lower, 1.2 * limits.upper)
    max_lead = 0.15
    times, qs = [0.0], [q.copy()]

    def tick(shaped, dt):
        times.append(times[-1] + dt)
        qs.append(shaped.q.copy())
        return shaped.q, shaped.v

    for _ in range(cruise):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        box = (q - max_lead, q + max_lead)
        shaped = shaper.step(q, v, dt, desired, box)
        q, v = tick(guard.admit(q, v, dt, box, shaped, desired, None, 0), dt)
    validator = Refusing(seed, share)
    guard.validators.append(validator)
    arm = q - shift * np.sign(v)
    box = (arm - max_lead, arm + max_lead)
    inside = lambda q: np.all(q >= box[0] - 1e-9) and np.all(q <= box[1] + 1e-9)
    for _ in range(2000):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        before = guard.validated
        q_new, v_new = tick(guard.brake(q, v, dt, box), dt)
        after = guard.validated
        assert after is before or validator.accepts(*after), 'validated without a check'
        assert _on_segment(q, after) and _on_segment(q_new, after), 'left the validated line'
        q, v = q_new, v_new
        if not np.any(v) and (guard.line_brakes or inside(q)):
            break
    assert not np.any(v) and (guard.line_brakes or inside(q)), 'not at rest'
    v_ratio, a_ratio, excess = judge(np.array(times), np.array(qs), limits)
    assert v_ratio <= 1 + TIGHT and a_ratio <= 1 + TIGHT and excess <= 1e-12


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.integers(1, 7), jitter=st.floats(0.0, 0.5))
def test_the_line_brake_leaves_the_projection_its_room(seed, n, jitter):
    """With contacts kept, the shaper plans within 95 % of the limits so that the projection's
    correction fits. The line brake (the last resort, exactly on the current line) must
    brake within the shaper's limits too: at the full limit, Unitree H1's brake left no
    share of its CoM correction and the CoM passed its margin by up to 7.4 mm. Each step
    stays on the line, slows every joint by the same factor, no joint by more than the
    shaper's acceleration allows, and the critical one by exactly that, until it stops."""
    from dataclasses import replace
    rng = np.random.default_rng(seed)
    limits = make_limits(n, rng, span=(1.0, 3.0))
    planned = replace(limits, velocity=0.95 * limits.velocity,
                      acceleration=0.95 * limits.acceleration)
    guard = MotionGuard(None, limits, CommandShaper(planned), Stepper(), _quiet)
    q = np.zeros(n)                     # 1 rad or more from either position limit,
    v = rng.uniform(-1.0, 1.0, n) * np.minimum(   # and stopping within 0.5 rad
        planned.velocity, np.sqrt(planned.acceleration))
    for _ in range(2000):
        dt = RATE_DT * (1.0 + rng.uniform(-jitter, jitter))
        braked = guard._line_brake(q, v, dt)
        dv = np.abs(braked.v - v)
        assert np.all(dv <= planned.acceleration * dt * (1 + 1e-9)), 'faster than planned'
        if np.any(braked.v):
            ratio = braked.v[v != 0] / v[v != 0]
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)     # on the line
            assert np.max(dv / (planned.acceleration * dt)) > 1 - 1e-9, 'braked gently'
        q, v = braked.q, braked.v
        if not np.any(v):
            break
    assert not np.any(v), 'not at rest'


@pytest.fixture(scope='module')
def arm7():
    return Chain.from_urdf('urdf/smcik_arm.urdf')


@PROPERTY
@given(seed=st.integers(0, 2 ** 31 - 1), share=st.sampled_from([0.0, 0.3, 0.8]),
       batched=st.booleans(), candidates=st.integers(0, 12), moving=st.booleans(),
       held_here=st.booleans())
def test_a_refused_estimate_is_replaced_by_an_accepted_motion_no_farther_or_a_brake(
        arm7, seed, share, batched, candidates, moving, held_here):
    """The estimate's motion is refused. Either the guard falls back: the command's motion
    to its stop was accepted by every validator, the tools on their way (the tip towards its
    goal, the elbow towards a second target elsewhere) end no farther from their targets
    (summed) than at the current command, and a tool at its target (the elbow held where it
    is) stays within ``FALLBACK_NEAR`` of it; or it holds: a brake on the validated line,
    the answer forgotten and the solver restarted at the brake's stop."""
    rng = np.random.default_rng(seed)
    chain = arm7
    limits = make_limits(chain.n, rng, span=(2.5, 3.0))
    shaper = CommandShaper(limits)
    particles = chain.clip(rng.uniform(-1.5, 1.5, (40, chain.n)))
    info = {'map': particles[0], 'particles': particles, 'weights': rng.uniform(size=40)}
    stepper = Stepper(info)
    validators = [Refusing(seed, share, batched), Refusing(seed + 1, share / 2, not batched)]
    guard = MotionGuard(chain, limits, shaper, stepper, _quiet, validators, candidates)
    q = chain.clip(rng.uniform(-1.0, 1.0, chain.n))
    v = rng.uniform(-0.3, 0.3, chain.n) * moving
    q_prev = q - v * RATE_DT
    dt = RATE_DT
    guard.validated = (q_prev, shaper.stopping_point(q, v))
    goal_point = chain.fk(chain.clip(rng.uniform(-1.5, 1.5, chain.n)))[:3, 3]
    held = chain.fk(q if held_here else chain.clip(rng.uniform(-1.5, 1.5, chain.n)),
                    link='link4')[:3, 3]
    goal = Goal(terms=(PositionTarget(goal_point), PositionTarget(held, link='link4')),
                display=goal_point, source='test', stamp=None, received=0.0, sequence=1)
    desired = chain.clip(rng.uniform(-1.5, 1.5, chain.n))
    box = (q - 0.15, q + 0.15)
    shaped = shaper.step(q, v, dt, desired, box)
    validators[0].refuse_next = True
    out = guard.admit(q, v, dt, box, shaped, desired, goal, 7)
    stop = shaper.stopping_point(out.q, out.v)
    if guard.fallbacks:
        assert guard.last_refusal['outcome'] == 'fallback' and candidates > 0
        assert all(validator.accepts(q, stop) for validator in validators)
        assert guard.validated[0] is not q and np.array_equal(guard.validated[0], q)
        assert np.array_equal(guard.validated[1], stop)
        tools = np.array([[np.linalg.norm(chain.fk(c, link=link)[:3, 3] - point)
                           for c in (q, out.q)] for link, point in ((None, goal_point),
                                                                    ('link4', held))])
        near = tools[:, 0] <= guard.FALLBACK_NEAR
        assert np.all(tools[near, 1] <= guard.FALLBACK_NEAR)
        way = tools[~near].sum(axis=0)
        assert way[1] <= way[0] + guard.FALLBACK_SLACK
    else:
        assert guard.holds == 1 and guard.last_refusal['outcome'] == 'hold'
        assert _on_segment(out.q, guard.validated) and _on_segment(stop, guard.validated)
        assert stepper.forgotten == 1 and len(stepper.resets) == 1
        np.testing.assert_array_equal(stepper.resets[0], stop)
    assert guard.refusal(7 + 3)['ticks_ago'] == 3 and guard.refusal(7 + 3, within=2) is None


def test_the_fallback_takes_the_first_free_candidate_and_checks_none_after_it(arm7):
    """Candidates are checked in order, in batches of 1, 2, 4, ...: with only the third
    free, the guard moves towards the third and never checks the fourth and later (a
    check of a whole-body motion costs 0.1-1 s of a tick on a robot with fine covers)."""
    rng = np.random.default_rng(3)
    chain = arm7
    limits = make_limits(chain.n, rng, span=(2.5, 3.0))
    shaper = CommandShaper(limits)
    particles = chain.clip(rng.uniform(-1.5, 1.5, (40, chain.n)))
    stepper = Stepper({'map': particles[0], 'particles': particles,
                       'weights': rng.uniform(size=40)})
    checked = []

    def third_free(q_from, q_tos):
        checked.extend(q_tos)
        return np.array([len(checked) - len(q_tos) + k + 1 >= 3 for k in range(len(q_tos))])
    validator = Refusing(0, 0.0, batched=False)
    validator.check_many = third_free
    guard = MotionGuard(chain, limits, shaper, stepper, _quiet, [validator], 8)
    q = chain.clip(rng.uniform(-1.0, 1.0, chain.n))
    v = np.zeros(chain.n)
    box = (q - 0.15, q + 0.15)
    desired = chain.clip(rng.uniform(-1.5, 1.5, chain.n))
    guard.validated = (q, q)
    validator.refuse_next = True
    out = guard.admit(q, v, RATE_DT, box, shaper.step(q, v, RATE_DT, desired, box), desired,
                      None, 1)
    third = guard._candidates(q, desired)[2]
    expected = shaper.step(q, v, RATE_DT, third, box)
    assert guard.fallbacks == 1 and len(checked) == 3
    np.testing.assert_array_equal(out.q, expected.q)
    np.testing.assert_array_equal(checked[2], shaper.stopping_point(expected.q, expected.v))


def test_a_motion_is_judged_where_the_projection_lands_its_end_and_where_it_was(biped):
    """Two planted feet close a loop that a straight joint-space motion leaves at first order
    in its length; the stream projects every command back onto it, by the whole correction
    or, where the limits allow only a share, by less, so its path lies between the straight
    end and the end as the projection lands it. Over random ends within 0.1 rad, with a CoM
    edge between the end's straight state (base fitted to the feet) and its landing, the
    start inside: the guard refuses the motion whichever side is outside, and accepts it
    with the edge beyond both. Judged on the straight states alone, Unitree H1's CoM ended
    0.79 mm past its margin while braking (offline); on the landed ones alone, 3 mm past
    (black box)."""
    chain, limits = biped
    figure, contacts, q = _planted(chain, limits, crouch=0.1)
    validator = HardConstraintValidator(chain)
    guard = MotionGuard(chain, limits, CommandShaper(limits), Stepper(), _quiet, [validator])
    guard.figure = figure
    com = lambda state: chain.frames(state).center_of_mass()[0, :2]
    start = com(figure.state(q))
    rng = np.random.default_rng(5)
    refused = {1: 0, -1: 0}
    accepted = 0
    for _ in range(60):
        end = limits.clip(q + rng.uniform(-0.1, 0.1, limits.n))
        straight = com(figure.state(end))
        landed = com(project(chain, figure.state(end), contacts)[0])
        gap = float(np.linalg.norm(landed - straight))
        if gap < 5e-4:
            continue                    # the landing too near the straight state to judge
        n = (landed - straight) / gap
        mid = 0.5 * float((straight + landed) @ n)
        for side in (1, -1):            # the landing outside, then the straight end
            if side * float(start @ n) < side * mid:
                validator.constraints = contacts + [_half_plane(chain, side * n, side * mid)]
                assert guard.refuses(q, end) is validator, (side, 'an end outside passed')
                refused[side] += 1
        far = max(float(p @ n) for p in (start, straight, landed)) + 1e-3
        validator.constraints = contacts + [_half_plane(chain, n, far)]
        assert guard.refuses(q, end) is None, 'an end inside on both counts was refused'
        accepted += 1
    assert min(refused.values()) >= 10 and accepted >= 20, (refused, accepted)
