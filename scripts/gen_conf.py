#!/usr/bin/env python
"""Write conf/*.conf from the configuration classes (a test checks that they are equal)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pulsar_twisted.config import (  # noqa: E402
    BookieConfig, BrokerConfig, FunctionsWorkerConfig, ProxyConfig, StandaloneConfig)

FILES = {
    "standalone.conf": (StandaloneConfig,
                        "Configuration of `twistd -n pulsar-standalone`: one process running a broker,\n"
                        "an in-process bookie and the embedded metadata store.\n"
                        "Key names are Apache Pulsar's and BookKeeper's: a Pulsar user's own standalone.conf starts\n"
                        "unchanged (real keys not implemented here are named in a start-up warning;\n"
                        "strictConfig=true refuses them); any other key stops start-up."),
    "broker.conf": (BrokerConfig,
                    "Configuration of `twistd -n pulsar-broker -c conf/broker.conf`.\n"
                    "Key names are Apache Pulsar's: a Pulsar broker.conf starts unchanged (real keys not\n"
                    "implemented here are named in a start-up warning); any other key stops start-up."),
    "bookkeeper.conf": (BookieConfig,
                        "Configuration of `twistd -n pulsar-bookie -c conf/bookkeeper.conf`.\n"
                        "Key names are Apache BookKeeper's: real BookKeeper keys not implemented here are named\n"
                        "in a start-up warning; any other key stops start-up."),
    "functions_worker.conf": (FunctionsWorkerConfig,
                              "Configuration of `twistd -n pulsar-functions-worker -c conf/functions_worker.conf`.\n"
                              "Key names are those of Apache Pulsar's functions_worker.yml that this worker honours\n"
                              "(key=value form); any other key stops start-up. The worker runs one instance set per\n"
                              "cluster: several workers sharing assignments are not supported yet."),
    "proxy.conf": (ProxyConfig,
                   "Configuration of `twistd -n pulsar-proxy -c conf/proxy.conf`.\n"
                   "Key names are Apache Pulsar's proxy.conf: real proxy keys not implemented here are named\n"
                   "in a start-up warning; any other key stops start-up."),
}


def render_all():
    return {name: cls().render(header) for name, (cls, header) in FILES.items()}


if __name__ == "__main__":
    conf_dir = os.path.join(os.path.dirname(__file__), "..", "conf")
    for name, text in render_all().items():
        with open(os.path.join(conf_dir, name), "w") as f:
            f.write(text)
        print("wrote", os.path.join("conf", name))
