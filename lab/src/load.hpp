// load.hpp — putting the generated Bookstore data on the servers with COPY.
//
// Each shard receives the customers, orders and order items of the customers
// whose bucket it owns (BucketShardResolver::ShardFor) and the whole books
// catalogue; the reference server receives everything. One thread per
// server. On each server the old rows are truncated and the new ones copied
// in one transaction, so a failed load leaves the previous data in place.
// A lab_meta table on every server records what was loaded (scale, seed,
// generator version and a load id shared by all servers of one load).
//
//   auto data = GenerateDataset({.scale = 0.01, .seed = 1});
//   LoadReport report = LoadDataset(lab, data, {.progress = ProgressMode::kNone});
//   if (!IsLoaded(lab, data.params)) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dataset.hpp"
#include "lab.hpp"

namespace shardkit::lab {

enum class ProgressMode {
  kAuto,  // a bar when stderr is a terminal, plain lines otherwise
  kBar,
  kLines,
  kNone,
};

struct LoadOptions {
  ProgressMode progress = ProgressMode::kAuto;
};

struct ServerLoad {
  std::string server;  // "shard0", ..., "reference"
  std::int64_t books = 0, customers = 0, orders = 0, order_items = 0;
  std::chrono::microseconds copy_time{0};   // TRUNCATE + COPY + indexes + commit
  std::chrono::microseconds index_time{0};  // of which: rebuilding secondary indexes
  std::chrono::microseconds analyze_time{0};
  [[nodiscard]] std::int64_t Rows() const noexcept { return books + customers + orders + order_items; }
};

struct LoadReport {
  DatasetParams params;
  std::string load_id;
  std::chrono::microseconds generate_time{0};
  std::chrono::microseconds load_time{0};  // all servers, in parallel, incl. ANALYZE
  std::vector<ServerLoad> servers;         // shards in order, then the reference
  [[nodiscard]] std::int64_t Rows() const noexcept;
  [[nodiscard]] double RowsPerSecond() const noexcept;
};

// What lab_meta says on one server (nullopt: no lab data there).
struct LabMeta {
  double scale = 0;
  std::uint64_t seed = 0;
  int generator = 0;
  std::string load_id;
  std::string loaded_at;
};

// Loads `data` everywhere; throws shardkit::Error naming the server on failure.
LoadReport LoadDataset(Lab& lab, const Dataset& data, const LoadOptions& options = {});

// lab_meta of every shard and of the reference (in that order).
[[nodiscard]] std::vector<std::optional<LabMeta>> ReadLabMeta(Lab& lab);
// True if every server holds the same load of exactly these parameters.
[[nodiscard]] bool IsLoaded(Lab& lab, const DatasetParams& params, std::string* why = nullptr);

// Generates and loads the data unless every server already holds exactly
// this load; returns the report if it loaded. `status` says what it found.
std::optional<LoadReport> EnsureLoaded(Lab& lab, const DatasetParams& params, const LoadOptions& options = {},
                                       std::string* status = nullptr);
// Generates (timed) and loads.
LoadReport GenerateAndLoad(Lab& lab, const DatasetParams& params, const LoadOptions& options = {});

// The load's text and figures, as a DemoResult named "load".
[[nodiscard]] DemoResult DescribeLoad(const LoadReport& report);

// COPY through shardkit::CopyWriter vs `psql \copy` of the same rows (the reference's
// orders, into an index-less copy of the orders table on the reference
// server, in a transaction that is rolled back).
// The COPY text file is written to `work_dir`.
struct CopyComparison {
  std::int64_t rows = 0;
  std::chrono::microseconds lab_copy{0};
  std::chrono::microseconds psql_copy{0};      // the psql process, wall time
  std::chrono::microseconds psql_baseline{0};  // the same psql run without \copy
  [[nodiscard]] double LabRowsPerSecond() const noexcept;
  [[nodiscard]] double PsqlRowsPerSecond() const noexcept;  // net of the baseline
};
[[nodiscard]] CopyComparison CompareWithPsql(Lab& lab, const Dataset& data, const std::filesystem::path& work_dir);
[[nodiscard]] DemoResult DescribeCopyComparison(const CopyComparison& comparison);

}  // namespace shardkit::lab
