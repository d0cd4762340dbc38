// The report's page (report.hpp): a header with the run and its totals, then
// per demo its charts, its checks and its key figures; one file, no links out.
#include <fmt/format.h>

#include <fstream>

#include "report.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::lab {
namespace {

constexpr const char* kStyle = R"css(
body { font-family: sans-serif; margin: 0 auto; max-width: 1000px; padding: 0 1.5em 3em; color: #222; }
header { border-bottom: 2px solid #ccc; margin-bottom: 1em; }
h1 { margin-bottom: 0.2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
nav a { margin-right: 0.8em; white-space: nowrap; }
.verdict { font-weight: bold; }
.pass { color: #17803a; }
.fail { color: #c0262d; }
figure.chart { margin: 1.2em 0; }
figure.chart svg { width: 100%; height: auto; display: block; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
details { margin: 0.6em 0; }
)css";

// Sets data-charts and data-charts-visible on <body> and reports, on the
// console, each chart that has no visible size or nothing drawn: the
// browser test reads both.
constexpr const char* kSelfCheck = R"js(
(function () {
  var bad = [];
  var charts = document.querySelectorAll('figure.chart');
  charts.forEach(function (f) {
    var svg = f.querySelector('svg');
    var box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
    var drawn = svg ? svg.querySelectorAll('path, rect, polygon, polyline, line, text').length : 0;
    if (!(box.width > 0 && box.height > 0 && drawn > 0)) bad.push(f.id);
  });
  document.body.setAttribute('data-charts', String(charts.length));
  document.body.setAttribute('data-charts-visible', String(charts.length - bad.length));
  if (bad.length) console.error('charts not visible: ' + bad.join(' '));
})();
)js";

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatScalar(const Json& v) {
  if (v.is_null()) return "?";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer()) return Thousands(v.get<std::int64_t>());
  if (v.is_number_unsigned()) return Thousands(static_cast<std::int64_t>(v.get<std::uint64_t>()));
  if (v.is_number()) return fmt::format("{:.6g}", v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// Scalars of the figures and of their objects one level down ("timing.tput_ms"),
// short strings only: the plans and lists are in the charts or the JSON.
void KeyFigures(const Json& figures, const std::string& prefix, int depth,
                std::vector<std::pair<std::string, std::string>>& out) {
  for (const auto& [key, value] : figures.items()) {
    if (depth == 0 && (key == "checks" || key == "ok")) continue;
    if (out.size() >= 40) return;
    std::string name = key;
    if (!prefix.empty()) name.insert(0, prefix + ".");
    if (value.is_object() && depth < 1) {
      KeyFigures(value, name, depth + 1, out);
    } else if (value.is_primitive() && !value.is_null()) {
      const std::string text = FormatScalar(value);
      if (text.size() <= 120) out.emplace_back(name, text);
    }
  }
}

struct Totals {
  int passed = 0;
  int failed = 0;
};

Totals CountChecks(const Json& demo) {
  Totals t;
  for (const Json& c : Field(demo, "checks")) (c.value("ok", false) ? t.passed : t.failed) += 1;
  return t;
}

std::string Section(const std::string& name, const Json& demo, const std::vector<Chart>& charts,
                    const std::vector<std::string>& svgs) {
  const Totals t = CountChecks(demo);
  const std::string title = *DemoTitle(name) != '\0' ? DemoTitle(name) : name;
  std::string out = fmt::format("<section class=\"demo\" id=\"demo-{}\">\n<h2>{}</h2>\n", Escape(name), Escape(title));
  if (t.passed + t.failed == 0) {
    out += "<p class=\"verdict\">no checks</p>\n";
  } else {
    out += fmt::format("<p class=\"verdict {}\">{} of {} checks passed against the reference{}</p>\n",
                       t.failed == 0 ? "pass" : "fail", t.passed, t.passed + t.failed,
                       t.failed == 0 ? "" : fmt::format(", {} FAILED", t.failed));
  }
  if (demo.contains("error"))
    out += fmt::format("<p class=\"fail\">error: {}</p>\n", Escape(FormatScalar(demo["error"])));
  for (std::size_t i = 0; i < charts.size(); ++i) {
    // The title is drawn in the chart; the label names the figure for screen readers.
    out += fmt::format("<figure class=\"chart\" id=\"chart-{}\" role=\"img\" aria-label=\"{}\">\n{}\n</figure>\n",
                       Escape(charts[i].id), Escape(charts[i].title), svgs[i]);
  }
  const Json& checks = Field(demo, "checks");
  if (!checks.empty()) {
    out += fmt::format("<details{}><summary>checks ({})</summary>\n<table class=\"checks\">\n", t.failed ? " open" : "",
                       checks.size());
    out += "<tr><th>check</th><th>result</th><th>detail</th></tr>\n";
    for (const Json& c : checks) {
      const bool ok = c.value("ok", false);
      out += fmt::format("<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>\n",
                         Escape(c.value("name", std::string())), ok ? "pass" : "fail", ok ? "passed" : "FAILED",
                         Escape(c.value("detail", std::string())));
    }
    out += "</table>\n</details>\n";
  }
  std::vector<std::pair<std::string, std::string>> figures;
  KeyFigures(demo, "", 0, figures);
  if (!figures.empty()) {
    out += "<details><summary>key figures</summary>\n<table class=\"figures\">\n";
    for (const auto& [key, value] : figures) {
      out += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td></tr>\n", Escape(key), Escape(value));
    }
    out += "</table>\n</details>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::vector<Chart> ChartsFor(const std::string& demo, const Json& figures) {
  if (demo == "shard-key") return ShardKeyCharts(figures);
  if (demo == "top10") return Top10Charts(figures);
  if (demo == "category-avg") return CategoryAvgCharts(figures);
  if (demo == "percentiles") return PercentilesCharts(figures);
  if (demo == "third-shard") return ThirdShardCharts(figures);
  if (demo == "rebalance") return RebalanceCharts(figures);
  if (demo == "workers") return WorkersCharts(figures);
  if (demo == "replicas") return ReplicasCharts(figures);
  return {};
}

std::string ReportHtml(const Json& doc) {
  const Json& demos = Field(doc, "demos");
  // Every chart of the page in one gnuplot run.
  std::vector<Chart> charts;
  std::vector<std::size_t> first_chart;
  for (const auto& [name, demo] : demos.items()) {
    first_chart.push_back(charts.size());
    for (Chart& c : ChartsFor(name, demo)) charts.push_back(std::move(c));
  }
  const std::vector<std::string> svgs = RenderCharts(charts);

  Totals total;
  std::string nav;
  for (const auto& [name, demo] : demos.items()) {
    const Totals t = CountChecks(demo);
    total.passed += t.passed;
    total.failed += t.failed;
    nav += fmt::format("<a href=\"#demo-{0}\" class=\"{1}\">{0}</a>", Escape(name), t.failed ? "fail" : "pass");
  }
  const Json& lab = Field(doc, "lab");
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      "<title>shardkit: the Bookstore lab</title>\n<style>{}</style>\n</head>\n<body>\n<header>\n"
      "<h1>The Bookstore lab</h1>\n"
      "<p>{} shards, scale {}, seed {}; \"now\" is {}, the last 30 days start {}. Every answer is checked against "
      "the unsharded reference server.</p>\n"
      "<p class=\"verdict {}\">{} checks passed, {} failed</p>\n<nav>{}</nav>\n</header>\n",
      kStyle, FormatScalar(Field(lab, "shards")), FormatScalar(Field(lab, "scale")), FormatScalar(Field(lab, "seed")),
      Escape(FormatScalar(Field(lab, "lab_now"))), Escape(FormatScalar(Field(lab, "window_start"))),
      total.failed == 0 ? "pass" : "fail", total.passed, total.failed, nav);
  std::size_t i = 0;
  for (const auto& [name, demo] : demos.items()) {
    const std::size_t begin = first_chart[i];
    const std::size_t end = i + 1 < first_chart.size() ? first_chart[i + 1] : charts.size();
    out += Section(name, demo,
                   std::vector<Chart>(charts.begin() + static_cast<std::ptrdiff_t>(begin),
                                      charts.begin() + static_cast<std::ptrdiff_t>(end)),
                   std::vector<std::string>(svgs.begin() + static_cast<std::ptrdiff_t>(begin),
                                            svgs.begin() + static_cast<std::ptrdiff_t>(end)));
    ++i;
  }
  return out + fmt::format("<script>{}</script>\n</body>\n</html>\n", kSelfCheck);
}

std::filesystem::path WriteReport(const Json& doc, const std::filesystem::path& dir) {
  const std::string html = ReportHtml(doc);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("report: cannot create {}: {}", dir.string(), ec.message()));
  std::filesystem::path page = dir / "index.html";
  std::ofstream out{page, std::ios::binary};
  out << html;
  out.close();
  if (!out) throw Error(fmt::format("report: cannot write {}", page.string()));
  return page;
}

Json MergeLabDocuments(const std::vector<Json>& docs) {
  Json out = Json::object();
  out["demos"] = Json::object();
  for (const Json& doc : docs) {
    for (const char* key : {"lab", "data"}) {
      if (!out.contains(key) && doc.contains(key)) out[key] = doc[key];
    }
    for (const auto& [name, demo] : Field(doc, "demos").items()) out["demos"][name] = demo;
  }
  return out;
}

}  // namespace shardkit::lab
