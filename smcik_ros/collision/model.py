"""The robot's collision model: sphere covers of the URDF's <collision> geometry, per link.

``CollisionModel.from_urdf(chain, urdf)`` reads every ``<collision>`` element (box, cylinder,
sphere, mesh; a ``<capsule>`` too), resolves mesh URIs, covers each element with spheres
(``covers``) and places them in the frame of the chain body that carries the link:

- the chain's links (``Chain.link_names``: the base, the path to the tips, fixed children);
- links rigidly attached anywhere (the base's parents through fixed joints, such as
  ``world`` or a pedestal, and their fixed children; a hand fixed to the flange);
- links on a joint outside the chain (gripper fingers on prismatic joints), covered over
  their whole joint range and carried by their parent link; deeper off-chain branches (two
  movable joints away from the chain) and links above a movable joint over the base are left
  out, with a warning in ``model.warnings``.

Mesh URIs: ``package://NAME/rest`` (``package:///NAME/rest`` too) through the ament index
(when ``ament_index_python`` is installed and knows NAME), else ``DIR/NAME/rest`` for the first
``package_paths`` entry DIR that has it (or a sub-directory of DIR whose package.xml names
NAME), else the URDF file's own directory tree (an ancestor directory named NAME, or whose
package.xml names NAME); ``file://`` URIs and relative paths are relative to the URDF file.
A collision mesh that cannot be found or read never stops the model: its link is left out
(no geometry, so no collision checks for it), with one warning in ``model.warnings`` and on
the ``smcik_ros.collision`` logger naming the link, the URI and why (every place looked).
``resolve_mesh_uri`` itself raises ``ModelError`` with that text.

Without any collision geometry, ``CollisionModel.skeleton(chain)`` gives a thin cover of the
segments between link origins, so keep-out volumes still work on bare URDFs.
"""

import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import re
import threading
import time
import xml.etree.ElementTree as ElementTree

import numpy as np

from ..model import cache as model_cache
from ..errors import ModelError
from ..model.urdf import SOURCES as _MODEL_SOURCES
from ..model.urdf import declare_prefixes, joints_to_records, require_robot_name
from .covers import (SphereCover, before_first_compute, bisect_triangles, cached_cover,
                     cover_box, cover_cylinder, cover_mesh, cover_sphere, cylinder_sections,
                     default_cache_dir)

__all__ = ['CollisionModel', 'LinkGeometry', 'collision_geometry', 'resolve_mesh_uri',
           'conventional_srdf_path', 'load_mesh', 'link_covers', 'DEFAULT_TOLERANCE',
           'MIN_TOLERANCE', 'COARSE_TOLERANCE']

_LOG = logging.getLogger('smcik_ros.collision')
DEFAULT_TOLERANCE = 0.01      # [m] largest cover excess (sphere beyond the real geometry)
MIN_TOLERANCE = 0.002         # [m] tighter covers take minutes and thousands of spheres
DEFAULT_SKELETON_RADIUS = 0.01  # [m]
MAX_SWEEP = 0.3    # [m] off-chain links whose points travel farther over their range are left out
LINK_SPHERES = 2000  # most spheres of one link's cover: beyond, its tolerance doubles (to 8x)
# The root body's links (a mobile base, a pedestal) are coarsened at most 2x: they never move,
# so their spheres cost only near a moving link, and the arms reach close to them (TIAGo's
# base at 8 cm excess refused goals 15 mm clear in FCL).
ROOT_COARSEST = 2.0
SWEEP_BATCH = 0.25   # swept links computed together: work at most this share of the largest


@dataclasses.dataclass(frozen=True)
class LinkGeometry:
    """One <collision> element of a link, in the link frame.

    kind: 'box', 'cylinder', 'sphere', 'capsule' or 'mesh'; origin: (4, 4) pose in the link
    frame [m]; size: box (x, y, z) side lengths, cylinder/capsule (radius, length), sphere
    (radius,) [m]; mesh_path: the resolved file (meshes only), scale (3,), uri as written.
    """

    link: str
    kind: str
    origin: np.ndarray
    size: tuple = ()
    mesh_path: str = None
    scale: tuple = (1.0, 1.0, 1.0)
    uri: str = None


@dataclasses.dataclass(frozen=True)
class _Attachment:
    """How a URDF link rides on the chain: a body and its pose(s) in that body's frame.

    poses (K, 4, 4): one pose for rigid links; K sampled poses over the joint range for a
    link on an off-chain joint; sag: for a revolute sweep, the ratio of how far a point's arc
    leaves its chord to that chord's length between consecutive poses (tan(step / 4) / 2),
    0 for translations; group: rigid group id (self-collision adjacency).
    """

    body: int
    poses: np.ndarray
    group: int
    sag: float = 0.0

    @property
    def swept(self):
        return len(self.poses) > 1


