-- shardkit-migration: targets = shard, reference
--
-- The Bookstore's outbox effects (lab demo `workers`): what a worker does
-- when it completes a job, inside the same transaction as the fenced
-- completion, so a job's effects commit at most once with it.
--
-- notification_log: one row per notification sent. The key includes the
-- fence (the lease version the job was completed under) instead of being
-- unique per notification, so that a job completed twice by two owners
-- would show up as two rows for the lab's checker (double_processed) rather
-- than be hidden by a constraint: the fence, not a unique index, is what
-- prevents it.
CREATE TABLE IF NOT EXISTS notification_log (
  customer_id     integer     NOT NULL,
  bucket          smallint    NOT NULL CHECK (bucket = bucket_of(customer_id)),
  notification_id bigint      NOT NULL,  -- the job's job_id
  fence           bigint      NOT NULL,
  order_id        bigint      NOT NULL,
  kind            text        NOT NULL,
  sent_by         text        NOT NULL,
  sent_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (customer_id, notification_id, fence)
);
CREATE UNIQUE INDEX IF NOT EXISTS notification_log_bucket_idx
  ON notification_log (bucket, customer_id, notification_id, fence);
ALTER TABLE notification_log REPLICA IDENTITY USING INDEX notification_log_bucket_idx;

-- An order's delivery status as its customer sees it. Status changes are
-- jobs of one stream (stream_key = order_id, seq = the status's rank); the
-- update is guarded, UPDATE ... WHERE status_seq < :seq, so a late
-- "shipped" never overwrites "delivered".
CREATE TABLE IF NOT EXISTS order_tracking (
  customer_id integer     NOT NULL,
  bucket      smallint    NOT NULL CHECK (bucket = bucket_of(customer_id)),
  order_id    bigint      NOT NULL,
  status      text        NOT NULL,
  status_seq  bigint      NOT NULL DEFAULT 0,
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (customer_id, order_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS order_tracking_bucket_idx ON order_tracking (bucket, customer_id, order_id);
ALTER TABLE order_tracking REPLICA IDENTITY USING INDEX order_tracking_bucket_idx;
