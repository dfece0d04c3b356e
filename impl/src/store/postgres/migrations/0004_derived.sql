-- WorkRail session store, schema version 4: derived data every process on this schema shares
-- (D115). One row per derived file, named as the file (`resume-index.v1`: the persisted
-- `resume_session` index, byte for byte what the file store keeps in
-- `cache/resume-index.v1.jsonl`). Never truth: a row may be deleted at any time, and a damaged
-- or foreign one reads as empty and is replaced by the next write.

CREATE TABLE derived (
    name       text PRIMARY KEY,
    bytes      bytea NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);

-- Which builds may use a schema with a migration applied (D128): `oldest_build` is the oldest
-- schema version a WorkRail build may know and still use this schema (NULL: only builds that
-- know this migration). A build refuses a schema only when a migration it does not know asks
-- for a newer build; this one asks for version 3 (builds of version 3 ignore `derived`).
ALTER TABLE schema_version ADD COLUMN IF NOT EXISTS oldest_build integer CHECK (oldest_build > 0);
