"""The model cache: a chain and a collision model read back from the disk cache are the ones
parsed and computed from the URDF, a changed URDF or mesh is a new entry, a broken entry is
computed again, and a warm start imports neither yourdfpy nor trimesh."""

import dataclasses
import glob
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import trimesh

from smcik_ros.collision import model as collision_model
from smcik_ros.collision.model import CollisionModel
from smcik_ros.errors import ModelError
from smcik_ros.model import Chain
from smcik_ros.model import urdf as model_urdf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ARM = os.path.join(ROOT, 'urdf', 'smcik_arm.urdf')
URDFS = [(ARM, 'base_link', 'tool0'),
         (os.path.join(ROOT, 'urdf', 'smcik_arm6.urdf'), 'base_link', 'tool0'),
         (os.path.join(HERE, 'urdf', 'mimic_prismatic.urdf'), 'base_link', 'tool0'),
         (os.path.join(HERE, 'urdf', 'two_tips.urdf'), 'base_link', ['left_tool', 'right_tool'])]

_MESH_URDF = """<?xml version="1.0"?>
<robot name="meshy">
  <link name="base_link">
    <collision><geometry><box size="0.2 0.2 0.1"/></geometry></collision>
  </link>
  <joint name="j1" type="continuous">
    <parent link="base_link"/><child link="link1"/><origin xyz="0 0 0.1"/><axis xyz="0 0 1"/>
  </joint>
  <link name="link1">
    <collision><origin xyz="0 0 0.15"/>
      <geometry><mesh filename="package://meshy_description/meshes/part.stl"
                      scale="1 1 2"/></geometry></collision>
  </link>
  <joint name="j2" type="revolute">
    <parent link="link1"/><child link="link2"/><origin xyz="0 0 0.3"/><axis xyz="0 1 0"/>
    <limit lower="-2" upper="2" effort="1" velocity="1.5"/>
  </joint>
  <link name="link2">
    <visual><geometry><mesh filename="package://meshy_description/meshes/no_such.dae"/>
    </geometry></visual>
    <collision><origin xyz="0 0 0.1"/>
      <geometry><cylinder radius="0.04" length="0.2"/></geometry></collision>
  </link>
  <joint name="j3" type="fixed">
    <parent link="link2"/><child link="tool0"/><origin xyz="0 0 0.2"/>
  </joint>
  <link name="tool0"/>
</robot>
"""


