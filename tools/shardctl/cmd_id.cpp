// shardctl id uuidv7 [-n N]                              -> one UUIDv7 a line, like uuidgen
// shardctl id snowflake [-n N] [--worker W] [--epoch-ms E]
// shardctl id bucketed (--customer C | --bucket B) [-n N] [--worker W] [--epoch-ms E]
// shardctl id decode <id> [--layout snowflake|bucketed] [--epoch-ms E] [--shards N] [--json]
//   -> time (ISO-8601 UTC), worker or bucket, sequence; version and variant for UUIDs
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "shardkit/errors.hpp"
#include "shardkit/ids/bucketed_id.hpp"
#include "shardkit/ids/snowflake.hpp"
#include "shardkit/ids/uuidv7.hpp"
#include "shardkit/routing/directory.hpp"

namespace {

constexpr int kMaxCount = 10'000'000;

struct GenerateOptions {
  int count = 1;
  int worker = 0;
  std::int64_t epoch_ms = shardkit::kDefaultIdEpochUnixMs;
  std::optional<shardkit::CustomerId> customer;
  std::optional<int> bucket;
};

struct DecodeOptions {
  std::string id;
  std::string layout = "snowflake";
  std::int64_t epoch_ms = shardkit::kDefaultIdEpochUnixMs;
  int shards = 0;
  bool json = false;
};

// --json given to shardctl itself (before the subcommand) counts too.
bool RootWantsJson(const CLI::App* root) {
  const CLI::Option* option = root->get_option_no_throw("--json");
  return option != nullptr && option->count() > 0;
}

// Prints IDs one a line (or as a JSON array), buffered: -n 1000000 is fast.
template <typename Next>
void PrintIds(int count, bool json, Next next) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (int i = 0; i < count; ++i) out.push_back(next());
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::memory_buffer buffer;
  for (int i = 0; i < count; ++i) {
    fmt::format_to(std::back_inserter(buffer), "{}\n", next());
    if (buffer.size() > (1 << 16)) {
      std::fwrite(buffer.data(), 1, buffer.size(), stdout);
      buffer.clear();
    }
  }
  std::fwrite(buffer.data(), 1, buffer.size(), stdout);
}

std::string VariantName(shardkit::UuidVariant variant) {
  switch (variant) {
    case shardkit::UuidVariant::kNcs:
      return "NCS (0xx)";
    case shardkit::UuidVariant::kRfc9562:
      return "RFC 9562 (10x)";
    case shardkit::UuidVariant::kMicrosoft:
      return "Microsoft (110)";
    case shardkit::UuidVariant::kFuture:
      return "reserved (111)";
  }
  return "?";
}

// Decimal digits only (an optional minus sign), at most 20 characters: a
// 64-bit integer ID; anything else is read as a UUID.
bool LooksLikeInteger(const std::string& text) {
  if (text.empty() || text.size() > 20) return false;
  const std::size_t start = text[0] == '-' ? 1 : 0;
  if (start == text.size()) return false;
  return text.find_first_not_of("0123456789", start) == std::string::npos;
}

std::int64_t ParseInteger(const std::string& text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end) {
    throw shardkit::IdFormatError(text, fmt::format("'{}' does not fit a signed 64-bit integer, so it is no "
                                                    "Snowflake or bucketed ID",
                                                    text));
  }
  return value;
}