class CollisionModel:
    """Sphere covers of a robot's links, in the frames of the chain's bodies.

    Build with ``from_urdf`` or ``skeleton``. Arrays (read-only):

    - ``link_names`` (L,): links that have spheres; ``link_body`` (L,): the chain body that
      carries each (-1: the base); ``link_group`` (L,): rigid groups (links fixed together
      share one); ``group_parent`` (G,): each group's parent group (-1: none);
    - ``centers`` (S, 3) [m] in the body frames, ``radii`` (S,) [m], ``sphere_link`` (S,),
      ``sphere_body`` (S,); spheres of one link are contiguous (``link_start``,
      ``link_count``);
    - ``link_excess`` (L,): the largest cover excess of each link [m] (an upper bound);
    - ``geometry``: {link: [LinkGeometry, ...]}; ``swept_links``: links covered over an
      off-chain joint's range; ``warnings``: what was left out and why.
    """

    def __init__(self, chain, link_covers, attachments, geometry=None, warnings=(),
                 source='urdf', tolerance=DEFAULT_TOLERANCE, group_parent=None, urdf_path=None,
                 urdf_links=None):
        self.chain = chain
        self.urdf_links = tuple(urdf_links if urdf_links is not None else chain.link_names)
        self.source = source
        self.tolerance = float(tolerance)
        self.geometry = dict(geometry or {})
        self.warnings = list(warnings)
        self.urdf_path = urdf_path
        self.cache_dir = ''          # from_urdf: where covers (and the constraint's tables) live
        self.coarse_links = ()       # from_urdf(coarse=True): links with coarse covers
        self._source = None          # a coarse model: what fine() builds the model from
        self._plain = {}             # refined links: their covers at the model's tolerance
        names, bodies, groups, starts, counts, excess = [], [], [], [], [], []
        centers, radii, sphere_link = [], [], []
        for name, cover in link_covers:
            if not len(cover):
                continue
            att = attachments[name]
            starts.append(sum(len(r) for r in radii))
            counts.append(len(cover))
            names.append(name)
            bodies.append(att.body)
            groups.append(att.group)
            excess.append(cover.max_excess)
            centers.append(cover.centers)
            radii.append(cover.radii)
            sphere_link.append(np.full(len(cover), len(names) - 1))
        self.link_names = tuple(names)
        self.link_body = _ro(np.array(bodies, dtype=np.int64))
        self.link_group = _ro(np.array(groups, dtype=np.int64))
        self.link_start = _ro(np.array(starts, dtype=np.int64))
        self.link_count = _ro(np.array(counts, dtype=np.int64))
        self.link_excess = _ro(np.array(excess, dtype=float))
        self.centers = _ro(np.concatenate(centers) if centers else np.zeros((0, 3)))
        self.radii = _ro(np.concatenate(radii) if radii else np.zeros(0))
        self.sphere_link = _ro(np.concatenate(sphere_link) if sphere_link
                               else np.zeros(0, dtype=np.int64))
        self.sphere_body = _ro(self.link_body[self.sphere_link] if len(self.sphere_link)
                               else np.zeros(0, dtype=np.int64))
        self.swept_links = tuple(n for n in names if attachments[n].swept)
        self._attachments = {n: attachments[n] for n in names}
        self._covers = {name: cover for name, cover in link_covers if len(cover)}
        self.group_parent = _ro(np.asarray(group_parent if group_parent is not None else [],
                                           dtype=np.int64))
        self._index = {n: i for i, n in enumerate(names)}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(cls, chain, urdf, package_paths=(), tolerance=DEFAULT_TOLERANCE,
                  cache_dir=None, urdf_path=None, item_edge=None, coarse=False):
        """Build the model of ``chain`` from the URDF it was loaded from.

        urdf: a URDF file path or its XML text (``robot_description``); urdf_path: the file
        the XML came from, when given as text (relative mesh paths and the package search in
        its directory tree; None: the current directory). package_paths: directories holding
        ROS packages for ``package://`` URIs. tolerance [m]: the largest cover excess.
        cache_dir: disk cache of covers (None: ``covers.default_cache_dir()``; '': none).
        coarse: when the model is not in the disk cache, return at once a model of coarse
        covers (``coarse`` True: each element's bounding box covered by a few spheres, a
        superset of its fine cover; the same links, bodies and groups) whose ``fine()``
        computes the model this call returns otherwise (seconds to minutes on a first start
        with meshes; a background thread can do it). A cached model is returned as it is.
        Raises ModelError for an unreadable URDF; a collision mesh that cannot be found or
        read leaves its link out, with a warning (``warnings``, the ``smcik_ros.collision``
        logger) naming the link, the URI and why.
        """
        text, path = _read_urdf(urdf, urdf_path)
        tolerance = _checked_tolerance(tolerance)
        base_dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
        package_paths = tuple(package_paths or ())
        key = None if cache_dir == '' else _model_key(chain, text, base_dir, package_paths,
                                                      tolerance, item_edge)
        model = _cached_model(cls, chain, cache_dir, key, tolerance, path)
        if model is not None:
            return model
        return _build(cls, _Source(chain, text, path, base_dir, package_paths, tolerance,
                                   cache_dir, item_edge, key), coarse)

    @property
    def coarse(self):
        """True while some links have coarse covers (``coarse_links``; see ``fine``)."""
        return bool(self.coarse_links)

    def fine(self, covers=None):
        """Return the model with fine covers in place of coarse ones, or this model when it is
        not coarse. covers: {link: SphereCover} at its tolerance of some or all of its
        ``coarse_links`` (``link_covers`` of ``fine_inputs(links)``, e.g. computed in another
        process); None: all of them, computed here (seconds to minutes). The model has this
        model's links, bodies and groups (pair ids stay valid); it stays coarse while links
        remain, and once none does it is stored in the disk cache (at its tolerance: a
        refined link's cover as it was before ``refined``), where the next ``from_urdf``
        finds it."""
        if not self.coarse:
            return self
        notes = []
        if covers is None:
            covers, notes = link_covers(*self.fine_inputs())
        model = self.with_covers(covers)
        if model.coarse:
            model._source = self._source
        else:
            stored = [(n, model._plain.get(n, c)) for n, c in model._covers.items()]
            _store_model(self._source.cache_dir, self._source.key, stored,
                         self._attachments, self.geometry, self.warnings, notes,
                         self.group_parent, self.urdf_links)
        return model

    def fine_inputs(self, links=None):
        """Return the arguments of ``link_covers`` that give the fine covers of ``links``
        (names; None: every coarse link) as plain data: they can be sent to another
        process."""
        source = self._source
        names = [n for n in (self.coarse_links if links is None else links)
                 if n in self.coarse_links]
        return ({n: self.geometry[n] for n in names}, {n: self._attachments[n] for n in names},
                source.tolerance, source.item_edge, source.cache_dir)

    @property
    def coarse_chain_links(self):
        """The coarse links riding on the chain (not swept over an off-chain joint)."""
        return tuple(n for n in self.coarse_links if n not in self.swept_links)

    def next_fine_links(self):
        """Return the coarse links whose fine covers come next: all those riding on the
        chain (seconds), then the links swept over an off-chain joint's range: together
        those whose work (mesh bytes times sampled poses, ``_sweep_work``) is at most
        ``SWEEP_BATCH`` of the largest (TIAGo's sixteen finger links, a second in all, before
        its head's 18 s) or twice the smallest (talos: its two grippers, a few seconds, then
        the head; Unitree H2_Plus's six finger links alike, each job followed by the pairs
        again, took 8 s one by one), so that the light ones are applied without waiting for
        a heavy one; [] when the model is not coarse."""
        if self.coarse_chain_links or not self.coarse_links:
            return list(self.coarse_chain_links)
        work = {n: self._sweep_work(n) for n in self.coarse_links}
        light = max(SWEEP_BATCH * max(work.values()), 2.0 * min(work.values()))
        return [n for n in self.coarse_links if work[n] <= light]

    def _sweep_work(self, name):
        """Return a link's cover work estimate: its mesh files' bytes (1000 for a primitive)
        times its sampled poses."""
        size = sum(os.path.getsize(g.mesh_path) if g.kind == 'mesh' and g.mesh_path
                   and os.path.isfile(g.mesh_path) else 1000 for g in self.geometry[name])
        return size * len(self._attachments[name].poses)

    def with_covers(self, covers):
        """Return a copy whose links in ``covers`` ({link: SphereCover}, e.g. what ``fine``
        or ``refined`` put on another copy of this model) have those covers;
        every other cover, the attachments and the link order are this model's, so pair ids
        and link indices stay valid; the links given are no longer coarse."""
        merged = dict(self._covers)
        merged.update(covers)
        model = type(self)(self.chain, [(n, merged[n]) for n in self.link_names],
                           self._attachments, self.geometry, self.warnings, self.source,
                           self.tolerance, self.group_parent, self.urdf_path, self.urdf_links)
        model.cache_dir = self.cache_dir
        model.coarse_links = tuple(n for n in self.coarse_links if n not in covers)
        model._source = self._source if model.coarse_links else None
        model._plain = {n: c for n, c in self._plain.items() if n not in covers}
        return model

    def refined(self, links, tolerance, covers=None):
        """Return (model, refined names): a copy whose covers of ``links`` (names) are
        computed again from their <collision> geometry at the finer ``tolerance`` [m] (the
        contact refinement: links resting in contact where their covers, not their meshes,
        overlap); every other cover, the attachments and the link order are this model's, so
        pair ids and link indices stay valid. Links without geometry here, or already covered
        at least that finely, are left as they are (not in the names). ``tolerance`` keeps
        the link's sphere budget (``LINK_SPHERES``); the covers go to the same disk cache.
        covers: {link: SphereCover} of ``link_covers(*refine_inputs(links, tolerance))``,
        computed elsewhere (another process); None: computed here. Raises ModelError when a
        mesh can no longer be read. Links whose covers are still coarse are not refined
        (their ``fine`` covers come first), nor those whose new cover is no finer: over its
        sphere budget a cover is made coarser (TIAGo's torso_lift_link, 1830 spheres at 1 cm,
        went to 1.2 cm when asked for 6 mm); those predicted to be far over it are not
        computed (``_far_over_budget``).
        """
        inputs = self.refine_inputs(links, tolerance)
        names = list(inputs[0])
        if names and covers is None:
            covers, _ = link_covers(*inputs)
        names = [n for n in names if covers[n].max_excess < self._covers[n].max_excess]
        if not names:
            return self, []
        model = self.with_covers({name: covers[name] for name in names})
        model._plain = {**{n: self._covers[n] for n in names}, **self._plain}
        return model, names

    def refine_inputs(self, links, tolerance):
        """Return the ``link_covers`` arguments of ``refined(links, tolerance)`` (plain data:
        they can be sent to another process); its geometry is empty when nothing is to be
        refined."""
        tolerance = _checked_tolerance(tolerance)
        names = [n for n in dict.fromkeys(links) if n in self.geometry and n in self._covers
                 and n not in self.coarse_links and self._covers[n].max_excess > tolerance
                 and not _far_over_budget(self._covers[n], tolerance, self._plain.get(n))]
        if self.source != 'urdf':
            names = []
        return ({n: self.geometry[n] for n in names}, {n: self._attachments[n] for n in names},
                tolerance, None, self.cache_dir)

    @classmethod
    def skeleton(cls, chain, radius=DEFAULT_SKELETON_RADIUS):
        """Return a thin cover of the chain's segments (for URDFs without <collision>).

        Each link of the chain gets spheres of ``radius`` [m] along the segment from the
        origin of the joint (or link) it hangs from to its own origin, on the body that
        carries that segment; the excess of this cover is ``radius`` around the segments.
        """
        radius = float(radius)
        if not radius > 0.0:
            raise ModelError(f'skeleton radius must be > 0 [m]; got {radius}')
        link_covers, attachments = [], {}
        for link in chain.link_names[1:]:
            body, off = chain.link_anchor(link)
            if chain.is_body_frame(link):
                parent = chain.body_parent[body]
                start, end = np.zeros(3), np.asarray(chain.body_offset[body], dtype=float)
                host = parent
            else:
                start, end, host = np.zeros(3), off[:3, 3].copy(), body
            length = float(np.linalg.norm(end - start))
            count = max(1, int(math.ceil(length / (1.6 * radius))) + 1)
            t = np.linspace(0.0, 1.0, count)[:, None]
            centers = start + t * (end - start)
            cover = SphereCover(centers, np.full(count, radius), np.full(count, radius))
            link_covers.append((link, cover))
            attachments[link] = _Attachment(host, np.eye(4)[None], host + 1)
        group_parent = [-1] + [b + 1 for b in chain.body_parent]
        return cls(chain, link_covers, attachments, {}, [], 'skeleton', radius, group_parent)

    # ------------------------------------------------------------------ queries
    def __len__(self):
        return len(self.radii)

    @property
    def has_geometry(self):
        """True when the model has at least one sphere."""
        return len(self.radii) > 0

    def link_index(self, name):
        """Return the index of link ``name`` in ``link_names`` (ModelError if absent)."""
        try:
            return self._index[name]
        except KeyError:
            raise ModelError(f'link {name!r} has no collision geometry in the model; links '
                             f'with geometry: {", ".join(self.link_names) or "none"}') from None

    def has_link(self, name):
        """Return True when link ``name`` has spheres in the model."""
        return name in self._index

    def placed_shapes(self, link, frames):
        """Return [(vertices (V, 3) [m], faces (F, 3))] of ``link``'s <collision> elements
        (the URDF's meshes and primitives, not their covers) in the base frame at the one
        configuration of ``frames`` (``Chain.frames``); None for a link without geometry or
        on an off-chain joint (its pose is a sweep)."""
        att, items = self._attachments.get(link), self.geometry.get(link, ())
        if att is None or att.swept or not items:
            return None
        pose = np.eye(4)
        if att.body >= 0:
            pose[:3, :3], pose[:3, 3] = frames.rot[att.body][0], frames.pos[att.body][0]
        out = []
        for geom in items:
            vertices, faces = _element_mesh(geom, self.tolerance)
            placed = pose @ att.poses[0] @ geom.origin
            out.append((vertices @ placed[:3, :3].T + placed[:3, 3], faces))
        return out

    def adjacent_links(self):
        """Return the set of (i, j), i < j, link index pairs that are adjacent.

        Adjacent: the same rigid group (links fixed together are one body), groups joined
        by one joint (parent/child), or links on the same body of the chain (covers swept
        over off-chain joints ride on their body: two such fingers of one hand never move
        relative to each other, so the chain cannot part them; TIAGo's coarse ones rested
        in contact, -65 mm, from the first command).
        """
        out = set()
        g = self.link_group
        body = self.link_body
        parent = self.group_parent
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                a, b = int(g[i]), int(g[j])
                if a == b or body[i] == body[j] or (0 <= a < len(parent) and parent[a] == b) \
                        or (0 <= b < len(parent) and parent[b] == a):
                    out.add((i, j))
        return out

    def world_spheres(self, frames):
        """Return the (N, S, 3) sphere centres of every configuration of ``frames`` [m]."""
        n = len(frames)
        out = np.empty((n, len(self.radii), 3))
        for body, start, stop in self._body_slices():
            local = self.centers[start:stop]
            if body < 0:
                out[:, start:stop] = local
            else:
                out[:, start:stop] = (np.matmul(frames.rot[body], local.T)
                                      .transpose(0, 2, 1) + frames.pos[body][:, None, :])
        return out

    def _body_slices(self):
        """Return [(body, start, stop)] runs of spheres on one body (cached)."""
        runs = getattr(self, '_runs', None)
        if runs is None:
            runs = []
            b = self.sphere_body
            start = 0
            for i in range(1, len(b) + 1):
                if i == len(b) or b[i] != b[start]:
                    runs.append((int(b[start]), start, i))
                    start = i
            self._runs = runs
        return runs

    def excess_table(self):
        """Return [(link, spheres, max excess [m], swept)] for reports."""
        return [(n, int(c), float(e), n in self.swept_links)
                for n, c, e in zip(self.link_names, self.link_count, self.link_excess)]

    def __repr__(self):
        return (f'CollisionModel({self.source}, {len(self.link_names)} links, '
                f'{len(self.radii)} spheres, tolerance {self.tolerance:g} m)')


