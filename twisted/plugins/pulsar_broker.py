from twisted.application.service import ServiceMaker

pulsar_broker = ServiceMaker(
    "pulsar-broker", "pulsar_twisted.daemons.broker", "Pulsar broker", "pulsar-broker")