void DecodeUuid(const std::string& text, bool json) {
  const shardkit::Uuid id = shardkit::Uuid::Parse(text);
  const auto unix_ms = id.Uuidv7UnixMs();
  if (json) {
    nlohmann::json out{
        {"kind", "uuid"}, {"uuid", id.ToString()}, {"version", id.Version()}, {"variant", VariantName(id.Variant())}};
    if (unix_ms) {
      out["time"] = shardkit::FormatUnixMsUtc(*unix_ms);
      out["unix_ms"] = *unix_ms;
      out["rand_a"] = id.RandA();
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("uuid:     {}\n", id.ToString());
  fmt::print("version:  {}{}\n", id.Version(), id.Version() == 7 ? " (Unix-time ordered)" : "");
  fmt::print("variant:  {}\n", VariantName(id.Variant()));
  if (unix_ms) {
    fmt::print("time:     {}\n", shardkit::FormatUnixMsUtc(*unix_ms));
    fmt::print("unix_ms:  {}\n", *unix_ms);
    fmt::print("rand_a:   0x{:03x} (in shardkit's and PostgreSQL 18's UUIDv7s: +{} ns within the millisecond)\n",
               id.RandA(), static_cast<long long>(id.RandA()) * 1'000'000 / 4096);
  }
}

void DecodeInteger(const DecodeOptions& o, bool json) {
  const std::int64_t id = ParseInteger(o.id);
  const std::string epoch = shardkit::FormatUnixMsUtc(o.epoch_ms);
  if (o.layout == "bucketed") {
    const auto parts = shardkit::DecodeBucketedId(id, o.epoch_ms);
    std::optional<shardkit::ShardId> shard;
    if (o.shards > 0) shard = shardkit::ShardOfId(shardkit::BucketDirectory::EvenSplit(o.shards), id);
    if (json) {
      nlohmann::json out{{"kind", "bucketed"},
                         {"id", id},
                         {"epoch", epoch},
                         {"time", shardkit::FormatUnixMsUtc(parts.unix_ms)},
                         {"unix_ms", parts.unix_ms},
                         {"bucket", parts.bucket},
                         {"worker", parts.worker_id},
                         {"sequence", parts.sequence}};
      if (shard) out["shard"] = *shard;
      fmt::print("{}\n", out.dump(2));
      return;
    }
    fmt::print("id:       {}\n", id);
    fmt::print("layout:   bucketed (41 bits ms | 8 worker | 8 sequence | 6 bucket), epoch {}\n", epoch);
    fmt::print("time:     {}\n", shardkit::FormatUnixMsUtc(parts.unix_ms));
    fmt::print("unix_ms:  {}\n", parts.unix_ms);
    fmt::print("bucket:   {}\n", parts.bucket);
    if (shard) fmt::print("shard:    {} (even split over {} shards)\n", *shard, o.shards);
    fmt::print("worker:   {}\n", parts.worker_id);
    fmt::print("sequence: {}\n", parts.sequence);
    return;
  }
  const auto parts = shardkit::DecodeSnowflake(id, o.epoch_ms);
  if (json) {
    nlohmann::json out{{"kind", "snowflake"},
                       {"id", id},
                       {"epoch", epoch},
                       {"time", shardkit::FormatUnixMsUtc(parts.unix_ms)},
                       {"unix_ms", parts.unix_ms},
                       {"worker", parts.worker_id},
                       {"sequence", parts.sequence}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("id:       {}\n", id);
  fmt::print("layout:   snowflake (41 bits ms | 10 worker | 12 sequence), epoch {}\n", epoch);
  fmt::print("time:     {}\n", shardkit::FormatUnixMsUtc(parts.unix_ms));
  fmt::print("unix_ms:  {}\n", parts.unix_ms);
  fmt::print("worker:   {}\n", parts.worker_id);
  fmt::print("sequence: {}\n", parts.sequence);
}

void AddCountOption(CLI::App* command, int& count) {
  command->add_option("-n,--count", count, "how many IDs to print, one a line")->check(CLI::Range(1, kMaxCount));
}

void AddEpochOption(CLI::App* command, std::int64_t& epoch_ms) {
  command
      ->add_option("--epoch-ms", epoch_ms,
                   fmt::format("the ID epoch in Unix milliseconds (default {} = {})", shardkit::kDefaultIdEpochUnixMs,
                               shardkit::FormatUnixMsUtc(shardkit::kDefaultIdEpochUnixMs)))
      ->check(CLI::NonNegativeNumber);
}

}  // namespace

void AddIdCommands(CLI::App& app) {
  CLI::App* root = &app;
  auto* id = app.add_subcommand("id", "generate and decode global IDs (UUIDv7, Snowflake, bucketed)");
  id->require_subcommand(1);

  auto* uuid = id->add_subcommand("uuidv7", "print new UUIDv7s (RFC 9562), one a line");
  auto uuid_options = std::make_shared<GenerateOptions>();
  AddCountOption(uuid, uuid_options->count);
  uuid->final_callback([root, uuid_options] {
    shardkit::Uuidv7Generator generator;
    PrintIds(uuid_options->count, RootWantsJson(root), [&generator] { return generator.Next().ToString(); });
  });

  auto* snowflake = id->add_subcommand("snowflake", "print new 64-bit Snowflake IDs, one a line");
  auto snowflake_options = std::make_shared<GenerateOptions>();
  AddCountOption(snowflake, snowflake_options->count);
  snowflake
      ->add_option("--worker", snowflake_options->worker,
                   "worker id 0..1023 (default 0); services claim theirs from the worker-id lease table")
      ->check(CLI::Range(0, shardkit::SnowflakeGenerator::kMaxWorkerId));
  AddEpochOption(snowflake, snowflake_options->epoch_ms);
  snowflake->final_callback([root, snowflake_options] {
    shardkit::SnowflakeOptions options;
    options.epoch_unix_ms = snowflake_options->epoch_ms;
    shardkit::SnowflakeGenerator generator{snowflake_options->worker, options};
    PrintIds(snowflake_options->count, RootWantsJson(root), [&generator] { return generator.Next(); });
  });

  auto* bucketed = id->add_subcommand("bucketed", "print new 64-bit IDs that carry a customer's bucket");
  auto bucketed_options = std::make_shared<GenerateOptions>();
  AddCountOption(bucketed, bucketed_options->count);
  auto* customer = bucketed->add_option("--customer", bucketed_options->customer,
                                        "the owning customer id (the bucket is BucketOf(customer))");
  auto* bucket = bucketed->add_option("--bucket", bucketed_options->bucket, "the bucket 0..63 itself")
                     ->check(CLI::Range(0, shardkit::kBucketCount - 1));
  customer->excludes(bucket);
  bucketed
      ->add_option("--worker", bucketed_options->worker,
                   "worker id 0..255 (default 0); services claim theirs from the worker-id lease table")
      ->check(CLI::Range(0, shardkit::BucketedIdGenerator::kMaxWorkerId));
  AddEpochOption(bucketed, bucketed_options->epoch_ms);
  bucketed->final_callback([root, bucketed_options] {
    if (!bucketed_options->customer && !bucketed_options->bucket) {
      throw CLI::ValidationError("--customer", "give the owning customer (--customer C) or a bucket (--bucket B)");
    }
    const shardkit::BucketId b = bucketed_options->customer
                                     ? shardkit::BucketOf(shardkit::CustomerId{*bucketed_options->customer})
                                     : shardkit::BucketId{*bucketed_options->bucket};
    shardkit::SnowflakeOptions options;
    options.epoch_unix_ms = bucketed_options->epoch_ms;
    shardkit::BucketedIdGenerator generator{bucketed_options->worker, options};
    PrintIds(bucketed_options->count, RootWantsJson(root), [&generator, b] { return generator.Next(b); });
  });

  auto* decode = id->add_subcommand(
      "decode",
      "print the parts of an ID: a UUID, or a 64-bit Snowflake/bucketed ID (time, worker or bucket, sequence)");
  auto decode_options = std::make_shared<DecodeOptions>();
  decode->add_option("id", decode_options->id, "a UUID (any common text form) or a 64-bit integer ID")->required();
  decode->add_option("--layout", decode_options->layout, "how to read an integer ID (default snowflake)")
      ->check(CLI::IsMember({"snowflake", "bucketed"}));
  AddEpochOption(decode, decode_options->epoch_ms);
  decode
      ->add_option("--shards", decode_options->shards,
                   "with --layout bucketed: also print the shard under an even split over N shards")
      ->check(CLI::Range(1, shardkit::kBucketCount));
  decode->add_flag("--json", decode_options->json, "print the parts as JSON");
  decode->final_callback([root, decode_options] {
    const bool json = decode_options->json || RootWantsJson(root);
    if (LooksLikeInteger(decode_options->id)) {
      DecodeInteger(*decode_options, json);
    } else {
      DecodeUuid(decode_options->id, json);
    }
  });
}
