-- pgoutbox migration 002: the archive of sent entries, used when
-- pgoutbox.Options.Archive is set and emptied by Backend.PurgeArchive.

CREATE TABLE "outbox_archive" (
    seq        bigint      NOT NULL,
    id         text        NOT NULL,
    partition  integer     NOT NULL,
    topic      text        NOT NULL,
    key        bytea       NOT NULL,
    payload    bytea,
    headers    bytea,
    not_before timestamptz,
    created_at timestamptz NOT NULL,
    attempts   integer     NOT NULL,
    last_error text        NOT NULL,
    sent_at    timestamptz NOT NULL,
    CONSTRAINT "outbox_archive_pkey" PRIMARY KEY (id)
);

-- PurgeArchive deletes the oldest rows first, in bounded batches.
CREATE INDEX "outbox_archive_sent_idx" ON "outbox_archive" (sent_at);
