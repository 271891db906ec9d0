"""FunctionConfig: Pulsar's field names and defaults, its validation messages, update rules."""

from twisted.trial.unittest import SynchronousTestCase

from pulsar_twisted.functions.config import FunctionConfig
from pulsar_twisted.functions.errors import InvalidFunctionConfig, NotSupportedYet


def config(**fields):
    base = {"tenant": "public", "namespace": "default", "name": "f", "className": "mod.F",
            "inputs": ["persistent://public/default/in"], "output": "persistent://public/default/out"}
    base.update(fields)
    return FunctionConfig.from_json({k: v for k, v in base.items() if v is not None})


class ConfigTests(SynchronousTestCase):

    def refused(self, message, error=InvalidFunctionConfig, **fields):
        e = self.assertRaises(error, config(**fields).validate)
        self.assertEqual(str(e), message)
        return e

    def test_defaults_are_pulsars(self):
        """Absent fields take Pulsar's defaults; the subscription is tenant/namespace/name."""
        c = config()
        c.validate()
        self.assertEqual((c.processingGuarantees, c.parallelism, c.runtime, c.autoAck,
                          c.subscriptionPosition), ("ATLEAST_ONCE", 1, "PYTHON", True, "Latest"))
        self.assertEqual(c.subscription_name(), "public/default/f")
        self.assertEqual(config(subName="mine").subscription_name(), "mine")
        self.assertNotIn("logTopic", c.to_json())

    def test_unknown_field_refused(self):
        """A field Pulsar's FunctionConfig does not have is refused, not dropped."""
        e = self.assertRaises(InvalidFunctionConfig, FunctionConfig.from_json,
                              {"tenant": "t", "inptus": ["x"]})
        self.assertIn("inptus", str(e))
        self.assertRaises(InvalidFunctionConfig, FunctionConfig.from_json, ["not", "an", "object"])

    def test_pulsar_messages(self):
        """Each of Pulsar's common checks answers with its message."""
        self.refused("Function name cannot be null", name=None)
        self.refused("Function classname cannot be null", className=None)
        self.refused("No input topic(s) specified for the function", inputs=None)
        self.refused("Input topic persistent://a/b is invalid", inputs=["persistent://a/b"])
        self.refused("Function parallelism must be a positive number", parallelism=0)
        self.refused("Output topic persistent://public/default/in is also being used as an input "
                     "topic (topics must be one or the other)", output="persistent://public/default/in")
        self.refused("Dead Letter Topic specified, however max retries is set to infinity",
                     deadLetterTopic="persistent://public/default/dlq")
        self.refused("Only one of retain ordering or retain key ordering can be set",
                     retainOrdering=True, retainKeyOrdering=True)
        self.refused("Message timeout can only be specified with processing guarantee is "
                     "ATLEAST_ONCE", timeoutMs=100, processingGuarantees="ATMOST_ONCE")

    def test_gaps_answer_501(self):
        """What this slice does not run is refused as not supported yet (HTTP 501)."""
        e = self.refused("topicsPattern inputs are not supported yet", NotSupportedYet,
                         topicsPattern="persistent://public/default/.*")
        self.assertEqual(e.status, 501)
        self.refused("MaxMessageRetries and Effectively once don't gel well",
                     processingGuarantees="EFFECTIVELY_ONCE", maxMessageRetries=2)
        config(processingGuarantees="EFFECTIVELY_ONCE").validate()
        self.refused("Runtime JAVA is not supported yet: only PYTHON functions run here",
                     NotSupportedYet, runtime="JAVA")
        config(py="f.zip").validate()
        config(py="f.whl").validate()

    def test_update_changes_only_given_fields(self):
        """An update replaces the fields it sets and keeps the others."""
        old = config(parallelism=2, userConfig={"a": 1})
        new = old.merged_with(FunctionConfig.from_json(
            {"tenant": "public", "namespace": "default", "name": "f", "parallelism": 3}))
        self.assertEqual((new.parallelism, new.userConfig, new.output),
                         (3, {"a": 1}, "persistent://public/default/out"))

    def test_update_refuses_immutable_fields(self):
        """Guarantees, subscription and inputs cannot be altered (Pulsar's messages)."""
        old = config()
        names = {"tenant": "public", "namespace": "default", "name": "f"}
        for fields, message in (
                ({"processingGuarantees": "ATMOST_ONCE"}, "Processing Guarantees cannot be altered"),
                ({"subName": "other"}, "Subscription Name cannot be altered"),
                ({"inputs": ["persistent://public/default/x"]}, "Input Topics cannot be altered")):
            e = self.assertRaises(InvalidFunctionConfig, old.merged_with,
                                  FunctionConfig.from_json(dict(names, **fields)))
            self.assertEqual(str(e), message)
