// shardkit/ids/ids.hpp — global IDs that never collide across shards.
//
// Each shard's identity sequence is its own: order_id 1000001 exists on
// shard 0 and on shard 1 (the Bookstore case). shardkit's keys come from generators
// that need no shard and no coordination per ID:
//
//   UUIDv7 (uuidv7.hpp)        128-bit, uuid column, random + time-ordered;
//                              no worker ids to manage. The default choice.
//   Snowflake (snowflake.hpp)  64-bit bigint: 41 bits ms | 10 worker | 12 sequence;
//                              needs a unique worker id per process.
//   Bucketed (bucketed_id.hpp) 64-bit bigint that also carries the customer's
//                              bucket, so the ID alone finds its shard.
//   Worker ids (worker_lease.hpp) leased from PostgreSQL, so two processes
//                              can never share one.
//
//   #include "shardkit/ids/ids.hpp"
//   auto lease = shardkit::WorkerLease::Claim(control_dsn, {.id_space = "orders", .worker_count = 256});
//   shardkit::BucketedIdGenerator order_ids{lease};
//   std::int64_t order_id = order_ids.NextFor(customer_id);
//   shardkit::Uuid event_id = shardkit::NewUuidv7();
#pragma once

#include "shardkit/ids/bucketed_id.hpp"
#include "shardkit/ids/id_clock.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/uuidv7.hpp"
#include "shardkit/ids/worker_lease.hpp"
