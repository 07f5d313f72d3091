// torch.distributed.pipelining CSV: parsing (with located errors), stage -> rank inference,
// export, round trips for every family, the `_add_send_recv` lowering, and the CLI commands.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "stretto/pipelines/builders.h"
#include "stretto/pipelines/torch_csv.h"

namespace stretto::pipelines {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PipelineSchedule build(const std::string& fam, int p, int v, int m, bool pad = false) {
  BuildOptions opt;
  opt.torch_padding = pad;
  auto s = build_schedule(fam, p, v, m, opt);
  EXPECT_TRUE(s.has_value()) << fam;
  return s ? *s : PipelineSchedule{};
}

const std::string kData = STRETTO_TEST_DATA "/builders/";

// ---------------------------------------------------------------------------------------------
// Import / export

TEST(TorchCsv, ParsesTorchArtifacts) {
  auto dv = load_torch_csv(kData + "dualpipev_4rank_10mb.csv");
  ASSERT_TRUE(dv) << render_all(dv.error());
  EXPECT_EQ(dv->ranks, 4);
  EXPECT_EQ(dv->stages, 8);
  EXPECT_EQ(dv->stages_per_rank, 2);
  EXPECT_EQ(dv->microbatches, 10);
  EXPECT_EQ(dv->stage_to_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));  // inferred V map
  EXPECT_EQ(dv->per_rank, build("dualpipev", 4, 2, 10).per_rank);
  EXPECT_EQ(dv->per_rank[0][17], Slot::overlap({ActionKind::kF, 0, 7}, {ActionKind::kB, 7, 3}));

  auto zb = load_torch_csv(kData + "zb1p_2rank_2stagep_compute.csv");
  ASSERT_TRUE(zb) << render_all(zb.error());
  EXPECT_EQ(zb->stage_to_rank, (std::vector<int>{0, 1, 0, 1}));  // inferred loop map
  EXPECT_EQ(zb->per_rank, build("zb-h1", 2, 2, 8, true).per_rank);
  EXPECT_TRUE(zb->per_rank[1][0].is_idle());
}

TEST(TorchCsv, ExportIsCellForCellTorch) {
  // With torch's grid padding, our export of ZB1P is byte-identical to torch's artifact and so
  // is DualPipeV (which torch does not pad).
  EXPECT_EQ(write_torch_csv(build("zb-h1", 2, 2, 8, true)),
            read_file(kData + "zb1p_2rank_2stagep_compute.csv"));
  EXPECT_EQ(write_torch_csv(build("dualpipev", 4, 2, 10)),
            read_file(kData + "dualpipev_4rank_10mb.csv"));
}

TEST(TorchCsv, RoundTripEveryFamily) {
  for (const std::string& fam : schedule_family_names()) {
    for (bool pad : {false, true}) {
      SCOPED_TRACE(fam + (pad ? " padded" : ""));
      const int p = 4, m = 8;
      const int v = (fam == "gpipe" || fam == "1f1b" || fam == "zb-h2") ? 1 : 2;
      auto s = build(fam, p, v, m, pad);
      auto back = parse_torch_csv(write_torch_csv(s), "roundtrip.csv");
      ASSERT_TRUE(back) << render_all(back.error());
      EXPECT_EQ(back->per_rank, s.per_rank);  // idle cells included
      for (int r = 0; r < p; ++r) EXPECT_EQ(back->compute_order(r), s.compute_order(r));
      EXPECT_EQ(back->stage_to_rank, s.stage_to_rank);
      EXPECT_EQ(back->bidirectional, s.bidirectional);
      EXPECT_EQ(back->stages, s.stages);
      EXPECT_EQ(back->microbatches, m);
      EXPECT_TRUE(validate_schedule(*back).empty());
    }
  }
}

TEST(TorchCsv, AcceptsCrLfQuotesAndCommCells) {
  auto s = parse_torch_csv(
      "0F0,0SEND_F0,0RECV_B0,0B0,0UNSHARD,0RESHARD,0REDUCE_GRAD\r\n"
      "\"1RECV_F0\",1F0, 1B0 ,1SEND_B0\r\n",
      "c.csv");
  ASSERT_TRUE(s) << render_all(s.error());
  EXPECT_EQ(s->per_rank[0], (std::vector<Slot>{Slot::single({ActionKind::kF, 0, 0}),
                                               Slot::single({ActionKind::kB, 0, 0})}));
  EXPECT_EQ(s->per_rank[1].size(), 2u);
  // Trailing blank lines are not ranks; a blank line in the middle is a rank with no actions.
  auto t = parse_torch_csv("0F0,0B0\n\n\n");
  ASSERT_TRUE(t) << render_all(t.error());
  EXPECT_EQ(t->ranks, 1);
  auto u = parse_torch_csv("0F0,0B0\n\n1F0,1B0\n");
  ASSERT_TRUE(u) << render_all(u.error());
  EXPECT_EQ(u->ranks, 3);
  EXPECT_EQ(u->stage_to_rank, (std::vector<int>{0, 2}));
}

