"""The compiled kernels (smcik_ros.kernels) against the numpy reference and finite differences.

With numba the kernels are compiled; with SMCIK_NO_JIT=1 (or numba missing) the same
functions run as plain Python: both ways they must give the numpy implementation's numbers.
"""

import os

import numpy as np
import pytest

from smcik_ros import kernels
from smcik_ros.errors import ModelError
from smcik_ros.goals import PoseTarget
from smcik_ros.kinematics import Chain
from smcik_ros.rotations import quat_from_rotvec
from smcik_ros.solvers import make_solver, smc_policies

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)
CASES = [
    (os.path.join(ROOT, 'urdf', 'smcik_arm.urdf'), 'tool0'),
    (os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf'), 'tool0'),
    (os.path.join(HERE, 'urdf', 'mimic_prismatic.urdf'), 'tool0'),
]


def _chains():
    out = [Chain.from_urdf(path, 'base_link', tip) for path, tip in CASES]
    out.append(Chain.ball_chain(4, max_angle=2.0))
    return out


@pytest.fixture
def numpy_path(monkeypatch):
    """Run the library's numpy implementation (the reference) inside the fixture's scope."""
    def run(func, *args):
        with monkeypatch.context() as m:
            m.setattr(kernels, 'ENABLED', False)
            return func(*args)
    return run


@pytest.mark.parametrize('chain', _chains(), ids=lambda c: c.robot_name)
def test_fk_and_jacobian_kernels_match_numpy(chain, numpy_path):
    rng = np.random.default_rng(3)
    q = chain.random_configuration(rng, 9)
    ref = numpy_path(chain.frames, q)
    rot, pos = kernels.fk(q, *chain.kernel_bodies())
    np.testing.assert_allclose(rot, ref.rot, atol=1e-13)
    np.testing.assert_allclose(pos, ref.pos, atol=1e-13)
    for body in range(chain.num_bodies):
        point = rng.normal(size=(9, 3))
        jac = kernels.jacobian_at(rot, pos, point, *chain.kernel_columns(body), chain.nv)
        np.testing.assert_allclose(jac, numpy_path(ref.jacobian_at, body, point), atol=1e-13)
    # The library path (compiled when numba is on) agrees too.
    frames = chain.frames(q)
    np.testing.assert_allclose(frames.rot, ref.rot, atol=1e-13)
    np.testing.assert_allclose(frames.jacobian(), numpy_path(ref.jacobian), atol=1e-13)
    # Joint values beyond the fast sine's range (libm for that body) and NaN (NaN out).
    if chain.has_ball_joints:
        return
    far = q.copy()
    far[0, 0] = 3.0e5
    far[1, -1] = np.nan
    ref = numpy_path(chain.frames, far)
    rot, pos = kernels.fk(far, *chain.kernel_bodies())
    np.testing.assert_allclose(rot, ref.rot, atol=1e-9)
    np.testing.assert_allclose(pos, ref.pos, atol=1e-9)
    assert np.isnan(rot[:, 1]).any() and np.isfinite(rot[:, [0] + list(range(2, 9))]).all()


def test_sincos_is_within_an_ulp_of_libm_and_covers_every_quadrant():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-7.0, 7.0, 4000), rng.uniform(-1e5, 1e5, 4000),
                        np.arange(-8, 9) * np.pi / 4, [0.0, -0.0, 1e-300]])
    from smcik_ros.kernels.fk import _sincos
    out = np.array([_sincos(v) for v in x])
    assert np.max(np.abs(out[:, 0] - np.sin(x))) <= 2.3e-16
    assert np.max(np.abs(out[:, 1] - np.cos(x))) <= 2.3e-16


@pytest.mark.parametrize('chain', _chains(), ids=lambda c: c.robot_name)
def test_fk_of_every_link_matches_the_frames(chain, numpy_path):
    """Chain.fk (the link-path kernel, or frames for a ball joint on the path) equals the
    numpy frames' link pose for every link, one configuration or many, also for joint values
    beyond the fast sine's range and NaN (NaN in, NaN out)."""
    rng = np.random.default_rng(4)
    q = chain.random_configuration(rng, 50)
    far = q.copy()
    far[:, chain.scalar_q] += 3e5
    for link in chain.link_names:
        for batch in (q, far):
            ref = numpy_path(chain.frames, batch).link_pose(link)
            np.testing.assert_allclose(chain.fk(batch, link), ref, atol=1e-12)
            np.testing.assert_allclose(chain.fk(batch[7], link), ref[7], atol=1e-12)
    bad = q[:2].copy()
    bad[0, 0] = np.nan
    poses = chain.fk(bad)
    assert np.isnan(poses[0, :3]).any() and np.all(np.isfinite(poses[1]))
    with pytest.raises(ModelError, match=f'{chain.nq} entries'):
        chain.fk(np.zeros(chain.nq + 1))


@pytest.mark.parametrize('chain', _chains(), ids=lambda c: c.robot_name)
def test_pose_kernels_match_numpy_including_near_pi(chain, numpy_path):
    rng = np.random.default_rng(4)
    q = chain.random_configuration(rng, 12)
    frames = numpy_path(chain.frames, q)
    goal = frames.link_pose()[0].copy()
    # A goal turned by nearly pi from row 0 exercises the near-pi branch of the log map.
    flip = np.eye(4)
    a = np.pi - 0.05         # near pi, not at it (where the sign of the axis is arbitrary)
    flip[:3, :3] = np.array([[1.0, 0.0, 0.0], [0.0, np.cos(a), -np.sin(a)],
                             [0.0, np.sin(a), np.cos(a)]])
    for target_pose in (goal, goal @ flip):
        target = PoseTarget(target_pose)
        r_ref, j_ref = numpy_path(target.residual_jacobian, frames)
        e_ref = numpy_path(target.errors, frames)
        body, off = chain.link_anchor(None)
        r, j = kernels.pose_residual_jacobian(frames.rot, frames.pos, body, off, target.pose,
                                              *chain.kernel_columns(body), chain.nv)
        np.testing.assert_allclose(r, r_ref, atol=1e-10)
        np.testing.assert_allclose(j, j_ref, atol=1e-9)
        pe, oe = kernels.pose_errors(frames.rot, frames.pos, body, off, target.pose)
        np.testing.assert_allclose(pe, e_ref[0], atol=1e-13)
        np.testing.assert_allclose(oe, e_ref[1], atol=1e-12)


