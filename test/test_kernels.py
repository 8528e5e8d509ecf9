"""The compiled kernels (smcik_ros.kernels) against independent references: yourdfpy's forward
kinematics, finite differences, closed forms (scipy's rotations, dense linear algebra, the
documented draw order) and python-fcl.

The kernels are the only implementation; ``NUMBA_DISABLE_JIT=1`` runs the same functions as
plain Python (``test_the_kernels_run_uncompiled_under_numba_disable_jit``).
"""

import json
import os
import subprocess
import sys

import fcl
import numpy as np
import pytest
import yourdfpy
from scipy.spatial.transform import Rotation, Slerp

from smcik_ros import kernels
from smcik_ros.errors import ModelError
from smcik_ros.goals import OrientationTarget, PoseTarget, PositionTarget
from smcik_ros.kernels import records
from smcik_ros.model import Chain, JointSpec, ball_chain
from smcik_ros.solvers import available_solvers, make_solver
from smcik_ros.solvers.smc.policies import Refinement

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
ARM7 = os.path.join(ROOT, 'urdf', 'smcik_arm.urdf')
URDFS = [(ARM7, 'tool0'), (os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf'), 'tool0'),
         (os.path.join(HERE, 'urdf', 'mimic_prismatic.urdf'), 'tool0'),
         (os.path.join(HERE, 'urdf', 'two_tips.urdf'), ['left_tool', 'right_tool'])]


def _urdf_chains():
    return [Chain.from_urdf(path, 'base_link', tip) for path, tip in URDFS]


def _chains():
    mixed = Chain.from_joints([
        JointSpec('b0', 'base', 'l0', 'ball', upper=1.0, origin=_translation(0.0, 0.0, 0.1)),
        JointSpec('r1', 'l0', 'l1', 'revolute', axis=(0.0, 1.0, 0.0), lower=-1.0, upper=1.0,
                  origin=_translation(0.0, 0.1, 0.3)),
        JointSpec('p2', 'l1', 'l2', 'prismatic', axis=(1.0, 0.0, 0.0), lower=-0.2, upper=0.3,
                  origin=_translation(0.2, 0.0, 0.0)),
        JointSpec('b3', 'l2', 'l3', 'ball', upper=2.5, origin=_translation(0.0, 0.0, 0.2)),
        JointSpec('t', 'l3', 'tip', 'fixed', origin=_translation(0.05, 0.0, 0.1))],
        'base', 'tip')
    return _urdf_chains() + [ball_chain(4, max_angle=2.0), mixed]


def _translation(x, y, z):
    out = np.eye(4)
    out[:3, 3] = (x, y, z)
    return out


def _unit(rng, shape):
    q = rng.normal(size=shape + (4,))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _scipy(q):
    """scipy Rotation of (..., 4) quaternions (w, x, y, z)."""
    return Rotation.from_quat(np.asarray(q).reshape(-1, 4)[:, [1, 2, 3, 0]])


def _quat(rot):
    """(N, 4) quaternions (w, x, y, z), w >= 0, of a scipy Rotation."""
    q = rot.as_quat()[:, [3, 0, 1, 2]]
    return np.where(q[:, :1] < 0.0, -q, q)


def _hemisphere(q):
    return np.where(q[..., :1] < 0.0, -q, q)


# ---------------------------------------------------------------------------- forward kinematics
@pytest.mark.parametrize('path,tip', URDFS, ids=lambda v: os.path.basename(str(v)))
def test_fk_and_link_pose_kernels_match_yourdfpy(path, tip):
    """Every body frame (``kernels.fk``) and every link pose (``kernels.link_pose``, behind
    ``Chain.fk``) equals yourdfpy's FK, for 12 configurations in one call and one alone,
    also for joint values beyond the fast sine's range (3e5 rad: libm's then); a NaN joint
    value gives NaN in its row only."""
    chain = Chain.from_urdf(path, 'base_link', tip)
    rec = chain.records
    ref = yourdfpy.URDF.load(path, build_scene_graph=True, load_meshes=False)
    rng = np.random.default_rng(1)
    q = chain.random_configuration(rng, 12)
    far = q.copy()
    far[:, chain.joint_types.index('revolute')] += 3e5
    for batch in (q, far):
        rot, pos = kernels.fk(chain.records.bodies, batch)
        for i, row in enumerate(batch):
            ref.update_cfg(dict(zip(chain.joint_names, row)))
            for k, link in enumerate(chain.link_names):
                want = ref.get_transform(link, 'base_link')
                body, offset = chain.link_anchor(link)
                if chain.is_body_frame(link):
                    np.testing.assert_allclose(rot[body, i], want[:3, :3], atol=1e-9)
                    np.testing.assert_allclose(pos[body, i], want[:3, 3], atol=1e-9)
                out = np.empty((1, 4, 4))
                kernels.link_pose(rec.bodies, rec.links, batch[i:i + 1], k, out)
                np.testing.assert_allclose(out[0], want, atol=1e-9)
        for k, link in enumerate(chain.link_names):
            out = np.empty((len(batch), 4, 4))
            kernels.link_pose(rec.bodies, rec.links, batch, k, out)
            np.testing.assert_allclose(chain.fk(batch, link), out, atol=0.0)
    bad = q[:3].copy()
    bad[1, 0] = np.nan
    rot, _ = kernels.fk(chain.records.bodies, bad)
    assert np.isnan(rot[:, 1]).any() and np.isfinite(rot[:, [0, 2]]).all()
    poses = chain.fk(bad)
    assert np.isnan(poses[1]).any() and np.isfinite(poses[[0, 2]]).all()
    with pytest.raises(ModelError, match=f'{chain.nq} entries'):
        chain.fk(np.zeros(chain.nq + 1))


def _ball_chain_reference(chain, q):
    """Return (N, L, 4, 4) link poses of ``chain`` composed from its JointSpecs with scipy
    (joint origin, then the joint's motion), independently of the chain's model."""
    out = np.empty((len(q), len(chain.link_names), 4, 4))
    joints = {j.child: j for j in chain.tree_joints}
    for n, row in enumerate(q):
        pose = {chain.base_link: np.eye(4)}
        for link in chain.link_names[1:]:
            j = joints[link]
            motion = np.eye(4)
            if j.type == 'ball':
                qi = chain.joint_index(j.name)
                motion[:3, :3] = _scipy(row[qi:qi + 4]).as_matrix()[0]
            elif j.type == 'revolute':
                value = row[chain.joint_index(j.name)]
                motion[:3, :3] = Rotation.from_rotvec(np.asarray(j.axis) * value).as_matrix()
            elif j.type == 'prismatic':
                motion[:3, 3] = np.asarray(j.axis) * row[chain.joint_index(j.name)]
            pose[link] = pose[j.parent] @ np.asarray(j.origin) @ motion
        out[n] = [pose[link] for link in chain.link_names]
    return out


def test_fk_kernels_on_ball_joints_match_composed_rotations():
    """Ball, revolute and prismatic joints mixed (and a ball chain): every link pose, from
    the body frames and from the link-pose kernel, equals the composition of the joint specs'
    origins and motions with scipy's rotations; a quaternion of any length is its
    normalised rotation's only after clipping (the kernels read unit quaternions)."""
    rng = np.random.default_rng(2)
    for chain in _chains()[-2:]:
        q = chain.random_configuration(rng, 9)
        want = _ball_chain_reference(chain, q)
        np.testing.assert_allclose(chain.link_poses(q), want, atol=1e-12)
        for k, link in enumerate(chain.link_names):
            np.testing.assert_allclose(chain.fk(q, link), want[:, k], atol=1e-12)


def test_sincos_is_within_an_ulp_of_libm_and_covers_every_quadrant():
    from smcik_ros.kernels.fk import _sincos
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-7.0, 7.0, 4000), rng.uniform(-1e5, 1e5, 4000),
                        np.arange(-8, 9) * np.pi / 4, [0.0, -0.0, 1e-300]])
    out = np.array([_sincos(v) for v in x])
    assert np.max(np.abs(out[:, 0] - np.sin(x))) <= 2.3e-16
    assert np.max(np.abs(out[:, 1] - np.cos(x))) <= 2.3e-16


