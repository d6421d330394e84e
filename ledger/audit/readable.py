"""A recorded decision as sentences a person reads (issue 29, point 2): the explain pages and the turn views show an
explanation report (``commands.explain``) as sentences with links, not as its JSON — which stays one click away.

Pure: from the report (and, for a turn, when its model was the organization's default, the catalog change that
made it so: ``default_since``) to ``{"headline", "sentences", "differences"}``. A sentence is a list of segments
``{"text", "kind", "ref"}`` — ``kind`` None (text) or one of ``version`` (the chat as it was at that version),
``message`` (a message of the chat) — which the page turns into links; ``differences`` are the values that
differ between the decision as it was then and the same decision with today's settings (``with_current_settings``),
each ``{"field", "then", "now"}``.
"""

from __future__ import annotations

import re
from typing import Any

_LINKS = re.compile(r"\b(?P<version>version (?P<v>\d+))\b|\b(?P<message>(?:assistant |user |tool )?message (?P<m>\d+))\b")

#: how a model was chosen (``model_resolution.source``), said in words
SOURCES = {
    "org_default": "the organization's default",
    "chat_model": "the model the chat was set to",
    "explicit": "the model the command named",
    "fallback_default": "the organization's default, in place of a model that could not be used",
    "personal_override": "the user's own override",
    "admin_override": "the organization's override for this kind of chat",
}


def segments(sentence: str) -> list[dict[str, Any]]:
    """``sentence`` cut into text and links: each "version N" and "message N" a link."""
    out: list[dict[str, Any]] = []
    at = 0
    for m in _LINKS.finditer(sentence):
        if m.start() > at:
            out.append({"text": sentence[at:m.start()], "kind": None, "ref": None})
        if m.group("version"):
            out.append({"text": m.group("version"), "kind": "version", "ref": int(m.group("v"))})
        else:
            out.append({"text": m.group("message"), "kind": "message", "ref": int(m.group("m"))})
        at = m.end()
    if at < len(sentence):
        out.append({"text": sentence[at:], "kind": None, "ref": None})
    return out


def _model(report: dict[str, Any]) -> str | None:
    for step in report.get("step_details") or ():
        model = ((step.get("settings") or {}).get("model") or {})
        if model.get("provider"):
            return f"{model['provider']}/{model['model']}"
    return None


def model_sentence(report: dict[str, Any], default_since: dict[str, Any] | None) -> str | None:
    """Which model a turn ran on, and why (with the catalog change that made it the default, when given)."""
    resolution = report.get("model_resolution") or {}
    if not resolution:
        return None
    source = resolution.get("source") or ""
    name = _model(report) or f"model config {resolution.get('model_config_id')}"
    why = SOURCES.get(source, source.replace("_", " ") or "not recorded")
    text = f"It ran on {name}: {why}"
    if default_since is not None and source in ("org_default", "fallback_default"):
        who = f" by {default_since['actor']}" if default_since.get("actor") else ""
        text += (f", since v{default_since['version']} of the organization's catalog "  # (not "version N": a chat's)
                 f"({default_since['reason'].replace('_', ' ')}{who}, {default_since['time']})")
    return text + "."


def _differences(value: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(value, dict):
        for d in value.get("differences") or ():
            out.append({"field": d["field"], "then": d.get("as_of"), "now": d.get("current")})
        for k, v in value.items():
            if k != "differences":
                _differences(v, out)
    elif isinstance(value, list):
        for v in value:
            _differences(v, out)


def readable(report: dict[str, Any], what: str, default_since: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report as a page says it."""
    sentences = [str(s) for s in report.get("explanation") or ()]
    if what == "turn":
        said = model_sentence(report, default_since)
        if said is not None:  # (in place of the report's own line about the model: the same fact, with its why)
            sentences = [s for s in sentences if not s.startswith("model ")]
            sentences.insert(1, said)
    differences: list[dict[str, Any]] = []
    _differences(report, differences)
    headline = sentences[0] if sentences else ""
    return {"headline": segments(headline), "sentences": [segments(s) for s in sentences[1:]],
            "differences": differences}
