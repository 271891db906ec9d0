"""
``patch_method(case, obj, name, replacement)``: replace one object's method for a test.

The objects a broker keeps per loaded topic (topic, producer, managed ledger, their counters) have
slots and no instance dictionary (issue 14: memory per topic), so a test cannot set a method on
one of them. This patches the class instead, for the test's duration (``case.patch``), with a
method that calls ``replacement`` for ``obj`` and the class's own method for every other instance.
"""


def patch_method(case, obj, name: str, replacement) -> None:
    """Calls of ``obj.<name>(...)`` go to ``replacement(...)`` until ``case`` ends."""
    cls = type(obj)
    original = getattr(cls, name)

    def dispatch(self, *args, **kwargs):
        if self is obj:
            return replacement(*args, **kwargs)
        return original(self, *args, **kwargs)

    case.patch(cls, name, dispatch)
