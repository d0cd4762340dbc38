// Demo 4: "the 10 best-selling books of the last 30 days" over shards.
// Each shard's own top 10, merged, is the wrong list; the exact list comes
// from every shard's per-book partial sums, or, with far fewer rows, TPUT;
// and the naive statement itself, passed to Cluster::Execute as it is,
// which recognises the shape and answers it by exact top-k too.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>

#include "dataset.hpp"
#include "demos.hpp"
#include "shardkit/cluster.hpp"
#include "shardkit/queries/topk.hpp"
#include "topk_shortcut.hpp"

namespace shardkit::lab {
namespace {

constexpr std::size_t kTop = 10;
// Rounds of the time comparison (the three exact methods, one after another).
constexpr int kTimingRounds = 5;
constexpr const char* kFrom =
    "order_items i JOIN orders o ON o.customer_id = i.customer_id AND o.order_id = i.order_id";
constexpr const char* kWhere = "o.ordered_at >= $1::timestamptz";

using Entry = TopKEntry<std::int64_t>;
using Result = TopKResult<std::int64_t>;
using Shortcut = ShortcutTopKResult<std::int64_t>;

std::int64_t BookOf(const Entry& e) {
  return std::get<std::int64_t>(e.key);
}

Json ListJson(const std::vector<Entry>& items) {
  Json list = Json::array();
  for (const auto& e : items) list.push_back({{"book_id", BookOf(e)}, {"sold", e.value}});
  return list;
}

// The exact methods' results and the shortcut's share these fields.
template <class R>
Json MethodJson(const R& r, const char* method, bool exact, const std::vector<Entry>& reference) {
  Json phases = Json::array();
  for (const auto& p : r.phases) {
    phases.push_back(
        {{"name", p.name}, {"rows", p.rows}, {"shards_asked", p.shards_asked}, {"ms", MsValue(p.elapsed)}});
  }
  Json j{{"method", method},         {"exact", exact},
         {"rows", r.total_rows},     {"bytes", r.total_bytes},
         {"ms", MsValue(r.elapsed)}, {"phases", phases},
         {"top", ListJson(r.items)}, {"equals_reference", r.items == reference}};
  return j;
}

Json MethodJson(const Result& r, const std::vector<Entry>& reference) {
  Json j = MethodJson(r, TopKMethodName(r.method), true, reference);
  if (r.tau1) j["tau1"] = *r.tau1;
  if (r.tau2) j["tau2"] = *r.tau2;
  if (r.method == TopKMethod::kTput) {
    j["candidates"] = r.candidates;
    j["fetched_keys"] = r.fetched_keys;
  }
  return j;
}

// kAuto's decision record: both predictions and the inputs they came from.
Json EstimateJson(const TopKEstimate& e) {
  return {{"after_phase1", e.after_phase1},
          {"predicted_tput_ms", e.tput_ms},
          {"predicted_all_partials_ms", e.all_partials_ms},
          {"chosen", e.choice == TopKMethod::kTput ? "TPUT" : "all partials"},
          {"groups", e.groups},
          {"phase2_rows", e.phase2_rows},
          {"all_partials_bytes", e.all_partials_bytes},
          {"tput_bytes", e.tput_bytes},
          {"tput_round_trips", e.tput_round_trips},
          {"all_partials_round_trips", e.all_partials_round_trips},
          {"round_trip_ms", e.round_trip_ms},
          {"megabytes_per_s", e.megabytes_per_s},
          {"measured_links", e.measured_links}};
}

std::size_t Overlap(const std::vector<Entry>& a, const std::vector<Entry>& b) {
  std::set<std::int64_t> books;
  for (const auto& e : a) books.insert(BookOf(e));
  std::size_t n = 0;
  for (const auto& e : b) n += books.contains(BookOf(e)) ? 1 : 0;
  return n;
}

std::string Describe(const std::vector<Entry>& items) {
  std::string s;
  for (const auto& e : items) s += fmt::format("{}{}:{}", s.empty() ? "" : " ", BookOf(e), e.value);
  return s;
}

}  // namespace

DemoResult RunTop10(Lab& lab) {
  DemoResult r;
  r.name = "top10";
  TopKQuery q;
  q.from = kFrom;
  q.key = "i.book_id";
  q.measure = "i.quantity";
  q.where = kWhere;
  q.params = {WindowStartParam()};
  q.k = kTop;

  auto remember = [&](const std::vector<TopKPhaseStats>& phases, const char* label) {
    for (const auto& phase : phases) {
      Lab::ScatterRecord rec;
      rec.label = fmt::format("{}: {}", label, phase.name);
      rec.fanout = static_cast<std::size_t>(phase.shards_asked);
      rec.rows = phase.rows;
      rec.elapsed = phase.elapsed;
      lab.Remember(std::move(rec));
    }
  };
  auto run = [&](TopKMethod method, const char* label) {
    q.label = label;
    Result result = TopKBySum(lab.Scatter(), q, method);
    remember(result.phases, label);
    return result;
  };
  const Result exact = run(TopKMethod::kAllPartials, "top10 exact");
  q.label = "top10 shortcut";
  SqlTopKSource shortcut_source(lab.Scatter(), q);
  const Shortcut shortcut = PerShardShortcutTopK(shortcut_source, kTop);
  remember(shortcut.phases, "top10 shortcut");
  const Result tput = run(TopKMethod::kTput, "top10 TPUT");
  const Result automatic = run(TopKMethod::kAuto, "top10 auto");

  // The single runs above give the answers; their times depend on which ran
  // first (a fresh connection, cold caches). The time comparison: the
  // three exact methods in turn, for a few rounds, medians.
  std::vector<double> all_ms, tput_ms, auto_ms, tput_ratio, auto_ratio;
  std::optional<Result> timed_auto;  // the last round's: its estimate came from the run before
  for (int round = 0; round < kTimingRounds; ++round) {
    q.label = "top10 timing";
    const double a = MsValue(TopKBySum(lab.Scatter(), q, TopKMethod::kAllPartials).elapsed);
    const double t = MsValue(TopKBySum(lab.Scatter(), q, TopKMethod::kTput).elapsed);
    timed_auto = TopKBySum(lab.Scatter(), q, TopKMethod::kAuto);
    const double u = MsValue(timed_auto->elapsed);
    all_ms.push_back(a);
    tput_ms.push_back(t);
    auto_ms.push_back(u);
    if (a > 0) tput_ratio.push_back(t / a);
    if (std::min(a, t) > 0) auto_ratio.push_back(u / std::min(a, t));
  }
  const double auto_to_faster = Median(auto_ms) / std::max(1e-9, std::min(Median(all_ms), Median(tput_ms)));

  // The reference server: one GROUP BY, and the true totals of the
  // shortcut's books.
  pqxx::nontransaction ref{lab.Reference()};
  std::vector<Entry> reference;
  for (const auto& row :
       ref.exec_params(fmt::format("SELECT i.book_id, sum(i.quantity)::bigint AS sold FROM {} WHERE {} "
                                   "GROUP BY i.book_id ORDER BY sold DESC, i.book_id LIMIT {}",
                                   kFrom, kWhere, kTop),
                       WindowStartParam())) {
    reference.push_back({row[0].as<std::int64_t>(), row[1].as<std::int64_t>()});
  }
  std::vector<std::int64_t> shortcut_books;
  for (const auto& e : shortcut.items) shortcut_books.push_back(BookOf(e));
  std::map<std::int64_t, std::int64_t> really;
  std::string books_array = "{";
  for (std::size_t i = 0; i < shortcut_books.size(); ++i)
    books_array += (i ? "," : "") + std::to_string(shortcut_books[i]);
  books_array += "}";
  for (const auto& row : ref.exec_params(fmt::format("SELECT i.book_id, sum(i.quantity)::bigint FROM {} WHERE {} AND "
                                                     "i.book_id = ANY($2::bigint[]) GROUP BY i.book_id",
                                                     kFrom, kWhere),
                                         WindowStartParam(), books_array)) {
    really[row[0].as<std::int64_t>()] = row[1].as<std::int64_t>();
  }

  r.text += fmt::format("exact: {} rows transferred from {} shards, {} ms\n", exact.total_rows, lab.ShardCount(),
                        Ms(exact.elapsed));
  r.text += fmt::format("top-10 per shard: {} rows transferred, {} ms\n", shortcut.total_rows, Ms(shortcut.elapsed));
  r.text += fmt::format("TPUT (exact, 3 phases in one snapshot per shard): {} rows transferred, {} ms\n",
                        tput.total_rows, Ms(tput.elapsed));
  r.text += fmt::format("auto (exact): {}; {} rows transferred, {} ms\n", automatic.choice, automatic.total_rows,
                        Ms(automatic.elapsed));
  r.text += fmt::format(
      "time, median of {} rounds of the three in turn: all partials {:.1f} ms, TPUT {:.1f} ms "
      "({:.2f}x all partials' time), auto {:.1f} ms ({:.2f}x the faster of the two)\n",
      kTimingRounds, Median(all_ms), Median(tput_ms), Median(tput_ratio), Median(auto_ms), auto_to_faster);
  if (timed_auto) {
    r.text += fmt::format("  auto in the timing rounds ran {} by {}\n", TopKMethodName(timed_auto->method),
                          timed_auto->choice);
  }
  for (std::size_t i = 0; i < kTop; ++i) {
    std::string line = fmt::format("  #{:<3}", i + 1);
    if (i < exact.items.size()) {
      line += fmt::format("exact: book {:>5} sold {:>3}", BookOf(exact.items[i]), exact.items[i].value);
    } else {
      line += fmt::format("{:<26}", "exact: -");
    }
    if (i < shortcut.items.size()) {
      const auto book = BookOf(shortcut.items[i]);
      const auto it = really.find(book);
      line += fmt::format(" | shortcut: book {:>5} sold {:>3} (really {})", book, shortcut.items[i].value,
                          it == really.end() ? 0 : it->second);
    } else {
      line += " | shortcut: -";
    }
    if (i < tput.items.size()) {
      line += fmt::format(" | TPUT: book {:>5} sold {:>3}", BookOf(tput.items[i]), tput.items[i].value);
    }
    r.text += line + "\n";
  }
  const std::size_t overlap = Overlap(exact.items, shortcut.items);
  std::size_t wrong_values = 0;
  for (const auto& e : shortcut.items) {
    const auto it = really.find(BookOf(e));
    if (it == really.end() || it->second != e.value) ++wrong_values;
  }
  r.text += fmt::format(
      "shortcut and exact share {} of {} books; {} of the shortcut's 10 sums are short of the book's real total\n",
      overlap, kTop, wrong_values);
  if (tput.tau1 && tput.tau2) {
    std::string phases;
    for (const auto& p : tput.phases)
      phases += fmt::format("{}{}: {} rows, {} ms", phases.empty() ? "" : "; ", p.name, p.rows, Ms(p.elapsed));
    r.text +=
        fmt::format("TPUT: tau1 = {}, tau2 = {}, {} candidates; {}\n", *tput.tau1, *tput.tau2, tput.candidates, phases);
  }
  // The naive statement as an application writes it, through the SQL layer.
  const std::string naive = fmt::format(
      "SELECT i.book_id, sum(i.quantity) AS sold FROM {} WHERE {} GROUP BY i.book_id ORDER BY sold DESC, i.book_id "
      "LIMIT {}",
      kFrom, kWhere, kTop);
  const auto cluster = Cluster::Open(lab.Config());
  const SqlResult plain = cluster->Execute(naive, {WindowStartParam()});
  std::vector<Entry> plain_items;
  for (const auto& row : plain.rows) {
    plain_items.push_back(Entry{static_cast<std::int64_t>(std::stoll(row.at(0).value_or("0"))),
                                static_cast<std::int64_t>(std::stoll(row.at(1).value_or("0")))});
  }
  const bool plain_ok = plain_items == reference;
  const bool plain_topk = plain.plan.merge.starts_with("exact top-k");
  r.text += fmt::format("plain SQL through Cluster::Execute, the statement as it is: {} rows, {}\n", plain.rows.size(),
                        plain_ok ? "= reference" : "DIFFERS from reference");
  r.text += fmt::format("  Execute used {}: {} rows shipped from the shards (all partials: {})\n  {}\n",
                        plain_topk ? "exact top-k" : "the merge of every partial", plain.rows_received,
                        exact.total_rows, plain.plan.Describe());

  const bool exact_ok = exact.items == reference;
  const bool tput_ok = tput.items == reference;
  const bool auto_ok = automatic.items == reference;
  const bool shortcut_differs = shortcut.items != reference;
  r.text += fmt::format("checked against the reference server's GROUP BY: exact {}, TPUT {}, top-10 per shard {}\n",
                        exact_ok ? "= reference" : "DIFFERS from reference",
                        tput_ok ? "= reference" : "DIFFERS from reference",
                        shortcut_differs ? "differs (wrong, as expected)" : "happens to equal it");
  r.Expect("top10.exact_equals_reference", exact_ok,
           fmt::format("exact [{}] vs reference [{}]", Describe(exact.items), Describe(reference)));
  r.Expect("top10.tput_equals_reference", tput_ok,
           fmt::format("TPUT [{}] vs reference [{}]", Describe(tput.items), Describe(reference)));
  r.Expect("top10.auto_equals_reference", auto_ok,
           fmt::format("auto [{}] vs reference [{}]", Describe(automatic.items), Describe(reference)));
  r.Expect("top10.plain_sql_equals_reference", plain_ok,
           fmt::format("Cluster::Execute [{}] vs reference [{}]", Describe(plain_items), Describe(reference)));
  // By top-k; fewer rows than all partials unless its cost model chose them.
  const bool plain_chose_all = plain.plan.merge.find(TopKMethodName(TopKMethod::kAllPartials)) != std::string::npos;
  r.Expect("top10.plain_sql_uses_topk",
           plain_topk &&
               (plain_chose_all ? plain.rows_received == exact.total_rows : plain.rows_received < exact.total_rows),
           fmt::format("Cluster::Execute shipped {} rows, all partials are {} ({})", plain.rows_received,
                       exact.total_rows, plain.plan.merge));
  r.Expect("top10.shortcut_differs", shortcut_differs,
           fmt::format("shortcut [{}] vs reference [{}]", Describe(shortcut.items), Describe(reference)));
  r.Expect("top10.shortcut_rows", shortcut.total_rows <= kTop * static_cast<std::size_t>(lab.ShardCount()),
           fmt::format("{} rows (at most {} per shard)", shortcut.total_rows, kTop));
  r.Expect("top10.tput_transfers_less", tput.total_rows < exact.total_rows,
           fmt::format("TPUT {} rows vs all partials {} rows", tput.total_rows, exact.total_rows));

  Json shortcut_json = MethodJson(shortcut, kShortcutName, false, reference);
  Json really_json = Json::array();
  for (const auto& e : shortcut.items) {
    const auto it = really.find(BookOf(e));
    really_json.push_back({{"book_id", BookOf(e)}, {"sold", e.value}, {"really", it == really.end() ? 0 : it->second}});
  }
  shortcut_json["top"] = really_json;
  r.figures = {
      {"window_start", WindowStartParam()},
      {"plain_sql",
       {{"statement", naive},
        {"plan", plain.plan.Describe()},
        {"exact_topk", plain_topk},
        {"rows_received", plain.rows_received},
        {"top", ListJson(plain_items)},
        {"equals_reference", plain_ok}}},
      {"k", kTop},
      {"exact", MethodJson(exact, reference)},
      {"shortcut", shortcut_json},
      {"tput", MethodJson(tput, reference)},
      {"auto",
       [&] {
         Json j = MethodJson(automatic, reference);
         j["choice"] = automatic.choice;
         j["chosen"] = TopKMethodName(automatic.method);
         if (automatic.groups) j["groups"] = *automatic.groups;
         if (automatic.estimated_phase2_rows) j["estimated_phase2_rows"] = *automatic.estimated_phase2_rows;
         if (automatic.estimate) j["estimate"] = EstimateJson(*automatic.estimate);
         return j;
       }()},
      {"timing",
       {{"rounds", kTimingRounds},
        {"all_partials_ms", Median(all_ms)},
        {"tput_ms", Median(tput_ms)},
        {"auto_ms", Median(auto_ms)},
        // auto_ms / min(all_partials_ms, tput_ms), and the median of the rounds' own ratios
        {"auto_to_faster", auto_to_faster},
        {"auto_to_faster_paired", Median(auto_ratio)},
        {"auto_chosen", timed_auto ? TopKMethodName(timed_auto->method) : ""},
        {"auto_choice", timed_auto ? timed_auto->choice : ""},
        {"auto_estimate", timed_auto && timed_auto->estimate ? EstimateJson(*timed_auto->estimate) : Json(nullptr)}}},
      {"tput_to_all_partials_time", Median(tput_ratio)},  // median of the rounds' ratios
      {"reference", ListJson(reference)},
      {"overlap_shortcut_exact", overlap}};
  return r;
}

}  // namespace shardkit::lab
