"""A disk cache of what start-up derives from a URDF: the chain's joints, the collision model.

Parsing a URDF with yourdfpy means importing it, and with it trimesh, scipy.spatial and
networkx: about 1 s of a node's start-up, more than the parse itself. What the parse and the
collision model's construction produce is plain data (joint specs, sphere covers), so it is
stored here after the first start and read back on the next one, without those imports.

An entry is found by a SHA-256 over everything its result depends on:

- the URDF's bytes, and for the collision model every mesh file it names (resolved as the
  model resolves it, read whole: a mesh edited in place is a new entry), the chain, the
  cover settings and the package paths;
- the source of the modules that compute it (an edited parser is a new entry) and the
  installed versions of yourdfpy and trimesh.

A miss, an unreadable file or one written by another version computes the result as
before (and stores it); only successful results are stored, so a broken URDF fails with
the parser's own message every time. Entries are ``.npz`` files (arrays and one JSON text,
read with ``allow_pickle=False``) written atomically, in ``default_cache_dir()``
($XDG_CACHE_HOME/smcik_ros or ~/.cache/smcik_ros), beside the cover cache; ``cache_dir=''``
turns the cache off. Deleting the directory is always safe.
"""

import functools
import hashlib
import json
import logging
import os

import numpy as np

__all__ = ['CACHE_VERSION', 'default_cache_dir', 'digest', 'load', 'source_digest', 'store',
           'versions']

_LOG = logging.getLogger(__name__)
CACHE_VERSION = 1     # the entries' layout; a new layout ignores the old files
_META = '__meta__'


def default_cache_dir():
    """Return the cache directory: $XDG_CACHE_HOME/smcik_ros or ~/.cache/smcik_ros."""
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'smcik_ros')


def digest(*parts):
    """Return the SHA-256 (hex) of ``parts``: bytes as they are, arrays with their dtype and
    shape, anything else by its ``repr``, each tagged with its kind and length."""
    h = hashlib.sha256(f'smcik_ros-model-v{CACHE_VERSION}'.encode())
    for part in parts:
        if isinstance(part, (bytes, bytearray)):
            data, tag = bytes(part), 'b'
        elif isinstance(part, np.ndarray):
            data = np.ascontiguousarray(part).tobytes()
            tag = f'a{part.dtype.str}{part.shape}'
        else:
            data, tag = repr(part).encode(), 'r'
        h.update(f'|{tag}:{len(data)}|'.encode())
        h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def source_digest(*paths):
    """Return a digest of the files at ``paths`` (the modules that compute an entry), or None
    when one cannot be read (the cache is then not used)."""
    try:
        parts = []
        for path in paths:
            with open(path, 'rb') as f:
                parts.append(f.read())
    except OSError:
        return None
    return digest(*parts)


@functools.lru_cache(maxsize=None)
def versions(*names):
    """Return 'name=version' of each installed distribution ('name=?' when not found)."""
    from importlib import metadata
    out = []
    for name in names:
        try:
            out.append(f'{name}={metadata.version(name)}')
        except metadata.PackageNotFoundError:
            out.append(f'{name}=?')
    return ','.join(out)


def _path(cache_dir, kind, key):
    if cache_dir == '' or key is None:
        return None
    return os.path.join(cache_dir or default_cache_dir(), f'{kind}-{key}.npz')


def load(cache_dir, kind, key):
    """Return (meta, arrays) stored under ``kind`` and ``key``, or None (not there, unreadable,
    or another layout: the caller computes the result again)."""
    path = _path(cache_dir, kind, key)
    if path is None or not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if name != _META}
            meta = json.loads(str(data[_META]))
        if meta.get('version') != CACHE_VERSION or meta.get('kind') != kind:
            return None
        return meta, arrays
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        _LOG.warning('ignoring unreadable model cache file %s (%s: %s): computing it again',
                     path, type(exc).__name__, exc)
        return None


def store(cache_dir, kind, key, meta, arrays):
    """Store ``meta`` (JSON-able dict) and ``arrays`` (name -> ndarray) under ``kind`` and
    ``key`` (atomically); a failure to write is logged and otherwise ignored."""
    path = _path(cache_dir, kind, key)
    if path is None:
        return
    meta = dict(meta, version=CACHE_VERSION, kind=kind)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f'{path}.{os.getpid()}.tmp.npz'
        np.savez(tmp, **{_META: np.array(json.dumps(meta))}, **arrays)
        os.replace(tmp, path)
    except (OSError, ValueError, TypeError) as exc:
        _LOG.warning('cannot write the model cache %s (%s: %s): the next start parses the '
                     'URDF again', path, type(exc).__name__, exc)
