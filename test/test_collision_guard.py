"""The node's collision guard without ROS: SRDF choice, the validator (coarse pass agreeing
with the fine motion check), batched checks, point clouds, SRDF updates, status texts."""

import threading
import time

import numpy as np
import pytest

from smcik_ros.collision import (CollisionConstraint, Obstacle, conventional_srdf_path,
                                 pointcloud_obstacle)
from smcik_ros.collision.constraint import CONTACT_RELEASE
from smcik_ros.control.collision_guard import (CollisionGuard, CollisionSettings, choose_srdf,
                                               reach_bound)
from smcik_ros.errors import GoalError, ModelError, ParameterError

from arm_urdfs import ur5_like_urdf
from collision_helpers import cover_cache_dir
from conftest import ARM7_URDF

SRDF = conventional_srdf_path(ARM7_URDF)


@pytest.fixture(scope='module')
def guard_and_chain():
    from smcik_ros.model import Chain
    chain = Chain.from_urdf(ARM7_URDF)
    guard, notes = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                            cache_dir=cover_cache_dir())
    assert any('self-collision pairs checked' in text for _, text in notes)
    return guard, chain


def _box(center, size=(0.12, 0.12, 0.12)):
    pose = np.eye(4)
    pose[:3, 3] = center
    return Obstacle('box', size, pose)


def test_srdf_choice_order(tmp_path):
    assert choose_srdf('<robot name="x"/>', 'a.srdf', ARM7_URDF)[1] == \
        'the robot_description_semantic parameter'
    source, where, explicit = choose_srdf('', 'a.srdf', ARM7_URDF, resolve=lambda p: tmp_path / p)
    assert source == str(tmp_path / 'a.srdf') and explicit
    source, _, explicit = choose_srdf('', '', ARM7_URDF)
    assert source == SRDF and not explicit
    assert choose_srdf('', '', str(tmp_path / 'none.urdf'))[0] is None


def test_settings_are_validated():
    with pytest.raises(ParameterError, match='padding'):
        CollisionSettings(padding=-0.001)
    with pytest.raises(ParameterError, match='voxel_size'):
        CollisionSettings(voxel_size='a lot')
    with pytest.raises(ParameterError, match=r'cover_tolerance must be in \[0.002'):
        CollisionSettings(cover_tolerance=0.001)


def test_the_cover_tolerance_reaches_the_model(guard_and_chain):
    """A tighter cover_tolerance gives covers whose excess bound stays within it (plus the
    tenth a cylinder's circumscribed prism adds; the default one's reaches beyond), with more
    spheres. (0.006 m: 2.3x the default's spheres in ~4 s; 0.004 m took ~11 s to show the
    same, its bound as tight: 4.397 mm for 4.4.)"""
    coarse, chain = guard_and_chain
    tight, _ = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                        settings=CollisionSettings(cover_tolerance=0.006),
                                        cache_dir=cover_cache_dir())
    assert tight.model.tolerance == 0.006 and coarse.model.tolerance == 0.01
    def worst(model):     # links on chain joints (a swept finger adds its sweep's sagitta)
        return max(e for _, _, e, swept in model.excess_table() if not swept)
    assert worst(tight.model) <= 1.1 * 0.006 + 1e-9 < worst(coarse.model)
    assert len(tight.model.radii) > len(coarse.model.radii)


def test_a_broken_explicit_srdf_is_an_error_a_conventional_one_a_warning(guard_and_chain):
    _, chain = guard_and_chain
    with pytest.raises(ModelError):
        CollisionGuard.from_urdf(chain, ARM7_URDF, srdf='<robot', cache_dir=cover_cache_dir())
    guard, notes = CollisionGuard.from_urdf(chain, ARM7_URDF, srdf='<robot',
                                            explicit_srdf=False, cache_dir=cover_cache_dir())
    assert any(level == 'warn' and 'ignored' in text for level, text in notes)
    assert guard.self_collision and len(guard.constraint.pairs) > 0


def test_no_geometry_gives_a_skeleton_and_refuses_self_collision():
    from smcik_ros.model import Chain
    urdf = ur5_like_urdf()
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    guard, notes = CollisionGuard.from_urdf(chain, urdf, cache_dir=cover_cache_dir())
    assert not guard.has_geometry and not guard.self_collision
    assert [level for level, _ in notes] == ['info']
    with pytest.raises(ParameterError, match='no <collision> geometry'):
        guard.set_self_collision(True)
    # Obstacles still work against the skeleton.
    tip = chain.fk(chain.neutral_configuration())[:3, 3]
    guard.apply([('add', ('t', 0), _box(tip, (0.05, 0.05, 0.05)))], 'obstacles')
    assert guard.status(chain.neutral_configuration())['in_collision']


def test_the_validator_agrees_with_the_fine_motion_check(guard_and_chain):
    """Over seeded random motions near a box, the coarse pass never accepts what the fine
    check refuses (and the batched check agrees with one-by-one)."""
    guard, chain = guard_and_chain
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard.replace({('t', 0): _box(chain.fk(q0 + [0.7, 0, 0, 0, 0, 0, 0])[:3, 3])}, 'obstacles')
    try:
        rng = np.random.default_rng(0)
        outcomes = []
        for _ in range(150):
            a = q0 + rng.uniform(-0.8, 0.8, chain.n) * [1.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]
            b = a + rng.uniform(-0.15, 0.15, chain.n)
            a, b = np.clip(a, chain.lower, chain.upper), np.clip(b, chain.lower, chain.upper)
            ok = guard(a, b)
            fine, info = guard.constraint.check_motion(a, b)
            assert ok == fine, (a, b, info)
            outcomes.append(ok)
            if not ok:
                assert 'would collide' in guard.reason
        assert 10 <= sum(outcomes) <= 140, 'the draw should give both outcomes'
        a = q0
        targets = q0 + rng.uniform(-0.3, 0.3, (20, chain.n)) + [0.5, 0, 0, 0, 0, 0, 0]
        batched = guard.check_many(a, targets)
        assert list(batched) == [guard.constraint.check_motion(a, t)[0] for t in targets]
    finally:
        guard.replace({}, 'obstacles')


def test_the_anchor_shortcut_agrees_with_the_fine_motion_check(guard_and_chain):
    """A command stream's motions (each from where the last free one ended, steps from
    0 to 0.06 rad, held stretches, into and out of a box): the validator with its anchor
    gives the fine check's verdict every time, and many verdicts come from the anchor."""
    guard, chain = guard_and_chain
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard.replace({('t', 0): _box(chain.fk(q0 + [0.5, 0, 0, 0, 0, 0, 0])[:3, 3])},
                  'obstacles')
    try:
        rng = np.random.default_rng(3)
        q = q0.copy()
        direction = np.zeros(chain.n)
        verdicts, cached = [], 0
        for k in range(900):
            if k % 60 == 0:
                direction = rng.normal(0.0, 1.0, chain.n) * [3, 1, 1, 1, 1, 1, 1]
                direction /= np.linalg.norm(direction)
            size = rng.choice([0.0, 1e-6, 1e-3, 0.01, 0.06], p=[0.2, 0.2, 0.3, 0.2, 0.1])
            target = np.clip(q + size * direction + rng.normal(0.0, 0.1 * size, chain.n),
                             chain.lower, chain.upper)
            ok = guard(q, target)
            fine, info = guard.constraint.check_motion(q, target)
            assert ok == fine, (k, q, target, info)
            cached += guard.last_check == {'cached': True}
            verdicts.append(ok)
            if ok:
                q = target
        assert 30 <= len(verdicts) - sum(verdicts), 'the walk should run into the box'
        assert cached >= 200, cached
    finally:
        guard.replace({}, 'obstacles')


