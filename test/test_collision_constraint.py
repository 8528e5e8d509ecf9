"""The collision constraint: conservative against python-fcl, reference semantics, gradients,
reports, the motion check, the engine's bounds and caches."""

import numpy as np
import pytest

from smcik_ros.collision import (CollisionConstraint, KeepOutSphere, Obstacle, Scene,
                                 conventional_srdf_path, pose_matrix, self_collision_pairs)
from smcik_ros.collision import constraint as constraint_module
from smcik_ros.collision import engine
from smcik_ros.errors import GoalError
from smcik_ros.rotations import rotvec_to_matrix

from collision_helpers import FclRobot, demo_model, fcl_distance, fcl_obstacle
from conftest import ARM6_URDF, ARM7_URDF


def _random_obstacles(rng, count, low=(-0.6, -0.6, 0.0), high=(0.6, 0.6, 0.9)):
    out = {}
    for k in range(count):
        pose = np.eye(4)
        pose[:3, :3] = rotvec_to_matrix(rng.normal(size=3))
        pose[:3, 3] = rng.uniform(low, high)
        kind = k % 3
        if kind == 0:
            obstacle = Obstacle('sphere', (rng.uniform(0.03, 0.12),), pose)
        elif kind == 1:
            obstacle = Obstacle('box', tuple(rng.uniform(0.04, 0.3, 3)), pose)
        else:
            obstacle = Obstacle('cylinder', (rng.uniform(0.02, 0.1), rng.uniform(0.05, 0.4)),
                                pose)
        out[('test', k)] = obstacle
    return out


@pytest.fixture(scope='module', params=[ARM7_URDF, ARM6_URDF])
def arm(request):
    chain, model = demo_model(request.param)
    pairs = self_collision_pairs(model, conventional_srdf_path(request.param))
    return request.param, chain, model, pairs


def _pair_minimum(constraint, frames):
    """Return {(n, pair): smallest unpadded leaf distance} for every pair within 1 m."""
    world = constraint._robot.world(frames)
    leaves = engine.query(constraint._robot, world, constraint.pairs, constraint._obstacles(),
                          1.0, 0.0)
    out = {}
    for n, p, d in zip(leaves.n, leaves.pair, leaves.d):
        key = (int(n), int(p))
        out[key] = min(out.get(key, np.inf), float(d))
    return out


def test_the_fcl_helper_poses_the_links_as_yourdfpys_scene_graph(arm):
    """The FCL reference (collision_helpers.FclRobot) multiplies yourdfpy's joint transforms
    along the tree itself: the link poses are those of yourdfpy's update_cfg + get_transform
    at random configurations, links off the chain (no joint named: 0) included."""
    urdf, chain, _, _ = arm
    fcl_robot = FclRobot(urdf, 'base_link')
    assert fcl_robot._joints is not None, 'the fast path is the one tested'
    rng = np.random.default_rng(3)
    for q in chain.random_configuration(rng, 20):
        cfg = dict(zip(chain.joint_names, q))
        fast, graph = fcl_robot.link_poses(cfg), fcl_robot.scene_graph_poses(cfg)
        assert fast.keys() == graph.keys() and len(fast) >= chain.n
        for name in fast:
            assert np.allclose(fast[name], graph[name], atol=1e-12), name


