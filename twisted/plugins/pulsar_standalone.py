from twisted.application.service import ServiceMaker

pulsar_standalone = ServiceMaker(
    "pulsar-standalone", "pulsar_twisted.daemons.standalone",
    "Pulsar standalone: broker, bookie and metadata store in one process", "pulsar-standalone")
