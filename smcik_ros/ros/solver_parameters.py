"""Solver settings as ROS parameters ``<solver>.<field>``, without ROS.

Every field of every solver's settings dataclass becomes a parameter of the same name, with
its default, its type and the field's comment as description. This module computes what the
node declares, turns parameter values back into settings, builds solvers and works out which
settings a change touches; the node only declares and reads the parameters. ``SolverChoice``
is the running solver's side of a parameter change: a switch or new settings are built and
checked first, then applied to the control loop without a jump.
"""

import dataclasses
import functools
import inspect
import re

from ..errors import ParameterError
from ..solvers import available_solvers, make_solver, settings_type

__all__ = ['SolverParameter', 'solver_parameters', 'settings_from', 'make_solver_from',
           'settings_changes', 'solver_settings_yaml', 'settings_comments', 'SolverChoice']


@dataclasses.dataclass(frozen=True)
class SolverParameter:
    """One solver setting as a parameter: name '<solver>.<field>', its default (a tuple for
    list settings), the Python type of the default, a description with the unit."""

    solver: str
    field: str
    default: object
    kind: type
    description: str

    @property
    def name(self):
        return f'{self.solver}.{self.field}'


def settings_comments(cls):
    """Return {field: comment} from the ``name: type = default  # comment`` lines of ``cls``."""
    comments = {}
    for klass in reversed(cls.__mro__):
        try:
            source = _class_source(klass)
        except (OSError, TypeError):
            continue
        for match in re.finditer(r'^\s+(\w+)\s*:[^=\n]*=[^#\n]*#\s*(.+)$', source, re.M):
            comments[match.group(1)] = match.group(2).strip()
    return comments


@functools.lru_cache(maxsize=None)
def _file_lines(path):
    with open(path, encoding='utf-8') as f:
        return f.readlines()


def _class_source(klass):
    """Return the source of ``klass``: for a module-level class, from its ``class`` line to
    the next line that is not indented, read from its file once. (``inspect.getsource``
    parses the whole module for every class: 0.10-0.14 s of the node's start-up for the
    solvers' settings.) Anything else goes through ``inspect.getsource``."""
    path = inspect.getsourcefile(klass)
    if path is None or klass.__qualname__ != klass.__name__:
        return inspect.getsource(klass)
    lines = _file_lines(path)
    head = re.compile(rf'class {re.escape(klass.__name__)}\b')
    start = next((i for i, line in enumerate(lines) if head.match(line)), None)
    if start is None:
        return inspect.getsource(klass)
    end = next((j for j in range(start + 1, len(lines))
                if lines[j].strip() and not lines[j][0].isspace()), len(lines))
    return ''.join(lines[start:end])


def _kind_of(default):
    for kind in (bool, int, float, str, tuple):
        if isinstance(default, kind):
            return kind
    return None


def solver_parameters():
    """Return ([SolverParameter], [(solver.field, default)] of settings that cannot be
    parameters (no ROS type))."""
    out, skipped = [], []
    for solver in available_solvers():
        cls = settings_type(solver)
        comments = settings_comments(cls)
        for field in dataclasses.fields(cls):
            kind = _kind_of(field.default)
            if kind is None:
                skipped.append((f'{solver}.{field.name}', field.default))
                continue
            default = field.default
            out.append(SolverParameter(
                solver, field.name, default, kind,
                f'{solver} solver: {comments.get(field.name, field.name)} '
                f'(default {default!r})'))
    return out, skipped


def _to_setting(value):
    """Return a ROS parameter value as a solver setting value (arrays -> tuple of float)."""
    if isinstance(value, (list, tuple)) or hasattr(value, 'typecode'):
        return tuple(float(v) for v in value)
    return value


def settings_from(fields, solver, values):
    """Return {field: value} of ``solver`` from parameter ``values`` {name: value}.

    fields: {solver: [field names declared]}.
    """
    return {field: _to_setting(values[f'{solver}.{field}']) for field in fields.get(solver, ())}


