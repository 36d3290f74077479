// Through the seqmix binary ($SEQMIX_BIN, tests/support/cli.h): `seqmix export`: exported
// weights (include/seqmix/train/serialization/export.h) from the command line.
#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/train/serialization/checkpoint.h"
#include "seqmix/train/serialization/export.h"
#include "seqmix/train/configuration/resolve.h"
#include "support/cli.h"
#include "support/temp_dir.h"
#include "support/tiny_run.h"
#include "support/errors.h"

using seqmix::testing::error_of;

using namespace seqmix;
namespace fs = std::filesystem;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;

using seqmix::testing::logits;
using seqmix::testing::state_of;
using seqmix::testing::Tiny;
using seqmix::testing::write_pickle;

namespace {

// The CLI flags of the model tiny_request describes, on `corpus`.
std::string tiny_flags(const std::string& corpus) {
  return "--model weird-net --size tiny --max-len 32 --batch-size 2 --data " + corpus;
}

}  // namespace

TEST(Export, CliExportImportEvalGenerateResume) {
  Tiny t("export-cli");
  const std::string run = t.dir + "/run";
  train::save_run(run, t.model, t.config, data::Tokenizer::bytes(), 3, false);

  // Resumes with no metrics.jsonl, from the step stored.
  auto r = run_cli("train --out " + run + " --resume --max-steps 5");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 3"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run + "/metrics.jsonl"));

  const std::string file = t.dir + "/wn.pt";
  r = run_cli("export " + run + " --out " + file);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote '" + file + "'"), std::string::npos) << r.output;
  r = run_cli("export " + run + " --out " + file);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("exists; give --overwrite"), std::string::npos) << r.output;
  r = run_cli("export " + run + " --out " + run + "/config.toml --overwrite");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("is a run folder's config.toml"), std::string::npos) << r.output;

  // Plain PyTorch reads it with torch.load's defaults (weights_only=True since 2.6).
  {
    const std::string py = std::string(SEQMIX_PYTHON) + " -c \"import torch; d = torch.load('" +
                           file + "'); assert type(d) is dict and type(d['state_dict']) is dict; "
                           "print(d['format'], d['version'], d['config']['model']['size'], "
                           "d['tokenizer'], len(d['state_dict']))\" 2>&1";
    FILE* p = popen(py.c_str(), "r");
    std::string out;
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_EQ(pclose(p), 0) << out;
    EXPECT_NE(out.find("seqmix.export 1 tiny bytes"), std::string::npos) << out;
  }

  const std::string imported = t.dir + "/imported";
  r = run_cli("import " + file + " --out " + imported + " --model weird-net");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("applies only to a bare state dict"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(imported));
  r = run_cli("import " + file + " --out " + imported);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("import " + file + " --out " + imported);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("already holds a run"), std::string::npos) << r.output;
  EXPECT_EQ(run_cli("import " + file + " --out " + imported + " --overwrite").code, 0);

  r = run_cli("eval " + imported + " --max-bytes 200");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(seqmix::testing::json_lines(r.output).size(), 1u) << r.output;
  r = run_cli("generate " + imported + " --prompt 'the ' --max-new-tokens 8 --seed 1");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("train --out " + imported + " --resume --max-steps 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming at step 0"), std::string::npos) << r.output;

  // A bare state dict needs its configuration on the command line.
  const std::string sd = t.dir + "/sd.pt";
  write_pickle(sd, state_of(t.model));
  r = run_cli("import " + sd + " --out " + t.dir + "/bare");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("holds no configuration"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.dir + "/bare"));
  r = run_cli("import " + sd + " --out " + t.dir + "/bare " + tiny_flags(t.corpus));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(at::equal(logits(train::load_run(t.dir + "/bare").model), logits(t.model)));
  r = run_cli("import " + sd + " --out " + t.dir + "/bare2 --model weird-net --size tiny");
  EXPECT_EQ(r.code, 1);  // the preset's max_len: the positions do not fit
  EXPECT_NE(r.output.find("parameter 'pos_emb' has shape [32, 64], the model's is [128, 64]"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(t.dir + "/bare2"));
}

// A SentencePiece run (named for the tokenizer tests that scripts/sanitize.sh leaves out).
