from twisted.application.service import ServiceMaker

pulsar_functions_worker = ServiceMaker(
    "pulsar-functions-worker", "pulsar_twisted.daemons.functions_worker",
    "Pulsar Functions worker beside a cluster", "pulsar-functions-worker")
