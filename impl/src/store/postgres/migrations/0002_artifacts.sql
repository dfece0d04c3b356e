-- WorkRail session store, schema version 2: artifacts beside snapshots and workflows
-- (content-addressed: `digest` = sha256 of `body`, the artifact's JCS text).

CREATE TABLE artifacts (
    digest text PRIMARY KEY,
    body   text NOT NULL
);