def test_a_scene_change_drops_the_anchor(guard_and_chain):
    """A held arm's anchor is not used once an obstacle arrives: the obstacle on the held
    motion's path is found."""
    guard, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    q_to = q + 1e-4
    assert guard(q, q_to) and guard(q, q_to) and guard.last_check == {'cached': True}
    tip = chain.fk(q_to)[:3, 3]
    guard.replace({('t', 1): _box(tip, (0.05, 0.05, 0.05))}, 'obstacles')
    try:
        assert not guard(q + 0.02, q_to), 'moving into the new box must be refused'
        assert guard.last_check != {'cached': True}
    finally:
        guard.replace({}, 'obstacles')


def test_a_held_arm_in_penetration_repeats_the_full_checks_verdict(guard_and_chain):
    """Covers that already overlap at rest (here a box through the tool) leave the anchor
    nothing to prove: the same held motion asked again gets the full check's verdict without
    a query, and only while nothing it depends on changed (scene, motion); a motion deeper in
    is still refused."""
    guard, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    tip = chain.fk(q)[:3, 3]
    guard.replace({('t', 2): _box(tip, (0.04, 0.04, 0.04))}, 'obstacles')
    try:
        assert guard.constraint.in_collision(chain.frames(q))[0]
        assert guard(q, q) == guard.constraint.check_motion(q, q)[0] is True
        assert guard.last_check not in ({'cached': True}, {'repeated': True})
        for _ in range(3):
            assert guard(q, q) and guard.last_check == {'repeated': True}
        nudged = q + 1e-9
        assert guard(q, nudged) == guard.constraint.check_motion(q, nudged)[0]
        assert guard.last_check not in ({'cached': True}, {'repeated': True})
        # Towards the box's centre: deeper, refused every time it is asked.
        deeper = q.copy()
        for step in np.linspace(0.0, 0.3, 31)[1:]:
            deeper = q + step * np.array([0, 1, 0, 1, 0, 0, 0])
            if not guard.constraint.check_motion(q, deeper)[0]:
                break
        assert not guard.constraint.check_motion(q, deeper)[0]
        refusals = guard.refusals
        assert not guard(q, deeper) and not guard(q, deeper)
        assert guard.refusals == refusals + 2
        # A scene change: the held motion is checked again.
        assert guard(q, q)
        guard.replace({('t', 2): _box(tip, (0.04, 0.04, 0.04)),
                       ('t', 3): _box(tip + [0.0, 0.0, 0.3], (0.02, 0.02, 0.02))},
                      'obstacles')
        assert guard(q, q) and guard.last_check not in ({'cached': True}, {'repeated': True})
    finally:
        guard.replace({}, 'obstacles')


def test_sources_replace_their_own_obstacles(guard_and_chain):
    guard, _ = guard_and_chain
    guard.replace({('a', 1): _box([2, 0, 0])}, 'obstacles')
    guard.replace({('b', 1): _box([0, 2, 0])}, 'constraints')
    guard.apply([('deleteall', None)], 'obstacles')
    assert guard.count() == 1 and guard.count('constraints') == 1
    with pytest.raises(GoalError, match='unknown obstacle source'):
        guard.apply([], 'elsewhere')
    guard.replace({}, 'constraints')


def _plain_pointcloud(points, voxel, robot, q, margin):
    """The point-cloud semantics written plainly: every finite point tested against the
    robot's padded cover + margin, one sphere of half the voxel diagonal per occupied voxel,
    the spheres reaching into the padded cover dropped. Returns (centres, radius)."""
    points = points[np.isfinite(points).all(axis=1)]
    points = points[~robot.points_on_robot(points, q, margin)]
    centers = (np.unique(np.floor(points / voxel).astype(np.int64), axis=0) + 0.5) * voxel
    radius = 0.5 * np.sqrt(3.0) * voxel
    return centers[~robot.points_on_robot(centers, q, 0.0, point_radius=radius)], radius


def test_pointcloud_voxels_match_the_plain_semantics_within_reach(guard_and_chain):
    """``pointcloud_obstacle`` with the reach bound and the near-voxel shortcut (what the
    guard runs on camera-sized clouds) keeps the voxels the plain semantics keeps, within
    the reach; the robot's own points are gone."""
    guard, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    rng = np.random.default_rng(1)
    # A table-top of points, points on the arm itself, far points and NaNs.
    table = np.column_stack([rng.uniform(0.2, 0.8, 3000), rng.uniform(-0.4, 0.4, 3000),
                             rng.uniform(0.0, 0.02, 3000)])
    centers, _, _ = guard.constraint.cover_spheres(q)
    on_arm = centers[rng.integers(0, len(centers), 300)]
    far = rng.uniform(5.0, 6.0, (500, 3))
    points = np.vstack([table, on_arm, far, [[np.nan, 0, 0]]])
    reach = reach_bound(guard.model)
    assert 0.5 < reach < 3.0
    ours = pointcloud_obstacle(points, 0.03, guard.constraint, q, 0.02, reach)
    plain, radius = _plain_pointcloud(points, 0.03, guard.constraint, q, 0.02)
    near = plain[np.linalg.norm(plain, axis=1) <= reach + 0.06]
    as_set = {tuple(np.round(c, 6)) for c in ours.centers}
    assert as_set == {tuple(np.round(c, 6)) for c in near}
    assert len(near) < len(plain) and ours.size == pytest.approx((radius,))
    everything = pointcloud_obstacle(points, 0.03, guard.constraint, q, 0.02)
    np.testing.assert_array_equal(everything.centers, plain)
    # The arm's own points are gone: the measured configuration is free of the cloud.
    constraint = CollisionConstraint(guard.model, pairs=guard.constraint.pairs)
    constraint.scene.replace_source({('pointcloud', 0): ours}, 'pointcloud')
    assert not constraint.status(q)['in_collision']
    assert guard.set_pointcloud(points, q) == len(ours.centers)
    assert guard.set_pointcloud(far, q) == 0 and guard.count('pointcloud') == 0


def test_an_srdf_update_is_computed_in_the_background_and_swapped_in(guard_and_chain):
    guard, chain = guard_and_chain
    before = len(guard.constraint.pairs)
    text = open(SRDF).read().replace(
        '</robot>', '<disable_collisions link1="link5" link2="link7" reason="Test"/></robot>')
    with pytest.raises(ModelError):
        guard.start_srdf_update('<robot', 'broken')
    assert guard.start_srdf_update(text, 'a test SRDF')
    guard.wait_for_update(30.0)
    level, message, changed = guard.poll()
    assert changed and level == 'info' and 'a test SRDF' in message
    assert len(guard.constraint.pairs) == before - 1 and guard.srdf == 'a test SRDF'
    assert guard.poll() is None
    assert guard.start_srdf_update(SRDF, 'back')
    guard.wait_for_update(30.0)
    assert guard.poll()[2] and len(guard.constraint.pairs) == before


