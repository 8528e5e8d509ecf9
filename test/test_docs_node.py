"""docs/node.md's parameter table stays true to the node's declared parameters."""

from pathlib import Path
import re

import pytest

pytest.importorskip('rclpy', reason='the node module imports rclpy')

from smcik_ros.node import ARRAY_PARAMETERS, NODE_PARAMETERS  # noqa: E402

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
    for name in ARRAY_PARAMETERS:
        assert rows[name] == ('string array', '`[]`'), f'{name}: documented as {rows[name]}'
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
    text = DOC.read_text()
    for name, (_, _, extra) in NODE_PARAMETERS.items():
        if extra.get('read_only'):
            row = next(line for line in text.splitlines() if line.startswith(f'| `{name}` |'))
            assert 'read-only' in row, f'{name} is read-only in the code, not in the docs'
