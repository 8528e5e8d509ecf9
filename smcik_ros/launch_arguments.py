"""What launch/arm.launch.py decides, as plain functions: no launch import, so pytest checks
them where launch is not installed (the launch file itself only wires them to launch). The
arguments (``ARGUMENTS``; an empty default keeps ``params_file``'s value), the refusal of
names no argument declares (``check_names``: launch would ignore them silently), what the
nodes get (``plan``) and why a launch failed (``ExitWatch``).
"""

import dataclasses
import difflib
import os
import re
import shlex
import signal

from .errors import ParameterError
from .ros.description import read_urdf_file, resolve_path

__all__ = ['ARGUMENTS', 'ARGUMENT_NAMES', 'REAL_ARM_ARGUMENTS', 'ExitWatch', 'Plan',
           'check_names', 'given_names', 'named_on_command_line', 'params_file_values',
           'parse_package_paths', 'parse_xacro_args', 'plan']

# What a real arm needs set (docs/node.md, "Driving a real arm"): the arm safety settings;
# name -> (type, description). Empty = keep params_file's value.
REAL_ARM_ARGUMENTS = {
    'max_acceleration': (float, 'acceleration limit of every joint [rad/s^2 or m/s^2]'),
    'velocity_scale': (float, 'share of the velocity limits used (0..1]'),
    'joint_states_timeout': (float, 'older joint_states stop the arm [s]'),
    'joint_limits_path': (str, 'MoveIt joint_limits.yaml with per-joint limits'),
    'max_lead': (float, 'largest |command - measured| [rad or m]'),
    'resync_threshold': (float, 'restart from the measurement beyond this [rad or m]'),
}

# (name, default, description); '' = the value in params_file (config/arm.yaml by default).
ARGUMENTS = (
    ('urdf_path', '', 'URDF (or .xacro) file of the robot, also given to smcik_node so that '
                      'relative and package:// meshes and the SRDF beside it resolve; empty: '
                      "params_file's urdf_path (the package's urdf/smcik_arm.urdf)"),
    ('urdf', '', 'old name of urdf_path (warns; both given naming different files is an '
                 'error)'),
    ('xacro_args', '', "arguments of a .xacro urdf_path (and srdf_path): 'name:=value "
                       "name2:=value2'"),
    ('srdf_path', '', 'SRDF (or .xacro) of the robot; empty: params_file, else the '
                      '/robot_description_semantic topic or the SRDF beside the URDF'),
    ('package_paths', '', "directories holding ROS packages for package:// meshes that the "
                          "ament index does not know, ':'-separated; empty: params_file"),
    ('base_link', '', 'base link of the IK chain (frame of the commands); empty: params_file'),
    ('tip_link', '', 'tip link the goals apply to; empty: params_file'),
    ('solver', '', 'IK solver: smc, jacobian, distance, ccd, fabrik; empty: params_file'),
    ('params_file', '', "parameters of smcik_node and sim_arm (every other setting); empty: "
                        "the package's config/arm.yaml"),
    ('command_type', '', 'joint_state | joint_trajectory | float64_multi_array; empty: '
                         'params_file'),
    ('command_topic', '', 'topic of the joint commands; empty: params_file'),
    ('sim', 'true', 'start sim_arm (a kinematic arm) as the robot; false: a real arm '
                    "publishes joint_states"),
    ('rviz', 'true', 'start RViz (skipped when not installed)'),
    ('rviz_config', '', "RViz configuration; empty: the package's config/arm.rviz"),
) + tuple((name, '', f'{text}; empty: params_file')
          for name, (_, text) in REAL_ARM_ARGUMENTS.items())
ARGUMENT_NAMES = tuple(name for name, _, _ in ARGUMENTS)

# Launch arguments that ros2 launch adds itself (--launch-prefix, --launch-prefix-filter).
LAUNCH_OWN = ('launch-prefix', 'launch-prefix-filter')

# Names other launch files use for the same things: the error for one says which is ours.
OTHER_NAMES = {
    'description_file': 'urdf_path', 'urdf_file': 'urdf_path', 'model': 'urdf_path',
    'robot_description': 'urdf_path', 'description_package': 'urdf_path',
    'srdf': 'srdf_path', 'srdf_file': 'srdf_path', 'semantic_description_file': 'srdf_path',
    'robot_description_semantic': 'srdf_path', 'launch_rviz': 'rviz', 'use_rviz': 'rviz',
    'rviz_config_file': 'rviz_config', 'params': 'params_file', 'parameters': 'params_file',
    'config_file': 'params_file', 'base_frame': 'base_link', 'tip_frame': 'tip_link',
    'ee_link': 'tip_link', 'end_effector': 'tip_link', 'use_sim': 'sim',
    'use_fake_hardware': 'sim', 'mappings': 'xacro_args',
}