@pytest.mark.parametrize('chain', _chains(), ids=lambda c: c.robot_name)
def test_jacobian_kernel_matches_finite_differences(chain):
    """``kernels.jacobian_at`` of a point fixed to each body (and the base: zeros) equals the
    central differences of that point's position and of its body's rotation along each
    tangent direction (ball joints: steps in the joint's frame, ``Chain.integrate``)."""
    rng = np.random.default_rng(3)
    q = chain.clip(chain.random_configuration(rng, 3) * 0.8)
    rot, pos = kernels.fk(chain.records.bodies, q)
    h = 1e-6
    for body in range(-1, chain.num_bodies):
        local = rng.normal(size=3) * 0.2
        if body < 0:
            point = np.tile(local, (len(q), 1))
        else:
            point = pos[body] + rot[body] @ local
        jac = kernels.jacobian_at(chain.records.columns, rot, pos, body, point)
        if body < 0:
            np.testing.assert_array_equal(jac, 0.0)
            continue
        for v in range(chain.nv):
            step = np.zeros(chain.nv)
            step[v] = h
            rp, pp = kernels.fk(chain.records.bodies, chain.integrate(q, step))
            rm, pm = kernels.fk(chain.records.bodies, chain.integrate(q, -step))
            lin = ((pp[body] + rp[body] @ local) - (pm[body] + rm[body] @ local)) / (2.0 * h)
            ang = (Rotation.from_matrix(rp[body] @ np.swapaxes(rm[body], 1, 2)).as_rotvec()
                   / (2.0 * h))
            np.testing.assert_allclose(jac[:, :3, v], lin, atol=1e-6)
            np.testing.assert_allclose(jac[:, 3:, v], ang, atol=1e-6)


def test_body_points_kernel_is_the_rigid_motion_of_each_point():
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(4)
    rot, pos = kernels.fk(chain.records.bodies, chain.random_configuration(rng, 5))
    body = np.array([-1, 0, 3, chain.num_bodies - 1, 2], dtype=np.int64)
    local = rng.normal(size=(5, 3))
    out = np.empty((3, 5 * 5))
    kernels.body_points_world(rot, pos, body, local, out)
    for n in range(5):
        for r in range(5):
            want = local[r] if body[r] < 0 else rot[body[r], n] @ local[r] + pos[body[r], n]
            np.testing.assert_allclose(out[:, n * 5 + r], want, atol=1e-15)


# ---------------------------------------------------------------------------- pose residuals
def _residual(chain, q, link, goal):
    """(N, 6) pose residual from FK with scipy's log map (the reference)."""
    poses = chain.link_poses(q)[:, chain.link_index(link)]
    rel = poses[:, :3, :3] @ goal[:3, :3].T
    return np.concatenate([poses[:, :3, 3] - goal[:3, 3], Rotation.from_matrix(rel).as_rotvec()],
                          axis=1)


@pytest.mark.parametrize('chain', _chains(), ids=lambda c: c.robot_name)
def test_pose_kernels_match_scipy_and_finite_differences(chain):
    """The pose residual (position error, rotation vector of R_link R_goal^T) equals scipy's
    log map, near pi too; its Jacobian the residual's central differences; the pose errors
    the residual's norms; for the tip and for a link fixed to the base (zero Jacobian)."""
    rng = np.random.default_rng(5)
    q = chain.clip(chain.random_configuration(rng, 6) * 0.8)
    goal = chain.fk(q[0])
    flip = np.eye(4)
    flip[:3, :3] = Rotation.from_rotvec([np.pi - 0.05, 0.0, 0.0]).as_matrix()
    for link in (None, chain.base_link):
        for target in (goal, goal @ flip):
            t = PoseTarget(target, link=link)
            frames = chain.frames(q)
            r, jac = kernels.pose_residual_jacobian(
                chain.records.columns, chain.records.links, frames.rot, frames.pos,
                chain.link_index(link), t.pose)
            want = _residual(chain, q, link, target)
            np.testing.assert_allclose(r, want, atol=1e-10)
            pe, oe = kernels.pose_errors(chain.records.links, frames.rot, frames.pos,
                                         chain.link_index(link), t.pose)
            np.testing.assert_allclose(pe, np.linalg.norm(want[:, :3], axis=1), atol=1e-13)
            np.testing.assert_allclose(oe, np.linalg.norm(want[:, 3:], axis=1), atol=1e-10)
            r2, j2 = t.residual_jacobian(frames)
            np.testing.assert_array_equal(r2, r)
            np.testing.assert_array_equal(j2, jac)
            if link is not None:
                np.testing.assert_array_equal(jac, 0.0)
                continue
            h = 1e-6
            for v in range(chain.nv):
                step = np.zeros(chain.nv)
                step[v] = h
                fd = (_residual(chain, chain.integrate(q, step), link, target)
                      - _residual(chain, chain.integrate(q, -step), link, target)) / (2.0 * h)
                np.testing.assert_allclose(jac[:, :, v], fd, atol=2e-6)


# ---------------------------------------------------------------------------- LM steps
def _lm_reference(jac, r, lam):
    return np.array([-j.T @ np.linalg.solve(j @ j.T + lk * np.eye(len(j)), rk)
                     for j, rk, lk in zip(jac, r, lam)])


@pytest.mark.parametrize('k,m,nv', [(5, 6, 7), (2, 6, 3), (4, 92, 90), (2, 32, 32),
                                    (2, 31, 33), (3, 33, 30)])
def test_lm_kernels_match_the_dense_solves(k, m, nv):
    """The LM step, the task and null-space pull steps, and the spring step equal their
    definitions solved densely (numpy): small systems (the loops) and large ones (BLAS and
    LAPACK from kernels.LARGE_SYSTEM, m * nv), either side of the switch. The spring step
    is the minimiser of |r + J dv|^2 + mu |W (dv - diff)|^2 + lam |W dv|^2 (least squares).
    """
    rng = np.random.default_rng(6 + m)
    jac = rng.normal(size=(k, m, nv))
    r = rng.normal(size=(k, m))
    lam = rng.uniform(1e-3, 1.0, size=k)
    np.testing.assert_allclose(kernels.lm_step(jac, r, lam), _lm_reference(jac, r, lam),
                               atol=1e-9)
    w = rng.uniform(0.5, 2.0, size=nv)
    d0 = rng.normal(size=(k, nv))
    task, pull = kernels.lm_null_step(jac, r, lam, d0, 1.0 / w**2, 1e-3)
    for i in range(k):
        jw = jac[i] / w**2
        a = jw @ jac[i].T
        want_task = -jw.T @ np.linalg.solve(a + lam[i] * np.eye(m), r[i])
        want_pull = d0[i] - jw.T @ np.linalg.solve(a + 1e-3 * np.eye(m), jac[i] @ d0[i])
        np.testing.assert_allclose(task[i], want_task, atol=1e-8)
        np.testing.assert_allclose(pull[i], want_pull, atol=1e-8)
    mu = rng.uniform(0.0, 2.0, size=k)
    diff = rng.normal(size=(k, nv))
    spring = kernels.lm_spring_step(jac, r, lam, mu, w, diff)
    for i in range(k):
        stacked = np.vstack([jac[i], np.sqrt(mu[i]) * np.diag(w), np.sqrt(lam[i]) * np.diag(w)])
        rhs = np.concatenate([-r[i], np.sqrt(mu[i]) * w * diff[i], np.zeros(nv)])
        np.testing.assert_allclose(spring[i], np.linalg.lstsq(stacked, rhs, rcond=None)[0],
                                   atol=1e-8)
    # A matrix LAPACK refuses (a zero Jacobian, no damping): the clamped factorisation.
    zero = np.zeros((1, m, nv))
    task, pull = kernels.lm_null_step(zero, np.zeros((1, m)), np.zeros(1), np.ones((1, nv)),
                                      np.ones(nv), 0.0)
    assert np.all(np.isfinite(task)) and np.all(np.isfinite(pull))