# ---------------------------------------------------------------------- URIs and files
def resolve_mesh_uri(uri, urdf_dir=None, package_paths=()):
    """Return the file path of a mesh URI, or raise ModelError naming every place looked.

    ``package://NAME/rest`` (or ``package:///NAME/rest``): the ament index (if installed and
    NAME is known), then ``DIR/NAME/rest`` (or ``DIR/X/rest`` where DIR/X/package.xml names
    NAME) for each DIR of ``package_paths``, then the ancestors of ``urdf_dir`` (a directory
    named NAME or whose package.xml names NAME) and, up to ``SIBLING_LEVELS`` levels up, the
    directories in them (a package in the URDF's directory, as pybullet_data's xarm keeps
    xarm_description; a package next to the URDF's own in an unsourced workspace); last, the
    tails of ``rest`` (a directory and the file at least) under those ancestors.
    ``file://PATH`` and plain paths: absolute, or relative to ``urdf_dir`` (default: the
    current directory).
    """
    urdf_dir = os.path.abspath(urdf_dir or os.getcwd())
    tried = []
    if uri.startswith('package://'):
        # package:///NAME/rest (three slashes) is read as package://NAME/rest, as rviz does.
        rest = uri[len('package://'):].lstrip('/')
        name, _, sub = rest.partition('/')
        if not name or not sub:
            raise ModelError(f'mesh URI {uri!r} is not package://NAME/path')
        share = _ament_share(name)
        if share is not None:
            path = os.path.join(share, sub)
            tried.append(f'ament index share {share!r} -> {path!r}')
            if os.path.isfile(path):
                return path
        else:
            tried.append(f'ament index: package {name!r} not found (or ament_index_python '
                         'not installed)')
        for directory in package_paths:
            directory = os.path.expanduser(str(directory))
            for root in _package_roots(directory, name):
                path = os.path.join(root, sub)
                tried.append(path)
                if os.path.isfile(path):
                    return path
            if not os.path.isdir(directory):
                tried.append(f'package_paths entry {directory!r} (not a directory)')
        ancestor, level = urdf_dir, 0
        while True:
            if os.path.basename(ancestor) == name or _package_name(ancestor) == name:
                path = os.path.join(ancestor, sub)
                tried.append(path)
                if os.path.isfile(path):
                    return path
            if level <= SIBLING_LEVELS:
                # A package in the URDF's directory (pybullet_data's xarm/xarm_description)
                # or beside an ancestor (a workspace's src/ that is not sourced).
                for root in _package_roots(ancestor, name):
                    path = os.path.join(root, sub)
                    if os.path.isfile(path):
                        return path
            parent = os.path.dirname(ancestor)
            if parent == ancestor:
                break
            ancestor, level = parent, level + 1
        tried.append(f'no ancestor of {urdf_dir!r} named {name!r} (or whose package.xml names '
                     f'it) holds it, nor a directory in the ancestors up to '
                     f'{SIBLING_LEVELS} levels up')
        path = _by_tail(sub, urdf_dir)
        if path is not None:
            return path
        tried.append(f'nor a tail of {sub!r} (a directory and the file at least) under those '
                     'ancestors')
        raise ModelError(f'mesh {uri!r} not found; looked in: ' + '; '.join(tried) +
                         '. Set package_paths to a directory containing the package '
                         f'{name!r} (or source its ROS workspace)')
    path = uri[len('file://'):] if uri.startswith('file://') else uri
    path = os.path.expanduser(path)
    if not os.path.isabs(path):
        path = os.path.join(urdf_dir, path)
    if os.path.isfile(path):
        return path
    raise ModelError(f'mesh {uri!r} not found: {path!r} does not exist (relative paths are '
                     f'taken from the URDF directory {urdf_dir!r})')


SIBLING_LEVELS = 3    # package:// beside the URDF's ancestors: up to a workspace's src/


def _by_tail(sub, urdf_dir):
    """Return the first file that a tail of the path ``sub`` (a directory and the file at
    least, longest first) names under ``urdf_dir`` or its ancestors up to SIBLING_LEVELS,
    nearest first; None. Copied descriptions drop or rename leading directories (a
    dataset's Atlas in drake/atlas/urdf, its URIs package://drake/examples/atlas/urdf/
    meshes/...)."""
    parts, ancestor = sub.split('/'), urdf_dir
    for _ in range(SIBLING_LEVELS + 1):
        for k in range(len(parts) - 1):
            path = os.path.join(ancestor, *parts[k:])
            if os.path.isfile(path):
                return path
        ancestor = os.path.dirname(ancestor)
    return None


def _ament_share(name):
    try:
        from ament_index_python.packages import get_package_share_directory
    except ImportError:
        return None
    try:
        return get_package_share_directory(name)
    except Exception:   # PackageNotFoundError, or no AMENT_PREFIX_PATH at all
        return None


def _package_roots(directory, name):
    """Yield directories under ``directory`` that hold package ``name``."""
    direct = os.path.join(directory, name)
    if os.path.isdir(direct):
        yield direct
    if _package_name(directory) == name:
        yield directory
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return
    for entry in entries:
        sub = os.path.join(directory, entry)
        if entry != name and os.path.isdir(sub) and _package_name(sub) == name:
            yield sub


_PACKAGE_NAME = re.compile(rb'<name>\s*([^<\s]+)\s*</name>')


def _file_head(path):
    """Return the first 64 KiB of a file (where an XML file names its package or robot), or
    None when it cannot be read."""
    try:
        with open(path, 'rb') as f:
            return f.read(65536)
    except OSError:
        return None


def _package_name(directory):
    text = _file_head(os.path.join(directory, 'package.xml'))
    match = _PACKAGE_NAME.search(text) if text is not None else None
    return match.group(1).decode() if match else None


