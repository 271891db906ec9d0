"""
The load manager of cluster brokers (Pulsar's ModularLoadManager, in parts): load reports
(``reports``), placement of free bundles (``placement``), bundle splits (``split``), the
ThresholdShedder (``shedding``) and the log of every decision (``decisions``). The ownership nodes
themselves stay ``broker/ownership.py``'s.
"""
