// The lab's report end to end: every demo (the rebalance too) at a small
// scale on scratch servers, the page written, then opened in headless
// Chromium: a screenshot, the rendered DOM and the browser's console.
// Skipped (with the reason) only if chromium is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "dataset.hpp"
#include "demos.hpp"
#include "lab.hpp"
#include "load.hpp"
#include "report.hpp"
#include "support/test_cluster.hpp"

namespace shardkit::lab {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs{path != nullptr ? path : "/usr/bin:/bin"};
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string FailedChecks(const Json& demos) {
  std::string out;
  for (const auto& [name, demo] : demos.items()) {
    for (const Json& c : demo["checks"]) {
      if (!c["ok"].get<bool>()) out += "  " + c["name"].get<std::string>() + ": " + c["detail"].dump() + "\n";
    }
  }
  return out;
}

// Every demo of `all` on two shards, and the rebalance on two loaded shards
// of three: the documents `lab/run --report` draws its page from.
Json RunEveryDemo() {
  Json doc = Json::object();
  {
    test::ScratchCluster cluster{"lab_report_pgtest"};
    Lab lab{cluster.Config()};
    (void)LoadDataset(lab, GenerateDataset({0.01, 1}), {ProgressMode::kNone});
    doc["lab"] = {{"shards", lab.ShardCount()},
                  {"scale", 0.01},
                  {"seed", 1},
                  {"lab_now", FormatTimestamp(kLabNow)},
                  {"window_start", FormatTimestamp(kWindowStart)}};
    for (const auto& name : DemoNames()) {
      DemoResult r;
      if (name == "workers") {
        WorkersDemoOptions options;
        options.executable = BOOKSTORE_LAB_EXE;
        options.hot_burst_orders = 300;
        r = RunWorkers(lab, options);
      } else {
        r = DemoByName(name)(lab);
      }
      doc["demos"][name] = r.ToJson();
    }
  }
  test::ScratchCluster cluster{"lab_report_rebalance_pgtest",
                               test::ScratchOptions().Shards(3).Directory(test::TwoOfThree())};
  Lab lab{cluster.Config()};
  (void)LoadDataset(lab, GenerateDataset({0.002, 1}), {ProgressMode::kNone});
  RebalanceDemoOptions options;
  options.writers = 2;
  options.readers = 2;
  options.orders_per_second_per_writer = 40;
  options.cleanup_grace = std::chrono::milliseconds(0);
  options.settle = std::chrono::milliseconds(1000);
  options.max_moves = 2;
  doc["demos"]["rebalance"] = RunRebalance(lab, options).ToJson();
  return doc;
}

struct Page {
  fs::path dir;
  std::string html;
  std::vector<std::string> chart_ids;
};

class LabReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    doc_ = std::make_unique<Json>(RunEveryDemo());
    page_ = std::make_unique<Page>();
    page_->dir = fs::temp_directory_path() / ("lab_report_pgtest_" + std::to_string(::getpid()));
    fs::remove_all(page_->dir);
    page_->html = ReadFile(WriteReport(*doc_, page_->dir));
    for (const auto& [name, demo] : (*doc_)["demos"].items()) {
      for (const Chart& c : ChartsFor(name, demo)) page_->chart_ids.push_back(c.id);
    }
  }
  static void TearDownTestSuite() {
    if (page_ && !::testing::Test::HasFailure()) fs::remove_all(page_->dir);
    page_.reset();
    doc_.reset();
  }
  static std::unique_ptr<Json> doc_;
  static std::unique_ptr<Page> page_;
};

std::unique_ptr<Json> LabReport::doc_;
std::unique_ptr<Page> LabReport::page_;

TEST_F(LabReport, TheDemosPassed) {
  EXPECT_EQ(FailedChecks((*doc_)["demos"]), "");
}

