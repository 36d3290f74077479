// Pictures with gnuplot: the safe runner (no user text in gnuplot's command language, no
// shell), `seqmix plot` (plot_runs) and the plots of `seqmix compare`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "seqmix/train/reporting/compare.h"
#include "seqmix/train/configuration/config.h"
#include "seqmix/train/reporting/metrics.h"
#include "seqmix/train/reporting/plot.h"
#include "seqmix/util/paths.h"
#include "support/cli.h"
#include "support/fake_gnuplot.h"
#include "support/gradcheck.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using seqmix::testing::fake_failing_gnuplot;
using seqmix::testing::ScopedPath;

namespace {

namespace fs = std::filesystem;
namespace train = seqmix::train;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;

const std::string kPngMagic = "\x89PNG\r\n\x1a\n";

bool is_png(const std::string& path) { return read_text(path).substr(0, 8) == kPngMagic; }

// Any leftover private folder of run_gnuplot in `dir`.
bool has_private_dirs(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".seqmix-plot-", 0) == 0) return true;
  return false;
}


// A run folder as the trainer leaves it: config.toml and metrics.jsonl (`lines`).
void write_run(const std::string& dir, const std::vector<nlohmann::json>& lines,
               const std::vector<std::string>& overrides = {"model.size=tiny"}) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.toml")
      << train::resolve_config("", {overrides.begin(), overrides.end()}).to_toml();
  std::ofstream m(dir + "/metrics.jsonl");
  for (const auto& l : lines) m << l.dump() << '\n';
}

