// Tests of src/io/durable_file.h: the one helper every writer publishes its files with.
#include "io/durable_file.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/fault_injection.h"

namespace homodyne::io_internal {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string ReadText(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> FolderEntries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Writes 64 KiB under a 16 KiB file size limit (RLIMIT_FSIZE: write() fails with EFBIG part way,
// as on a full disk); exits 0 when the error names the temporary file and the OS reason. In a
// child process (EXPECT_EXIT): the limit must not outlive the test.
void WriteUnderFileSizeLimitAndExit(const fs::path& path) {
  ::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{16384, 16384};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  bool threw_with_reason = false;
  try {
    WriteFileDurably(path, std::string(size_t{1} << 16, 'x'));
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    threw_with_reason = message.find("cannot write " + path.parent_path().string() + "/.") == 0 &&
                        message.find("File too large") != std::string::npos;
    if (!threw_with_reason) std::fprintf(stderr, "message: %s\n", message.c_str());
  }
  std::exit(threw_with_reason ? 0 : 1);
}

class DurableFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ = fs::temp_directory_path() /
              ("homodyne_durable_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  fs::path folder_;
};

TEST_F(DurableFileTest, WritesTheWholeFileAndNothingElse) {
  const fs::path path = folder_ / "parameters.json";

  const int64_t bytes = WriteFileDurably(path, "{\"a\": 1}\n");

  EXPECT_EQ(bytes, 9);
  EXPECT_EQ(ReadText(path), "{\"a\": 1}\n");
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("parameters.json"));
}

TEST_F(DurableFileTest, TemporaryFileIsHiddenInTheSameFolderAndKeepsTheExtension) {
  const DurableFile file(folder_ / "fitted_data.h5");

  EXPECT_EQ(file.temporary_path().parent_path(), folder_);
  EXPECT_THAT(file.temporary_path().filename().string(),
              AllOf(StartsWith(".fitted_data."), EndsWith(".h5.tmp")));
  EXPECT_EQ(file.temporary_path().filename().string().size(),
            std::string(".fitted_data.XXXXXX.h5.tmp").size());
  EXPECT_TRUE(fs::is_regular_file(file.temporary_path()));
  EXPECT_FALSE(fs::exists(file.final_path()));
}

TEST_F(DurableFileTest, ReplacesAnExistingFileOnlyAtCommit) {
  const fs::path path = folder_ / "result.json";
  WriteText(path, "old contents");
  std::ifstream reader_of_old(path, std::ios::binary);  // opened before the replacement

  DurableFile file(path);
  file.Write("new ");
  file.Write("contents");
  EXPECT_EQ(ReadText(path), "old contents");  // not yet committed: the old file is untouched
  EXPECT_EQ(file.Commit(), 12);

  EXPECT_EQ(ReadText(path), "new contents");
  std::string seen_by_old_reader;
  std::getline(reader_of_old, seen_by_old_reader);
  EXPECT_EQ(seen_by_old_reader, "old contents");  // a rename, not a rewrite in place
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("result.json"));
}

TEST_F(DurableFileTest, AFileNotCommittedIsRemovedAndTheOldOneStays) {
  const fs::path path = folder_ / "result.json";
  WriteText(path, "old contents");

  {
    DurableFile file(path);
    file.Write("half of the new con");
  }  // e.g. an exception before Commit()

  EXPECT_EQ(ReadText(path), "old contents");
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("result.json"));
}

TEST_F(DurableFileTest, CommitsWhatAnotherWriterWroteToTheTemporaryPath) {
  // As HDF5 does: it opens the temporary path itself and closes it before Commit().
  const fs::path path = folder_ / "sim.h5";
  DurableFile file(path);
  const int fd = ::open(file.temporary_path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "written by another fd", 21), 21);
  ASSERT_EQ(::close(fd), 0);

  EXPECT_EQ(file.Commit(), 21);

  EXPECT_EQ(ReadText(path), "written by another fd");
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("sim.h5"));
}

