from twisted.application.service import ServiceMaker

pulsar_broker = ServiceMaker(
    "pulsar-broker", "pulsar_twisted.broker.tap_broker", "Pulsar broker", "pulsar-broker")
