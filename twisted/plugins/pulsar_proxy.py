from twisted.application.service import ServiceMaker

pulsar_proxy = ServiceMaker(
    "pulsar-proxy", "pulsar_twisted.daemons.proxy", "Pulsar proxy (lookups and relayed connections)",
    "pulsar-proxy")
