"""Collision kernels: the three-level broad phase and the distance gradients.

Records (``records``): the chain's columns (``Chain.records``); ``robot`` the robot's spheres,
parts and link bounds (``records.ROBOT``, ``RobotGeometry.record``); ``self_pairs`` the
self-collision pairs and their lookup tables (``records.PAIRS``); ``obstacles`` the scene
(``records.OBSTACLES``, ``ObstacleGeometry.record``). Frames: rot (B, N, 3, 3), pos
(B, N, 3) of ``fk``.
"""

import math

import numpy as np

from .jit import njit

__all__ = ['collision_query', 'distance_gradients', 'leaf_buffers']


@njit(cache=True, inline='always')
def _point_gradient(columns, rot, pos, i, body, point, grad, out):
    """Add grad . J(point) (3,) . (3, nv) into out (nv,): J the linear Jacobian of ``point``
    (base frame) moving with ``body`` at configuration i (the chain's columns record)."""
    col_body, col_axis, col_rot, col_v, col_mult, body_mask, _ = columns
    m = body + 1
    for c in range(col_body.shape[0]):
        if not body_mask[m, c]:
            continue
        b = col_body[c]
        a0 = rot[b, i, 0, 0] * col_axis[c, 0] + rot[b, i, 0, 1] * col_axis[c, 1] \
            + rot[b, i, 0, 2] * col_axis[c, 2]
        a1 = rot[b, i, 1, 0] * col_axis[c, 0] + rot[b, i, 1, 1] * col_axis[c, 1] \
            + rot[b, i, 1, 2] * col_axis[c, 2]
        a2 = rot[b, i, 2, 0] * col_axis[c, 0] + rot[b, i, 2, 1] * col_axis[c, 1] \
            + rot[b, i, 2, 2] * col_axis[c, 2]
        if col_rot[c]:
            l0 = point[0] - pos[b, i, 0]
            l1 = point[1] - pos[b, i, 1]
            l2 = point[2] - pos[b, i, 2]
            j0 = a1 * l2 - a2 * l1
            j1 = a2 * l0 - a0 * l2
            j2 = a0 * l1 - a1 * l0
        else:
            j0, j1, j2 = a0, a1, a2
        f = col_mult[c]
        out[col_v[c]] += grad[0] * (j0 * f) + grad[1] * (j1 * f) + grad[2] * (j2 * f)


@njit(cache=True)
def distance_gradients(columns, rot, pos, leaves):
    """Return (R, nv): d distance / d tangent step of R leaves, ``grad . (J_a - J_b)``.

    leaves: (n (R,) each leaf's configuration; body_a (R,), point_a (R, 3) its robot
    sphere's body and centre (base frame); body_b (R,), point_b (R, 3) the other sphere's
    for a self pair, body_b < -1 for an obstacle (no second term); grad (R, 3) the
    distance's gradient in point a).
    """
    n, body_a, point_a, body_b, point_b, grad = leaves
    nv = columns[6]
    out = np.zeros((n.shape[0], nv))
    ta = np.empty(nv)
    tb = np.empty(nv)
    for r in range(n.shape[0]):
        ta[:] = 0.0
        tb[:] = 0.0
        _point_gradient(columns, rot, pos, n[r], body_a[r], point_a[r], grad[r], ta)
        if body_b[r] >= -1:          # a robot sphere (an obstacle: no second term)
            _point_gradient(columns, rot, pos, n[r], body_b[r], point_b[r], grad[r], tb)
        for v in range(nv):
            out[r, v] = ta[v] - tb[v]
    return out


@njit(cache=True)
def _to_base(rot, pos, b, n, x, y, z):
    """Return the base-frame position of the point (x, y, z) [m] of body b (-1: the base)
    at configuration n."""
    if b < 0:
        return x, y, z
    return (rot[b, n, 0, 0] * x + rot[b, n, 0, 1] * y + rot[b, n, 0, 2] * z + pos[b, n, 0],
            rot[b, n, 1, 0] * x + rot[b, n, 1, 1] * y + rot[b, n, 1, 2] * z + pos[b, n, 1],
            rot[b, n, 2, 0] * x + rot[b, n, 2, 1] * y + rot[b, n, 2, 2] * z + pos[b, n, 2])


