"""The built-in FDB-v3 set: synthetic recordings in FDB-v3's released layout, generated offline, labelled
synthetic.

Eight scenarios, two per domain, each a single spoken request with a filler ("um", "uh") and a
self-correction (the user names one value, then takes it back for another: what FDB-v3 calls a state
rollback), spoken by the project's own voice (`bench.synth`: deterministic piper, else espeak-ng, else the
synthetic buzz), with 0.5 s before and `TAIL_S` of silence after, so the agent has time to call and answer
within the recording (FDB-v3 records the agent for exactly the input's length). Each scenario states its
exact expected calls (one or two; a chained call refers to the first one's result with FDB-v3's
`$RESULT_0...` notation) and the values its self-correction took back (`retracted_values`), and carries
`"synthetic": true`, so scores and reports say these numbers are not comparable with published ones.

Layout: `<cache>/fdb3-builtin-<version>-<voice>/{example_id}_{speaker_id}/input.wav` + `metadata.json`, and
`benchmark_data_v2.json` holding every scenario, so FDB-v3's own scorers read it as they read the released
data. Generated once (a staging folder renamed into place).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from duplexkit.bench import sources, synth
from duplexkit.bench.fdb3.dataset import SCENARIO_FILE, Fdb3DatasetError
from duplexkit.bench.sources import DatasetError
from duplexkit.client.wavfile import write_wav

BUILTIN_VERSION = "1"
RATE_HZ = synth.AUDIO_RATE_HZ
LEAD_IN_S = 0.5
TAIL_S = 7.0
"""Silence after the request: room for the call, the tool and the spoken answer inside the recording."""
FEATURES = ["FILLER", "SELF_CORRECTION"]


def _scenario(
    example_id: str,
    domain: str,
    title: str,
    user: str,
    ai: str,
    calls: list[dict[str, Any]],
    retracted: list[Any],
) -> dict[str, Any]:
    return {
        "id": example_id,
        "domain": domain,
        "difficulty": {1: "easy", 2: "medium"}.get(len(calls), "hard"),
        "title": title,
        "dialogue": [{"user": user, "ai": ai}],
        "expected_tool_calls": calls,
        "disfluency_features": FEATURES,
        "state_rollback_test": True,
        "retracted_values": retracted,
        "synthetic": True,
    }


SCENARIOS: tuple[dict[str, Any], ...] = (
    _scenario(
        "travel_01",
        "travel_identity",
        "Flight search with a corrected destination",
        "Um, I need a flight to Paris on August twentieth, no wait, sorry, to London on August twentieth.",
        "I found flights to London on August 20.",
        [{"function": "search_flights", "args": {"destination": "London", "date": "August 20"}}],
        ["Paris"],
    ),
    _scenario(
        "travel_02",
        "travel_identity",
        "Passport update with a corrected number",
        "Uh, please update my passport number to A one two three, no, sorry, A four five six.",
        "Your passport number is now A456.",
        [{"function": "update_identity_doc", "args": {"doc_type": "passport", "doc_number": "A456"}}],
        ["A123"],
    ),
    _scenario(
        "finance_01",
        "finance_billing",
        "Card benefits with a corrected card",
        "Uh, what are the benefits of my gold card, I mean, my platinum card?",
        "Your platinum card includes lounge access and extra travel points.",
        [{"function": "get_card_benefits", "args": {"card_type": "platinum"}}],
        ["gold"],
    ),
    _scenario(
        "finance_02",
        "finance_billing",
        "Exchange rate with a corrected currency",
        "Um, how much is two hundred dollars in euros, sorry, I mean in British pounds?",
        "Two hundred US dollars is about 158 British pounds.",
        [
            {
                "function": "get_exchange_rate",
                "args": {"amount": 200, "from_currency": "USD", "to_currency": "GBP"},
            }
        ],
        ["EUR"],
    ),
    _scenario(
        "housing_01",
        "housing_location",
        "Apartment search with a corrected city",
        "Um, find me a two bedroom apartment in Austin, no, in Denver, for under two thousand dollars.",
        "I found two-bedroom apartments in Denver under $2,000.",
        [{"function": "search_apartments", "args": {"city": "Denver", "bedrooms": 2, "max_price": 2000}}],
        ["Austin"],
    ),
    _scenario(
        "housing_02",
        "housing_location",
        "Search filter with a corrected value",
        "Uh, set my pets filter to cats, actually no, to dogs.",
        "Your pets filter is now set to dogs.",
        [{"function": "update_search_filter", "args": {"filter_name": "pets", "value": "dogs"}}],
        ["cats"],
    ),
    _scenario(
        "ecommerce_01",
        "ecommerce_support",
        "Order tracking with a corrected order id",
        "Um, where is my order B O B one two, sorry, B O B three four?",
        "Your order BOB34 is on its way.",
        [{"function": "track_order", "args": {"order_id": "BOB34"}}],
        ["BOB12"],
    ),
    _scenario(
        "ecommerce_02",
        "ecommerce_support",
        "Product search and add to cart with a corrected budget",
        "Uh, search for headphones under fifty dollars, no, under eighty dollars, and add the first one to "
        "my cart.",
        "I found headphones under $80 and added the first one to your cart.",
        [
            {"function": "search_products", "args": {"query": "headphones", "max_price": 80}},
            {
                "function": "add_to_cart",
                "args": {"product_id": "$RESULT_0.products[0].product_id", "quantity": 1},
            },
        ],
        [50],
    ),
)


def builtin_root(cache_dir: Path | None = None) -> Path:
    """The built-in set's folder, generated on first use."""
    root = (cache_dir or sources.cache_dir()) / f"fdb3-builtin-{BUILTIN_VERSION}-{synth.available_voice()}"
    try:
        sources.materialise(root, SCENARIO_FILE, generate)
    except DatasetError as exc:
        raise Fdb3DatasetError("bad_cache", str(exc)) from None
    return root


def generate(dest: Path) -> None:
    """Speak every scenario into `dest` (an existing folder); the scenario file last (it marks a complete
    set)."""
    texts = [s["dialogue"][0]["user"] for s in SCENARIOS]
    voice, speeches = synth.speak_first_fitting(texts, lambda _: True, synth.voice_loaders())
    speaker = hashlib.sha256(f"duplexkit-{voice}".encode()).hexdigest()[:24]
    silence = np.zeros(round(LEAD_IN_S * RATE_HZ), dtype=np.float32)
    tail = np.zeros(round(TAIL_S * RATE_HZ), dtype=np.float32)
    for scenario, speech in zip(SCENARIOS, speeches, strict=True):
        folder = dest / f"{scenario['id']}_{speaker}"
        folder.mkdir(parents=True)
        write_wav(folder / "input.wav", np.concatenate([silence, speech, tail]), RATE_HZ)
        spoken = {
            **scenario,
            "voice": voice,
            "speech_s": [LEAD_IN_S, round(LEAD_IN_S + len(speech) / RATE_HZ, 3)],
        }
        (folder / "metadata.json").write_text(json.dumps(spoken, indent=2), encoding="utf-8")
    (dest / SCENARIO_FILE).write_text(
        json.dumps(
            {"benchmark_name": "duplexkit FDB-v3 built-in (synthetic)", "scenarios": list(SCENARIOS)},
            indent=2,
        ),
        encoding="utf-8",
    )
