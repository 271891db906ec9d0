from twisted.internet import defer, reactor, task
from tests.web.support import WebTestCase
P = "/admin/v2/persistent/public/default"

class R(WebTestCase):
    @defer.inlineCallbacks
    def compacted(self, name):
        yield self.expect("PUT", f"{P}/{name}/compaction", 204)
        for _ in range(200):
            body = yield self.expect("GET", f"{P}/{name}/compaction", 200)
            if body["status"] != "RUNNING":
                break
            yield task.deferLater(reactor, 0.01, lambda: None)
        return body

    @defer.inlineCallbacks
    def test_a(self):
        yield self.expect("PUT", f"{P}/t", 204)
        yield self.expect("PUT", f"{P}/t/unload", 204)
        print((yield self.compacted("t")))
        print(self.broker.topics["persistent://public/default/t"].ledger.last_confirmed_entry())

    @defer.inlineCallbacks
    def test_b(self):
        yield self.expect("PUT", f"{P}/t", 204)
        yield self.expect("PUT", f"{P}/t/subscription/s", 204)
        yield self.expect("PUT", f"{P}/t/unload", 204)
        print((yield self.compacted("t")))

    @defer.inlineCallbacks
    def test_c(self):
        yield self.expect("PUT", f"{P}/t", 204)
        print((yield self.compacted("t")))
        yield self.expect("PUT", f"{P}/t/unload", 204)
        print((yield self.compacted("t")))
        print(self.broker.topics["persistent://public/default/t"].ledger.last_confirmed_entry())
