"""Whole-body constraints (goals.body and the figure's use of goals): contacts, the centre
of mass over a support polygon, hard plane contacts, smoothness over named joints, targets
on any link. Jacobians against finite differences, polygons against brute force."""

import os

import numpy as np
import pytest

from smcik_ros.errors import GoalError
from smcik_ros.goals import (CenterOfMassLine, CenterOfMassPolygon, ChainSmoothness, Contact,
                             OrientationTarget, PlaneContact, PoseTarget, PositionTarget,
                             convex_hull)
from smcik_ros.model import Chain

HERE = os.path.dirname(__file__)
BIPED = os.path.join(HERE, 'urdf', 'biped.urdf')
TIPS = ['l_palm', 'r_palm', 'l_sole', 'r_sole']
STAND = {'l_hip_pitch': -0.3, 'l_knee': 0.6, 'l_ankle_pitch': -0.3,
         'r_hip_pitch': -0.3, 'r_knee': 0.6, 'r_ankle_pitch': -0.3}


@pytest.fixture(scope='module')
def biped():
    return Chain.from_urdf(BIPED, 'pelvis', TIPS, floating_base=True)


def standing(chain, height=0.1 + 0.8 * np.cos(0.3) + 0.08):
    """Return the standing configuration (soles flat on z = 0 with a floating base)."""
    q = np.zeros(chain.nq)
    for name, value in STAND.items():
        q[chain.joint_index(name)] = value
    if chain.floating:
        q[chain.joint_index('floating_base_z')] = height
    return q


def numeric_jacobian(term, chain, q, h=1e-6, residual=None):
    residual = residual or (lambda frames: term.residual(frames))
    columns = []
    for i in range(chain.nv):
        dv = np.zeros(chain.nv)
        dv[i] = h
        plus = residual(chain.frames(chain.integrate(q, dv)))[0]
        minus = residual(chain.frames(chain.integrate(q, -dv)))[0]
        columns.append((plus - minus) / (2 * h))
    return np.stack(columns, axis=-1)


# ---------------------------------------------------------------------------- Contact
def test_contact_anchors_at_the_configuration_and_holds_within_its_tolerance(biped):
    q = standing(biped)
    contact = Contact('l_sole').bind(biped)
    assert contact.hard and contact.equality and not contact.anchored
    with pytest.raises(GoalError, match="Contact on 'l_sole' has no pose yet: .* anchor"):
        contact.residual(biped.frames(q))
    contact.anchor(q)
    assert contact.anchored
    np.testing.assert_allclose(contact.pose[:3, 3], [0.03, 0.1, 0.0], atol=1e-3)
    np.testing.assert_allclose(contact.residual(biped.frames(q)), np.zeros((1, 6)), atol=1e-12)
    np.testing.assert_allclose(contact.tolerance, [0.001] * 3 + [0.01] * 3)
    moved = q.copy()
    moved[biped.joint_index('floating_base_x')] += 0.0009
    assert not contact.violated(biped.frames(moved))[0]
    moved[biped.joint_index('floating_base_y')] += 0.0009       # 1.27 mm away
    assert contact.violated(biped.frames(moved))[0]
    turned = q.copy()
    turned[biped.joint_index('l_ankle_roll')] += 0.011
    assert contact.violated(biped.frames(turned))[0]
    # Anchoring again follows the new configuration; a given pose stays.
    contact.anchor(biped.frames(moved))
    assert not contact.violated(biped.frames(moved))[0]
    given = Contact('l_sole', pose=contact.pose).bind(biped).anchor(q)
    np.testing.assert_array_equal(given.pose, contact.pose)


def test_contact_jacobian_matches_finite_differences(biped):
    rng = np.random.default_rng(31)
    contact = Contact('r_sole').bind(biped).anchor(standing(biped))
    for q in biped.random_configuration(rng, 3):
        q[biped.base_index] = (0.1, 0.2, 0.8, 0.3, 0.1, -0.2)
        np.testing.assert_allclose(contact.jacobian(biped.frames(q))[0],
                                   numeric_jacobian(contact, biped, q), atol=1e-6)


