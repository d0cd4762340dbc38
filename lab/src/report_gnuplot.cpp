// The report's charts through gnuplot (report.hpp): one script for every
// chart, run once in a temporary directory, each chart's SVG read back.
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>
#include <system_error>

#include "report.hpp"
#include "shardkit/errors.hpp"

namespace shardkit::lab {
namespace {

constexpr const char* kInstallHint =
    "the lab's report draws its charts with gnuplot's SVG terminal: install Debian's gnuplot-nox "
    "(apt-get install gnuplot-nox; scripts/bootstrap installs it)";

std::optional<std::filesystem::path> FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs{path != nullptr ? path : "/usr/bin:/bin"};
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / program;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
  }
  return std::nullopt;
}

// A directory of our own under the system's temporary directory, removed
// when it goes out of scope.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "shardkit-report-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw Error(fmt::format("report: cannot create a temporary directory like {}: {}", pattern,
                              std::error_code(errno, std::generic_category()).message()));
    }
    path_ = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  [[nodiscard]] const std::filesystem::path& Path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary};
  out << text;
  if (!out) throw Error(fmt::format("report: cannot write {}", path.string()));
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The <svg> element alone, its ids (and the references to them) prefixed so
// that several charts can share one page.
std::string InlineSvg(const std::string& svg, const std::string& prefix, const std::string& title) {
  const auto start = svg.find("<svg");
  if (start == std::string::npos) return {};
  std::string out = svg.substr(start);
  std::string escaped;
  for (const char c : title) {
    escaped += c == '<'   ? std::string("&lt;")
               : c == '>' ? std::string("&gt;")
               : c == '&' ? std::string("&amp;")
                          : std::string(1, c);
  }
  // The tooltip and the accessible name: the chart's title, not "Gnuplot".
  if (const auto t = out.find("<title>Gnuplot</title>"); t != std::string::npos) {
    out.replace(t, std::string_view("<title>Gnuplot</title>").size(), "<title>" + escaped + "</title>");
  }
  out = std::regex_replace(out, std::regex(R"re(\bid=(["']))re"), "id=$1" + prefix + "-");
  out = std::regex_replace(out, std::regex(R"re(href=(["'])#)re"), "href=$1#" + prefix + "-");
  out = std::regex_replace(out, std::regex(R"re(url\(#)re"), "url(#" + prefix + "-");
  return out;
}

}  // namespace

const Json& Field(const Json& object, const char* key) {
  static const Json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

std::string GnuplotQuote(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

std::string DataCell(const std::string& text) {
  if (text.empty()) return "-";
  std::string out = text;
  for (char& c : out) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

std::string NumberCell(const Json& value) {
  return value.is_number() ? NumberCell(value.get<double>()) : "-";
}

std::string NumberCell(double value) {
  return fmt::format("{:.10g}", value);
}

std::string DataFile(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) out += (i == 0 ? "" : "\t") + DataCell(row[i]);
    out += '\n';
  }
  return out;
}

void RequireGnuplot() {
  if (!FindOnPath("gnuplot")) throw Error(fmt::format("gnuplot is not installed: {}", kInstallHint));
}

std::vector<std::string> RenderCharts(const std::vector<Chart>& charts) {
  if (charts.empty()) return {};
  RequireGnuplot();
  const auto gnuplot = FindOnPath("gnuplot");
  ScratchDirectory dir;
  std::string script;
  for (const Chart& chart : charts) {
    for (const auto& [name, contents] : chart.data) WriteFile(dir.Path() / name, contents);
    script += fmt::format(
        "reset\n"
        "set terminal svg size {},{} dynamic noenhanced font 'sans,12' linewidth 1.2 background rgb 'white'\n"
        "set output {}\n"
        "set datafile separator '\\t'\n"
        "set datafile missing '-'\n"
        "set border lc rgb '#555555'\n"
        "set grid ytics lc rgb '#dddddd' lt 1\n"
        "set key noopaque box lc rgb '#bbbbbb'\n"
        "set linetype 1 lc rgb '#1f77b4'\n"
        "set linetype 2 lc rgb '#ff7f0e'\n"
        "set linetype 3 lc rgb '#2ca02c'\n"
        "set linetype 4 lc rgb '#d62728'\n"
        "set linetype 5 lc rgb '#9467bd'\n"
        "set linetype 6 lc rgb '#8c564b'\n"
        "set linetype 7 lc rgb '#e377c2'\n"
        "set title {}\n"
        "{}\n"
        "unset output\n",
        chart.width, chart.height, GnuplotQuote(chart.id + ".svg"), GnuplotQuote(chart.title), chart.script);
  }
  WriteFile(dir.Path() / "charts.gp", script);
  const std::string command =
      fmt::format("cd '{}' && '{}' charts.gp > gnuplot.log 2>&1", dir.Path().string(), gnuplot->string());
  const int status = std::system(command.c_str());
  if (status != 0) {
    throw Error(fmt::format("report: gnuplot failed (status {}) drawing the charts:\n{}", status,
                            ReadFile(dir.Path() / "gnuplot.log")));
  }
  std::vector<std::string> out;
  for (const Chart& chart : charts) {
    std::string svg = InlineSvg(ReadFile(dir.Path() / (chart.id + ".svg")), chart.id, chart.title);
    if (svg.empty()) throw Error(fmt::format("report: gnuplot wrote no SVG for the chart {}", chart.id));
    out.push_back(std::move(svg));
  }
  return out;
}

}  // namespace shardkit::lab
