"""``assert_fails`` for the contract mixins whose tests await Deferreds (trial TestCases)."""


class AssertFailsMixin:
    """Mixed into a TestCase: an awaitable check that a Deferred fails with a given error."""

    async def assert_fails(self, d, error):
        """Await ``d`` and check it fails with ``error`` (returns the exception)."""
        try:
            result = await d
        except error as e:
            return e
        except Exception as e:   # the wrong error: show which
            self.fail(f"expected {error.__name__}, got {type(e).__name__}: {e}")
        self.fail(f"expected {error.__name__}, got the result {result!r}")
