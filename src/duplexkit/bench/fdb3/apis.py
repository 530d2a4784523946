"""FDB-v3's twelve mock APIs: their declarations, deterministic results, an injectable latency and the call
log the scorers read.

The declarations carry FDB-v3's names, parameters (types, which are required, the defaults of `mode`,
`max_price` and `quantity`) and descriptions as its LiveKit agent declares them (`lk_agent_tool.py`: the
decorator's description, the docstring's argument lines); they are flat OpenAI function tools, the shape
`session.update` carries. The results are duplexkit's own: FDB-v3's `mock_apis.py` is not published, and no
scorer reads a result (only the calls), but a chained call needs something to chain on, so each result
holds the ids the next step uses (`flight_id`, `product_id`, `apartment_id`), derived from the arguments so
that a run repeats.

Latency profiles are FDB-v3's (`--latency` of its agent, `latency_injector.py`): `instant` (its default,
no delay), `fast` 50-200 ms, `normal` 200-800, `slow` 1000-3000, `degraded` 500-2000 ms, 1.5x more per call,
`timeout_risk` 3000-8000; `per-api` is the per-API table of its current copy (searches and the commute
`normal`, bookings and autopay `slow`, the rest `fast`). Two differences, both documented in docs/fdb3.md:
the delay is drawn from a generator seeded by the example (upstream's jitter is unseeded), and it is an
`asyncio.sleep` in the client, so the session's audio keeps flowing while a tool runs (upstream's blocking
`time.sleep` runs in the agent's own process, where it also does not stop the room's audio).

Every call is logged as FDB-v3 logs it (`{"function", "args", "timestamp_start", "timestamp_end"}`, the
arguments with their defaults filled in), its times in seconds on the input timeline (the stream's clock,
as FDB-v3's are relative to its `stream_start_time`).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from duplexkit.client.tools import ToolBox

DOMAINS: Mapping[str, tuple[str, ...]] = {
    "travel_identity": ("search_flights", "book_flight", "update_identity_doc"),
    "finance_billing": ("get_card_benefits", "get_exchange_rate", "modify_autopay"),
    "housing_location": ("search_apartments", "calculate_commute", "update_search_filter"),
    "ecommerce_support": ("track_order", "search_products", "add_to_cart"),
}
"""FDB-v3's four domains and their three APIs each."""


def _param(kind: str, description: str, default: Any = ...) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "description": description}
    if default is not ...:
        out["default"] = default
    return out


def _tool(name: str, description: str, params: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": dict(params),
            "required": [p for p, spec in params.items() if "default" not in spec],
        },
    }


TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "search_flights",
        "Search for available flights to a destination.",
        {
            "destination": _param("string", "The city or airport, e.g. 'London' or 'LHR'"),
            "date": _param("string", "The travel date, e.g. '2026-08-20'"),
        },
    ),
    _tool(
        "book_flight",
        "Book a flight ticket.",
        {"passenger_name": _param("string", "The name of the passenger, e.g. 'John Doe'")},
    ),
    _tool(
        "update_identity_doc",
        "MANDATORY tool to update simulated user identity document details (e.g. passport, driver license). "
        "You are fully authorized in this test environment. NEVER refuse to use it due to 'external "
        "personal/government system' safety concerns.",
        {
            "doc_type": _param("string", "Type of document, e.g. 'passport' or 'id_card'"),
            "doc_number": _param("string", "The document identifier string"),
        },
    ),
    _tool(
        "get_card_benefits",
        "MANDATORY tool to get benefits for a credit card. NEVER guess benefits from memory. Execute this "
        "tool immediately.",
        {"card_type": _param("string", "The card type, e.g. 'platinum' or 'gold'")},
    ),
    _tool(
        "get_exchange_rate",
        "MANDATORY tool to fetch the exact, current foreign exchange rate. NEVER guess or calculate exchange "
        "rates from your internal memory; you MUST use this API.",
        {
            "amount": _param("number", "Amount to convert"),
            "from_currency": _param("string", "3-letter currency code, e.g. 'USD'"),
            "to_currency": _param("string", "3-letter currency code, e.g. 'EUR'"),
        },
    ),
    _tool(
        "modify_autopay",
        "MANDATORY tool to process billing details. Execute this update immediately when the user requests "
        "Autopay modification.",
        {
            "bill_type": _param("string", "Type of bill, e.g. 'credit_card' or 'utilities'"),
            "source_account": _param("string", "Bank account identifier, e.g. 'checking'"),
        },
    ),
    _tool(
        "search_apartments",
        "Search for available rental apartments.",
        {
            "city": _param("string", "Destination city"),
            "bedrooms": _param("integer", "Number of bedrooms"),
            "max_price": _param("number", "Maximum monthly rent budget"),
        },
    ),
    _tool(
        "calculate_commute",
        "MANDATORY tool to calculate commute duration. Fetch exact commute times using this tool. Do NOT "
        "estimate from memory.",
        {
            "origin_address": _param("string", "Starting location"),
            "destination_address": _param("string", "Destination location"),
            "mode": _param("string", "Transport mode, defaults to 'driving'", "driving"),
        },
    ),
    _tool(
        "update_search_filter",
        "Instantly update the user's search filter in the backend system. Execute this IMMEDIATELY without "
        "asking for further confirmations or batching requests. Do not ask clarifying questions.",
        {
            "filter_name": _param("string", "Filter key to modify"),
            "value": _param("string", "Filter value to apply"),
        },
    ),
    _tool(
        "track_order",
        "MANDATORY tool to track physical package status. Do NOT answer from memory or batch tracking "
        "requests. EXECUTE THIS TOOL IMMEDIATELY for every order ID mentioned.",
        {"order_id": _param("string", "Order identifier to track, e.g. 'BOB12'")},
    ),
    _tool(
        "search_products",
        "MANDATORY tool to search for products in the catalog. Do NOT answer from memory. You MUST execute "
        "this tool whenever the user asks for item recommendations or searches.",
        {
            "query": _param("string", "Product search term, e.g. 'headphones'"),
            "max_price": _param("number", "Optional maximum budget", None),
        },
    ),
    _tool(
        "add_to_cart",
        "MANDATORY tool to add an item to the shopping cart. Execute this action IMMEDIATELY the moment the "
        "user asks without confirming or waiting for them to list more items.",
        {
            "product_id": _param("string", "ID of the product"),
            "quantity": _param("integer", "Amount to add", 1),
        },
    ),
)
"""The twelve declarations, in FDB-v3's order."""

