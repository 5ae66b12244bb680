-- The archive's events: every rating-changed event of topic rating-updates (kinds match,
-- season, correction), once per (ladder, kind, event_id): event_id is unique within a ladder
-- (<match_id>:<player_id>, a correction's rerate:<ladder>:<generation>:<player_id>).
-- `position` is the archive's order of arrival; a player's events all come from one
-- partition (key <ladder>:<player_id>) in log order, so per player it is the log's order.
CREATE TABLE rating_events (
    position      bigserial        NOT NULL,
    ladder        text             NOT NULL,
    kind          text             NOT NULL,
    event_id      text             NOT NULL,
    match_id      text             NOT NULL,
    player_id     text             NOT NULL,
    model         text             NOT NULL,
    mu_before     double precision NOT NULL,
    sigma_before  double precision,
    mu_after      double precision NOT NULL,
    sigma_after   double precision,
    rating        double precision NOT NULL,
    delta         double precision NOT NULL,
    games         integer          NOT NULL,
    finished_at   timestamptz      NOT NULL,
    processed_at  timestamptz      NOT NULL,
    event         jsonb            NOT NULL,
    topic         text             NOT NULL,
    kafka_partition integer        NOT NULL,
    kafka_offset  bigint           NOT NULL,
    archived_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (ladder, kind, event_id)
);

-- A player's history, newest first, pages by position (the `before` cursor).
CREATE INDEX rating_events_player ON rating_events (ladder, player_id, position DESC);
-- A match's events (explain).
CREATE INDEX rating_events_match ON rating_events (ladder, match_id);
