from twisted.application.service import ServiceMaker

pulsar_bookie = ServiceMaker(
    "pulsar-bookie", "pulsar_twisted.daemons.bookie", "Pulsar bookie (BookKeeper storage server)",
    "pulsar-bookie")
