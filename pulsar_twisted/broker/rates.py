"""
Rates of the stats (msgRateIn, msgThroughputOut, msgRateRedeliver, msgRateExpired, ...), as
Pulsar computes them: once every stats period (``statsUpdateFrequencyInSecs``) each producer,
consumer and subscription turns what its counters gained since the previous period into a rate
per second, and the stats report the rate of the last complete period (not a running figure).
Producers and consumers only count (plain integer additions on the publish and dispatch paths);
``RateMeter.sample`` does the division, driven by the admin service's stats timer.
"""


_ZEROS = {}     # fields -> ((0,) * fields, (0.0,) * fields)


class RateMeter:
    """
    Per-second rates of a fixed set of monotonic counters (starting at 0). ``sample(period,
    *totals)`` closes a stats period of ``period`` seconds: each rate is the counter's growth
    since the previous sample divided by ``period``, as Pulsar's ``Rate.calculateRate`` divides
    by the stats period (a producer or consumer created during the period is measured over the
    whole period too). A sample with no period (the sampler's first, which has no previous
    sample to measure from) only records the counters. Until then every rate is 0.0.
    """

    __slots__ = ("_last", "rates")

    def __init__(self, fields: int):
        # Shared zero tuples: two fresh tuples per producer, consumer and subscription were
        # 112 bytes per loaded topic (issue 14).
        zeros = _ZEROS.get(fields)
        if zeros is None:
            zeros = _ZEROS[fields] = ((0,) * fields, (0.0,) * fields)
        self._last, self.rates = zeros

    def sample(self, period, *totals) -> None:
        last = self._last
        if period:
            rates = tuple((total - prev) / period for total, prev in zip(totals, last))
            # An idle period's rates are the shared zeros, not a tuple and its floats per meter:
            # every idle producer of a broker kept ~100 bytes after its first stats period
            # (issue 14: memory per loaded idle topic).
            self.rates = rates if any(rates) else _ZEROS[len(rates)][1]
        if totals != last:
            self._last = totals     # else keep the one held (maybe the shared zeros)

    def rate_and_size(self) -> tuple:
        """For a (messages, bytes) meter: ``(msg rate, throughput, average message size)``, the
        size over the last period as Pulsar's ``averageMsgSize`` (throughput / rate)."""
        rate, throughput = self.rates[0], self.rates[1]
        return rate, throughput, (throughput / rate) if rate else 0.0
