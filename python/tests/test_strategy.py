"""Strategies written in Python: they see every operator's candidates with their costs, and
the plan compiled is the one they chose."""

import numpy as np
import pytest

import einsummable as es
from conftest import ffn, random_inputs, rel_error


class Costliest:
    """Every operator takes its most expensive candidate: the opposite of the DP."""

    name = "costliest"

    def __init__(self):
        self.seen = None

    def solve(self, problem):
        self.seen = problem
        return [max(range(len(op.candidates)), key=lambda i: op.candidates[i].cost) for op in problem.ops]


def test_a_python_strategy_decides_the_plan():
    g = ffn()
    strategy = Costliest()
    # The graph as written (with rewrites the strategy also plans the fused form).
    exe = es.compile(g, devices=4, optimizer=strategy, rewrites=False)
    problem = strategy.seen
    assert problem.devices == 4 and problem.unit == "seconds" and len(problem.ops) == 3
    assert [op.kind for op in problem.ops] == ["matmul", "unary", "matmul"]
    choice = strategy.solve(problem)
    plan = exe.plan()
    assert plan["optimizer"] == "costliest"
    for op, c, planned in zip(problem.ops, choice, plan["ops"]):
        assert planned["name"] == op.name
        assert planned["splits"] == op.candidates[c].splits
    assert plan["total_cost"] == pytest.approx(problem.total(choice))
    assert problem.fits(choice) and problem.repair(choice) == choice
    # A choice that does not name one candidate of every operator raises, as total() does.
    for bad in (choice[:-1], choice[:-1] + [len(problem.ops[-1].candidates)]):
        for method in (problem.fits, problem.repair, problem.total):
            with pytest.raises(es.EinsummableError, match="choices for|candidate"):
                method(bad)
    dp = es.compile(g, devices=4, rewrites=False).plan()
    assert plan["total_cost"] > dp["total_cost"]
    assert [o["splits"] for o in plan["ops"]] != [o["splits"] for o in dp["ops"]]
    # Whatever the plan, the result is the computation's.
    values = random_inputs(g, seed=7)
    ref = np.maximum(values["x"].astype(np.float64) @ values["w1"], 0) @ values["w2"]
    assert rel_error(exe.run(values)["y"], ref) <= 1e-5


def test_candidates_carry_their_costs():
    strategy = Costliest()
    es.compile(ffn(), devices=4, optimizer=strategy, rewrites=False)
    for op in strategy.seen.ops:
        assert op.candidates and set(op.candidates[0].splits) == set(op.shardable)
        for c in op.candidates:
            assert c.cost == pytest.approx(c.join + c.aggregation + c.compute)
            assert np.prod(list(c.splits.values())) >= 1
    assert strategy.seen.ops[1].sources == [("op", 0, 0)]
    assert strategy.seen.ops[0].sources[1] == ("input", 1, 0)


def test_a_strategy_exception_propagates():
    class Broken:
        def solve(self, problem):
            raise ZeroDivisionError("no plan today")

    with pytest.raises(ZeroDivisionError, match="no plan today"):
        es.compile(ffn(), devices=4, optimizer=Broken())


@pytest.mark.parametrize(
    "answer, message",
    [([0], "chose 1 candidates for 3 operators"), ([0, 0, 999], "chose candidate 999 for `matmul #3`")],
)
def test_a_bad_answer_is_a_plan_error(answer, message):
    class Wrong:
        def solve(self, problem):
            return answer

    with pytest.raises(es.PlanError, match=message):
        es.compile(ffn(), devices=4, optimizer=Wrong())


def test_not_a_strategy():
    with pytest.raises(es.PlanError, match="solve"):
        es.compile(ffn(), optimizer=42)
