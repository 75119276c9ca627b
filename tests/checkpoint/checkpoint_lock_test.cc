// Tests of src/checkpoint/checkpoint_lock.h: one live process per checkpoint folder, its host and
// PID in the lock file, a stale lock of a dead process taken over, the lock released on every
// path.
#include "checkpoint/checkpoint_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string ReadText(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

class CheckpointLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("homodyne_lock_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    folder_ = (root_ / "checkpoints").string();
    lock_file_ = fs::path(folder_) / CheckpointFolderLock::kLockFileName;
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  std::string folder_;
  fs::path lock_file_;
};

TEST_F(CheckpointLockTest, TheLockFileNamesTheHolderAndGoesWithTheLock) {
  std::string note = "not cleared";
  {
    const std::unique_ptr<CheckpointFolderLock> lock = CheckpointFolderLock::Acquire(folder_, note);
    ASSERT_NE(lock, nullptr);
    EXPECT_THAT(note, IsEmpty());
    EXPECT_EQ(ReadText(lock_file_),
              "PID " + std::to_string(::getpid()) + " on host " + HostName() + "\n");
  }
  // Released: the lock file is gone, and so is the folder the lock created (empty).
  EXPECT_FALSE(fs::exists(lock_file_));
  EXPECT_FALSE(fs::exists(folder_));
}

TEST_F(CheckpointLockTest, AFolderThatExistedStaysWithItsCheckpoints) {
  fs::create_directories(folder_);
  std::ofstream(fs::path(folder_) / "homodyne_state_batch_000004.h5") << "x";
  std::string note;
  CheckpointFolderLock::Acquire(folder_, note).reset();

  EXPECT_TRUE(fs::exists(fs::path(folder_) / "homodyne_state_batch_000004.h5"));
  EXPECT_FALSE(fs::exists(lock_file_));
}

TEST_F(CheckpointLockTest, ASecondFitOnTheFolderIsRefusedNamingTheHolder) {
  std::string note;
  const std::unique_ptr<CheckpointFolderLock> held = CheckpointFolderLock::Acquire(folder_, note);
  ASSERT_NE(held, nullptr);
  try {
    CheckpointFolderLock::Acquire(folder_, note);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("checkpoint folder " + folder_ + " is in use by PID " +
                                std::to_string(::getpid()) + " on host " + HostName()),
                      HasSubstr(lock_file_.string())));
  }
  EXPECT_TRUE(fs::exists(lock_file_));  // the holder's lock is untouched
}

TEST_F(CheckpointLockTest, AnotherLiveProcessHoldsItUntilItIsKilled) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string child_note;
    const auto lock = CheckpointFolderLock::Acquire(folder_, child_note);
    const char byte = lock != nullptr ? '1' : '0';
    if (::write(ready[1], &byte, 1) != 1) ::_exit(1);
    ::pause();  // holds the lock until killed
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, '1');
  std::string note;
  try {
    CheckpointFolderLock::Acquire(folder_, note);
    ADD_FAILURE() << "expected InputError while the child holds the lock";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("in use by PID " + std::to_string(child) + " on host"));
  }

  ::kill(child, SIGKILL);  // the kernel releases its lock; its lock file stays behind
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  const std::unique_ptr<CheckpointFolderLock> taken = CheckpointFolderLock::Acquire(folder_, note);

  ASSERT_NE(taken, nullptr);
  EXPECT_THAT(note, HasSubstr("took over the stale lock of PID " + std::to_string(child) +
                              " on host " + HostName() + " on the checkpoint folder " + folder_));
  EXPECT_EQ(ReadText(lock_file_),
            "PID " + std::to_string(::getpid()) + " on host " + HostName() + "\n");
}

TEST_F(CheckpointLockTest, AStaleLockFileIsTakenOverWithANote) {
  fs::create_directories(folder_);
  std::ofstream(lock_file_) << "PID 4242 on host node-that-rebooted\n";
  std::string note;

  const std::unique_ptr<CheckpointFolderLock> lock = CheckpointFolderLock::Acquire(folder_, note);

  ASSERT_NE(lock, nullptr);
  EXPECT_THAT(note, HasSubstr("took over the stale lock of PID 4242 on host node-that-rebooted"));
}

TEST_F(CheckpointLockTest, AFolderThatCannotBeCreatedIsNotLockedAndSaysWhy) {
  // Tests run as root, which ignores permission bits: a regular file in place of a parent.
  std::ofstream(root_ / "plain_file") << "x";
  const std::string folder = (root_ / "plain_file" / "checkpoints").string();
  std::string note;

  EXPECT_EQ(CheckpointFolderLock::Acquire(folder, note), nullptr);
  EXPECT_THAT(note, HasSubstr("cannot lock the checkpoint folder " + folder));
}

}  // namespace
}  // namespace homodyne
