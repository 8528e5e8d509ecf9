"""The records the kernels read: what is constant for a model, packed once into tuples.

A kernel's signature is ``(records, inputs, out)``. docs/kernels.md ("Records") says who
builds each record and why it is a plain tuple that a kernel unpacks once, at its entry. The
layouts below name the fields in order; ``Layout.pack`` converts each to the type the kernels
are compiled for: float64, int64 or bool arrays of the layout's rank, C-contiguous and
writable (another array type would compile another specialisation at its first call, in a
tick), Python int or float scalars. ``Chain.records`` is ``CHAIN.view`` of the chain's four.
"""

from collections import namedtuple

import numpy as np

__all__ = ['BODIES', 'CHAIN', 'COLUMNS', 'JOINTS', 'LINKS', 'LM', 'Layout', 'MOTION',
           'OBSTACLES', 'PAIRS', 'ROBOT', 'TARGETS']

_F, _I, _B = np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.bool_)


class Layout:
    """The named, typed fields of one record: (name, dtype, rank) each; rank 0 is a Python
    scalar (dtype int or float), a nested layout a record of its own."""

    def __init__(self, name, fields):
        self.name = name
        self.fields = tuple(fields)
        self.names = tuple(f[0] for f in self.fields)
        self._view = namedtuple(name.title().replace(' ', ''), self.names)

    def pack(self, **values):
        """Return the record (a tuple) of ``values``, one per field, converted to its type."""
        missing = [n for n in self.names if n not in values]
        extra = [n for n in values if n not in self.names]
        if missing or extra:
            raise TypeError(f'{self.name} record: fields {list(self.names)}; missing '
                            f'{missing}, unknown {extra}')
        return tuple(_convert(self.name, field, values[field[0]]) for field in self.fields)

    def replace(self, record, **values):
        """Return ``record`` with the fields ``values`` replaced, converted like ``pack``'s
        (a record built once, with the fields that change per call renewed)."""
        out = list(record)
        for name, value in values.items():
            if name not in self.names:
                raise TypeError(f'{self.name} record: fields {list(self.names)}; unknown '
                                f'{name!r}')
            i = self.names.index(name)
            out[i] = _convert(self.name, self.fields[i], value)
        return tuple(out)

    def view(self, record):
        """Return ``record`` as a namedtuple of this layout (to read it by name in Python)."""
        return self._view(*record)


def _convert(layout, field, value):
    name, kind, rank = field
    if isinstance(kind, Layout):
        return value if isinstance(value, tuple) else kind.pack(**value)
    if rank == 0:
        return kind(value)
    arr = np.asarray(value)
    if arr.ndim != rank:
        raise ValueError(f'{layout} record: {name} must have {rank} dimensions; got shape '
                         f'{arr.shape}')
    if arr.dtype == kind and arr.flags.c_contiguous and arr.flags.writeable:
        return arr
    return np.array(arr, dtype=kind, order='C')


# ---------------------------------------------------------------------------- the chain
# B bodies (one per movable joint, tree order: a parent's index is below its children's),
# C Jacobian columns (one per revolute or prismatic body, three per ball body), L links,
# nq configuration entries, S scalar joints, K ball joints.
BODIES = Layout('bodies', [
    ('parent', _I, 1),        # (B,) parent body, -1: the base
    ('kind', _I, 1),          # (B,) 0 revolute, 1 prismatic, 2 ball
    ('q_index', _I, 1),       # (B,) first configuration entry driving the body (mimic: source's)
    ('mimic_mult', _F, 1),    # (B,) joint value = mimic_mult * q + mimic_add (1, 0 if no mimic)
    ('mimic_add', _F, 1),
    ('rot0', _F, 3),          # (B, 3, 3) the joint frame's rotation in the parent body's frame
    ('terms', _F, 3),         # (B, 2, 9) R0 K and R0 K^2 (K = skew(axis)), row-major
    ('offset', _F, 2),        # (B, 3) the joint frame's origin in the parent body's frame [m]
    ('axis', _F, 2),          # (B, 3) unit joint axis in the joint frame
])
COLUMNS = Layout('columns', [
    ('body', _I, 1),          # (C,) the body each column moves
    ('axis', _F, 2),          # (C, 3) its unit axis in that body's frame
    ('is_rotation', _B, 1),   # (C,) True for rotations (revolute, ball), False for slides
    ('tangent', _I, 1),       # (C,) the tangent entry it drives
    ('factor', _F, 1),        # (C,) with this factor (the mimic multiplier, else 1)
    ('moves', _B, 2),         # (B + 1, C) column c moves body b (row b + 1; row 0: the base)
    ('nv', int, 0),           # tangent entries
])
LINKS = Layout('links', [
    ('body', _I, 1),          # (L,) the body each link is fixed to (-1: the base)
    ('offset', _F, 3),        # (L, 4, 4) the link's pose in that body's frame [m]
])
JOINTS = Layout('joints', [
    ('lower', _F, 1),         # (nq,) position limits [rad or m] (ball entries: -1)
    ('upper', _F, 1),         # (nq,) (ball entries: 1)
    ('scalar_q', _I, 1),      # (S,) configuration entries of the scalar joints
    ('scalar_v', _I, 1),      # (S,) their tangent entries
    ('continuous', _B, 1),    # (S,) continuous scalar joints
    ('ball_q', _I, 2),        # (K, 4) configuration entries (w, x, y, z) of the ball joints
    ('ball_v', _I, 2),        # (K, 3) their tangent entries
    ('ball_limit', _F, 1),    # (K,) their angle limits [rad]
])
# Chain.records: CHAIN.view(...), a namedtuple of the four (kernels take the ones they read).
CHAIN = Layout('chain records', [('bodies', BODIES, 0), ('columns', COLUMNS, 0),
                                 ('links', LINKS, 0), ('joints', JOINTS, 0)])

