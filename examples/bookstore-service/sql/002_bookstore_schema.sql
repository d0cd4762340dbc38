-- shardkit-migration: targets = shard, reference
-- The Bookstore schema, co-located by customer_id (seed 001).
--
-- books is a reference table: a full copy on every shard. customers, orders
-- and order_items are sharded by customer_id: each row lives on the shard
-- that owns bucket_of(customer_id). Every sharded table stores that bucket
-- (logical-replication row filters may not call functions, so a bucket move
-- filters on the stored column) and leads an index with it. Primary keys
-- include customer_id. Global keys (order_id) come from shardkit's ID
-- generators, never from identity columns, which collide across shards.

CREATE TABLE IF NOT EXISTS books (
  book_id   bigint PRIMARY KEY,
  title     text NOT NULL,
  category  text NOT NULL,
  price     numeric(10,2) NOT NULL CHECK (price >= 0)
);

CREATE TABLE IF NOT EXISTS customers (
  customer_id integer NOT NULL,
  bucket      smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),
  name        text NOT NULL,
  email       text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (customer_id)
);
CREATE INDEX IF NOT EXISTS customers_bucket_idx ON customers (bucket, customer_id);

CREATE TABLE IF NOT EXISTS orders (
  customer_id integer NOT NULL,
  bucket      smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),
  order_id    bigint NOT NULL,
  ordered_at  timestamptz NOT NULL,
  status      text NOT NULL DEFAULT 'placed',
  total       numeric(12,2) NOT NULL CHECK (total >= 0),
  PRIMARY KEY (customer_id, order_id)
);
-- "my orders": newest first for one customer.
CREATE INDEX IF NOT EXISTS orders_customer_time_idx ON orders (customer_id, ordered_at DESC);
CREATE INDEX IF NOT EXISTS orders_bucket_idx ON orders (bucket, customer_id);
-- reports by time window (last 30 days, per year).
CREATE INDEX IF NOT EXISTS orders_time_idx ON orders (ordered_at);

CREATE TABLE IF NOT EXISTS order_items (
  customer_id integer NOT NULL,
  bucket      smallint NOT NULL CHECK (bucket = bucket_of(customer_id)),
  order_id    bigint NOT NULL,
  line_no     integer NOT NULL,
  book_id     bigint NOT NULL,
  quantity    integer NOT NULL CHECK (quantity > 0),
  unit_price  numeric(10,2) NOT NULL CHECK (unit_price >= 0),
  PRIMARY KEY (customer_id, order_id, line_no)
);
CREATE INDEX IF NOT EXISTS order_items_bucket_idx ON order_items (bucket, customer_id);
CREATE INDEX IF NOT EXISTS order_items_book_idx ON order_items (book_id);
