"""The instance loop's guarantees (instance_main.Instance.handle) over fakes of the official
client's consumer and producer, and the loading of the user's code."""

import io
import json
import logging
import os
import sys
import textwrap

from pulsar.functions import serde
from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.instance_main import Instance, load_function
from tests.functions.test_context import FakeClient, FakeMessage, FakeState
from pulsar_twisted.functions.context import InstanceContext


class FakeId:
    def serialize(self):
        return b"\x08\x01\x10\x02"


class Message(FakeMessage):
    def __init__(self, data: bytes):
        super().__init__()
        self._data = data
        self._id = FakeId()

    def data(self):
        return self._data


class Recorder:
    """Consumer and output producer in one: records acks, nacks and sends in order."""

    def __init__(self, fail_send=False):
        self.events = []
        self.fail_send = fail_send

    def acknowledge(self, message):
        self.events.append(("ack", message.data()))

    def negative_acknowledge(self, message):
        self.events.append(("nack", message.data()))

    def send(self, payload, **conf):
        if self.fail_send:
            raise RuntimeError("send timed out")
        self.events.append(("send", payload, conf))


def instance(process, guarantee="ATLEAST_ONCE", fail_send=False, **config):
    spec = {"functionConfig": dict({"tenant": "public", "namespace": "default", "name": "f",
                                    "processingGuarantees": guarantee}, **config),
            "functionId": "public/default/f", "functionVersion": "0"}
    status = io.StringIO()
    inst = Instance(spec, 0, status)
    inst.consumer = inst.output = Recorder(fail_send)
    inst.process = process
    inst.in_serde = inst.out_serde = serde.IdentitySerDe()
    inst.context = InstanceContext(spec, 0, FakeClient(), FakeState(), lambda m, t: None)
    return inst, status


class GuaranteeTests(SynchronousTestCase):

    def setUp(self):
        # The instance's own log (stderr, to the instance log file in production): quiet here.
        logger = logging.getLogger("pulsar_twisted.functions.instance_main")
        logger.disabled = True
        self.addCleanup(setattr, logger, "disabled", False)

    def test_atleast_once_acks_after_the_send(self):
        """ATLEAST_ONCE: the output is sent (with the __pfn_ properties and the key) before the
        ack."""
        inst, status = instance(lambda value, context: value + "!")
        inst.handle(Message(b"hi"))
        (send, payload, conf), ack = inst.consumer.events
        self.assertEqual((send, payload, ack), ("send", b"hi!", ("ack", b"hi")))
        self.assertEqual(conf["properties"]["__pfn_input_topic__"], "persistent://public/default/in")
        self.assertEqual(conf["properties"]["__pfn_input_msg_id__"], "CAEQAg==")
        self.assertEqual(conf["properties"]["a"], "b")   # forwardSourceMessageProperty
        self.assertEqual(conf["partition_key"], "k1")
        report = json.loads(status.getvalue().splitlines()[-1])
        self.assertEqual((report["numReceived"], report["numSuccessfullyProcessed"]), (1, 1))

    def test_atmost_once_acks_before_processing(self):
        """ATMOST_ONCE: acked on receipt, before the function runs."""
        seen = []

        def process(value, context):
            seen.append(list(inst.consumer.events))
            return value
        inst, _ = instance(process, "ATMOST_ONCE")
        inst.handle(Message(b"x"))
        self.assertEqual(seen, [[("ack", b"x")]])

    def test_user_exception_negative_acks(self):
        """A user exception negative-acks and is counted with its text; nothing is sent."""
        def process(value, context):
            raise KeyError("nope")
        inst, status = instance(process)
        inst.handle(Message(b"x"))
        self.assertEqual(inst.consumer.events, [("nack", b"x")])
        report = json.loads(status.getvalue().splitlines()[-1])
        self.assertEqual(report["numUserExceptions"], 1)
        self.assertEqual(report["latestUserExceptions"][0]["exceptionString"], "KeyError: 'nope'")

    def test_none_filters_and_still_acks(self):
        """None sends nothing and the input is acked (a filter)."""
        inst, _ = instance(lambda value, context: None)
        inst.handle(Message(b"x"))
        self.assertEqual(inst.consumer.events, [("ack", b"x")])

    def test_manual_leaves_the_ack_to_the_function(self):
        """MANUAL (and autoAck=false): the worker never acks; the function does."""
        for inst, _ in (instance(lambda v, c: v, "MANUAL"), instance(lambda v, c: v, autoAck=False)):
            inst.handle(Message(b"x"))
            self.assertEqual([e[0] for e in inst.consumer.events], ["send"])

    def test_effectively_once_sends_the_input_position_as_sequence_id(self):
        """EFFECTIVELY_ONCE: one named producer per input topic, the input's position as the
        sequence id (ledgerId << 28 | entryId, plus one), ack after the send."""
        inst, _ = instance(lambda v, c: v, "EFFECTIVELY_ONCE", output="persistent://public/default/out")
        created = {}

        class Client:
            def create_producer(self, topic, producer_name=None, **kw):
                created[producer_name] = topic
                return inst.consumer
        inst.client = Client()

        class Position(FakeId):
            def ledger_id(self):
                return 5

            def entry_id(self):
                return 7
        message = Message(b"x")
        message._id = Position()
        inst.handle(message)
        inst.handle(message)
        self.assertEqual(created, {"pfn-public.default.f-public.default.in": "persistent://public/default/out"})
        sends = [e for e in inst.consumer.events if e[0] == "send"]
        self.assertEqual([conf["sequence_id"] for _, _, conf in sends], [((5 << 28) | 7) + 1] * 2)
        self.assertEqual([e[0] for e in inst.consumer.events], ["send", "ack", "send", "ack"])

    def test_failed_send_negative_acks(self):
        """An output that cannot be sent is a system exception: negative-acked, not acked."""
        inst, status = instance(lambda v, c: v, fail_send=True)
        inst.handle(Message(b"x"))
        self.assertEqual(inst.consumer.events, [("nack", b"x")])
        self.assertEqual(json.loads(status.getvalue().splitlines()[-1])["numSystemExceptions"], 1)