// Metrics of a byte-level language model: training lines with bpc, periodic and final
// held-out lines; `eval_split` "eval" (older files) or "valid".
std::vector<nlohmann::json> lm_lines(const std::string& eval_split, double offset) {
  std::vector<nlohmann::json> lines;
  for (int step = 1; step <= 20; ++step) {
    const double loss = 5.0 / (1 + 0.2 * step) + offset;
    lines.push_back({{"step", step},
                     {"split", "train"},
                     {"loss", loss},
                     {"bpc", loss / std::log(2.0)},
                     {"lr", 1e-3 * step / 20},
                     {"time_s", 0.1 * step}});
    if (step % 5 == 0)
      lines.push_back({{"step", step},
                       {"split", eval_split},
                       {"loss", loss + 0.1},
                       {"bpc", (loss + 0.1) / std::log(2.0)},
                       {"final", step == 20},
                       {"time_s", 0.1 * step}});
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// Paths

TEST(Paths, PrintableText) {
  EXPECT_EQ(seqmix::util::printable_text("a\nb\x7f c"), "a\\x0ab\\x7f c");
  EXPECT_EQ(seqmix::util::printable_text("it's ü"), "it's ü");
}

// ---------------------------------------------------------------------------------------------
// run_gnuplot

train::GnuplotJob line_job() {
  train::GnuplotJob job;
  job.files = {{"line.dat", "\"a legend; system(\\\"touch X\\\")\"\n1 1\n2 4\n3 9\n"}};
  job.output = "plot.png";
  job.script = train::gnuplot_terminal("plot.png", 320, 240) +
               "set output 'plot.png'\nplot 'line.dat' using 1:2 with lines title columnheader\n";
  return job;
}

TEST(Gnuplot, DrawsIntoAnAwkwardlyNamedFolderWithoutLeftovers) {
  const std::string base = seqmix::testing::temp_dir("gnuplot-runner");
  // Quotes, a command substitution and spaces: harmless, as the path never reaches gnuplot or
  // a shell.
  const std::string dir = base + "/it's $(touch PWNED) \"x\"";
  fs::create_directories(dir);
  train::run_gnuplot(line_job(), dir + "/p.png");
  EXPECT_TRUE(is_png(dir + "/p.png"));
  EXPECT_FALSE(has_private_dirs(dir));
  EXPECT_FALSE(fs::exists("PWNED"));
  EXPECT_FALSE(fs::exists(dir + "/PWNED"));
  EXPECT_FALSE(fs::exists(dir + "/X"));
}

TEST(Gnuplot, FailureIsAnErrorQuotingGnuplot) {
  const std::string dir = seqmix::testing::temp_dir("gnuplot-fails");
  auto job = line_job();
  job.script += "plot no_such_function(x)\n";
  const std::string e = error_of([&] { train::run_gnuplot(job, dir + "/p.png"); });
  EXPECT_NE(e.find("gnuplot failed (exit status 1)"), std::string::npos) << e;
  EXPECT_NE(e.find("undefined function"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir + "/p.png"));
  EXPECT_FALSE(has_private_dirs(dir));

  // A script that writes no picture is a failure too.
  job = line_job();
  job.output = "other.png";
  EXPECT_NE(error_of([&] { train::run_gnuplot(job, dir + "/p.png"); }).find("no picture"),
            std::string::npos);
  EXPECT_FALSE(has_private_dirs(dir));
}

TEST(Gnuplot, MissingOrFailingGnuplotIsAnError) {
  const std::string dir = seqmix::testing::temp_dir("gnuplot-missing");
  fs::create_directories(dir + "/empty");
  {
    ScopedPath path(dir + "/empty");
    const std::string e = error_of([&] { train::run_gnuplot(line_job(), dir + "/p.png"); });
    EXPECT_NE(e.find("gnuplot not found"), std::string::npos) << e;
  }
  {
    ScopedPath path(fake_failing_gnuplot(dir));
    const std::string e = error_of([&] { train::run_gnuplot(line_job(), dir + "/p.png"); });
    EXPECT_NE(e.find("gnuplot failed (exit status 1): fake gnuplot: broken"), std::string::npos)
        << e;
  }
  EXPECT_FALSE(fs::exists(dir + "/p.png"));
  EXPECT_FALSE(has_private_dirs(dir));
}

TEST(Gnuplot, RefusesFileNamesThatAreNotPlain) {
  const std::string dir = seqmix::testing::temp_dir("gnuplot-names");
  for (const std::string& bad :
       std::vector<std::string>{"../x.dat", "a/b.dat", "", "..", "a\nb", "plot.gp"}) {
    auto job = line_job();
    job.files.emplace_back(bad, "1 1\n");
    EXPECT_THROW(train::run_gnuplot(job, dir + "/p.png"), std::invalid_argument) << bad;
  }
  auto job = line_job();
  job.output = "../p.png";
  EXPECT_THROW(train::run_gnuplot(job, dir + "/p.png"), std::invalid_argument);
}

TEST(Gnuplot, ColumnHeaderStaysOneField) {
  EXPECT_EQ(train::column_header("a \"b\"\nc"), "\"a 'b'?c\"");
  EXPECT_THROW(train::gnuplot_terminal("x.jpg", 10, 10), std::invalid_argument);
  EXPECT_NE(train::gnuplot_terminal("x.SVG", 10, 10).find("svg"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Metrics lines: older and newer split vocabularies

TEST(PlotMetrics, TrainingAndEvaluationLines) {
  using nlohmann::json;
  EXPECT_TRUE(train::is_training_line(json{{"step", 1}, {"split", "train"}, {"loss", 1}}));
  // An evaluation of the training split (older files) carries "final".
  const json old_train_eval{{"step", 9}, {"split", "train"}, {"final", true}, {"accuracy", 1}};
  EXPECT_FALSE(train::is_training_line(old_train_eval));
  EXPECT_EQ(train::evaluation_split(old_train_eval), "train_eval");
  EXPECT_EQ(train::evaluation_split(json{{"split", "eval"}, {"final", false}}), "eval");
  EXPECT_EQ(train::evaluation_split(json{{"split", "valid"}, {"final", true}}), "valid");
  EXPECT_EQ(train::evaluation_split(json{{"split", "train_eval"}, {"final", true}}),
            "train_eval");
  EXPECT_EQ(train::evaluation_split(json{{"split", "train"}, {"loss", 1}}), "");
  const json train_line{{"step", 1}, {"split", "train"}, {"loss", 1}};
  EXPECT_EQ(train::held_out_split({train_line, json{{"split", "eval"}, {"final", true}}}), "eval");
  // A classifier: valid first, test and train_eval at the end.
  EXPECT_EQ(train::held_out_split({train_line, old_train_eval,
                                   json{{"split", "valid"}, {"final", true}},
                                   json{{"split", "test"}, {"final", true}}}),
            "valid");
  // A language model scored on its test split (data.eval_split = test).
  EXPECT_EQ(train::held_out_split({train_line, json{{"split", "test"}, {"final", false}}}),
            "test");
  EXPECT_EQ(train::held_out_split({train_line}), "");
}

// ---------------------------------------------------------------------------------------------
// plot_runs

TEST(PlotRuns, OneRunDefaultsToBpcBesideTheRun) {
  const std::string dir = seqmix::testing::temp_dir("plot-one");
  write_run(dir + "/run", lm_lines("eval", 0));
  train::PlotOptions o;
  o.runs = {dir + "/run"};
  const auto r = train::plot_runs(o);
  EXPECT_EQ(r.metric, "bpc");
  EXPECT_EQ(r.path, dir + "/run/plot_bpc.png");
  EXPECT_TRUE(is_png(r.path));
  EXPECT_FALSE(has_private_dirs(dir + "/run"));
  o.metric = "lr";
  EXPECT_TRUE(is_png(train::plot_runs(o).path));
  EXPECT_TRUE(fs::exists(dir + "/run/plot_lr.png"));
}

TEST(PlotRuns, SeveralRunsInOneSvgWithLegendFromTheData) {
  const std::string dir = seqmix::testing::temp_dir("plot-several");
  // A folder name that would break out of a gnuplot string and run a command if it were
  // written into the script.
  const std::string evil = dir + "/x'\"; system(\"touch PWNED\"); '";
  write_run(dir + "/small", lm_lines("valid", 0));
  write_run(evil, lm_lines("eval", 0.3), {"model.size=tiny", "model.n_layers=1"});
  train::PlotOptions o;
  o.runs = {dir + "/small", evil};
  o.metric = "loss";
  o.out = dir + "/both.svg";
  const auto r = train::plot_runs(o);
  EXPECT_EQ(r.path, o.out);
  const std::string svg = read_text(o.out);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/PWNED"));
  EXPECT_FALSE(fs::exists("PWNED"));
  // Legend: folder name (its '"' shown as '\''), parameter count, final held-out figure.
  EXPECT_NE(svg.find("small: training, 1"), std::string::npos);
  EXPECT_NE(svg.find("K params<"), std::string::npos);
  EXPECT_NE(svg.find("x''; system('touch PWNED'); ': training"), std::string::npos);
  EXPECT_NE(svg.find("small: valid (held out), final 1.1<"), std::string::npos);
  EXPECT_NE(svg.find("PWNED'); ': eval (held out), final 1.4<"), std::string::npos);
  o.out = dir + "/both.png";
  o.metric.clear();
  EXPECT_EQ(train::plot_runs(o).metric, "bpc");
  EXPECT_TRUE(is_png(o.out));
}

TEST(PlotRuns, ClassifierAccuracyWithOlderAndNewerSplits) {
  const std::string dir = seqmix::testing::temp_dir("plot-accuracy");
  std::vector<nlohmann::json> lines;
  for (int step = 1; step <= 10; ++step) {
    lines.push_back({{"step", step}, {"split", "train"}, {"loss", 1.0}, {"accuracy", 0.05 * step}});
    if (step % 5 == 0)
      lines.push_back({{"step", step}, {"split", "valid"}, {"accuracy", 0.04 * step},
                       {"final", step == 10}});
  }
  lines.push_back({{"step", 10}, {"split", "test"}, {"accuracy", 0.35}, {"final", true}});
  lines.push_back({{"step", 10}, {"split", "train"}, {"accuracy", 0.6}, {"final", true}});
  write_run(dir + "/cls", lines);
  train::PlotOptions o;
  o.runs = {dir + "/cls"};
  o.metric = "accuracy";
  o.out = dir + "/acc.svg";
  train::plot_runs(o);
  const std::string svg = read_text(o.out);
  EXPECT_NE(svg.find("cls: valid (held out), final 40%"), std::string::npos) << "in percent";
  EXPECT_NE(svg.find("cls: test (held out)"), std::string::npos);
  EXPECT_NE(svg.find("cls: train_eval"), std::string::npos);
  // Without --metric: no training bpc, so the loss.
  o.metric.clear();
  o.out = dir + "/loss.png";
  EXPECT_EQ(train::plot_runs(o).metric, "loss");
  EXPECT_TRUE(is_png(o.out));
}

TEST(PlotRuns, ErrorsNameTheInput) {
  const std::string dir = seqmix::testing::temp_dir("plot-errors");
  write_run(dir + "/run", lm_lines("eval", 0));
  fs::create_directories(dir + "/empty");
  auto err = [&](std::vector<std::string> runs, std::string metric, std::string out) {
    train::PlotOptions o;
    o.runs = std::move(runs);
    o.metric = std::move(metric);
    o.out = std::move(out);
    return error_of([&] { train::plot_runs(o); });
  };
  EXPECT_EQ(err({dir + "/nope"}, "", ""), "plot: run folder '" + dir + "/nope' does not exist");
  EXPECT_NE(err({dir + "/empty"}, "", "").find("'" + dir + "/empty' has no metrics.jsonl"),
            std::string::npos);
  std::string e = err({dir + "/run"}, "accuracy", "");
  EXPECT_NE(e.find("no run has 'accuracy'"), std::string::npos) << e;
  EXPECT_NE(e.find("'" + dir + "/run' has bpc, loss, lr"), std::string::npos) << e;
  e = err({dir + "/run"}, "perplexity", "");
  EXPECT_NE(e.find("`metric` 'perplexity' (expected bpc, loss, accuracy or lr)"),
            std::string::npos) << e;
  e = err({dir + "/run"}, "", dir + "/p.jpg");
  EXPECT_NE(e.find("must end in .png or .svg"), std::string::npos) << e;
  e = err({dir + "/run", dir + "/run"}, "", "");
  EXPECT_NE(e.find("`out` FILE.png or FILE.svg is required with several runs"),
            std::string::npos) << e;
  e = err({dir + "/run"}, "", dir + "/no/such/folder/p.png");
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  e = err({dir + "/run"}, "", dir + "/p\nsystem('touch " + dir + "/PWNED').png");
  EXPECT_NE(e.find("`out`"), std::string::npos) << e;
  EXPECT_NE(e.find("control character"), std::string::npos) << e;
  e = err({dir + "/r\tun"}, "", "");
  EXPECT_NE(e.find("run folder"), std::string::npos) << e;
  EXPECT_NE(e.find("control character"), std::string::npos) << e;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "run" || name == "empty") << "left behind: " << name;
  }
  EXPECT_FALSE(fs::exists(dir + "/run/plot_bpc.png"));
}

TEST(PlotRuns, FailingGnuplotIsAnError) {
  const std::string dir = seqmix::testing::temp_dir("plot-gnuplot-fails");
  write_run(dir + "/run", lm_lines("eval", 0));
  ScopedPath path(fake_failing_gnuplot(dir));
  train::PlotOptions o;
  o.runs = {dir + "/run"};
  EXPECT_EQ(error_of([&] { train::plot_runs(o); }),
            "plot: gnuplot failed (exit status 1): fake gnuplot: broken");
  EXPECT_FALSE(fs::exists(dir + "/run/plot_bpc.png"));
}

// ---------------------------------------------------------------------------------------------
// compare (library)

TEST(Compare, Quartiles) {
  const auto q = train::quartiles({4, 1, 3, 2, 5});
  EXPECT_DOUBLE_EQ(q[0], 2);
  EXPECT_DOUBLE_EQ(q[1], 3);
  EXPECT_DOUBLE_EQ(q[2], 4);
  const auto r = train::quartiles({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(r[0], 1.75);
  EXPECT_DOUBLE_EQ(r[1], 2.5);
  EXPECT_DOUBLE_EQ(r[2], 3.25);
  EXPECT_THROW(train::quartiles({}), std::invalid_argument);
}

TEST(Compare, ParsesModelSpecs) {
  const auto m =
      train::parse_compare_model("no-adj=extractor-transformer  model.extractor.adjust=false");
  EXPECT_EQ(m.name, "no-adj");
  EXPECT_EQ(m.overrides, (std::vector<train::Override>{{"model.preset", "extractor-transformer"},
                                                       {"model.extractor.adjust", false}}));
  // An override is checked as the spec is read: a key that does not exist, a wrong type.
  EXPECT_THROW(train::parse_compare_model("a=transformer model.extractor_adjust=false"),
               std::invalid_argument);
  EXPECT_THROW(train::parse_compare_model("a=transformer train.lr=fast"),
               std::invalid_argument);
  EXPECT_THROW(train::parse_compare_model("extractor-transformer"), std::invalid_argument);
  EXPECT_THROW(train::parse_compare_model("a/b=transformer"), std::invalid_argument);
  EXPECT_THROW(train::parse_compare_model("a=transformer lr=3"), std::invalid_argument);
  // A name is a folder inside --out: never the folder itself or its parent.
  EXPECT_THROW(train::parse_compare_model("..=transformer"), std::invalid_argument);
  EXPECT_THROW(train::parse_compare_model(".=transformer"), std::invalid_argument);
}

TEST(Compare, BucketFromTheRunLength) {
  EXPECT_EQ(train::compare_bucket(0, 2000), 100);
  EXPECT_EQ(train::compare_bucket(0, 100), 5);
  EXPECT_EQ(train::compare_bucket(0, 12), 1);
  EXPECT_EQ(train::compare_bucket(7, 2000), 7);
  EXPECT_EQ(train::CompareOptions{}.bucket, 0) << "automatic by default";
}

train::CompareOptions tiny_compare(const std::string& dir, const std::string& out) {
  train::CompareOptions o;
  o.out_dir = out;
  o.shared_overrides = {"model.size=tiny",
                        "model.max_len=16",
                        "model.n_layers=1",
                        "data.source=" + seqmix::testing::tiny_corpus(dir),
                        "train.batch_size=2",
                        "train.max_steps=6",
                        "train.eval_interval=3",
                        "train.eval_max_bytes=2000",
                        "train.threads=1",
                        "train.checkpoint_interval=0"};
  o.models = {train::parse_compare_model("a=transformer"),
              train::parse_compare_model("b=weird-net-a")};
  o.seeds = 1;
  return o;
}

TEST(Compare, MeanSdAndVerdictsCallAGapUnderThreeStandardErrorsATie) {
  EXPECT_EQ(train::mean_sd({2.0}), std::make_pair(2.0, 0.0));
  const auto [m, sd] = train::mean_sd({1.0, 2.0, 3.0, 6.0});
  EXPECT_DOUBLE_EQ(m, 3.0);
  EXPECT_DOUBLE_EQ(sd, std::sqrt(14.0 / 3.0));  // sample sd, divisor n - 1
  EXPECT_THROW(train::mean_sd({}), std::invalid_argument);

  auto summary = [](const std::string& name, std::vector<double> v, bool higher) {
    train::SeedSummary s;
    s.name = name;
    s.values = std::move(v);
    s.higher_is_better = higher;
    std::tie(s.mean, s.sd) = train::mean_sd(s.values);
    return s;
  };
  // se = sqrt(0.01^2 / 3 + 0.01^2 / 3) = 0.00816; a gap of 0.02 is 2.45 se: a tie.
  auto a = summary("a", {0.50, 0.51, 0.52}, true), b = summary("b", {0.48, 0.49, 0.50}, true);
  auto p = train::seed_verdict(a, b);
  EXPECT_NEAR(p.gap, 0.02, 1e-12);
  EXPECT_NEAR(p.se, std::sqrt(2 * 1e-4 / 3), 1e-12);
  EXPECT_EQ(p.verdict, "tie");
  // A gap of 0.04 is 4.9 se: an ordering, in the direction the metric prefers.
  b = summary("b", {0.46, 0.47, 0.48}, true);
  EXPECT_EQ(train::seed_verdict(a, b).verdict, "a");
  EXPECT_EQ(train::seed_verdict(b, a).verdict, "b") << "the second model of the pair, a";
  a.higher_is_better = b.higher_is_better = false;  // bpc: lower is better
  EXPECT_EQ(train::seed_verdict(a, b).verdict, "b");
  // One seed: no standard error, so no ordering however large the gap.
  EXPECT_EQ(train::seed_verdict(summary("a", {0.9}, true), summary("b", {0.1}, true)).verdict,
            "undecided");
  // Equal constants: a tie, not an ordering by a zero standard error.
  EXPECT_EQ(train::seed_verdict(summary("a", {1, 1}, true), summary("b", {1, 1}, true)).verdict,
            "tie");
  // A model at chance is no baseline: a gap of 20 points to it is no win, whichever side it
  // is on, and a gap between two models at chance no ordering.
  a = summary("a", {0.70, 0.71, 0.72}, true);
  b = summary("b", {0.50, 0.51, 0.50}, true);
  b.at_chance = true;
  p = train::seed_verdict(a, b);
  EXPECT_EQ(p.verdict, "not comparable");
  EXPECT_NEAR(p.gap, 0.20667, 1e-4);
  EXPECT_GT(p.se, 0);
  EXPECT_EQ(train::seed_verdict(b, a).verdict, "not comparable");
  EXPECT_EQ(train::seed_verdict(summary("a", {0.9}, true), b).verdict, "not comparable");
}

TEST(Compare, ChanceBoundIsFiveBinomialStandardErrorsAboveTheMajorityClass) {
  // Pathfinder's test split at the CPU size: 2,000 images, half of each class.
  EXPECT_NEAR(train::chance_bound(0.5, 2000), 0.5 + 5 * std::sqrt(0.25 / 2000), 1e-15);
  EXPECT_NEAR(train::chance_bound(0.5, 2000), 0.55590, 1e-5);
  EXPECT_DOUBLE_EQ(train::chance_bound(1.0, 10), 1.0);
  EXPECT_DOUBLE_EQ(train::chance_bound(0.0, 10), 0.0);
  for (auto [p, n] : {std::pair<double, int64_t>{-0.1, 10}, {1.5, 10}, {0.5, 0},
                      {std::nan(""), 10}})
    EXPECT_THROW(train::chance_bound(p, n), std::invalid_argument) << p << " " << n;
}

TEST(Compare, SeveralSeedsGiveMeanSdAndAVerdictPerPair) {
  const std::string dir = seqmix::testing::temp_dir("compare-seeds");
  auto o = tiny_compare(dir, dir + "/out");
  o.seeds = 2;
  o.shared_overrides.push_back("train.seed=7");
  const auto r = train::compare(o);
  // Seeds 7 and 8, each a whole comparison in its own folder, on its own batches.
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0].seed, 7);
  EXPECT_EQ(r.rows[3].seed, 8);
  for (const char* run : {"seed-7/a", "seed-7/b", "seed-8/a", "seed-8/b"})
    EXPECT_TRUE(fs::exists(dir + "/out/" + run + "/checkpoint.pt")) << run;
  EXPECT_NE(r.rows[0].eval_bpc, r.rows[2].eval_bpc) << "another seed, another run";
  ASSERT_EQ(r.summaries.size(), 2u);
  const auto& a = r.summaries[0];
  EXPECT_EQ(a.metric, "bpc");
  EXPECT_FALSE(a.higher_is_better);
  EXPECT_EQ(a.seeds, (std::vector<int64_t>{7, 8}));
  ASSERT_EQ(a.values.size(), 2u);
  EXPECT_DOUBLE_EQ(a.values[0], r.rows[0].eval_bpc);
  EXPECT_DOUBLE_EQ(a.values[1], r.rows[2].eval_bpc);
  EXPECT_DOUBLE_EQ(a.mean, (a.values[0] + a.values[1]) / 2);
  EXPECT_NEAR(a.sd, std::abs(a.values[0] - a.values[1]) / std::sqrt(2.0), 1e-12);
  ASSERT_EQ(r.pairs.size(), 1u);
  EXPECT_EQ(r.pairs[0].verdict, train::seed_verdict(r.summaries[0], r.summaries[1]).verdict);
  const auto summary = train::read_metrics(dir + "/out/summary.jsonl");
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[1]["name"], "b");
  EXPECT_EQ(summary[1]["values"].size(), 2u);
  const auto pairs = train::read_metrics(dir + "/out/pairs.jsonl");
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0]["verdict"], r.pairs[0].verdict);
  EXPECT_EQ(r.plot, fs::absolute(dir + "/out/seeds.png").string());
  EXPECT_TRUE(is_png(r.plot));
  // Run again: every run is reused, the same figures come back.
  const auto again = train::compare(o);
  EXPECT_TRUE(again.rows[3].reused);
  EXPECT_DOUBLE_EQ(again.summaries[1].mean, r.summaries[1].mean);

  o.seeds = 0;
  EXPECT_EQ(error_of([&] { train::resolve_compare(o); }),
            "compare: `seeds` must be in [1, 100], got 0");
  o.seeds = 101;
  EXPECT_EQ(error_of([&] { train::resolve_compare(o); }),
            "compare: `seeds` must be in [1, 100], got 101");
}

