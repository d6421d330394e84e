"""The search view and full-text reads, on SQLite (FTS5) and PostgreSQL (tsvector + GIN).

* The database's engine finds exactly what a plain word model says (words, phrases, exclusions; any
  punctuation, case, operators of either engine's own syntax typed as text), rows updated and deleted
  included: the index is kept in step with the rows by the database.
* The search view under crashes and redelivery equals its rebuild, row for row and hit for hit, and holds
  one document per message recorded.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from commands.queries import chat_ids
from commands.search import SearchFilters, search
from ledger.base import LedgerEvent
from ledger.errors import LedgerError
from projections import Delete, Projection, Table, Upsert, catch_up, maintained_version
from projections.engine import physical_name
from projections.schema import TEXT, Column
from projections.search import SearchView
from projections.textquery import WORD, Term, TextQueryError, fts5, parse, snippet, tsquery
from tests.projections.projection_kit import Writer, read_build
from tests.projections.test_chat_views import ACTIONS, record, renamed
from tests.projections.test_projection_exactly_once import drive


class NoteSet(LedgerEvent):
    TOPIC = "test:search.NoteSet"
    key: str
    body: str


class NoteRemoved(LedgerEvent):
    TOPIC = "test:search.NoteRemoved"
    key: str


class Notes(Projection):
    name = "notes"
    version = 1
    tables = [Table("notes", [Column("grp", TEXT), Column("key", TEXT), Column("body", TEXT, False)],
                    ["grp", "key"], text_search="body")]
    topics = [NoteSet.TOPIC, NoteRemoved.TOPIC]

    def __init__(self, app: Any) -> None:
        pass

    def apply(self, e: Any, rows: Any) -> list[Any]:
        key = (str(e.originator_id), e.key)
        if isinstance(e, NoteSet):
            return [Upsert("notes", {"grp": key[0], "key": key[1], "body": e.body})]
        return [Delete("notes", key)]


VOCAB = ["alpha", "beta", "Gamma", "rm", "rf", "etc", "passwd", "naïve", "ÉCLAIR", "日本", "x1", "42", "NEAR", "AND", "OR", "NOT"]
SEPARATORS = [" ", "-", "/", "_", ".", "\n", " -", '"', "*", ":", "(", ")", "'", "^", "&", "|", "!", "<->"]
bodies = st.lists(st.tuples(st.sampled_from(VOCAB), st.sampled_from(SEPARATORS)), min_size=1, max_size=12).map(
    lambda pairs: "".join(w + s for w, s in pairs))
queries = st.lists(st.tuples(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3), st.booleans(),
                             st.sampled_from(SEPARATORS[:5])), min_size=1, max_size=3)


def spelled(terms: list[tuple[list[str], bool, str]]) -> str:
    """A query as a person types it: phrases quoted, joined by a separator, exclusions with a minus."""
    out = []
    for words, excluded, sep in terms:
        text = sep.join(words)
        text = f'"{text}"' if len(words) > 1 else text
        out.append(("-" if excluded else "") + text)
    return " ".join(out)


def model_match(body: str, terms: tuple[Term, ...]) -> bool:
    words = [w.lower() for w in WORD.findall(body)]

    def has(phrase: tuple[str, ...]) -> bool:
        n = len(phrase)
        return any(tuple(words[i:i + n]) == phrase for i in range(len(words) - n + 1))

    return all(has(t.words) != t.excluded for t in terms)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(notes=st.lists(st.tuples(st.integers(0, 5), bodies), min_size=1, max_size=10),
       removed=st.lists(st.integers(0, 5), max_size=3), query=queries)
def test_the_engine_finds_what_the_word_model_finds(app: Any, backend: Any, notes: list[tuple[int, str]],
                                                    removed: list[int], query: Any) -> None:
    w = Writer(app)
    w.save(w.event(NoteSet, 0, key=str(k), body=body) for k, body in notes)  # later ones update earlier keys
    w.save(w.event(NoteRemoved, 0, key=str(k)) for k in removed)
    p = renamed(Notes, app, uuid.uuid4().hex[:6])
    catch_up(app, p, backend)
    rows = [r for r in read_build(backend, p)["notes"] if r["grp"] == str(w.group(0))]
    try:
        terms = parse(spelled(query))
    except TextQueryError:
        assert all(excluded for _, excluded, _ in query)
        return
    with backend.reading(p) as r:
        hits = r.text_search("notes", terms, where={"grp": str(w.group(0))}, limit=100)
    assert sorted(h["key"] for h, _ in hits) == sorted(r["key"] for r in rows if model_match(r["body"], terms))


@pytest.mark.parametrize("text", ['a" OR "b', "NEAR(a b)", "a*", "col:a", "^a", "a & !b", "a <-> b", "'a'", "(a"])
def test_engine_syntax_typed_as_text_is_words(text: str) -> None:
    terms = parse(text)
    assert all(re.fullmatch(r"[^\W_]+", w) for t in terms for w in t.words)
    assert '"' not in fts5(terms).replace('" ', "").replace(' "', "").strip('()"')
    assert set(re.sub(r"'[^']*'", "", tsquery(terms))) <= set(" &!()<->")


def test_a_query_without_a_word_is_refused() -> None:
    for text in ("", "   ", "-alone", '"-- //"', "-a -b"):
        with pytest.raises(TextQueryError):
            parse(text)


def test_the_snippet_marks_the_words_around_the_first_match() -> None:
    body = "x " * 200 + "then run rm -rf / as root\nand more " + "y " * 200
    frags = snippet(body, ["rm", "rf"])
    assert [f.text for f in frags if f.hit] == ["rm", "rf"]
    text = "".join(f.text for f in frags)
    assert text.startswith("…") and text.endswith("…") and "rm -rf / as root and more" in text
    assert len(text) < 200


# -- the search view ------------------------------------------------------------------------------------------

@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    n_chats=st.integers(1, 3),
    steps=st.lists(st.tuples(st.integers(0, 2), ACTIONS), min_size=1, max_size=25),
    schedule=st.lists(st.tuples(st.sampled_from(["batch", "crash", "redeliver"]), st.integers(1, 12)),
                      min_size=1, max_size=8),
)
def test_incremental_search_view_equals_rebuild(app: Any, backend: Any, n_chats: int, steps: list[Any],
                                                schedule: list[Any]) -> None:
    record(app, n_chats, steps)
    suffix = uuid.uuid4().hex[:6]
    p = renamed(SearchView, app, f"i{suffix}")
    version = maintained_version(p, backend)
    drive(app, backend, p, version, schedule)
    catch_up(app, p, backend, batch_size=5)
    full = renamed(SearchView, app, f"f{suffix}")
    catch_up(app, full, backend, batch_size=1000)
    incremental = read_build(backend, p, version)
    assert incremental == read_build(backend, full)
    # one document per message of each chat, and a title document per chat
    messages = {str(cid): len(app.load(cid).state.messages) for cid in chat_ids(app)}
    docs = incremental["search_docs"]
    for cid, n in messages.items():
        assert sorted(d["message_id"] for d in docs if d["chat_id"] == cid and d["kind"] == "message") == \
            list(range(1, n + 1))
    assert {d["chat_id"] for d in docs if d["doc_id"] == "t"} == set(messages)
    # the index answers the same on both builds (it follows the rows through crashes and redelivery)
    for word in ("more", "hook", "edited", "boom", "read", "revised", "capped"):
        terms = parse(word)
        with backend.reading(p, version) as r:
            a = sorted(h["doc_id"] + h["chat_id"] for h, _ in r.text_search("search_docs", terms, limit=500))
        with backend.reading(full) as r:
            b = sorted(h["doc_id"] + h["chat_id"] for h, _ in r.text_search("search_docs", terms, limit=500))
        assert a == b
        assert a == sorted(d["doc_id"] + d["chat_id"] for d in docs if model_match(d["body"], terms))


def test_search_filters_pages_and_scope(app: Any, backend: Any) -> None:
    from commands.views import catch_up_views
    from tests.projections.test_chat_views import ORG, OWNER

    record(app, 3, [(0, {"type": "commit_step", "messages": [{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "c1", "tool_name": "execute", "args": {"command": "rm -rf /tmp/x"}}]}]}),
        (1, {"type": "send_message", "text": "please do not rm -rf anything"}),
        (2, {"type": "finish_error", "error": {"message": "rm -rf refused"}})])
    catch_up_views(app, backend, ("chat_views", "search"))
    everything = search(backend, '"rm -rf"', limit=50)
    assert {h.kind for h in everything.hits} >= {"message", "error"} or {h.kind for h in everything.hits} >= {"message"}
    assert all("rm" in h.snippet and h.highlights for h in everything.hits)
    tool = search(backend, '"rm -rf"', SearchFilters(tool="execute"))
    assert [h.tools for h in tool.hits] == [["execute"]]
    assert search(backend, '"rm -rf"', SearchFilters(tool="exec")).hits == []  # a tool name, not a prefix
    # pages: one hit each, in the same order as one page of all, and the last has no cursor
    paged, cursor = [], None
    while True:
        page = search(backend, "rm", limit=1, cursor=cursor)
        paged += [(h.chat_id, h.doc_id) for h in page.hits]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert paged == [(h.chat_id, h.doc_id) for h in search(backend, "rm", limit=50).hits]
    # a cursor of another search is refused, not followed
    first = search(backend, "rm", limit=1)
    with pytest.raises(LedgerError) as e:
        search(backend, "rf", limit=1, cursor=first.next_cursor)
    assert e.value.code == "invalid_request"
    # the scope: another owner's or organization's documents are never hits
    assert search(backend, "rm", scope={"organization_id": str(uuid.uuid4())}).hits == []
    assert search(backend, "rm", scope={"organization_id": ORG, "owner_id": OWNER}).hits
    assert search(backend, "rm", SearchFilters(org=str(uuid.uuid4())), scope={"organization_id": ORG}).hits == []
    with pytest.raises(LedgerError) as e:
        search(backend, "rm", SearchFilters(status="bogus"))
    assert e.value.code == "invalid_command"


def secondary_indexes(backend: Any, table: str) -> set[str]:
    """The indexes of a view's table but its primary key's and the full-text one."""
    with backend._read_tx() as cur:
        if backend.kind == "sqlite":
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                        (table,))
        else:
            cur.execute("SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s AND indexname "
                        "NOT LIKE '%%_pkey' AND indexname NOT LIKE '%%_fts'", (backend.schema, table))
        return {r[0] for r in cur.fetchall()}


def test_a_stream_wise_rebuild_indexes_every_row_and_a_stopped_one_gets_its_index_back(app: Any, backend: Any) -> None:
    from projections import rebuild

    record(app, 3, [(i % 3, {"type": "send_message", "text": f"word{i} common"}) for i in range(12)])
    p = renamed(SearchView, app, uuid.uuid4().hex[:6])
    result = rebuild(app, p, backend)
    assert result.streamwise
    expected = read_build(backend, p)["search_docs"]

    def found(version: int | None, word: str) -> list[str]:
        with backend.reading(p, version) as r:
            return sorted(h["chat_id"] + h["doc_id"] for h, _ in r.text_search("search_docs", parse(word), limit=500))

    for word in ("common", "word3", "chat"):
        assert found(None, word) == sorted(d["chat_id"] + d["doc_id"] for d in expected
                                           if model_match(d["body"], parse(word)))
    # the build's secondary indexes were made by its last transaction (they were not kept row by row), and on
    # PostgreSQL the planner has the new rows' statistics at once
    built = physical_name(p.name, maintained_version(p, backend), "search_docs")
    assert secondary_indexes(backend, built) == {f"{built}_i1", f"{built}_i2"}
    if backend.kind == "postgres":
        with backend._read_tx() as cur:
            cur.execute("SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables "
                        "WHERE schemaname = %s AND relname = %s", (backend.schema, built))
            assert cur.fetchone()[0]
    # a stream-wise build that stopped after suspending its indexes (a killed rebuild): the next batch at
    # position 0 restores them, and what the batches write is found
    q = renamed(SearchView, app, uuid.uuid4().hex[:6])
    version = maintained_version(q, backend)
    table = physical_name(q.name, version, "search_docs")
    with backend.lease(q.name, version, "test"):
        backend.suspend_indexes(q, version)
    assert secondary_indexes(backend, table) == set()
    catch_up(app, q, backend, batch_size=7)
    assert secondary_indexes(backend, table) == {f"{table}_i1", f"{table}_i2"}
    with backend.reading(q, version) as r:
        hits = sorted(h["chat_id"] + h["doc_id"] for h, _ in r.text_search("search_docs", parse("common"), limit=500))
    assert hits == found(None, "common") and hits


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(texts=st.lists(st.sampled_from(["common word", "common rare", "common", "other words", "word common"]),
                      min_size=30, max_size=60),
       query=st.sampled_from(["common", "word", '"common word"', '"word common" -rare', '"other words"', "rare",
                              '"common rare"']),
       candidates=st.integers(1, 8), scoped=st.booleans(), walk_rows=st.integers(8, 60),
       newest_other=st.integers(0, 20), margin=st.sampled_from([0, 4]))
def test_walking_the_newest_rows_finds_what_the_index_finds(app: Any, backend: Any, monkeypatch: Any,
                                                            texts: list[str], query: str, candidates: int,
                                                            scoped: bool, walk_rows: int, newest_other: int,
                                                            margin: int) -> None:
    """PostgreSQL: for a query with a phrase whose words the table's statistics say are common, the search first
    walks the newest rows in scope (``Reader._walk``); it answers only when it found every candidate, and then with the
    same hits, rank order, pages and ``capped`` as the query over the full-text index, however few rows it may
    walk (``WALK_ROWS``; with no margin, ``WALK_MARGIN`` 0, it walks for any word the statistics know: a walk
    that found fewer than every candidate leaves the answer to the index). SQLite's
    index gives matches newest first itself: it never walks."""
    from projections import rebuild
    from projections.reading import Reader
    from tests.projections.test_chat_views import ORG

    # (the newest messages may hold none of the common words: a walk of the newest rows then finds too few)
    texts = texts + ["other words"] * newest_other
    record(app, 4, [(i % 4, {"type": "send_message", "text": t}) for i, t in enumerate(texts)])
    p = renamed(SearchView, app, uuid.uuid4().hex[:6])
    rebuild(app, p, backend)  # (stream-wise: its statistics gathered by its last transaction)
    terms, scope = parse(query), {"organization_id": ORG} if scoped else None
    walked: list[bool] = []
    walk = Reader._walk  # (the original: each example undoes its patches)
    monkeypatch.setattr(Reader, "WALK_ROWS", walk_rows)

    def spy(self: Any, *args: Any) -> Any:
        found = walk(self, *args)
        walked.append(found is not None)
        return found

    def hits(use_walk: bool, offset: int) -> tuple[list[str], bool]:
        monkeypatch.setattr(Reader, "_walk", spy if use_walk else (lambda *a: None))
        monkeypatch.setattr(Reader, "WALK_ROWS", walk_rows)
        monkeypatch.setattr(Reader, "WALK_MARGIN", margin)
        with backend.reading(p) as r:
            found = [h["chat_id"] + h["doc_id"] for h, _ in r.text_search(
                "search_docs", terms, scope, limit=3, offset=offset, candidates=candidates, newest="at")]
            return found, r.capped

    try:
        for offset in (0, 3):
            assert hits(True, offset) == hits(False, offset)
    finally:
        monkeypatch.undo()  # (each example patches the class afresh)
    if backend.kind == "sqlite" or '"' not in query:  # (words alone: the planner's own estimate)
        assert not any(walked)
    else:
        event(f"walked: {any(walked)}")


def test_a_common_phrase_walks_and_a_rare_one_does_not(app: Any, backend: Any, monkeypatch: Any) -> None:
    """PostgreSQL: the statistics of a table where a phrase's words are in most rows make its search walk the
    newest rows (``Reader._walk``), and find there what the index finds; a phrase of a word the statistics do
    not know, or words alone, goes to the index at once."""
    from projections import rebuild
    from projections.reading import Reader

    record(app, 3, [(i % 3, {"type": "send_message", "text": "common word" if i % 5 else f"rare{i} word"})
                    for i in range(60)])
    p = renamed(SearchView, app, uuid.uuid4().hex[:6])
    rebuild(app, p, backend)
    walk, walked = Reader._walk, []

    def spy(self: Any, *args: Any) -> Any:
        found = walk(self, *args)
        walked.append(found is not None)
        return found

    monkeypatch.setattr(Reader, "_walk", spy)
    for query, walks in (('"common word"', True), ('"rare5 word"', False), ("common", False)):
        walked.clear()
        with backend.reading(p) as r:
            found = [h["doc_id"] + h["chat_id"] for h, _ in r.text_search(
                "search_docs", parse(query), limit=10, candidates=5, newest="at")]
        assert walked == [walks and backend.kind == "postgres"], query
        assert len(found) == (1 if "rare" in query else 5)