def test_conservative_against_fcl_on_the_urdf_shapes(arm):
    """Whenever FCL finds two URDF shapes (or a shape and an obstacle) touching, the model's
    distance for that pair is negative; in general it never exceeds FCL's distance.

    (Tightness is tested on the covers themselves, test_collision_covers: FCL's GJK distance
    between cylinders overestimates by centimetres at times, 21.4 cm reported for 19.1 cm
    measured by dense sampling, so it cannot bound the excess from below.)"""
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(11)
    scene = Scene(_random_obstacles(rng, 6))
    constraint = CollisionConstraint(model, scene, pairs=pairs, padding=0.005)
    fcl_robot = FclRobot(urdf, 'base_link')
    obstacles = [fcl_obstacle(o) for _, o in scene.items()]
    names = model.link_names
    contacts = checked = 0
    for q in chain.random_configuration(rng, 150):
        frames = chain.frames(q)
        ours = _pair_minimum(constraint, frames)
        objects = fcl_robot.objects(dict(zip(chain.joint_names, q)))
        fcl_hit = False
        for p, (a, b) in enumerate(constraint.pairs):
            d_fcl = fcl_distance(objects[names[a]], objects[names[b]])
            d_ours = ours.get((0, p), 1.0)
            checked += 1
            assert d_ours <= d_fcl + 1e-6, (names[a], names[b], d_ours, d_fcl)
            if d_fcl <= 0.0:
                contacts += 1
                fcl_hit = True
                assert d_ours < 0.0
        obs = constraint._obstacles()
        for k in range(len(obs.pair_link)):
            link, o = names[obs.pair_link[k]], obs.pair_obj[k]
            d_fcl = fcl_distance(objects[link], [obstacles[o]])
            d_ours = ours.get((0, len(constraint.pairs) + k), 1.0)
            checked += 1
            assert d_ours <= d_fcl + 1e-6, (link, d_ours, d_fcl)
            if d_fcl <= 0.0:
                contacts += 1
                fcl_hit = True
        if fcl_hit:
            assert constraint.violated(frames)[0] and constraint.in_collision(frames)[0]
    assert checked > 1000 and contacts > 20


def test_reference_allows_moving_out_but_never_deeper(arm):
    urdf, chain, model, pairs = arm
    q = chain.neutral_configuration()
    tool = chain.fk(q)[:3, 3]
    scene = Scene({('o', 1): Obstacle.sphere(tool, 0.04)})
    c = CollisionConstraint(model, scene, pairs=pairs)
    frames = chain.frames(q)
    assert c.violated(frames)[0]                         # no reference: any penetration
    c.set_reference(q)
    assert not c.violated(frames)[0]                     # the reference itself is allowed
    report = c.distances(frames)
    assert report.distance[0] < 0.0
    rng = np.random.default_rng(2)
    candidates = chain.clip(q + rng.normal(0.0, 0.03, (600, chain.nq)))
    cand_frames = chain.frames(candidates)
    bad = c.violated(cand_frames)
    # Each candidate that is accepted has no leaf deeper than its pair's deepest at the
    # reference (per pair: a resting contact may be slid along, never deepened).
    ref = {}
    for (pair, _, _), d in _leaf_table(c, chain.frames(q)).items():
        ref[pair] = min(ref.get(pair, 0.0), d)
    mine = _leaf_rows(c, cand_frames)
    at_reference = _leaf_table(c, chain.frames(q))
    slid = 0
    for n in range(len(candidates)):
        deeper = any(d < 0.0 and d < ref.get(pair, 0.0) - 1e-7      # a moving link's
                     for (pair, _, _), d in mine[n].items())         # obstacle: no play
        assert bad[n] == deeper
        slid += not deeper and any(d < 0.0 and key not in at_reference
                                   for key, d in mine[n].items())
    assert bad.any() and not bad.all()
    # (On the 6-DOF arm some accepted candidates touch with sphere pairs that did not touch
    # at the reference, and a per-sphere-pair rule would refuse them; the 7-DOF arm's 600
    # draws have none.)
    assert slid > 0 or chain.nq == 7
    c.set_reference(None)
    assert c.violated(frames)[0]


