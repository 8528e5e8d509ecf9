"""The SMC on a whole figure: a floating biped with both feet planted (hard Contacts) reaches
palm goals while every estimate keeps the feet (docs/smc.md, "Hard constraints")."""

import os

import numpy as np
import pytest

from smcik_ros.goals import Contact, PoseTarget, project
from smcik_ros.goals.projection import KEPT_SHARE, residual_share
from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver

BIPED = os.path.join(os.path.dirname(__file__), 'urdf', 'biped.urdf')
PALMS = ('l_palm', 'r_palm')


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(BIPED, 'pelvis', list(PALMS) + ['l_sole', 'r_sole'],
                           floating_base=True)


def _problem(chain, rng):
    """Return (start, feet, palm goals of a configuration that keeps both feet)."""
    q0 = np.clip(np.zeros(chain.nq), chain.lower, chain.upper)
    feet = [Contact(link).bind(chain).anchor(q0) for link in ('l_sole', 'r_sole')]
    while True:
        moved = q0 + rng.normal(0.0, 0.3, chain.nq) * (np.arange(chain.nq) >= 6)
        goal_q, ok = project(chain, chain.clip(moved), feet, iterations=30)
        if ok:
            return q0, feet, [PoseTarget(chain.fk(goal_q, link), link) for link in PALMS]


def _estimates(chain, problem, seed, steps):
    """Yield (frames of the estimate, feet, palm goals) after each of ``steps`` SMC steps on
    the seeded ``problem`` (``_problem``)."""
    q0, feet, goals = _problem(chain, np.random.default_rng(problem))
    solver = make_solver('smc', chain, seed=seed)
    solver.set_constraints(feet)
    solver.reset(q0)
    for _ in range(steps):
        solver.step(goals)
        yield chain.frames(solver.estimate), feet, goals


def test_palm_goals_are_reached_with_both_feet_held_on_every_estimate(biped):
    reached, worst_foot = 0, 0.0
    trials = 12
    for seed in range(trials):
        for frames, feet, goals in _estimates(biped, 100 + seed, seed, 150):
            worst_foot = max(worst_foot, max(
                float(np.linalg.norm(frames.link_pose(f.link)[0][:3, 3] - f.pose[:3, 3]))
                for f in feet))
            errors = [np.linalg.norm(frames.link_pose(g.link)[0][:3, 3] - g.pose[:3, 3])
                      for g in goals]
            if max(errors) < 1e-3:
                reached += 1
                break
    assert worst_foot <= 1e-3, f'a foot left its contact by {worst_foot * 1e3:.3f} mm'
    # Without the projection (rejection alone) 25 of 30 were reached in 300 steps, with
    # feet up to 0.95 mm off; with it 30 of 30 (notes of issue 32).
    assert reached >= trials - 1, f'{reached} of {trials} palm goal pairs reached'


def test_every_estimate_keeps_the_feet_within_the_share_the_commands_keep(biped):
    """The filter keeps its particles, and so its estimates, within ``KEPT_SHARE`` of the
    feet's tolerances (the share the command stream keeps): within the whole tolerance the
    refinement used it as slack, and on Unitree H1 an answer 0.56 of the tolerance off was
    0.17-0.28 rad and 188-237 mm from the nearest configuration that keeps them exactly."""
    worst = 0.0
    for seed in range(6):
        for frames, feet, _ in _estimates(biped, 200 + seed, seed, 60):
            worst = max(worst, float(residual_share(frames, feet)[0]))
    assert worst <= KEPT_SHARE, f'an estimate was {worst:.3f} of the tolerance off a foot'


def test_the_projection_steps_beside_the_collision_constraint(biped):
    """The node's solver holds the collision constraint too (hard; its ``clearance`` is a
    distance setting, not clearance rows): exploration projects the contacts and leaves
    collision to the rejection."""
    from smcik_ros.collision import CollisionConstraint, CollisionModel, Obstacle, Scene
    q0, feet, goals = _problem(biped, np.random.default_rng(7))
    wall = np.eye(4)
    wall[:3, 3] = (2.0, 0.0, 0.0)
    collision = CollisionConstraint(CollisionModel.skeleton(biped),
                                    Scene({('wall', 0): Obstacle.box((0.1, 2.0, 2.0), wall)}),
                                    self_collision=False)
    solver = make_solver('smc', biped, seed=0)
    solver.set_constraints(feet + [collision])
    solver.reset(q0)
    for _ in range(20):
        solver.step(goals)
    frames = biped.frames(solver.estimate)
    assert not any(c.violated(frames)[0] for c in feet + [collision])


def test_solve_keeps_contacts_tighter_than_its_first_stage(biped):
    """solve()'s first stage meets a tenth of the solve tolerance on the contacts (0.1 mm at
    1 mm): contacts with a tighter tolerance of their own (20 um) are still checked there,
    and every answer keeps them (measured here from the link poses)."""
    tight = (2e-5, 2e-4)
    worst, refused = 0.0, 0
    for seed in range(12):
        q0, feet, goals = _problem(biped, np.random.default_rng(200 + seed))
        feet = [Contact(f.link, tolerance=tight).bind(biped).anchor(q0) for f in feet]
        solver = make_solver('smc', biped, seed=seed)
        solver.set_constraints(feet)
        result = solver.solve(goals, q0, max_iters=300, tol=1e-3)
        assert result.success and result.constraints_ok, f'seed {seed}: {result}'
        frames = biped.frames(result.q)
        for f in feet:
            pose = frames.link_pose(f.link)[0]
            worst = max(worst, float(np.linalg.norm(pose[:3, 3] - f.pose[:3, 3])))
            cos = (np.trace(pose[:3, :3] @ f.pose[:3, :3].T) - 1.0) / 2.0
            assert np.arccos(np.clip(cos, -1.0, 1.0)) <= tight[1] + 1e-9
        refused += result.iterations > 1
    assert worst <= tight[0], f'a foot left its contact by {worst * 1e6:.1f} um'
    assert refused >= 2          # the first stage's answer was refused on some (filter ran)


