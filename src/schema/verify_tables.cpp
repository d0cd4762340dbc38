// Verify's checks of the tables (verify_checks.hpp): present everywhere,
// one definition, reference tables identical.
#include "schema/verify_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "pg/server_message.hpp"
#include "schema/verify_samples.hpp"

namespace shardkit::detail {
namespace {

// The keys of `s`'s copy of a reference table that differ from the
// baseline's (`baseline_rows`, read on first use): how many, and the first
// few as samples.
std::int64_t DiffReferenceTable(const VerifyRun& run, const ScannedServer& baseline, const ScannedServer& s,
                                const std::string& table, const ReferenceTableSum& want,
                                std::optional<std::map<std::vector<std::string>, std::int64_t>>& baseline_rows,
                                std::vector<std::string>& samples) {
  std::int64_t differing = 0;
  try {
    if (!baseline_rows) baseline_rows = RowHashes(*baseline.connection, table, want.key);
    const auto rows = RowHashes(*s.connection, table, want.key);
    auto note = [&](const std::vector<std::string>& key, const char* what) {
      ++differing;
      if (static_cast<int>(samples.size()) < run.options.max_samples) {
        samples.push_back(fmt::format(
            "{} {}", DescribeKey(want.key.empty() ? std::vector<std::string>{"row"} : want.key, key), what));
      }
    };
    for (const auto& [key, hash] : *baseline_rows) {
      const auto it = rows.find(key);
      if (it == rows.end()) {
        note(key, "missing");
      } else if (it->second != hash) {
        note(key, "differs");
      }
    }
    for (const auto& [key, hash] : rows) {
      if (!baseline_rows->contains(key)) note(key, "extra");
    }
  } catch (const std::exception& e) {
    samples.push_back("(no sample: " + ErrorText(e) + ")");
  }
  return differing;
}

}  // namespace

void CheckShardedTablesPresent(VerifyRun& run) {
  std::set<std::string> sharded;
  for (const auto& s : run.servers) {
    if (s.shard && s.connection) sharded.insert(s.sharded_tables.begin(), s.sharded_tables.end());
  }
  run.report.sharded_tables.assign(sharded.begin(), sharded.end());
  for (const auto& s : run.servers) {
    if (!s.connection || (!s.shard && !run.count_reference)) continue;
    for (const auto& table : run.report.sharded_tables) {
      if (!s.shard && !run.Mirrored(table)) continue;
      if (std::find(s.sharded_tables.begin(), s.sharded_tables.end(), table) == s.sharded_tables.end()) {
        run.Add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
                fmt::format("{}: sharded table {} is missing ({})", s.name, table,
                            s.shard ? "other shards have it" : "it mirrors every shard's rows"));
      }
    }
  }
}

void CheckTableDefinitions(VerifyRun& run) {
  std::set<std::string> tables(run.report.sharded_tables.begin(), run.report.sharded_tables.end());
  tables.insert(run.report.reference_tables.begin(), run.report.reference_tables.end());
  for (const auto& table : tables) {
    const ScannedServer* baseline = nullptr;
    for (const auto& candidate : run.servers) {
      if (!candidate.connection || !candidate.columns.contains(table)) continue;
      if (baseline == nullptr || !candidate.shard) baseline = &candidate;  // the reference wins
    }
    if (baseline == nullptr) continue;
    const auto& want = baseline->columns.at(table);
    for (const auto& s : run.servers) {
      if (&s == baseline || !s.connection || !s.columns.contains(table)) continue;
      const auto& have = s.columns.at(table);
      if (have == want) continue;
      std::string first;
      for (std::size_t i = 0; i < std::max(have.size(), want.size()) && first.empty(); ++i) {
        const std::string h = i < have.size() ? have[i] : "(none)";
        const std::string w = i < want.size() ? want[i] : "(none)";
        if (h != w) first = fmt::format("column {}: {} here, {} on {}", i + 1, h, w, baseline->name);
      }
      run.Add(FindingKind::kTableDefinition, s.name, table, std::nullopt, 0, "",
              fmt::format("{} {}: the table's columns differ from {}'s ({})", s.name, table, baseline->name, first));
    }
  }
}

void CheckReferenceTables(VerifyRun& run) {
  for (const auto& table : run.report.reference_tables) {
    const ScannedServer* baseline = nullptr;
    if (run.config.reference_dsn && run.servers.back().connection && run.servers.back().reference_sums[table].present) {
      baseline = &run.servers.back();
    }
    for (const auto& s : run.servers) {
      if (!s.connection) continue;
      if (!s.reference_sums.at(table).present) {
        run.Add(FindingKind::kMissingTable, s.name, table, std::nullopt, 0, "",
                fmt::format("{}: reference table {} is missing", s.name, table));
      } else if (baseline == nullptr && s.shard) {
        baseline = &s;
      }
    }
    if (baseline == nullptr) continue;
    const ReferenceTableSum& want = baseline->reference_sums.at(table);
    std::optional<std::map<std::vector<std::string>, std::int64_t>> baseline_rows;
    for (const auto& s : run.servers) {
      if (&s == baseline || !s.shard || !s.connection) continue;
      const ReferenceTableSum& have = s.reference_sums.at(table);
      if (!have.present || (have.rows == want.rows && have.hash_sum == want.hash_sum)) continue;
      std::vector<std::string> samples;
      const std::int64_t differing = DiffReferenceTable(run, *baseline, s, table, want, baseline_rows, samples);
      std::string sample_text;
      for (const auto& sample : samples) sample_text += (sample_text.empty() ? "" : "; ") + sample;
      run.Add(FindingKind::kReferenceDiffers, s.name, table, std::nullopt, differing,
              samples.empty() ? "" : samples.front(),
              fmt::format("{} {}: {} from the {} copy ({} rows there, {} here), e.g. {}", s.name, table,
                          RowsDo(differing, "differs", "differ"),
                          baseline->shard ? baseline->name + "'s" : std::string("reference server's"), want.rows,
                          have.rows, sample_text));
    }
  }
}

}  // namespace shardkit::detail