def test_pose_residual_jacobian_matches_finite_differences():
    chain = Chain.from_urdf(CASES[0][0], 'base_link', 'tool0')
    rng = np.random.default_rng(5)
    q = chain.random_configuration(rng)
    goal = chain.fk(chain.random_configuration(rng))
    target = PoseTarget(goal)
    body, off = chain.link_anchor(None)

    def residual(x):
        f = chain.frames(x[None])
        return kernels.pose_residual_jacobian(f.rot, f.pos, body, off, goal,
                                              *chain.kernel_columns(body), chain.nv)[0][0]

    _, jac = target.residual_jacobian(chain.frames(q[None]))
    h = 1e-6
    fd = np.empty((6, chain.nv))
    for v in range(chain.nv):
        e = np.zeros(chain.nv)
        e[v] = h
        fd[:, v] = (residual(q + e) - residual(q - e)) / (2.0 * h)
    np.testing.assert_allclose(jac[0], fd, atol=1e-6)


def test_lm_step_kernel_matches_the_dense_solve():
    rng = np.random.default_rng(6)
    jac = rng.normal(size=(5, 6, 7))
    r = rng.normal(size=(5, 6))
    lam = rng.uniform(1e-6, 1.0, size=5)
    dv = kernels.lm_step(jac, r, lam)
    for k in range(5):
        a = jac[k] @ jac[k].T + lam[k] * np.eye(6)
        np.testing.assert_allclose(dv[k], -jac[k].T @ np.linalg.solve(a, r[k]), atol=1e-10)
    # The refinement's entry point gives the same step whichever path runs.
    np.testing.assert_allclose(smc_policies._lm_step(jac, r, lam), dv, atol=1e-10)


def test_ball_chain_fk_kernel_with_unnormalised_tangent_moves():
    chain = Chain.ball_chain(3)
    q = np.tile(chain.neutral_configuration(), (2, 1))
    q[1, 4:8] = quat_from_rotvec(np.array([0.0, 0.5 * np.pi, 0.0]))
    rot, pos = kernels.fk(q, *chain.kernel_bodies())
    # The second segment turns by 90 degrees about y: the tip leaves the z axis along x.
    np.testing.assert_allclose(pos[2, 1], (1.0, 0.0, 1.0), atol=1e-12)
    np.testing.assert_allclose(pos[2, 0], (0.0, 0.0, 2.0), atol=1e-12)


def test_warm_up_reports_and_the_env_switch_is_honoured():
    messages = []
    spent = kernels.warm_up(Chain.ball_chain(2), messages.append)
    if kernels.ENABLED:
        assert os.environ.get('SMCIK_NO_JIT', '') in ('', '0')
        # A cold cache announces the compilation before it and reports after it; a warm one
        # says nothing.
        assert messages == [] or (messages[0].startswith('compiling kernels')
                                  and messages[-1].startswith('kernels ready'))
    else:
        assert spent == 0.0 and messages == []


@pytest.mark.skipif(not kernels.ENABLED, reason='numba is off: no kernel is compiled or cached')
def test_warm_up_loads_every_kernel_it_checks_for_a_cold_cache():
    """warm_up calls every kernel whose cache index decides 'cold' itself, so each one has
    its index afterwards: otherwise every later start says it is compiling (refine_pose was
    only reached inside first_solution, where numba does not cache it on its own). A fresh
    interpreter: a kernel another test called does not count."""
    import subprocess
    import sys
    code = ('from smcik_ros import kernels; from smcik_ros.kinematics import Chain; '
            'from smcik_ros.kernels.warm import _cache_is_warm; '
            f'kernels.warm_up(Chain.from_urdf({CASES[0][0]!r}, "base_link", "tool0")); '
            'print(",".join(n for n in kernels.WARM_UP_KERNELS '
            'if not getattr(kernels, n).signatures or not _cache_is_warm('
            'getattr(kernels, n))))')
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True, timeout=600).stdout.strip()
    assert out == ''
    njit_names = [n for n in kernels.__all__ if hasattr(getattr(kernels, n), 'signatures')]
    assert sorted(njit_names) == sorted(kernels.WARM_UP_KERNELS)


def test_fused_refinement_matches_the_numpy_refinement(numpy_path):
    """Refinement.move in one kernel takes the same steps as its numpy form."""
    chain = Chain.from_urdf(CASES[0][0], 'base_link', 'tool0')
    refine = smc_policies.Refinement(chain, make_solver('smc', chain).settings)
    rng = np.random.default_rng(7)
    term = PoseTarget(chain.fk(chain.random_configuration(rng)))

    class Problem:
        hard = []
        terms = [term]

        def cost(self, frames):
            return term.cost(frames)

    q = chain.random_configuration(rng, 40)
    q[:6] = chain.lower          # rows at the limits: the blocked-joint step
    q[6:9] = chain.upper
    cost = numpy_path(term.cost, chain.frames(q))
    fused_q = q.copy()
    fused_cost = cost.copy()
    improved = kernels.refine_pose(
        fused_q, fused_cost, refine.steps, refine.alphas, refine.damping, refine.max_step,
        chain.lower, chain.upper, np.sqrt(term.weight) / term.sigma, term.weight,
        term.sigma[0], term.sigma[3], *chain.kernel_bodies(), *chain.link_anchor(None),
        term.pose, *chain.kernel_columns(chain.link_anchor(None)[0]))
    frames, ref_cost, ref_improved, _ = numpy_path(refine.move, Problem(),
                                                   numpy_path(chain.frames, q.copy()), cost, None)
    assert ref_improved.sum() > 30
    np.testing.assert_array_equal(improved, ref_improved)
    np.testing.assert_allclose(fused_q, frames.q, atol=1e-12)
    np.testing.assert_allclose(fused_cost, ref_cost, rtol=1e-9, atol=1e-15)
    assert np.all(fused_cost <= cost)