def test_a_position_only_contact_keeps_the_point_and_lets_the_link_turn(biped):
    """The node's hold of a tip with fewer than six joints of its own: 3 rows, the link's
    origin; turning the link about it is free, moving it is not."""
    q = standing(biped)
    contact = Contact('l_palm', position_only=True).bind(biped).anchor(q)
    full = Contact('l_palm').bind(biped).anchor(q)
    assert contact.hard and contact.equality
    np.testing.assert_allclose(contact.tolerance, [0.001] * 3)
    assert contact.residual(biped.frames(q)).shape == (1, 3)
    rng = np.random.default_rng(7)
    for q_k in biped.random_configuration(rng, 3):
        q_k[biped.base_index] = (0.1, -0.2, 0.9, 0.2, -0.1, 0.3)
        frames = biped.frames(q_k)
        np.testing.assert_allclose(contact.residual(frames)[0], full.residual(frames)[0, :3])
        np.testing.assert_allclose(contact.jacobian(frames)[0],
                                   numeric_jacobian(contact, biped, q_k), atol=1e-6)
    turned = full.pose.copy()                   # the same point, the link turned 0.3 rad
    turned[:3, :3] = turned[:3, :3] @ [[1, 0, 0], [0, np.cos(0.3), -np.sin(0.3)],
                                       [0, np.sin(0.3), np.cos(0.3)]]
    frames = biped.frames(q)
    assert Contact('l_palm', pose=turned).bind(biped).violated(frames)[0]
    assert not Contact('l_palm', pose=turned, position_only=True).bind(biped).violated(frames)[0]
    moved = q.copy()
    moved[biped.joint_index('floating_base_y')] += 0.0015
    assert contact.violated(biped.frames(moved))[0]


@pytest.mark.parametrize('make,match', [
    (lambda: Contact(None), 'link must be a link name'),
    (lambda: Contact('l_sole', pose=np.eye(3)), r'shape \(4, 4\)'),
    (lambda: Contact('l_sole', tolerance=(0.0, 0.01)), 'position tolerance must be a positive'),
    (lambda: CenterOfMassPolygon([[0, 0], [1, 0], [2, 0]]), 'on one line'),
    (lambda: CenterOfMassPolygon([[0, 0], [1, 0]]), 'at least 3 distinct points'),
    (lambda: CenterOfMassPolygon([[0, 0], [1, 0], [0, 1]], margin=-0.1), '>= 0'),
    (lambda: CenterOfMassPolygon(), 'give a polygon .* or support points'),
    (lambda: CenterOfMassPolygon([[0, 0], [0.4, 0], [0.4, 0.1], [0, 0.1]], margin=0.06),
     r'nothing of the support polygon \(it is 0.1000 m across .* below 0.0500 m'),
    (lambda: ChainSmoothness(joints=['a', 'b', 'a']), 'listed twice: a'),
    (lambda: ChainSmoothness(joints='l_knee'), 'list of joint names'),
])
def test_malformed_body_terms_say_what_they_expected(make, match):
    with pytest.raises(GoalError, match=match):
        make()


def test_terms_on_unknown_links_or_joints_name_the_chains(biped):
    with pytest.raises(GoalError, match="Contact: unknown link 'l_toe'; links of this chain"):
        Contact('l_toe').bind(biped)
    with pytest.raises(GoalError, match="unknown joint.* l_toe_joint; joints of this chain"):
        ChainSmoothness(joints=['l_knee', 'l_toe_joint']).bind(biped)
    with pytest.raises(GoalError, match="unknown support link 'l_toe'"):
        CenterOfMassPolygon(support={'l_toe': [[0, 0, 0]]}).bind(biped)


# ---------------------------------------------------------------------------- polygons
def test_convex_hull_against_brute_force():
    rng = np.random.default_rng(32)
    for _ in range(20):
        pts = rng.normal(size=(rng.integers(3, 30), 2))
        hull = convex_hull(pts)
        edge = np.roll(hull, -1, axis=0) - hull
        # Counter-clockwise, every point inside or on every edge, vertices among the points.
        cross = edge[:, 0] * (pts[:, None, 1] - hull[:, 1]) - edge[:, 1] * (pts[:, None, 0]
                                                                            - hull[:, 0])
        assert (cross >= -1e-12).all()
        assert all(np.any(np.all(np.isclose(v, pts), axis=1)) for v in hull)
        turn = edge[:, 0] * np.roll(edge, -1, axis=0)[:, 1] - edge[:, 1] * np.roll(
            edge, -1, axis=0)[:, 0]
        assert (turn > 0).all()


def _brute_distance(polygon, p):
    """Distance from p to the polygon's boundary sampled densely, 0 inside (brute force)."""
    a, b = polygon, np.roll(polygon, -1, axis=0)
    t = np.linspace(0.0, 1.0, 20001)[:, None, None]
    boundary = (a + t * (b - a)).reshape(-1, 2)
    edge = b - a
    inside = np.all(edge[:, 0] * (p[1] - a[:, 1]) - edge[:, 1] * (p[0] - a[:, 0]) >= 0)
    return 0.0 if inside else np.linalg.norm(boundary - p, axis=1).min()