def given_names(argv):
    """Return the names of the ``name:=value`` items of ``argv`` (a launch context's argv:
    the launch arguments of the command line), in order, once each."""
    return list(dict.fromkeys(item.split(':=', 1)[0] for item in argv if ':=' in item))


def named_on_command_line(argv, launch_file):
    """Return True when ``argv`` (``sys.argv[1:]`` of ``ros2 launch``) names ``launch_file``
    itself (``ros2 launch smcik_ros arm.launch.py``, or its path): its launch arguments are
    then this file's, not those of a launch file that includes it."""
    name = os.path.basename(launch_file)
    return any(':=' not in item and os.path.basename(item) == name for item in argv)


def check_names(given, declared=ARGUMENT_NAMES, xacro=False):
    """Raise ParameterError when ``given`` (launch argument names) holds one that no
    argument in ``declared`` has, naming it, what it likely meant and every valid name.

    xacro: the URDF is a .xacro (an unknown name may be one of its arguments)."""
    unknown = [n for n in given if n not in declared and n not in LAUNCH_OWN]
    if not unknown:
        return
    said = []
    for name in unknown:
        meant = OTHER_NAMES.get(name)
        if meant is None:
            close = difflib.get_close_matches(name, declared, n=1, cutoff=0.6)
            meant = close[0] if close else None
        if meant is not None:
            said.append(f'{name} (did you mean {meant}?)')
        elif xacro:
            said.append(f"{name} (an argument of the .xacro? give it as xacro_args:='{name}:="
                        "...')")
        else:
            said.append(name)
    raise ParameterError(
        f'unknown launch argument{"s" if len(said) > 1 else ""} {", ".join(said)}: launch '
        f'would ignore {"them" if len(said) > 1 else "it"} silently. The arguments of this '
        f'launch file: {", ".join(declared)} (ros2 launch smcik_ros arm.launch.py '
        '--show-args describes them); every other setting goes in a params_file')


def parse_xacro_args(text):
    """Return {name: value} of ``'name:=value name2:=value2'`` (shell quoting for spaces)."""
    try:
        items = shlex.split(text)
    except ValueError as exc:
        raise ParameterError(f'xacro_args:={text!r}: {exc}') from None
    mappings = {}
    for item in items:
        name, sep, value = item.partition(':=')
        if not sep or not name:
            raise ParameterError(f"xacro_args:={text!r}: {item!r} is not name:=value (e.g. "
                                 "xacro_args:='ur_type:=ur5 name:=ur')")
        mappings[name] = value
    return mappings


def parse_package_paths(text):
    """Return the absolute directories of ``package_paths`` ('a:b', 'a,b' or '[a, b]');
    ParameterError for one that is not a directory."""
    text = text.strip()
    if not text:
        return []
    if text.startswith('['):
        import yaml
        try:
            items = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ParameterError(f'package_paths:={text!r}: not a list ({exc})') from None
        if not isinstance(items, list):
            raise ParameterError(f'package_paths:={text!r}: not a list')
        items = [str(item) for item in items]
    else:
        items = re.split(r'[:,]', text)
    paths = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        path = os.path.abspath(os.path.expanduser(item))
        if not os.path.isdir(path):
            raise ParameterError(f'package_paths entry {item!r} is not a directory')
        paths.append(path)
    return paths


def params_file_values(path, node_name='smcik_node'):
    """Return the ``ros__parameters`` that the params file ``path`` gives ``node_name``: its
    wildcard sections (``/**``), then its own section over them ({} when neither)."""
    import yaml
    try:
        with open(path, encoding='utf-8') as handle:
            data = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise ParameterError(f'params_file {str(path)!r} cannot be read: {exc}') from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParameterError(f'params_file {str(path)!r} is not a ROS parameter file (a '
                             'mapping of node names to ros__parameters)')
    wildcard, own = {}, {}
    for key, section in data.items():
        if not isinstance(section, dict) or not isinstance(section.get('ros__parameters'),
                                                           dict):
            continue
        name = str(key).strip('/')
        if name in ('**', '*') or name.endswith('/**'):
            wildcard.update(section['ros__parameters'])
        elif name == node_name or name.split('/')[-1] == node_name:
            own.update(section['ros__parameters'])
    return {**wildcard, **own}


