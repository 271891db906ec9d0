"""twistd plugin module for ``pulsar-bookie`` (ServiceMaker wants Options and makeService)."""

from pulsar_twisted.bookie.tap import Options, make_bookie_service as makeService  # noqa: F401
