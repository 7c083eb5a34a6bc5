"""Testinfra side of k4w: find the guests, run the box and cluster specs, record the results.

The specs themselves live in k4w/verify/specs/ (they need a live target and are not part of the
default `pytest` run); this package holds what they and the `test-box` / `cluster-test`
tasks share: host discovery, expectations derived from the box profile, the connectivity
matrix, probes, and the flows that boot a throwaway VM and write records and reports.
"""
