"""
Bundle splits: where a bundle is cut (Pulsar's split algorithms), the new boundaries, and the split
itself (``split_bundle``): the halves are owned by the same broker before the parent's node goes
(``BundleOwnership.replace``), and the namespace policies get the new ``bundles`` by
compare-and-set, so that a concurrent policy change or split is never overwritten.

Algorithms (Pulsar's names):

* ``range_equally_divide``: the middle of the hash range.
* ``topic_count_equally_divide``: between the two middle topic hashes of the bundle, so that each
  half holds half the topics (refused with fewer than two topics of distinct hashes).

Which topics count: those this broker has loaded in the bundle (the owner serves them all).
"""

from pulsar_twisted.broker.ownership import NamespaceBundle
from pulsar_twisted.common import errors
from pulsar_twisted.resources.policies import FULL_RANGE_UPPER, boundaries_of_policies

RANGE_EQUALLY_DIVIDE = "range_equally_divide"
TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
ALGORITHMS = (RANGE_EQUALLY_DIVIDE, TOPIC_COUNT_EQUALLY_DIVIDE)


class SplitRefused(errors.NotAllowedError):
    """The bundle cannot be split (too small, too few topics, namespace at its maximum)."""


def parse_range(namespace: str, range_name: str) -> NamespaceBundle:
    """The bundle named ``0x<lower>_0x<upper>``; ValueError when malformed."""
    lower, sep, upper = range_name.partition("_")
    if not sep:
        raise ValueError(f"bad bundle range {range_name!r}")
    lo, hi = int(lower, 16), int(upper, 16)
    if not 0 <= lo < hi <= FULL_RANGE_UPPER:
        raise ValueError(f"bad bundle range {range_name!r}")
    return NamespaceBundle(namespace, lo, hi)


def bundles_of(namespace: str, bounds: list) -> list:
    """Every bundle of ``bounds`` (sorted ints) in order."""
    return [NamespaceBundle(namespace, a, b) for a, b in zip(bounds, bounds[1:])]


def split_point(bundle: NamespaceBundle, algorithm: str, hashes=()) -> int:
    """Where ``algorithm`` cuts ``bundle`` (``hashes``: its topics' hashes); SplitRefused when it
    cannot be cut, ValueError for an unknown algorithm."""
    if algorithm == RANGE_EQUALLY_DIVIDE:
        point = bundle.lower + (bundle.upper - bundle.lower) // 2
    elif algorithm == TOPIC_COUNT_EQUALLY_DIVIDE:
        inside = sorted(set(h for h in hashes if bundle.includes(h)))
        if len(inside) < 2:
            raise SplitRefused(f"bundle {bundle} has fewer than 2 topics to divide")
        mid = len(inside) // 2
        point = (inside[mid - 1] + inside[mid] + 1) // 2
    else:
        raise ValueError(f"unsupported split algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    if not bundle.lower < point < bundle.upper:
        raise SplitRefused(f"bundle {bundle} is too small to split")
    return point


def split_bounds(bounds: list, bundle: NamespaceBundle, point: int) -> list:
    """``bounds`` with ``point`` inserted inside ``bundle`` (which must be one of its bundles)."""
    if bundle not in bundles_of(bundle.namespace, bounds):
        raise errors.NotAllowedError(f"bundle {bundle} is not a bundle of the namespace any more")
    i = bounds.index(bundle.lower)
    return bounds[:i + 1] + [point] + bounds[i + 1:]


def policies_with_bounds(policies: dict, bounds: list) -> dict:
    """The Policies document with ``bundles`` as Pulsar writes them."""
    out = dict(policies)
    out["bundles"] = {"boundaries": ["0x%08x" % b for b in bounds], "numBundles": len(bounds) - 1}
    return out


async def split_bundle(ownership, namespaces, bundle: NamespaceBundle, point: int,
                       maximum_bundles: int = 0) -> tuple:
    """
    Split ``bundle`` (owned by ``ownership``, a BundleOwnership) at ``point``: the two halves
    replace it, owned by this broker, and the namespace's policies (``namespaces``, a
    NamespaceResources) get the new boundaries. ``maximum_bundles`` > 0 refuses a split past that
    many bundles. Returns the two halves.
    """
    low = NamespaceBundle(bundle.namespace, bundle.lower, point)
    high = NamespaceBundle(bundle.namespace, point, bundle.upper)

    def change(policies):
        bounds = split_bounds(boundaries_of_policies(policies), bundle, point)
        if maximum_bundles and len(bounds) - 1 > maximum_bundles:
            raise SplitRefused(f"namespace {bundle.namespace} has {maximum_bundles} bundles already "
                               "(loadBalancerNamespaceMaximumBundles)")
        return policies_with_bounds(policies, bounds)

    async def commit():
        await namespaces.update(bundle.namespace, change)

    await ownership.replace(bundle, (low, high), commit)
    return low, high