def test_blocked_joints_kernel_flags_the_joints_pushed_out_of_their_limits():
    """A 1-DOF joint at (within 1e-9 of) its limit with a step pushing outwards is blocked;
    inward steps, joints inside their range and ball joints never are."""
    for chain in (_urdf_chains()[2], _chains()[-1]):
        rng = np.random.default_rng(9)
        q = chain.random_configuration(rng, 8)
        sq, sv = chain.scalar_q, chain.scalar_v
        q[:3, sq] = chain.lower[sq]
        q[3:5, sq] = chain.upper[sq] - 1e-12
        dv = rng.normal(size=(8, chain.nv))
        found, mask = kernels.blocked_joints(chain.records.joints, q, dv)
        want = np.zeros_like(mask)
        want[:3, sv] = dv[:3, sv] < 0.0
        want[3:5, sv] = dv[3:5, sv] > 0.0
        np.testing.assert_array_equal(mask, want)
        assert found == bool(want.any()) and found
        inside = np.tile(chain.neutral_configuration(), (8, 1))
        assert not kernels.blocked_joints(chain.records.joints, inside, dv)[0]


# ---------------------------------------------------------------------------- random walk
@pytest.mark.parametrize('redraws', [0, 1, 3])
def test_random_walk_draws_in_the_documented_order(redraws):
    """The random walk kernel takes one standard normal per flagged entry in row-major order
    (so seeded runs are reproducible and the stream is left where the draws end): what the
    loop of its documentation computes, redraws of the entries outside the limits and the
    fallback to the previous value included. Every result is within the limits; rows with
    a zero scale stay where they were."""
    chain = _urdf_chains()[2]                       # prismatic and mimic joints
    sq = chain.scalar_q
    noise = np.random.default_rng(3).uniform(0.05, 0.3, size=len(sq))
    prev = chain.random_configuration(np.random.default_rng(4), 60)
    prev[:20] = chain.lower                          # at a limit: half the draws land outside
    prev[20:30] = chain.upper
    scale = np.random.default_rng(5).uniform(0.0, 3.0, size=60)
    scale[::7] = 0.0

    def walk(rng, use_kernel):
        out = prev.copy()
        bad = np.ones((len(prev), len(sq)), dtype=bool)
        count = bad.size
        for attempt in range(redraws + 2):
            keep = attempt == redraws + 1
            z = np.zeros(0) if keep else rng.standard_normal(count)
            if use_kernel:
                count = kernels.random_walk(chain.records.joints, prev, z, scale, noise, out, bad,
                                            keep)
            else:
                used = count = 0
                for i, j in zip(*np.nonzero(bad)):
                    c = sq[j]
                    if keep:
                        out[i, c], bad[i, j] = prev[i, c], False
                        continue
                    out[i, c] = prev[i, c] + z[used] * (noise[j] * scale[i])
                    used += 1
                    bad[i, j] = not chain.lower[c] <= out[i, c] <= chain.upper[c]
                    count += bad[i, j]
            if not count:
                break
        return out, rng.random()

    got, after = walk(np.random.default_rng(11), True)
    want, want_after = walk(np.random.default_rng(11), False)
    np.testing.assert_array_equal(got, want)
    assert after == want_after
    assert np.all((got >= chain.lower) & (got <= chain.upper))
    np.testing.assert_array_equal(got[::7], prev[::7])
    assert not np.array_equal(got, prev)


# ---------------------------------------------------------------------------- quaternions
def test_quaternion_kernels_match_scipy():
    """Products, logs, relative logs, exponential steps, pair logs and slerps of quaternion
    rows against scipy's rotations (the same rotation; logs in [0, pi], exp steps in the
    hemisphere w >= 0), with edge cases: the identity, both signs of one rotation, angles
    near 0 and pi, rotation vectors of zero, tiny and beyond-pi length."""
    from smcik_ros.kernels.quat import (quat_exp_products, quat_pair_rotvecs, quat_products,
                                        quat_relative_rotvecs, quat_rotvecs, quat_slerps)
    rng = np.random.default_rng(12)
    a, b = _unit(rng, (40,)), _unit(rng, (40,))
    a[0], b[0] = (1.0, 0.0, 0.0, 0.0), (-1.0, 0.0, 0.0, 0.0)
    b[1] = -a[1]                                    # the same rotation, other sign
    b[2] = [-a[2, 1], a[2, 0], -a[2, 3], a[2, 2]]   # a turned by pi
    a[3] = [1e-10, 1.0, 0.0, 0.0]                   # angle pi itself
    prod = quat_products(a, b)
    same = np.abs(np.sum(prod * _quat(_scipy(a) * _scipy(b)), axis=1))     # up to the sign
    np.testing.assert_allclose(same, 1.0, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(prod, axis=1), 1.0, atol=1e-14)
    logs = quat_rotvecs(a)
    want = _scipy(a).as_rotvec()
    np.testing.assert_allclose(logs[4:], want[4:], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(logs[3]), np.pi, atol=1e-9)
    rel = quat_relative_rotvecs(a, b)
    np.testing.assert_allclose(rel[4:], (_scipy(a).inv() * _scipy(b)).as_rotvec()[4:],
                               atol=1e-12)
    np.testing.assert_allclose(rel[1], 0.0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(rel[2]), np.pi, atol=1e-12)
    # One reference row per joint, repeated over the rows (particles x joints).
    ref = _unit(rng, (5,))
    q = _unit(rng, (8, 5)).reshape(-1, 4)
    got = quat_relative_rotvecs(q, ref)
    np.testing.assert_allclose(got, (_scipy(q).inv() * _scipy(np.tile(ref, (8, 1)))).as_rotvec(),
                               atol=1e-12)
    v = rng.normal(size=(40, 3)) * rng.choice([0.0, 1e-8, 0.1, 1.0, 4.0], size=(40, 1))
    step = quat_exp_products(a, v)
    same = np.abs(np.sum(step * _quat(_scipy(a) * Rotation.from_rotvec(v)), axis=1))
    np.testing.assert_allclose(same, 1.0, atol=1e-14)
    assert np.all(step[:, 0] >= 0.0)
    rows = np.concatenate([a, b], axis=1)
    pair = quat_pair_rotvecs(rows, np.zeros(1, dtype=np.int64), np.full(1, 4))
    np.testing.assert_allclose(pair, quat_relative_rotvecs(a, b), atol=0.0)
    for t in (0.0, 0.25, 0.5, 1.0):
        got = quat_slerps(a[4:], b[4:], np.full(1, t))
        for i in range(len(got)):
            ra, rb = _scipy(a[4 + i]), _scipy(b[4 + i])
            want = Slerp([0.0, 1.0], Rotation.concatenate([ra, rb]))([t])
            angle = (want.inv() * _scipy(got[i])).magnitude()
            assert angle[0] < 1e-7, (t, i, angle)
    ts = rng.uniform(size=36)
    got = quat_slerps(a[4:], b[4:], ts)
    np.testing.assert_allclose(got[5], quat_slerps(a[9:10], b[9:10], ts[5:6])[0], atol=0.0)