def test_a_first_start_without_time_to_wait_begins_coarse_then_swaps_the_fine_covers_in(
        guard_and_chain, tmp_path):
    """cover_wait 0 s and no covers in the disk cache: the guard starts at once on coarse
    covers (a warning says the guard is more conservative until the fine ones are in), with
    every pair the SRDF leaves checked and no contact refinement; at every sampled
    configuration its smallest distance is at most the fine guard's (its covers hold the fine
    ones). The fine covers, computed in a child process, are swapped in at a poll, then
    their pairs: the guard ends as the one built by waiting, and the next start reads it all
    from the disk cache."""
    _, chain = guard_and_chain
    waited, _ = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                         cache_dir=cover_cache_dir())
    cache = str(tmp_path / 'cache')
    guard, notes = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                            cache_dir=cache, cover_wait=0.0)
    assert guard.model.coarse and 'coarse covers' in guard.summary()
    assert [t for level, t in notes if level == 'warn' and 'more motions' in t], notes
    assert set(waited.pairs.names) <= set(guard.pairs.names)
    rng = np.random.default_rng(3)
    for q in chain.random_configuration(rng, 20):
        assert guard.constraint.status(q)['min_distance'] <= \
            waited.constraint.status(q)['min_distance'] + 1e-9
    q = chain.neutral_configuration()
    assert guard.start_contact_refinement(q) == []
    assert guard.wait_for_update(120.0)
    level, text, changed = guard.poll()
    assert (level, changed) == ('info', True) and text.startswith('fine covers in'), text
    assert not guard.model.coarse and guard.constraint.model is guard.model
    assert np.array_equal(guard.model.radii, waited.model.radii)
    assert guard.wait_for_update(60.0)
    level, text, changed = guard.poll()
    assert changed and 'pairs of the fine covers' in text, text
    assert guard.pairs.names == waited.pairs.names and guard.poll() is None
    assert len(guard.constraint.pairs) == len(waited.constraint.pairs)
    again, notes = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                            cache_dir=cache, cover_wait=0.0)
    assert not again.model.coarse and again.wait_for_update(0.0)
    assert not [t for _, t in notes if 'coarse' in t], notes


def test_covers_ready_within_the_wait_start_the_guard_fine(guard_and_chain, tmp_path):
    """With time to wait (the node's default on small robots), the fine covers and their
    pairs computed in the background are applied before ``from_urdf`` returns: no coarse
    phase, the same guard as computing them in place."""
    _, chain = guard_and_chain
    guard, notes = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                            cache_dir=str(tmp_path), cover_wait=300.0)
    assert not guard.model.coarse and guard.poll() is None
    texts = [t for _, t in notes]
    assert texts[0].startswith('fine covers in') and 'pairs of the fine' in texts[1], texts
    assert not [t for t in texts if 'more motions' in t]
    waited, _ = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                         cache_dir=cover_cache_dir())
    assert guard.pairs.names == waited.pairs.names
    assert np.array_equal(guard.model.centers, waited.model.centers)


def test_fine_covers_computed_in_a_child_process_and_its_failure(guard_and_chain, tmp_path):
    """``covers_in_child``: the covers of a coarse model's fine inputs, computed in a fresh
    Python process, equal those computed here; its log lines come through this process's
    logger; a mesh it cannot read (gone since the coarse model) is a ModelError naming it."""
    import dataclasses
    import logging
    from smcik_ros.collision import CollisionModel
    from smcik_ros.collision.model import link_covers
    from smcik_ros.control.cover_updates import covers_in_child
    _, chain = guard_and_chain
    coarse = CollisionModel.from_urdf(chain, ARM7_URDF, cache_dir=str(tmp_path), coarse=True)
    inputs = coarse.fine_inputs()
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())
    logger = logging.getLogger('smcik_ros.collision')
    handler, level = Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        covers = covers_in_child(inputs)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [m for m in seen if m.startswith('computing the sphere covers')], seen
    here, _ = link_covers(*inputs)
    assert list(covers) == list(here)
    for name in here:
        assert np.array_equal(covers[name].radii, here[name].radii), name
    geometry = dict(inputs[0])
    link = next(iter(geometry))
    geometry[link] = [dataclasses.replace(geometry[link][0], kind='mesh', uri='gone.stl',
                                          mesh_path=str(tmp_path / 'gone.stl'))]
    with pytest.raises(ModelError, match='gone.stl'):
        covers_in_child((geometry,) + tuple(inputs[1:]))


def test_the_covers_child_is_kept_between_jobs_and_replaced_when_it_ends(guard_and_chain,
                                                                        tmp_path):
    """``covers_in_child`` sends each job to one child process (no interpreter start per
    job), which a Ctrl-C (SIGINT to the process group) does not end; a child that has ended
    is replaced by the next job, with the same covers."""
    import os
    import signal
    from smcik_ros.collision import CollisionModel
    from smcik_ros.control import cover_updates
    _, chain = guard_and_chain
    inputs = CollisionModel.from_urdf(chain, ARM7_URDF, cache_dir=str(tmp_path),
                                      coarse=True).fine_inputs()
    first = cover_updates.covers_in_child(inputs)
    child = cover_updates._WORKER.child()
    os.kill(child.pid, signal.SIGINT)
    again = cover_updates.covers_in_child(inputs)
    assert cover_updates._WORKER.child() is child and child.poll() is None
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    third = cover_updates.covers_in_child(inputs)
    assert cover_updates._WORKER.child().pid != child.pid
    for covers in (again, third):
        assert list(covers) == list(first)
        for name in first:
            assert np.array_equal(covers[name].radii, first[name].radii), name


def test_status_says_why(guard_and_chain):
    guard, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    elbow = chain.fk(q, link='link4')[:3, 3]
    guard.replace({('t', 0): _box(elbow, (0.05, 0.05, 0.05))}, 'obstacles')
    try:
        status = guard.status(q)
        assert status['in_collision'] and status['closest_pair'].endswith('t/0')
        assert status['collision_reason'].startswith('in collision')
        guard.replace({('t', 0): _box(elbow + [0, 0.15, 0], (0.05, 0.05, 0.05))}, 'obstacles')
        refusal = {'validator': 'CollisionGuard', 'outcome': 'hold', 'reason': 'the motion '
                   'would collide (link4 / t/0)'}
        text = guard.status(q, refusal, blocked=True)['collision_reason']
        assert text.startswith('stopped at the margin') and 'link4 / t/0' in text
        assert guard.status(q)['collision_reason'] == ''
    finally:
        guard.replace({}, 'obstacles')


def test_a_start_resting_in_contact_is_noted_with_its_pairs_and_the_tolerance(guard_and_chain):
    """The node's one line at the first command: the pairs in contact, deepest first, with
    their depths, and the cover tolerance to refine; nothing when the arm is clear."""
    guard, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    assert guard.contact_note(q) is None
    elbow = chain.fk(q, link='link4')[:3, 3]
    guard.replace({('t', 0): _box(elbow, (0.05, 0.05, 0.05)),
                   ('t', 1): _box((0.0, 0.0, -0.052), (1.2, 1.2, 0.1))}, 'obstacles')
    try:
        contacts = guard.constraint.contacts(q)
        assert contacts[0][0][1] == 't/0'        # the box round the elbow is the deepest
        assert all(d < 0.0 for _, d in contacts)
        assert [d for _, d in contacts] == sorted(d for _, d in contacts)
        table = [(a, d) for (a, b), d in contacts if b == 't/1']
        assert table and table[0][0] == 'base_link'
        level, note = guard.contact_note(q)
        assert level == 'warn'
        first = contacts[0]
        assert f'{first[0][0]} / {first[0][1]} {1e3 * first[1]:.1f} mm' in note
        assert 'base_link / t/1' in note and 'collision_cover_tolerance, 0.01 m' in note
    finally:
        guard.replace({}, 'obstacles')


