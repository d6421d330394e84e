"""The catalog on real databases: the aggregate cache stays exactly current across processes (another
application writing the same database), chats are never cached, and the cache settings are the library's."""

from __future__ import annotations

import uuid

import pytest

from ledger.catalog.state import DEPLOYMENT_ID
from ledger.errors import LedgerError
from ledger.store import DEFAULT_CACHE_MAXSIZE, ChatLedgerApp, open_app
from tests.catalog.kit import ALICE, M1, M2, ORG, chat, org_with, run


def test_a_cached_catalog_follows_writes_of_another_application(app, db_url):
    org_with(app)
    chat_id = chat(app)["chat_id"]
    org = uuid.UUID(ORG)
    cached = app.load_cached(org, copy=False)
    assert app.load_cached(org, copy=False) is cached  # served from the cache
    other = open_app(db_url)
    try:
        run(other, type="update_model_config", organization_id=ORG, model_config_id=M2, enabled=False)
        run(other, type="set_deployment_settings", personal_model_overrides_enabled=True)
    finally:
        other.close()
    with pytest.raises(LedgerError) as err:
        run(app, type="send_message", chat_id=chat_id, text="x", model_config_id=M2)
    assert err.value.code == "model_config_invalid"
    assert app.load_cached(org, copy=False).state == app.load(org).state
    assert app.load_cached(DEPLOYMENT_ID, copy=False).state.personal_model_overrides_enabled is True
    assert app.repository.cache is None  # chats are never cached
    assert app.load_cached(org, copy=False) is cached  # fast-forwarded in place


def test_commands_get_a_copy_and_a_refused_command_leaves_the_cache_alone(app):
    org_with(app)
    org = uuid.UUID(ORG)
    before = app.load_cached(org, copy=False).state
    version = before.version
    with pytest.raises(LedgerError):
        run(app, type="set_default_model_config", organization_id=ORG, model_config_id=str(uuid.uuid4()))
    run(app, type="set_default_model_config", organization_id=ORG, model_config_id=M2)
    cached = app.load_cached(org, copy=False)
    assert cached.version == version + 1 and str(cached.state.default_model_config_id) == M2
    assert cached.state == app.load(org).state


def test_cache_settings_are_the_librarys(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    from ledger.store import DatabaseURL

    env = DatabaseURL.parse(url).env()
    default = ChatLedgerApp(env=env)
    sized = ChatLedgerApp(env={**env, "AGGREGATE_CACHE_MAXSIZE": "2"})
    no_ff = ChatLedgerApp(env={**env, "AGGREGATE_CACHE_FASTFORWARD": "n"})
    try:
        assert default.cached_repository.cache.maxsize == DEFAULT_CACHE_MAXSIZE
        assert default.cached_repository.fastforward is True
        assert sized.cached_repository.cache.maxsize == 2 and sized.repository.cache is None
        # without fast-forward the cache follows this application's own writes
        org_with(no_ff, configs=(M1,))
        org = uuid.UUID(ORG)
        assert str(no_ff.load_cached(org, copy=False).state.default_model_config_id) == M1
        run(no_ff, type="add_organization_member", organization_id=ORG, user_id=str(uuid.uuid4()))
        assert no_ff.load_cached(org, copy=False).state == no_ff.load(org).state
        assert uuid.UUID(ALICE) in no_ff.load_cached(org, copy=False).state.members
    finally:
        for a in (default, sized, no_ff):
            a.close()
