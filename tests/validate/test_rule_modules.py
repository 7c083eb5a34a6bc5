"""Each rule of `invoke validate` is one module of k4w/validate that holds its check and, beside it,
what a dry run shows instead (k4w.validate.VALIDATORS): a rule without its dry run, or a module of
the list that is missing, fails here rather than in the middle of a user's run."""

from __future__ import annotations

import inspect

from k4w import validate


def test_every_rule_module_exports_its_check_and_its_dry_run_side_by_side():
    problems = []
    for validator in validate.VALIDATORS:
        module = validator.rule()
        for name, params in (("run", ["cluster", "out"]), ("would_run", ["cluster", "out", "rendered"])):
            function = getattr(module, name, None)
            if not callable(function):
                problems.append(f"{module.__name__} has no {name}()")
            elif list(inspect.signature(function).parameters) != params:
                problems.append(f"{module.__name__}.{name} takes {list(inspect.signature(function).parameters)}, not {params}")
    assert not problems, problems


def test_each_rule_is_listed_once():
    modules = [validator.module for validator in validate.VALIDATORS]
    assert len(modules) == len(set(modules)) == 26, modules