def conventional_srdf_path(urdf_path):
    """Return the SRDF found beside a URDF by convention, or None.

    Looked for, in order: ``<dir>/<stem>.srdf`` next to the URDF; ``<pkg>/config/<stem>.srdf``
    and ``<pkg>/srdf/<stem>.srdf`` in the URDF's package (``<pkg>`` = the directory above
    ``urdf/`` or ``robots/``, as in example-robot-data); MoveIt's layout
    ``<X>_moveit_config/config/<stem>.srdf`` beside a ``<X>_description`` package. Then, in
    those directories, the SRDF whose ``<robot name>`` is the URDF's: the only one, or the
    one among several whose file stem is that name (``ur5.srdf`` for a ``ur5_robot.urdf``
    named ``ur5``); several others are ambiguous (None: give srdf_path).
    """
    if not urdf_path or not isinstance(urdf_path, (str, os.PathLike)):
        return None
    urdf_path = os.path.abspath(os.fspath(urdf_path))
    directory = os.path.dirname(urdf_path)
    stem = os.path.splitext(os.path.basename(urdf_path))[0]
    if stem.endswith('.urdf'):      # robot.urdf.xacro -> robot
        stem = stem[:-5]
    folders = [directory]
    package = os.path.dirname(directory) if os.path.basename(directory) in ('urdf', 'robots') \
        else directory
    folders += [os.path.join(package, 'config'), os.path.join(package, 'srdf')]
    base = os.path.basename(package)
    if base.endswith('_description'):
        prefix = base[:-len('_description')]
        folders.append(os.path.join(os.path.dirname(package), prefix + '_moveit_config',
                                    'config'))
    for folder in folders:
        candidate = os.path.join(folder, stem + '.srdf')
        if os.path.isfile(candidate):
            return candidate
    name = _robot_name(urdf_path)
    if not name:
        return None
    named = []
    for folder in dict.fromkeys(folders):
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        named += [os.path.join(folder, e) for e in entries
                  if e.endswith('.srdf') and _robot_name(os.path.join(folder, e)) == name]
    if len(named) > 1:
        named = [path for path in named
                 if os.path.splitext(os.path.basename(path))[0] == name]
    return named[0] if len(named) == 1 else None


_XML_COMMENT = re.compile(rb'<!--.*?-->', re.S)
_ROBOT_NAME = re.compile(rb'<robot\b[^>]*?\bname\s*=\s*["\']([^"\']+)["\']')


def _robot_name(path):
    """Return the name attribute of the first <robot> element of an XML file, or None."""
    text = _file_head(path)
    if text is None:
        return None
    match = _ROBOT_NAME.search(_XML_COMMENT.sub(b'', text))
    return match.group(1).decode(errors='replace') if match else None


def load_mesh(path, scale=(1.0, 1.0, 1.0)):
    """Return (vertices (V, 3) [m], faces (F, 3)) of a mesh file, scaled.

    STL, OBJ, DAE (and whatever else trimesh reads); a COLLADA ``<unit meter=...>`` is
    applied as ROS tools do. Raises ModelError for unreadable or empty files.
    """
    try:
        import trimesh
        loaded = trimesh.load(path, force='mesh', process=False)
    except Exception as exc:
        raise ModelError(f'cannot read mesh {path!r}: {exc}') from exc
    vertices = np.asarray(getattr(loaded, 'vertices', np.zeros((0, 3))), dtype=float)
    faces = np.asarray(getattr(loaded, 'faces', np.zeros((0, 3))), dtype=np.int64)
    if len(vertices) == 0 or len(faces) == 0:
        raise ModelError(f'mesh {path!r} has no triangles')
    unit = _collada_unit(path)
    if unit != 1.0:
        # trimesh records a COLLADA unit in its metadata but does not scale the vertices.
        vertices = vertices * unit
    return vertices * np.asarray(scale, dtype=float), faces


def _collada_unit(path):
    if not str(path).lower().endswith('.dae'):
        return 1.0
    try:
        with open(path, 'rb') as f:
            head = f.read(8192)
    except OSError:
        return 1.0
    match = re.search(rb'<unit[^>]*meter\s*=\s*"([^"]+)"', head)
    try:
        return float(match.group(1)) if match else 1.0
    except ValueError:
        return 1.0


# ---------------------------------------------------------------------- URDF reading
def collision_geometry(urdf, links, package_paths=(), urdf_path=None):
    """Return {link: [LinkGeometry, ...]} of the <collision> elements of ``links``.

    urdf: a URDF file path or its XML text; urdf_path: the file the text came from (mesh
    paths); package_paths as ``CollisionModel.from_urdf``. Only these links' mesh URIs are
    resolved. Raises ModelError for an unreadable URDF, a link it does not have (naming its
    links) or an unresolvable mesh.
    """
    text, path = _read_urdf(urdf, urdf_path)
    base_dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    robot, raw_links = _parse(text, path)
    by_name = {link.name: link for link in robot.links}
    unknown = [name for name in links if name not in by_name]
    if unknown:
        raise ModelError(f'unknown link(s) {", ".join(unknown)}; links in this URDF: '
                         f'{", ".join(by_name)}')
    out = {}
    for name in links:
        out[name], unreadable = _link_geometry(by_name[name], raw_links.get(name), base_dir,
                                               tuple(package_paths or ()))
        if unreadable is not None:
            raise unreadable
    return out


def _read_urdf(urdf, urdf_path):
    if isinstance(urdf, os.PathLike) or (isinstance(urdf, str) and
                                         not urdf.lstrip().startswith('<')):
        path = os.fspath(urdf)
        if not os.path.isfile(path):
            raise ModelError(f'URDF file {path!r} does not exist')
        with open(path, 'rb') as f:
            return declare_prefixes(f.read()), path
    if isinstance(urdf, str):
        urdf = urdf.encode('utf-8')
    if not isinstance(urdf, (bytes, bytearray)):
        raise ModelError(f'urdf must be a file path or the XML text; got {type(urdf).__name__}')
    return declare_prefixes(urdf), (os.fspath(urdf_path) if urdf_path else None)


def _parse(text, path):
    try:
        import yourdfpy
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise ModelError(f'the URDF parser is not installed ({exc}); pip install '
                         'yourdfpy') from exc
    source = f'URDF file {path!r}' if path else 'robot_description string'
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ModelError(f'{source} is not well-formed XML: {exc}') from exc
    require_robot_name(root, source)
    try:
        robot = yourdfpy.URDF.load(io.BytesIO(text), build_scene_graph=False, load_meshes=False,
                                   build_collision_scene_graph=False).robot
    except Exception as exc:
        raise ModelError(f'{source} could not be parsed as URDF: {exc}') from exc
    raw = {}
    for link in root.iter('link'):
        kinds = []
        unsupported = []
        for col in link.findall('collision'):
            geo = col.find('geometry')
            child = None if geo is None else next(iter(geo), None)
            tag = None if child is None else child.tag
            kinds.append((tag, dict(child.attrib) if child is not None else {}))
            if tag not in ('box', 'cylinder', 'sphere', 'mesh', 'capsule'):
                unsupported.append(str(tag))
        raw[link.get('name')] = {'collisions': kinds, 'unsupported': ', '.join(unsupported)}
    return robot, raw


PROGRESS_PERIOD = 3.0   # [s] while covers are computed, a line says how far, this often


class _CoverProgress:
    """While ``from_urdf`` computes covers (from ``start()``, its announcement, to the end of
    the ``with`` block), log every PROGRESS_PERIOD [s] the link being covered and how many
    are done: a first start that takes a minute does not look like a hang."""

    def __init__(self, total):
        self.total, self.done, self.link = total, 0, None
        self._stop = threading.Event()
        self._thread = None
        self._started = None

    def start(self):
        if self._thread is None:
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._run, name='smcik-cover-progress',
                                            daemon=True)
            self._thread.start()

    def _run(self):
        while not self._stop.wait(PROGRESS_PERIOD):
            _LOG.info(f'still computing the sphere covers '
                      f'({time.monotonic() - self._started:.0f} s): link {self.link!r}, '
                      f'{self.done} of {self.total} links with <collision> done')

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class _MeshUnreadable(ModelError):
    """A collision mesh of a link that cannot be found or read: ``from_urdf`` leaves the link
    out; elsewhere (``refined``) it is the ModelError it derives from."""

    def __init__(self, uri, reason):
        super().__init__(reason)
        self.uri, self.reason = uri, reason


