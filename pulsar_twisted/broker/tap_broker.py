"""twistd plugin module for ``pulsar-broker`` (ServiceMaker wants Options and makeService)."""

from pulsar_twisted.broker.tap import BrokerOptions as Options, make_broker_service as makeService  # noqa: F401