def test_uniform_draws_for_a_planted_figure_keep_the_feet_and_bring_new_arms(biped):
    """A restart's uniform draws (``feasible``): each takes the legs and base of the valid
    fallback and is projected onto the feet, so it keeps them and differs in the rest.
    Drawn whole, almost none met two planted feet and every one came back a copy of the
    estimate: the online filter froze 74 mm from a romeo hand goal (issue 32)."""
    from smcik_ros.solvers.smc import FilterModel
    from smcik_ros.solvers.smc.filter import feasible
    rng = np.random.default_rng(7)
    q0, feet, goals = _problem(biped, rng)
    solver = make_solver('smc', biped, seed=0)
    model = FilterModel(biped, solver.settings, solver._scalar_noise, solver._ball_noise,
                        [g.bind(biped) for g in goals], feet, 1.0, (1e-3, 1e-2))
    draws = feasible(model, biped.random_configuration(rng, 40), q0, rng,
                     lambda count: biped.random_configuration(rng, count))
    assert not model.violated(biped.frames(draws)).any()
    fresh = np.any(np.abs(draws - q0) > 1e-6, axis=1)
    assert fresh.sum() >= 36, f'{int(fresh.sum())} of 40 draws are not the fallback'
    names = list(biped.joint_names)
    arms = [names.index(n) for n in ('l_shoulder_pitch', 'r_elbow', 'torso_yaw')]
    assert np.all(np.ptp(draws[:, arms], axis=0) > 0.5)


def test_draws_keep_the_arm_of_a_hand_that_holds(biped):
    """A one-hand goal: the other hand's target is met at the fallback, so the draws keep
    the joints that move it (a new arm there made the commands carry that hand 3-4 mm on
    the way, talos) and draw the moving arm anew."""
    from smcik_ros.solvers.smc import FilterModel
    from smcik_ros.solvers.smc.filter import feasible
    rng = np.random.default_rng(7)
    q0, feet, goals = _problem(biped, rng)
    held = PoseTarget(biped.fk(q0, goals[0].link), goals[0].link)
    solver = make_solver('smc', biped, seed=0)
    model = FilterModel(biped, solver.settings, solver._scalar_noise, solver._ball_noise,
                        [held.bind(biped), goals[1].bind(biped)], feet, 1.0, (1e-3, 1e-2))
    draws = feasible(model, biped.random_configuration(rng, 40), q0, rng,
                     lambda count: biped.random_configuration(rng, count))
    names = list(biped.joint_names)
    kept = biped.moving(held.link)
    assert kept[names.index('l_shoulder_pitch')] and not kept[names.index('r_elbow')]
    assert np.all(draws[:, kept] == q0[kept]), "the holding arm was drawn anew"
    assert np.ptp(draws[:, names.index('r_elbow')]) > 0.5



def test_a_held_hand_and_a_slow_shared_joint_do_not_stop_the_other_hand_short():
    """A one-hand goal whose solutions move the slow joint both arms share (PR2's torso lift:
    the motion prior weighs it heavily) and so the held arm too. The refinement's spring (the
    prior's pull in the coarse LM) balanced the task error mm short of the goal, for good:
    on PR2 7-11 mm, declared out of reach. Released once the goal has been still for a while,
    the goals that solve() reaches are reached online too."""
    urdf = os.path.join(os.path.dirname(__file__), '..', 'urdf', 'smcik_figure.urdf')
    chain = Chain.from_urdf(urdf, 'pelvis', ['left_hand', 'right_hand'])
    slow = tuple(0.002 if name.startswith('waist') else 0.1 for name in chain.joint_names)
    solvable = reached = 0
    for trial in range(20):
        rng = np.random.default_rng(trial)
        q0 = chain.clip(0.5 * chain.random_configuration(rng, 1)[0])
        q_goal = chain.clip(q0 + rng.uniform(-0.8, 0.8, chain.nq))
        goals = [PoseTarget(chain.fk(q_goal, 'left_hand'), 'left_hand'),
                 PoseTarget(chain.fk(q0, 'right_hand'), 'right_hand')]      # held
        if not make_solver('smc', chain, seed=trial).solve(goals, q0).success:
            continue
        solvable += 1
        solver = make_solver('smc', chain, seed=trial, joint_noise_per_joint=slow)
        solver.reset(q0)
        for _ in range(300):                        # 3 s at 100 Hz
            solver.step(goals)
            frames = chain.frames(solver.estimate)
            if max(np.linalg.norm(frames.link_pose(g.link)[0][:3, 3] - g.pose[:3, 3])
                   for g in goals) < 1e-3:
                reached += 1
                break
    # With the spring never released: 11 of 17 reached; released after 50 to 100 still
    # iterations: 16 of 17 (issue 32 notes, session 13).
    assert solvable >= 15, f'only {solvable} of 20 goals solvable: the problem changed'
    assert reached >= solvable - 2, f'{reached} of {solvable} solvable goals reached online'