def _link_geometry(link, raw, base_dir, package_paths):
    """Return ([LinkGeometry], None or a _MeshUnreadable for its first unresolvable mesh)."""
    out, unreadable = [], None
    raw_items = (raw or {}).get('collisions', [])
    for k, col in enumerate(link.collisions):
        origin = np.eye(4) if col.origin is None else np.asarray(col.origin, dtype=float)
        geo = col.geometry
        where = f'link {link.name!r} <collision> {k}'
        if geo is None:
            continue
        if geo.box is not None:
            size = tuple(float(v) for v in np.ravel(geo.box.size))
            _check_sizes(where, 'box size', size, 3)
            out.append(LinkGeometry(link.name, 'box', origin, size))
        elif geo.cylinder is not None:
            size = (float(geo.cylinder.radius), float(geo.cylinder.length))
            _check_sizes(where, 'cylinder radius/length', size, 2)
            out.append(LinkGeometry(link.name, 'cylinder', origin, size))
        elif geo.sphere is not None:
            size = (float(geo.sphere.radius),)
            _check_sizes(where, 'sphere radius', size, 1)
            out.append(LinkGeometry(link.name, 'sphere', origin, size))
        elif geo.mesh is not None:
            scale = geo.mesh.scale
            scale = (1.0, 1.0, 1.0) if scale is None else tuple(
                float(v) for v in np.broadcast_to(np.asarray(scale, dtype=float), (3,)))
            if not all(math.isfinite(v) and v != 0.0 for v in scale):
                raise ModelError(f'{where}: mesh scale must be finite and non-zero; got {scale}')
            try:
                path = resolve_mesh_uri(geo.mesh.filename, base_dir, package_paths)
            except ModelError as exc:
                unreadable = unreadable or _MeshUnreadable(geo.mesh.filename, str(exc))
                path = None
            out.append(LinkGeometry(link.name, 'mesh', origin, (), path, scale,
                                    geo.mesh.filename))
        elif k < len(raw_items) and raw_items[k][0] == 'capsule':
            attrs = raw_items[k][1]
            try:
                size = (float(attrs['radius']), float(attrs['length']))
            except (KeyError, ValueError):
                raise ModelError(f'{where}: <capsule> needs numeric radius and length; got '
                                 f'{attrs}') from None
            _check_sizes(where, 'capsule radius/length', size, 2)
            out.append(LinkGeometry(link.name, 'capsule', origin, size))
    return out, unreadable


def _check_sizes(where, what, size, count):
    if len(size) != count or not all(math.isfinite(v) and v >= 0.0 for v in size):
        raise ModelError(f'{where}: {what} must be {count} non-negative numbers [m]; got '
                         f'{size}')


# ---------------------------------------------------------------------- attachments
def _attach(chain, robot, tolerance):
    """Return ({link: _Attachment}, group_parent list, warnings) for every URDF link."""
    joints = list(robot.joints)
    by_child = {j.child: j for j in joints}
    children = {}
    for j in joints:
        children.setdefault(j.parent, []).append(j)
    has_geometry = {link.name: bool(link.collisions) for link in robot.links}
    warnings = []
    B = chain.num_bodies
    group_parent = [-1] + [b + 1 for b in chain.body_parent]
    att = {}
    for link in chain.link_names:
        body, off = chain.link_anchor(link)
        att[link] = _Attachment(body, np.asarray(off, dtype=float)[None], body + 1)
    # The base's ancestors through fixed joints are rigid with it.
    link = chain.base_link
    off = np.eye(4)
    while link in by_child:
        j = by_child[link]
        if j.type != 'fixed':
            if _subtree_has_geometry(j.parent, children, has_geometry, exclude=link):
                warnings.append(f'links above joint {j.name!r} ({j.type}, over the base link '
                                f'{chain.base_link!r}) move independently of the chain: their '
                                'collision geometry is left out')
            break
        off = off @ np.linalg.inv(_origin(j))
        link = j.parent
        att.setdefault(link, _Attachment(-1, off[None], 0))
    # Descend into everything not yet attached: fixed children ride along; one movable
    # joint off the chain is swept over its range.
    stack = list(att)
    swept_groups = 0
    while stack:
        link = stack.pop()
        a = att[link]
        for j in children.get(link, []):
            if j.child in att:
                continue
            origin = _origin(j)
            if j.type == 'fixed':
                att[j.child] = _Attachment(a.body, a.poses @ origin, a.group, a.sag)
                stack.append(j.child)
                continue
            if a.swept or j.type not in ('revolute', 'prismatic', 'continuous'):
                if _subtree_has_geometry(j.child, children, has_geometry):
                    reason = ('two movable joints away from the chain' if a.swept
                              else f'a {j.type} joint')
                    warnings.append(f'link {j.child!r} (below joint {j.name!r}, {reason}) is '
                                    'not modelled: its collision geometry is left out')
                continue
            poses, sag = _sweep(j, by_child, joints, tolerance)
            group = B + 1 + swept_groups
            swept_groups += 1
            group_parent.append(a.group)
            att[j.child] = _Attachment(a.body, (a.poses[0] @ origin) @ poses, group, sag)
            stack.append(j.child)
    return att, group_parent, warnings


def _origin(joint):
    return np.eye(4) if joint.origin is None else np.asarray(joint.origin, dtype=float)


def _subtree_has_geometry(link, children, has_geometry, exclude=None):
    stack = [link]
    while stack:
        name = stack.pop()
        if name != exclude and has_geometry.get(name):
            return True
        stack.extend(j.child for j in children.get(name, []) if j.child != exclude)
    return False


def _joint_range(joint, joints):
    lim = joint.limit
    lo = None if lim is None else lim.lower
    hi = None if lim is None else lim.upper
    if joint.type == 'continuous' or lo is None or hi is None:
        if joint.mimic is not None:
            src = next((j for j in joints if j.name == joint.mimic.joint), None)
            if src is not None and src.limit is not None and src.limit.lower is not None \
                    and src.type != 'continuous':
                m = 1.0 if joint.mimic.multiplier is None else float(joint.mimic.multiplier)
                o = 0.0 if joint.mimic.offset is None else float(joint.mimic.offset)
                ends = sorted((m * src.limit.lower + o, m * src.limit.upper + o))
                return float(ends[0]), float(ends[1])
        if joint.type == 'prismatic':
            raise ModelError(f'joint {joint.name!r} (prismatic, off the chain) has no limits: '
                             'its links cannot be covered over their range')
        return -math.pi, math.pi
    return float(lo), float(hi)


def _sweep(joint, by_child, joints, tolerance):
    """Return (poses (K, 4, 4) of the child over the joint range, sag [m])."""
    lo, hi = _joint_range(joint, joints)
    axis = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), dtype=float)
    axis = axis / max(np.linalg.norm(axis), 1e-12)
    if joint.type == 'prismatic':
        count = max(2, int(math.ceil((hi - lo) / tolerance)) + 1)
        values = np.linspace(lo, hi, count)
        poses = np.tile(np.eye(4), (count, 1, 1))
        poses[:, :3, 3] = values[:, None] * axis
        return poses, 0.0
    # Revolute: steps so that a point 1 m from the axis moves <= tolerance between poses; a
    # point of an arc is within chord * tan(step / 4) / 2 of the chord (the caller adds it).
    step = max(tolerance, 1e-3)
    count = int(min(max(2, math.ceil((hi - lo) / step) + 1), 361))
    values = np.linspace(lo, hi, count)
    step = (hi - lo) / max(count - 1, 1)
    from ..rotations import rotvec_to_matrix
    poses = np.tile(np.eye(4), (count, 1, 1))
    poses[:, :3, :3] = rotvec_to_matrix(values[:, None] * axis)
    return poses, 0.5 * math.tan(0.25 * step)


# ---------------------------------------------------------------------- building a model
def _checked_tolerance(tolerance):
    """Return ``tolerance`` [m] as a float (ModelError below MIN_TOLERANCE or not finite)."""
    tolerance = float(tolerance)
    if not (tolerance >= MIN_TOLERANCE and math.isfinite(tolerance)):
        raise ModelError(f'cover tolerance must be a number >= {MIN_TOLERANCE} m; got '
                         f'{tolerance}')
    return tolerance


@dataclasses.dataclass(frozen=True)
class _Source:
    """What ``from_urdf`` builds a model from (a coarse model keeps it for ``fine``)."""

    chain: object
    text: bytes
    path: str
    base_dir: str
    package_paths: tuple
    tolerance: float
    cache_dir: object
    item_edge: object
    key: object          # the model cache key (None: not stored)


def _build(cls, source, coarse):
    """Return the model of ``source`` (``from_urdf``), its covers coarse or fine; a fine one
    is stored in the model cache."""
    chain = source.chain
    robot, raw_links = _parse(source.text, source.path)
    # (The links a floating base adds are not in the URDF.)
    missing = [n for n in chain.link_names if n not in raw_links
               and n not in chain.floating_links]
    if missing:
        raise ModelError(f'the URDF does not match the chain: it lacks link(s) '
                         f'{", ".join(missing)}')
    attachments, group_parent, warnings = _attach(chain, robot, source.tolerance)
    notes = []
    geometry, link_covers = _cover_links(robot, raw_links, attachments, source, coarse,
                                         warnings, notes)
    for name in attachments:
        if name not in geometry and name in raw_links and raw_links[name]['unsupported']:
            warnings.append(f'link {name!r}: <collision> without supported geometry '
                            f'({raw_links[name]["unsupported"]}) left out')
    order = {n: i for i, n in enumerate(chain.link_names)}
    link_covers.sort(key=lambda item: (order.get(item[0], len(order)), item[0]))
    model = cls(chain, link_covers, attachments, geometry, warnings, 'urdf', source.tolerance,
                group_parent, source.path, tuple(raw_links))
    model.cache_dir = source.cache_dir
    for w in warnings:
        _LOG.warning('%s', w)
    if coarse:
        model.coarse_links, model._source = model.link_names, source
    else:
        _store_model(source.cache_dir, source.key, link_covers, attachments, geometry,
                     warnings, notes, group_parent, tuple(raw_links))
    return model