TEST(Compare, RefusesControlCharactersBeforeCreatingAnything) {
  const std::string dir = seqmix::testing::temp_dir("compare-control");
  auto o = tiny_compare(dir, dir + "/out\nsystem(\"touch " + dir + "/PWNED\")\n");
  std::string e = error_of([&] { train::compare(o); });
  EXPECT_EQ(e.rfind("compare: `out_dir`", 0), 0u) << e;
  EXPECT_NE(e.find("\\x0asystem("), std::string::npos) << e;
  EXPECT_NE(e.find("control character"), std::string::npos) << e;
  o = tiny_compare(dir, dir + "/out");
  o.shared_overrides.emplace_back("data.source", dir + "/c.txt\nx");
  e = error_of([&] { train::compare(o); });
  EXPECT_NE(e.find("data.source"), std::string::npos) << e;
  EXPECT_NE(e.find("control character"), std::string::npos) << e;
  o = tiny_compare(dir, dir + "/out");
  o.models.push_back({"..", {"model.preset=transformer"}});
  e = error_of([&] { train::compare(o); });
  EXPECT_NE(e.find("model name '..'"), std::string::npos) << e;
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename(), "c.txt") << "created: " << entry.path();
  // resolve_compare: the same checks, nothing created.
  o = tiny_compare(dir, dir + "/out");
  EXPECT_EQ(train::resolve_compare(o).size(), 2u);
  o.models.push_back(train::parse_compare_model("d=transformer train.seed=9"));
  EXPECT_NE(error_of([&] { train::resolve_compare(o); }).find("'d' differs from 'a' in train.seed"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

TEST(Compare, ScriptNamesNoPathTwoPanelsAndFailingGnuplotFails) {
  const std::string dir = seqmix::testing::temp_dir("compare-plot");
  // An output folder and corpus whose names would break a gnuplot string.
  const std::string out = dir + "/it's \"out\" $(touch PWNED)";
  auto o = tiny_compare(dir, out);
  const auto r = train::compare(o);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.plot, fs::absolute(out + "/compare.png").string());
  EXPECT_TRUE(is_png(r.plot));
  EXPECT_FALSE(has_private_dirs(out));
  EXPECT_FALSE(fs::exists(dir + "/PWNED") || fs::exists("PWNED"));
  const std::string gp = read_text(out + "/compare.gp");
  EXPECT_EQ(gp.find(dir), std::string::npos) << gp;
  EXPECT_EQ(gp.find("c.txt"), std::string::npos) << gp;
  EXPECT_EQ(gp.find("system"), std::string::npos) << gp;
  // Legend with parameters and the final held-out bpc; a second panel of held-out bpc.
  EXPECT_NE(gp.find("'a: " ), std::string::npos) << gp;
  EXPECT_NE(gp.find("K params, held-out bpc "), std::string::npos) << gp;
  EXPECT_NE(gp.find("set multiplot"), std::string::npos) << gp;
  EXPECT_NE(gp.find("'compare_eval.dat' index 1"), std::string::npos) << gp;
  // Evaluations at steps 3 and 6 per model.
  int eval_rows = 0;
  std::istringstream eval(read_text(out + "/compare_eval.dat"));
  for (std::string line; std::getline(eval, line);)
    if (!line.empty() && line[0] != '#') ++eval_rows;
  EXPECT_EQ(eval_rows, 4);

  // One bucket over the whole run: the first batches' costs lie above its upper quartile, and
  // stderr says they are clipped; an explicit bucket is not announced.
  o.bucket = 6;
  testing::internal::CaptureStderr();
  train::compare(o);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("single-batch costs lie outside it and are clipped"), std::string::npos)
      << said;
  EXPECT_EQ(said.find("buckets of"), std::string::npos) << said;
  EXPECT_NE(read_text(out + "/compare.gp").find("median and quartiles of every 6 batches"),
            std::string::npos);

  // Plotting fails: the runs and summary.jsonl are kept, the error says so.
  fs::remove(out + "/summary.jsonl");
  fs::remove(out + "/compare.png");
  ScopedPath path(fake_failing_gnuplot(dir));
  const std::string e = error_of([&] { train::compare(o); });
  EXPECT_NE(e.find("compare: gnuplot failed (exit status 1): fake gnuplot: broken"),
            std::string::npos) << e;
  EXPECT_EQ(train::read_metrics(out + "/summary.jsonl").size(), 2u);
  EXPECT_FALSE(fs::exists(out + "/compare.png"));
  EXPECT_TRUE(fs::exists(out + "/b/checkpoint.pt"));
}

}  // namespace