# [m] how far a part's bound must clear a test before its spheres are skipped: the bound
# never exceeds a member sphere's own value, but the two are rounded differently.
_PART_SLACK = 1e-9


@njit(cache=True)
def _near_spheres(robot, rot, pos, n, spheres, center, radius, limit, keep, points):
    """Keep the robot spheres ``spheres`` (sphere_index, indexed, start, count: the spheres
    start..start+count, through ``sphere_index`` when ``indexed``) whose distance to the
    sphere (center, radius) is below ``limit`` at configuration n: their indices to
    keep[:k], their base-frame centres to points[:k]; return k. A run of spheres of one part
    (the spheres are stored part by part) is skipped when the part's bounding sphere is
    clear, so a large link (a torso of 1800 spheres) costs its parts, not its spheres; the
    spheres kept and their order are those of the sphere-by-sphere test."""
    (row_body, row_local, radii, sph_row, _, _, _, _, sphere_part, rpart_local, rpart_body,
     rpart_radius) = robot
    sphere_index, indexed, start, count = spheres
    k = 0
    current, clear = -1, False
    cx, cy, cz = center[0], center[1], center[2]
    for j in range(count):
        s = sphere_index[start + j] if indexed else start + j
        part = sphere_part[s]
        if part != current:
            current = part
            x, y, z = _to_base(rot, pos, rpart_body[part], n, rpart_local[part, 0],
                               rpart_local[part, 1], rpart_local[part, 2])
            dx, dy, dz = x - cx, y - cy, z - cz
            clear = (math.sqrt(dx * dx + dy * dy + dz * dz) - rpart_radius[part] - radius
                     >= limit + _PART_SLACK)
        if clear:
            continue
        r = sph_row[s]
        x, y, z = _to_base(rot, pos, row_body[r], n, row_local[r, 0], row_local[r, 1],
                           row_local[r, 2])
        dx, dy, dz = x - cx, y - cy, z - cz
        if math.sqrt(dx * dx + dy * dy + dz * dz) - radii[s] - radius < limit:
            keep[k] = s
            points[k, 0], points[k, 1], points[k, 2] = x, y, z
            k += 1
    return k


@njit(cache=True)
def _runs(robot, rot, pos, n, keep, k, runs):
    """Group the kept spheres keep[:k] (stored part by part, so a part's are consecutive)
    into runs of one part: run r is keep[start[r]:start[r + 1]], its part's bounding sphere
    centre[r] (base frame, configuration n) and radius[r]; return the number of runs."""
    (_, _, _, _, _, _, _, _, sphere_part, rpart_local, rpart_body, rpart_radius) = robot
    start, centre, radius = runs
    count, current = 0, -1
    for i in range(k):
        part = sphere_part[keep[i]]
        if part != current:
            current = part
            start[count] = i
            centre[count, 0], centre[count, 1], centre[count, 2] = _to_base(
                rot, pos, rpart_body[part], n, rpart_local[part, 0], rpart_local[part, 1],
                rpart_local[part, 2])
            radius[count] = rpart_radius[part]
            count += 1
    start[count] = k
    return count


@njit(cache=True, inline='always')
def _clear(centre, r, x, y, z, radius, limit):
    """True when the sphere (x, y, z, radius) is at least ``limit`` (+ slack) away from the
    part bound ``centre[r]``: none of the part's spheres can come below ``limit``."""
    dx, dy, dz = x - centre[r, 0], y - centre[r, 1], z - centre[r, 2]
    return math.sqrt(dx * dx + dy * dy + dz * dz) - radius >= limit + _PART_SLACK


@njit(cache=True, inline='always')
def _put(out, m, n, pair, a, b, d, is_self):
    """Write leaf m (n, pair, a, b, d, is_self) into the output arrays ``out`` when it fits
    (the caller counts every leaf and calls again with room for all when some did not fit)."""
    out_n, out_p, out_a, out_b, out_d, out_s = out
    if m < out_d.shape[0]:
        out_n[m], out_p[m], out_a[m], out_b[m], out_d[m], out_s[m] = n, pair, a, b, d, is_self


