"""Goals for the node tests on the demo arm that the node can reach exactly.

The node runs with self-collision on (the demo arm's covers and its SRDF): a goal whose only
configurations are within the collision padding is, rightly, never reached; one within the
soft clearance is reached a few mm short. ``free_configuration_near`` draws configurations
clear of both, judged by the node's own collision constraint.
"""

import functools
from pathlib import Path

import numpy as np

from collision_helpers import demo_model
from smcik_ros.collision import CollisionConstraint, conventional_srdf_path, self_collision_pairs

URDF = Path(__file__).resolve().parent.parent / 'urdf' / 'smcik_arm.urdf'


@functools.lru_cache(maxsize=None)
def demo_self_collision(wrist=True):
    """The demo arm's collision constraint as the node builds it by default (its covers, the
    SRDF beside the URDF, self-collision on, no obstacles); without ``wrist``, less
    link5/link7, a pair that is nearly always within the soft clearance (about 8.5 mm padded,
    by design) and now and then within the padding."""
    _, model = demo_model(str(URDF))
    srdf = Path(conventional_srdf_path(str(URDF))).read_text()
    if not wrist:
        srdf = srdf.replace('</robot>', '<disable_collisions link1="link5" link2="link7" '
                            'reason="Test"/></robot>')
    return CollisionConstraint(model, pairs=self_collision_pairs(model, srdf))


def free_configuration_near(chain, q, rng, spread=0.5, margin=0.05, clear=0.02,
                            wrist_clear=0.004):
    """Return a demo-arm configuration within ``spread`` [rad] of ``q`` per joint, ``margin``
    (share of the range) inside the limits, ``clear`` [m] of self-collision (beyond the
    node's soft clearance) and link5/link7 ``wrist_clear`` [m] beyond the padding (0.4 % of
    uniform draws put that pair within it)."""
    span = chain.upper - chain.lower
    others, every = demo_self_collision(wrist=False), demo_self_collision(wrist=True)
    for _ in range(500):
        q_goal = np.clip(q + rng.uniform(-spread, spread, chain.n),
                         chain.lower + margin * span, chain.upper - margin * span)
        if (others.status(q_goal)['min_distance'] >= clear
                and every.status(q_goal)['min_distance'] >= wrist_clear):
            return q_goal
    raise AssertionError(f'no configuration {clear} m clear of self-collision near {q}')