TEST_F(DurableFileTest, ModeIsTheRequestedOneLessTheUmask) {
  const mode_t previous = ::umask(022);
  WriteFileDurably(folder_ / "shared.json", "x");
  WriteFileDurably(folder_ / "private.h5", "x", 0600);
  ::umask(previous);

  EXPECT_EQ(fs::status(folder_ / "shared.json").permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  EXPECT_EQ(fs::status(folder_ / "private.h5").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(DurableFileTest, MissingFolderFailsNamingTheFolderAndTheReason) {
  // Tests run as root, which ignores permission bits: a folder that does not exist instead.
  const fs::path folder = folder_ / "no_such_folder";
  try {
    WriteFileDurably(folder / "parameters.json", "x");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("cannot create a temporary file in " + folder.string()),
                      HasSubstr("No such file or directory")));
  }
  EXPECT_FALSE(fs::exists(folder));
}

TEST_F(DurableFileTest, FileInPlaceOfTheFolderFailsNamingItAndTheReason) {
  const fs::path blocker = folder_ / "plain_file";
  WriteText(blocker, "not a folder");
  try {
    DurableFile file(blocker / "fitted_data.h5");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(blocker.string()), HasSubstr("Not a directory")));
  }
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("plain_file"));
}

TEST_F(DurableFileTest, WriteErrorPartWayFailsNamingTheFileAndLeavesNothing) {
  const fs::path path = folder_ / "big.h5";
  WriteText(path, "old contents");

  EXPECT_EXIT(WriteUnderFileSizeLimitAndExit(path), ::testing::ExitedWithCode(0), "");

  EXPECT_EQ(ReadText(path), "old contents");
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("big.h5"));
}

TEST_F(DurableFileTest, RelativePathUsesTheCurrentFolder) {
  const fs::path previous = fs::current_path();
  fs::current_path(folder_);
  WriteFileDurably("relative.json", "x");
  fs::current_path(previous);

  EXPECT_EQ(ReadText(folder_ / "relative.json"), "x");
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("relative.json"));
}

// ---------------------------------------------------------------------------------------------
// DurableFileSet: files published together, all or nothing.

// Faults of the result writing (FaultInjector::FailResultWrite, KillAtResultStage).
struct ResultWriteFaults final : FaultInjector {
  std::string failing_write;  // this file's write fails as on a full disk
  std::string kill_stage;     // SIGKILL at this stage
  bool FailResultWrite(std::string_view name) const override { return name == failing_write; }
  bool KillAtResultStage(std::string_view stage) const override { return stage == kill_stage; }
};

class DurableFileSetTest : public DurableFileTest {
 protected:
  // A previous set: a.json, b.json and c.h5 hold "old".
  void WritePreviousSet() const {
    for (const char* name : {"a.json", "b.json", "c.h5"}) WriteText(folder_ / name, "old");
  }
  // A set of a.json and b.json holding "new" (c.h5 replaced by none), committed.
  void CommitNewSet() const {
    DurableFileSet set(folder_, {"a.json", "b.json", "c.h5"});
    set.Add("a.json").Write("new");
    set.Add("b.json").Write("new");
    set.Commit();
  }
};

TEST_F(DurableFileSetTest, CommitReplacesThePreviousSetWhole) {
  WritePreviousSet();
  WriteText(folder_ / "unrelated.txt", "kept");

  CommitNewSet();

  EXPECT_EQ(ReadText(folder_ / "a.json"), "new");
  EXPECT_EQ(ReadText(folder_ / "b.json"), "new");
  // c.h5 belonged to the previous set only: removed, so that no file of it is mixed in.
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("a.json", "b.json", "unrelated.txt"));
}

TEST_F(DurableFileSetTest, NothingIsPublishedBeforeCommit) {
  WritePreviousSet();
  {
    DurableFileSet set(folder_, {"a.json", "b.json", "c.h5"});
    set.Add("a.json").Write("new");
    EXPECT_EQ(ReadText(folder_ / "a.json"), "old");
  }  // e.g. an exception while the second file was written

  EXPECT_THAT(FolderEntries(folder_), ElementsAre("a.json", "b.json", "c.h5"));
  EXPECT_EQ(ReadText(folder_ / "a.json"), "old");
}

