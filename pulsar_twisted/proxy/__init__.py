"""
The Pulsar proxy (``twistd -n pulsar-proxy``): clients that cannot reach the brokers connect to
it alone. It answers lookups itself through broker connections (``lookup.py``), then splices each
client's producer/consumer connection onto the broker that owns the topic (``connection.py``,
``relay.py``), and forwards the admin REST API and HTTP lookups (``web.py``).
"""
