"""Self-collision pairs: SRDF parsing, adjacency, the 'always' and 'never' rules."""

import logging
import textwrap

import pytest

from smcik_ros.collision import (CollisionModel, conventional_srdf_path, parse_srdf,
                                 self_collision_pairs)
from smcik_ros.collision.model import link_covers
from smcik_ros.errors import ModelError
from smcik_ros.model import Chain

from collision_helpers import cover_cache_dir, demo_model
from conftest import ARM6_URDF, ARM7_URDF

SRDF = textwrap.dedent('''\
    <?xml version="1.0"?>
    <robot name="smcik_arm">
      <group_state name="home" group="arm"><joint name="joint4" value="-1.57"/></group_state>
      <disable_collisions link1="base_link" link2="link2" reason="Never"/>
      <disable_collisions link1="link3" link2="tool0"/>
      <disable_collisions link1="gripper_finger" link2="link5" reason="Never"/>
      <disable_collisions link1="link7" link2="ghost" reason="Adjacent"/>
    </robot>''')


def test_parse_srdf_from_text_and_file(tmp_path):
    srdf = parse_srdf(SRDF)
    assert srdf.robot_name == 'smcik_arm'
    assert ('base_link', 'link2', 'Never') in srdf.disabled
    assert ('link3', 'tool0', '') in srdf.disabled
    assert srdf.group_states == {'home': {'joint4': -1.57}}
    path = tmp_path / 'x.srdf'
    path.write_text(SRDF)
    assert parse_srdf(str(path)).disabled == srdf.disabled


@pytest.mark.parametrize('text,match', [
    ('<robot><disable_collisions link1="a"/></robot>', 'needs link1 and link2'),
    ('<robot><unclosed></robot>', 'not well-formed XML'),
    ('<srdf/>', r'root element is <srdf>'),
    ('/no/such/file.srdf', 'does not exist'),
])
def test_malformed_srdf_is_a_model_error(text, match):
    with pytest.raises(ModelError, match=match):
        parse_srdf(text)


def test_srdf_links_missing_from_the_urdf_give_one_warning(logged):
    chain, model = demo_model(ARM7_URDF)
    log = logged('smcik_ros.collision', logging.WARNING)
    pairs = self_collision_pairs(model, SRDF, always_samples=0)
    assert len(pairs.warnings) == 1
    assert 'ghost' in pairs.warnings[0] and 'gripper_finger' in pairs.warnings[0]
    assert sum('ghost' in m for m in log.messages) == 1
    assert pairs.reason('base_link', 'link2') == 'srdf (Never)'
    assert pairs.reason('tool0', 'link3') == 'srdf (no reason given)'
    assert pairs.reason('link7', 'link5') is None


def test_demo_arm_pairs_follow_adjacency_and_its_srdf():
    chain, model = demo_model(ARM7_URDF)
    srdf_path = conventional_srdf_path(ARM7_URDF)
    pairs = self_collision_pairs(model, srdf_path)
    srdf = parse_srdf(srdf_path)
    for a, b, _ in srdf.disabled:
        assert pairs.reason(a, b) is not None, (a, b)
    # Fixed links are one body with their parent: link6/flange is adjacent, as is flange/tool0.
    assert pairs.reason('link6', 'flange') in ('adjacent', 'srdf (Never)')
    assert pairs.reason('link6', 'tool0') is not None
    enabled = set(pairs.names)
    assert ('link5', 'link7') in enabled and ('link3', 'link7') in enabled
    assert ('base_link', 'link4') in enabled and ('link1', 'link3') in enabled
    # Everything not disabled is enabled, and no pair is both.
    names = model.link_names
    total = len(names) * (len(names) - 1) // 2
    assert len(enabled) + len(pairs.disabled) == total
    assert not any(pairs.reason(a, b) for a, b in enabled)


def test_arm6_default_pair_is_also_found_by_the_always_rule():
    chain, model = demo_model(ARM6_URDF)
    pairs = self_collision_pairs(model, None, always_samples=100)
    assert pairs.reason('base_link', 'upper_arm_link').startswith('always')
    with_srdf = self_collision_pairs(model, conventional_srdf_path(ARM6_URDF))
    assert with_srdf.reason('base_link', 'upper_arm_link') == 'srdf (Default)'


def _turntable_urdf(limit):
    """Two joints about one z axis; link2's 0.2 m sphere sits on the base's 0.2 m sphere when
    theta = j1 + j2 = 0, and they part only for |theta| > 2 asin(0.405 / 0.6) = 1.48 rad."""
    return textwrap.dedent(f'''\
        <robot name="turntable">
          <link name="base_link"><collision><origin xyz="0.3 0 0"/>
            <geometry><sphere radius="0.2"/></geometry></collision></link>
          <joint name="j1" type="revolute"><parent link="base_link"/><child link="link1"/>
            <origin xyz="0 0 0.5"/><axis xyz="0 0 1"/>
            <limit lower="{-limit}" upper="{limit}" effort="1" velocity="1"/></joint>
          <link name="link1"><collision><origin xyz="0 0 0.05"/>
            <geometry><sphere radius="0.02"/></geometry></collision></link>
          <joint name="j2" type="revolute"><parent link="link1"/><child link="link2"/>
            <axis xyz="0 0 1"/>
            <limit lower="{-limit}" upper="{limit}" effort="1" velocity="1"/></joint>
          <link name="link2"><collision><origin xyz="0.3 0 -0.5"/>
            <geometry><sphere radius="0.2"/></geometry></collision></link>
        </robot>''')


