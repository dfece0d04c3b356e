-- WorkRail session store, schema version 5: each session's manifest totals on its row (D129).
-- `manifest_rows` and `manifest_bytes` are the count of its manifest rows and the bytes they
-- spell as `manifest.jsonl` (each record's text plus a newline): the freshness key a cached
-- session and the resume index are checked against, read from one row instead of summed over
-- every manifest row of the session. A trigger keeps them on every insert, update and delete
-- of a manifest row, whichever build or hand made it, so builds of version 3 and 4 keep them
-- right too (`oldest_build` 3).

ALTER TABLE sessions ADD COLUMN manifest_rows bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN manifest_bytes bigint NOT NULL DEFAULT 0;

UPDATE sessions s
   SET manifest_rows = t.n, manifest_bytes = t.bytes
  FROM (SELECT session_id, count(*) AS n, sum(octet_length(body) + 1) AS bytes
          FROM manifest GROUP BY session_id) t
 WHERE t.session_id = s.session_id;

CREATE FUNCTION manifest_totals() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE sessions
           SET manifest_rows = manifest_rows - 1,
               manifest_bytes = manifest_bytes - (octet_length(OLD.body) + 1)
         WHERE session_id = OLD.session_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        UPDATE sessions
           SET manifest_rows = manifest_rows + 1,
               manifest_bytes = manifest_bytes + (octet_length(NEW.body) + 1)
         WHERE session_id = NEW.session_id;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER manifest_totals AFTER INSERT OR UPDATE OR DELETE ON manifest
    FOR EACH ROW EXECUTE FUNCTION manifest_totals();
