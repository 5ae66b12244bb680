-- Each rated match's placings, read from topic matches: its rated players' [player_id, team
-- rank] as the worker's marker keeps them (`MatchFinished.placings`), so that `explain` fills
-- "actual" for a match whose marker expired. Once per (ladder, match_id): the first record wins,
-- as the worker applies a match id once.
CREATE TABLE match_placings (
    ladder          text        NOT NULL,
    match_id        text        NOT NULL,
    placings        jsonb       NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    archived_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ladder, match_id)
);
