"""
A throw-away S3-compatible server for the tiered-storage tests: moto's ``moto_server`` (PyPI
``moto[server]``, a test extra) in a subprocess on 127.0.0.1.

``S3Server(workdir).start()`` picks a free port, starts the server and returns once it answers
HTTP (bounded by ``start_timeout``; ``S3ServerError`` with the tail of its output otherwise).
``endpoint`` is then ``http://127.0.0.1:PORT``. moto keeps everything in memory: ``kill()`` (a
crash) or ``stop()`` loses every bucket and object, and ``restart()`` comes back on the same port
but EMPTY, which is what the fault tests want (an endpoint that vanishes and comes back) and no
more than that.

moto checks no signature, yet boto3 refuses to sign without credentials: ``env()`` gives dummy
ones (for a child process's environment), ``install_env()`` puts them in this process's
``os.environ`` until ``stop()`` puts back what was there.

Blocking (sleep-polling with deadlines), like ``process.py``, whose port picking and clean-up at
exit this follows.
"""

import atexit
import http.client
import os
import signal
import subprocess
import sys
import time

from .process import free_port

#: The child asks for SIGKILL when its parent dies (PR_SET_PDEATHSIG, Linux), so that a test run
#: killed with -9 leaves no server behind, then runs moto's own ``main`` (``python -m moto.server``).
_MOTO = ("import sys\n"
         "try:\n"
         "    import ctypes; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
         "except Exception:\n"
         "    pass\n"
         "sys.argv[0] = 'moto_server'\n"
         "from moto.server import main; main()\n")

#: Servers whose child may be running: killed at interpreter exit whatever the caller forgot.
_RUNNING = set()


@atexit.register
def _kill_leftovers():
    for server in list(_RUNNING):
        server.kill()


def skip_reason():
    """Why the S3 tests cannot run here (a text for trial's ``skip``), or None when they can."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as e:
        return (f"moto's S3 server is not installed ({e}): pip install 'moto[server]>=5.0' "
                f"(the test extra)")
    return None


class S3ServerError(Exception):
    """The server did not start or stop as asked; the message ends with its output's tail."""


class S3Server:
    """One ``moto_server`` child writing its output to ``<workdir>/moto.log``."""

    host = "127.0.0.1"
    region = "us-east-1"
    access_key = "testing"
    secret_key = "testing"
    log_tail_lines = 40

    def __init__(self, workdir: str, start_timeout: float = 30.0, stop_timeout: float = 5.0):
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.log_path = os.path.join(workdir, "moto.log")
        self.port = free_port(self.host)
        self.process = None
        self._log_file = None
        self._saved_env = None
        #: Seconds the last ``start()`` took until the server answered.
        self.start_seconds = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ credentials
    def env(self) -> dict:
        """Dummy credentials and region for boto3. The two file variables point boto3 away from
        the developer's own ``~/.aws`` (whose profile, region or endpoint must not leak in)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_CONFIG_FILE": os.path.join(self.workdir, "aws-config-none"),
            "AWS_SHARED_CREDENTIALS_FILE": os.path.join(self.workdir, "aws-credentials-none"),
        }

    def install_env(self) -> None:
        """Set ``env()`` (and unset a session token) in ``os.environ``; ``stop()`` restores."""
        if self._saved_env is None:
            names = list(self.env()) + ["AWS_SESSION_TOKEN", "AWS_PROFILE"]
            self._saved_env = {name: os.environ.get(name) for name in names}
        os.environ.pop("AWS_SESSION_TOKEN", None)
        os.environ.pop("AWS_PROFILE", None)
        os.environ.update(self.env())

    def restore_env(self) -> None:
        if self._saved_env is None:
            return
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = None

    def client(self):
        """A boto3 S3 client on this server with the dummy credentials (whatever os.environ has)."""
        import boto3
        from botocore.config import Config
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=30,
                          retries={"mode": "standard", "max_attempts": 2}))

    def create_bucket(self, name: str) -> None:
        client = self.client()
        try:
            client.create_bucket(Bucket=name)
        finally:
            client.close()

    # ------------------------------------------------------------------ the child
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self):
        """Start the server and wait until it answers HTTP; S3ServerError otherwise."""
        if self.running():
            raise S3ServerError(f"moto_server on {self.endpoint} is already running")
        began = time.monotonic()
        self._log_file = open(self.log_path, "ab")
        self._log_file.write(f"===== start on port {self.port} =====\n".encode())
        self._log_file.flush()
        env = dict(os.environ, **self.env())
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MOTO, "-H", self.host, "-p", str(self.port)],
            cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT)
        _RUNNING.add(self)
        deadline = began + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self._reap()
                raise S3ServerError(f"moto_server exited with status {code} while starting\n"
                                    + self.log_tail())
            if self._answers():
                self.start_seconds = time.monotonic() - began
                return self
            time.sleep(0.05)
        self.kill()
        raise S3ServerError(f"moto_server did not answer on {self.endpoint} within "
                            f"{self.start_timeout}s\n" + self.log_tail())

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=1)
        try:
            connection.request("GET", "/")     # any answer will do
            connection.getresponse().read()
            return True
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_timeout``, wait; then restore what ``install_env``
        changed. Idempotent."""
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(self.stop_timeout)
            self._reap()
        finally:
            self.restore_env()

    def kill(self) -> None:
        """SIGKILL and wait, as in a crash: the endpoint refuses connections, every object is
        lost (moto is in memory). The environment stays installed for a ``restart()``."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(self.stop_timeout)
        self._reap()

    def pause(self) -> None:
        """SIGSTOP: connections are accepted and never answered (a hung endpoint); data kept."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self):
        """Kill if running, then start again on the same port: same endpoint, no data."""
        self.kill()
        return self.start()

    def _reap(self) -> None:
        _RUNNING.discard(self)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self.process = None

    def log_tail(self, lines: int = None) -> str:
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no output)"
        tail = text.splitlines()[-(lines or self.log_tail_lines):]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)