def _same(x, y, path='model'):
    """Assert x and y are equal field by field (arrays exactly, dataclasses, containers)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape, path
        np.testing.assert_array_equal(x, y, err_msg=path)
    elif dataclasses.is_dataclass(x):
        assert type(x) is type(y), path
        for field in dataclasses.fields(x):
            _same(getattr(x, field.name), getattr(y, field.name), f'{path}.{field.name}')
    elif isinstance(x, dict):
        assert list(x) == list(y), path
        for k in x:
            _same(x[k], y[k], f'{path}[{k!r}]')
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), path
        for i, (u, v) in enumerate(zip(x, y)):
            _same(u, v, f'{path}[{i}]')
    else:
        assert x == y, f'{path}: {x!r} != {y!r}'


def _mesh_robot(directory, seed=0):
    """Write the mesh URDF and its package (a random convex mesh); return (urdf, package)."""
    package = os.path.join(directory, 'meshy_description')
    os.makedirs(os.path.join(package, 'meshes'), exist_ok=True)
    points = np.random.default_rng(seed).normal(size=(40, 3)) * [0.03, 0.02, 0.05]
    trimesh.convex.convex_hull(points).export(os.path.join(package, 'meshes', 'part.stl'))
    path = os.path.join(directory, 'meshy.urdf')
    with open(path, 'w') as f:
        f.write(_MESH_URDF)
    return path, directory


def _entries(cache, kind):
    return sorted(glob.glob(os.path.join(str(cache), f'{kind}-*.npz')))


@pytest.mark.parametrize('urdf, base, tip', URDFS)
def test_a_cached_chain_is_the_parsed_chain(tmp_path, monkeypatch, urdf, base, tip):
    parsed = Chain.from_urdf(urdf, base, tip, cache_dir='')
    assert _entries(tmp_path, 'urdf') == []
    stored = Chain.from_urdf(urdf, base, tip, cache_dir=str(tmp_path))
    assert len(_entries(tmp_path, 'urdf')) == 1

    def no_parse(*args):
        raise AssertionError('the URDF was parsed although its entry is in the cache')
    monkeypatch.setattr(model_urdf, '_parse_urdf_text', no_parse)
    cached = Chain.from_urdf(urdf, base, tip, cache_dir=str(tmp_path))
    for chain in (stored, cached):
        assert sorted(vars(chain)) == sorted(vars(parsed))
        for name, value in vars(parsed).items():
            _same(value, getattr(chain, name), name)
    q = parsed.random_configuration(np.random.default_rng(1), 20)
    np.testing.assert_array_equal(cached.fk(q), parsed.fk(q))
    # Another tip of the same URDF reads the same entry.
    Chain.from_urdf(urdf, base, parsed.link_names[-2], cache_dir=str(tmp_path))
    assert len(_entries(tmp_path, 'urdf')) == 1


def test_a_continuous_joint_survives_the_cache(tmp_path):
    """A continuous joint has no limits (None in the spec, JSON null in the entry)."""
    urdf, _ = _mesh_robot(str(tmp_path / 'robot'))
    parsed = Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir='')
    assert parsed.tree_joints[0].type == 'continuous' and parsed.tree_joints[0].lower is None
    Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir=str(tmp_path))
    cached = Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir=str(tmp_path))
    for name, value in vars(parsed).items():
        _same(value, getattr(cached, name), name)


def test_a_changed_urdf_is_parsed_again_and_a_broken_one_never_cached(tmp_path):
    with open(ARM) as f:
        text = f.read()
    cache = str(tmp_path / 'cache')
    first = Chain.from_urdf(text, cache_dir=cache)
    changed = text.replace('<limit lower="-2.9"', '<limit lower="-0.5"', 1)
    assert changed != text
    second = Chain.from_urdf(changed, cache_dir=cache)
    assert len(_entries(cache, 'urdf')) == 2
    assert second.lower[0] == -0.5 and first.lower[0] == -2.9
    assert Chain.from_urdf(changed, cache_dir=cache).lower[0] == -0.5
    broken = text.replace('</robot>', '')
    for _ in range(2):
        with pytest.raises(ModelError, match='not well-formed XML'):
            Chain.from_urdf(broken, cache_dir=cache)
    assert len(_entries(cache, 'urdf')) == 2


def test_an_unreadable_entry_is_parsed_again_and_replaced(tmp_path, logged):
    cache = str(tmp_path)
    parsed = Chain.from_urdf(ARM, cache_dir='')
    Chain.from_urdf(ARM, cache_dir=cache)
    (entry,) = _entries(cache, 'urdf')
    with open(entry, 'wb') as f:
        f.write(b'not an npz file')
    log = logged('smcik_ros.model.cache', logging.WARNING)
    again = Chain.from_urdf(ARM, cache_dir=cache)
    assert 'ignoring unreadable model cache file' in log.text
    np.testing.assert_array_equal(again.upper, parsed.upper)
    assert os.path.getsize(entry) > 100      # written again, readable
    log.clear()
    Chain.from_urdf(ARM, cache_dir=cache)
    assert log.text == ''


def _model_fields(model):
    return {k: v for k, v in vars(model).items() if k not in ('chain', 'cache_dir')}


def test_a_cached_collision_model_is_the_computed_model(tmp_path, monkeypatch):
    """Also: a <visual> mesh that is not there (link2's) neither fails nor stops caching."""
    urdf, packages = _mesh_robot(str(tmp_path / 'robot'))
    cache = str(tmp_path / 'cache')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir='')
    computed = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache)
    assert len(_entries(cache, 'collision')) == 1
    assert len(computed.radii) > 10 and 'link1' in computed.link_names

    def no_parse(*args):
        raise AssertionError('the URDF was parsed although its model is in the cache')
    monkeypatch.setattr(collision_model, '_parse', no_parse)
    cached = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache)
    assert cached.cache_dir == cache
    for name, value in _model_fields(computed).items():
        _same(value, getattr(cached, name), name)
    # Another tolerance is another model.
    monkeypatch.undo()
    coarse = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache,
                                      tolerance=0.02)
    assert len(_entries(cache, 'collision')) == 2 and len(coarse.radii) < len(computed.radii)