def test_read_only_package_caches_under_the_home_directory(tmp_path):
    """An installed (read-only) package points numba's cache at ~/.cache/smcik_ros/numba.

    The package directory reads as not writable (os.access patched in a fresh interpreter:
    chmod does not stop root, which runs CI here).
    """
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ('SMCIK_NO_JIT', 'NUMBA_CACHE_DIR', 'XDG_CACHE_HOME')}
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


def test_lm_null_step_kernel_matches_numpy(numpy_path):
    rng = np.random.default_rng(8)
    jac = rng.normal(size=(6, 6, 7))
    r = rng.normal(size=(6, 6))
    lam = rng.uniform(1e-6, 1.0, size=6)
    d0 = rng.normal(size=(6, 7))
    winv2 = rng.uniform(0.5, 2.0, size=7)
    task, pull = kernels.lm_null_step(jac, r, lam, d0, winv2, 1e-6)
    ref_task, ref_pull = numpy_path(smc_policies._lm_null_step, jac, r, lam, d0, winv2, 1e-6)
    np.testing.assert_allclose(task, ref_task, atol=1e-9)
    np.testing.assert_allclose(pull, ref_pull, atol=1e-9)
    # The pull lies in the task's null space (up to the damping floor).
    assert np.abs(np.einsum('kmv,kv->km', jac, pull)).max() < 1e-4


def test_spring_step_and_blocked_joints_kernels_match_numpy(numpy_path):
    rng = np.random.default_rng(9)
    jac = rng.normal(size=(5, 6, 7))
    r = rng.normal(size=(5, 6))
    lam = rng.uniform(1e-6, 1.0, size=5)
    mu = rng.uniform(0.0, 2.0, size=5)
    w = rng.uniform(0.5, 2.0, size=7)
    diff = rng.normal(size=(5, 7))
    np.testing.assert_allclose(kernels.lm_spring_step(jac, r, lam, mu, w, diff),
                               numpy_path(smc_policies._lm_spring_step, jac, r, lam, mu, w,
                                          diff), atol=1e-9)
    chain = Chain.from_urdf(CASES[2][0], 'base_link', 'tool0')
    q = chain.random_configuration(rng, 8)
    q[:3] = chain.lower
    q[3:5] = chain.upper
    dv = rng.normal(size=(8, chain.nv))
    found, mask = kernels.blocked_joints(q, dv, chain.scalar_q, chain.scalar_v, chain.lower,
                                         chain.upper)
    ref = numpy_path(smc_policies._blocked_joints, chain, q, dv)
    assert found and ref is not None
    np.testing.assert_array_equal(mask, ref)
    inside = chain.clip(0.5 * (chain.lower + chain.upper) + 0.0 * q)
    assert not kernels.blocked_joints(inside, dv, chain.scalar_q, chain.scalar_v, chain.lower,
                                      chain.upper)[0]
    assert numpy_path(smc_policies._blocked_joints, chain, inside, dv) is None


@pytest.mark.parametrize('max_redraws', [0, 1, 3])
def test_random_walk_draws_what_the_numpy_walk_draws(numpy_path, max_redraws):
    """The compiled random walk (redraws and fallback included) takes the same normals from
    the generator in the same order as the numpy walk: the same particles, bit for bit, and
    the stream left at the same place (seeded runs stay reproducible across both paths)."""
    chain = Chain.from_urdf(CASES[2][0], 'base_link', 'tool0')     # prismatic and mimic
    solver = make_solver('smc', chain, seed=0, max_redraws=max_redraws)
    model = solver._model(solver._make_goal(chain.fk(chain.neutral_configuration())))
    prev = chain.random_configuration(np.random.default_rng(4), 60)
    prev[:20] = chain.lower                 # at a limit: half the draws land outside
    prev[20:30] = chain.upper
    scale = np.random.default_rng(5).uniform(0.0, 3.0, size=60)
    scale[::7] = 0.0                        # carried over unchanged
    out = {}
    for path in ('kernel', 'numpy'):
        rng = np.random.default_rng(11)
        if path == 'numpy':
            q = numpy_path(model.propagate, prev, scale, rng)
        else:
            q = model.propagate(prev, scale, rng)
        out[path] = (q, rng.random())
    np.testing.assert_array_equal(out['kernel'][0], out['numpy'][0])
    assert out['kernel'][1] == out['numpy'][1]
    q = out['kernel'][0]
    assert np.all((q >= chain.lower) & (q <= chain.upper))
    np.testing.assert_array_equal(q[::7], prev[::7])
    # Without redraws, the draws outside the limits fall back to where they were.
    if max_redraws == 0:
        assert (q == prev)[:30][scale[:30] > 0.0].any()
    assert not np.array_equal(q, prev)


