"""docs/node.md's parameter table stays true to the node's declared parameters."""

from pathlib import Path
import re

import pytest

pytest.importorskip('rclpy', reason='the parameter table declares rclpy types')

from rclpy.parameter import Parameter  # noqa: E402

from smcik_ros.ros.parameters import ARRAY_PARAMETERS, NODE_PARAMETERS  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / 'docs' / 'node.md'
TYPES = {bool: 'bool', int: 'int', float: 'double', str: 'string'}


def table_rows():
    text = DOC.read_text()
    section = text[text.index('## Parameters'):text.index('### sim_arm parameters')]
    rows = {}
    for line in section.splitlines():
        match = re.match(r'\| `([a-z_<>.]+)` \| ([^|]+) \| ([^|]+) \|', line)
        if match:
            rows[match.group(1)] = (match.group(2).strip(), match.group(3).strip())
    return rows


def test_every_parameter_is_documented_with_its_type_and_default():
    rows = table_rows()
    assert set(NODE_PARAMETERS) <= set(rows), sorted(set(NODE_PARAMETERS) - set(rows))
    assert set(ARRAY_PARAMETERS) <= set(rows), sorted(set(ARRAY_PARAMETERS) - set(rows))
    assert set(rows) - set(NODE_PARAMETERS) - set(ARRAY_PARAMETERS) == {'<solver>.<field>'}, \
        'documented but gone'
    for name, (ptype, default, _, _) in ARRAY_PARAMETERS.items():
        kind = {Parameter.Type.STRING_ARRAY: 'string array',
                Parameter.Type.DOUBLE_ARRAY: 'double array'}[ptype]
        text = '`[' + ', '.join(f'{v:g}' if isinstance(v, float) else repr(v)
                                for v in default) + ']`'
        assert rows[name] == (kind, text), f'{name}: documented as {rows[name]}'
    for name, (default, _, extra) in NODE_PARAMETERS.items():
        kind, documented = rows[name]
        assert kind == TYPES[type(default)], f'{name}: documented as {kind}'
        if isinstance(default, str):
            assert documented.startswith(f"`{default!r}`") or \
                documented.startswith(f'`{default}`'), f'{name}: default {documented}'
        elif isinstance(default, bool):
            assert documented == str(default).lower(), f'{name}: default {documented}'
        else:
            assert float(documented) == default, f'{name}: default {documented} != {default}'


def test_read_only_parameters_are_documented_as_such():
    """A row says 'read-only' exactly for the parameters declared read-only (ROS refuses a
    set of those itself)."""
    text = DOC.read_text()
    read_only = {name: bool(extra.get('read_only')) for name, (_, _, extra)
                 in NODE_PARAMETERS.items()}
    read_only.update((name, spec[3]) for name, spec in ARRAY_PARAMETERS.items())
    for name, fixed in read_only.items():
        row = next(line for line in text.splitlines() if line.startswith(f'| `{name}` |'))
        assert ('read-only' in row) == fixed, \
            f'{name}: read-only {fixed} in the code, the docs say {row!r}'


def test_documented_ranges_are_the_declared_ones():
    """Every range the table gives (``low..high``) is the one the node declares."""
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r'\| `([a-z_]+)` \|(?:[^|]*\|){3} ([^|]*)\|', line)
        if match:
            rows[match.group(1)] = match.group(2)
    for name, (_, _, extra) in NODE_PARAMETERS.items():
        if 'range' not in extra:
            continue
        found = re.search(r'(-?[\d.e-]+)\.\.(-?[\d.e-]+|pi)', rows[name])
        assert found, f'{name}: no range in the docs ({rows[name]!r}), declared {extra["range"]}'
        high = 3.141592653589793 if found.group(2) == 'pi' else float(found.group(2))
        assert (float(found.group(1)), high) == pytest.approx(extra['range'], rel=1e-3), \
            f'{name}: the docs say {found.group(0)}, declared {extra["range"]}'

