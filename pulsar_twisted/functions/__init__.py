"""
Pulsar Functions: the worker that keeps function metadata on the platform, runs each instance as
its own OS process (the process runtime) and answers the admin API v3.

The worker is a *client* of the platform: it reaches state through the metadata store and runs
instances that talk to the brokers with a Pulsar client, so this layer imports common, metadata
and client, never broker (``testing/layering.py``).
"""