def test_quaternion_kernels_match_numpy(numpy_path):
    """rotations.quat_multiply / quat_to_rotvec through the kernels equal their numpy
    implementation: batch shapes of every rank, both hemispheres, angles near 0 and pi, a
    read-only input; broadcast shapes keep the numpy path."""
    from smcik_ros import rotations
    rng = np.random.default_rng(12)
    for shape in ((4,), (7, 4), (3, 5, 4)):
        a = rng.normal(size=shape)
        a /= np.linalg.norm(a, axis=-1, keepdims=True)
        b = rng.normal(size=shape)
        b /= np.linalg.norm(b, axis=-1, keepdims=True)
        np.testing.assert_allclose(rotations.quat_multiply(a, b),
                                   numpy_path(rotations.quat_multiply, a, b), atol=1e-15)
        np.testing.assert_allclose(rotations.quat_to_rotvec(a),
                                   numpy_path(rotations.quat_to_rotvec, a), atol=1e-13)
    edge = np.array([[1.0, 0.0, 0.0, 0.0], [-1.0, 1e-12, 0.0, 0.0], [1e-10, 1.0, 0.0, 0.0],
                     [-1e-10, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    edge /= np.linalg.norm(edge, axis=-1, keepdims=True)
    edge.setflags(write=False)
    np.testing.assert_allclose(rotations.quat_to_rotvec(edge),
                               numpy_path(rotations.quat_to_rotvec, edge), atol=1e-12)
    assert np.allclose(np.linalg.norm(rotations.quat_to_rotvec(edge[2:]), axis=-1), np.pi)
    wide = rng.normal(size=(2, 3, 4))
    np.testing.assert_array_equal(rotations.quat_multiply(wide, wide[0]),
                                  numpy_path(rotations.quat_multiply, wide, wide[0]))


def test_relative_rotvecs_kernel_is_the_numpy_composition(numpy_path):
    """rotations.quat_relative_rotvecs (the motion prior's ball-joint differences) in one
    kernel equals quat_to_rotvec(quat_multiply(quat_conjugate(q), ref)) as computed before
    it (numpy products, the rotvec kernel) bit for bit, so seeded runs are unchanged; the
    numpy implementation to rounding (its norm and arctan2 are numpy's): particles against
    one reference per joint, both hemispheres, q equal to ref (angle 0), opposite rotations
    (angle pi); other shapes keep the numpy path."""
    from smcik_ros import rotations

    def composed(q, ref):
        return rotations.quat_to_rotvec(
            rotations.quat_multiply(rotations.quat_conjugate(q), ref))
    rng = np.random.default_rng(13)
    for n, joints in ((1, 1), (50, 30), (7, 3)):
        ref = rng.normal(size=(joints, 4))
        ref /= np.linalg.norm(ref, axis=-1, keepdims=True)
        q = rng.normal(size=(n, joints, 4))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        q[0] = ref                                      # angle 0
        q[-1, 0] = -ref[0]                              # the same rotation, other sign
        if joints > 1:
            q[-1, 1] = [-ref[1, 1], ref[1, 0], -ref[1, 3], ref[1, 2]]    # angle pi
        got = rotations.quat_relative_rotvecs(q, ref)
        assert got.shape == (n, joints, 3)
        np.testing.assert_array_equal(got, composed(q, ref))
        np.testing.assert_allclose(got, numpy_path(composed, q, ref), atol=1e-13)
        np.testing.assert_array_equal(numpy_path(rotations.quat_relative_rotvecs, q, ref),
                                      numpy_path(composed, q, ref))
        assert np.all(np.linalg.norm(got, axis=-1) <= np.pi + 1e-12)
        np.testing.assert_allclose(got[0], 0.0, atol=1e-15)
    single = rotations.quat_relative_rotvecs(q[0, 0], ref[0])       # (4,) rows: numpy path
    np.testing.assert_array_equal(single, numpy_path(composed, q[0, 0], ref[0]))


def test_qutem_step_kernel_matches_numpy(numpy_path):
    """rotations.quat_times_exp (QuTem's step q * exp(v / 2) of every ball joint of every
    particle) through its kernel equals the numpy composition to rounding: batch shapes of
    every rank, rotation vectors of zero, tiny (the series branch), ordinary and beyond pi
    length, inputs in both hemispheres and read-only; results are unit and have w >= 0."""
    from smcik_ros import rotations
    rng = np.random.default_rng(14)
    for shape in ((), (9,), (50, 30), (3, 4, 5)):
        q = rng.normal(size=shape + (4,))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        v = rng.normal(size=shape + (3,)) * rng.choice([0.0, 1e-8, 0.1, 1.0, 4.0],
                                                       size=shape + (1,))
        q.setflags(write=False)
        v.setflags(write=False)
        got = rotations.quat_times_exp(q, v)
        assert got.shape == q.shape
        np.testing.assert_allclose(got, numpy_path(rotations.quat_times_exp, q, v),
                                   atol=1e-15)
        np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-14)
        assert np.all(got[..., 0] >= 0.0)
        # The step is the rotation v in q's frame: conj(q) * result is exp(v / 2), up to sign.
        back = rotations.quat_multiply(rotations.quat_conjugate(q), got)
        ref = rotations.quat_from_rotvec(v)
        assert np.allclose(np.abs(np.sum(back * ref, axis=-1)), 1.0, atol=1e-12)


def test_slerp_kernel_matches_numpy(numpy_path):
    """rotations.quat_slerp at a scalar t (the SMC branch memory) through its kernel equals
    the numpy form to rounding: batch shapes of every rank, t at 0, 1, inside and outside
    [0, 1], b in the other hemisphere (the shorter arc), a equal to b and nearly so (the
    linear branch); an array of t keeps the numpy path."""
    from smcik_ros import rotations
    rng = np.random.default_rng(15)
    for shape in ((), (30,), (4, 5)):
        a = rng.normal(size=shape + (4,))
        a /= np.linalg.norm(a, axis=-1, keepdims=True)
        b = rng.normal(size=shape + (4,))
        b /= np.linalg.norm(b, axis=-1, keepdims=True)
        if shape:
            b.reshape(-1, 4)[0] = -a.reshape(-1, 4)[0]
            b.reshape(-1, 4)[-1] = a.reshape(-1, 4)[-1] + 1e-9
        for t in (0.0, 0.05, 0.5, 1.0, 1.5):
            got = rotations.quat_slerp(a, b, t)
            assert got.shape == a.shape
            np.testing.assert_allclose(got, numpy_path(rotations.quat_slerp, a, b, t),
                                       atol=1e-14)
            np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-14)
        np.testing.assert_allclose(np.abs(np.sum(rotations.quat_slerp(a, b, 1.0) * b, -1)),
                                   1.0, atol=1e-12)
    t = rng.uniform(size=(4, 5))
    np.testing.assert_array_equal(rotations.quat_slerp(a, b, t),
                                  numpy_path(rotations.quat_slerp, a, b, t))


def test_ball_clip_kernel_matches_numpy(numpy_path):
    """Chain.clip's ball-joint part (normalise, w >= 0, back onto the angle limit about the
    same axis) through its kernel equals the numpy form to rounding: rows within and beyond
    their limit, in the other hemisphere, not unit length, the identity and a rotation of pi
    (limits of pi and beyond: nothing to clip), particles x joints and a single row."""
    from smcik_ros.kinematics import _clip_ball
    rng = np.random.default_rng(16)
    limits = np.array([0.3, 1.0, np.pi, 4.0])
    for shape in ((1, 4), (50, 4), (3, 2, 4)):
        quat = rng.normal(size=shape + (4,)) * rng.uniform(0.5, 2.0, size=shape + (1,))
        flat = quat.reshape(-1, 4, 4)
        flat[0, 0] = [1.0, 0.0, 0.0, 0.0]
        flat[0, 2] = [0.0, 0.0, 1.0, 0.0]
        flat[-1, 0] = [-0.999, 0.01, 0.0, 0.0]
        got = _clip_ball(quat, limits)
        np.testing.assert_allclose(got, numpy_path(_clip_ball, quat, limits), atol=1e-15)
        angle = 2.0 * np.arccos(np.clip(got[..., 0], -1.0, 1.0))
        assert np.all(angle <= np.minimum(limits, np.pi) + 1e-9)
        assert np.all(got[..., 0] >= 0.0)
        np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-14)


