"""The harness, in layers that only import downward (tests/test_layers.py walks every import):

    data      harness/data/      ops, knobs, contracts, conventions, bugs, findings, dtypes, budgets,
                                 outcomes, rope (pure data and small pure functions)
    cases     cases/             the case model, input regimes, suites
    impls     implementations/   framework records, the registry, adapters
    engine    harness/engine/    oracle, judge, worker processes, runner, tables, the run API
    analysis  harness/analysis/  diagnosis (which bug a disagreement looks like), fitting, backward
                                 diagnosis, quant_explain (explain's view of a quantizing bug)
    reports   reports/           the Report model, views, renderers
    commands  harness/commands/  cli, check, explain, repro, pytest plugin; and
              harness/api.py     the Python API (run_suite -> Report)

The package root (normdiff/) holds the version and helpers every layer may use (atomic files, the
clock, number formatting).
"""
