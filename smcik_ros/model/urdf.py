"""URDF -> joint specs (``JointSpec``): parsing with yourdfpy, and the specs as plain data for
the model cache (``model.cache``).

yourdfpy (and with it trimesh, scipy, networkx) is imported only when a URDF is parsed; a
start that finds the parsed joints in the cache does not import it.
"""

import io
import os
import re

import numpy as np

from ..errors import ModelError
from .cache import digest, load, source_digest, store, versions
from .builder import JointSpec, topological

__all__ = ['SOURCES', 'declare_prefixes', 'joints_from_records', 'joints_to_records',
           'ordered_links', 'parse_urdf', 'require_robot_name']

_HERE = os.path.dirname(os.path.abspath(__file__))
# The modules whose code a cached parse depends on (an edited parser is a new entry).
SOURCES = (os.path.join(_HERE, 'urdf.py'), os.path.join(_HERE, 'builder.py'))


def parse_urdf(path_or_xml, cache_dir=None):
    """Return (list of JointSpec, robot name, root inertials) parsed with yourdfpy, or read
    from the model cache (``model.cache``; cache_dir '': none); ModelError on failure."""
    text, source = _urdf_bytes(path_or_xml)
    key = None
    if cache_dir != '':
        code = source_digest(*SOURCES)
        key = None if code is None else digest(
            'urdf-joints', code, versions('yourdfpy', 'lxml'), text)
        hit = load(cache_dir, 'urdf', key)
        if hit is not None:
            try:
                meta, arrays = hit
                return (joints_from_records(meta['joints'], arrays['origins']), meta['name'],
                        {k: (v[0], np.asarray(v[1])) for k, v in meta['inertials'].items()})
            except (KeyError, TypeError, ValueError, IndexError):
                pass            # an entry of another layout: parse again
    joints, name, root_inertials = _parse_urdf_text(text, source)
    if key is not None:
        records, origins = joints_to_records(joints)
        store(cache_dir, 'urdf', key, {
            'joints': records, 'name': name,
            'inertials': {k: [float(m), [float(v) for v in c]]
                          for k, (m, c) in root_inertials.items()}}, {'origins': origins})
    return joints, name, root_inertials


def joints_to_records(joints):
    """Return ([dict per JointSpec, JSON-able], (J, 4, 4) origins): the specs as data."""
    records, origins = [], []
    for j in joints:
        records.append({
            'name': j.name, 'parent': j.parent, 'child': j.child, 'type': j.type,
            'axis': None if j.axis is None else [float(v) for v in j.axis],
            'lower': None if j.lower is None else float(j.lower),
            'upper': None if j.upper is None else float(j.upper),
            'velocity': float(j.velocity), 'mass': float(j.mass),
            'com': [float(v) for v in j.com], 'origin': j.origin is not None,
            'mimic': None if j.mimic is None else [j.mimic[0], float(j.mimic[1]),
                                                   float(j.mimic[2])]})
        origins.append(np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float))
    return records, np.array(origins, dtype=float).reshape(len(records), 4, 4)


def joints_from_records(records, origins):
    """Return the JointSpecs that ``joints_to_records`` gave ``records`` and ``origins`` for."""
    return [JointSpec(
        name=r['name'], parent=r['parent'], child=r['child'], type=r['type'],
        origin=np.array(origins[i], dtype=float) if r['origin'] else None,
        axis=None if r['axis'] is None else tuple(r['axis']), lower=r['lower'],
        upper=r['upper'], velocity=r['velocity'], mass=r['mass'], com=tuple(r['com']),
        mimic=None if r['mimic'] is None else tuple(r['mimic']))
        for i, r in enumerate(records)]


def _urdf_bytes(path_or_xml):
    """Return (the URDF's bytes, where they came from) for a file path or the XML text."""
    text = path_or_xml
    source = 'robot_description string'
    if isinstance(path_or_xml, os.PathLike) or (
            isinstance(path_or_xml, str) and not path_or_xml.lstrip().startswith('<')):
        path = os.fspath(path_or_xml)
        if not os.path.isfile(path):
            raise ModelError(f'URDF file {path!r} does not exist (cwd {os.getcwd()!r}); give an '
                             'existing path or the XML text itself')
        with open(path, 'rb') as f:
            text = f.read()
        source = f'URDF file {path!r}'
    if isinstance(text, str):
        text = text.encode('utf-8')
    return text, source


# A namespace prefix used on an element or an attribute, and one declared.
_USED_PREFIX = re.compile(rb'<\s*/?\s*([A-Za-z_][\w.-]*):[A-Za-z_]'
                          rb'|\s([A-Za-z_][\w.-]*):[A-Za-z_][\w.-]*\s*=')
_DECLARED_PREFIX = re.compile(rb'xmlns:([A-Za-z_][\w.-]*)\s*=')


