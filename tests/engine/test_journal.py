"""The replay journal, the lease and the ticket, driven with a fake clock (`now` is just a number)."""

from __future__ import annotations

import pytest

from duplexkit.engine.journal import Lease, Replay, ReplayJournal, ResumeTicket, Resync


def journal_with(count: int, *, max_bytes: int = 1_000_000, ttl_s: float = 60.0) -> ReplayJournal:
    journal = ReplayJournal(max_bytes, ttl_s)
    for seq in range(1, count + 1):
        journal.record(seq, f"event-{seq:04d}", now=float(seq))
    return journal


def test_replay_after_a_seq_is_every_later_event_in_order() -> None:
    journal = journal_with(10)
    plan = journal.replay_after(6)
    assert isinstance(plan, Replay)
    assert [e.seq for e in plan.entries] == [7, 8, 9, 10]
    assert [e.text for e in plan.entries] == ["event-0007", "event-0008", "event-0009", "event-0010"]
    assert journal.replay_after(10) == Replay(())


def test_acks_trim_and_a_claim_before_the_ack_is_a_gap() -> None:
    journal = journal_with(10)
    journal.ack(4)
    assert len(journal) == 6 and journal.bytes == 6 * len("event-0000")
    assert [e.seq for e in journal.replay_after(4).entries] == [5, 6, 7, 8, 9, 10]  # type: ignore[union-attr]
    assert journal.replay_after(2) == Resync("journal_gap", first_available_seq=5)
    journal.ack(99)  # clamped to the head
    assert journal.acked == 10 and len(journal) == 0 and journal.bytes == 0


def test_the_byte_bound_drops_the_oldest_and_a_replay_from_before_is_an_overflow() -> None:
    journal = journal_with(10, max_bytes=5 * len("event-0000"))
    assert [e.seq for e in journal.replay_after(5).entries] == [6, 7, 8, 9, 10]  # type: ignore[union-attr]
    assert journal.replay_after(3) == Resync("journal_overflow", first_available_seq=6)


def test_entries_older_than_the_replay_ttl_expire() -> None:
    journal = journal_with(10, ttl_s=3.0)
    journal.expire(now=10.0)  # entries recorded at 1..6 are older than 3 s
    assert [e.seq for e in journal.replay_after(6).entries] == [7, 8, 9, 10]  # type: ignore[union-attr]
    assert journal.replay_after(5) == Resync("journal_overflow", first_available_seq=7)


def test_seqs_must_increase_and_a_seq_past_the_head_is_refused() -> None:
    journal = journal_with(3)
    with pytest.raises(ValueError):
        journal.record(3, "again", now=4.0)
    with pytest.raises(ValueError):
        journal.replay_after(4)


def test_the_lease_expires_past_the_grace_while_detached_and_past_the_idle_ttl_otherwise() -> None:
    lease = Lease(grace_s=30.0, idle_ttl_s=300.0, now=0.0)
    lease.renew(100.0)
    assert lease.expiry(399.9) is None
    assert lease.expiry(400.0) == "idle_ttl_expired"
    lease.detach(200.0)
    assert not lease.attached
    assert lease.expiry(229.9) is None
    assert lease.expiry(230.0) == "disconnect_grace_expired"
    lease.attach(229.0)  # a resume inside the grace
    assert lease.attached and lease.expiry(230.0) is None and lease.expiry(528.9) is None


def test_the_ticket_rotates_its_token_and_counts_generations() -> None:
    ticket = ResumeTicket()
    first = ticket.token
    assert ticket.matches(first) and not ticket.matches(first + "x") and ticket.generation == 1
    ticket.rotate()
    assert not ticket.matches(first) and ticket.matches(ticket.token) and ticket.generation == 2