// ---------------------------------------------------------------------------------------------
// Errors, with file:row:column of the cell

std::string first_error(const std::string& csv) {
  auto s = parse_torch_csv(csv, "bad.csv");
  EXPECT_FALSE(s) << "should not parse: " << csv;
  return s ? std::string() : s.error()[0].render();
}

TEST(TorchCsvErrors, BadCellsAreLocated) {
  std::string e = first_error("0F0,0X1\n1F0,1B0\n");
  EXPECT_NE(e.find("bad.csv:1:5: error: invalid action '0X1': unknown action type"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("  0F0,0X1\n      ^"), std::string::npos) << e;  // caret under the cell
  e = first_error("0F0,0B0\n1F0,1F\n");
  EXPECT_NE(e.find("bad.csv:2:5: error: invalid action '1F': a compute action needs a microbatch"),
            std::string::npos)
      << e;
  e = first_error("0F0,(0F1;1F0)OVERLAP_F_B\n");
  EXPECT_NE(e.find("bad.csv:1:5: error: '(0F1;1F0)OVERLAP_F_B': OVERLAP_F_B must hold a forward "
                   "then a full backward"),
            std::string::npos)
      << e;
  e = first_error("0F0,0B0x\n");
  EXPECT_NE(e.find("bad.csv:1:5: error: invalid action '0B0x': unexpected 'x' after the action"),
            std::string::npos)
      << e;
  e = first_error("F0\n");
  EXPECT_NE(e.find("bad.csv:1:1: error: invalid action 'F0': it does not start with a stage"),
            std::string::npos)
      << e;
  e = first_error("");
  EXPECT_NE(e.find("empty schedule CSV"), std::string::npos) << e;
}

TEST(TorchCsvErrors, StageOnTwoRanks) {
  // Stage 1 has actions in row 1 and row 2 (not DualPipe's mirrored layout).
  const std::string e = first_error("0F0,1F0,1B0,0B0,0F1,0B1\n1F1,1B1\n");
  EXPECT_NE(e.find("bad.csv:2:1: error: stage 1 is assigned to both rank 0 and rank 1"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("its first action is at bad.csv:1:5"), std::string::npos) << e;
}

TEST(TorchCsvErrors, ValidationErrorsPointAtCells) {
  // B before F in row 2, column 5.
  std::string e = first_error("0F0,0B0\n1B0,1F0\n");
  EXPECT_NE(e.find("bad.csv:2:1: error: rank 1, slot 0: full backward (B) of stage 1 microbatch 0 "
                   "runs before its forward"),
            std::string::npos)
      << e;
  // I without W.
  e = first_error("0F0,0I0\n");
  EXPECT_NE(e.find("bad.csv:1:1: error: stage 0 (rank 0) is missing weight backwards: microbatch "
                   "0 has an I but no W"),
            std::string::npos)
      << e;
  // W after a full B.
  e = first_error("0F0,0B0,0W0\n");
  EXPECT_NE(e.find("bad.csv:1:9: error: rank 0, slot 2: weight backward (W) of stage 0 "
                   "microbatch 0 after its full backward (B)"),
            std::string::npos)
      << e;
  // A stage without actions.
  e = first_error("0F0,0B0\n2F0,2B0\n");
  EXPECT_NE(e.find("stage 1 has no actions"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// _add_send_recv

std::string lowered_text(const std::vector<std::vector<LoweredOp>>& rows) {
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + row[i].str();
    out += "\n";
  }
  return out;
}

// By hand for 1F1B p=2 m=2 (rank 0: 0F0 0F1 0B0 0B1, rank 1: 1F0 1B0 1F1 1B1), sweeping ranks
// in ascending order, one action per rank per sweep:
//  1: r0 0F0 (+0SEND_F0, 1RECV_F0 to r1); r1 1F0 (its RECV is there).
//  2: r0 0F1 (+0SEND_F1, 1RECV_F1); r1 1B0 (last stage) (+1SEND_B0, 0RECV_B0 to r0).
//  3: r0 0B0 (received); r1 1F1.   4: r0 0B1 not ready; r1 1B1 (+1SEND_B1, 0RECV_B1).
//  5: r0 0B1.
TEST(TorchCsvSendRecv, HandDerived1F1B) {
  auto lowered = add_send_recv(build("1f1b", 2, 1, 2));
  ASSERT_TRUE(lowered) << render_all(lowered.error());
  EXPECT_EQ(lowered_text(*lowered),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
}

// I followed directly by the W of the same (stage, mb) becomes one B (torch's _merge_bw), as the
// pipeline that produced torch's comms artifact did.
PipelineSchedule merge_bw(PipelineSchedule s) {
  for (auto& row : s.per_rank) {
    std::vector<Slot> out;
    std::erase_if(row, [](const Slot& x) { return x.is_idle(); });
    for (size_t i = 0; i < row.size(); ++i) {
      const Slot& a = row[i];
      if (a.count == 1 && a.act[0].kind == ActionKind::kI && i + 1 < row.size() &&
          row[i + 1] == Slot::single({ActionKind::kW, a.act[0].stage, a.act[0].mb})) {
        out.push_back(Slot::single({ActionKind::kB, a.act[0].stage, a.act[0].mb}));
        ++i;
      } else {
        out.push_back(a);
      }
    }
    row = std::move(out);
  }
  return s;
}

// torch's zb1p_2rank_2stagep comms artifact (2024 letters BW/B translated to today's B/I) is
// _merge_bw + _add_send_recv of the compute artifact.
TEST(TorchCsvSendRecv, ReproducesTorchCommsArtifact) {
  auto compute = load_torch_csv(kData + "zb1p_2rank_2stagep_compute.csv");
  ASSERT_TRUE(compute);
  auto text = write_torch_csv_with_comms(merge_bw(*compute));
  ASSERT_TRUE(text) << render_all(text.error());
  EXPECT_EQ(*text, read_file(kData + "zb1p_2rank_2stagep_comms.csv"));
  // The comms form reads back (SEND/RECV dropped) to the merged compute order.
  auto back = load_torch_csv(kData + "zb1p_2rank_2stagep_comms.csv");
  ASSERT_TRUE(back) << render_all(back.error());
  EXPECT_EQ(back->per_rank, merge_bw(*compute).per_rank);
}

TEST(TorchCsvSendRecv, NoCommsBetweenStagesOnOneRank) {
  // ZB-V p=2: stages 1 and 2 both live on rank 1 (V's turning point): no SEND/RECV between them.
  auto text = write_torch_csv_with_comms(build("zb-v", 2, 2, 4));
  ASSERT_TRUE(text);
  EXPECT_EQ(text->find("1SEND_F"), std::string::npos);
  EXPECT_EQ(text->find("2RECV_F"), std::string::npos);
  EXPECT_EQ(text->find("2SEND_B"), std::string::npos);
  EXPECT_NE(text->find("0SEND_F0"), std::string::npos);
  EXPECT_NE(text->find("2SEND_F0"), std::string::npos);
  EXPECT_NE(text->find("3RECV_F0"), std::string::npos);
}

TEST(TorchCsvSendRecv, EveryFamilyLowersAndPairsUp) {
  for (const std::string& fam : schedule_family_names()) {
    SCOPED_TRACE(fam);
    const int v = (fam == "gpipe" || fam == "1f1b" || fam == "zb-h2") ? 1 : 2;
    auto s = build(fam, 4, v, 8, true);
    auto lowered = add_send_recv(s);
    ASSERT_TRUE(lowered) << render_all(lowered.error());
    int sends = 0, recvs = 0;
    for (int r = 0; r < 4; ++r) {
      int compute = 0;
      for (const LoweredOp& op : (*lowered)[static_cast<size_t>(r)]) {
        if (!op.is_comm)
          ++compute;
        else if (op.comm == TorchCommOp::kSendF || op.comm == TorchCommOp::kSendB)
          ++sends;
        else
          ++recvs;
      }
      int want = 0;
      for (const Slot& sl : s.per_rank[static_cast<size_t>(r)]) want += sl.is_idle() ? 0 : 1;
      EXPECT_EQ(compute, want);
    }
    EXPECT_EQ(sends, recvs);
    EXPECT_GT(sends, 0);
  }
}

TEST(TorchCsvSendRecv, MalformedScheduleIsDiagnosed) {
  // Rank 0 wants its backward before its forward: nobody can proceed.
  PipelineSchedule s = build("gpipe", 2, 1, 1);
  std::swap(s.per_rank[0][0], s.per_rank[0][1]);
  auto lowered = add_send_recv(s);
  ASSERT_FALSE(lowered);
  const std::string e = render_all(lowered.error());
  EXPECT_NE(e.find("malformed compute schedule"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0 waits to run 0B0"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 waits to run 1F0"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// CLI (needs the stretto binary, built by the full build)

struct CliRun {
  int rc = -1;
  std::string out, err;
};

CliRun run_cli(const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("stretto_builders_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
  const std::string cmd = std::string(STRETTO_BINARY) + " " + args + " >" + out + " 2>" + err;
  CliRun r;
  const int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

class TorchCsvCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(STRETTO_BINARY)) GTEST_SKIP() << "no stretto binary";
  }
};

TEST_F(TorchCsvCli, BuildScheduleWritesDirectives) {
  CliRun r = run_cli("build-schedule --schedule Schedule1F1B --ranks 2 --microbatches 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 5u);
  EXPECT_EQ(j[0]["op"], "place");
  EXPECT_EQ(j[0]["filter"], nlohmann::json::parse(R"({"PP":0})"));
  EXPECT_EQ(j[0]["devices"], nlohmann::json::parse("[0]"));
  EXPECT_EQ(j[2], nlohmann::json::parse(
                      R"({"op":"split","filter":{},"dim_name":"MB","num_microbatches":2})"));
  EXPECT_EQ(j[3]["filters"][2], nlohmann::json::parse(R"([{"PP":0,"MB":0,"PASS":"B"}])"));
}

TEST_F(TorchCsvCli, BuildScheduleShowAndBase) {
  CliRun r = run_cli("build-schedule --schedule 1f1b --ranks 2 --microbatches 2 --show");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("r0 | F0 .  .  F1 B0 .  B1"), std::string::npos) << r.out;
  r = run_cli("build-schedule --schedule 1f1b --ranks 2 --microbatches 4 --base " + kData +
              "base_pp2_dp2.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u + 1 + 2);
  EXPECT_EQ(j[0]["devices"], nlohmann::json::parse("[0,2]"));
  EXPECT_EQ(j[2]["op"], "replicate");
  EXPECT_EQ(j[4]["op"], "split");
}

TEST_F(TorchCsvCli, BadInputExitsTwo) {
  CliRun r = run_cli("build-schedule --schedule dualpipev --ranks 4 --microbatches 6");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("dualpipev needs at least as many microbatches as stages"),
            std::string::npos)
      << r.err;
  r = run_cli("build-schedule --schedule zbh3 --ranks 4 --microbatches 6");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("did you mean"), std::string::npos) << r.err;
}

TEST_F(TorchCsvCli, ImportAndExportTorchCsv) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("stretto_builders_io_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string plan = (dir / "plan.json").string();
  CliRun r = run_cli("import torch-csv " + kData + "dualpipev_4rank_10mb.csv -o " + plan);
  ASSERT_EQ(r.rc, 0) << r.err;
  // A plan whose schedule is a directive list exports back to the same compute order (the
  // directives carry no idle slots; DualPipeV has none).
  {
    std::ofstream f(dir / "wrapped.json");
    f << "{\"schedule\": " << read_file(plan) << "}";
  }
  r = run_cli("export torch-csv " + (dir / "wrapped.json").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, read_file(kData + "dualpipev_4rank_10mb.csv"));
  // A builder call exports with torch's grid: the zb1p artifact, cell for cell.
  r = run_cli("export torch-csv " + kData + "zb1p_plan.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, read_file(kData + "zb1p_2rank_2stagep_compute.csv"));
  r = run_cli("export torch-csv --with-comms " + kData + "zb1p_plan.json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("0F0,0SEND_F0,2RECV_F0"), std::string::npos) << r.out;
  // A bad CSV is a located diagnostic and exit code 2.
  {
    std::ofstream f(dir / "bad.csv");
    f << "0F0,0B0\n1F0,1Q0\n";
  }
  r = run_cli("import torch-csv " + (dir / "bad.csv").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("bad.csv:2:5: error: invalid action '1Q0'"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace stretto::pipelines
