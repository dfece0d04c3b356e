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
