"""Planted contacts stand on their surfaces: the pair (contact link, that obstacle) is exempt.

Pure numpy, no ROS. A ``contact`` (``goals.Contact``: the link keeps its pose) or
``plane_contact`` (``goals.PlaneContact``: a point of the link on a plane) on a foot that
rests on a floor obstacle would otherwise set the collision check against the solver: the
foot's cover reaches into the floor by up to the cover tolerance, so every motion the contact
allows that takes it a fraction of a millimetre deeper is refused (the robot freezes), and
the soft clearance pushes the foot off the floor the contact holds it on.

The surface of a contact is a scene obstacle (the ``obstacles`` topic, the constraint set's
``obstacle`` and ``keep_out_sphere`` entries; not a point cloud, which drops the points on
the robot, the floor under its feet with them) that the contact link's padded cover touches,
within ``SURFACE_MARGIN``, when the two meet: when the contact is set (anchored) while the
obstacle is there, or when the obstacle arrives or changes while the contact holds. From then
on, while both stay, the obstacle does not apply to that link and the links rigid with it
(the foot a sole frame is fixed to); this is written into the scene as the obstacle's
``links`` (``Obstacle.links`` less those links), so the guard, the solvers and every other
reader of the scene see it with no other change. Every other link is checked against the
obstacle as before, and those links against every other obstacle. An obstacle the link comes
to touch later (a foot sliding along its plane into a wall) is not a surface: it is checked,
also when its source publishes it again unchanged. When the contact is removed, or the
obstacle is changed by its source, the exemption ends (a changed obstacle that still touches
a planted link is its surface again).

``PlantedSurfaces.update(scene, model, constraints, state)`` brings the scene up to date and
returns log lines; with nothing changed it compares a few ids (the node calls it every tick).
"""

import dataclasses

import numpy as np

from ..collision.shapes import point_primitive_distance
from ..errors import ModelError
from ..goals import Contact, PlaneContact

__all__ = ['PlantedSurfaces', 'SURFACE_MARGIN', 'NO_LINK']

# [m] a contact link's padded cover this near an obstacle stands on it (the cover reaches up
# to its tolerance, 1 cm, into a floor the foot stands on; a foot resting a few millimetres
# above it still counts).
SURFACE_MARGIN = 0.02
# The ``links`` of an obstacle exempt for every link it applied to (no link has this name).
NO_LINK = '(planted contact surface)'


class PlantedSurfaces:
    """The scene obstacles that planted contacts stand on (see the module doc).

    margin [m]: how near the contact link's padded cover an obstacle is its surface;
    padding [m]: the cover padding of the collision checks. ``exempt``: {(ns, id): frozenset
    of the link names the obstacle does not apply to} (empty sets left out).
    """

    def __init__(self, margin=SURFACE_MARGIN, padding=0.0):
        self.margin, self.padding = float(margin), float(padding)
        self.exempt = {}
        self._given = {}         # {key: the obstacle as its source gave it}
        self._written = {}       # {key: the obstacle put in the scene instead}
        self._judged = {}        # {key: {contact: the links it stands on that obstacle with}}
        self._signature = None

    def update(self, scene, model, constraints, state):
        """Bring ``scene`` (collision.Scene) up to date for the Contacts and PlaneContacts
        among ``constraints`` (anchored ones; their links with geometry in ``model``) at the
        current state: state() -> q (nq,), or None before the first command (nothing is
        judged then); called only when the scene, the contacts or the model changed. Return
        the log lines of the surfaces found or released."""
        planted = tuple(c for c in constraints if isinstance(c, (Contact, PlaneContact))
                        and getattr(c, 'anchored', True))
        signature = (scene.version, id(model), tuple(map(id, planted)))
        if signature == self._signature:
            return []
        q = state()
        if q is None:
            return []
        held = {c: _rigid_links(model, c.link) for c in planted}
        world = []          # the cover's sphere centres at q, computed once when needed
        lines, updates = [], {}
        for key, obstacle in scene.items():
            if scene.source_of(key) == 'pointcloud':
                continue
            if obstacle is not self._written.get(key):      # new, or from its source again
                if not _same(self._given.get(key), obstacle):
                    self._judged[key] = {}
                self._given[key] = obstacle
                self._written.pop(key, None)
            given = self._given[key]
            judged = {c: v for c, v in self._judged[key].items() if c in held}
            for contact in planted:
                if contact not in judged:
                    judged[contact] = self._stands_on(model, world, q, held[contact], given)
            self._judged[key] = judged
            links = frozenset().union(*judged.values())
            old = self.exempt.pop(key, frozenset())
            if links:
                self.exempt[key] = links
            lines += [f'the planted contact on {n} stands on obstacle {key[0]}/{key[1]}: that '
                      'pair is not checked while both stay' for n in sorted(links - old)]
            lines += [f'obstacle {key[0]}/{key[1]} is checked against {n} again (its contact '
                      'or the obstacle changed)' for n in sorted(old - links)]
            in_scene = old if key in self._written else frozenset()
            if links != in_scene:
                wanted = _without(given, links, model.link_names)
                if links:
                    self._written[key] = wanted
                else:
                    self._written.pop(key, None)
                updates.setdefault(scene.source_of(key), []).append(('add', key, wanted))
        present = set(scene.keys())
        for table in (self.exempt, self._given, self._written, self._judged):
            for key in [k for k in table if k not in present]:
                del table[key]
        for source, batch in updates.items():
            scene.apply(batch, source)
        self._signature = (scene.version,) + signature[1:]
        return lines

    def _stands_on(self, model, world, q, links, obstacle):
        """Return the frozenset of ``links`` (names) that ``obstacle`` applies to when their
        padded cover is within the margin of it at q (nq,), else the empty set; ``world``:
        [] or [the (S, 3) sphere centres at q], filled here when first needed."""
        links = [n for n in links if obstacle.links is None or n in obstacle.links]
        if not links:
            return frozenset()
        if not world:
            world.append(model.world_spheres(model.chain.frames(np.asarray(q, float)))[0])
        rows = np.isin(model.sphere_link, [model.link_index(n) for n in links])
        centers, radii = world[0][rows], model.radii[rows]
        kind, rot, trans, size = obstacle.primitives()
        m, s = len(kind), len(centers)
        d = point_primitive_distance(
            np.repeat(centers, m, axis=0), np.tile(kind, s), np.tile(rot, (s, 1, 1)),
            np.tile(trans, (s, 1)), np.tile(size, (s, 1))).reshape(s, m)
        near = float((d - radii[:, None]).min()) - self.padding <= self.margin
        return frozenset(links) if near else frozenset()


def _rigid_links(model, link):
    """Return the links of ``model`` that move with ``link`` (on its body, not swept)."""
    try:
        body = model.chain.link_anchor(link)[0]
    except ModelError:     # a link the chain does not have: nothing to exempt
        return ()
    return tuple(n for n, b in zip(model.link_names, model.link_body)
                 if b == body and n not in model.swept_links)


def _same(a, b):
    """True when obstacles ``a`` (or None) and ``b`` are the same shape at the same place."""
    if a is None or (a.shape, a.size, a.links) != (b.shape, b.size, b.links):
        return False
    same = np.array_equal(a.pose, b.pose)
    return same and (a.centers is None or np.array_equal(a.centers, b.centers))


def _without(obstacle, links, link_names):
    """Return ``obstacle`` applying to its links less ``links`` (itself when none)."""
    if not links:
        return obstacle
    kept = tuple(n for n in (obstacle.links or link_names) if n not in links)
    return dataclasses.replace(obstacle, links=kept or (NO_LINK,))