def test_a_contact_allowance_lasts_while_the_pair_stays_in_contact(arm):
    """The per-pair allowance over a seeded walk of references (the node's commands) from a
    start folded onto itself (self pairs: resting contacts), against an oracle of the
    rule: a pair penetrating at a
    reference may get as deep as when its contact began (plus CONTACT_PLAY, never fed
    back), until a reference finds it CONTACT_RELEASE apart; then no penetration is
    allowed. The explicit-reference motion check holds the same allowances."""
    urdf, chain, model, pairs = arm
    c = CollisionConstraint(model, Scene(), pairs=pairs)
    rng = np.random.default_rng(11)
    for q in chain.random_configuration(rng, 400):     # a start folded onto itself
        depth = _pair_depths(c, q, 0.0)
        if depth and -0.015 < min(depth.values()) < -0.002:
            break
    else:
        pytest.fail('no seeded configuration with a self contact 2-15 mm deep')
    home = chain.neutral_configuration()
    assert not _pair_depths(c, home, 0.0)
    release = constraint_module.CONTACT_RELEASE
    play = constraint_module.CONTACT_PLAY
    oracle, released, wobbled, refused = {}, 0, 0, 0
    for step in range(80):
        t = 0.0 if step < 40 else (step - 39) / 40.0   # then unfolding to home
        q_ref = chain.clip(q + t * (home - q) + rng.normal(0.0, 0.015, chain.nq) * (1.0 - t))
        c.set_reference(q_ref)
        depth = _pair_depths(c, q_ref, release)
        for p in list(oracle):
            if p not in depth:
                del oracle[p]
                released += 1
            elif depth[p] < oracle[p] - play:        # only a reference deeper than the play
                oracle[p] = depth[p] - 1e-7
        for p, d in depth.items():
            if d < 0.0 and p not in oracle:
                oracle[p] = d - 1e-7
        allowed = dict(zip(*(v.tolist() for v in c.allowances())))
        assert allowed.keys() == oracle.keys()
        assert all(abs(allowed[p] - oracle[p]) < 1e-12 for p in oracle)
        candidates = chain.clip(q_ref + rng.normal(0.0, 0.02, (30, chain.nq)))
        rows = _leaf_rows(c, chain.frames(candidates))
        expected = np.array([any(d < (oracle[p] - play if p in oracle else 0.0)
                                 for (p, _, _), d in row.items()) for row in rows])
        assert np.array_equal(c.violated(chain.frames(candidates)), expected), step
        # Deeper than this reference but within the contact's allowance: the rule per
        # reference alone refused these.
        wobbled += sum(not bad and any(d < min(depth.get(p, 0.0), 0.0) - 1e-7
                                       for (p, _, _), d in row.items())
                       for bad, row in zip(expected, rows))
        refused += int(expected.sum())
        # The motion check holds the same allowances at its sub-steps (between them a
        # cover point moves at most the motion resolution).
        ok = c.check_motions(q_ref, candidates[:5])
        for k in range(5):
            path = q_ref + np.linspace(0.0, 1.0, 40)[1:, None] * (candidates[k] - q_ref)
            deep = _leaf_rows(c, chain.frames(path))
            slack = c.motion_resolution
            if any(any(d < (oracle[p] - play if p in oracle else 0.0) - slack
                       for (p, _, _), d in row.items()) for row in deep):
                assert not ok[k], (step, k)
            if ok[k]:
                assert not c.violated(chain.frames(candidates[k:k + 1]))[0]
    assert released >= 1 and wobbled > 0 and refused > 0, (released, wobbled, refused)


def test_credited_distances_shift_only_the_pairs_in_contact(arm):
    """``distances(credit=c)`` (the detour's clearance): pairs with an allowance count as c
    plus their distance beyond it, the others as they are; per configuration the smallest,
    capped at CREDIT_SEARCH. A nearer pair is never hidden behind a shifted one (the
    closest leaf of a configuration is often the contact's). Brute force per pair."""
    urdf, chain, model, pairs = arm
    q = chain.neutral_configuration()
    tool = chain.fk(q)[:3, 3]
    table = np.eye(4)
    table[:3, 3] = (0.0, 0.0, -0.052)
    probe = CollisionConstraint(model, Scene({('o', 2): Obstacle.sphere(tool, 0.001)}),
                                pairs=pairs)
    reach = min(d for p, d in _pair_depths(probe, q, 1.0).items()
                if probe.pair_names(p)[1] == 'o/2')
    assert reach < 0.0                         # the tool's cover holds its own origin
    center = tool + (0.0, 0.0, 0.1)            # then a sphere 4 mm clear of the arm above it
    probe.scene.apply([('add', ('o', 2), Obstacle.sphere(center, 0.001))], 'test')
    gap = min(d for p, d in _pair_depths(probe, q, 1.0).items()
              if probe.pair_names(p)[1] == 'o/2')
    assert gap > 0.01
    scene = Scene({('o', 1): Obstacle('box', (1.2, 1.2, 0.1), table),
                   ('o', 2): Obstacle.sphere(center, 0.001 + gap - 0.004)})
    c = CollisionConstraint(model, scene, pairs=pairs)
    c.set_reference(q)
    allowed = dict(zip(*(v.tolist() for v in c.allowances())))
    assert allowed and all(c.pair_names(p)[1] == 'o/1' for p in allowed)    # the table
    assert min(allowed.values()) < -0.005
    credit, cap = 0.2, constraint_module.CREDIT_SEARCH
    qs = chain.clip(q + np.random.default_rng(8).normal(0.0, 0.05, (40, chain.nq)))
    report = c.distances(chain.frames(qs), search=(0.2,), credit=credit)
    hidden = 0
    for k, qk in enumerate(qs):
        depth = _pair_depths(c, qk, 1.0)
        shifted = [d + credit - allowed[p] if p in allowed else d for p, d in depth.items()]
        assert report.distance[k] == pytest.approx(min(min(shifted), cap), abs=1e-12), k
        raw_nearest = min(depth, key=depth.get)
        hidden += raw_nearest in allowed and min(shifted) < cap
    assert hidden > 0            # configurations where the nearest leaf is the contact's
    plain = c.distances(chain.frames(qs))
    c.set_reference(None)
    assert np.array_equal(c.distances(chain.frames(qs), credit=credit).distance,
                          plain.distance)              # no allowance: unchanged