def _cover_links(robot, raw_links, attachments, source, coarse, warnings, notes):
    """Return ({link: [LinkGeometry]}, [(link, SphereCover)]) of the links with geometry;
    the links left out (unreadable meshes, sweeps beyond MAX_SWEEP) are added to
    ``warnings``. Fine covers log what they compute (``_CoverProgress``); coarse ones take
    a fraction of a second."""
    tolerance, cache_dir = source.tolerance, source.cache_dir
    geometry, link_covers = {}, []
    total = sum(1 for link in robot.links if link.collisions)
    with _computing(total, tolerance, cache_dir) as progress:
        for link in robot.links:
            items, unreadable = _link_geometry(link, raw_links.get(link.name),
                                               source.base_dir, source.package_paths)
            solid = [g for g in items if g.kind == 'mesh' or min(g.size) > 0.0]
            if len(solid) < len(items):
                # Drake's robots (Atlas, Valkyrie) mark their soles' contact points with
                # spheres of radius 0: nothing to collide, but support polygons use them.
                notes.append(f'link {link.name!r}: {len(items) - len(solid)} <collision> '
                             'shape(s) of zero size (contact points) left out of collision '
                             'checks; a support polygon still counts them')
                _LOG.info('%s', notes[-1])
                items = solid
            att = attachments.get(link.name)
            if not items or att is None:
                continue
            progress.link = link.name
            try:
                if unreadable is not None:
                    raise unreadable
                if att.swept:
                    travel = max(_sweep_travel(g, att, tolerance) for g in items)
                    if travel > MAX_SWEEP:
                        warnings.append(
                            f'link {link.name!r} is on a joint off the chain and its geometry '
                            f'moves up to {travel:.2f} m over that joint\'s range (more than '
                            f'{MAX_SWEEP} m): left out; put it on the chain (base/tip links) '
                            'or publish it as an obstacle')
                        continue
                cover = (_coarse_cover(items, att, tolerance, source.item_edge) if coarse
                         else _link_cover(link.name, items, att, tolerance, source.item_edge,
                                          cache_dir, notes))
            except _MeshUnreadable as exc:
                warnings.append(
                    f'link {link.name!r}: collision mesh {exc.uri!r} cannot be read, so the '
                    f'link has no collision geometry (no collision checks for it): '
                    f'{exc.reason}')
                continue
            finally:
                progress.done += 1
            geometry[link.name] = items
            link_covers.append((link.name, cover))
    return geometry, link_covers


def _far_over_budget(cover, tolerance, before=None):
    """True when ``cover``'s link covered again at the finer ``tolerance`` [m] would be far
    over its sphere budget, and so made coarser again (``_link_cover``): its sphere count,
    predicted to grow as the square of the excess ratio (1.5th to 4th power on TIAGo's
    links), or as it grew from ``before`` (the link's cover before a refinement; a power of
    2 to 6), passes 2 x LINK_SPHERES. TIAGo's torso_lift_link, 1830 spheres at 1 cm: 5083
    predicted at 6 mm, where it took 1.2 s to come back at 1.2 cm. Unitree H2's shoulder,
    348 spheres at 1 cm and 1559 at 6 mm (power 2.9): 7474 at 4 mm, 3508 predicted with the
    square, and the job that computed it (and again at 8 mm, for nothing) held up its
    torso's 4 mm cover (325 spheres) for 13 s under load."""
    power = 2.0
    if before is not None and before.max_excess > 1.05 * cover.max_excess and len(before):
        power = float(np.clip(np.log(len(cover) / len(before))
                              / np.log(before.max_excess / cover.max_excess), 2.0, 6.0))
    return len(cover) * (cover.max_excess / tolerance) ** power > 2 * LINK_SPHERES


def link_covers(geometry, attachments, tolerance, item_edge=None, cache_dir=None):
    """Return ({link: SphereCover}, notes): the fine covers of the <collision> elements
    ``geometry`` {link: [LinkGeometry]} on their ``attachments`` {link: how it rides on the
    chain} at ``tolerance`` [m] (``CollisionModel.fine_inputs``), logging what it computes;
    cache_dir as in ``from_urdf``. ModelError when a mesh can no longer be read."""
    covers, notes = {}, []
    with _computing(len(geometry), tolerance, cache_dir) as progress:
        for name, items in geometry.items():
            progress.link = name
            covers[name] = _link_cover(name, items, attachments[name], tolerance, item_edge,
                                       cache_dir, notes)
            progress.done += 1
    return covers, notes


@contextlib.contextmanager
def _computing(total, tolerance, cache_dir):
    """Yield the ``_CoverProgress`` of ``total`` links: once the first cover that is not in
    the disk cache is computed, log what is computed, and how far every few seconds."""
    where = ('not cached' if cache_dir == '' else
             f'cached afterwards in {cache_dir or default_cache_dir()}')
    progress = _CoverProgress(total)

    def announce():
        _LOG.info(f'computing the sphere covers of the collision geometry (tolerance '
                  f'{tolerance:g} m): seconds to a minute on the first start with this '
                  f'robot and tolerance, {where}')
        progress.start()
    with before_first_compute(announce), progress:
        yield progress


# ---------------------------------------------------------------------- covering elements
def _link_cover(name, items, att, tolerance, item_edge, cache_dir, notes):
    """Return the merged SphereCover of one link's <collision> elements ``items``: at
    ``tolerance``, or coarser (doubled, up to 8x; up to ROOT_COARSEST on the root body) while
    it has more than LINK_SPHERES spheres (noted in ``notes`` and the log)."""
    covers = [_cover_element(g, att, tolerance, item_edge, cache_dir) for g in items]
    coarse, edge = tolerance, item_edge
    most = (ROOT_COARSEST if att.body < 0 else 8.0) * tolerance
    while sum(len(c.radii) for c in covers) > LINK_SPHERES and coarse < most:
        coarse, edge = 2.0 * coarse, None if edge is None else 2.0 * edge
        covers = [_cover_element(g, att, coarse, edge, cache_dir) for g in items]
    if coarse != tolerance:
        notes.append(f'link {name!r}: its cover at tolerance {tolerance:g} m has more than '
                     f'{LINK_SPHERES} spheres; covered at {coarse:g} m '
                     f'({sum(len(c.radii) for c in covers)} spheres): a larger excess there, '
                     'less work per collision query')
        _LOG.info('%s', notes[-1])
    return _merge(covers)


def _cover_element(geom, att, tolerance, item_edge, cache_dir):
    """Return the SphereCover of one <collision> element in its body's frame."""
    placement = att.poses @ geom.origin                        # (K, 4, 4)
    if not att.swept:
        pose = placement[0]
        if geom.kind == 'sphere':
            return cover_sphere(geom.size[0]).transformed(pose)
        if geom.kind == 'box':
            return cover_box(geom.size, tolerance, item_edge, cache_dir).transformed(pose)
        if geom.kind == 'cylinder':
            return cover_cylinder(geom.size[0], geom.size[1], tolerance, item_edge,
                                  cache_dir).transformed(pose)
        vertices, faces = _element_mesh(geom, tolerance)
        return cover_mesh(vertices, faces, tolerance, item_edge, cache_dir=cache_dir) \
            .transformed(pose)
    # Swept over an off-chain joint: cover the mesh at consecutive sampled poses.
    if geom.kind == 'sphere':
        return _swept_sphere(geom.size[0], placement, att.sag)
    vertices, faces = _element_mesh(geom, tolerance)

    def compute():
        v, f, poses, factor, proxy = _swept_within_budget(
            geom, vertices, faces, placement, att.sag, tolerance, item_edge)
        sag = 0.0
        if factor:
            placed = _placed(poses, v)
            sag = factor * float(np.linalg.norm(np.diff(placed, axis=0), axis=-1).max())
        cover = cover_mesh(v, f, tolerance, item_edge, poses=poses, rotation_sag=sag,
                           cache_dir=cache_dir)
        return dataclasses.replace(cover, hull=True) if proxy else cover
    # Keyed by the element as given: the thinning and the proxy cost seconds on big meshes.
    return cached_cover(cache_dir, compute, 'swept', vertices, faces, placement,
                        float(att.sag), float(tolerance), item_edge, SWEPT_PIECES)


def _swept_sphere(radius, placement, sag):
    """Return the cover of a sphere (radius [m]) at the centres of ``placement`` (K, 4, 4),
    swept between them (``sag``: the arc's sag ratio of a revolute sweep, 0 for a
    translation)."""
    centers = placement[:, :3, 3]
    step = np.linalg.norm(np.diff(centers, axis=0), axis=-1)
    # Any point of the path is within half a chord plus the arc's sag of a sample.
    grow = (0.5 + sag) * float(step.max()) if len(step) else 0.0
    return SphereCover(centers, np.full(len(centers), radius + grow),
                       np.full(len(centers), grow))


