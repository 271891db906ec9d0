"""A namespace's effective OffloadPolicies (Pulsar's OffloadPoliciesImpl.oldPoliciesCompatible
then mergeConfiguration) and the Policies document writes of the offload sub-resources."""

from twisted.trial import unittest

from pulsar_twisted.config import BrokerConfig
from pulsar_twisted.resources.checks import InvalidValue, OutOfRange
from pulsar_twisted.resources.policies import (
    NamespacePolicies, OffloadPolicies, check_offload_policies, put_offload_setting,
    remove_offload_policies)


def effective(document, **config):
    return NamespacePolicies.from_json(document, BrokerConfig(**config)).offload


class ResolutionTests(unittest.SynchronousTestCase):
    def test_broker_defaults(self):
        """No stored settings: the broker's keys; the dataclass defaults are Pulsar's."""
        self.assertEqual(effective({}), OffloadPolicies())
        offload = effective({}, managedLedgerOffloadDriver="filesystem", fileSystemURI="file:///o",
                            managedLedgerOffloadThresholdInBytes=0,
                            managedLedgerDataReadPriority="bookkeeper-first")
        self.assertEqual((offload.driver, offload.file_system_uri, offload.threshold_bytes,
                          offload.read_priority), ("filesystem", "file:///o", 0, "bookkeeper-first"))

    def test_s3_names_win_for_s3(self):
        """For an S3 driver the s3* bucket/region/endpoint win over the generic keys; for the
        filesystem driver only the generic ones count."""
        config = dict(managedLedgerOffloadBucket="generic", s3ManagedLedgerOffloadBucket="s3",
                      managedLedgerOffloadRegion="r-generic",
                      managedLedgerOffloadServiceEndpoint="http://generic")
        offload = effective({}, managedLedgerOffloadDriver="S3", **config)
        self.assertEqual((offload.bucket, offload.region, offload.endpoint),
                         ("s3", "r-generic", "http://generic"))
        self.assertEqual(effective({}, managedLedgerOffloadDriver="filesystem", **config).bucket,
                         "generic")

    def test_namespace_object_over_broker(self):
        """Each field the namespace's offload_policies sets wins; the others stay the broker's."""
        document = {"offload_policies": {"managedLedgerOffloadThresholdInBytes": 10,
                                         "managedLedgerOffloadedReadPriority": "BOOKKEEPER_FIRST"}}
        offload = effective(document, managedLedgerOffloadDriver="aws-s3",
                            s3ManagedLedgerOffloadBucket="b", managedLedgerOffloadThresholdInSeconds=60)
        self.assertEqual((offload.driver, offload.bucket, offload.threshold_bytes,
                          offload.threshold_seconds, offload.read_priority),
                         ("aws-s3", "b", 10, 60, "bookkeeper-first"))

    def test_old_fields_between(self):
        """offload_threshold (unless -1) and offload_deletion_lag_ms (unless null) fill what the
        object leaves unset, over the broker; the object's own values win over them."""
        document = {"offload_threshold": 5, "offload_deletion_lag_ms": 0,
                    "offload_policies": {"managedLedgerOffloadThresholdInBytes": 9}}
        offload = effective(document, managedLedgerOffloadThresholdInBytes=100)
        self.assertEqual((offload.threshold_bytes, offload.deletion_lag_ms), (9, 0))
        offload = effective({"offload_threshold": 5, "offload_threshold_in_seconds": 30},
                            managedLedgerOffloadThresholdInBytes=100)
        self.assertEqual((offload.threshold_bytes, offload.threshold_seconds), (5, 30))
        self.assertEqual(effective({"offload_threshold": -1},
                                   managedLedgerOffloadThresholdInBytes=100).threshold_bytes, 100)

    def test_bad_stored_object_left_at_default(self):
        """A stored object that cannot be used is logged and the broker's settings apply."""
        offload = effective({"offload_policies": {"managedLedgerOffloadedReadPriority": "fast"}},
                            managedLedgerOffloadDriver="filesystem")
        self.assertEqual(offload.driver, "filesystem")

    def test_other_policies_unaffected(self):
        document = {"offload_policies": "junk", "message_ttl_in_seconds": 30}
        policies = NamespacePolicies.from_json(document, BrokerConfig())
        self.assertEqual(policies.message_ttl_seconds, 30)
        self.assertEqual(policies.offload, OffloadPolicies())


class DocumentWriteTests(unittest.SynchronousTestCase):
    def test_check_fills_pulsar_defaults(self):
        out = check_offload_policies({"managedLedgerOffloadDriver": "aws-s3",
                                      "s3ManagedLedgerOffloadBucket": "b"})
        self.assertEqual(out["managedLedgerOffloadMaxThreads"], 2)
        self.assertEqual(out["managedLedgerOffloadedReadPriority"], "TIERED_STORAGE_FIRST")
        self.assertEqual(out["s3ManagedLedgerOffloadMaxBlockSizeInBytes"], 64 * 1024 * 1024)

    def test_check_refusals(self):
        self.assertRaises(OutOfRange, check_offload_policies, None)
        self.assertRaises(OutOfRange, check_offload_policies, {"managedLedgerOffloadDriver": "aws-s3"})
        self.assertRaises(OutOfRange, check_offload_policies, {"managedLedgerOffloadDriver": "azureblob",
                                                               "managedLedgerOffloadBucket": "b"})
        self.assertRaises(InvalidValue, check_offload_policies, [])
        self.assertRaises(InvalidValue, check_offload_policies, {
            "managedLedgerOffloadDriver": "filesystem", "managedLedgerOffloadedReadPriority": "x"})

    def test_namespace_credentials(self):
        """A namespace's own S3 credentials reach its OffloadPolicies (the secret not in its repr);
        an id without its secret, and an STS role (not built here), are refused."""
        stored = check_offload_policies({
            "managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadBucket": "b",
            "s3ManagedLedgerOffloadCredentialId": "id", "s3ManagedLedgerOffloadCredentialSecret": "s3cr3t"})
        offload = effective({"offload_policies": stored})
        self.assertEqual((offload.credential_id, offload.credential_secret), ("id", "s3cr3t"))
        self.assertNotIn("s3cr3t", repr(offload))
        for extra in ({"s3ManagedLedgerOffloadCredentialId": "id"},
                      {"s3ManagedLedgerOffloadRole": "arn:aws:iam::1:role/x"}):
            self.assertRaises(OutOfRange, check_offload_policies, {
                "managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadBucket": "b", **extra})

    def test_setting_folds_old_fields(self):
        """Pulsar's mergeOffloadThresholdsForCompatibility on every offload write."""
        document = {"offload_threshold": 7, "offload_deletion_lag_ms": 3}
        put_offload_setting(document, "managedLedgerOffloadThresholdInSeconds", 60)
        offload = document["offload_policies"]
        self.assertEqual((offload["managedLedgerOffloadThresholdInBytes"],
                          offload["managedLedgerOffloadDeletionLagInMillis"],
                          offload["managedLedgerOffloadThresholdInSeconds"]), (7, 3, 60))
        self.assertEqual(document["offload_threshold"], -1)
        self.assertNotIn("offload_deletion_lag_ms", document)

    def test_remove(self):
        document = {"offload_threshold": 7, "offload_policies": {}, "offload_deletion_lag_ms": 3}
        self.assertEqual(remove_offload_policies(document), {"offload_threshold": -1})