class LoadTests(SynchronousTestCase):

    def write(self, name, source):
        directory = self.mktemp()
        os.makedirs(directory)
        path = os.path.join(directory, f"{name}.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return path

    def test_official_function_class(self):
        """A pulsar.Function subclass gets (input, context)."""
        path = self.write("cls", """
            import pulsar
            class Shout(pulsar.Function):
                def process(self, input, context):
                    return input.upper() + context
        """)
        self.assertEqual(load_function(path, "cls.Shout")("a", "!"), "A!")

    def test_plain_function_and_module(self):
        """A plain function by name, or a bare module name meaning its ``process``."""
        path = self.write("plain", """
            def process(input):
                return input * 2
            def other(input):
                return -input
        """)
        self.assertEqual(load_function(path, "plain")(3, None), 6)
        self.assertEqual(load_function(path, "plain.other")(3, None), -3)
        self.assertRaises(ImportError, load_function, self.write("empty", "x = 1\n"), "empty.Nope")


def tiny_wheel(path: str) -> None:
    """A minimal pure-Python wheel ``tinydep`` (module ``tinydep`` with ``VALUE = 42``)."""
    import zipfile
    files = {
        "tinydep.py": "VALUE = 42\n",
        "tinydep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                       "Tag: py3-none-any\n",
    }
    files["tinydep-1.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in files) + \
        "tinydep-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)


class ZipPackageTests(SynchronousTestCase):

    def make_zip(self, with_deps: bool) -> str:
        import zipfile
        directory = self.mktemp()
        os.makedirs(directory)
        path = os.path.join(directory, "exclaim.zip")
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("exclaim/src/exclaim.py", textwrap.dedent("""
                import pulsar
                try:
                    from tinydep import VALUE
                except ImportError:
                    VALUE = 0
                class Exclaim(pulsar.Function):
                    def process(self, input, context):
                        return "%s!%d" % (input, VALUE)
            """))
            if with_deps:
                wheel = os.path.join(directory, "tinydep-1.0-py3-none-any.whl")
                tiny_wheel(wheel)
                archive.write(wheel, "exclaim/deps/tinydep-1.0-py3-none-any.whl")
                archive.writestr("exclaim/requirements.txt", "tinydep==1.0\n")
        return path

    def load(self, path):
        saved_path, saved_modules = list(sys.path), dict(sys.modules)
        try:
            return load_function(path, "exclaim.Exclaim")("hi", None)
        finally:
            sys.path[:] = saved_path
            for name in set(sys.modules) - set(saved_modules):
                del sys.modules[name]

    def test_zip_layout_src(self):
        """A .zip in Pulsar's layout: the module is imported from ``<name>/src``."""
        self.assertEqual(self.load(self.make_zip(with_deps=False)), "hi!0")

    def test_zip_deps_installed_offline(self):
        """The wheels under ``<name>/deps`` are installed (no index) and importable."""
        self.assertEqual(self.load(self.make_zip(with_deps=True)), "hi!42")