# ---------------------------------------------------------------------- coarse covers
COARSE_TOLERANCE = 0.03   # [m] a coarse sphere reaches at most this far beyond its box
COARSE_SPHERES = 64       # most spheres of one element's coarse cover (a larger excess beyond)


def _coarse_cover(items, att, tolerance, item_edge=None):
    """Return a coarse conservative cover of one link's <collision> elements ``items``.

    Each element's bounding box (the smaller of the box along the body frame's axes and the
    one along the principal axes of its hull's vertices; for a swept element, of those
    vertices at every sampled pose, grown by the largest sag of their arcs between poses:
    the box holds the whole sweep), grown by what the fine cover may reach beyond the
    element (``_fine_reach``), is cut into equal cells, each covered by its circumscribed
    sphere: every point of the element, and of its fine cover, lies in the box, so in a
    sphere. Cells are refined until a sphere reaches at most COARSE_TOLERANCE beyond the
    box (or the element has COARSE_SPHERES). Milliseconds per element: what the node starts
    with while the fine covers are computed (``CollisionModel.fine``).
    """
    from scipy.spatial import cKDTree

    covers = []
    for geom in items:
        placement = att.poses @ geom.origin                    # (K, 4, 4)
        if geom.kind == 'sphere':
            covers.append(cover_sphere(geom.size[0]).transformed(placement[0])
                          if not att.swept else _swept_sphere(geom.size[0], placement, att.sag))
            continue
        points, slack = _element_points(geom, tolerance)
        hull = _hull_vertices(points)
        placed = _placed(placement, hull)
        sag = 0.0
        if att.sag:
            sag = att.sag * float(np.linalg.norm(np.diff(placed, axis=0), axis=-1).max())
        grow = sag + _fine_reach(geom, att, tolerance, item_edge, hull)
        placed = placed.reshape(-1, 3)
        centers, radius = _box_spheres(placed, grow)
        # Within far + slack of the centre lies a point of the element: an excess bound.
        far = cKDTree(placed).query(centers)[0] + slack
        covers.append(SphereCover(centers, np.full(len(centers), radius), radius + far))
    return _merge(covers)


def _fine_reach(geom, att, tolerance, item_edge, hull):
    """Return how far [m] beyond the element (over its sweep) its fine cover may reach: the
    tolerance (1.1 x: a cylinder's prism adds a tenth), for a swept element the sag of the
    thinned steps (at most tan(pi / 8) / 2 of a step that moves a vertex by the tolerance)
    or, when it is covered through a convex proxy (``_proxy``), the sag of the proxy's own
    steps (what its fine cover adds) and the diagonal of the proxy's lattice cells: the
    cell the fine cover uses, not the 4 x tolerance it may reach (a bound for 4 x froze
    TIAGo's shoulders against its head's coarse cover for a minute of a first start). A link
    whose fine cover is made coarser for its sphere budget (LINK_SPHERES, logged) can reach
    farther."""
    reach = 1.1 * tolerance
    if not att.swept:
        return reach
    if geom.kind == 'mesh':
        vertices, faces = _element_mesh(geom, tolerance)
        placement, factor = _thinned_sweep(hull, att.poses @ geom.origin, att.sag, tolerance)
        if _over_budget(vertices, faces, placement, tolerance, item_edge):
            proxy, cell = _proxy(vertices, len(placement) - 1, tolerance, item_edge)
            placed = _placed(placement, np.asarray(proxy.vertices))
            sag = factor * float(np.linalg.norm(np.diff(placed, axis=0), axis=-1).max()) \
                if factor and len(placed) > 1 else 0.0
            return reach + sag + math.sqrt(3.0) * cell
    return reach + 0.21 * tolerance


def _element_points(geom, tolerance):
    """Return ((P, 3) points whose convex hull holds the element, in its own frame; slack:
    how far [m] a point can be from the element): a mesh's vertices, a box's corners, the
    corners of the box around a cylinder (r (sqrt 2 - 1) from its side) or a capsule
    (r (sqrt 3 - 1) from its caps)."""
    if geom.kind == 'mesh':
        return _element_mesh(geom, tolerance)[0], 0.0
    slack = 0.0
    if geom.kind == 'box':
        half = 0.5 * np.asarray(geom.size, dtype=float)
    else:   # cylinder and capsule: (radius, length) along z
        radius, length = geom.size
        capsule = geom.kind == 'capsule'
        half = np.array([radius, radius, 0.5 * length + (radius if capsule else 0.0)])
        slack = radius * (math.sqrt(3.0 if capsule else 2.0) - 1.0)
    corners = np.stack(np.meshgrid([-1.0, 1.0], [-1.0, 1.0], [-1.0, 1.0], indexing='ij'), -1)
    return corners.reshape(-1, 3) * half, slack


def _hull_vertices(points):
    """Return the vertices of the convex hull of ``points`` (all of them when flat)."""
    from scipy.spatial import ConvexHull, QhullError

    if len(points) <= 16:
        return points
    try:
        return points[ConvexHull(points).vertices]
    except (QhullError, ValueError):
        return points


def _box_spheres(points, grow=0.0):
    """Return (centres (S, 3), radius): the circumscribed spheres of the cells of a box
    around ``points`` (P, 3), grown by ``grow`` [m] on every side (see ``_coarse_cover``)."""
    boxes = []
    for axes in (np.eye(3), np.linalg.svd(points - points.mean(axis=0),
                                          full_matrices=False)[2]):
        local = points @ axes.T
        lo, hi = local.min(axis=0) - grow, local.max(axis=0) + grow
        boxes.append((float(np.prod(np.maximum(hi - lo, 1e-9))), axes, lo, hi))
    _, axes, lo, hi = min(boxes, key=lambda box: box[0])
    side = np.maximum(hi - lo, 1e-6)
    count = np.ones(3, dtype=np.int64)
    while True:
        cell = side / count
        reach = 0.5 * (np.linalg.norm(cell) - cell.min())   # beyond the box, at most
        if reach <= COARSE_TOLERANCE or np.prod(count) * 2 > COARSE_SPHERES:
            break
        count[np.argmax(cell)] += 1
    grid = np.stack(np.meshgrid(*[(np.arange(n) + 0.5) / n for n in count], indexing='ij'),
                    -1).reshape(-1, 3)
    centers = (lo + grid * (hi - lo)) @ axes
    return centers, 0.5 * float(np.linalg.norm((hi - lo) / count)) * (1.0 + 1e-9) + 1e-12


SWEPT_PIECES = 200_000     # surface pieces x pose steps of one swept element (memory, time)


def _thinned(placement, factor, k):
    """Return (every k-th pose and the last, the sag factor of the k times larger step)."""
    if k <= 1 or len(placement) <= 2:
        return placement, factor
    keep = np.unique(np.r_[np.arange(0, len(placement), k), len(placement) - 1])
    if factor:      # revolute: factor = tan(step / 4) / 2 of the sampled step
        factor = 0.5 * math.tan(k * math.atan(2.0 * factor))
    return placement[keep], factor


def _thinned_sweep(vertices, placement, factor, tolerance):
    """Return (placement, sag factor) thinned to a step that moves no vertex more than
    ``tolerance`` (at most 90 degrees; see ``_swept_within_budget``)."""
    moved = _placed(placement[:2], vertices)
    chord = float(np.linalg.norm(moved[-1] - moved[0], axis=-1).max())
    k = int(tolerance / chord) if chord > 0.0 else len(placement)
    if factor:
        k = min(k, max(1, int((0.5 * math.pi) / (4.0 * math.atan(2.0 * factor)))))
    return _thinned(placement, factor, max(k, 1))


def _over_budget(vertices, faces, placement, tolerance, item_edge):
    """True when the pieces of a swept mesh over its (thinned) ``placement`` exceed
    SWEPT_PIECES: it is covered through a convex proxy (``_swept_within_budget``)."""
    edge = tolerance if item_edge is None else item_edge     # cover_mesh's default
    return len(bisect_triangles(vertices[faces], edge)) * (len(placement) - 1) > SWEPT_PIECES


def _swept_within_budget(geom, vertices, faces, placement, factor, tolerance, item_edge):
    """Return (vertices, faces, placement, sag factor, proxy) of a swept mesh to cover.

    The joint sweep samples a step that moves a point 1 m from the axis by ``tolerance``;
    a small part moves far less, so poses are kept only as often as a vertex moves by
    ``tolerance`` (at most 90 degrees apart; the arc's sag bound grows to match). Where the
    surface pieces times the steps still exceed ``SWEPT_PIECES`` (a high-poly finger over
    its range: millions of pieces, gigabytes of memory; its convex hull can have as many
    faces), a coarse convex proxy that contains the mesh is covered instead: the hull of
    the corners of the lattice cells (``tolerance`` / 4, doubled until it fits) holding the
    vertices (conservative; ``proxy`` True, logged).
    """
    placement, factor = _thinned_sweep(vertices, placement, factor, tolerance)
    if not _over_budget(vertices, faces, placement, tolerance, item_edge):
        return vertices, faces, placement, factor, False
    hull, cell = _proxy(vertices, len(placement) - 1, tolerance, item_edge)
    _LOG.info('swept %s (%d faces, %d poses): covering a convex proxy of %d faces '
              '(lattice %.4f m; SWEPT_PIECES %d)', geom.uri or geom.kind, len(faces),
              len(placement), len(hull.faces), cell, SWEPT_PIECES)
    return np.asarray(hull.vertices), np.asarray(hull.faces), placement, factor, True


