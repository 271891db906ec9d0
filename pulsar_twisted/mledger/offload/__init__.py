"""
Tiered storage (Pulsar's ``LedgerOffloader``): sealed ledgers of a managed ledger copied to an object
store, read back from there, and deleted from the bookies after ``managedLedgerOffloadDeletionLagMs``.

``blobstore.py``   the object-store contract (blocking calls, run in the offloader's threads) and the
                   in-memory store of the tests
``s3.py``          the ``aws-s3`` / ``S3`` drivers (boto3)
``filesystem.py``  the ``filesystem`` driver (a directory, ``fileSystemURI=file:///...``)
``drivers.py``     driver name + settings -> a blob store
``format.py``      the two objects one offloaded ledger becomes (data and index)
``offloader.py``   copying a ledger out, and the read handle of an offloaded ledger
"""