def _pair_depths(c, q, threshold):
    """Return {pair: smallest padded leaf distance} of the pairs closer than threshold."""
    frames = c.model.chain.frames(q[None])
    world = c._robot.world(frames)
    leaves = engine.query(c._robot, world, c.pairs, c._obstacles(), threshold, c.padding)
    out = {}
    for p, d in zip(leaves.pair, leaves.d):
        out[int(p)] = min(out.get(int(p), np.inf), float(d))
    return out


def _leaf_table(c, frames):
    world = c._robot.world(frames)
    leaves = engine.query(c._robot, world, c.pairs, c._obstacles(), 0.0, c.padding)
    return {(int(p), int(a), int(b)): float(d)
            for p, a, b, d in zip(leaves.pair, leaves.a, leaves.b, leaves.d)}


def _leaf_rows(c, frames):
    world = c._robot.world(frames)
    leaves = engine.query(c._robot, world, c.pairs, c._obstacles(), 0.0, c.padding)
    rows = [dict() for _ in range(len(frames))]
    for n, p, a, b, d in zip(leaves.n, leaves.pair, leaves.a, leaves.b, leaves.d):
        rows[int(n)][(int(p), int(a), int(b))] = float(d)
    return rows


def _numeric(fn, chain, q, h=1e-6):
    cols = []
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = h
        cols.append((fn(chain.frames(chain.integrate(q, dv))) -
                     fn(chain.frames(chain.integrate(q, -dv)))) / (2 * h))
    return np.stack(cols, axis=-1)


def test_clearance_residual_and_inequality_rows_match_finite_differences(arm):
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(3)
    scene = Scene(_random_obstacles(rng, 8))
    c = CollisionConstraint(model, scene, pairs=pairs, clearance=0.2, max_rows=4)
    tested = 0
    for q in chain.random_configuration(rng, 10):
        frames = chain.frames(q)
        res = c.residual(frames)[0]
        if not np.any(res > 0.0):
            continue
        np.testing.assert_allclose(c.jacobian(frames)[0],
                                   _numeric(lambda f: c.residual(f)[0], chain, q),
                                   atol=1e-5)
        d, jac = c.inequality_rows(frames, 0.2, per_pair=1)
        if len(d):
            numeric = _numeric(lambda f: c.inequality_rows(f, 0.2, per_pair=1)[0], chain, q)
            if numeric.shape == jac.shape:
                np.testing.assert_allclose(jac, numeric, atol=1e-5)
                tested += 1
    assert tested >= 3
    cost = c.cost(chain.frames(chain.random_configuration(rng, 5)))
    assert cost.shape == (5,) and np.all(cost >= 0.0)