def test_smoothness_residual_kernel_matches_numpy(numpy_path):
    """ChainSmoothness's ball-pair residual through quat_pair_rotvecs equals the composition
    it replaces (quaternion products, then the rotvec kernel) bit for bit and the numpy form
    to rounding: neighbours 1 and 2, a chain with a 1-DOF joint among the balls, equal and
    opposite neighbours (angle 0), a read-only configuration array."""
    from smcik_ros import rotations
    from smcik_ros.goals import ChainSmoothness
    from smcik_ros.kinematics import JointSpec
    rng = np.random.default_rng(17)
    mixed = Chain.from_joints([
        JointSpec('b0', 'base', 'l0', 'ball', upper=1.0),
        JointSpec('r1', 'l0', 'l1', 'revolute', lower=-1.0, upper=1.0),
        JointSpec('b2', 'l1', 'l2', 'ball', upper=1.0),
        JointSpec('b3', 'l2', 'l3', 'ball', upper=1.0)], 'base', 'l3')
    for chain, neighbours in ((Chain.ball_chain(6, 0.1), 1), (Chain.ball_chain(6, 0.1), 2),
                              (mixed, 1)):
        term = ChainSmoothness(neighbours=neighbours).bind(chain)
        frames = chain.frames(chain.random_configuration(rng, 9))
        q = frames.q
        first, second = term._ball_first
        q[0, second[0]:second[0] + 4] = q[0, first[0]:first[0] + 4]
        q[1, second[0]:second[0] + 4] = -q[1, first[0]:first[0] + 4]
        q.setflags(write=False)
        got = term.residual(frames)
        qa, qb = q[:, term._ball_q[0]], q[:, term._ball_q[1]]
        composed = rotations.quat_to_rotvec(
            rotations.quat_multiply(rotations.quat_conjugate(qa), qb)).reshape(len(q), -1)
        np.testing.assert_array_equal(got[:, :composed.shape[1]], composed)
        np.testing.assert_allclose(got, numpy_path(term.residual, frames), atol=1e-13)
        np.testing.assert_allclose(got[:2, :3], 0.0, atol=1e-15)


def test_lm_kernels_of_large_systems_match_numpy(numpy_path):
    """At and above kernels.LARGE_SYSTEM (m * nv) the LM kernels take BLAS products and
    LAPACK's Cholesky: the same steps as numpy's dense solves (a 90-DOF chain's 92 x 90
    systems, and sizes either side of the switch); a matrix LAPACK refuses (not positive
    definite: no damping, a zero Jacobian) falls back to the clamped factorisation."""
    rng = np.random.default_rng(10)
    for k, m, nv in ((4, 92, 90), (2, 32, 32), (2, 31, 33), (3, 33, 30)):
        assert (m * nv >= kernels.LARGE_SYSTEM) == (m * nv >= 1024)
        jac = rng.normal(size=(k, m, nv))
        r = rng.normal(size=(k, m))
        lam = rng.uniform(1e-4, 1.0, size=k)
        mu = rng.uniform(0.0, 2.0, size=k)
        d0 = rng.normal(size=(k, nv))
        w = rng.uniform(0.5, 2.0, size=nv)
        diff = rng.normal(size=(k, nv))
        task, pull = kernels.lm_null_step(jac, r, lam, d0, 1.0 / w**2, 1e-3)
        ref_task, ref_pull = numpy_path(smc_policies._lm_null_step, jac, r, lam, d0,
                                        1.0 / w**2, 1e-3)
        np.testing.assert_allclose(task, ref_task, atol=1e-8)
        np.testing.assert_allclose(pull, ref_pull, atol=1e-8)
        np.testing.assert_allclose(kernels.lm_spring_step(jac, r, lam, mu, w, diff),
                                   numpy_path(smc_policies._lm_spring_step, jac, r, lam, mu,
                                              w, diff), atol=1e-8)
    zero = np.zeros((1, 92, 90))
    task, pull = kernels.lm_null_step(zero, np.zeros((1, 92)), np.zeros(1), np.ones((1, 90)),
                                      np.ones(90), 0.0)
    assert np.all(task == 0.0) and np.all(pull == 1.0)     # no task directions: d0 as it is