def test_an_arm_resting_in_contact_goes_straight_to_the_fine_check(guard_and_chain,
                                                                   monkeypatch):
    """While a pair rests in contact at the reference (the base on a table box overlapping
    its cover), the coarse pass could not pass and is skipped (no distance query): every
    verdict is the fine check's, and equals check_motion's. Clear again, it runs."""
    guard, chain = guard_and_chain
    constraint = guard.constraint
    calls = []
    distances = constraint.distances
    monkeypatch.setattr(constraint, 'distances',
                        lambda *a, **k: calls.append(1) or distances(*a, **k))
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard.replace({('t', 1): _box((0.0, 0.0, -0.052), (1.2, 1.2, 0.1))}, 'obstacles')
    try:
        constraint.set_reference(q)
        assert len(constraint.allowances()[0]) == 1
        rng = np.random.default_rng(5)
        for k in range(12):
            q_to = chain.clip(q + rng.normal(0.0, 0.05, 7))
            ok = guard(q, q_to)
            assert ok == constraint.check_motion(q, q_to)[0]
        assert not calls
        guard.replace({}, 'obstacles')
        constraint.set_reference(q)
        assert guard(q, chain.clip(q + 0.2)) and guard.last_check.get('coarse') and calls
    finally:
        guard.replace({}, 'obstacles')


def _table_guard(chain, gap, contact_tolerance=0.004):
    """A fresh guard (its model is swapped) with a table box ``gap`` [m] under the base."""
    settings = CollisionSettings(contact_tolerance=contact_tolerance)
    guard, _ = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                        settings=settings, cache_dir=cover_cache_dir())
    pose = np.eye(4)
    pose[:3, 3] = (0.0, 0.0, -0.05 - gap)
    guard.replace({('t', 1): Obstacle('box', (1.2, 1.2, 0.1), pose)}, 'obstacles')
    return guard


def _updates(guard):
    """Wait for and poll the guard's updates until none is left (an applied refinement step
    starts the next): return the (level, text, changed) events."""
    events = []
    while guard.wait_for_update(60.0):
        event = guard.poll()
        if event is None and not guard.updating:
            return events
        if event is not None:
            events.append(event)
    return events


def test_links_resting_in_contact_get_finer_covers_in_the_background(guard_and_chain):
    """The base stands 7.5 mm above a table box: its 1 cm cover reaches into the box (a
    contact of the covers, not of the parts). ``start_contact_refinement`` names the link,
    computes its cover again in a thread at 6 mm, and ``poll`` swaps the finer model and its
    constraint in: still in contact, 4 mm shallower. The next step computes it at
    ``contact_tolerance`` (4 mm): apart, swapped in too. The same pairs, every other link's
    spheres as they were, the validator on the new constraint. Nothing in contact, or off:
    nothing to do."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.0075)
    model, constraint, pairs = guard.model, guard.constraint, guard.constraint.pairs
    assert [p for p, _ in constraint.contacts(q)] == [('base_link', 't/1')]
    links = guard.start_contact_refinement(q)
    assert links == ['base_link']
    level, note = guard.contact_note(q, links)
    assert level == 'warn' and 'base_link / t/1' in note, note
    assert 'tolerance 0.006 then 0.004 m' in note, note
    guard.wait_for_update(60.0)
    level, text, changed = guard.poll()
    assert (level, changed) == ('info', True) and 'at tolerance 0.006 m' in text, text
    assert 'now rests in contact at base_link / t/1 -0.' in text, text
    (level, text, changed), = _updates(guard)
    assert changed and 'at tolerance 0.004 m' in text, text
    assert 'no longer rests in contact' in text, text
    assert guard.model is not model and guard.constraint is not constraint
    assert guard.constraint.model is guard.model and np.array_equal(guard.constraint.pairs,
                                                                    pairs)
    base = guard.model.link_index('base_link')
    assert guard.model.link_excess[base] <= 0.005 < model.link_excess[base]
    for name in guard.model.link_names[1:]:
        k = model.link_index(name)
        rows = slice(model.link_start[k], model.link_start[k] + model.link_count[k])
        grown = guard.model
        j = grown.link_index(name)
        new = slice(grown.link_start[j], grown.link_start[j] + grown.link_count[j])
        assert np.array_equal(guard.model.centers[new], model.centers[rows]), name
    assert not guard.constraint.contacts(q) and guard.contact_note(q) is None
    near = guard.constraint.contacts(q, within=0.01)          # apart, but within 1 cm
    assert [p for p, _ in near] == [('base_link', 't/1')] and 0.0 <= near[0][1] < 0.01
    assert guard(q, chain.clip(q + 0.05))
    assert guard.start_contact_refinement(q) == []            # nothing in contact now
    assert _table_guard(chain, 0.0075, 0.0).start_contact_refinement(q) == []    # off
    with pytest.raises(ParameterError, match='contact_tolerance'):
        CollisionSettings(contact_tolerance=0.001)


def test_the_node_s_guard_starts_the_covers_child_before_any_job(guard_and_chain):
    """``from_urdf`` with a ``cover_wait`` (the node's start) starts the covers' child process
    at once, so a warm start's first refinement does not wait for its interpreter (niced:
    7 s on a busy computer, Unitree H2); without one (a script) it starts none."""
    from smcik_ros.control import cover_updates
    _, chain = guard_and_chain
    cover_updates._WORKER.stop()
    CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                             cache_dir=cover_cache_dir())
    assert cover_updates._WORKER._child is None
    CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                             cache_dir=cover_cache_dir(), cover_wait=5.0)
    child = cover_updates._WORKER._child
    assert child is not None and child.poll() is None
    covers = cover_updates.covers_in_child(({}, {}, 0.01, None, ''))   # the child answers
    assert covers == {} and cover_updates._WORKER._child is child


def test_links_in_contact_are_refined_before_those_only_near(guard_and_chain):
    """At the first command the base rests in contact (a table 7.5 mm under it) and the
    flange is only near a box (3.7 mm padded). The base's covers are computed and applied
    first, on their own (the pair in contact blocks every motion that deepens it; H2's
    shoulder waited 16 s for its pelvis, only near, computed in the same job), then the
    flange's; the log note names the base."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.0075)
    table, box = np.eye(4), np.eye(4)
    table[:3, 3] = (0.0, 0.0, -0.0575)
    box[:3, 3] = chain.fk(q)[:3, 3] - (0.0, 0.0, 0.085)
    guard.replace({('t', 1): Obstacle('box', (1.2, 1.2, 0.1), table),
                   ('t', 2): Obstacle('box', (0.1, 0.1, 0.1), box)}, 'obstacles')
    contacts = dict(guard.constraint.contacts(q, within=CONTACT_RELEASE))
    assert contacts[('base_link', 't/1')] < 0.0 <= contacts[('flange', 't/2')], contacts
    assert guard.start_contact_refinement(q) == ['base_link']
    events = [text for _, text, changed in _updates(guard) if changed]
    assert [text.split(' computed')[0] for text in events] == [
        'covers of base_link', 'covers of base_link', 'covers of flange'], events
    assert guard.refined_at == {'base_link': 0.004, 'flange': 0.006}