TEST_F(DurableFileSetTest, AFullDiskKeepsThePreviousSetAndLeavesNoTemporaryFile) {
  WritePreviousSet();
  ResultWriteFaults faults;
  faults.failing_write = "b.json";
  const ScopedFaultInjector installed(faults);

  try {
    CommitNewSet();
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(
        error.what(),
        AllOf(StartsWith((folder_ / "b.json").string() + ": cannot write the file"),
              HasSubstr("No space left on device"),
              HasSubstr("nothing published, " + folder_.string() + " keeps its previous files")));
  }

  EXPECT_THAT(FolderEntries(folder_), ElementsAre("a.json", "b.json", "c.h5"));
  for (const char* name : {"a.json", "b.json", "c.h5"}) EXPECT_EQ(ReadText(folder_ / name), "old");
}

TEST_F(DurableFileSetTest, AFailedRenameRemovesTheWholeSetNotHalfOfIt) {
  WritePreviousSet();
  // A folder in place of b.json: its rename fails (Is a directory) after a.json's succeeded.
  fs::remove(folder_ / "b.json");
  fs::create_directories(folder_ / "b.json" / "inside");

  try {
    CommitNewSet();
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(),
                AllOf(StartsWith((folder_ / "b.json").string() + ": cannot publish the file"),
                      HasSubstr("the files of the set were removed from " + folder_.string())));
  }

  // Neither the new a.json nor the previous c.h5: no mix of two sets, no temporary file.
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("b.json"));
  EXPECT_TRUE(fs::is_directory(folder_ / "b.json"));
}

TEST_F(DurableFileSetTest, AnUnwritableFolderFailsAtAddNamingTheFile) {
  const fs::path folder = folder_ / "no_such_folder";
  DurableFileSet set(folder, {});
  try {
    set.Add("a.json");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(),
                AllOf(StartsWith((folder / "a.json").string()),
                      HasSubstr("No such file or directory"), HasSubstr("nothing published")));
  }
}

// Each stage of a commit killed with SIGKILL (in a child process): before the removals the
// previous set is whole, after them a prefix of the new set and nothing of the previous one.
struct KilledCommit {
  const char* stage;
  std::vector<std::string> entries;  // the folder afterwards, temporary files left out
  const char* a_json;                // a.json's contents ("" when absent)
};

class DurableFileSetKillTest : public DurableFileSetTest,
                               public ::testing::WithParamInterface<KilledCommit> {};

TEST_P(DurableFileSetKillTest, AKillLeavesOneSetOrAPrefixOfTheNewOne) {
  WritePreviousSet();
  ResultWriteFaults faults;
  faults.kill_stage = GetParam().stage;

  EXPECT_EXIT(
      {
        const ScopedFaultInjector installed(faults);
        CommitNewSet();
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "");

  std::vector<std::string> entries = FolderEntries(folder_);
  std::erase_if(entries, [](const std::string& name) { return name.ends_with(".tmp"); });
  EXPECT_EQ(entries, GetParam().entries);
  EXPECT_EQ(fs::exists(folder_ / "a.json") ? ReadText(folder_ / "a.json") : "", GetParam().a_json);
  // A later commit of the same names publishes the whole set and removes the leftovers.
  CommitNewSet();
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("a.json", "b.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Stages, DurableFileSetKillTest,
    ::testing::Values(KilledCommit{"written:a.json", {"a.json", "b.json", "c.h5"}, "old"},
                      KilledCommit{"before_renames", {"a.json", "b.json", "c.h5"}, "old"},
                      KilledCommit{"renamed:a.json", {"a.json"}, "new"},
                      KilledCommit{"after_renames", {"a.json", "b.json"}, "new"}),
    [](const ::testing::TestParamInfo<KilledCommit>& stage_info) {
      std::string name = stage_info.param.stage;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace homodyne::io_internal
