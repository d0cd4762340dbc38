-- shardkit-migration: targets = shard
-- A multi-tenant invoicing service: every tenant's rows live on the shard
-- that owns bucket_of_bigint(tenant_id). shardkit's own schema (the bucket
-- functions, the fence, the catalog) is applied before this file by
-- `shardctl init` / `shardctl migrate`.

-- plans: a reference table, a full copy on every shard (joined locally).
CREATE TABLE plans (
  plan_id     integer PRIMARY KEY,
  name        text NOT NULL UNIQUE,
  monthly_fee numeric(10,2) NOT NULL CHECK (monthly_fee >= 0)
);
INSERT INTO plans VALUES (1, 'free', 0), (2, 'team', 49.00), (3, 'enterprise', 499.00);
SELECT shardkit_reference_table('plans');

-- Sharded by tenant_id bigint: each row stores its bucket (a move copies a
-- bucket by that column) and an index leads with it.
CREATE TABLE tenants (
  tenant_id bigint   NOT NULL PRIMARY KEY,
  bucket    smallint NOT NULL CHECK (bucket = bucket_of_bigint(tenant_id)),
  name      text     NOT NULL,
  plan_id   integer  NOT NULL
);
CREATE INDEX tenants_bucket_idx ON tenants (bucket, tenant_id);
SELECT shardkit_shard_table('tenants');

-- invoice_id is a UUIDv7 made by the service: unique across shards
-- without a sequence, and ordered by time of issue.
CREATE TABLE invoices (
  tenant_id  bigint        NOT NULL,
  bucket     smallint      NOT NULL CHECK (bucket = bucket_of_bigint(tenant_id)),
  invoice_id uuid          NOT NULL,
  customer   text          NOT NULL,
  amount     numeric(12,2) NOT NULL CHECK (amount > 0),
  status     text          NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'paid')),
  issued_at  timestamptz   NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, invoice_id)
);
CREATE INDEX invoices_bucket_idx ON invoices (bucket, tenant_id);
SELECT shardkit_shard_table('invoices');