@pytest.mark.parametrize('first', ['srdf', 'covers'])
def test_background_updates_computed_together_are_both_applied(guard_and_chain, first):
    """An SRDF update and a contact refinement both computed from the same model and pairs:
    whichever is polled second is applied on top of the first (its constraint built again
    in the background, not in the poll), so the guard ends with the refined model AND the
    SRDF's pairs, in either order."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.0075)
    before = len(guard.constraint.pairs)
    text = open(SRDF).read().replace(
        '</robot>', '<disable_collisions link1="link5" link2="link7" reason="Test"/></robot>')
    starts = {'srdf': lambda: guard.start_srdf_update(text, 'a test SRDF'),
              'covers': lambda: guard.start_contact_refinement(q)}
    for name in (first, 'covers' if first == 'srdf' else 'srdf'):
        assert starts[name]()
        guard.wait_for_update(60.0)
    messages = [guard.poll()[1]]
    assert guard.poll() is None and guard.updating      # the second: built again, meanwhile
    messages += [e[1] for e in _updates(guard)]
    assert messages[0].startswith('SRDF' if first == 'srdf' else 'covers'), messages
    assert len(messages) == 3 and [m for m in messages if 'at tolerance 0.004 m' in m] and \
        [m for m in messages if m.startswith('SRDF')], messages
    assert guard.constraint.model is guard.model
    assert guard.model.link_excess[guard.model.link_index('base_link')] <= 0.005
    assert len(guard.constraint.pairs) == before - 1 and guard.srdf == 'a test SRDF'
    assert not guard.constraint.contacts(q)


def test_an_srdf_applied_while_finer_covers_compute_is_kept_under_them(guard_and_chain,
                                                                       monkeypatch):
    """The start-up race: MoveIt's SRDF arrives and is applied while the finer covers of the
    first command are still being computed (they take seconds). The covers, applied next,
    go on top of the SRDF's pairs (their constraint built again, in the background), never
    back to the pairs they were computed with."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.008)
    before = len(guard.constraint.pairs)
    gate = threading.Event()
    refined = type(guard.model).refined
    monkeypatch.setattr(type(guard.model), 'refined',
                        lambda self, *a, **k: (gate.wait(60.0), refined(self, *a, **k))[1])
    assert guard.start_contact_refinement(q) == ['base_link']
    text = open(SRDF).read().replace(
        '</robot>', '<disable_collisions link1="link5" link2="link7" reason="Test"/></robot>')
    assert guard.start_srdf_update(text, 'a test SRDF')
    event = None
    for _ in range(1200):            # the SRDF's pairs arrive while the covers wait
        event = guard.poll()
        if event is not None:
            break
        time.sleep(0.05)
    assert event is not None and event[2] and 'a test SRDF' in event[1], event
    assert len(guard.constraint.pairs) == before - 1
    gate.set()
    level, message, changed = _updates(guard)[0]
    assert changed and 'no longer rests in contact' in message, message
    assert guard.constraint.model is guard.model and not guard.constraint.contacts(q)
    assert len(guard.constraint.pairs) == before - 1 and guard.srdf == 'a test SRDF'


def test_finer_covers_that_free_no_contact_are_not_applied(guard_and_chain, monkeypatch):
    """Where the parts themselves overlap (a table 10 mm into the base), finer covers take
    only the covers' excess off the depth: the swap needs a pair released or at least
    CONTACT_GAIN shallower, else the coarse model stays (the finer one would cost every
    query) and poll says why, changing nothing. The gain is raised here past the 6 mm the
    base's 4 mm cover gains on this table."""
    from smcik_ros.control import cover_updates as module
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, -0.01)
    model, constraint = guard.model, guard.constraint
    (pair, depth), = constraint.contacts(q)
    monkeypatch.setattr(module, 'CONTACT_GAIN', 0.01)
    assert guard.start_contact_refinement(q) == ['base_link']
    guard.wait_for_update(60.0)
    level, text, changed = guard.poll()
    assert (level, changed) == ('info', False) and 'not applied' in text, text
    assert 'base_link / t/1 -' in text
    assert guard.model is model and guard.constraint is constraint
    monkeypatch.setattr(module, 'CONTACT_GAIN', 0.002)
    assert guard.start_contact_refinement(q) == ['base_link']
    guard.wait_for_update(60.0)
    assert guard.poll()[2] and guard.constraint.contacts(q)[0][1] >= depth + 0.002


def test_finer_covers_that_come_back_coarser_are_not_applied(guard_and_chain, monkeypatch):
    """Covers asked for at a finer tolerance that come back coarser (made coarser for the
    link's sphere budget: TIAGo's torso_lift_link went from 1 cm to 1.2 cm when asked for
    6 mm) are never swapped in: each step says so and the next one is tried; the guard keeps
    its model and constraint. Here the child's covers are three times the tolerance asked."""
    from smcik_ros.collision.model import link_covers
    from smcik_ros.control import cover_updates as module
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.0075)
    model, constraint = guard.model, guard.constraint
    monkeypatch.setattr(module, 'covers_in_child', lambda inputs: link_covers(
        inputs[0], inputs[1], 3.0 * inputs[2], *inputs[3:])[0])
    assert guard.start_contact_refinement(q) == ['base_link']
    events = _updates(guard)
    assert [(level, changed) for level, _, changed in events] == [('info', False)] * 2, events
    for (_, text, _), step in zip(events, ('0.006', '0.004')):
        assert f'base_link at tolerance {step} m: none finer' in text, text
    assert guard.model is model and guard.constraint is constraint


def test_finer_covers_from_a_child_that_dies_leave_the_guard_as_it_was(guard_and_chain,
                                                                       monkeypatch, tmp_path):
    """The contact refinement computes its covers in a child process (``covers_in_child``):
    a child killed before it answers is one error line from poll (what was not computed,
    why, and that the covers stay); the guard keeps its model and constraint and checks on,
    and a refinement started after that is computed and applied."""
    import sys
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.008)
    model, constraint = guard.model, guard.constraint
    dies = tmp_path / 'dies'
    dies.write_text('#!/bin/sh\nkill -KILL $$\n')
    dies.chmod(0o755)
    with monkeypatch.context() as patch:
        patch.setattr(sys, 'executable', str(dies))
        assert guard.start_contact_refinement(q) == ['base_link']
        assert guard.wait_for_update(60.0)
    level, text, changed = guard.poll()
    assert (level, changed) == ('error', False), text
    assert text.startswith('the finer covers of base_link were not computed'), text
    assert 'ended without them (exit code -9)' in text and 'keeping the covers' in text
    assert guard.poll() is None
    assert guard.model is model and guard.constraint is constraint
    assert [p for p, _ in guard.constraint.contacts(q)] == [('base_link', 't/1')]
    assert guard(q, chain.clip(q + 0.05))
    assert guard.start_contact_refinement(q) == ['base_link']
    guard.wait_for_update(60.0)
    assert guard.poll()[2] and not guard.constraint.contacts(q)

def test_the_swap_rule_of_finer_covers():
    """``frees_contact``: a pair released (apart, or beyond the query), or one at least
    CONTACT_GAIN farther."""
    from smcik_ros.control.cover_updates import CONTACT_GAIN, frees_contact as _frees_contact
    before = [(('a', 'b'), -0.02), (('a', 'c'), -0.001)]
    assert _frees_contact(before, [(('a', 'b'), -0.02)])                      # a, c released
    assert _frees_contact(before, [(('a', 'b'), -0.02 + CONTACT_GAIN),
                                   (('a', 'c'), -0.001)])
    assert not _frees_contact(before, [(('a', 'b'), -0.02 + 0.5 * CONTACT_GAIN),
                                       (('a', 'c'), -0.001)])
    assert not _frees_contact(before, before)
    assert _frees_contact(before, [(('a', 'b'), -0.02), (('a', 'c'), 0.0)])   # apart now
    near = [(('a', 'b'), 0.001)]                         # apart already, within the query
    assert _frees_contact(near, [(('a', 'b'), 0.001 + CONTACT_GAIN)]) and _frees_contact(near, [])
    assert not _frees_contact(near, [(('a', 'b'), 0.001 + 0.5 * CONTACT_GAIN)])


