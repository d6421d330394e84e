"""Audit: pure functions over recorded events — timelines with the state after each event, explanations
of tool calls, queued prompts and turns from recorded facts, invariant checks used by ``events verify``,
and the self-contained HTML page of a chat's audit. Nothing here opens a store or reads a clock."""

from ledger.audit.timeline import aggregate_kind, parse_time, state_summary, summarize, timeline, version_as_of

__all__ = ["aggregate_kind", "parse_time", "state_summary", "summarize", "timeline", "version_as_of"]
