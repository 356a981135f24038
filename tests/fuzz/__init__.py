"""nvfabric's own fuzz harness: a strategy (seeds + mutator) per reader, run briefly by
``make test`` (tests/fuzz/test_fuzz_brief.py) and at length by ``make fuzz``
(``python -m tests.fuzz``)."""