def _upkeep_on_table(chain):
    """Return (q, guard, loop, upkeep, reports): the arm at q with its base 8 mm above a
    table (``_table_guard``), a loop with the solver in a worker thread validated by the
    guard, and the node's per-tick ``SceneUpkeep`` (its reports go to the list)."""
    from smcik_ros.control.limits import limits_for_chain
    from smcik_ros.control.arm_state import ArmSettings
    from smcik_ros.control.scene_upkeep import SceneUpkeep
    from smcik_ros.control.tick import ControlLoop
    from smcik_ros.solvers import make_solver
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.008)
    limits, _ = limits_for_chain(chain, velocity_scale=0.5, max_acceleration=3.0)
    loop = ControlLoop(chain, make_solver('smc', chain, seed=5), limits, ArmSettings(),
                       validators=[guard], solver_thread=True)
    reports = []
    upkeep = SceneUpkeep(guard, loop, lambda: [guard.constraint], 0.002,
                         lambda *args: reports.append(args))
    return q, guard, loop, upkeep, reports


def test_scene_upkeep_notes_a_resting_contact_once_and_swaps_the_finer_covers_in(
        guard_and_chain):
    """The node's per-tick upkeep (no ROS): after the first command it notes the pair in
    contact once and starts the finer covers; at a later tick it swaps them in, hands the
    loop the new constraint, and the note is not repeated. While the solver's worker is busy
    the tick neither waits for it nor swaps (the loop would have to wait for the step):
    the swap comes at the first tick that finds the worker idle."""
    _, chain = guard_and_chain
    q, guard, loop, upkeep, reports = _upkeep_on_table(chain)
    assert upkeep.before_tick() == []
    (level, note), = upkeep.after_command(q)
    assert level == 'warn' and 'base_link / t/1' in note, note
    assert 'in contact at its first command' in note, note
    assert upkeep.after_command(q) == [] and not reports
    guard.wait_for_update(60.0)
    gate, before = threading.Event(), guard.constraint
    assert loop.beside(lambda: gate.wait(10.0))       # a long step in the worker
    assert upkeep.before_tick() == [] and guard.constraint is before
    assert not loop.solver_idle and loop.solver_held  # returned while it still runs
    gate.set()
    loop.settle()
    lines = upkeep.before_tick()
    assert [level for level, _ in lines] == ['info'], lines
    assert 'no longer rests in contact' in lines[0][1]
    assert loop.constraints_kept == [guard.constraint] and not loop.solver_held
    assert upkeep.after_command(q) == []


def test_parts_only_near_at_the_first_command_get_finer_covers_there(guard_and_chain):
    """The base 13 mm above the table: its 1 cm cover is 1 mm clear, within the 5 mm of
    ``CONTACT_RELEASE`` but not in contact. The first command refines it at once (TIAGo
    dual's arms rest 4.5 mm from its torso; before, the first goal waited at the margin for
    the covers a blocked goal asked for): one info line, then the finer cover, 2 mm or more
    farther, swapped in. No Default-rule check for a pair that is not in contact."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.013)
    (pair, gap), = guard.constraint.contacts(q, within=CONTACT_RELEASE)
    assert pair == ('base_link', 't/1') and 0.0 < gap < CONTACT_RELEASE and \
        not guard.constraint.contacts(q)
    names = guard.start_contact_refinement(q)
    assert names == ['base_link'] and not guard.updates.busy('smcik-default-pairs')
    level, note = guard.contact_note(q, names)
    assert level == 'info' and 'within 5 mm' in note and 'covers of base_link' in note, note
    events = _updates(guard)
    assert events and events[0][2] and 'at tolerance 0.006 m' in events[0][1], events
    (_, farther), = guard.constraint.contacts(q, within=0.02)
    assert farther >= gap + 0.002, (gap, farther)
    assert guard.start_contact_refinement(q, first=False) == []      # fine enough now


def test_the_finest_step_is_for_pairs_still_in_contact_or_a_blocked_goal(guard_and_chain):
    """The base 10 mm above the table: in contact in its 1 cm cover, apart but within
    ``CONTACT_RELEASE`` in its 6 mm one. At the first command the steps end there (a 4 mm
    cover costs every query of every tick, and nothing is in contact any more: Talos's six
    resting links, 1275 -> 5136 spheres); for a goal blocked there the 4 mm step is
    computed too (applied if it parts the pair by 2 mm more), since the near pair is what
    blocks it; not once that goal was reached or replaced (``wanted`` False when the step
    is due: a swept gripper's 24 s at 4 mm held up the next goal's covers on Talos)."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    asked = []
    for first, wanted, steps in ((True, None, ['0.006']), (False, None, ['0.006', '0.004']),
                                 (False, lambda: asked.append(1) or False, ['0.006'])):
        guard = _table_guard(chain, 0.010)
        (_, depth), = guard.constraint.contacts(q)
        assert depth < 0.0, 'the set-up: in contact at 1 cm'
        assert guard.start_contact_refinement(q, first=first,
                                              wanted=wanted) == ['base_link']
        events = _updates(guard)
        assert events[0][2], events
        assert [text.split('tolerance ')[1].split(' m')[0] for _, text, _ in events] == steps
        if first:
            (_, gap), = guard.constraint.contacts(q, within=CONTACT_RELEASE)
            assert 0.0 <= gap < CONTACT_RELEASE and 'no longer rests' in events[0][1], gap
    assert asked == [1], 'asked once, when the 4 mm step was due'


def test_a_goal_blocked_after_the_first_command_refined_gets_the_next_finer_step(
        guard_and_chain):
    """The first command refined the base to 6 mm (apart, within ``CONTACT_RELEASE``): a goal
    blocked there computes the next step, 4 mm, instead of nothing (H2: its shoulder
    refined at the first command, a goal blocked at that pair got no finer covers)."""
    _, chain = guard_and_chain
    q = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    guard = _table_guard(chain, 0.010)
    assert guard.start_contact_refinement(q) == ['base_link']
    assert ['0.006' in text for _, text, _ in _updates(guard)] == [True]
    assert guard.start_contact_refinement(q, first=False) == ['base_link']
    events = _updates(guard)
    assert [text.split('tolerance ')[1].split(' m')[0] for _, text, _ in events] == ['0.004']


