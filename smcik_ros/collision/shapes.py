"""Closed-form signed distances of the collision primitives, batched on plain arrays.

The robot is covered by spheres (see ``covers``); the scene holds spheres, boxes and
cylinders. Every distance the collision engine needs is therefore "sphere against
primitive": the signed distance of the sphere's centre to the primitive minus the sphere's
radius. The functions here take flat arrays (no Python objects, no loops over elements);
the compiled query (``kernels.collision``) computes them inline; these give the closest points
and gradients of the leaves it returns.

Conventions: a primitive is a kind code (``SPHERE``, ``BOX``, ``CYLINDER``), a pose in the
base frame (rotation (3, 3), translation (3,)) and a size triple:

- sphere: (radius, 0, 0) [m];
- box: (half length x, half length y, half length z) [m] (half the side lengths);
- cylinder: (radius, half height, 0) [m], axis along the local z.

Signed distance: > 0 outside (the Euclidean distance to the solid), < 0 inside (minus the
distance to the surface), 0 on it.
"""

import numpy as np

__all__ = ['SPHERE', 'BOX', 'CYLINDER', 'point_sphere_distance', 'point_box_distance',
           'point_cylinder_distance', 'point_primitive_distance', 'point_primitive_gradient',
           'primitive_bounding_radius']

SPHERE, BOX, CYLINDER = 0, 1, 2


def point_sphere_distance(p, radius):
    """Return the signed distances (...) of local points p (..., 3) to a centred sphere."""
    return np.sqrt(np.einsum('...k,...k->...', p, p)) - radius


def point_box_distance(p, half):
    """Return the signed distances (...) of local points p (..., 3) to centred boxes.

    half: (..., 3) half side lengths [m]. Outside: |max(|p| - h, 0)|; inside: the largest
    (least negative) of |p_i| - h_i, minus the distance to the nearest face.
    """
    q = np.abs(p) - half
    outside = np.maximum(q, 0.0)
    return np.sqrt(np.einsum('...k,...k->...', outside, outside)) + np.minimum(q.max(axis=-1), 0.0)


def point_cylinder_distance(p, radius, half_height):
    """Return the signed distances (...) of local points p (..., 3) to centred z-cylinders.

    With rho = |p_xy|: a = rho - radius (radial), b = |p_z| - half_height (axial); outside
    sqrt(max(a, 0)^2 + max(b, 0)^2) (the rim is the nearest point when both are > 0), inside
    max(a, b).
    """
    a = np.sqrt(p[..., 0] * p[..., 0] + p[..., 1] * p[..., 1]) - radius
    b = np.abs(p[..., 2]) - half_height
    oa, ob = np.maximum(a, 0.0), np.maximum(b, 0.0)
    return np.sqrt(oa * oa + ob * ob) + np.minimum(np.maximum(a, b), 0.0)


def _local(p, rot, trans):
    """Return R^T (p - t) for points p (M, 3), rotations (M, 3, 3), translations (M, 3)."""
    return np.einsum('mji,mj->mi', rot, p - trans)


def point_primitive_distance(p, kind, rot, trans, size):
    """Return the (M,) signed distances of base-frame points p (M, 3) to primitives (M,).

    kind: (M,) codes; rot (M, 3, 3), trans (M, 3): primitive poses in the base frame;
    size: (M, 3) size triples (see the module docstring).
    """
    local = _local(p, rot, trans)
    out = np.empty(len(p))
    for code in (SPHERE, BOX, CYLINDER):
        sel = kind == code
        if not sel.any():
            continue
        if code == SPHERE:
            out[sel] = point_sphere_distance(local[sel], size[sel, 0])
        elif code == BOX:
            out[sel] = point_box_distance(local[sel], size[sel])
        else:
            out[sel] = point_cylinder_distance(local[sel], size[sel, 0], size[sel, 1])
    return out


def point_primitive_gradient(p, kind, rot, trans, size):
    """Return the (M, 3) unit gradients (base frame) of the signed distance at points p.

    Outside a primitive this is the direction from its nearest surface point to p; inside,
    the outward normal of the nearest face (box), of the side or cap (cylinder). At the
    centre of a sphere or on a box's medial planes the gradient is not unique: one valid
    direction is returned (+z for a sphere, the first axis of the tie for a box).
    """
    local = _local(p, rot, trans)
    grad = np.zeros_like(local)
    for code in (SPHERE, BOX, CYLINDER):
        sel = np.flatnonzero(kind == code)
        if not sel.size:
            continue
        x = local[sel]
        if code == SPHERE:
            g = x.copy()
            norm = np.linalg.norm(g, axis=-1)
            g[norm < 1e-12] = (0.0, 0.0, 1.0)
        elif code == BOX:
            q = np.abs(x) - size[sel]
            outside = np.maximum(q, 0.0)
            g = outside * np.sign(np.where(x == 0.0, 1.0, x))
            inside = ~np.any(q > 0.0, axis=-1)
            if inside.any():
                axis = np.argmax(q[inside], axis=-1)
                gi = np.zeros((int(inside.sum()), 3))
                xi = x[inside]
                rows = np.arange(len(gi))
                gi[rows, axis] = np.where(xi[rows, axis] < 0.0, -1.0, 1.0)
                g[inside] = gi
        else:
            radius, half = size[sel, 0], size[sel, 1]
            rho = np.sqrt(x[:, 0] ** 2 + x[:, 1] ** 2)
            radial = np.zeros((len(x), 3))
            ok = rho > 1e-12
            radial[ok, :2] = x[ok, :2] / rho[ok, None]
            radial[~ok, 0] = 1.0
            a = rho - radius
            b = np.abs(x[:, 2]) - half
            axial = np.zeros((len(x), 3))
            axial[:, 2] = np.where(x[:, 2] < 0.0, -1.0, 1.0)
            out = (a > 0.0) | (b > 0.0)
            g = np.where((a > b)[:, None], radial, axial)
            if out.any():
                oa, ob = np.maximum(a[out], 0.0), np.maximum(b[out], 0.0)
                g[out] = radial[out] * oa[:, None] + axial[out] * ob[:, None]
        norm = np.linalg.norm(g, axis=-1, keepdims=True)
        grad[sel] = g / np.maximum(norm, 1e-300)
    return np.einsum('mij,mj->mi', rot, grad)


def primitive_bounding_radius(kind, size):
    """Return the (M,) radii of the smallest centred spheres containing the primitives."""
    kind = np.asarray(kind)
    size = np.asarray(size, dtype=float).reshape(-1, 3)
    out = np.where(kind == SPHERE, size[:, 0], 0.0)
    out = np.where(kind == BOX, np.linalg.norm(size, axis=-1), out)
    return np.where(kind == CYLINDER, np.hypot(size[:, 0], size[:, 1]), out)
