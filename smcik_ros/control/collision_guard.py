"""Collision avoidance in the command stream, without ROS: the model, the scene, the validator.

Links resting in contact at the first command (where covers, not meshes, overlap) get finer
covers in the background (``start_contact_refinement``).

With ``cover_wait`` [s], a first start whose covers are not in the disk cache waits for them
no longer than that: it starts with coarse covers (supersets of the fine ones, every
non-adjacent pair the SRDF leaves checked), refusing more than its settings ask, never less,
until ``start_fine_covers`` has computed the fine ones and ``poll`` swapped them in.
"""

import dataclasses
import functools
import math
import os

import numpy as np

from ..collision import (DEFAULT_CLEARANCE, DEFAULT_PADDING, DEFAULT_TOLERANCE, MIN_TOLERANCE,
                         CollisionConstraint, CollisionModel, Scene, conventional_srdf_path,
                         parse_srdf, pointcloud_obstacle, self_collision_pairs)
from ..collision.constraint import CONTACT_RELEASE
from ..errors import GoalError, ModelError, ParameterError
from .cover_updates import (BackgroundUpdates, coarse_note, contact_tolerances,
                            default_pairs, finer_covers, finer_steps, full_covers, rebased,
                            settle, srdf_pairs, start_covers_child)
from .free_motion import FreeMotionProofs, motion_key

__all__ = ['CollisionSettings', 'CollisionGuard', 'choose_srdf', 'reach_bound', 'SOURCES']

# Scene sources: who may replace or clear which obstacles (a DELETEALL clears its own).
SOURCES = ('obstacles', 'keep_out_markers', 'constraints', 'pointcloud')
# [m] the cover tolerance of links resting in contact at the first command. Unitree Z1
# folded at its zero pose: its 1 cm covers overlap in four pairs and node_latency reached 2-4
# of 9 goals near the start; with those five links at 4 mm two pairs remain, 8-9 of 9.
DEFAULT_CONTACT_TOLERANCE = 0.004