@njit(cache=True)
def collision_query(robot, self_pairs, obstacles, rot, pos, q, threshold, padding, mode, out):
    """Write the leaf pairs of ``engine.query`` below ``threshold`` [m] to the output arrays
    ``out`` (n, pair, a, b, d, is_self: ``leaf_buffers``; as many as fit) and return their
    count (the caller calls again with room for all when it exceeds the arrays' length:
    growing arrays inside the loops would cost reference counting on every sphere pair),
    the same three-level broad phase in one pass per configuration.

    mode: 0 every leaf below ``threshold``; 1 (nearest) only each configuration's closest
    leaf; 2 (per pair) only the closest leaf of each (configuration, object pair). Modes 1
    and 2 prune by branch and bound: the threshold drops to the best distance found so far
    (of the configuration, of the pair), so the broad phase and the leaf loop skip what
    cannot be closer. Ties keep the first leaf found, as a stable sort of mode 0's leaves
    by distance would.

    rot, pos: the body frames of N configurations; q (N, nq): the configurations (for the
    pair tables); padding [m]: subtracted from every distance. The robot's rows (sphere
    centres and link centres) are moved to the base frame only when the broad phase reaches
    them; a part's spheres are skipped when the part's bound is clear. The leaves come
    configuration by configuration, self pairs before obstacle pairs.
    """
    (row_body, row_local, radii, sph_row, link_row, link_radius, link_sphere_start,
     link_sphere_count, _, _, _, _) = robot
    (pairs, table_of_pair, t_qcols, t_low, t_step, t_size, t_offset, t_values, subset_limit,
     sphere_index, sphere_ranges, full_ranges) = self_pairs
    (pair_link, pair_obj, obj_center, obj_radius, obj_part_start, obj_part_count,
     part_center, part_radius, part_start, part_count, prim_kind, prim_rot, prim_trans,
     prim_size) = obstacles
    out_n, out_p, out_a, out_b, out_d, out_s = out
    m = 0
    cap = out_d.shape[0]
    n_spheres = radii.shape[0]
    n_links = link_row.shape[0]
    keep_a = np.empty(n_spheres, dtype=np.int64)
    point_a = np.empty((n_spheres, 3))
    keep_b = np.empty(n_spheres, dtype=np.int64)
    point_b = np.empty((n_spheres, 3))
    runs_a = (np.empty(n_spheres + 1, dtype=np.int64), np.empty((n_spheres, 3)),
              np.empty(n_spheres))
    runs_b = (np.empty(n_spheres + 1, dtype=np.int64), np.empty((n_spheres, 3)),
              np.empty(n_spheres))
    near_b = np.empty(n_spheres, dtype=np.bool_)
    wl = np.empty((n_links, 3))
    n_pairs = pairs.shape[0]
    use_tables = sphere_ranges.shape[0] == n_pairs and n_pairs > 0
    for n in range(rot.shape[1]):
        thr = threshold
        best_p, best_a, best_b, best_d, best_s = -1, -1, -1, math.inf, False
        for link in range(n_links):
            r = link_row[link]
            wl[link, 0], wl[link, 1], wl[link, 2] = _to_base(
                rot, pos, row_body[r], n, row_local[r, 0], row_local[r, 1], row_local[r, 2])
        for p in range(n_pairs):
            lim = thr                 # this pair's threshold (drops in modes 1 and 2)
            pair_a, pair_b, pair_d = -1, -1, math.inf
            la, lb = pairs[p, 0], pairs[p, 1]
            dx, dy, dz = wl[la, 0] - wl[lb, 0], wl[la, 1] - wl[lb, 1], wl[la, 2] - wl[lb, 2]
            d1 = math.sqrt(dx * dx + dy * dy + dz * dz) - (link_radius[la] + link_radius[lb]
                                                           + padding)
            t = table_of_pair[p]
            if t >= 0:
                c0 = np.floor((q[n, t_qcols[t, 0]] - t_low[t, 0]) / t_step[t, 0])
                c1 = np.floor((q[n, t_qcols[t, 1]] - t_low[t, 1]) / t_step[t, 1])
                c0 = min(max(c0, 0.0), t_size[t, 0] - 1.0)
                c1 = min(max(c1, 0.0), t_size[t, 1] - 1.0)
                bound = t_values[t_offset[t] + int(c0) * t_size[t, 1] + int(c1)] - padding
                if bound > d1:
                    d1 = bound
            if not d1 < lim:
                continue
            indexed = use_tables
            if use_tables:
                if lim + padding <= subset_limit[p]:
                    a_start, a_count = sphere_ranges[p, 0], sphere_ranges[p, 1]
                    b_start, b_count = sphere_ranges[p, 2], sphere_ranges[p, 3]
                else:
                    a_start, a_count = full_ranges[p, 0], full_ranges[p, 1]
                    b_start, b_count = full_ranges[p, 2], full_ranges[p, 3]
            else:
                a_start, a_count = link_sphere_start[la], link_sphere_count[la]
                b_start, b_count = link_sphere_start[lb], link_sphere_count[lb]
            # Each side's spheres against the other link's bounding sphere.
            na = _near_spheres(robot, rot, pos, n, (sphere_index, indexed, a_start, a_count),
                               wl[lb], link_radius[lb], lim + padding, keep_a, point_a)
            if na == 0:
                continue
            nb = _near_spheres(robot, rot, pos, n, (sphere_index, indexed, b_start, b_count),
                               wl[la], link_radius[la], lim + padding, keep_b, point_b)
            # Sphere pairs in the order of the two lists, skipping what a part bound clears
            # (part against part, then sphere against part): two thighs of 1800 spheres
            # each cost their near parts, not 3 million sphere pairs.
            run_a, centre_a, radius_a = runs_a
            run_b, centre_b, radius_b = runs_b
            nra = _runs(robot, rot, pos, n, keep_a, na, runs_a)
            nrb = _runs(robot, rot, pos, n, keep_b, nb, runs_b)
            for ra in range(nra):
                for rb in range(nrb):
                    near_b[rb] = not _clear(centre_b, rb, centre_a[ra, 0], centre_a[ra, 1],
                                            centre_a[ra, 2], radius_a[ra] + radius_b[rb],
                                            lim + padding)
                for i in range(run_a[ra], run_a[ra + 1]):
                    sa = keep_a[i]
                    for rb in range(nrb):
                        if not near_b[rb] or _clear(centre_b, rb, point_a[i, 0], point_a[i, 1],
                                                    point_a[i, 2], radii[sa] + radius_b[rb],
                                                    lim + padding):
                            continue
                        for j in range(run_b[rb], run_b[rb + 1]):
                            sb = keep_b[j]
                            dx = point_a[i, 0] - point_b[j, 0]
                            dy = point_a[i, 1] - point_b[j, 1]
                            dz = point_a[i, 2] - point_b[j, 2]
                            d3 = math.sqrt(dx * dx + dy * dy + dz * dz) - (
                                radii[sa] + radii[sb] + padding)
                            if d3 < lim:
                                if mode == 0:     # not _put: inlined, it slowed every mode 4 %
                                    if m < cap:
                                        out_n[m], out_p[m], out_a[m], out_b[m] = n, p, sa, sb
                                        out_d[m], out_s[m] = d3, True
                                    m += 1
                                else:
                                    pair_a, pair_b, pair_d, lim = sa, sb, d3, d3
            if pair_a >= 0:
                if mode == 2:
                    _put(out, m, n, p, pair_a, pair_b, pair_d, True)
                    m += 1
                else:
                    best_p, best_a, best_b, best_d, best_s = p, pair_a, pair_b, pair_d, True
                    thr = pair_d
        for k in range(pair_link.shape[0]):
            lim = thr
            pair_a, pair_b, pair_d = -1, -1, math.inf
            link, o = pair_link[k], pair_obj[k]
            cx, cy, cz = obj_center[o, 0], obj_center[o, 1], obj_center[o, 2]
            dx, dy, dz = wl[link, 0] - cx, wl[link, 1] - cy, wl[link, 2] - cz
            d1 = math.sqrt(dx * dx + dy * dy + dz * dz) - (link_radius[link] + obj_radius[o]
                                                           + padding)
            if not d1 < lim:
                continue
            # The link's spheres against the obstacle's bounding sphere.
            na = _near_spheres(robot, rot, pos, n,
                               (sphere_index, False, link_sphere_start[link],
                                link_sphere_count[link]),
                               obj_center[o], obj_radius[o], lim + padding, keep_a, point_a)
            multi = obj_part_count[o] != 1
            for i in range(na):
                s = keep_a[i]
                px, py, pz = point_a[i, 0], point_a[i, 1], point_a[i, 2]
                for part in range(obj_part_start[o], obj_part_start[o] + obj_part_count[o]):
                    if multi:
                        dx = px - part_center[part, 0]
                        dy = py - part_center[part, 1]
                        dz = pz - part_center[part, 2]
                        d2 = math.sqrt(dx * dx + dy * dy + dz * dz) - (
                            radii[s] + part_radius[part] + padding)
                        if not d2 < lim:
                            continue
                    for g in range(part_start[part], part_start[part] + part_count[part]):
                        # ``_point_primitive``, written out (a call per primitive passes
                        # three arrays and costs more than the arithmetic).
                        vx, vy, vz = px - prim_trans[g, 0], py - prim_trans[g, 1], \
                            pz - prim_trans[g, 2]
                        lx = prim_rot[g, 0, 0] * vx + prim_rot[g, 1, 0] * vy + \
                            prim_rot[g, 2, 0] * vz
                        ly = prim_rot[g, 0, 1] * vx + prim_rot[g, 1, 1] * vy + \
                            prim_rot[g, 2, 1] * vz
                        lz = prim_rot[g, 0, 2] * vx + prim_rot[g, 1, 2] * vy + \
                            prim_rot[g, 2, 2] * vz
                        kind = prim_kind[g]
                        if kind == 0:                                   # sphere
                            e = math.sqrt(lx * lx + ly * ly + lz * lz) - prim_size[g, 0]
                        elif kind == 1:                                 # box
                            qx = abs(lx) - prim_size[g, 0]
                            qy = abs(ly) - prim_size[g, 1]
                            qz = abs(lz) - prim_size[g, 2]
                            ox, oy, oz = max(qx, 0.0), max(qy, 0.0), max(qz, 0.0)
                            e = math.sqrt(ox * ox + oy * oy + oz * oz) + min(
                                max(qx, max(qy, qz)), 0.0)
                        else:                                           # cylinder
                            ea = math.sqrt(lx * lx + ly * ly) - prim_size[g, 0]
                            eb = abs(lz) - prim_size[g, 1]
                            oa, ob = max(ea, 0.0), max(eb, 0.0)
                            e = math.sqrt(oa * oa + ob * ob) + min(max(ea, eb), 0.0)
                        d3 = e - (radii[s] + padding)
                        if d3 < lim:
                            if mode == 0:
                                if m < cap:
                                    out_n[m], out_p[m], out_a[m], out_b[m] = n, k + n_pairs, s, g
                                    out_d[m], out_s[m] = d3, False
                                m += 1
                            else:
                                pair_a, pair_b, pair_d, lim = s, g, d3, d3
            if pair_a >= 0:
                if mode == 2:
                    _put(out, m, n, k + n_pairs, pair_a, pair_b, pair_d, False)
                    m += 1
                else:
                    best_p, best_a, best_b, best_d = k + n_pairs, pair_a, pair_b, pair_d
                    best_s = False
                    thr = pair_d
        if mode == 1 and best_p >= 0:
            _put(out, m, n, best_p, best_a, best_b, best_d, best_s)
            m += 1
    return m


def leaf_buffers(size):
    """Return the output arrays of ``collision_query`` (a tuple) with room for ``size``
    leaves: n, pair, a, b (int64), d (float), is_self (bool)."""
    return (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
            np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size),
            np.empty(size, dtype=np.bool_))