TEST_F(LabReport, PageHasASectionPerDemoAndAnSvgPerChart) {
  const std::string& html = page_->html;
  std::vector<std::string> demos = DemoNames();
  demos.push_back("rebalance");
  for (const auto& name : demos) {
    EXPECT_NE(html.find("<section class=\"demo\" id=\"demo-" + name + "\">"), std::string::npos) << name;
  }
  // The charts the brief names, each drawn by gnuplot.
  for (const char* id :
       {"shard-key-years", "shard-key-window", "top10-lists", "top10-rows", "top10-time", "category-avg-values",
        "category-avg-error", "percentiles-rows", "percentiles-rounds", "third-shard-moved", "rebalance-load",
        "rebalance-latency", "workers-over-time", "workers-partitions", "workers-jobs"}) {
    EXPECT_NE(std::find(page_->chart_ids.begin(), page_->chart_ids.end(), id), page_->chart_ids.end()) << id;
  }
  for (const auto& id : page_->chart_ids) {
    const auto at = html.find("<figure class=\"chart\" id=\"chart-" + id + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    EXPECT_NE(html.find("<svg", at), std::string::npos) << id;
  }
  EXPECT_EQ(Count(html, "<svg"), page_->chart_ids.size());
  EXPECT_EQ(Count(html, "<figure class=\"chart\""), page_->chart_ids.size());
  EXPECT_EQ(Count(html, "Produced by GNUPLOT"), page_->chart_ids.size());
  // Self-contained: nothing fetched from elsewhere.
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
}

// The page in a real browser: a screenshot, the DOM after the page's own
// check ran (every chart has a size and something drawn), and no console
// message at all (the page logs only when a chart is not visible).
TEST_F(LabReport, RendersInHeadlessChromium) {
  if (!OnPath("chromium")) {
    GTEST_SKIP() << "chromium is not installed (Debian's chromium; scripts/bootstrap installs it): "
                    "the page was checked as text only";
  }
  const fs::path& dir = page_->dir;
  const std::string url = "file://" + (dir / "index.html").string();
  const std::string browser =
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--hide-scrollbars --enable-logging=stderr --v=0 --user-data-dir='" +
      (dir / "profile").string() + "' ";
  const fs::path png = dir / "page.png";
  ASSERT_EQ(std::system((browser + "--window-size=1100,2400 --screenshot='" + png.string() + "' '" + url + "' > '" +
                         (dir / "screenshot.out").string() + "' 2> '" + (dir / "screenshot.err").string() + "'")
                            .c_str()),
            0)
      << ReadFile(dir / "screenshot.err");
  const std::string image = ReadFile(png);
  ASSERT_GT(image.size(), 10000U) << "a screenshot of the page is more than a blank image";
  EXPECT_EQ(image.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(image.substr(12, 4), "IHDR");

  ASSERT_EQ(std::system((browser + "--dump-dom '" + url + "' > '" + (dir / "dom.html").string() + "' 2> '" +
                         (dir / "dom.err").string() + "'")
                            .c_str()),
            0)
      << ReadFile(dir / "dom.err");
  const std::string dom = ReadFile(dir / "dom.html");
  const std::string n = std::to_string(page_->chart_ids.size());
  EXPECT_NE(dom.find("data-charts=\"" + n + "\""), std::string::npos) << "the page's own check did not run";
  EXPECT_NE(dom.find("data-charts-visible=\"" + n + "\""), std::string::npos) << "a chart has no size or nothing drawn";
  EXPECT_EQ(Count(dom, "<svg"), page_->chart_ids.size());
  for (const auto& id : page_->chart_ids) EXPECT_NE(dom.find("id=\"chart-" + id + "\""), std::string::npos) << id;
  for (const fs::path& log : {dir / "screenshot.err", dir / "dom.err"}) {
    const std::string text = ReadFile(log);
    EXPECT_EQ(text.find(":CONSOLE"), std::string::npos) << "the browser's console, " << log << ":\n" << text;
  }
}

}  // namespace
}  // namespace shardkit::lab