@pytest.mark.parametrize('online', [True, False], ids=['step', 'solve'])
def test_solver_runs_the_same_with_and_without_kernels(monkeypatch, online):
    """step() (minimal-motion refinement) and solve() give the numpy path's configurations.

    Without numba the kernels run here as plain Python (slow, hence few particles and
    iterations): either way they must reproduce the numpy implementation step for step.
    """
    chain = Chain.from_urdf(CASES[0][0], 'base_link', 'tool0')
    rng = np.random.default_rng(10)
    pose = chain.fk(chain.random_configuration(rng))
    goals = []
    for k in range(12):
        p = pose.copy()
        p[:3, 3] += 0.02 * np.array([np.cos(0.3 * k) - 1.0, np.sin(0.3 * k), 0.0])
        goals.append(p)

    calls = {'refine_pose': 0, 'refine_pose_motion': 0}

    def counted(name):
        func = getattr(kernels, name)

        def wrapper(*args):
            calls[name] += 1
            return func(*args)
        return wrapper

    def run(enabled):
        with monkeypatch.context() as m:
            m.setattr(kernels, 'ENABLED', enabled)
            for name in calls:
                m.setattr(kernels, name, counted(name))
            # seed_rows=0: the filter's own path (the seed-first stage runs only compiled;
            # test_smc checks it)
            solver = make_solver('smc', chain, num_particles=24, seed=3, seed_rows=0)
            if not online:
                seed = chain.neutral_configuration()
                return np.array([solver.solve(g, seed, max_iters=6).q for g in goals[:3]])
            solver.reset(chain.neutral_configuration())
            return np.array([solver.step(goals[min(k // 4, 11)]) for k in range(20)])

    fused = run(True)
    assert calls['refine_pose_motion' if online else 'refine_pose'] > 0
    calls.update(refine_pose=0, refine_pose_motion=0)
    np.testing.assert_allclose(fused, run(False), atol=1e-9)
    assert calls == {'refine_pose': 0, 'refine_pose_motion': 0}


@pytest.mark.skipif(not kernels.ENABLED, reason='numba is off (SMCIK_NO_JIT=1 or not '
                    'installed): nothing is compiled')
def test_every_solver_path_uses_the_warmed_up_specialisations():
    """After warm_up, no solver compiles a new kernel specialisation (which would stall a
    real-time tick for seconds): views, read-only and strided inputs are normalised."""
    from smcik_ros.goals import PositionTarget
    from smcik_ros.solvers import available_solvers
    chain = Chain.from_urdf(CASES[0][0], 'base_link', 'tool0')
    kernels.warm_up(chain)
    names = ['fk', 'jacobian_at', 'pose_residual_jacobian', 'pose_errors', 'lm_step',
             'lm_null_step', 'lm_spring_step', 'blocked_joints', 'refine_pose', 'quat_products',
             'quat_rotvecs', 'quat_exp_products', 'quat_slerps', 'refine_pose_motion',
             'first_solution',
             'distance_gradients']
    before = {n: len(getattr(kernels, n).signatures) for n in names}
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
    assert {n: len(getattr(kernels, n).signatures) for n in names} == before


def test_collision_world_positions_match_the_matrix_product(monkeypatch):
    """The compiled sphere positions equal the engine's block-matrix product."""
    from smcik_ros.collision import CollisionModel
    from smcik_ros.collision.engine import RobotGeometry
    urdf = CASES[0][0]
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    geometry = RobotGeometry(CollisionModel.from_urdf(chain, urdf, urdf_path=urdf))
    frames = chain.frames(chain.random_configuration(np.random.default_rng(4), 7))
    with monkeypatch.context() as m:
        m.setattr(kernels, 'ENABLED', False)
        reference = geometry.world(frames).xyz
    m_enabled = geometry.world(frames).xyz if kernels.ENABLED else None
    xyz = np.empty_like(reference)
    kernels.body_points_world(np.ascontiguousarray(frames.rot), np.ascontiguousarray(frames.pos),
                              geometry.row_body, geometry.row_local, xyz)
    np.testing.assert_allclose(xyz, reference, atol=1e-12)
    if m_enabled is not None:
        np.testing.assert_allclose(m_enabled, reference, atol=1e-12)


def _collision_scene(seed=3, cloud_points=60):
    """The demo arm's CollisionConstraint (SRDF pairs, pair tables) in a scene of every
    primitive kind, rotated, and a point-cloud sphere set of several parts."""
    from scipy.spatial.transform import Rotation

    from smcik_ros.collision import (CollisionConstraint, CollisionModel, Obstacle, Scene,
                                     conventional_srdf_path, self_collision_pairs)
    urdf = CASES[0][0]
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0')
    model = CollisionModel.from_urdf(chain, urdf, urdf_path=urdf)
    rng = np.random.default_rng(seed)
    scene = Scene()
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
    scene.apply(items, 'test')
    pairs = self_collision_pairs(model, conventional_srdf_path(urdf))
    return chain, CollisionConstraint(model, scene, pairs=pairs)


def test_compiled_collision_query_finds_the_numpy_leaves(numpy_path):
    """``kernels.collision_query`` (through ``engine._query_compiled``) returns the same leaf
    pairs and distances as the numpy broad phase, with and without the pair tables, over
    seeded configurations of which many collide (self and scene), also when its output
    arrays are too small at first."""
    from smcik_ros.collision import engine
    chain, constraint = _collision_scene()
    rng = np.random.default_rng(7)
    q = np.concatenate([chain.random_configuration(rng, 24),
                        chain.neutral_configuration() + rng.normal(0.0, 0.3, (24, chain.n))])
    q = chain.clip(q)
    frames = chain.frames(q)
    robot, geometry = constraint._robot, constraint._obstacles()
    eager = numpy_path(robot.world, frames)
    lazy = engine.World(None, robot.num_rows, len(q), np.array(frames.rot), np.array(frames.pos),
                        robot)
    np.testing.assert_allclose(lazy.xyz, eager.xyz, atol=1e-12)
    seen = set()
    for threshold in (0.0, 0.01, 0.05):
        for tables in (constraint._tables, None):
            ref = numpy_path(engine.query, robot, eager, constraint.pairs, geometry, threshold,
                             constraint.padding, tables, q)
            got = engine._query_compiled(robot, lazy, constraint.pairs, geometry, threshold,
                                         constraint.padding, tables, q)
            assert len(ref) > 0 and got.count == ref.count == len(q)

            def table(leaves):
                return {(int(n), int(p), int(a), int(b), bool(s)): d for n, p, a, b, s, d in
                        zip(leaves.n, leaves.pair, leaves.a, leaves.b, leaves.is_self,
                            leaves.d)}
            want, have = table(ref), table(got)
            assert set(have) == set(want), (threshold, tables is not None)
            keys = list(want)
            np.testing.assert_allclose([have[k] for k in keys], [want[k] for k in keys],
                                       rtol=0.0, atol=1e-12)
            assert np.all(got.d < threshold)
            # Output arrays too small for the leaves: the kernel is called again with room.
            small = engine._query_compiled(robot, lazy, constraint.pairs, geometry, threshold,
                                           constraint.padding, tables, q, capacity=1)
            assert table(small) == have
            seen.update((bool(s), bool(d < 0.0)) for s, d in zip(ref.is_self, ref.d))
    assert seen == {(True, True), (True, False), (False, True), (False, False)}, \
        'the draw should hold colliding and free leaves, self and scene'


@pytest.mark.parametrize('case', ['demo arm', 'mimic and prismatic', 'ball chain'])
def test_collision_gradient_kernel_matches_the_point_jacobians(numpy_path, case):
    """The clearance rows' gradients (``CollisionConstraint._distance_gradients``, behind
    ``jacobian`` and ``inequality_rows``) from ``kernels.distance_gradients`` equal the numpy
    point Jacobians': self pairs and every obstacle kind on the demo arm (SRDF pairs), and
    obstacles on the skeleton covers of a chain with mimic and prismatic joints and of a
    ball-joint chain, over seeded configurations of which many are within the clearance.
    Without numba the kernel runs as plain Python and is compared all the same."""
    from smcik_ros.collision import CollisionConstraint, CollisionModel, Obstacle, Scene
    rng = np.random.default_rng(11)
    if case == 'demo arm':
        chain, constraint = _collision_scene()
        q = chain.clip(chain.neutral_configuration() + rng.normal(0.0, 0.4, (40, chain.n)))
    else:
        chain = (Chain.from_urdf(CASES[2][0], 'base_link', 'tool0') if case.startswith('mimic')
                 else Chain.ball_chain(4, max_angle=2.0))
        q = chain.random_configuration(rng, 40)
        tips = chain.frames(q).link_pose()[:, :3, 3]
        scene = Scene({('o', k): Obstacle.sphere(tips[k] + rng.normal(0.0, 0.02, 3), 0.05)
                       for k in range(0, 40, 2)})
        constraint = CollisionConstraint(CollisionModel.skeleton(chain), scene,
                                         self_collision=False, clearance=0.05)
    frames = chain.frames(q)
    # The clearance rows' leaves from the numpy engine, then their gradients both ways (the
    # kernel runs as plain Python without numba: the test holds either way).
    leaves, world, rows, _, _, _ = numpy_path(constraint._rows, frames)
    picked = leaves.select(rows)
    assert len(picked) >= 20, 'the draw should put many rows within the clearance'
    reference = numpy_path(constraint._distance_gradients, frames, world, picked)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, 'ENABLED', True)
        got = constraint._distance_gradients(frames, world, picked)
    assert np.abs(reference).max() > 0.1
    np.testing.assert_allclose(got, reference, rtol=1e-12, atol=1e-15)


def _query_scene(numpy_path, seed):
    """Return (constraint, q, frames, eager World, lazy World) of ``_collision_scene``: 24
    random configurations and 24 near the neutral one (many in contact), seeded."""
    from smcik_ros.collision import engine
    chain, constraint = _collision_scene()
    rng = np.random.default_rng(seed)
    q = chain.clip(np.concatenate([chain.random_configuration(rng, 24),
                                   chain.neutral_configuration()
                                   + rng.normal(0.0, 0.3, (24, chain.n))]))
    frames = chain.frames(q)
    robot = constraint._robot
    eager = numpy_path(robot.world, frames)
    lazy = engine.World(None, robot.num_rows, len(q), np.array(frames.rot), np.array(frames.pos),
                        robot)
    return constraint, q, frames, eager, lazy


def test_the_nearest_query_returns_each_configurations_closest_leaf(numpy_path):
    """``nearest`` (the branch-and-bound query behind ``CollisionConstraint.distances``):
    exactly one leaf per configuration that has any below the threshold, the closest of the
    numpy query's leaves (distance equal; the pair may differ only on a tie), and distances()
    equal to the numpy engine's, at thresholds from contact to 20 cm."""
    from smcik_ros.collision import engine
    constraint, q, frames, eager, lazy = _query_scene(numpy_path, seed=8)
    robot, geometry = constraint._robot, constraint._obstacles()
    for threshold in (0.0, 0.01, 0.05, 0.2):
        ref = numpy_path(engine.query, robot, eager, constraint.pairs, geometry, threshold,
                         constraint.padding, constraint._tables, q)
        got = engine._query_compiled(robot, lazy, constraint.pairs, geometry, threshold,
                                     constraint.padding, constraint._tables, q, mode=1)
        assert len(got) == len(np.unique(ref.n)) and len(np.unique(got.n)) == len(got)
        for n, d in zip(got.n, got.d):
            np.testing.assert_allclose(d, ref.d[ref.n == n].min(), rtol=0.0, atol=1e-12)
    want = numpy_path(constraint.distances, frames).distance
    np.testing.assert_allclose(constraint.distances(frames).distance, want, rtol=0.0,
                               atol=1e-12)


def test_the_per_pair_query_returns_each_pairs_closest_leaf(numpy_path):
    """``per_pair`` (the query behind the constraint's checks and clearance rows): the
    kernel's branch and bound (mode 2) returns exactly ``min_per_pair`` of its full leaf set
    (the same leaves, ties included; compiled or run as Python), and the numpy path the same
    pairs at the same distances (1e-12), with and without the pair tables, at thresholds
    from contact to 20 cm."""
    from smcik_ros.collision import engine
    constraint, q, frames, eager, lazy = _query_scene(numpy_path, seed=9)
    robot, geometry = constraint._robot, constraint._obstacles()
    fields = ('n', 'pair', 'a', 'b', 'd', 'is_self')
    several = 0
    for threshold in (0.0, 0.01, 0.05, 0.2):
        for tables in (constraint._tables, None):
            full = engine._query_compiled(robot, lazy, constraint.pairs, geometry, threshold,
                                          constraint.padding, tables, q)
            want = full.select(engine.min_per_pair(full)[0])
            got = engine._query_compiled(robot, lazy, constraint.pairs, geometry, threshold,
                                         constraint.padding, tables, q, mode=2)
            for f in fields:
                np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
            several += len(full) > len(got) > 0
            ref = numpy_path(lambda *a: engine.query(*a, per_pair=True), robot, eager,
                             constraint.pairs, geometry, threshold, constraint.padding, tables, q)
            np.testing.assert_array_equal(ref.n, got.n)
            np.testing.assert_array_equal(ref.pair, got.pair)
            np.testing.assert_allclose(ref.d, got.d, rtol=0.0, atol=1e-12)
    assert several >= 4, 'the draw should hold pairs with several leaves below the threshold'


def test_collision_constraint_answers_alike_compiled_and_numpy(numpy_path):
    """violated, residual, jacobian and the motion check of the collision constraint agree
    between the compiled query (lazy sphere positions) and the numpy engine."""
    chain, constraint = _collision_scene(seed=5, cloud_points=6)
    rng = np.random.default_rng(11)
    q = chain.clip(chain.neutral_configuration() + rng.normal(0.0, 0.4, (40, chain.n)))
    step = rng.normal(0.0, 0.03, q.shape)

    def answers():
        constraint._cache = None
        frames = chain.frames(q)
        constraint.set_reference(q[0])
        out = [constraint.violated(frames), constraint.residual(frames),
               constraint.jacobian(frames)]
        out.append([constraint.check_motion(a, b)[0] for a, b in zip(q, q + step)])
        out.append(constraint.distances(frames).distance)
        return out

    ref = numpy_path(answers)
    got = answers()
    assert np.array_equal(got[0], ref[0]) and 0 < ref[0].sum() < len(q)
    np.testing.assert_allclose(got[1], ref[1], atol=1e-12)
    np.testing.assert_allclose(got[2], ref[2], atol=1e-9)
    assert got[3] == ref[3] and 0 < sum(ref[3]) < len(ref[3])
    np.testing.assert_allclose(got[4], ref[4], atol=1e-12)


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


def test_motion_distance_and_jump_kernel_match_numpy(numpy_path):
    """MinimalMotion's distance and jump go through one pass of motion_distances: the numpy
    difference's norms and largest entries to rounding, on a ball chain, on one with
    revolute, continuous and ball joints mixed (the continuous joint a whole turn and more
    away: wrapped) and on a URDF arm; rows equal to the reference (0), a read-only
    population, and a NaN row (NaN out, the other rows untouched)."""
    from smcik_ros.kinematics import JointSpec
    rng = np.random.default_rng(23)
    mixed = Chain.from_joints([
        JointSpec('b0', 'base', 'l0', 'ball', upper=1.0),
        JointSpec('r1', 'l0', 'l1', 'revolute', lower=-1.0, upper=1.0),
        JointSpec('c2', 'l1', 'l2', 'continuous'),
        JointSpec('b3', 'l2', 'l3', 'ball', upper=2.5)], 'base', 'l3')
    arm = Chain.from_urdf(CASES[0][0], 'base_link', CASES[0][1])
    for chain in (Chain.ball_chain(30, 0.1, max_angle=1.0), mixed, arm):
        motion = make_solver('smc', chain, seed=0).policies.minimal_motion
        assert motion is not None and (motion._k_motion is not None) == kernels.ENABLED
        cont = np.array([t == 'continuous' for t in chain.joint_types if t != 'ball'])
        layout = (chain.scalar_q.astype(np.int64), chain.scalar_v.astype(np.int64), cont,
                  chain.ball_q_index.astype(np.int64).reshape(-1, 4),
                  chain.ball_v_index.astype(np.int64).reshape(-1, 3), motion.weights)
        ref, other = chain.random_configuration(rng), chain.random_configuration(rng)
        q = chain.random_configuration(rng, 40)
        q[0] = ref
        if chain is mixed:
            q[1:5, 4] = ref[4] + np.array([7.0, -7.0, np.pi - 1e-9, 20.0])
        q.setflags(write=False)
        motion.reference = ref

        def reference(q, ref, other):
            d = motion.difference(q, ref) * motion.weights
            e = motion.difference(q, other) * motion.weights
            return np.sqrt(np.sum(d * d, axis=1)), np.max(np.abs(e), axis=1)

        distance, jump = motion.distance(q), motion.jump(q, other)
        want_distance, want_jump = numpy_path(reference, q, ref, other)
        np.testing.assert_allclose(distance, want_distance, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(jump, want_jump, rtol=1e-13, atol=1e-13)
        # the kernel itself (compiled, or as plain Python without numba)
        rows = np.array(q)
        direct = kernels.motion_distances(rows, ref, *layout, 1e-12)
        np.testing.assert_allclose(direct[0], want_distance, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(kernels.motion_distances(rows, other, *layout, 1e-12)[1],
                                   want_jump, rtol=1e-13, atol=1e-13)
        assert distance[0] <= 1e-12 and np.all(distance[1:] > 1e-3) and np.all(jump > 1e-3)
        bad = q.copy()
        bad[3, 2] = np.nan
        got_distance, got_jump = motion.distance(bad), motion.jump(bad, other)
        assert np.isnan(got_distance[3]) and np.isnan(got_jump[3])
        keep = np.arange(len(q)) != 3
        np.testing.assert_array_equal(got_distance[keep], distance[keep])
        np.testing.assert_array_equal(got_jump[keep], jump[keep])
        motion.weights = 2.0 * motion.weights           # read at each call, not kept
        np.testing.assert_allclose(motion.distance(q), 2.0 * distance, rtol=1e-14)
