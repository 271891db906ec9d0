#!/usr/bin/env python
"""
Where the tree stands against the layering of REDESIGN.md section 2 (see
``pulsar_twisted.testing.layering``): layering violations, subpackage import cycles (counting
imports inside functions), function-level imports of our own modules outside daemons/, the ten
largest classes, and every spelling of "/admin/policies".

    python scripts/layering_report.py [ROOT]      # ROOT: a checkout (default: this one)

The checkout is only read: the analysis module comes from this script's checkout, so any
commit can be measured.
"""

import os
import sys

HERE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else HERE
sys.path.insert(0, HERE)

from pulsar_twisted.testing import layering  # noqa: E402  (after the path is set)


def section(title, items):
    print(f"\n== {title}: {len(items)}")
    for item in items:
        print(f"  {item}")


def main():
    imports = layering.all_imports(ROOT)
    section("layering violations", [layering.describe(i) for i in layering.violations(ROOT)])

    graph = layering.layer_graph(imports)
    cycles = [c for c in layering.strongly_connected(graph) if len(c) > 1]
    section("subpackage import cycles (strongly connected components)",
            [f"{len(c)} subpackages: {', '.join(c)}" for c in cycles])
    pairs = sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if a in graph.get(b, ())})
    section("mutual subpackage pairs", [f"{a} <-> {b}" for a, b in pairs])

    function_level = [i for i in imports if i.in_function and layering.layer_of(i.importer) != "daemons"]
    section("function-level imports of our own modules outside daemons/",
            [f"{i.path}:{i.line}: {i.target}" for i in function_level])

    largest = sorted(layering.class_sizes(ROOT), key=lambda c: -c.lines)[:10]
    section("10 largest classes", [f"{c.lines:5d} lines  {c.name}  {c.path}:{c.line}" for c in largest])

    spellings = layering.string_spellings(ROOT, "/admin/policies")
    modules = sorted({path for path, _ in spellings})
    section(f'"/admin/policies" spellings (in {len(modules)} modules)',
            [f"{path}:{line}" for path, line in spellings])


if __name__ == "__main__":
    main()
