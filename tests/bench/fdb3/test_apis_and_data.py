"""The twelve mock APIs (FDB-v3's names and parameters, the latency profiles, the call log) and FDB-v3's
released layout (scenario file, per-folder metadata, refusals), and the built-in set's layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from duplexkit.bench import synth
from duplexkit.bench.fdb3 import apis, builtin
from duplexkit.bench.fdb3.dataset import Fdb3DatasetError, Selection, load_dataset
from duplexkit.client.wavfile import write_wav

# FDB-v3's agent (`lk_agent_tool.py`): each tool's parameters in order, those with a default marked `=`
SIGNATURES = {
    "search_flights": "destination date",
    "book_flight": "passenger_name",
    "update_identity_doc": "doc_type doc_number",
    "get_card_benefits": "card_type",
    "get_exchange_rate": "amount from_currency to_currency",
    "modify_autopay": "bill_type source_account",
    "search_apartments": "city bedrooms max_price",
    "calculate_commute": "origin_address destination_address mode=",
    "update_search_filter": "filter_name value",
    "track_order": "order_id",
    "search_products": "query max_price=",
    "add_to_cart": "product_id quantity=",
}


def test_the_declarations_are_fdb3s() -> None:
    declared = {}
    for tool in apis.TOOLS:
        params = tool["parameters"]
        required = params["required"]
        declared[tool["name"]] = " ".join(p + ("" if p in required else "=") for p in params["properties"])
    assert declared == SIGNATURES
    assert sorted(n for names in apis.DOMAINS.values() for n in names) == sorted(SIGNATURES)
    types = {t["name"]: {p: s["type"] for p, s in t["parameters"]["properties"].items()} for t in apis.TOOLS}
    assert (
        types["get_exchange_rate"]["amount"] == "number"
        and types["search_apartments"]["bedrooms"] == "integer"
    )


async def test_calls_are_logged_with_defaults_on_the_stream_clock_after_the_injected_delay() -> None:
    now = [4.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    mock = apis.MockApis(clock=lambda: now[0], profile="slow", seed="ex1", sleep=sleep)
    box = mock.toolbox()
    output, error = await box.run("calculate_commute", '{"origin_address": "A", "destination_address": "B"}')
    assert error is None and json.loads(output)["mode"] == "driving"
    [call] = mock.calls
    assert call["args"] == {"origin_address": "A", "destination_address": "B", "mode": "driving"}
    assert 1.0 <= slept[0] <= 3.0 and call["timestamp_start"] == 4.0
    assert call["timestamp_end"] == round(4.0 + slept[0], 2)
    # chained: the search's ids feed the next call
    found = json.loads((await box.run("search_products", '{"query": "headphones", "max_price": 80}'))[0])
    assert found["products"][0]["product_id"].startswith("P")
    # a call the API cannot take is answered with the error and not logged (FDB-v3 logs answered calls only)
    output, error = await box.run("book_flight", "{}")
    assert error == "tool_raised" and len(mock.calls) == 2
    # the same recording draws the same delays; `instant` none; `degraded` grows per call
    again = apis.MockApis(clock=lambda: 0.0, profile="slow", seed="ex1")
    assert again.delay_s("calculate_commute") == slept[0]
    assert apis.MockApis(clock=lambda: 0.0).delay_s("book_flight") == 0.0
    per_api = apis.MockApis(clock=lambda: 0.0, profile="per-api")
    assert per_api.delay_s("book_flight") >= 1.0 and per_api.delay_s("track_order") <= 0.2
    with pytest.raises(ValueError, match="unknown latency profile"):
        apis.MockApis(clock=lambda: 0.0, profile="glacial")


def _recording(root: Path, name: str, metadata: dict[str, object] | None = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    write_wav(folder / "input.wav", np.zeros(1600, dtype=np.float32), 16_000)
    if metadata is not None:
        (folder / "metadata.json").write_text(json.dumps(metadata))


def test_the_released_layout_with_its_scenario_file_and_metadata(tmp_path: Path) -> None:
    data = tmp_path / "v3" / "fdb_v3_data_released"
    speaker = "5d8b69704a2eb200174c772a"
    scenario = {
        "id": "ecommerce_01",
        "domain": "ecommerce_support",
        "difficulty": "easy",
        "expected_tool_calls": [],
    }
    (tmp_path / "v3" / "benchmark_data_v2.json").parent.mkdir(parents=True)
    (tmp_path / "v3" / "benchmark_data_v2.json").write_text(json.dumps({"scenarios": [scenario]}))
    _recording(data, f"ecommerce_01_{speaker}")
    _recording(data, f"housing_07_{speaker}", {**scenario, "id": "housing_07", "domain": "housing_location"})
    _recording(data, "notes")  # not a recording folder: ignored
    dataset = load_dataset(tmp_path / "v3", Selection(latency_profile="fast"))
    assert [(s.split, s.example_id, s.speaker_id) for s in dataset.samples] == [
        ("ecommerce_support", "ecommerce_01", speaker),
        ("housing_location", "housing_07", speaker),
    ]
    assert all(s.latency_profile == "fast" for s in dataset.samples)
    assert [s.id for s in load_dataset(data, Selection(ids=("housing_07",))).samples] == [
        f"housing_07_{speaker}"
    ]
    _recording(data, f"travel_02_{speaker}")
    with pytest.raises(Fdb3DatasetError) as info:
        load_dataset(data, Selection())
    assert info.value.code == "no_scenario"
    with pytest.raises(Fdb3DatasetError) as info:
        load_dataset(tmp_path / "missing", Selection())
    assert info.value.code == "not_a_folder"


def test_the_builtin_set_is_fdb3s_layout_labelled_synthetic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synth, "voice_loaders", lambda: iter([("synthetic-buzz", lambda: synth.buzz)]))
    builtin.generate(tmp_path)
    dataset = load_dataset(tmp_path, Selection())
    assert len(dataset.samples) == 8 and all(s.synthetic for s in dataset.samples)
    assert {s.split for s in dataset.samples} == set(apis.DOMAINS)
    for sample in dataset.samples:
        scenario = sample.scenario
        assert {"FILLER", "SELF_CORRECTION"} <= set(scenario["disfluency_features"])
        assert scenario["state_rollback_test"] and scenario["retracted_values"]
        names = {c["function"] for c in sample.expected_calls}
        assert names <= set(apis.DOMAINS[sample.split])
    scenarios = json.loads((tmp_path / "benchmark_data_v2.json").read_text())["scenarios"]
    assert [s["id"] for s in scenarios] == [s["id"] for s in builtin.SCENARIOS]