def _proxy(vertices, steps, tolerance, item_edge):
    """Return (hull, cell [m]): the convex proxy of a swept mesh (``_swept_within_budget``)
    and the edge of its lattice cells, the finest of tolerance / 4 doubled (4 x tolerance
    at most) whose surface pieces over ``steps`` pose steps fit SWEPT_PIECES."""
    import trimesh

    edge = tolerance if item_edge is None else item_edge     # cover_mesh's default
    corners = np.stack(np.meshgrid([0, 1], [0, 1], [0, 1], indexing='ij'), -1).reshape(-1, 3)
    cell = 0.25 * tolerance
    while True:
        cells = np.unique(np.floor(vertices / cell).astype(np.int64), axis=0)
        points = np.unique((cells[:, None, :] + corners[None]).reshape(-1, 3), axis=0) * cell
        hull = trimesh.points.PointCloud(points).convex_hull
        if len(bisect_triangles(hull.triangles, edge)) * steps <= SWEPT_PIECES \
                or cell >= 4.0 * tolerance:
            return hull, cell
        cell *= 2.0


def _placed(poses, vertices):
    """Return (K, V, 3): ``vertices`` (V, 3) at each of ``poses`` (K, 4, 4) (a batched
    product: einsum took a second for a 12 000-vertex finger over 159 poses)."""
    return np.matmul(vertices[None], np.swapaxes(poses[:, :3, :3], 1, 2)) + \
        poses[:, None, :3, 3]


def _sweep_travel(geom, att, tolerance):
    """Return the longest path [m] a point of ``geom`` travels over its sampled poses.

    A point's path length sum_k |T_k p - T_(k-1) p| is convex in p, so its largest value on
    the mesh is at a vertex of the convex hull: only those are placed (every start of a
    robot with a swept high-poly mesh paid for all of them: 3.9 s for Unitree Z1's finger).
    """
    from scipy.spatial import ConvexHull, QhullError

    vertices, _ = _element_mesh(geom, tolerance)
    if len(vertices) > 16:
        try:
            vertices = vertices[ConvexHull(vertices).vertices]
        except (QhullError, ValueError):     # flat or degenerate: every vertex
            pass
    placement = att.poses @ geom.origin
    placed = _placed(placement, vertices)
    return float(np.linalg.norm(np.diff(placed, axis=0), axis=-1).sum(axis=0).max())


def _element_mesh(geom, tolerance):
    import trimesh

    if geom.kind == 'mesh':
        try:
            return load_mesh(geom.mesh_path, geom.scale)
        except ModelError as exc:
            raise _MeshUnreadable(geom.uri, str(exc)) from None
    if geom.kind == 'box':
        mesh = trimesh.creation.box(extents=np.asarray(geom.size, dtype=float))
    elif geom.kind == 'cylinder':
        n = cylinder_sections(geom.size[0], 0.1 * tolerance)
        mesh = trimesh.creation.cylinder(radius=geom.size[0] / math.cos(math.pi / n),
                                         height=geom.size[1], sections=n)
    elif geom.kind == 'capsule':
        # A capsule is a cylinder with hemispherical caps: an icosphere-based capsule mesh
        # is inscribed, so grow it until its flat facets clear the true surface.
        mesh = trimesh.creation.capsule(height=geom.size[1], radius=geom.size[0], count=[32, 32])
        grow = geom.size[0] * (1.0 / math.cos(math.pi / 32) ** 2 - 1.0)
        mesh = trimesh.creation.capsule(height=geom.size[1], radius=geom.size[0] + grow,
                                        count=[32, 32])
    else:  # sphere (swept case handled by the caller)
        mesh = trimesh.creation.icosphere(subdivisions=3, radius=geom.size[0] * 1.01)
    return np.asarray(mesh.vertices), np.asarray(mesh.faces)


# ---------------------------------------------------------------------- the model cache
def _model_key(chain, text, base_dir, package_paths, tolerance, item_edge):
    """Return the model cache key of ``from_urdf``'s arguments (``model_cache``), or None when
    the URDF or a collision mesh it names cannot be found or read here (the build then leaves
    that link out and warns, at every build: nothing is stored for that state)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = model_cache.source_digest(
        os.path.abspath(__file__), os.path.join(here, 'covers.py'), *_MODEL_SOURCES)
    if code is None:
        return None
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError:
        return None
    meshes = []
    for mesh in root.iterfind('./link/collision/geometry/mesh'):    # not <visual> ones
        uri = mesh.get('filename')
        if uri is None:
            continue
        try:
            path = resolve_mesh_uri(uri, base_dir, package_paths)
            with open(path, 'rb') as f:
                meshes += [uri, path, f.read()]
        except (ModelError, OSError):
            return None
    records, origins = joints_to_records(chain.tree_joints)
    return model_cache.digest(
        'collision-model', code, model_cache.versions('yourdfpy', 'trimesh'), text,
        json.dumps(records), origins, chain.base_link, chain.tip_links, base_dir,
        package_paths, float(tolerance), item_edge, *meshes)


def _cached_model(cls, chain, cache_dir, key, tolerance, path):
    """Return the model stored under ``key`` (its warnings and notes logged again), or None."""
    hit = model_cache.load(cache_dir, 'collision', key)
    if hit is None:
        return None
    meta, arrays = hit
    try:
        link_covers, start = [], 0
        for name, hull, count in meta['covers']:
            stop = start + count
            link_covers.append((name, SphereCover(arrays['centers'][start:stop],
                                                  arrays['radii'][start:stop],
                                                  arrays['excess'][start:stop], hull)))
            start = stop
        attachments, start = {}, 0
        for name, body, group, sag, count in meta['attachments']:
            attachments[name] = _Attachment(body, arrays['poses'][start:start + count], group,
                                            sag)
            start += count
        geometry, start = {}, 0
        for link, items in meta['geometry']:
            geometry[link] = [LinkGeometry(link, kind, arrays['origins'][start + k], tuple(size),
                                           mesh_path, tuple(scale), uri)
                              for k, (kind, size, mesh_path, scale, uri) in enumerate(items)]
            start += len(items)
        model = cls(chain, link_covers, attachments, geometry, meta['warnings'], 'urdf',
                    tolerance, meta['group_parent'], path, tuple(meta['urdf_links']))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        _LOG.warning('ignoring a collision model cache entry of another layout (%s: %s): '
                     'computing the model again', type(exc).__name__, exc)
        return None
    model.cache_dir = cache_dir
    for note in meta['notes']:
        _LOG.info('%s', note)
    for w in model.warnings:
        _LOG.warning('%s', w)
    return model


def _store_model(cache_dir, key, link_covers, attachments, geometry, warnings, notes,
                 group_parent, urdf_links):
    """Store what ``_cached_model`` rebuilds the model from under ``key``."""
    if key is None:
        return
    items = [g for link_items in geometry.values() for g in link_items]
    meta = {
        'covers': [[name, bool(c.hull), len(c)] for name, c in link_covers],
        'attachments': [[name, int(a.body), int(a.group), float(a.sag), len(a.poses)]
                        for name, a in attachments.items()],
        'geometry': [[link, [[g.kind, [float(v) for v in g.size], g.mesh_path,
                              [float(v) for v in g.scale], g.uri] for g in link_items]]
                     for link, link_items in geometry.items()],
        'warnings': list(warnings), 'notes': list(notes),
        'group_parent': [int(v) for v in group_parent], 'urdf_links': list(urdf_links)}

    def stack(arrays, shape):
        return np.concatenate(arrays) if arrays else np.zeros((0,) + shape)
    model_cache.store(cache_dir, 'collision', key, meta, {
        'centers': stack([c.centers for _, c in link_covers], (3,)),
        'radii': stack([c.radii for _, c in link_covers], ()),
        'excess': stack([c.excess for _, c in link_covers], ()),
        'poses': stack([np.asarray(a.poses, dtype=float) for a in attachments.values()],
                       (4, 4)),
        'origins': np.array([np.asarray(g.origin, dtype=float) for g in items],
                            dtype=float).reshape(len(items), 4, 4)})


def _merge(covers):
    covers = [c for c in covers if len(c)]
    if not covers:
        return SphereCover(np.zeros((0, 3)), np.zeros(0), np.zeros(0))
    return SphereCover(np.concatenate([c.centers for c in covers]),
                       np.concatenate([c.radii for c in covers]),
                       np.concatenate([c.excess for c in covers]),
                       any(c.hull for c in covers))


def _ro(arr):
    arr.setflags(write=False)
    return arr