def test_a_waiting_collision_update_holds_the_solver_worker_until_it_is_applied(
        guard_and_chain):
    """A new collision model is handed to the loop between two solver steps. With side work
    (markers, alternatives) queued in the worker behind every step, no tick found it idle
    (talos: busy at 986 of 988 ticks; the finer covers that a blocked goal needed came 14 s
    late). While an update waits, the worker starts no step and takes no side work
    (``solver_held``), the ticks carry the last answer on, and the update is applied as
    soon as the running work ends (a few ticks here; the loop's bound is a liveness
    deadline); then the solver steps again."""
    from test_control_loop import Stream, follower
    _, chain = guard_and_chain
    q, guard, loop, upkeep, _ = _upkeep_on_table(chain)
    loop.set_constraints([guard.constraint])
    loop.stepper.worker.side_share = 1.0     # side work behind every step, searching or not
    stream, arm = Stream(loop, seed=1), follower(1)
    stream.measure(q)
    stream.tick()
    loop.offer_goal('pose', chain.fk(q + np.array([0.3, -0.2, 0.2, 0.3, 0.0, -0.2, 0.0])),
                    '', None, stream.t)
    for _ in range(3):
        arm(stream)
        stream.tick()
        assert loop.beside(lambda: time.sleep(0.03))
    assert upkeep.after_command(stream.commands[-1].q)     # the finer covers start
    assert guard.wait_for_update(60.0) and guard.updates.waiting
    loop.settle()
    assert loop.beside(lambda: time.sleep(0.03))        # the worker busy when it waits
    before, applied, refused = guard.constraint, None, 0
    for k in range(1000):                     # a liveness bound (5 s), not a timing test
        time.sleep(0.005)                      # a tick period of wall time
        arm(stream)
        lines = upkeep.before_tick()
        if lines:
            applied = k
            break
        calls = loop.stepper.worker.calls
        stream.tick()
        if loop.solver_held:
            assert loop.stepper.worker.calls == calls      # no step started while held
        if not loop.beside(lambda: time.sleep(0.03)):      # side work behind each step
            refused += 1
            assert loop.solver_held
    assert applied is not None, 'the update never found the worker idle'
    assert guard.constraint is not before and loop.constraints_kept == [guard.constraint]
    assert refused > 0                         # the hold turned side work away
    calls = loop.stepper.worker.calls
    arm(stream)
    assert upkeep.before_tick() == [] and not loop.solver_held
    stream.run(3, arm)
    assert loop.stepper.worker.calls > calls   # stepping again
    assert all(np.isfinite(c.q).all() for c in stream.commands)
    loop.settle()


def _blocked_run(chain, guard, q0, q_goal, ticks, upkeep=True):
    """Tick a loop (the guard its validator and the solver's constraint) from q0 towards the
    tool pose at q_goal as the node does (``SceneUpkeep.before_tick``, the tick,
    ``after_command``), the arm following the commands; the guard's background updates
    are waited for as they start. Return (tick the goal was reached or None, upkeep lines,
    the commanded configurations)."""
    from test_control_loop import Log, Stream, follower, make_loop
    from smcik_ros.control.scene_upkeep import SceneUpkeep
    from smcik_ros.solvers import make_solver
    loop, _ = make_loop(chain, solver=make_solver('smc', chain, seed=1), log=Log())
    loop.validators.append(guard)
    loop.set_constraints([guard.constraint])
    keep = SceneUpkeep(guard, loop, lambda: [guard.constraint], 0.002, lambda *a: None)
    stream, arm, lines = Stream(loop, seed=1), follower(1), []
    stream.measure(q0)
    stream.tick()
    loop.offer_goal('pose', chain.fk(q_goal), '', None, stream.t)
    for k in range(ticks):
        arm(stream)
        if upkeep:
            guard.wait_for_update(60.0)
            lines += keep.before_tick()
        command = stream.tick()
        if upkeep and command is not None:
            lines += keep.after_command(command.q)
        if loop.goal_reached:
            break
    return (k if loop.goal_reached else None), lines, [c.q for c in stream.commands]


def _box_under_goal(chain):
    """Return (q0, q_goal, box pose, guard maker): a (0.3, 0.3, 0.1) box whose top is 5 mm
    (python-fcl, the URDF's own shapes) under the arm at q_goal, where its 1 cm covers
    reach into it; a guard maker giving a fresh guard with the box."""
    import fcl
    from collision_helpers import FclRobot
    q0 = np.array([0.0, 0.4, 0.0, -1.5, 0.0, 1.2, 0.0])
    rng = np.random.default_rng(1)
    q_goal = chain.clip(q0 + np.r_[rng.uniform(-0.3, 0.3), rng.uniform(0.3, 0.7),
                                   rng.uniform(-0.2, 0.2), rng.uniform(0.0, 0.5),
                                   rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), 0.0])
    objects = FclRobot(ARM7_URDF, chain.base_link).objects(dict(zip(chain.joint_names,
                                                                    q_goal)))
    floor = fcl.CollisionObject(fcl.Box(4.0, 4.0, 0.1), fcl.Transform(np.array([0, 0, -2.0])))
    lowest = min(fcl.distance(o, floor, fcl.DistanceRequest(), fcl.DistanceResult())
                 for name, items in objects.items() if name != 'base_link' for o in items)
    pose = np.eye(4)
    pose[:3, 3] = chain.fk(q_goal)[:2, 3].tolist() + [-1.95 + lowest - 0.005 - 0.05]

    def guard_with_box():
        guard, _ = CollisionGuard.from_urdf(chain, ARM7_URDF, urdf_path=ARM7_URDF, srdf=SRDF,
                                            cache_dir=cover_cache_dir())
        guard.replace({('t', 1): Obstacle('box', (0.3, 0.3, 0.1), pose)}, 'obstacles')
        return guard
    return q0, q_goal, pose, guard_with_box


def test_a_goal_blocked_where_only_the_covers_touch_gets_finer_covers_and_is_reached(
        guard_and_chain):
    """Covers exceed the parts by up to their tolerance: a goal whose tool stops 5 mm
    (python-fcl, the URDF's own shapes) above a box is blocked by the 1 cm covers (the
    flange's reaches 2 mm into it there) and the arm stays short of it. While a goal is
    blocked (a validator refused a motion, or the command stood still, for
    ``BLOCKED_TICKS``; here the solver itself holds the arm at the margin) the upkeep
    computes again the covers of the links within ``CONTACT_RELEASE`` of another part at
    the command (the flange), once, swaps them in where they widen a pair, and the goal is
    reached with no command touching the box (python-fcl)."""
    import fcl
    from collision_helpers import FclRobot
    _, chain = guard_and_chain
    q0, q_goal, pose, guard_with_box = _box_under_goal(chain)
    guard = guard_with_box()
    assert guard.constraint.contacts(q_goal)[0][0] == ('flange', 't/1'), 'the set-up'
    assert not guard.constraint.contacts(q0, within=CONTACT_RELEASE), 'the set-up'
    excess = guard.model.link_excess[guard.model.link_index('flange')]
    reached, lines, _ = _blocked_run(chain, guard_with_box(), q0, q_goal, 1500, upkeep=False)
    assert reached is None, 'without: blocked short of the goal'
    reached, lines, commands = _blocked_run(chain, guard, q0, q_goal, 1500)
    assert reached is not None, lines
    text = ' '.join(t for _, t in lines)
    assert 'goal 1 is blocked with flange within 5 mm' in text, text
    assert text.count('is blocked with') == 1, text
    assert 'covers of flange computed again at tolerance 0.006 m' in text, text
    assert guard.model.link_excess[guard.model.link_index('flange')] < excess
    assert not guard.constraint.contacts(q_goal)
    box = fcl.CollisionObject(fcl.Box(0.3, 0.3, 0.1), fcl.Transform(pose[:3, 3]))
    robot = FclRobot(ARM7_URDF, chain.base_link)
    for q in commands[::10] + commands[-1:]:
        items = robot.objects(dict(zip(chain.joint_names, q)))
        assert min(fcl.distance(o, box, fcl.DistanceRequest(), fcl.DistanceResult())
                   for name, group in items.items() for o in group) > 0.0


