"""twistd plugin module for ``pulsar-standalone`` (ServiceMaker wants Options and makeService)."""

from pulsar_twisted.broker.tap import StandaloneOptions as Options, make_standalone_service as makeService  # noqa: F401
