"""
The process runtime's spawner: runs ``instance_main`` for one instance with ``spawnProcess``,
its stdout and stderr appended to ``logs/instance-{id}.log`` beside the instance spec (Pulsar
writes ``logs/functions/{tenant}/{ns}/{name}/{name}-{id}.log``; what the user's code prints and
its tracebacks stay out of the daemon's log) and the status pipe on fd 3.
"""

import os
import sys

import pulsar_twisted
from pulsar_twisted.functions.supervisor import STATUS_FD

#: The directory holding the ``pulsar_twisted`` package this worker runs, first on the
#: instance's PYTHONPATH so that the instance runs the same code.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pulsar_twisted.__file__)))


class ProcessLauncher:
    """``launcher(spec_path, instance_id)`` gives the ``launch(protocol)`` an
    ``InstanceSupervisor`` calls."""

    def __init__(self, reactor, python: str = sys.executable, environ=None):
        self.reactor = reactor
        self.python = python
        self.environ = dict(os.environ if environ is None else environ)

    def __call__(self, spec_path: str, instance_id: int):
        def launch(protocol):
            env = dict(self.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [_PACKAGE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
            args = [self.python, "-m", "pulsar_twisted.functions.instance_main", spec_path,
                    str(instance_id)]
            directory = os.path.dirname(spec_path)
            os.makedirs(os.path.join(directory, "logs"), exist_ok=True)
            log = open(os.path.join(directory, "logs", f"instance-{instance_id}.log"), "ab")
            try:
                # The child gets its own copies of the descriptor; ours closes right after.
                return self.reactor.spawnProcess(
                    protocol, self.python, args, env=env, path=directory,
                    childFDs={0: "w", 1: log.fileno(), 2: log.fileno(), STATUS_FD: "r"})
            finally:
                log.close()
        return launch
