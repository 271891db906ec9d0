"""
The trial suite. Hypothesis runs under one profile here: no per-example deadline and no "too
slow" health check, because both are timed assertions (the suite runs on a shared 2-core machine,
where a slow draw says nothing about the code under test). Every property is still checked on
as many examples as before.
"""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "pulsar-twisted-suite", deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pulsar-twisted-suite")
