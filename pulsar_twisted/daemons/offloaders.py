"""
The broker's tiered-storage offloaders (``mledger/offload/offloader.py``), made from its configuration.
"""

from pulsar_twisted.config import ConfigError
from pulsar_twisted.mledger.offload.offloader import OffloaderRegistry
from pulsar_twisted.resources.policies import NamespacePolicies


def start_offloaders(config, reactor) -> OffloaderRegistry:
    """A started OffloaderRegistry with ``managedLedgerOffloadMaxThreads`` copying threads. The
    broker-wide driver (``managedLedgerOffloadDriver``), when set, is opened now: a driver or
    setting that cannot work stops the start-up with a ConfigError naming the key."""
    registry = OffloaderRegistry(reactor, config.managedLedgerOffloadMaxThreads)
    registry.startService()
    defaults = NamespacePolicies.defaults(config).offload
    if defaults.driver:
        try:
            registry.for_policies(defaults)
        except ValueError as e:
            registry.stopService()
            raise ConfigError(str(e)) from None
    return registry