# ---------------------------------------------------------------------------- the refinement
TARGETS = Layout('targets', [          # T targets, m whitened residual rows in all
    ('body', _I, 1),                      # (T,) the body each target frame is fixed to (-1: base)
    ('offset', _F, 3),                    # (T, 4, 4) the target frame in that body's frame
    ('kind', _I, 1),                      # (T,) 0 pose (6 rows), 1 position (3), 2 orientation (3)
    ('goal', _F, 3),                      # (T, 4, 4) the goal pose in the base frame [m]
    ('whiten', _F, 3),                    # (T, 6, 6) residual -> whitened rows (diagonal: the
                                          # sigmas' sqrt(weight) / sigma; full: sqrt(w) L^-1)
    ('full', _B, 1),                      # (T,) a full covariance (else the diagonal)
    ('weight', _F, 1),                    # (T,) cost = weight ((p / sigma_p)^2 + (o / sigma_o)^2)
    ('sigma_position', _F, 1),            # (T,) [m]
    ('sigma_orientation', _F, 1),         # (T,) [rad]
    ('position_tolerance', float, 0),     # [m] the solution tolerance
    ('orientation_tolerance', float, 0),  # [rad]
    ('rows', int, 0),                     # m
])
LM = Layout('lm', [
    ('steps', int, 0),                    # LM steps per row
    ('alphas', _F, 1),                    # step fractions tried per step
    ('damping', float, 0),                # the damping floor (lam = cost_damping cost + damping)
    ('max_step', float, 0),               # [rad or m] largest joint change of a step
    ('cost_damping', float, 0),           # the damping per unit cost (Sugihara's: 1 / 2)
])
MOTION = Layout('motion', [
    ('spring', float, 0),                 # weight of the prior's spring (SPRING * spring)
    ('spring_fade', float, 0),            # the spring fades out below this many ...
    ('tolerance_cost', float, 0),         # ... times the cost at the tolerance
    ('gain', float, 0),                   # null-space pull towards the reference
    ('slide_min', float, 0),              # [rad] a pull this long is corrected (Gauss-Newton)
    ('precise_fraction', float, 0),       # rows within this fraction of the tolerance: precise
    ('weights', _F, 1),                   # (nv,) the prior's joint weights
    ('reference', _F, 1),                 # (nv,) its reference configuration
])

# ---------------------------------------------------------------------------- collision
# S robot spheres, T rows (sphere centres then link centres), L links, Q parts.
ROBOT = Layout('robot', [
    ('row_body', _I, 1),          # (T,) each row's body (-1: the base)
    ('row_local', _F, 2),         # (T, 3) each row's point in its body's frame [m]
    ('radii', _F, 1),             # (S,) sphere radii [m]
    ('sphere_row', _I, 1),        # (S,) each sphere's row
    ('link_row', _I, 1),          # (L,) each link's bounding-sphere centre row
    ('link_radius', _F, 1),       # (L,) its radius [m]
    ('link_sphere_start', _I, 1),  # (L,) each link's spheres: start ...
    ('link_sphere_count', _I, 1),  # ... and count
    ('sphere_part', _I, 1),       # (S,) each sphere's part
    ('part_local', _F, 2),        # (Q, 3) each part's bounding-sphere centre in its body [m]
    ('part_body', _I, 1),         # (Q,) its body
    ('part_radius', _F, 1),       # (Q,) its radius [m]
])
PAIRS = Layout('pairs', [
    ('pairs', _I, 2),             # (P, 2) self-collision link pairs
    ('table_of_pair', _I, 1),     # (P,) each pair's lookup table (-1: none)
    ('qcols', _I, 2),             # (Pt, 2) the tables' joints
    ('low', _F, 2),               # (Pt, 2) their grids' lower ends ...
    ('step', _F, 2),              # ... cell widths ...
    ('size', _I, 2),              # ... and cell counts
    ('offset', _I, 1),            # (Pt,) each table's first value
    ('values', _F, 1),            # the tables' lower bounds of the gap [m]
    ('subset_limit', _F, 1),      # (P,) padded thresholds up to which the subsets are complete
    ('sphere_index', _I, 1),      # sphere numbers that the ranges below index
    ('sphere_ranges', _I, 2),     # (P, 4) the subsets (a start, a count, b start, b count)
    ('full_ranges', _I, 2),       # (P, 4) the whole links
])
OBSTACLES = Layout('obstacles', [
    ('pair_link', _I, 1),         # (K,) link of each link/obstacle pair ...
    ('pair_obj', _I, 1),          # ... and its obstacle
    ('obj_center', _F, 2),        # (O, 3) obstacle bounding spheres [m] ...
    ('obj_radius', _F, 1),
    ('obj_part_start', _I, 1),    # (O,) each obstacle's parts
    ('obj_part_count', _I, 1),
    ('part_center', _F, 2),       # (Q, 3) part bounding spheres [m]
    ('part_radius', _F, 1),
    ('part_start', _I, 1),        # (Q,) each part's primitives
    ('part_count', _I, 1),
    ('kind', _I, 1),              # (G,) primitive kind: 0 sphere, 1 box, 2 cylinder
    ('rot', _F, 3),               # (G, 3, 3) primitive rotation in the base frame
    ('trans', _F, 2),             # (G, 3) primitive centre [m]
    ('size', _F, 2),              # (G, 3) radius / half extents / (radius, half length) [m]
])