def test_ball_clip_kernel_keeps_the_axis_and_caps_the_angle():
    """Chain.clip's ball joints: unit, w >= 0, unchanged (normalised) within the limit, and
    beyond it the same axis at the limit angle; limits of pi and beyond clip nothing."""
    limits = (0.3, 1.0, np.pi, 2.5)
    chain = Chain.from_joints([JointSpec(f'b{k}', f'l{k}', f'l{k + 1}', 'ball', upper=lim)
                               for k, lim in enumerate(limits)], 'l0', 'l4')
    rng = np.random.default_rng(16)
    quat = rng.normal(size=(50, 4, 4)) * rng.uniform(0.5, 2.0, size=(50, 4, 1))
    quat[0, 0], quat[0, 2], quat[1, 0] = (1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0), (-2, 0, 0, 0)
    got = kernels.clip_ball_rows(chain.records.joints, quat.reshape(-1, 4)).reshape(quat.shape)
    unit = _hemisphere(quat / np.linalg.norm(quat, axis=-1, keepdims=True))
    angle = 2.0 * np.arccos(np.clip(unit[..., 0], -1.0, 1.0))
    limit = np.minimum(limits, np.pi)
    within = angle <= limit
    np.testing.assert_allclose(got[within], unit[within], atol=1e-15)
    got_angle = 2.0 * np.arccos(np.clip(got[..., 0], -1.0, 1.0))
    np.testing.assert_allclose(got_angle[~within], np.broadcast_to(limit, angle.shape)[~within],
                               atol=1e-7)
    axis = unit[~within, 1:] / np.linalg.norm(unit[~within, 1:], axis=-1, keepdims=True)
    got_axis = got[~within, 1:] / np.linalg.norm(got[~within, 1:], axis=-1, keepdims=True)
    np.testing.assert_allclose(got_axis, axis, atol=1e-12)
    assert (~within).sum() > 20 and np.all(got[..., 0] >= 0.0)
    # Chain.clip: each entry into [-1, 1] first, then these rows.
    clipped = kernels.clip_ball_rows(chain.records.joints, np.clip(quat, -1.0, 1.0).reshape(-1, 4))
    np.testing.assert_array_equal(chain.clip(quat.reshape(50, -1)), clipped.reshape(50, -1))