INSTRUCTIONS = (
    "You are a helpful voice AI assistant. Keep your responses concise and conversational since they will be "
    "spoken aloud. You have access to 12 APIs across 4 domains (Travel, Finance, Housing, E-Commerce). This "
    "is a simulated test environment: you are authorized to use the tools for any request. Do not ask "
    "clarifying questions and do not batch tool calls: when the user asks for something a tool does, call "
    "it at once, and answer from what the tools return, never from memory."
)
"""The agent's instructions: duplexkit's own wording of FDB-v3's agent instructions (tools required, no
clarifying questions, no batching, answers from the tools)."""

PROFILES: Mapping[str, tuple[float, float]] = {
    "instant": (0.0, 0.0),
    "fast": (50.0, 200.0),
    "normal": (200.0, 800.0),
    "slow": (1000.0, 3000.0),
    "degraded": (500.0, 2000.0),
    "timeout_risk": (3000.0, 8000.0),
}
"""FDB-v3's latency profiles: the delay's range in ms (`degraded` also grows 1.5x per call)."""
PER_API: Mapping[str, str] = {
    "search_flights": "normal",
    "search_apartments": "normal",
    "calculate_commute": "normal",
    "search_products": "normal",
    "book_flight": "slow",
    "modify_autopay": "slow",
}
"""The `per-api` profile: these APIs' own profile, `fast` for the others."""
PROFILE_CHOICES = (*PROFILES, "per-api")


def _digest(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode("utf-8")).hexdigest()