def test_a_mesh_changed_in_place_is_covered_again(tmp_path):
    urdf, packages = _mesh_robot(str(tmp_path / 'robot'), seed=0)
    cache = str(tmp_path / 'cache')
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir='')
    before = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache)
    _mesh_robot(str(tmp_path / 'robot'), seed=1)            # the same file, another mesh
    after = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache)
    fresh = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir='')
    assert len(_entries(cache, 'collision')) == 2
    for name, value in _model_fields(fresh).items():
        _same(value, getattr(after, name), name)

    def link1(model):
        i = list(model.link_names).index('link1')
        return model.centers[model.link_start[i]:model.link_start[i] + model.link_count[i]]
    assert link1(before).shape != link1(after).shape or \
        not np.array_equal(link1(before), link1(after))


def test_a_missing_mesh_is_no_entry_and_warned_about_at_every_build(tmp_path, logged):
    """A mesh gone since the entry was stored: the entry is not used (the key hashes the
    meshes), the link is left out with its warning, and no entry is stored for that state:
    every later build says it again."""
    urdf, packages = _mesh_robot(str(tmp_path / 'robot'))
    chain = Chain.from_urdf(urdf, 'base_link', 'tool0', cache_dir='')
    cache = str(tmp_path / 'cache')
    whole = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,), cache_dir=cache)
    os.remove(os.path.join(packages, 'meshy_description', 'meshes', 'part.stl'))
    log = logged('smcik_ros.collision', logging.WARNING)
    for _ in range(2):
        model = CollisionModel.from_urdf(chain, urdf, package_paths=(packages,),
                                         cache_dir=cache)
        assert len(model.link_names) < len(whole.link_names)
    said = [m for m in log.messages if 'package://meshy_description/meshes/part.stl' in m]
    assert len(said) == 2 * (len(whole.link_names) - len(model.link_names)), log.text
    assert len(_entries(cache, 'collision')) == 1


def test_a_warm_start_imports_neither_yourdfpy_nor_trimesh(tmp_path):
    """What the node builds at start-up (the chain, the collision guard with its pairs), in a
    fresh interpreter: the first start fills the cache, the second reads it without
    importing the URDF parser or the mesh library (about 1 s of a start)."""
    urdf, packages = _mesh_robot(str(tmp_path / 'robot'))
    code = ('import sys; from smcik_ros.model import Chain; '
            'from smcik_ros.control.collision_guard import CollisionGuard; '
            f'chain = Chain.from_urdf({urdf!r}, "base_link", "tool0"); '
            f'guard, _ = CollisionGuard.from_urdf(chain, {urdf!r}, urdf_path={urdf!r}, '
            f'package_paths=({packages!r},)); '
            'print(len(guard.model.radii), len(guard.constraint.pairs), '
            '",".join(m for m in ("yourdfpy", "trimesh", "scipy.spatial") if m in sys.modules))')
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / 'xdg'))

    def start():
        return subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                              text=True, check=True, timeout=600).stdout.split()
    cold, warm = start(), start()
    assert cold[2:] == ['yourdfpy,trimesh,scipy.spatial']
    assert warm[:2] == cold[:2] and int(warm[0]) > 10
    assert warm[2:] == []
    assert _entries(tmp_path / 'xdg' / 'smcik_ros', 'urdf')
    assert _entries(tmp_path / 'xdg' / 'smcik_ros', 'collision')