@dataclasses.dataclass(frozen=True)
class CollisionSettings:
    """Settings of the node's collision avoidance (lengths in m).

    self_collision: check the robot against itself (ignored without <collision> geometry);
    padding: the smallest clearance accepted (also the sub-step bound of the motion check);
    clearance: the soft margin the solvers keep beyond the padding (0: off);
    voxel_size: edge of the point-cloud voxels (one sphere each);
    robot_margin: point-cloud points this close to the robot's padded cover are the robot;
    coarse_resolution: sub-step spacing of the motion check's first, coarse pass (0: off):
    a motion whose coarse sub-steps (both ends included) are all at least
    ``coarse_resolution - padding`` clear is free without the fine pass (no cover point is
    farther than that from one of them); otherwise the fine check decides;
    cover_tolerance: the largest excess of the meshes' sphere covers beyond the real geometry
    (smaller: tighter covers, more spheres, a slower first start; covers are cached on disk);
    contact_tolerance: the finer tolerance the covers of links resting in contact at the
    first command are computed again at (``start_contact_refinement``; 0: off).
    """

    self_collision: bool = True
    padding: float = DEFAULT_PADDING
    clearance: float = DEFAULT_CLEARANCE
    voxel_size: float = 0.03
    robot_margin: float = 0.02
    coarse_resolution: float = 0.01
    cover_tolerance: float = DEFAULT_TOLERANCE
    contact_tolerance: float = DEFAULT_CONTACT_TOLERANCE

    def __post_init__(self):
        object.__setattr__(self, 'self_collision', bool(self.self_collision))
        for name, low, high in (('padding', 0.0, 0.1), ('clearance', 0.0, 1.0),
                                ('voxel_size', 1e-3, 1.0), ('robot_margin', 0.0, 1.0),
                                ('coarse_resolution', 0.0, 0.1),
                                ('cover_tolerance', MIN_TOLERANCE, 0.1),
                                ('contact_tolerance', MIN_TOLERANCE, 0.1)):
            value = getattr(self, name)
            off = ' or 0 (off)' if name == 'contact_tolerance' else ''
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f'collision {name} must be a number [m]; got '
                                     f'{value!r}') from None
            if not (math.isfinite(value) and low <= value <= high or off and value == 0.0):
                raise ParameterError(f'collision {name} must be in [{low:g}, {high:g}] m{off}; '
                                     f'got {value}')
            object.__setattr__(self, name, value)

    def replace(self, **changes):
        """Return a copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)


def _known(source):
    """Return ``source`` when it is one of SOURCES; GoalError otherwise."""
    if source not in SOURCES:
        raise GoalError(f'unknown obstacle source {source!r}; expected one of '
                        f'{", ".join(SOURCES)}')
    return source


def _next_step(guard, q, names, tolerance, finer, first, wanted, finish):
    """Return what runs once a contact refinement step of ``names`` at q and ``tolerance`` is
    applied: the next of the ``finer`` tolerances while ``wanted()`` (None: always), else
    ``finish()`` (``CollisionGuard.start_contact_refinement``). Not for a goal reached or
    replaced meanwhile: on Talos the 4 mm covers of a swept gripper, 24 s for a goal
    already reached, held up the 6 mm ones of the next goal past its 10 s."""
    def applied():
        guard.refined_at.update(dict.fromkeys(names, tolerance))
        if finer and (wanted is None or wanted()):
            guard.start_contact_refinement(q, names, finer[0], first, wanted=wanted,
                                           finish=finish)
        else:
            finish()
    return applied


def _first_command(guard, q, contacts, skip, finish):
    """Return (contacts, finish) of the guard's first-command refinement at q: the pairs in
    contact (padded distance < 0) first, with those only near (within
    ``CONTACT_RELEASE``) next (``finish`` refines them, then runs the one given), when
    there are both (none of ``skip``); and start the check of the pairs in contact whose
    URDF shapes intersect (``default_pairs``) unless ``skip`` (a later step)."""
    model = guard.model
    touching = {n for p, d in contacts if d < 0.0 for n in p if model.has_link(n)}
    near = {n for p, d in contacts if d >= 0.0 for n in p if model.has_link(n)}
    touching, near = touching - set(skip), near - touching - set(skip)
    pairs = [p for p, d in contacts if d < 0.0 and all(model.has_link(n) for n in p)]
    if pairs and not skip and guard.pairs is not None:
        guard.updates.start('smcik-default-pairs', default_pairs(
            model, q, pairs, guard.srdf_parsed, guard.settings, guard.srdf,
            guard._build_constraint, guard.summary,
            lambda srdf: setattr(guard, 'srdf_parsed', srdf)), lambda exc: (
            f'the pairs in contact at the first command were not checked for '
            f'intersecting URDF shapes ({type(exc).__name__}: {exc})'))
    swept = sorted(touching & set(model.coarse_links))
    if swept and not model.coarse_chain_links:
        # A link swept over off-chain joints still on its coarse cover, in contact: its fine
        # cover first, then this refinement (R1's head, 12 s under load, came after its hips,
        # only near, 17 s: the right arm, held against the coarse head, missed two goals).
        return [], functools.partial(guard.start_fine_covers, swept, functools.partial(
            guard.start_contact_refinement, q, first=True, skip=(*skip, *swept),
            finish=finish))
    if touching and near:
        return [(p, d) for p, d in contacts if d < 0.0], functools.partial(
            guard.start_contact_refinement, q, first=True, skip=(*skip, *touching),
            finish=finish)
    return contacts, finish


def choose_srdf(semantic='', srdf_path='', urdf_path=None, resolve=None):
    """Return (source, description, explicit) of the SRDF to use, or (None, reason, False).

    Order: the XML text ``semantic`` (robot_description_semantic), the file ``srdf_path``
    (through ``resolve(path)`` when given, e.g. relative to the package), the SRDF found
    beside ``urdf_path`` by convention (``conventional_srdf_path``). ``explicit`` is True for
    the first two (a broken one is an error; a broken conventional file is only warned about).
    """
    if semantic and semantic.strip():
        return semantic, 'the robot_description_semantic parameter', True
    if srdf_path and srdf_path.strip():
        path = resolve(srdf_path) if resolve is not None else srdf_path
        return os.fspath(path), f'srdf_path {os.fspath(path)!r}', True
    found = conventional_srdf_path(urdf_path) if urdf_path else None
    if found:
        return found, f'{found!r} (found beside the URDF)', False
    return None, 'no SRDF (none given, none beside the URDF)', False


def reach_bound(model):
    """Return an upper bound [m] of how far any cover point can be from the base origin.

    Per body: the joint offsets down from the base (plus prismatic travel) and the cover's
    reach from the body origin; spheres on the base: their own distance.
    """
    chain = model.chain
    if not len(model.radii):
        return 0.0
    travel = np.zeros(chain.num_bodies)
    for b in chain.prismatic_bodies:
        qi = chain.body_q[b]
        travel[b] = max(abs(chain.lower[qi]), abs(chain.upper[qi]))
    best = 0.0
    for b in np.unique(model.sphere_body):
        sel = model.sphere_body == b
        extent = float(np.max(np.linalg.norm(model.centers[sel], axis=1) + model.radii[sel]))
        path, k = 0.0, int(b)
        while k >= 0:
            path += float(np.linalg.norm(chain.body_offset[k])) + travel[k]
            k = chain.body_parent[k]
        best = max(best, path + extent)
    return best


class CollisionGuard:
    """The node's collision avoidance over a ``CollisionModel`` (see the module doc).

    model: the CollisionModel; pairs: its ``SelfCollisionPairs`` (None: none, e.g. a
    skeleton); settings: CollisionSettings; scene: a Scene (default: a new one);
    srdf: a description of where the pairs came from (for the log and the status).
    ``proofs``: the motions the validator proves free without a query (``free_motion``).
    """

    def __init__(self, model, pairs=None, settings=None, scene=None, srdf='no SRDF'):
        self.model = model
        self.settings = settings if settings is not None else CollisionSettings()
        self.scene = scene if scene is not None else Scene()
        self.pairs = pairs
        self.srdf = srdf
        self.has_geometry = bool(model.has_geometry and model.source == 'urdf')
        self.constraint = self._build_constraint(model, pairs, self.settings)
        self.reach = reach_bound(model)
        self.reason = ''
        self.last_check = None
        self.refusals = 0
        self.proofs = FreeMotionProofs()
        self._report = (None, None)
        self._monitored = None       # (constraint, its twin for status and markers)
        # The background updates (``cover_updates.BackgroundUpdates``); ``updates.waiting``:
        # a finished one waits for ``poll``.
        self.updates = BackgroundUpdates()
        self.srdf_parsed = None      # the Srdf of the pairs (None: none): the pairs again
        self.refined_at = {}         # {link: the tolerance of its applied finer covers [m]}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(cls, chain, urdf, urdf_path=None, package_paths=(), srdf=None,
                  srdf_description=None, settings=None, cache_dir=None, explicit_srdf=True,
                  cover_wait=None):
        """Return (guard, notes): the model from the URDF (text or path), its pairs.

        srdf: an SRDF path or XML text (or None); explicit_srdf: a broken SRDF is an error
        (else: noted and ignored). cover_wait [s]: covers not in the disk cache are computed
        in the background (``start_fine_covers``), waited for at most that long, and the
        guard starts with coarse ones when they take longer (None: computed here, however
        long). notes: (level, text) lines for the log (the model's and pairs' own warnings go
        to the 'smcik_ros.collision' logger). Raises ModelError for an unreadable URDF or a
        broken explicit SRDF.
        """
        settings = settings if settings is not None else CollisionSettings()
        notes = []
        model = CollisionModel.from_urdf(chain, urdf, package_paths=tuple(package_paths),
                                         urdf_path=urdf_path, cache_dir=cache_dir,
                                         tolerance=settings.cover_tolerance,
                                         coarse=cover_wait is not None)
        if not model.has_geometry:
            notes.append(('info', 'the URDF has no <collision> geometry: self_collision is '
                          'ignored; obstacles are checked against a thin skeleton of the '
                          'chain (1 cm around the segments between link origins)'))
            return cls(CollisionModel.skeleton(chain), None, settings,
                       srdf='no <collision> geometry'), notes
        if cover_wait is not None:       # the node: its covers' jobs come soon
            start_covers_child()
        description = srdf_description or ('no SRDF' if srdf is None else str(srdf))
        try:
            parsed = None if srdf is None else parse_srdf(srdf)
            pairs = self_collision_pairs(model, parsed, padding=settings.padding)
        except ModelError as exc:
            if explicit_srdf:
                raise
            notes.append(('warn', f'{description}: {exc}: ignored, every non-adjacent pair '
                          'is checked'))
            description = f'no SRDF ({description} unreadable)'
            parsed, pairs = None, self_collision_pairs(model, None, padding=settings.padding)
        guard = cls(model, pairs, settings, srdf=description)
        guard.srdf_parsed = parsed
        if guard.start_fine_covers():
            notes += settle(guard, cover_wait)
            if guard.model.coarse:
                notes.append(('warn', coarse_note(guard.model, cover_wait)))
        notes.append(('info', guard.summary()))
        return guard, notes

    def _build_constraint(self, model, pairs, settings):
        on = settings.self_collision and self.has_geometry and pairs is not None
        return CollisionConstraint(model, self.scene, self_collision=on,
                                   pairs=pairs if on else None, padding=settings.padding,
                                   clearance=settings.clearance)

    @property
    def self_collision(self):
        """True when self-collision is checked (the setting, and the URDF has geometry)."""
        return bool(self.constraint.self_collision)

    def summary(self):
        """Return one line: spheres, links, pairs and where they came from."""
        model = self.model
        pairs = len(self.constraint.pairs)
        what = (f'{pairs} self-collision pairs checked' if self.self_collision
                else 'self-collision off')
        source = f'{model.source}, coarse covers' if model.coarse else model.source
        return (f'collision model: {len(model.radii)} spheres on {len(model.link_names)} links '
                f'({source}), {what} (SRDF: {self.srdf}), padding '
                f'{self.settings.padding:g} m, clearance {self.settings.clearance:g} m')

    # ------------------------------------------------------------------ settings at runtime
    def set_self_collision(self, on):
        """Switch self-collision on or off; returns the new constraint (the caller hands it to
        the loop). Raises ParameterError when on and the URDF has no collision geometry."""
        if on and not self.has_geometry:
            raise ParameterError('self_collision: the URDF has no <collision> geometry, so the '
                                 'robot cannot be checked against itself')
        return self.update_settings(self_collision=bool(on))

    def update_settings(self, **changes):
        """Change settings at runtime (``clearance``, ``self_collision``, ``voxel_size``,
        ``robot_margin``); returns the constraint (the caller hands it to the loop), rebuilt
        when a setting it holds changed."""
        self.settings = self.settings.replace(**changes)
        if changes.keys() & {'clearance', 'self_collision'}:
            self.constraint = self._build_constraint(self.model, self.pairs, self.settings)
        return self.constraint

    # ------------------------------------------------------------------ updates at runtime
    def start_srdf_update(self, srdf, description, label=None):
        """Recompute the self-collision pairs for ``srdf`` (path, XML, a parsed ``Srdf`` or
        None) in a thread.

        The SRDF is parsed here (ModelError when malformed, nothing changes); the pairs (and
        the new constraint's pair tables) are computed in the background; ``poll`` swaps them
        in (logged after ``label``, default 'SRDF from ... applied'). Returns False (nothing
        to do) when the URDF has no geometry.
        """
        if not self.has_geometry:
            return False
        parsed = None if srdf is None else parse_srdf(srdf)
        self.srdf_parsed = parsed
        work = srdf_pairs(self.model, parsed, self.settings, description,
                          self._build_constraint, self.summary, label)
        self.updates.start('smcik-srdf-pairs', work, lambda exc: (
            f'SRDF from {description} not applied ({type(exc).__name__}: {exc}); keeping '
            f'{len(self.constraint.pairs)} pairs'))
        return True

    def start_fine_covers(self, links=None, then=None):
        """Compute the next fine covers of a coarse model in a thread (``full_covers``: the
        chain's links, then those swept over off-chain joints: the light ones together, then
        the heavy ones, alike ones together, ``CollisionModel.next_fine_links``, each job
        starting the next);
        ``poll`` swaps them in. After each job the pairs are computed again (the 'always'
        rule judges only pairs of two links with fine covers: wrist parts that sit close by
        design). After the chain's links, call again for the swept ones
        (``start_contact_refinement`` does, after its last step: the refinement the chain's
        fine covers start goes first). ``links``: just those (swept links in contact at the
        first command), and ``then()`` after them in place of the next swept ones; it runs at
        once when they cannot start.
        Returns False (nothing to do) when the model is not coarse or its covers are being
        computed."""
        if not self.model.coarse or self.updates.busy('smcik-fine-covers'):
            if then is not None:
                then()
            return False
        swept = not self.model.coarse_chain_links

        def after():
            self.start_srdf_update(self.srdf_parsed, self.srdf,
                                   'self-collision pairs of the fine covers computed')
            if then is not None:
                then()
            elif swept:              # the next swept links, if any
                self.start_fine_covers()
        work = full_covers(self.model, self.pairs, self.settings, self._build_constraint, after,
                           links)
        self.updates.start('smcik-fine-covers', work, lambda exc: (
            f'the fine covers were not computed ({type(exc).__name__}: {exc}); the coarse '
            'covers stay (the collision guard stays more conservative than its settings)'),
            covers=True)
        return True

    def start_contact_refinement(self, q, links=None, tolerance=None, first=True, skip=(),
                                 wanted=None, finish=None):
        """Compute again, in a thread, the covers of the links that rest in contact at q (nq,)
        or closer than ``CONTACT_RELEASE`` to another part (none of ``skip``) at a
        finer tolerance (``finer_covers``, ``CollisionModel.refined``); ``poll`` swaps the
        model and its constraint in (the same pairs, settings and scene), then starts the
        next step: ``contact_tolerances`` (60 % of the cover tolerance, then
        ``settings.contact_tolerance``), each for the links of the pairs still in contact
        (at the first command) or still within ``CONTACT_RELEASE`` of another (a blocked
        goal) (``links``, ``tolerance``: that next step; a step not applied or failed ends
        them, and so does ``wanted()`` False when the step is due: the goal that was blocked
        was reached or replaced meanwhile). After the last step (or at once when there is
        nothing to refine) ``finish()`` runs (None: the fine covers of the links still
        coarse, ``start_fine_covers``: the swept ones).

        At the first command (``first``; else: a goal blocked there) the pairs in contact
        whose URDF shapes themselves intersect there, at most two joints apart, are disabled
        in the background too (``default_pairs``: MoveIt's "Default" rule). The pairs only
        near at the first command are refined there too, not when a goal first meets them:
        TIAGo dual's arms rest 4.5 mm from its torso, and the first goal for an arm waited
        7-9 s at the margin for the covers a blocked goal asked for. They come after the
        links of the pairs in contact, which block every motion that deepens them (H2's
        shoulder resting on its torso waited 16 s for the pelvis, only near, in the same job).

        Where covers, not meshes, overlap (a folded start pose, a base on its table), goals
        near the start can be out of reach, and where they only nearly touch, an arm blocked
        there gets no detour (Reach Bravo 7: link1 / link3 are 0.3 mm apart at its SRDF's
        standing pose with 1 cm covers, 8.5 mm with 4 mm ones); finer covers of just those
        links take the overlap away without the cost of fine covers everywhere. They are
        swapped in only when they release a pair in contact or make one ``CONTACT_GAIN``
        shallower (or, near, farther). Returns the names of the links being refined ([]: no
        contact, no geometry, off, those covers are that fine already, or they are coarse:
        the fine covers are coming).
        """
        steps = contact_tolerances(self.settings)
        finish = finish or self.start_fine_covers
        if not (self.has_geometry and steps[-1] > 0.0):
            finish()
            return []
        q = np.array(q, dtype=float)
        model = self.model
        if links is None:
            contacts = self.constraint.contacts(q, within=CONTACT_RELEASE)
            tolerance = steps[0]
            if first:
                contacts, finish = _first_command(self, q, contacts, skip, finish)
        else:
            # The next step: at the first command for the pairs still in contact (Talos:
            # its six resting links at 6 mm are apart, and 4 mm would take them from 1275 to
            # 5136 spheres, every query of every tick about 5x dearer), for a blocked goal
            # for those still within CONTACT_RELEASE (what blocks it).
            contacts = [(pair, d) for pair, d in self.constraint.contacts(
                q, within=CONTACT_RELEASE) if set(pair) & set(links)
                and (d < 0.0 or not first)]
        # A pair with a coarse cover waits for its fine one (it may free the pair).
        contacts = [(pair, d) for pair, d in contacts if not set(pair) & set(model.coarse_links)]
        names = [n for pair, _ in contacts for n in pair if model.has_link(n)]
        names = [n for n in dict.fromkeys(names) if (links is None or n in links)
                 and n not in model.coarse_links and n not in skip]
        if links is None and not first:
            # A blocked goal starts at the first step finer than the covers applied (H2: its
            # shoulder refined to 6 mm at the first command, a goal blocked at that pair got
            # no 4 mm step).
            tolerance = max(finer_steps(self.settings, self.refined_at, names),
                            default=tolerance)
        names = [n for n in names if self.refined_at.get(n, np.inf) > tolerance
                 and model.link_excess[model.link_index(n)] > tolerance]
        if not names:
            finish()      # the links still coarse, if any, come next
            return []
        applied = _next_step(self, q, names, tolerance, [t for t in steps if t < tolerance],
                             first, wanted, finish)
        work = finer_covers(model, names, q, contacts, self.pairs, self.settings,
                            self._build_constraint, tolerance, applied)
        self.updates.start('smcik-contact-covers', work, lambda exc: (
            f'the finer covers of {", ".join(names)} were not computed '
            f'({type(exc).__name__}: {exc}); keeping the covers at tolerance '
            f'{self.settings.cover_tolerance:g} m'), covers=True, then=finish)
        return names

    def wait_for_update(self, timeout=None):
        """Wait until the background updates have finished computing, at most ``timeout``
        [s]; return True when none is running."""
        self.updates.wait(timeout)
        return not self.updates.running

    @property
    def updating(self):
        """True while a background update is being computed or waits for ``poll``."""
        return self.updates.running or self.updates.waiting

    def poll(self):
        """Apply the next update computed in the background (one per call, in the order they
        finished); return (level, text, changed), or None when none is waiting.

        changed: True when ``constraint`` is a new object (hand it to the control loop).
        An update computed on a model or pairs that another update has replaced since (or
        under other settings) is built again on top of them in the background (``rebased``:
        seconds on a big model, never in the control tick) and applied from there."""
        result = self.updates.take()
        if result is None:
            return None
        if 'constraint' not in result:     # failed, or computed and nothing to change
            if 'then' in result:
                result['then']()
            if 'error' in result:
                return ('error', result['error'], False)
            return ('info', result['text'](), False)
        model = self.model
        if 'model' in result:
            model = result['model'] if result['from'] is self.model else None
        pairs = result['pairs'] if 'pairs' in result else self.pairs
        s, constraint = self.settings, result['constraint']
        base_model, base_pairs = result['base']
        if not (base_model is model and base_pairs is pairs and (
                constraint.clearance, constraint.self_collision) == (
                s.clearance, s.self_collision and pairs is not None)):
            def work():           # on what the guard has when the thread runs
                return rebased(result, self.model, self.pairs, self.settings,
                               self._build_constraint)
            self.updates.start('smcik-rebuild', work, lambda exc: (
                f'an update of the collision model was lost ({type(exc).__name__}: {exc}); '
                'the model stays as it is'))
            return None
        if model is not self.model:
            self.model, self.reach = model, reach_bound(model)
        if 'pairs' in result:
            self.pairs, self.srdf = result['pairs'], result['srdf']
        self.constraint = constraint
        if 'then' in result:
            result['then']()
        return ('info', result['text'](), True)

    # ------------------------------------------------------------------ the validator
    def __call__(self, q_from, q_to):
        """Return True when the straight motion q_from -> q_to (nq,) is free (see module):
        proved free without a query (``proofs``: near the anchor, the motion found free
        last, the coarse pass), else by ``CollisionConstraint.check_motion``."""
        q_from = np.asarray(q_from, dtype=float)
        q_to = np.asarray(q_to, dtype=float)
        constraint, proofs = self.constraint, self.proofs
        key = motion_key(constraint, self.scene)
        if proofs.near_anchor(constraint, key, q_from, q_to):
            self.last_check = {'cached': True}
            return True
        motion = (key, q_from.tobytes(), q_to.tobytes())
        if motion == proofs.free_motion:     # a pure function of these: the same verdict
            self.last_check = {'repeated': True}
            return True
        clear = proofs.coarse_pass(constraint, key, q_from, q_to,
                                   self.settings.coarse_resolution)
        if clear:
            self.last_check = {'coarse': True}
            return True
        ok, info = constraint.check_motion(q_from, q_to)
        self.last_check = info
        if ok:
            proofs.free_motion = motion
        if ok and clear is None:      # a short motion (no coarse pass): settling or held
            proofs.anchor(constraint, key, q_to)
        if not ok:
            self.refusals += 1
            pair = info.get('pair')
            where = ' / '.join(pair) if pair else 'unknown pair'
            self.reason = (f'the motion would collide ({where}, {1e3 * info["distance"]:.1f} mm '
                           f'padded distance, {100 * info["first_bad"]:.0f} % of the way)')
        return ok

    def check_many(self, q_from, q_tos):
        """Return (K,) bool: whether each motion q_from -> q_tos[k] is free (one batch)."""
        return self.constraint.check_motions(q_from, q_tos)

    # ------------------------------------------------------------------ the scene
    def apply(self, updates, source):
        """Apply scene updates from ``source`` (see Scene.apply); GoalError keeps the scene."""
        return self.scene.apply(updates, _known(source))

    def replace(self, obstacles, source):
        """Replace everything ``source`` added by {(ns, id): Obstacle}."""
        self.scene.replace_source(obstacles, _known(source))

    def count(self, source=None):
        """Return how many obstacles (of ``source``) the scene holds."""
        return len(self.scene.keys(source))

    def set_pointcloud(self, points, q):
        """Replace the point-cloud obstacle by (N, 3) points [m] in the base frame, the robot
        measured at q (nq,); return the number of voxel spheres (0: the cloud is cleared)."""
        obstacle = pointcloud_obstacle(points, self.settings.voxel_size, self.constraint, q,
                                       self.settings.robot_margin, self.reach)
        self.scene.replace_source({} if obstacle is None else {('pointcloud', 0): obstacle},
                                  'pointcloud')
        return 0 if obstacle is None else len(obstacle.centers)

    # ------------------------------------------------------------------ status and markers
    def _monitor(self):
        """Return the twin of the constraint (``fork``, with a fresh snapshot of the scene)
        that the status and the markers read: they may run in the solver's worker thread
        while the validator, in the tick's thread, uses the constraint itself."""
        constraint = self.constraint
        monitored = self._monitored
        if monitored is None or monitored[0] is not constraint:
            monitored = self._monitored = (constraint, constraint.fork())
        monitored[1].refresh()
        return monitored[1]

    def closest(self, q):
        """Return the constraint's status at q (cached per configuration and scene)."""
        q = np.asarray(q, dtype=float)
        monitor = self._monitor()
        key = (q.tobytes(), monitor.scene.version, id(self.constraint))
        report = self._report
        if report[0] != key:
            report = self._report = (key, monitor.status(q))
        return report[1]

    def contact_note(self, q, refining=(), when='at its first command'):
        """Return the (level, text) log line of the first command at q (nq,), or None
        (``when``: the words for when it is; the note is due again once fine covers come in).
        'warn' when the arm rests in contact: which pairs, how deep, what the constraint
        allows them (docs/collision.md, "Contact allowances"), and what makes the covers
        tighter where they are artefacts: the links ``refining`` (``start_contact_refinement``)
        or a smaller cover tolerance. 'info' when it is only near (``refining``, no contact)."""
        if not self.has_geometry:
            return None
        contacts = self.constraint.contacts(q)
        steps = ' then '.join(f'{t:g}' for t in contact_tolerances(self.settings))
        computing = (f'the covers of {", ".join(refining)} are being computed again at '
                     f'tolerance {steps} m (collision_contact_tolerance, if pairs stay in '
                     'contact; applied when ready) to take away what is only an overlap of the '
                     'covers')
        if not contacts:
            return None if not refining else ('info', (
                f'{when}, parts are within '
                f'{1e3 * CONTACT_RELEASE:g} mm of another (padded cover distances): '
                f'{computing}'))
        shown = ', '.join(f'{a} / {b} {1e3 * d:.1f} mm' for (a, b), d in contacts[:4])
        more = f' and {len(contacts) - 4} more' if len(contacts) > 4 else ''
        tighter = computing if refining else (
            'a smaller collision_cover_tolerance tightens them (e.g. 0.004 for a small arm '
            'folded at rest; the first start then computes finer covers)')
        return ('warn', f'the arm rests in contact {when}: {shown}{more} (padded '
                f'cover distances); those pairs may stay as deep, never deeper, until '
                f'{1e3 * CONTACT_RELEASE:g} mm apart. Where the real parts are apart (the '
                f'covers exceed the meshes by up to collision_cover_tolerance, '
                f'{self.model.tolerance:g} m), {tighter}')

    def status(self, q, refusal=None, blocked=False):
        """Return the collision fields of ~/status at the command q (JSON-ready).

        refusal: the control loop's last refusal (``ControlLoop.refusal()``) or None;
        blocked: a goal is active and not reached (for the reason text).
        """
        report = self.closest(q)
        d = report['min_distance']
        return {
            'min_distance': round(d, 5) if math.isfinite(d) else None,
            'closest_pair': report['closest_pair'],
            'in_collision': report['in_collision'],
            'collision_reason': self.reason_text(report, refusal, blocked),
            'self_collision': self.self_collision,
            'self_collision_pairs': int(len(self.constraint.pairs)),
            'obstacles': len(self.scene),
        }

    def reason_text(self, report, refusal=None, blocked=False):
        """Return why collision avoidance holds or bends the motion ('' when it does not).

        In order: the command is in collision (an obstacle appeared on the arm); the loop
        braked because the motion would collide (stopped at the margin); a goal is not reached
        and the closest pair is within the clearance (the constraint keeps the arm at the
        margin); the loop took a detour (another solver candidate).
        """
        d = report['min_distance']
        pair = report['closest_pair']
        if report['in_collision']:
            return (f'in collision: {pair} at {1e3 * d:.1f} mm padded distance (an obstacle on '
                    'the arm?): only motions that do not go deeper are allowed')
        ours = refusal is not None and refusal.get('validator') == type(self).__name__
        if ours and refusal['outcome'] == 'hold':
            return (f'stopped at the margin: {refusal["reason"]}; the goal cannot be reached '
                    'on this path without collision')
        margin = self.settings.clearance + 1e-3
        if blocked and pair and math.isfinite(d) and d <= margin:
            return (f'at the margin: {pair} at {1e3 * d:.1f} mm padded distance (clearance '
                    f'{1e3 * self.settings.clearance:g} mm); the goal is not reached and may '
                    'not be reachable without collision')
        if ours:
            return f'going around: {refusal["reason"]}'
        return ''

    def marker_inputs(self, q, cover=False):
        """Return the keyword arguments of ``markers.collision_markers`` at q: the obstacles,
        the closest pair and (``cover``) the robot's cover spheres."""
        report = self.closest(q)
        monitor = self._monitor()
        points = report['points']
        closest = None if points is None else (points[0], points[1], report['min_distance'])
        out = {'obstacles': monitor.scene.items(), 'closest': closest, 'cover': None}
        if cover:
            centers, radii, _ = monitor.cover_spheres(q)
            out['cover'] = (centers, radii)
        return out
