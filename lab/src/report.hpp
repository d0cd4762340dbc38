// report.hpp — the lab as one self-contained HTML page: a section per demo
// with its checks against the reference, its key figures and its charts,
// drawn by gnuplot's SVG terminal and inlined (viewing it needs no network).
//
//   Json doc = ...;                                  // what `bookstore-lab --json` prints
//   auto page = shardkit::lab::WriteReport(doc, "/tmp/r");   // /tmp/r/index.html
//
// Everything is fed from the demos' JSON figures (DemoResult::ToJson()), so a
// page can also be drawn later from saved documents (`bookstore-lab report`).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lab.hpp"

namespace shardkit::lab {

// One chart for gnuplot: the data files its script reads (name -> contents,
// tab-separated, in the script's directory) and the commands that set it up
// and plot it (the terminal and the output are set for it).
struct Chart {
  Chart(std::string chart_id, std::string chart_title) : id(std::move(chart_id)), title(std::move(chart_title)) {}
  std::string id;     // unique in the page, a valid file and element name: "top10-rows"
  std::string title;  // the figure's caption
  std::vector<std::pair<std::string, std::string>> data;
  std::string script;
  int width = 820;
  int height = 420;
};

// The charts of one demo from its figures; none for a demo without charts
// or without the figures they need (an error section, an older document).
[[nodiscard]] std::vector<Chart> ChartsFor(const std::string& demo, const Json& figures);
// Per demo (report_charts_*.cpp).
[[nodiscard]] std::vector<Chart> ShardKeyCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> Top10Charts(const Json& figures);
[[nodiscard]] std::vector<Chart> CategoryAvgCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> PercentilesCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> ThirdShardCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> RebalanceCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> WorkersCharts(const Json& figures);
[[nodiscard]] std::vector<Chart> ReplicasCharts(const Json& figures);

// object[key], or null (which iterates as empty) if it has none: unlike
// Json::value(key, default) no temporary, so `for (... : Field(j, "a").items())` is safe.
[[nodiscard]] const Json& Field(const Json& object, const char* key);

// Gnuplot's single-quoted string: 'it''s'.
[[nodiscard]] std::string GnuplotQuote(const std::string& text);
// A data file's cell: tabs and newlines become spaces; empty becomes "-"
// (the charts' missing value).
[[nodiscard]] std::string DataCell(const std::string& text);
// A JSON number as a cell ("-" for anything else); a number as a cell.
[[nodiscard]] std::string NumberCell(const Json& value);
[[nodiscard]] std::string NumberCell(double value);
// Rows of cells as a tab-separated data file.
[[nodiscard]] std::string DataFile(const std::vector<std::vector<std::string>>& rows);

// Draws every chart with one gnuplot run in a temporary directory (removed
// afterwards) and returns each chart's <svg> element, in order, without the
// XML prolog and with its ids prefixed by the chart's id (the page inlines
// them side by side). Throws shardkit::Error if gnuplot is not installed
// (naming the package to install) or fails (with its messages).
[[nodiscard]] std::vector<std::string> RenderCharts(const std::vector<Chart>& charts);
// Throws that same error now if gnuplot is not installed (before a long run).
void RequireGnuplot();

// The page for a lab document as `bookstore-lab --json` prints it.
[[nodiscard]] std::string ReportHtml(const Json& doc);
// Writes dir/index.html (creating dir); returns its path.
std::filesystem::path WriteReport(const Json& doc, const std::filesystem::path& dir);
// The demos of several documents in one (a later document's demo replaces
// an earlier one's); "lab" and "data" from the first that has them.
[[nodiscard]] Json MergeLabDocuments(const std::vector<Json>& docs);

}  // namespace shardkit::lab
