"""
The process runtime's spawner: runs ``instance_main`` for one instance with ``spawnProcess``,
its stdout/stderr to the worker (logged per instance) and the status pipe on fd 3.
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
            return self.reactor.spawnProcess(protocol, self.python, args, env=env,
                                             path=os.path.dirname(spec_path),
                                             childFDs={0: "w", 1: "r", 2: "r", STATUS_FD: "r"})
        return launch
