-- WorkRail session store, schema version 1 (impl/docs/store.md "PostgreSQL").
-- Events and manifest records keep the exact canonical (RFC 8785) text the file store writes,
-- one row each; a session's indices are contiguous by construction (the triggers below).

CREATE TABLE sessions (
    session_id          text PRIMARY KEY,
    -- The index the next event / manifest record must carry; moved only by the triggers.
    next_event_index    bigint NOT NULL DEFAULT 0 CHECK (next_event_index >= 0),
    next_manifest_index bigint NOT NULL DEFAULT 0 CHECK (next_manifest_index >= 0),
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
    session_id  text   NOT NULL REFERENCES sessions (session_id),
    event_index bigint NOT NULL CHECK (event_index >= 0),
    event_id    text   NOT NULL,
    dedupe_key  text   NOT NULL,
    -- The event's JCS text (a segment line without its newline).
    body        text   NOT NULL,
    PRIMARY KEY (session_id, event_index),
    UNIQUE (session_id, dedupe_key)
);

CREATE TABLE manifest (
    session_id     text   NOT NULL REFERENCES sessions (session_id),
    manifest_index bigint NOT NULL CHECK (manifest_index >= 0),
    kind           text   NOT NULL CHECK (kind IN ('segment_closed', 'snapshot_pinned')),
    -- The record's JCS text (a manifest line without its newline).
    body           text   NOT NULL,
    PRIMARY KEY (session_id, manifest_index)
);

-- Content-addressed objects: the key is `sha256:<hex>` of the JCS bytes kept in `body`.
CREATE TABLE snapshots (
    digest text PRIMARY KEY CHECK (digest LIKE 'sha256:%'),
    body   text NOT NULL
);

CREATE TABLE workflows (
    digest text PRIMARY KEY CHECK (digest LIKE 'sha256:%'),
    body   text NOT NULL
);

-- The token signing keyring: one row, the JSON of keys/keyring.json.
CREATE TABLE keyring (
    id         smallint PRIMARY KEY CHECK (id = 1),
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- An event row must carry exactly the session's next index: gaps and reorderings are refused
-- by the database itself, whatever the writer does. The functions keep the schema they were
-- created in, so a connection with another search_path cannot point them at other tables.
CREATE FUNCTION events_contiguous() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE sessions SET next_event_index = next_event_index + 1
     WHERE session_id = NEW.session_id AND next_event_index = NEW.event_index;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'eventIndex % of session % is not the next index', NEW.event_index, NEW.session_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER events_contiguous BEFORE INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION events_contiguous();

CREATE FUNCTION manifest_contiguous() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE sessions SET next_manifest_index = next_manifest_index + 1
     WHERE session_id = NEW.session_id AND next_manifest_index = NEW.manifest_index;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'manifestIndex % of session % is not the next index', NEW.manifest_index, NEW.session_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER manifest_contiguous BEFORE INSERT ON manifest
    FOR EACH ROW EXECUTE FUNCTION manifest_contiguous();
