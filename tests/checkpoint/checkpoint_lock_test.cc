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
    lock_file_ = fs::path(folder_) / FolderLock::LockFileName(LockedFolder::kCheckpoints);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  std::string folder_;
  fs::path lock_file_;
};

TEST_F(CheckpointLockTest, TheLockFileNamesTheHolderAndGoesWithTheLock) {
  std::string note = "not cleared";
  {
    const std::unique_ptr<FolderLock> lock =
        FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
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
  FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note).reset();

  EXPECT_TRUE(fs::exists(fs::path(folder_) / "homodyne_state_batch_000004.h5"));
  EXPECT_FALSE(fs::exists(lock_file_));
}

TEST_F(CheckpointLockTest, ASecondFitOnTheFolderIsRefusedNamingTheHolder) {
  std::string note;
  const std::unique_ptr<FolderLock> held =
      FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
  ASSERT_NE(held, nullptr);
  try {
    FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
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
    const auto lock = FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, child_note);
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
    FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
    ADD_FAILURE() << "expected InputError while the child holds the lock";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("in use by PID " + std::to_string(child) + " on host"));
  }

  ::kill(child, SIGKILL);  // the kernel releases its lock; its lock file stays behind
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  const std::unique_ptr<FolderLock> taken =
      FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);

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

  const std::unique_ptr<FolderLock> lock =
      FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);

  ASSERT_NE(lock, nullptr);
  EXPECT_THAT(note, HasSubstr("took over the stale lock of PID 4242 on host node-that-rebooted"));
}

TEST_F(CheckpointLockTest, AFolderThatCannotBeCreatedIsNotLockedAndSaysWhy) {
  // Tests run as root, which ignores permission bits: a regular file in place of a parent.
  std::ofstream(root_ / "plain_file") << "x";
  const std::string folder = (root_ / "plain_file" / "checkpoints").string();
  std::string note;

  EXPECT_EQ(FolderLock::Acquire(folder, LockedFolder::kCheckpoints, note), nullptr);
  EXPECT_THAT(note, HasSubstr("cannot lock the checkpoint folder " + folder));
}

TEST_F(CheckpointLockTest, ASymbolicLinkInPlaceOfTheLockFileIsRefusedAndItsTargetKept) {
  fs::create_directories(folder_);
  const fs::path precious = root_ / "precious.txt";
  std::ofstream(precious) << "precious content\n";
  fs::create_symlink(precious, lock_file_);
  std::string note;

  try {
    FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
    FAIL() << "a symbolic link was followed";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(lock_file_.string()), HasSubstr("symbolic link")));
  }

  EXPECT_EQ(ReadText(precious), "precious content\n");
  EXPECT_TRUE(fs::is_symlink(lock_file_));
}

TEST_F(CheckpointLockTest, ALockFileThatIsNotARegularFileIsRefused) {
  fs::create_directories(lock_file_);  // a folder by the lock file's name
  std::string note;

  try {
    FolderLock::Acquire(folder_, LockedFolder::kCheckpoints, note);
    FAIL() << "a folder was taken for the lock file";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr(lock_file_.string()));
  }
}

TEST_F(CheckpointLockTest, AResultsFolderHasItsOwnLockFileAndMessage) {
  const std::string results = (root_ / "out" / "nlsq").string();
  std::string note;
  const std::unique_ptr<FolderLock> held =
      FolderLock::Acquire(results, LockedFolder::kResults, note);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->path(), (fs::path(results) / ".homodyne-results.lock").string());
  // The same folder may also be a checkpoint folder: the two locks do not collide.
  const std::unique_ptr<FolderLock> checkpoint_lock =
      FolderLock::Acquire(results, LockedFolder::kCheckpoints, note);
  EXPECT_NE(checkpoint_lock, nullptr);

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string child_note;
    try {
      FolderLock::Acquire(results, LockedFolder::kResults, child_note);
      ::_exit(1);  // taken although held
    } catch (const InputError& error) {
      const std::string text = error.what();
      ::_exit(text.find("results folder " + results + " is in use by PID") != std::string::npos &&
                      text.find("--output-dir") != std::string::npos
                  ? 0
                  : 2);
    }
  }
  int status = -1;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace homodyne
