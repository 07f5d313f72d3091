// Replays the checked-in fuzz corpus (fuzz/corpus, merged from libFuzzer runs) and every plan
// under examples/ and tests/data/schedules through the fuzz entry point with the regular
// build: a cheap guard that inputs which once crashed (or found new paths) still don't.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(FuzzReplay, CorpusAndPlansRunCleanly) {
  namespace fs = std::filesystem;
  size_t n = 0;
  for (const char* dir : {STRETTO_FUZZ_CORPUS, STRETTO_EXAMPLES, STRETTO_TEST_DATA "/schedules"}) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream f(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string s = ss.str();
      EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0);
      ++n;
    }
  }
  EXPECT_GT(n, 50u);
}
