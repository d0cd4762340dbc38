-- shardkit-migration: targets = shard, reference
--
-- The job/outbox table of shardkit's worker sharding (include/shardkit/
-- job_queue.hpp). It lives on every shard, co-located with the Bookstore
-- tables: a job sits on the shard of its customer's bucket, so it is
-- enqueued in the same transaction as the order that causes it, and it
-- moves with its bucket.
--
-- partition is computed once, at write time, and never changes: the home
-- partition of a customer is its bucket (64 partitions: bucket_of(customer_id)),
-- a salted hot customer's jobs spread over several partitions (hot_keys.hpp).
-- Workers own partitions through leases in the catalog (sql/021) and take
-- pending jobs of their partitions in created order with FOR UPDATE SKIP
-- LOCKED. fence is the claim_version of the partition lease under which the
-- job was last taken: a completion under an older version finds a higher
-- fence and updates nothing (0 rows = a newer owner exists).
CREATE TABLE IF NOT EXISTS shardkit_jobs (
  customer_id integer     NOT NULL,
  bucket      smallint    NOT NULL CHECK (bucket = bucket_of(customer_id)),
  job_id      bigint      NOT NULL,
  queue       text        NOT NULL DEFAULT 'default' CHECK (queue <> ''),
  partition   smallint    NOT NULL CHECK (partition BETWEEN 0 AND 1023),
  kind        text        NOT NULL,
  payload     text        NOT NULL DEFAULT '',
  -- Jobs of one stream (an order's status changes) share stream_key: they
  -- stay in one partition even when their customer is salted. seq orders
  -- them within the stream, for the effect's guard (WHERE seq_col < seq).
  stream_key  bigint,
  seq         bigint      NOT NULL DEFAULT 0,
  state       text        NOT NULL DEFAULT 'pending'
                          CHECK (state IN ('pending', 'running', 'done', 'dead')),
  created     timestamptz NOT NULL DEFAULT clock_timestamp(),
  run_after   timestamptz NOT NULL DEFAULT '-infinity',
  attempts    integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  fence       bigint      NOT NULL DEFAULT 0 CHECK (fence >= 0),
  owner       text,
  taken_at    timestamptz,
  done_at     timestamptz,
  last_error  text,
  PRIMARY KEY (customer_id, job_id)
);

-- The seed's index: pending jobs by partition and time (what workers take).
CREATE INDEX IF NOT EXISTS shardkit_jobs_pending_idx
  ON shardkit_jobs (queue, partition, created, job_id) WHERE state = 'pending';
-- Jobs left running by an earlier owner of a partition, adopted by the next.
CREATE INDEX IF NOT EXISTS shardkit_jobs_running_idx
  ON shardkit_jobs (queue, partition, fence) WHERE state = 'running';
-- Throughput (recently done) per partition, and purging old jobs.
CREATE INDEX IF NOT EXISTS shardkit_jobs_done_idx
  ON shardkit_jobs (queue, done_at) WHERE state = 'done';
-- Leads with bucket like every sharded table, and is the replica identity:
-- a bucket move publishes UPDATE/DELETE with a row filter on bucket, which
-- must then be part of the replica identity.
CREATE UNIQUE INDEX IF NOT EXISTS shardkit_jobs_bucket_idx ON shardkit_jobs (bucket, customer_id, job_id);
ALTER TABLE shardkit_jobs REPLICA IDENTITY USING INDEX shardkit_jobs_bucket_idx;

COMMENT ON TABLE shardkit_jobs IS
  'shardkit job/outbox: one row per job, on the shard of its customer''s bucket; partition is fixed at write time';
COMMENT ON COLUMN shardkit_jobs.fence IS
  'claim_version of the partition lease the job was last taken under; completions need fence <= their version';