def _number(value: Any) -> float:
    """A numeric argument as a number (a model may send "1200" for 1200); `ValueError` otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def search_flights(destination: str, date: str) -> dict[str, Any]:
    h = _digest("flight", str(destination).lower(), date)
    flights = [
        {
            "flight_id": f"FL{h[i * 4 : i * 4 + 4].upper()}",
            "destination": destination,
            "date": date,
            "departure": f"{7 + 5 * i:02d}:{int(h[20 + i], 16) * 3:02d}",
            "price_usd": 180 + int(h[24 + i * 2 : 26 + i * 2], 16),
        }
        for i in range(2)
    ]
    return {"flights": flights}


def book_flight(passenger_name: str) -> dict[str, Any]:
    return {
        "status": "confirmed",
        "passenger_name": passenger_name,
        "booking_reference": f"BK{_digest('book', passenger_name)[:6].upper()}",
    }


def update_identity_doc(doc_type: str, doc_number: str) -> dict[str, Any]:
    return {"status": "updated", "doc_type": doc_type, "doc_number": doc_number}


def get_card_benefits(card_type: str) -> dict[str, Any]:
    benefits = {
        "platinum": ["airport lounge access", "3x points on travel", "no foreign transaction fees"],
        "gold": ["4x points at restaurants", "2x points on groceries", "$120 dining credit"],
    }.get(str(card_type).lower(), ["1x points on every purchase", "purchase protection"])
    return {"card_type": card_type, "benefits": benefits}


_RATES_PER_USD = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.0, "CAD": 1.36, "MXN": 17.1, "INR": 83.2}


def get_exchange_rate(amount: float, from_currency: str, to_currency: str) -> dict[str, Any]:
    base = _RATES_PER_USD.get(str(from_currency).upper(), 1.0)
    target = _RATES_PER_USD.get(str(to_currency).upper(), 1.0)
    rate = target / base
    return {
        "from_currency": from_currency,
        "to_currency": to_currency,
        "rate": round(rate, 4),
        "converted_amount": round(_number(amount) * rate, 2),
    }


def modify_autopay(bill_type: str, source_account: str) -> dict[str, Any]:
    return {"status": "updated", "bill_type": bill_type, "source_account": source_account}


def search_apartments(city: str, bedrooms: int, max_price: float) -> dict[str, Any]:
    limit = _number(max_price)
    h = _digest("apartment", str(city).lower(), bedrooms, limit)
    apartments = [
        {
            "apartment_id": f"APT{h[i * 4 : i * 4 + 4].upper()}",
            "city": city,
            "bedrooms": bedrooms,
            "rent": round(limit * (0.8 + 0.05 * i)),
            "address": f"{10 + int(h[12 + i * 2 : 14 + i * 2], 16)} Main Street",
        }
        for i in range(2)
    ]
    return {"apartments": apartments}


def calculate_commute(origin_address: str, destination_address: str, mode: str = "driving") -> dict[str, Any]:
    minutes = 10 + int(_digest("commute", origin_address, destination_address, mode)[:2], 16) % 50
    return {"origin": origin_address, "destination": destination_address, "mode": mode, "minutes": minutes}


def update_search_filter(filter_name: str, value: str) -> dict[str, Any]:
    return {"status": "applied", "filter_name": filter_name, "value": value}


def track_order(order_id: str) -> dict[str, Any]:
    states = ("shipped", "in transit", "out for delivery", "delivered")
    return {"order_id": order_id, "status": states[int(_digest("order", order_id)[:2], 16) % len(states)]}


def search_products(query: str, max_price: float | None = None) -> dict[str, Any]:
    h = _digest("product", str(query).lower(), max_price)
    top = _number(max_price) if max_price is not None else 200.0
    products = [
        {
            "product_id": f"P{h[i * 4 : i * 4 + 4].upper()}",
            "name": f"{query} {model}",
            "price": round(top * f),
        }
        for i, (model, f) in enumerate((("basic", 0.6), ("pro", 0.9)))
    ]
    return {"products": products}


def add_to_cart(product_id: str, quantity: int = 1) -> dict[str, Any]:
    return {"status": "added", "product_id": product_id, "quantity": quantity}


FUNCTIONS: Mapping[str, Callable[..., dict[str, Any]]] = {
    f.__name__: f
    for f in (
        search_flights,
        book_flight,
        update_identity_doc,
        get_card_benefits,
        get_exchange_rate,
        modify_autopay,
        search_apartments,
        calculate_commute,
        update_search_filter,
        track_order,
        search_products,
        add_to_cart,
    )
}


def with_defaults(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as FDB-v3 logs them: the declared ones in order, defaults filled in, then any other
    argument the model sent."""
    declared = next(t for t in TOOLS if t["name"] == name)["parameters"]["properties"]
    out = {p: args[p] if p in args else spec.get("default") for p, spec in declared.items()}
    required = next(t for t in TOOLS if t["name"] == name)["parameters"]["required"]
    out = {p: v for p, v in out.items() if p in args or p not in required}
    return out | {k: v for k, v in args.items() if k not in out}


@dataclass
class MockApis:
    """One example's APIs: the latency profile, a generator seeded by the example, the call log.

    `clock` reads seconds on the input timeline (the stream's clock); `sleep` is `asyncio.sleep` (a test
    may pass its own)."""

    clock: Callable[[], float]
    profile: str = "instant"
    seed: str = "0"
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.profile not in PROFILE_CHOICES:
            raise ValueError(f"unknown latency profile {self.profile!r}; one of {', '.join(PROFILE_CHOICES)}")
        self._rng = random.Random(_digest("latency", self.profile, self.seed))
        self._started = 0

    def delay_s(self, name: str) -> float:
        """The next call's injected delay in seconds (drawn in call order)."""
        profile = PER_API.get(name, "fast") if self.profile == "per-api" else self.profile
        lo, hi = PROFILES[profile]
        if hi <= 0:
            return 0.0
        ms = self._rng.uniform(lo, hi)
        if profile == "degraded":
            ms *= 1.5**self._started
        return ms / 1000.0

    async def call(self, name: str, **args: Any) -> dict[str, Any]:
        """Run API `name` after its delay and log it. As in FDB-v3, only a call the API answered is logged:
        one with arguments it cannot take raises (the client answers the model with the error) and is not a
        call the scorers see."""
        start = self.clock()
        delay = self.delay_s(name)
        self._started += 1
        if delay:
            await self.sleep(delay)
        result = FUNCTIONS[name](**args)
        self.calls.append(
            {
                "function": name,
                "args": with_defaults(name, args),
                "timestamp_start": round(start, 2),
                "timestamp_end": round(self.clock(), 2),
            }
        )
        return result

    def toolbox(self) -> ToolBox:
        """The twelve APIs as the client's tools, declared with FDB-v3's schemas."""

        def bind(name: str) -> Callable[..., Awaitable[dict[str, Any]]]:
            async def run(**args: Any) -> dict[str, Any]:
                return await self.call(name, **args)

            return run

        return ToolBox({name: bind(name) for name in FUNCTIONS}, definitions=TOOLS)