def test_distance_report_names_the_closest_pair_and_its_points(arm):
    urdf, chain, model, pairs = arm
    q = chain.neutral_configuration()
    tool = chain.fk(q)[:3, 3]
    box = Obstacle.box((0.1, 0.1, 0.1), pose_matrix(tool + (0.0, 0.0, 0.3)))
    c = CollisionConstraint(model, Scene({('table', 4): box}), pairs=pairs, padding=0.01)
    report = c.distances(chain.frames(q))
    status = c.status(q)
    assert report.names[0] is not None
    assert status['min_distance'] == pytest.approx(report.distance[0])
    gap = np.linalg.norm(report.point_a[0] - report.point_b[0])
    if report.distance[0] > 0:
        assert gap == pytest.approx(report.distance[0] + 0.01, abs=1e-9)
    far = CollisionConstraint(model, Scene({('table', 4): box}), self_collision=False)
    r2 = far.distances(chain.frames(q))
    assert r2.names[0][1] == 'table/4'
    assert r2.distance[0] == pytest.approx(np.linalg.norm(r2.point_a[0] - r2.point_b[0]) -
                                           far.padding, abs=1e-9)


def test_check_motion_substeps_bound_the_motion_and_catch_obstacles(arm):
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(5)
    scene = Scene(_random_obstacles(rng, 8))
    c = CollisionConstraint(model, scene, pairs=pairs, padding=0.01)
    ok_count = bad_count = 0
    for trial in range(150):
        if ok_count >= 6 and bad_count >= 3:
            break
        q0 = chain.random_configuration(rng)
        q1 = chain.clip(q0 + rng.normal(0.0, 0.1 if trial % 2 else 0.5, chain.nq))
        if c.in_collision(chain.frames(q0))[0]:
            continue
        ok, info = c.check_motion(q0, q1)
        count = info['substeps']
        # The bound holds: no sphere centre moves farther than resolution between sub-steps.
        path = q0 + np.linspace(0, 1, 4 * count + 1)[:, None] * (q1 - q0)
        centers = np.stack([c.cover_spheres(p)[0] for p in path])
        step = np.linalg.norm(np.diff(centers, axis=0), axis=-1).sum(axis=0)   # per sphere
        assert step.max() <= info['bound'] + 1e-9
        assert info['bound'] / count <= c.motion_resolution + 1e-12
        fine = chain.frames(q0 + np.linspace(0, 1, 200)[:, None] * (q1 - q0))
        leaves = engine.query(c._robot, c._robot.world(fine), c.pairs, c._obstacles(), 0.0,
                              0.0)
        if ok:
            ok_count += 1
            # Free sub-steps with padding >= resolution: the unpadded covers never touch.
            assert not len(leaves)
        else:
            bad_count += 1
            assert info['first_bad'] is not None and info['pair'] is not None
    assert ok_count >= 6 and bad_count >= 3


def _table_bound(tables, q):
    """Return (N, P) the pair tables' lower bounds of the unpadded gap at q (N, nq) of every
    self pair (-inf: no table), looked up as the kernel does."""
    out = np.full((len(q), tables.num_pairs), -np.inf)
    if len(tables.pair_index):
        cell = np.floor((q[:, tables.qcols] - tables.low) / tables.step).astype(np.int64)
        cell = np.clip(cell, 0, tables.size - 1)                  # (N, Pt, 2)
        flat = tables.offset + cell[..., 0] * tables.size[:, 1] + cell[..., 1]
        out[:, tables.pair_index] = tables.values[flat]
    return out


def test_engine_bounds_and_row_cache_give_the_exact_result(arm):
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(6)
    c = CollisionConstraint(model, Scene(_random_obstacles(rng, 6)), pairs=pairs)
    q = chain.random_configuration(rng, 200)
    frames = chain.frames(q)
    # Pair tables are lower bounds of the exact gap.
    if c._tables is not None and len(c._tables):
        bound = _table_bound(c._tables, q)
        world = c._robot.world(frames)
        leaves = engine.query(c._robot, world, c.pairs, None, 0.06, 0.0)
        assert np.all(leaves.d >= bound[leaves.n, leaves.pair] - 1e-12)
    # Tables and bounding levels prune nothing that a brute-force query finds.
    brute = engine.query(c._robot, c._robot.world(frames), c.pairs, c._obstacles(), 0.01,
                         c.padding)
    fast = c._run(frames, 0.01)[1]
    assert len(brute) == len(fast)
    np.testing.assert_allclose(np.sort(brute.d), np.sort(fast.d))
    first = c.violated(frames).copy()
    # Change a few rows in place (as the SMC's redraws do): the row cache must follow.
    q2 = q.copy()
    q2[:20] = chain.random_configuration(rng, 20)
    frames.q = q2
    sub = chain.frames(q2[:20])
    frames.rot[:, :20], frames.pos[:, :20] = sub.rot, sub.pos
    cached = c.violated(frames)
    c._cache = None
    np.testing.assert_array_equal(cached, c.violated(chain.frames(q2)))
    np.testing.assert_array_equal(cached[20:], first[20:])