def _polygon_chain():
    """A chain whose centre of mass is its base position: two prismatic joints along x, y."""
    from smcik_ros.model import JointSpec
    joints = [JointSpec('x', 'base', 'a', 'prismatic', np.eye(4), (1, 0, 0), -2, 2),
              JointSpec('y', 'a', 'b', 'prismatic', np.eye(4), (0, 1, 0), -2, 2, mass=1.0)]
    return Chain.from_joints(joints, 'base', 'b')


def test_com_polygon_residual_is_the_distance_outside_the_shrunk_polygon():
    chain = _polygon_chain()
    square = [[0.0, 0.0], [0.4, 0.0], [0.4, 0.4], [0.0, 0.4], [0.2, 0.2]]
    term = CenterOfMassPolygon(square, margin=0.05).bind(chain)
    np.testing.assert_allclose(sorted(map(tuple, term.region.round(12))),
                               [(0.05, 0.05), (0.05, 0.35), (0.35, 0.05), (0.35, 0.35)])
    rng = np.random.default_rng(33)
    q = rng.uniform(-0.4, 0.8, (200, 2))
    r = term.residual(chain.frames(q))[:, 0]
    expected = np.array([_brute_distance(term.region, p) for p in q])
    np.testing.assert_allclose(r, expected, atol=1e-4)
    np.testing.assert_array_equal(term.violated(chain.frames(q)), expected > 0)
    clearance, _ = term.clearance(chain.frames(q))
    np.testing.assert_array_equal(clearance.min(axis=1) < 0, expected > 0)
    assert (r == 0).sum() >= 10 and (r > 0).sum() >= 100


def test_com_polygon_guard_keeps_the_com_farther_inside_than_the_margin():
    """``guard``: the checks use the polygon less margin and guard; ``region`` (drawn and
    reported) stays the polygon less its margin."""
    chain = _polygon_chain()
    square = [[0.0, 0.0], [0.4, 0.0], [0.4, 0.4], [0.0, 0.4]]
    plain = CenterOfMassPolygon(square, margin=0.05).bind(chain)
    guarded = CenterOfMassPolygon(square, margin=0.05, guard=0.01).bind(chain)
    np.testing.assert_allclose(guarded.region, plain.region)
    q = np.array([[0.2, 0.2], [0.055, 0.2], [0.065, 0.2], [0.045, 0.2]])
    frames = chain.frames(q)
    np.testing.assert_array_equal(plain.violated(frames), [False, False, False, True])
    np.testing.assert_array_equal(guarded.violated(frames), [False, True, False, True])
    np.testing.assert_allclose(guarded.residual(frames)[:, 0], [0.0, 0.005, 0.0, 0.015],
                               atol=1e-12)
    np.testing.assert_allclose(guarded.clearance(frames)[0].min(axis=1) + guarded.guard,
                               plain.clearance(frames)[0].min(axis=1), atol=1e-12)
    with pytest.raises(GoalError, match='guard must be a number >= 0'):
        CenterOfMassPolygon(square, guard=-0.001)


def test_com_polygon_jacobians_match_finite_differences(biped):
    rng = np.random.default_rng(34)
    feet = [[-0.1, -0.15], [0.16, -0.15], [0.16, 0.15], [-0.1, 0.15]]
    term = CenterOfMassPolygon(feet, margin=0.02).bind(biped)
    outside = 0
    for q in biped.random_configuration(rng, 6):
        q[biped.base_index] = (rng.uniform(-0.3, 0.3), -0.1, 0.9, 0.2, 0.3, -0.2)
        frames = biped.frames(q)
        outside += bool(term.residual(frames)[0, 0] > 1e-3)
        np.testing.assert_allclose(term.jacobian(frames)[0], numeric_jacobian(term, biped, q),
                                   atol=1e-6)
        np.testing.assert_allclose(
            term.clearance(frames)[1][0],
            numeric_jacobian(term, biped, q, residual=lambda f: term.clearance(f)[0]),
            atol=1e-6)
    assert outside >= 2


def test_com_polygon_from_support_points_anchors_at_the_configuration(biped):
    corners = np.array([[x, y, -0.02] for x in (-0.12, 0.12) for y in (-0.05, 0.05)])
    sole = corners + (-0.03, 0.0, 0.08)                  # the foot box's bottom, in the sole
    term = CenterOfMassPolygon(support={'l_sole': sole - (0, 0, 0.06),
                                        'r_sole': sole - (0, 0, 0.06)}, margin=0.01)
    assert not term.anchored
    with pytest.raises(GoalError, match='no polygon yet'):
        term.residual(biped.frames(standing(biped)))
    term.bind(biped).anchor(standing(biped))
    xs, ys = term.polygon[:, 0], term.polygon[:, 1]
    np.testing.assert_allclose([xs.min(), xs.max(), ys.min(), ys.max()],
                               [-0.12, 0.12, -0.15, 0.15], atol=1e-9)
    assert not term.violated(biped.frames(standing(biped)))[0]


