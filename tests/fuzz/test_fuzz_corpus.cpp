// Regression tier for the importer fuzzer: every file in tests/fuzz/corpus (the seed corpus,
// the inputs libFuzzer found interesting, and any crashers, named crash-*) goes through the
// same code as the fuzz target in the normal build, under the test suite.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(FuzzCorpus, EveryInputReturnsWithoutCrashing) {
  const std::filesystem::path dir = TENSORD_FUZZ_CORPUS;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string bytes = ss.str();
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0)
        << entry.path();
    ++files;
  }
  EXPECT_GT(files, 10);
}