def test_row_cache_gives_every_copy_of_a_configuration_its_leaves(arm):
    """The SMC's particle set holds copies of one configuration (resampling, fallbacks to
    the estimate). When the changed rows of a cached evaluation come from another cached
    evaluation (the redraws were just checked), each copy gets the source row's leaves:
    the cache once gave them to the last copy only, so the other copies were free and
    cost-free although in collision."""
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(7)
    c = CollisionConstraint(model, Scene(_random_obstacles(rng, 6)), pairs=pairs)
    q = chain.random_configuration(rng, 200)
    c.violated(chain.frames(q))
    pool = chain.random_configuration(rng, 400)
    colliding = pool[c.in_collision(chain.frames(pool))][:2]
    assert len(colliding) == 2
    c.violated(chain.frames(colliding))             # the redraws, evaluated on their own
    q2 = q.copy()
    copies = {0: [5, 17, 40, 41], 1: [60, 61, 62]}
    for k, rows in copies.items():
        q2[rows] = colliding[k]
    frames = chain.frames(q2)
    cached = (c.violated(frames), c.residual(frames), c.cost(frames))
    c._cache = c._rows_cache = None
    fresh = (c.violated(frames), c.residual(frames), c.cost(frames))
    for rows in copies.values():
        assert cached[0][rows].all()
    for a, b in zip(cached, fresh):
        np.testing.assert_array_equal(a, b)


def test_row_cache_skips_a_cached_evaluation_of_no_configurations(arm):
    """An SMC redraw of no rows is evaluated and cached like any other; the next partial
    update looked for its changed rows in that empty table and raised an IndexError (a PR2
    solve with self-collision)."""
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(8)
    c = CollisionConstraint(model, pairs=pairs)
    q = chain.random_configuration(rng, 40)
    c.violated(chain.frames(q))
    c.violated(chain.frames(q[:0]))
    q2 = q.copy()
    q2[:5] = chain.random_configuration(rng, 5)
    frames = chain.frames(q2)
    cached = c.violated(frames), c.residual(frames)
    c._cache = c._rows_cache = None
    for a, b in zip(cached, (c.violated(frames), c.residual(frames))):
        np.testing.assert_array_equal(a, b)


def test_settings_are_validated():
    _, model = demo_model(ARM7_URDF)
    with pytest.raises(GoalError, match='padding must be a number >= 0'):
        CollisionConstraint(model, padding=-0.01)
    with pytest.raises(GoalError, match='clearance_sigma must be a positive number'):
        CollisionConstraint(model, clearance_sigma=0.0)
    with pytest.raises(GoalError, match='needs a CollisionModel'):
        CollisionConstraint('model')
    c = CollisionConstraint(model, self_collision=False)
    with pytest.raises(GoalError, match='reference configuration must be 7 finite numbers'):
        c.set_reference(np.zeros(3))
    with pytest.raises(GoalError, match='names one link twice'):
        c.set_pairs([('link1', 'link1')])


def test_keep_out_sphere_on_the_skeleton_and_with_links():
    chain, _ = demo_model(ARM7_URDF)
    q = chain.neutral_configuration()
    link4 = chain.fk(q, 'link4')[:3, 3]
    sphere = KeepOutSphere(link4, 0.03).bind(chain)
    assert sphere.violated(chain.frames(q))[0]
    only_tool = KeepOutSphere(link4, 0.03, links=['tool0']).bind(chain)
    assert not only_tool.violated(chain.frames(q))[0]
    with pytest.raises(GoalError, match="unknown link 'hand'"):
        KeepOutSphere(link4, 0.03, links=['hand']).bind(chain)
    assert sphere.residual(chain.frames(q))[0, 0] > 0.0