@dataclasses.dataclass
class Plan:
    """What the launch starts, from its arguments (``plan``).

    urdf_path: the robot's URDF (or .xacro) file, absolute; robot_description: its XML;
    params_file: absolute; smcik_node / sim_arm: parameters set on top of params_file
    (str, float, int, bool or a list of str); sim, rviz: start them; rviz_config: absolute;
    notes: [(level, text)] to log ('info' or 'warning').
    """

    urdf_path: str
    robot_description: str
    params_file: str
    smcik_node: dict
    sim_arm: dict
    sim: bool
    rviz: bool
    rviz_config: str
    notes: list


def _flag(values, name):
    value = values.get(name, '').strip().lower()
    if value not in ('true', 'false', '1', '0'):
        raise ParameterError(f'{name}:={value!r}: expected true or false')
    return value in ('true', '1')


def _resolved(path, name):
    return str(resolve_path(path, f'{name}').resolve())


def _choose_urdf(values, params, notes):
    """Return (absolute URDF file, what named it) from urdf_path, its old name urdf, the
    params file's urdf_path (None with its robot_description XML instead)."""
    new, old = values.get('urdf_path', '').strip(), values.get('urdf', '').strip()
    if old:
        if new:
            a = _resolved(new, 'launch argument urdf_path')
            b = _resolved(old, 'launch argument urdf')
            if os.path.realpath(a) != os.path.realpath(b):
                raise ParameterError(
                    f'urdf:={old!r} and urdf_path:={new!r} name different files: urdf is the '
                    'old name of urdf_path, give urdf_path only')
            notes.append(('warning', 'urdf is the old name of the launch argument urdf_path '
                                     '(both given, the same file): give urdf_path only'))
            return a, 'urdf_path'
        notes.append(('warning', f'launch argument urdf is the old name of urdf_path: write '
                                 f'urdf_path:={old} (urdf still works, for now)'))
        return _resolved(old, 'launch argument urdf'), 'urdf'
    if new:
        return _resolved(new, 'launch argument urdf_path'), 'urdf_path'
    text = str(params.get('urdf_path', '') or '').strip()
    if text:
        return _resolved(text, "params_file's urdf_path"), "params_file's urdf_path"
    if str(params.get('robot_description', '') or '').strip():
        return None, "params_file's robot_description"
    raise ParameterError('no robot: give urdf_path:=/path/to/robot.urdf (or .xacro), or a '
                         'params_file with smcik_node urdf_path')


def plan(values, share):
    """Return the Plan of the launch arguments ``values`` ({name: text}; missing names are
    empty) with the package share directory ``share`` (its config/ and urdf/).

    Raises ParameterError (or ModelError, for a URDF or xacro that cannot be read) with a
    message that names the argument and says what to give instead.
    """
    values = {name: values.get(name, default) for name, default, _ in ARGUMENTS}
    notes = []
    params_file = values['params_file'].strip() or os.path.join(share, 'config', 'arm.yaml')
    params_file = _resolved(params_file, 'launch argument params_file')
    params = params_file_values(params_file)
    xacro_args = parse_xacro_args(values['xacro_args'])
    urdf_path, source = _choose_urdf(values, params, notes)
    if urdf_path is None:
        xml = str(params['robot_description'])
        node_urdf = str(params.get('urdf_path', '') or '')
    else:
        is_xacro = urdf_path.endswith('.xacro')
        if xacro_args and not is_xacro:
            notes.append(('warning', f'xacro_args ignored: {source} {urdf_path!r} is not a '
                                     '.xacro'))
        xml = read_urdf_file(urdf_path, xacro_args if is_xacro else None)
        node_urdf = urdf_path
        if is_xacro and xacro_args:
            # smcik_node reads urdf_path again, without the arguments, to check that it is
            # the robot of robot_description: it gets the XML alone.
            node_urdf = ''
            notes.append(('info', f'{urdf_path!r} needs xacro_args: smcik_node gets its XML '
                                  '(robot_description) without the file, so package:// '
                                  'meshes resolve through the ament index or package_paths, '
                                  'and its SRDF comes from srdf_path or '
                                  '/robot_description_semantic'))
    model = {'robot_description': xml, 'urdf_path': node_urdf}
    node, sim = dict(model), dict(model)
    # The chain and the command wiring: the launch argument, else smcik_node's value in
    # params_file (given to sim_arm too, so that both nodes agree on them).
    for name in ('base_link', 'tip_link', 'command_type', 'command_topic'):
        text = values[name].strip() or str(params.get(name, '') or '').strip()
        if text:
            node[name] = sim[name] = text
    if values['solver'].strip():
        node['solver'] = values['solver'].strip()
    srdf = values['srdf_path'].strip()
    if srdf:
        srdf = _resolved(srdf, 'launch argument srdf_path')
        if srdf.endswith('.xacro'):
            node['robot_description_semantic'] = read_urdf_file(srdf, xacro_args)
            node['srdf_path'] = ''
        else:
            node['srdf_path'] = sim['srdf_path'] = srdf
    packages = parse_package_paths(values['package_paths'])
    if packages:
        node['package_paths'] = packages
    for name, (kind, _) in REAL_ARM_ARGUMENTS.items():
        text = values[name].strip()
        if not text:
            continue
        try:
            node[name] = kind(text)
        except ValueError:
            raise ParameterError(f'{name}:={text!r}: expected a number') from None
    rviz_config = values['rviz_config'].strip() or os.path.join(share, 'config', 'arm.rviz')
    return Plan(urdf_path=urdf_path or '', robot_description=xml, params_file=params_file,
                smcik_node=node, sim_arm=sim, sim=_flag(values, 'sim'),
                rviz=_flag(values, 'rviz'), rviz_config=rviz_config, notes=notes)


_ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')
_ROS_LOG = re.compile(r'\[(FATAL|ERROR)\]\s*(?:\[[^\]]*\]\s*)*?\[[^\]]*\]:\s?(.*)')


class ExitWatch:
    """Whether a launch failed, and why: the processes it started, their last error lines.

    ``expect(name)`` for each process; ``output(name, data)`` with what it printed;
    ``shutdown(reason, due_to_sigint)`` when the launch shuts down; ``exited(name, code)``
    returns the failure message once every expected process has exited and one of them
    failed, else None. A process fails when it exits with a code > 0, or is ended by a
    signal other than a request to stop: SIGINT and SIGTERM never count (Ctrl-C reaches the
    processes from the terminal too, maybe before launch handles it), SIGKILL not after the
    launch was asked to stop (launch's escalation); SIGSEGV, SIGABRT, an OOM kill do. The
    reason is the process's last FATAL line, else its last ERROR line, else the last line it
    printed (a Python traceback's last line).
    """

    def __init__(self):
        self._running = []
        self._partial = {}
        self._last = {}
        self._fatal = {}
        self._error = {}
        self.failures = []           # [(name, code, reason)], in exit order
        self.stopping = False
        self.due_to_sigint = False

    def expect(self, name):
        self._running.append(name)

    def output(self, name, data):
        if isinstance(data, bytes):
            data = data.decode('utf-8', errors='replace')
        text = self._partial.get(name, '') + data
        *lines, self._partial[name] = text.split('\n')
        for line in lines:
            self._line(name, line)

    def _line(self, name, line):
        line = _ANSI.sub('', line).rstrip()
        if not line.strip():
            return
        self._last[name] = line.strip()
        match = _ROS_LOG.search(line)
        if match:
            store = self._fatal if match.group(1) == 'FATAL' else self._error
            store[name] = match.group(2).strip()

    def shutdown(self, reason=None, due_to_sigint=False):
        self.stopping = True
        self.due_to_sigint = self.due_to_sigint or bool(due_to_sigint)

    def reason(self, name):
        """Return the last FATAL line, ERROR line, or line of process ``name`` (or '')."""
        partial = self._partial.pop(name, '')
        if partial:
            self._line(name, partial)
        return self._fatal.get(name) or self._error.get(name) or self._last.get(name, '')

    def exited(self, name, returncode):
        if name in self._running:
            self._running.remove(name)
        stop_requests = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGKILL,) if self.stopping
                                                           else ())
        stopped = returncode is not None and returncode < 0 and -returncode in stop_requests
        if returncode and not stopped:
            self.failures.append((name, returncode, self.reason(name)))
        if self._running or not self.failures:
            return None
        return self.message()

    def message(self):
        """Return the failure message (the first failure; the others counted), or None."""
        if not self.failures:
            return None
        name, code, reason = self.failures[0]
        text = f'{name} exited with code {code}'
        if reason:
            text += f': {reason}'
        others = [f'{n} (code {c})' for n, c, _ in self.failures[1:]]
        if others:
            text += f' (then also {", ".join(others)})'
        return text