def _turntable(limit):
    urdf = _turntable_urdf(limit)
    chain = Chain.from_urdf(urdf, 'base_link', 'link2')
    return chain, CollisionModel.from_urdf(chain, urdf, cache_dir=cover_cache_dir())


def test_always_rule_disables_pairs_that_overlap_in_every_configuration():
    _, model = _turntable(0.3)               # |theta| <= 0.6: always overlapping
    pairs = self_collision_pairs(model, always_samples=50, seed=1)
    assert pairs.reason('base_link', 'link2').startswith('always')
    assert pairs.names == []
    _, model = _turntable(3.0)               # free for |theta| > 1.48: checked
    pairs = self_collision_pairs(model, always_samples=50, seed=1)
    assert pairs.reason('base_link', 'link2') is None


def test_a_coarse_model_keeps_its_always_overlapping_pairs_checked():
    """On coarse covers (bounding boxes: they overlap where the fine covers need not) the
    'always' rule is off: a pair disabled 'always' on the fine covers stays checked, the
    SRDF still applies, and the coarse pairs hold every fine one (more are checked, never
    fewer). The arm6 SRDF's pair disabled as 'Default' is still off. Once both links of a
    pair have their fine covers (the chain's links come first on a first start) the rule
    judges that pair, while the pairs of links still coarse stay checked."""
    chain, model = demo_model(ARM6_URDF)
    coarse = CollisionModel.from_urdf(chain, ARM6_URDF, cache_dir='', coarse=True)
    assert coarse.coarse and coarse.link_names == model.link_names
    fine = self_collision_pairs(model, None, always_samples=100)
    assert fine.reason('base_link', 'upper_arm_link').startswith('always')
    pairs = self_collision_pairs(coarse, None, always_samples=100)
    assert pairs.reason('base_link', 'upper_arm_link') is None
    assert not [r for r in pairs.disabled.values() if r.startswith('always')]
    assert set(fine.names) < set(pairs.names)
    both = ['base_link', 'upper_arm_link']
    partly = coarse.fine(link_covers(*coarse.fine_inputs(both))[0])
    assert partly.coarse and not set(both) & set(partly.coarse_links)
    mixed = self_collision_pairs(partly, None, always_samples=100)
    assert mixed.reason('base_link', 'upper_arm_link').startswith('always')
    assert all(not set(pair) - set(both) for pair, reason in mixed.disabled.items()
               if reason.startswith('always'))
    srdf = conventional_srdf_path(ARM6_URDF)
    assert self_collision_pairs(coarse, parse_srdf(srdf)).reason(
        'base_link', 'upper_arm_link') == 'srdf (Default)'
    assert parse_srdf(parse_srdf(srdf)) == parse_srdf(srdf)


def test_known_free_configurations_keep_a_pair_checked():
    """Free only in the corners |j1 + j2| > 1.48 of [-0.75, 0.75]^2 (0.02 % of the square):
    random samples all overlap, but a given free state (an SRDF group state, say) proves the
    overlap is not an artefact."""
    chain, model = _turntable(0.75)
    pairs = self_collision_pairs(model, always_samples=50, seed=1)
    assert pairs.reason('base_link', 'link2').startswith('always')
    pairs = self_collision_pairs(model, always_samples=50, seed=1,
                                 configurations=[[0.75, 0.75]])
    assert pairs.reason('base_link', 'link2') is None
    srdf = ('<robot name="turntable"><group_state name="open" group="g">'
            '<joint name="j1" value="0.75"/><joint name="j2" value="0.75"/></group_state>'
            '</robot>')
    pairs = self_collision_pairs(model, srdf, always_samples=50, seed=1)
    assert pairs.reason('base_link', 'link2') is None


def test_never_rule_is_statistical_reproducible_and_has_a_margin():
    chain, model = demo_model(ARM7_URDF)
    a = self_collision_pairs(model, None, always_samples=0, never_samples=400, seed=3,
                             never_margin=0.05)
    b = self_collision_pairs(model, None, always_samples=0, never_samples=400, seed=3,
                             never_margin=0.05)
    assert a.names == b.names and a.disabled == b.disabled
    never = {k for k, v in a.disabled.items() if v.startswith('never')}
    assert never, 'some pairs never come within 5 cm in 400 samples'
    assert all('statistical' in a.disabled[k] for k in never)
    # Pairs that do collide in the sample are never disabled by it.
    assert a.reason('link1', 'link5') is None and a.reason('base_link', 'link6') is None
    looser = self_collision_pairs(model, None, always_samples=0, never_samples=400, seed=3,
                                  never_margin=0.0)
    assert len(looser.names) <= len(a.names)