def test_batched_motion_checks_are_the_single_ones(arm):
    urdf, chain, model, pairs = arm
    rng = np.random.default_rng(9)
    c = CollisionConstraint(model, Scene(_random_obstacles(rng, 8)), pairs=pairs)
    q0 = None
    while q0 is None:
        q = chain.random_configuration(rng)
        if not c.in_collision(chain.frames(q))[0]:
            q0 = q
    targets = chain.clip(q0 + rng.normal(0.0, 0.4, (12, chain.nq)))
    batched = c.check_motions(q0, targets)
    single = np.array([c.check_motion(q0, t)[0] for t in targets])
    np.testing.assert_array_equal(batched, single)
    assert batched.any() and not batched.all(), batched


def test_pair_tables_are_cached_on_disk_and_identical(tmp_path):
    chain, model = demo_model(ARM7_URDF)
    pairs = self_collision_pairs(model, conventional_srdf_path(ARM7_URDF))
    robot = engine.RobotGeometry(model)
    lever = engine.lever_matrix(chain, model)
    built = engine.PairTables(robot, chain, pairs.pairs, lever, cache_dir=str(tmp_path))
    files = [f for f in tmp_path.iterdir() if f.name.startswith('tables-')]
    assert len(built) >= 2 and len(files) == 1      # link1/link3, link5/link7
    loaded = engine.PairTables(robot, chain, pairs.pairs, lever, cache_dir=str(tmp_path))
    q = chain.random_configuration(np.random.default_rng(10), 50)
    np.testing.assert_array_equal(_table_bound(built, q), _table_bound(loaded, q))
    np.testing.assert_array_equal(built.sphere_index, loaded.sphere_index)
    other = engine.PairTables(robot, chain, pairs.pairs[:3], lever, cache_dir=str(tmp_path))
    assert other.num_pairs == 3
    assert len([f for f in tmp_path.iterdir() if f.name.startswith('tables-')]) == 2


def test_pair_tables_reuse_the_last_builds_tables_of_the_pairs_it_did_not_change(
        monkeypatch):
    """A build tabulates only the pairs whose inputs changed since the last build (fewer
    pairs, or new covers on some links: a first start's updates); the result is what a
    build from nothing gives, field for field."""
    import dataclasses
    chain, model = demo_model(ARM7_URDF)
    pairs = self_collision_pairs(model, conventional_srdf_path(ARM7_URDF)).pairs
    tabulated = []
    real = engine.PairTables._tabulate
    monkeypatch.setattr(engine.PairTables, '_tabulate', staticmethod(
        lambda robot, chain, pair, *rest: tabulated.append(pair) or real(robot, chain, pair,
                                                                          *rest)))

    def tables(model, pairs, fresh=False):
        if fresh:
            monkeypatch.setattr(engine.PairTables, '_last', {})
        return engine.PairTables(engine.RobotGeometry(model), chain, pairs,
                                 engine.lever_matrix(chain, model), cache_dir='')

    def same(a, b):
        for name in engine.PairTables._FIELDS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)

    full = tables(model, pairs, fresh=True)
    assert len(full) >= 2 and len(tabulated) == len(full)
    fewer = pairs[1:][::-1]
    del tabulated[:]
    again = tables(model, fewer)
    assert tabulated == []
    same(again, tables(model, fewer, fresh=True))
    # link7 a little larger: only its tables (link5/link7) are tabulated again.
    cover = model._covers['link7']
    grown = model.with_covers({'link7': dataclasses.replace(cover, radii=cover.radii + 1e-3)})
    tables(model, pairs, fresh=True)
    del tabulated[:]
    changed = tables(grown, pairs)
    names = {tuple(model.link_names[k] for k in pair) for pair in tabulated}
    assert names and all('link7' in pair for pair in names), names
    assert len(tabulated) < len(full)
    same(changed, tables(grown, pairs, fresh=True))


def test_no_configurations_give_empty_answers(arm):
    """A batch of none (a refinement where no particle moved) is answered, not an error: it
    once took the node's alternatives callback down (reshape of an empty array)."""
    urdf, chain, model, pairs = arm
    q = chain.neutral_configuration()
    scene = Scene({('o', 1): Obstacle.sphere(chain.fk(q)[:3, 3], 0.04)})
    c = CollisionConstraint(model, scene, pairs=pairs)
    c.set_reference(q)
    empty = chain.frames(np.zeros((0, chain.nq)))
    assert c.violated(empty).shape == (0,)
    assert c.cost(empty).shape == (0,)