def declare_prefixes(text):
    """Return the URDF ``text`` (bytes or str, as given) with each namespace prefix that it
    uses but never declares declared on its <robot> element. Gazebo extensions are written
    so (Fetch's URDF: ``<sensor:camera>``): ROS's own parser (urdfdom, on TinyXML2) reads no
    namespaces, so RViz and MoveIt load such a file, where a namespace-aware parser stops
    at 'unbound prefix'."""
    data = text.encode('utf-8') if isinstance(text, str) else bytes(text)
    used = {a or b for a, b in _USED_PREFIX.findall(data)} - {b'xml', b'xmlns'}
    missing = sorted(used - set(_DECLARED_PREFIX.findall(data)))
    if missing:
        declared = b''.join(b' xmlns:%s="urn:undeclared:%s"' % (p, p) for p in missing)
        data = re.sub(rb'<robot\b', lambda m: m.group(0) + declared, data, count=1)
    return data.decode('utf-8') if isinstance(text, str) else data


def require_robot_name(root, source):
    """Raise ModelError when the <robot> element ``root`` has no name (yourdfpy would fail
    with a bare KeyError 'name'; ROS's own parser, urdfdom, rejects it too)."""
    if root.get('name') is None:
        raise ModelError(f'{source}: the <robot> element has no name attribute, which the URDF '
                         'format requires (robot_state_publisher and MoveIt reject it too); '
                         'write <robot name="..."> (any name)')


def _parse_urdf_text(text, source):
    """Return (list of JointSpec, robot name, root inertials): ``text`` parsed with yourdfpy."""
    try:
        from lxml import etree
        import yourdfpy
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise ModelError(f'the URDF parser is not installed ({exc}); '
                         'pip install yourdfpy') from exc
    # Strict XML parse first: yourdfpy silently 'recovers' broken XML.
    text = declare_prefixes(text)
    try:
        root = etree.fromstring(text, parser=etree.XMLParser(remove_blank_text=True))
    except etree.XMLSyntaxError as exc:
        raise ModelError(f'{source} is not well-formed XML: {exc}') from exc
    if root.tag != 'robot':
        raise ModelError(f'{source} is not a URDF: root element is <{root.tag}>, expected <robot>')
    require_robot_name(root, source)
    try:
        urdf = yourdfpy.URDF.load(io.BytesIO(text), build_scene_graph=False, load_meshes=False,
                                  build_collision_scene_graph=False)
    except Exception as exc:
        raise ModelError(f'{source} could not be parsed as URDF: {exc}') from exc
    links = {link.name: link for link in urdf.robot.links}
    joints = []
    for j in urdf.robot.joints:
        if j.type not in ('revolute', 'continuous', 'prismatic', 'fixed', 'floating', 'planar'):
            raise ModelError(f'joint {j.name!r} has unknown type {j.type!r}')
        for end in (j.parent, j.child):
            if end not in links:
                raise ModelError(f'joint {j.name!r} refers to link {end!r}, which the URDF does '
                                 f'not define; links: {", ".join(links)}')
        lim = j.limit
        mass, com = 0.0, (0.0, 0.0, 0.0)
        inertial = links[j.child].inertial
        if inertial is not None and inertial.mass:
            mass = float(inertial.mass)
            if inertial.origin is not None:
                com = tuple(np.asarray(inertial.origin)[:3, 3])
        mimic = None
        if j.mimic is not None:
            mimic = (j.mimic.joint, 1.0 if j.mimic.multiplier is None else j.mimic.multiplier,
                     0.0 if j.mimic.offset is None else j.mimic.offset)
        joints.append(JointSpec(
            name=j.name, parent=j.parent, child=j.child, type=j.type,
            origin=np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=float),
            axis=(1.0, 0.0, 0.0) if j.axis is None else tuple(j.axis),
            lower=None if lim is None else lim.lower,
            upper=None if lim is None else lim.upper,
            velocity=np.inf if lim is None or lim.velocity is None else float(lim.velocity),
            mass=mass, com=com, mimic=mimic))
    # Inertials of root links (no joint carries them): base_link's own mass.
    children = {j.child for j in joints}
    root_inertials = {}
    for name, link in links.items():
        if name not in children and link.inertial is not None and link.inertial.mass:
            origin = np.eye(4) if link.inertial.origin is None else link.inertial.origin
            root_inertials[name] = (float(link.inertial.mass), np.asarray(origin)[:3, 3])
    return joints, urdf.robot.name, root_inertials


def ordered_links(joints):
    """Return the links of ``joints`` in depth-first order from each root."""
    children, childs = {}, set()
    for j in joints:
        children.setdefault(j.parent, []).append(j)
        childs.add(j.child)
    roots = [j.parent for j in joints if j.parent not in childs]
    out = []
    for root in dict.fromkeys(roots):
        out += topological(root, children)
    return out
