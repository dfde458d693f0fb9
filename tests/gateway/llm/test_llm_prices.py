"""Which models the price table prices itself: a cost of any other (the demo's ``scripted``, a local or
unknown model) is an estimate at the ``default`` rate, and cost answers say so."""

from __future__ import annotations

from gateway.llm.config import LLMProxySettings, ModelPrice
from gateway.monitor.cost import estimate_rate, rates_used


def test_a_model_is_priced_by_its_name_or_a_prefix_never_by_default() -> None:
    table = LLMProxySettings(
        prices={"llama-local": ModelPrice(input=0.1, output=0.2, cache_write=0, cache_read=0)}
    )
    assert table.has_price("claude-sonnet-4-5-20250929") and table.has_price("llama-local-7b")
    for model in ("scripted", "gpt-x", "default", "", None):
        assert not table.has_price(model), model
    assert estimate_rate(table, "claude-haiku-4-5") is None and estimate_rate(None, "scripted") is None
    rate = estimate_rate(table, "scripted")
    assert rate is not None and (rate.input_per_mtok, rate.output_per_mtok) == (3.0, 15.0)
    used = rates_used(table, ["scripted", None, "llama-local-1b"])
    assert {m: r.model_dump() for m, r in used.items()} == {
        "scripted": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
        "unknown": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
    }
