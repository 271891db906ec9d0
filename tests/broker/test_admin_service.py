"""AdminService is a thin facade over one admin area per resource (broker/admin/)."""

from twisted.internet import defer
from twisted.trial import unittest

from pulsar_twisted.broker.admin.service import AdminService, _On
from pulsar_twisted.testing.broker import BrokerHarness


class FacadeTests(unittest.TestCase):
    @defer.inlineCallbacks
    def setUp(self):
        self.harness = BrokerHarness()
        yield self.harness.start()
        self.admin = AdminService(self.harness.broker, self.harness.store, self.harness.config,
                                  self.harness.clock)

    def test_every_facade_method_is_its_areas(self):
        """Each public name resolves to the same-named method of the area that owns it."""
        names = [n for n, v in vars(AdminService).items() if isinstance(v, _On)]
        self.assertEqual(len(names), 80)
        for name in names:
            area = getattr(self.admin, vars(AdminService)[name].area)
            self.assertEqual(getattr(self.admin, name), getattr(area, name), name)

    def test_areas_share_one_context(self):
        """Every area works on the same broker, store and resource accessors."""
        areas = [self.admin.clusters, self.admin.tenants, self.admin.namespaces, self.admin.topics,
                 self.admin.subscriptions, self.admin.stats, self.admin.permissions, self.admin.brokers,
                 self.admin.bundles]
        self.assertEqual({id(a.context) for a in areas}, {id(self.admin.context)})

    def test_calls_go_through(self):
        """A call through the facade reaches the metadata (the default namespace exists)."""
        d = defer.ensureDeferred(self.admin.list_namespaces("public"))
        self.assertEqual(self.successResultOf(d), ["public/default"])