def test_a_blocked_goal_gets_finer_covers_while_another_update_is_computed(guard_and_chain):
    """A blocked goal's finer covers start while another background update is computed
    (the fine covers of swept links: Unitree H2_Plus's fingers, jobs for 12 s after the
    first command, during which two goals held at the margin got none), queued behind it
    (one child process at a time), and the goal is reached once both are done."""
    import threading
    from test_control_loop import Log, Stream, follower, make_loop
    from smcik_ros.control.scene_upkeep import SceneUpkeep
    from smcik_ros.solvers import make_solver
    _, chain = guard_and_chain
    q0, q_goal, _, guard_with_box = _box_under_goal(chain)
    guard = guard_with_box()
    release = threading.Event()
    guard.updates.start('smcik-fine-covers', lambda: release.wait(120.0) and {
        'text': lambda: 'the other update'}, lambda exc: str(exc), covers=True)
    loop, _ = make_loop(chain, solver=make_solver('smc', chain, seed=1), log=Log())
    loop.validators.append(guard)
    loop.set_constraints([guard.constraint])
    keep = SceneUpkeep(guard, loop, lambda: [guard.constraint], 0.002, lambda *a: None)
    keep.noted = True                  # past the first command's note
    stream, arm, lines = Stream(loop, seed=1), follower(1), []
    stream.measure(q0)
    stream.tick()
    loop.offer_goal('pose', chain.fk(q_goal), '', None, stream.t)
    for _ in range(1500):
        arm(stream)
        lines += keep.before_tick()
        command = stream.tick()
        if command is not None:
            lines += keep.after_command(command.q)
        if 'is blocked with' in ' '.join(t for _, t in lines):
            break
    assert not release.is_set() and guard.updates.busy('smcik-fine-covers')
    assert 'goal 1 is blocked with flange' in ' '.join(t for _, t in lines), lines
    assert not loop.goal_reached
    release.set()
    for _ in range(1500):
        arm(stream)
        guard.wait_for_update(60.0)
        lines += keep.before_tick()
        command = stream.tick()
        if loop.goal_reached:
            break
    text = ' '.join(t for _, t in lines)
    assert loop.goal_reached, text
    assert 'the other update' in text and 'covers of flange computed again' in text, text


def _elbow_urdf(path):
    """An arm whose forearm box enters the upper-arm box (two joints apart, across a slide
    and a bend, as Alex's meshes do at its elbow; apart with the slide out), and a hand box,
    four joints from the upper arm, that the wrist folds into it: written to ``path``."""
    def link(name, size=None, xyz='0 0 0'):
        shape = '' if size is None else (
            f'<collision><origin xyz="{xyz}"/><geometry><box size="{size}"/></geometry>'
            '</collision>')
        return f'<link name="{name}">{shape}</link>'

    def joint(name, parent, child, xyz, kind='revolute', axis='0 1 0', lower=-2.0):
        return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
                f'<child link="{child}"/><origin xyz="{xyz}"/><axis xyz="{axis}"/>'
                f'<limit lower="{lower}" upper="{0.3 if kind == "prismatic" else 2.0}" '
                'velocity="1" effort="1"/></joint>')
    text = ('<robot name="elbow">' + link('base_link', '0.2 0.2 0.05', '0 0 -0.1')
            + link('upper', '0.06 0.06 0.3', '0 0 0.15') + link('elbow')
            + link('fore', '0.05 0.05 0.3', '0 0 0.1') + link('wrist')
            + link('hand', '0.1 0.1 0.1', '0.45 0 0')
            + joint('shoulder', 'base_link', 'upper', '0 0 0')
            + joint('slide', 'upper', 'elbow', '0 0 0.25', 'prismatic', '0 0 1', 0.0)
            + joint('bend', 'elbow', 'fore', '0 0 0')
            + joint('wrist_joint', 'fore', 'wrist', '0 0 0.3')
            + joint('hand_joint', 'wrist', 'hand', '0 0 0') + '</robot>')
    path.write_text(text)
    return str(path)


def test_pairs_whose_urdf_shapes_intersect_at_the_first_command_are_disabled(tmp_path):
    """MoveIt's "Default" rule (python-fcl on the URDF's own shapes): at the first command the
    forearm box enters the upper-arm box by 5 cm (two joints apart): that pair is disabled
    in the background, logged, and kept when the pairs are computed again; the forearm then
    slides deeper in, which the allowance refused before. The hand box, four joints from the
    upper arm, is not disabled where the folded wrist puts it inside."""
    from smcik_ros.collision import overlapping_parts
    from smcik_ros.model import Chain
    urdf = _elbow_urdf(tmp_path / 'elbow.urdf')
    chain = Chain.from_urdf(urdf, 'base_link', 'hand')
    q = np.zeros(chain.nq)
    q[chain.joint_index('slide')] = 0.05
    guard, _ = CollisionGuard.from_urdf(chain, urdf, urdf_path=urdf, cache_dir=str(tmp_path))
    in_contact = [pair for pair, _ in guard.constraint.contacts(q)]
    assert in_contact == [('upper', 'fore')], in_contact
    assert overlapping_parts(guard.model, q, in_contact) == [('upper', 'fore')]
    folded = q.copy()
    folded[chain.joint_index('wrist_joint')] = 1.57
    hand = [('upper', 'hand')]
    assert overlapping_parts(guard.model, folded, hand, joints=4) == hand
    assert overlapping_parts(guard.model, folded, hand) == []
    deeper = q.copy()
    deeper[chain.joint_index('slide')] = 0.0
    assert not guard(q, deeper), 'the set-up: the allowance refuses a deeper overlap'
    guard.start_contact_refinement(q)
    events = _updates(guard)
    text = ' '.join(t for _, t, _ in events)
    assert '1 self-collision pair(s) disabled, their URDF shapes intersect at the first ' \
        'command (upper / fore;' in text, text
    assert guard.pairs.reason('upper', 'fore') == 'srdf (Default)'
    assert guard.pairs.reason('upper', 'hand') is None
    assert guard(q, deeper)
    guard.start_srdf_update(guard.srdf_parsed, guard.srdf, 'again')
    _updates(guard)
    assert guard.pairs.reason('upper', 'fore') == 'srdf (Default)'


def test_without_python_fcl_the_default_rule_says_so_and_keeps_the_pair(tmp_path, monkeypatch):
    """python-fcl is what tells the URDF's shapes apart: without it the pair in contact at the
    first command stays checked, held at its depth, and the log says why and what to do."""
    import sys
    from smcik_ros.model import Chain
    urdf = _elbow_urdf(tmp_path / 'elbow.urdf')
    chain = Chain.from_urdf(urdf, 'base_link', 'hand')
    q = np.zeros(chain.nq)
    q[chain.joint_index('slide')] = 0.05
    guard, _ = CollisionGuard.from_urdf(chain, urdf, urdf_path=urdf, cache_dir=str(tmp_path))
    monkeypatch.setitem(sys.modules, 'fcl', None)         # import fcl raises ImportError
    guard.start_contact_refinement(q)
    text = ' '.join(t for _, t, _ in _updates(guard))
    assert 'python-fcl is not installed: pairs whose URDF shapes intersect at the first ' \
        'command stay checked' in text, text
    assert guard.pairs.reason('upper', 'fore') is None