def make_solver_from(fields, solver, chain, values):
    """Return the solver ``solver`` on ``chain`` with the settings in ``values``
    (ParameterError for an unknown solver or a bad setting)."""
    if solver not in available_solvers():
        raise ParameterError(f'unknown solver {solver!r}; available solvers: '
                             f'{", ".join(available_solvers())}')
    return make_solver(solver, chain, **settings_from(fields, solver, values))


def settings_changes(fields, solver, current, wanted):
    """Return {field: new value} of ``solver``'s settings that differ between two value sets."""
    now = settings_from(fields, solver, current)
    new = settings_from(fields, solver, wanted)
    return {k: v for k, v in new.items() if now[k] != v}


class SolverChoice:
    """The solver a control loop runs, as parameters: ``solver`` and ``<solver>.<field>``.

    fields: {solver: [field names declared]}; chain: the model; current: callable -> the
    parameter values before a change; constraints: callable -> the constraint objects a new
    solver must accept; report: callable(level, text). ``check`` builds every solver whose
    settings a change touches (ParameterError: a bad setting or unknown solver) and, for a
    switch, gives the new one the constraints (GoalError); ``apply`` switches the loop (it
    starts at the current command) or updates the running solver's settings in place.
    """

    def __init__(self, fields, chain, name, current, constraints, report):
        self.fields = fields
        self.chain = chain
        self.name = name
        self._current = current
        self._constraints = constraints
        self._report = report
        self._built = {}

    def owns(self, parameter):
        """True for ``solver`` and the ``<solver>.<field>`` settings."""
        return parameter == 'solver' or parameter.split('.', 1)[0] in self.fields

    def build(self, values, name=None):
        """Return the solver ``name`` (default: the running one's) built from ``values``."""
        return make_solver_from(self.fields, name or self.name, self.chain, values)

    def check(self, changes, values):
        name = values['solver']
        touched = {key.split('.', 1)[0] for key in changes if '.' in key}
        if 'solver' in changes:
            touched.add(name)
        self._built = {solver: self.build(values, solver) for solver in touched
                       if solver in self.fields or solver == name}
        if name != self.name:
            self._built[name].set_constraints(self._constraints())

    def apply(self, loop, changes, values):
        name = values['solver']
        if name != self.name:
            loop.set_solver(self._built[name])     # with the loop's constraints, no jump
            self._report('info', f'solver switched from {self.name} to {name}, started at the '
                         'current command (no jump)')
            self.name = name
        else:
            diff = settings_changes(self.fields, name, self._current(), values)
            if diff:
                loop.solver.update_settings(**diff)
                self._report('info', f'solver {name} settings changed: '
                             + ', '.join(f'{k}={v!r}' for k, v in diff.items()))
        self._built = {}


def solver_settings_yaml(indent=4):
    """Return the YAML block of every solver's settings with defaults (for config files)."""
    pad = ' ' * indent
    lines = []
    for solver in available_solvers():
        cls = settings_type(solver)
        comments = settings_comments(cls)
        lines.append(f'{pad}{solver}:')
        for field in dataclasses.fields(cls):
            default = field.default
            if isinstance(default, bool):
                text = 'true' if default else 'false'
            elif isinstance(default, tuple):
                text = '[' + ', '.join(repr(float(v)) for v in default) + ']'
            else:
                text = repr(default)
                if isinstance(default, float) and 'e' in text and '.' not in text:
                    text = text.replace('e', '.0e')   # YAML 1.1 reads 1e-06 as a string
            entry = f'{field.name}: {text}'
            if text == '[]':   # ROS YAML cannot type an empty list: leave it commented out
                entry = f'# {entry}'
            comment = comments.get(field.name, '')
            lines.append(f'{pad}  {entry}'.ljust(indent + 34)
                         + (f'  # {comment}' if comment else ''))
    return '\n'.join(lines) + '\n'