def test_motion_distance_kernel_is_the_weighted_tangent_difference():
    """``kernels.motion_distances``: the 2-norm and the largest magnitude of the weighted
    tangent difference ref - q (continuous joints wrapped to [-pi, pi), ball joints scipy's
    relative rotation vector), on a ball chain, a mixed chain with a continuous joint a
    whole turn and more away, and a URDF arm; NaN in a row gives NaN in that row only."""
    rng = np.random.default_rng(23)
    mixed = Chain.from_joints([
        JointSpec('b0', 'base', 'l0', 'ball', upper=1.0),
        JointSpec('r1', 'l0', 'l1', 'revolute', lower=-1.0, upper=1.0),
        JointSpec('c2', 'l1', 'l2', 'continuous'),
        JointSpec('b3', 'l2', 'l3', 'ball', upper=2.5)], 'base', 'l3')
    for chain in (ball_chain(30, 0.1, max_angle=1.0), mixed, _urdf_chains()[0]):
        w = rng.uniform(0.5, 3.0, size=chain.nv)
        ref = chain.random_configuration(rng)
        q = chain.random_configuration(rng, 40)
        q[0] = ref
        if chain is mixed:
            c = chain.joint_index('c2')
            q[1:5, c] = ref[c] + np.array([7.0, -7.0, np.pi - 1e-9, 20.0])
        norm, peak = kernels.motion_distances(chain.records.joints, q, ref, w)
        d = np.zeros((len(q), chain.nv))
        sq, sv = chain.scalar_q, chain.scalar_v
        d[:, sv] = ref[sq] - q[:, sq]
        cont = chain.continuous[sq]
        d[:, sv[cont]] = (d[:, sv[cont]] + np.pi) % (2.0 * np.pi) - np.pi
        for bq, bv in zip(chain.ball_q_index, chain.ball_v_index):
            d[:, bv] = (_scipy(q[:, bq]).inv() * _scipy(np.tile(ref[bq], (len(q), 1)))
                        ).as_rotvec()
        np.testing.assert_allclose(norm, np.linalg.norm(d * w, axis=1), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(peak, np.abs(d * w).max(axis=1), rtol=1e-12, atol=1e-12)
        assert norm[0] <= 1e-12 and np.all(norm[1:] > 1e-3)
        bad = q.copy()
        bad[3, 2] = np.nan
        got = kernels.motion_distances(chain.records.joints, bad, ref, w)
        assert np.isnan(got[0][3]) and np.isnan(got[1][3])
        keep = np.arange(len(q)) != 3
        np.testing.assert_array_equal(got[0][keep], norm[keep])


# ---------------------------------------------------------------------------- refinement
def _refinement_records(chain, terms, tolerance=(1e-4, 1e-3), steps=None, motion=None):
    """Return the refinement kernels' records (bodies, columns, joints, targets, lm, motion)
    of ``terms`` (the targets), as the SMC builds them."""
    refine = Refinement(chain, make_solver('smc', chain).settings)
    bodies, columns, joints, targets, lm, plain = refine.records(terms, tolerance)
    if steps is not None:
        lm = (steps,) + lm[1:]
    return bodies, columns, joints, targets, lm, plain if motion is None else motion


def test_refinement_records_are_rebuilt_when_the_targets_structure_changes():
    """The refinement keeps the targets' record between calls by the targets' structure
    (kinds, links, sigmas, weights, covariances, offsets, tolerance) and reads the goals on
    every call: after any sequence of goals, its record is the one a fresh refinement builds,
    with the targets' goals, and a new goal of the same structure reuses the rest."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(3)

    def goals(sigma=0.01, link='link5', offset=(0.01, 0.02, 0.0), covariance=None):
        frames = chain.frames(chain.random_configuration(rng))
        return [PoseTarget(frames.link_pose()[0], sigma_position=sigma, covariance=covariance),
                PositionTarget(frames.point(link, offset)[0], link=link, offset=offset),
                OrientationTarget(frames.link_pose('link3')[0, :3, :3], link='link3')]

    kept = Refinement(chain, make_solver('smc', chain).settings)
    first = goals()
    steps = [(first, (1e-4, 1e-3)), (goals(), (1e-4, 1e-3)), (goals(), (1e-4, 1e-3)),
             (goals(sigma=0.02), (1e-4, 1e-3)), (goals(link='link4'), (1e-4, 1e-3)),
             (goals(offset=(0.0, 0.0, 0.03)), (1e-4, 1e-3)),
             (goals(covariance=np.diag([1e-4] * 3 + [1e-3] * 3)), (1e-4, 1e-3)),
             (goals(), (1e-3, 1e-2)), (first, (1e-4, 1e-3))]
    whiten = []
    for terms, tolerance in steps:
        got = kept.records(terms, tolerance)[3]
        fresh = Refinement(chain, make_solver('smc', chain).settings).records(terms, tolerance)
        for a, b in zip(got, fresh[3]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(got[3][0], terms[0].pose)
        np.testing.assert_array_equal(got[3][1, :3, 3], terms[1].position)
        np.testing.assert_array_equal(got[3][2, :3, :3], terms[2].rotation)
        whiten.append(got[4])
    assert whiten[1] is whiten[0] and whiten[2] is whiten[0]       # same structure: kept
    assert whiten[3] is not whiten[2] and whiten[-1] is not whiten[-2]
    assert not np.array_equal(whiten[3], whiten[2])


def _total_cost(terms, frames):
    return sum(t.cost(frames) for t in terms)


def test_refine_kernel_lowers_the_cost_within_the_limits():
    """``refine`` with the plain LM step: every row's cost is the targets' cost of its new
    configuration, never higher than before; rows stay within their limits, rows at a limit
    included; rows started near the goal's configuration reach it (most of them, by 1e-6).
    Pose, position (with a point offset) and orientation targets on two links at once."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(7)
    solution = chain.random_configuration(rng)
    frames = chain.frames(solution)
    terms = [PoseTarget(frames.link_pose()[0]),
             PositionTarget(frames.point('link5', (0.01, 0.02, 0.0))[0], link='link5',
                            offset=(0.01, 0.02, 0.0)),
             OrientationTarget(frames.link_pose('link3')[0, :3, :3], link='link3')]
    records = _refinement_records(chain, terms, steps=8)
    q = chain.random_configuration(rng, 40)
    q[:6] = chain.lower
    q[6:9] = chain.upper
    q[20:] = chain.clip(solution + rng.normal(0.0, 0.05, (20, chain.nq)))
    cost = _total_cost(terms, chain.frames(q))
    start = cost.copy()
    state = kernels.state_of(cost, np.full(len(q), np.inf))
    kernels.refine(*records, q, state)
    improved = state[4]
    np.testing.assert_allclose(cost, _total_cost(terms, chain.frames(q)), rtol=1e-9,
                               atol=1e-15)
    assert np.all(cost <= start) and np.all(improved == (cost < start)) and improved.sum() > 30
    assert chain.within_limits(q, tol=0.0).all()
    pe = np.max([t.errors(chain.frames(q[20:]))[0] for t in terms], axis=0)
    assert np.sum(pe < 1e-6) >= 15


def test_refine_kernel_with_a_covariance_target_lowers_its_whitened_cost():
    """A pose target with a full covariance: the kernel's cost is the whitened residual's
    squared norm (``Term.cost``), lowered by every accepted step."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(17)
    solution = chain.random_configuration(rng)
    a = rng.normal(size=(6, 6))
    cov = a @ a.T * 1e-4 + np.diag([1e-4] * 3 + [1e-3] * 3)
    term = PoseTarget(chain.fk(solution), covariance=cov)
    records = _refinement_records(chain, [term], steps=6)
    q = chain.clip(solution + rng.normal(0.0, 0.1, (20, chain.nq)))
    cost = term.cost(chain.frames(q))
    start = cost.copy()
    state = kernels.state_of(cost, np.full(len(q), np.inf))
    kernels.refine(*records, q, state)
    np.testing.assert_allclose(cost, term.cost(chain.frames(q)), rtol=1e-9, atol=1e-15)
    assert np.all(cost <= start) and state[4].sum() >= 15


def test_first_solution_kernel_returns_the_first_row_within_the_tolerance():
    """``first_solution``: the first row (refined alone) within the tolerance, its errors
    those of the pose target at the refined row, the later rows untouched; -1 and NaN when
    no row gets there."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(8)
    solution = chain.random_configuration(rng)
    term = PoseTarget(chain.fk(solution))
    records = _refinement_records(chain, [term], steps=10)
    rows = np.vstack([chain.random_configuration(rng, 3),
                      chain.clip(solution + 0.02), chain.random_configuration(rng, 3)])
    before = rows.copy()
    index, pe, oe = kernels.first_solution(*records, rows)
    assert 0 <= index <= 3
    want = term.errors(chain.frames(rows[index]))
    assert pe == pytest.approx(want[0][0], abs=1e-12) and pe <= 1e-4
    assert oe == pytest.approx(want[1][0], abs=1e-12) and oe <= 1e-3
    np.testing.assert_array_equal(rows[index + 1:], before[index + 1:])
    far = _refinement_records(chain, [term], (0.0, 0.0), steps=1)
    index, pe, oe = kernels.first_solution(*far, before[:2].copy())
    assert index == -1 and np.isnan(pe) and np.isnan(oe)


def test_first_solution_steps_take_the_longest_trial_that_lowers_the_cost():
    """Each step of ``first_solution`` takes its longest trial (alphas 1, 1/2, 1/4 of the LM
    step) that lowers the targets' cost, shorter ones not judged: one step equals the one
    step of that alpha alone, and the row is left where it was when none lowers it."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(12)
    solution = chain.random_configuration(rng)
    term = PoseTarget(chain.fk(solution))
    rows = chain.random_configuration(rng, 60)
    bodies, columns, joints, targets, lm, plain = _refinement_records(
        chain, [term], (0.0, 0.0), steps=1)           # never within: every row steps once
    lm = lm[:3] + (2.0, 0.0)      # long, undamped steps: some overshoot
    alphas = lm[1]
    assert list(alphas) == [1.0, 0.5, 0.25]
    start = term.cost(chain.frames(rows))
    both = rows.copy()
    kernels.first_solution(bodies, columns, joints, targets, lm, plain, both)
    alone = []
    for alpha in alphas:
        one = rows.copy()
        kernels.first_solution(bodies, columns, joints, targets,
                               (lm[0], np.array([alpha])) + lm[2:], plain, one)
        alone.append((one, term.cost(chain.frames(one))))
    taken = np.zeros(len(alphas) + 1, dtype=int)
    for k in range(len(rows)):
        lower = [a for a, (_, cost) in enumerate(alone) if cost[k] < start[k]]
        want = alone[lower[0]][0][k] if lower else rows[k]
        np.testing.assert_array_equal(both[k], want)
        taken[lower[0] if lower else -1] += 1
    assert taken[0] > 0 and taken[1:].sum() > 0, taken     # both cases met


def test_refine_kernel_with_the_prior_keeps_precise_rows_and_pulls_them_nearer():
    """``refine`` with the minimal-motion prior: rows already within the tolerance stay
    within it and move nearer the reference (the null-space pull; gained is the drop of the
    squared weighted distance); coarse rows lower cost + spring merit; all rows stay within
    their limits."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(9)
    solution = chain.random_configuration(rng)
    term = PoseTarget(chain.fk(solution))
    reference = chain.clip(solution + 0.4)
    w = np.ones(chain.nv)
    motion = records.MOTION.pack(spring=10.0, spring_fade=1.0, tolerance_cost=1.0, gain=0.5,
                                 slide_min=0.1, precise_fraction=0.5, weights=w,
                                 reference=reference.copy())
    refined = _refinement_records(chain, [term], (1e-3, 1e-2), steps=4, motion=motion)
    q = np.vstack([np.tile(solution, (10, 1)), chain.random_configuration(rng, 10)])
    cost = term.cost(chain.frames(q))
    dist = np.linalg.norm((reference - q) * w, axis=1)
    state = kernels.state_of(cost, np.full(len(q), np.inf))
    kernels.refine(*refined, q, state)
    improved, gained = state[4], state[5]
    after = np.linalg.norm((reference - q) * w, axis=1)
    pe, oe = term.errors(chain.frames(q))
    assert np.all(pe[:10] <= 0.5e-3 + 1e-12) and np.all(oe[:10] <= 0.5e-2 + 1e-12)
    assert np.all(after[:10] < dist[:10] - 1e-3) and improved[:10].all()
    np.testing.assert_allclose(gained, dist**2 - after**2, atol=1e-9)
    np.testing.assert_allclose(cost, term.cost(chain.frames(q)), rtol=1e-9, atol=1e-15)
    assert chain.within_limits(q, tol=0.0).all() and improved[10:].sum() >= 8


def test_refine_kernel_moves_ball_joints_on_the_sphere_within_their_limits():
    """A chain of ball joints (the papers' figures): the kernel integrates the tangent steps
    as rotations (unit quaternions, w >= 0, within the angle limits) and lowers the cost."""
    chain = ball_chain(6, segment_length=0.2, max_angle=1.2)
    rng = np.random.default_rng(10)
    solution = chain.random_configuration(rng)
    term = PositionTarget(chain.fk(solution)[:3, 3], link='tip')
    refined = _refinement_records(chain, [term], steps=5)
    q = chain.random_configuration(rng, 20)
    cost = term.cost(chain.frames(q))
    start = cost.copy()
    state = kernels.state_of(cost, np.full(len(q), np.inf))
    kernels.refine(*refined, q, state)
    assert np.all(cost <= start) and state[4].sum() >= 15
    np.testing.assert_allclose(cost, term.cost(chain.frames(q)), rtol=1e-9, atol=1e-15)
    assert chain.within_limits(q).all()


def test_propose_and_choose_are_refine_one_step_at_a_time():
    """The stepwise form (a problem with terms the kernels do not evaluate): ``propose`` then
    ``choose`` with no other term repeat ``refine``'s steps exactly."""
    chain = _urdf_chains()[0]
    rng = np.random.default_rng(11)
    solution = chain.random_configuration(rng)
    term = PoseTarget(chain.fk(solution))
    motion = records.MOTION.pack(spring=10.0, spring_fade=1.0, tolerance_cost=1.0, gain=0.5,
                                 slide_min=0.1, precise_fraction=0.25, weights=np.ones(chain.nv),
                                 reference=chain.clip(solution + 0.3))
    for prior in (None, motion):
        refined = _refinement_records(chain, [term], (1e-3, 1e-2), steps=3, motion=prior)
        q0 = np.vstack([chain.clip(solution + rng.normal(0.0, 0.02, (6, chain.nq))),
                        chain.random_configuration(rng, 6)])
        q1, q2 = q0.copy(), q0.copy()
        s1 = kernels.state_of(term.cost(chain.frames(q0)), np.full(12, np.inf))
        kernels.refine(*refined, q1, s1)
        s2 = kernels.state_of(term.cost(chain.frames(q0)), np.full(12, np.inf))
        none = (np.zeros((12, 0)), np.zeros((12, 0, chain.nv)))
        _start_state(refined, q2, s2)
        for _ in range(3):
            trials, mu = kernels.propose(*refined, none, q2, s2)
            kernels.choose(*refined[:4], refined[5], q2, s2, trials, mu,
                           np.zeros(trials.shape[:2]))
        np.testing.assert_array_equal(q1, q2)
        for a, b in zip(s1, s2):
            np.testing.assert_array_equal(a, b)


def _start_state(refined, q, state):
    """Set the state's precise flags and distances as ``refine`` does before its steps."""
    kernels.begin(*refined, q, state)


# ---------------------------------------------------------------------------- collision
def _collision_scene(seed=3, cloud_points=60):
    """The demo arm's CollisionConstraint (SRDF pairs, pair tables) in a scene of every
    primitive kind, rotated, and a point-cloud sphere set of several parts."""
    from smcik_ros.collision import (CollisionConstraint, CollisionModel, Obstacle, Scene,
                                     conventional_srdf_path, self_collision_pairs)
    chain = _urdf_chains()[0]
    model = CollisionModel.from_urdf(chain, ARM7, urdf_path=ARM7)
    rng = np.random.default_rng(seed)
    items = []
    for i in range(9):
        pose = np.eye(4)
        pose[:3, :3] = Rotation.random(random_state=seed + i).as_matrix()
        pose[:3, 3] = rng.uniform([-0.5, -0.5, 0.1], [0.5, 0.5, 0.8])
        items.append(('add', ('o', i), (Obstacle.sphere(pose[:3, 3], 0.07),
                                       Obstacle('box', (0.15, 0.08, 0.1), pose),
                                       Obstacle('cylinder', (0.05, 0.15), pose))[i % 3]))
    cloud = rng.uniform([-0.6, -0.6, 0.0], [0.6, 0.6, 0.9], (cloud_points, 3))
    items.append(('add', ('cloud', 0), Obstacle('spheres', (0.02,), np.eye(4), centers=cloud)))
    scene = Scene()
    scene.apply(items, 'test')
    pairs = self_collision_pairs(model, conventional_srdf_path(ARM7))
    return chain, CollisionConstraint(model, scene, pairs=pairs)


# How close a reference distance is [m]: closed forms, and python-fcl's distance of a box or
# cylinder to a sphere apart from it, to rounding; its signed distance in penetration (EPA,
# asked for only there: GJK's signed distance of separate shapes is 1e-4 off) to 1e-6.
_EXACT, _FCL_INSIDE = 1e-12, 1e-5


def _brute_force_leaves(constraint, frames, threshold):
    """Every leaf below ``threshold`` by brute force: all sphere pairs of each self pair
    (centre distance minus radii), every robot sphere against every primitive (spheres:
    closed form; boxes and cylinders: python-fcl's signed distance). Returns
    {(n, pair, a, b): (d, how close d is)}."""
    robot, obstacles = constraint._robot, constraint._obstacles()
    pad = constraint.padding
    body = robot.sphere_body
    centres = np.where((body >= 0)[None, :, None],
                       np.einsum('snij,sj->nsi', frames.rot[body], robot.centers)
                       + np.swapaxes(frames.pos[body], 0, 1), robot.centers[None])
    sphere_link = robot.sphere_link
    out = {}
    for p, (la, lb) in enumerate(constraint.pairs):
        sa, sb = np.flatnonzero(sphere_link == la), np.flatnonzero(sphere_link == lb)
        d = np.linalg.norm(centres[:, sa, None] - centres[:, None, sb], axis=-1) - (
            robot.radii[sa][:, None] + robot.radii[sb][None] + pad)
        for n, i, j in zip(*np.nonzero(d < threshold)):
            out[(n, p, sa[i], sb[j])] = (d[n, i, j], _EXACT)
    reach = np.linalg.norm(obstacles.size, axis=1)
    for k, (link, o) in enumerate(zip(obstacles.pair_link, obstacles.pair_obj)):
        spheres = np.flatnonzero(sphere_link == link)
        prims = [g for part in range(obstacles.obj_part_start[o], obstacles.obj_part_start[o]
                                     + obstacles.obj_part_count[o])
                 for g in range(obstacles.part_start[part],
                                obstacles.part_start[part] + obstacles.part_count[part])]
        for g in prims:
            gap = np.linalg.norm(centres[:, spheres] - obstacles.trans[g], axis=-1) - (
                robot.radii[spheres] + reach[g] + pad)
            for n, i in zip(*np.nonzero(gap < threshold)):
                s = spheres[i]
                kind, size = obstacles.kind[g], obstacles.size[g]
                if kind == 0:
                    d = np.linalg.norm(centres[n, s] - obstacles.trans[g]) - size[0]
                    tol = _EXACT
                else:
                    shape = fcl.Box(*(2.0 * size)) if kind == 1 else \
                        fcl.Cylinder(size[0], 2.0 * size[1])
                    prim = fcl.CollisionObject(shape, fcl.Transform(obstacles.rot[g],
                                                                    obstacles.trans[g]))
                    ball = fcl.CollisionObject(fcl.Sphere(robot.radii[s]),
                                               fcl.Transform(np.eye(3), centres[n, s]))
                    inside = fcl.collide(prim, ball, fcl.CollisionRequest(),
                                         fcl.CollisionResult()) > 0
                    request = fcl.DistanceRequest(enable_signed_distance=inside)
                    d = fcl.distance(prim, ball, request, fcl.DistanceResult()) + robot.radii[s]
                    tol = _FCL_INSIDE if inside else _EXACT
                d -= robot.radii[s] + pad
                if d < threshold:
                    out[(n, len(constraint.pairs) + k, s, g)] = (d, tol)
    return out


def test_collision_query_kernel_finds_the_brute_force_leaves():
    """``kernels.collision_query`` (``engine.query``) against brute force with python-fcl:
    the same leaf pairs below each threshold and their distances, with and without the
    pair tables, also when its output arrays are too small at first; the nearest query
    each configuration's closest leaf, the per-pair query each pair's; over seeded
    configurations of which many collide (self and scene)."""
    from smcik_ros.collision import engine
    chain, constraint = _collision_scene()
    rng = np.random.default_rng(7)
    q = chain.clip(np.concatenate([chain.random_configuration(rng, 16),
                                   chain.neutral_configuration() + rng.normal(0.0, 0.3, (16, 7))]))
    frames = chain.frames(q)
    robot, geometry = constraint._robot, constraint._obstacles()
    world = robot.world(frames)
    seen = set()
    for threshold in (0.0, 0.01, 0.05):
        want = _brute_force_leaves(constraint, frames, threshold + _FCL_INSIDE)
        for tables in (constraint._tables, None):
            for capacity in (None, 1):
                got = engine.query(robot, world, constraint.pairs, geometry, threshold,
                                   constraint.padding, tables, q, capacity=capacity)
                have = {(n, p, a, b): d for n, p, a, b, d in
                        zip(got.n, got.pair, got.a, got.b, got.d)}
                assert {k for k, (d, tol) in want.items() if d < threshold - tol} <= set(have)
                for key, d in have.items():
                    ref, tol = want[key]
                    assert d < threshold and abs(ref - d) < tol, (key, d, ref)
            for mode, group in (('nearest', lambda k: k[0]), ('per_pair', lambda k: k[:2])):
                got = engine.query(robot, world, constraint.pairs, geometry, threshold,
                                   constraint.padding, tables, q, **{mode: True})
                best = {}
                for key, (d, _) in want.items():
                    best[group(key)] = min(best.get(group(key), np.inf), d)
                have = {group(k): d for k, d in
                        zip(zip(got.n, got.pair, got.a, got.b), got.d)}
                assert len(have) == len(got) and set(have) <= set(best)
                assert {g for g, d in best.items() if d < threshold - _FCL_INSIDE} <= set(have)
                for g, d in have.items():
                    assert abs(best[g] - d) < _FCL_INSIDE, (mode, g)
        seen.update((p < len(constraint.pairs), d < 0.0)
                    for (n, p, a, b), (d, _) in want.items())
    assert seen == {(True, True), (True, False), (False, True), (False, False)}, \
        'the draw should hold colliding and free leaves, self and scene'


def _leaf_distance(constraint, q, leaf):
    """Return the padded distance of one leaf (n, pair, a, b, is_self) at q (nq,), computed
    from FK with closed-form sphere distances and the library's exact primitive distance."""
    from smcik_ros.collision import shapes
    robot, obstacles = constraint._robot, constraint._obstacles()
    frames = constraint.model.chain.frames(q)

    def centre(s):
        b = robot.sphere_body[s]
        return robot.centers[s] if b < 0 else frames.rot[b, 0] @ robot.centers[s] + \
            frames.pos[b, 0]
    _, _, a, b, is_self = leaf
    if is_self:
        return np.linalg.norm(centre(a) - centre(b)) - robot.radii[a] - robot.radii[b]
    return shapes.point_primitive_distance(
        centre(a)[None], obstacles.kind[[b]], obstacles.rot[[b]], obstacles.trans[[b]],
        obstacles.size[[b]])[0] - robot.radii[a]


def test_distance_gradient_kernel_matches_finite_differences():
    """The clearance rows' gradients (``kernels.distance_gradients``, behind the collision
    constraint's ``jacobian`` and ``inequality_rows``): d distance / d tangent step of each
    leaf equals the central differences of that leaf's distance, self pairs and every
    obstacle kind on the demo arm, and obstacles on a ball-joint chain's skeleton covers."""
    from smcik_ros.collision import CollisionConstraint, CollisionModel, Obstacle, Scene
    rng = np.random.default_rng(11)
    chain, scene_constraint = _collision_scene()
    constraint = CollisionConstraint(scene_constraint.model, scene_constraint.scene,
                                     pairs=scene_constraint.pairs, clearance=0.05)
    q = chain.clip(chain.neutral_configuration() + rng.normal(0.0, 0.4, (40, chain.n)))
    ball = ball_chain(4, max_angle=2.0)
    qb = ball.random_configuration(rng, 30)
    tips = ball.frames(qb).link_pose()[:, :3, 3]
    scene = Scene({('o', k): Obstacle.sphere(tips[k] + rng.normal(0.0, 0.02, 3), 0.05)
                   for k in range(0, 30, 2)})
    skeleton = CollisionConstraint(CollisionModel.skeleton(ball), scene, self_collision=False,
                                   clearance=0.05)
    for c, rows in ((constraint, q), (skeleton, qb)):
        frames = c.model.chain.frames(rows)
        leaves, world, picked, _, _, _ = c._rows(frames)
        leaves = leaves.select(picked[:25])
        grad = c._distance_gradients(frames, world, leaves)
        assert len(leaves) >= 12 and np.abs(grad).max() > 0.1
        h = 1e-6
        for r in range(len(leaves)):
            leaf = (leaves.n[r], leaves.pair[r], leaves.a[r], leaves.b[r], leaves.is_self[r])
            for v in range(c.model.chain.nv):
                step = np.zeros(c.model.chain.nv)
                step[v] = h
                x = rows[leaves.n[r]]
                fd = (_leaf_distance(c, c.model.chain.integrate(x, step), leaf)
                      - _leaf_distance(c, c.model.chain.integrate(x, -step), leaf)) / (2 * h)
                assert abs(grad[r, v] - fd) < 1e-5, (r, v, grad[r, v], fd)


# ---------------------------------------------------------------------------- calling them
def test_as_rows_passes_kernel_ready_arrays_through_and_copies_the_rest():
    """What the row kernels take: float64, C-ordered, writable (M, width) rows. An array that
    already is one comes back as a view of the same memory; any other (read-only, strided,
    integer, a list) as a copy with the same values, never touching the input."""
    a = np.arange(24, dtype=float).reshape(2, 3, 4)
    rows = kernels.as_rows(a, 4)
    assert rows.shape == (6, 4) and np.shares_memory(rows, a)
    frozen = a.copy()
    frozen.flags.writeable = False
    strided = np.arange(48.0).reshape(12, 4)[::2]
    cases = [frozen, a[:, :, ::-1], strided, np.arange(24).reshape(6, 4),
             np.asarray(a, dtype=np.float32), a.tolist(),
             np.broadcast_to(np.arange(4.0), (5, 4))]
    for case in cases:
        before = np.array(case, dtype=float)
        rows = kernels.as_rows(case, 4)
        assert rows.dtype == np.float64 and rows.flags.c_contiguous and rows.flags.writeable
        assert rows.shape == (before.size // 4, 4)
        np.testing.assert_array_equal(rows, before.reshape(-1, 4))
        assert not (isinstance(case, np.ndarray) and np.shares_memory(rows, case))
        rows[:] = -1.0
        np.testing.assert_array_equal(np.array(case, dtype=float), before)


def test_records_are_plain_tuples_of_the_kernels_types():
    """A chain's four records (and a pose goal's) are plain tuples (numba types them in C)
    whose arrays are float64, int64 or bool, C-contiguous and writable, in the layouts'
    order; a record missing a field or of the wrong rank is refused, naming what it
    expected."""
    from smcik_ros.kernels import records
    chain = _chains()[-1]
    assert chain.records._fields == ('bodies', 'columns', 'links', 'joints')
    for layout, record in zip((records.BODIES, records.COLUMNS, records.LINKS, records.JOINTS),
                              chain.records):
        assert type(record) is tuple and len(record) == len(layout.fields)
        for (name, kind, rank), value in zip(layout.fields, record):
            if rank:
                assert value.dtype == kind and value.ndim == rank, name
                assert value.flags.c_contiguous and value.flags.writeable, name
    view = records.JOINTS.view(chain.records.joints)
    np.testing.assert_array_equal(view.lower, chain.lower)
    assert records.COLUMNS.view(chain.records.columns).nv == chain.nv
    with pytest.raises(TypeError, match=r"missing \['max_step'\], unknown \['max_stp'\]"):
        records.LM.pack(steps=1, alphas=np.ones(1), damping=0.1, max_stp=0.1,
                        cost_damping=0.5)
    with pytest.raises(ValueError, match='alphas must have 1 dimensions'):
        records.LM.pack(steps=1, alphas=np.ones((1, 1)), damping=0.1, max_step=0.1,
                        cost_damping=0.5)


def test_the_motion_prior_record_follows_the_reference_and_the_tolerance():
    """The refinement packs the motion prior's record once per (motion, tolerance cost)
    and renews its reference on every call (``Layout.replace``): after any sequence of
    references and tolerances it equals a fresh pack; ``replace`` converts like ``pack``
    and refuses a field the layout lacks."""
    from smcik_ros.kernels import records
    chain = _urdf_chains()[0]
    solver = make_solver('smc', chain)
    refinement, motion = Refinement(chain, solver.settings), solver.policies.minimal_motion
    target = [PoseTarget(chain.fk(chain.neutral_configuration()))]
    rng = np.random.default_rng(5)
    for tolerance_cost in (1.0, 1.0, 4.0, 1.0):
        motion.reference = chain.random_configuration(rng)
        got = refinement.records(target, (1e-3, 1e-2), motion, tolerance_cost)[5]
        fresh = records.MOTION.pack(
            spring=Refinement.SPRING * motion.spring, spring_fade=Refinement.SPRING_FADE,
            tolerance_cost=tolerance_cost, gain=motion.gain,
            slide_min=Refinement.SLIDE_CORRECTION, precise_fraction=Refinement.PRECISE_FRACTION,
            weights=motion.weights, reference=motion.reference)
        assert len(got) == len(fresh) and got[:6] == fresh[:6]
        for a, b in zip(got[6:], fresh[6:]):
            np.testing.assert_array_equal(a, b)
    replaced = records.MOTION.replace(got, reference=[1, 2, 3])
    assert replaced[7].dtype == np.float64 and replaced[:7] == got[:7]
    with pytest.raises(TypeError, match="unknown 'ref'"):
        records.MOTION.replace(got, ref=np.zeros(3))
    with pytest.raises(ValueError, match='reference must have 1 dimensions'):
        records.MOTION.replace(got, reference=np.zeros((1, 3)))


def test_warm_up_reports_a_cold_cache_and_the_kernels_it_compiled():
    from smcik_ros.warmup import warm_up
    messages = []
    spent = warm_up(ball_chain(2), messages.append)
    # A cold cache announces the compilation before it and reports after it; a warm one
    # says nothing.
    assert spent > 0.0
    assert messages == [] or (messages[0].startswith('compiling kernels')
                              and messages[-1].startswith('kernels ready'))
    assert all(func.signatures for func in kernels.KERNELS)


def test_warm_up_loads_every_kernel_it_checks_for_a_cold_cache():
    """warm_up compiles every kernel whose cache index decides 'cold' itself, so each one
    has its index afterwards: otherwise every later start says it is compiling (a kernel
    reached only inside another is not cached on its own). A fresh interpreter: a kernel
    another test called does not count. Every kernel the package exports is one of them."""
    code = ('from smcik_ros import kernels; from smcik_ros.model import Chain; '
            'from smcik_ros.warmup import warm_up; '
            f'warm_up(Chain.from_urdf({ARM7!r}, "base_link", "tool0")); '
            'print(kernels.cache_is_warm(), all(f.signatures for f in kernels.KERNELS))')
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True, timeout=600).stdout.strip()
    assert out == 'True True'
    exported = [getattr(kernels, n) for n in kernels.__all__
                if hasattr(getattr(kernels, n), 'signatures')]
    assert {f.__name__ for f in exported} == {f.__name__ for f in kernels.KERNELS}


def test_every_solver_path_uses_the_warmed_up_specialisations():
    """After the kernel warm-up alone (the SMC solver's constructor's), every solver
    (solve and step, pose and position goals) and the frames of read-only, strided and
    subset configurations run on the specialisations already compiled: none compiles in
    a real-time tick."""
    chain = _urdf_chains()[0]
    kernels.compile_kernels(chain.records)
    before = {f.__name__: len(f.signatures) for f in kernels.KERNELS}
    q0 = chain.neutral_configuration()
    goal = chain.fk(chain.clip(q0 + 0.3))
    for name in available_solvers():
        if name == 'fabrik':
            continue            # ball chains only
        solver = make_solver(name, chain)
        solver.solve(goal, q0, max_iters=5)
        solver.reset(q0)
        for _ in range(4):
            solver.step(goal)
            solver.step(PositionTarget(goal[:3, 3]))
    read_only = chain.neutral_configuration()
    read_only.setflags(write=False)
    frames = chain.frames(read_only)
    view = frames.subset(slice(0, 1))
    view.jacobian()
    PoseTarget(goal).residual_jacobian(view)
    PoseTarget(goal).errors(view)
    chain.frames(np.tile(q0, (3, 2))[:, ::2]).jacobian()
    chain.fk(read_only)
    assert {f.__name__: len(f.signatures) for f in kernels.KERNELS} == before


def test_read_only_package_caches_under_the_home_directory(tmp_path):
    """An installed (read-only) package points numba's cache at ~/.cache/smcik_ros/numba.

    The package directory reads as not writable (os.access patched in a fresh interpreter:
    chmod does not stop root, which runs CI here).
    """
    env = {k: v for k, v in os.environ.items() if k not in ('NUMBA_CACHE_DIR', 'XDG_CACHE_HOME')}
    env['HOME'] = str(tmp_path)
    package = os.path.join(ROOT, 'smcik_ros')
    code = ('import os, sys; real = os.access; '
            f'os.access = lambda p, m: False if str(p).startswith({package!r}) else real(p, m); '
            'sys.modules.pop("numba", None); import smcik_ros.kernels.jit; '
            'print(os.environ.get("NUMBA_CACHE_DIR"))')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == str(tmp_path / '.cache' / 'smcik_ros' / 'numba')
    # A writable package keeps numba's default (the cache beside the modules).
    code = 'import os, smcik_ros.kernels.jit; print(os.environ.get("NUMBA_CACHE_DIR"))'
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == 'None'


_UNCOMPILED = '''
import json, numpy as np
from smcik_ros import kernels
from smcik_ros.goals import PoseTarget
from smcik_ros.model import Chain
chain = Chain.from_urdf(ARM7, 'base_link', 'tool0')
q = chain.random_configuration(np.random.default_rng(0), 4)
rot, pos = kernels.fk(chain.records.bodies, q)
jac = kernels.jacobian_at(chain.records.columns, rot, pos, chain.num_bodies - 1, pos[-1])
term = PoseTarget(chain.fk(q[0] + 0.1))
errors = term.errors(chain.frames(q))
cost = term.cost(chain.frames(q))
from smcik_ros.solvers import make_solver
from smcik_ros.solvers.smc.policies import Refinement
refine = Refinement(chain, make_solver('smc', chain).settings)
kernels.refine(*refine.records([term], (0.0, 0.0)), q, kernels.state_of(cost, cost * 0 + 1e9))
prod = kernels.quat_products(np.eye(2, 4), np.eye(2, 4)[::-1].copy())
print(json.dumps({'compiled': hasattr(kernels.fk, 'signatures'), 'rot': rot.tolist(),
                  'jac': jac.tolist(), 'errors': [e.tolist() for e in errors],
                  'refined': q.tolist(), 'prod': prod.tolist()}))
'''


def test_the_kernels_run_uncompiled_under_numba_disable_jit():
    """``NUMBA_DISABLE_JIT=1`` (numba's own switch) runs the very same kernels as plain
    Python: FK, a Jacobian, the pose errors, the fused refinement and a quaternion product
    give what the compiled kernels give (to rounding: libm's sin against the fast one)."""
    outputs = {}
    for disable in ('1', '0'):
        env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_DISABLE_JIT=disable)
        out = subprocess.run([sys.executable, '-c', _UNCOMPILED.replace('ARM7', repr(ARM7))],
                             env=env, capture_output=True, text=True, check=True, timeout=600)
        outputs[disable] = json.loads(out.stdout.strip().splitlines()[-1])
    assert outputs['1'].pop('compiled') is False and outputs['0'].pop('compiled') is True
    for key, value in outputs['0'].items():
        np.testing.assert_allclose(outputs['1'][key], value, atol=1e-9, err_msg=key)