# ---------------------------------------------------------------------------- others
def test_hard_plane_contacts_are_an_equality_or_an_inequality(biped):
    q = standing(biped)
    soft = PlaneContact('l_sole', offset=0.0)
    assert not soft.hard and not soft.equality and not soft.violated(biped.frames(q))[0]
    two = PlaneContact('l_sole', offset=0.0015, hard=True)
    assert two.equality and two.violated(biped.frames(q))[0]
    assert not PlaneContact('l_sole', offset=0.0009, hard=True).violated(biped.frames(q))[0]
    one = PlaneContact('l_sole', offset=0.01, hard=True, one_sided=True)
    assert one.hard and not one.equality and one.violated(biped.frames(q))[0]
    clearance, jac = one.clearance(biped.frames(q))
    np.testing.assert_allclose(clearance, [[-0.01]], atol=1e-9)
    np.testing.assert_allclose(jac[0], numeric_jacobian(
        one, biped, q, residual=lambda f: one.clearance(f)[0]), atol=1e-6)
    assert not PlaneContact('l_sole', offset=-0.01, hard=True, one_sided=True).violated(
        biped.frames(q))[0]


def test_hard_com_line_is_an_equality_within_its_tolerance(biped):
    q = standing(biped)
    com = biped.center_of_mass(q)
    line = CenterOfMassLine(point=com + (0.0008, 0.0, 0.0), hard=True)
    assert line.equality and not line.violated(biped.frames(q))[0]
    assert CenterOfMassLine(point=com + (0.0012, 0.0, 0.0), hard=True).violated(
        biped.frames(q))[0]
    assert not CenterOfMassLine(point=com + (1.0, 0.0, 0.0)).violated(biped.frames(q))[0]


def test_smoothness_over_named_joints_pairs_them_in_the_order_given(biped):
    names = ['l_hip_pitch', 'l_knee', 'l_ankle_pitch', 'r_hip_pitch']
    term = ChainSmoothness(joints=names, neighbours=2, sigma=0.2).bind(biped)
    rng = np.random.default_rng(35)
    q = biped.random_configuration(rng)
    v = [q[biped.joint_index(n)] for n in names]
    np.testing.assert_allclose(term.residual(biped.frames(q))[0],
                               [v[1] - v[0], v[2] - v[0], v[2] - v[1], v[3] - v[1],
                                v[3] - v[2]])
    np.testing.assert_allclose(term.jacobian(biped.frames(q))[0],
                               numeric_jacobian(term, biped, q), atol=1e-6)
    # Every joint, the floating base aside.
    every = ChainSmoothness().bind(biped)
    assert every.sigma.shape == (biped.nq - 6 - 1,)
    assert not every.jacobian(biped.frames(q))[0][:, biped.base_index].any()


@pytest.mark.parametrize('floating', [False, True])
def test_targets_work_on_any_link_of_a_multi_tip_chain(floating):
    """Pose, position and orientation targets on tips, links inside the tree, fixed children
    and the base (a link fixed to the base: a constant residual, a zero Jacobian)."""
    chain = Chain.from_urdf(BIPED, 'pelvis', TIPS, floating_base=floating)
    rng = np.random.default_rng(36 + floating)
    q0, q = chain.random_configuration(rng, 2)
    for link in ['l_palm', 'r_sole', 'torso', 'l_hand', 'r_thigh', 'pelvis', chain.base_link]:
        goal = chain.fk(q0, link)
        for term in (PoseTarget(goal, link=link), PositionTarget(goal[:3, 3], link=link),
                     OrientationTarget(goal[:3, :3], link=link)):
            term.bind(chain)
            np.testing.assert_allclose(term.residual(chain.frames(q0)), 0.0, atol=1e-9)
            pos, ori = term.errors(chain.frames(q0))
            assert pos[0] < 1e-9 and ori[0] < 1e-7
            np.testing.assert_allclose(term.jacobian(chain.frames(q))[0],
                                       numeric_jacobian(term, chain, q), atol=1e-6,
                                       err_msg=f'{type(term).__name__} on {link}')
        if link == chain.base_link or (link == 'pelvis' and not floating):
            assert not PoseTarget(goal, link=link).jacobian(chain.frames(q)).any()
