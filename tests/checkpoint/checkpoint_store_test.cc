// Tests of the checkpoint store and SHA-256 (src/checkpoint/checkpoint_store.h,
// docs/design.md section 6).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/fault_injection.h"
#include "checkpoint/checkpoint_store.h"
#include "homodyne/checkpoint_errors.h"
#include "homodyne/errors.h"
#include "io/hdf5_util.h"
#include "support/listed_faults.h"

namespace homodyne {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

// ---------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4 examples; other lengths from Python's hashlib).

TEST(Sha256Test, FipsVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, PaddingBoundaries) {
  // Lengths around the one-block / two-block padding boundary (55, 56 bytes) and block ends.
  auto message = [](size_t n) {
    std::string text(n, '\0');
    for (size_t i = 0; i < n; ++i) text[i] = static_cast<char>((i * 7 + 3) % 256);
    return text;
  };
  EXPECT_EQ(Sha256Hex(message(55)),
            "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b");
  EXPECT_EQ(Sha256Hex(message(56)),
            "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27");
  EXPECT_EQ(Sha256Hex(message(63)),
            "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055");
  EXPECT_EQ(Sha256Hex(message(64)),
            "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241");
  EXPECT_EQ(Sha256Hex(message(119)),
            "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e");
  EXPECT_EQ(Sha256Hex(message(120)),
            "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5");
}

// ---------------------------------------------------------------------------------------------
// Helpers.

constexpr char kConfigSha[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr char kFingerprint[] = "path=/data/run.h5\nsize=1000\nangles=3 times=100";

// A checkpoint with P parameters whose values are all distinct (so a transposed or shifted array
// would be noticed); with a PassState when `with_pass`.
Checkpoint MakeCheckpoint(int64_t global_batch, int p = 13, bool with_pass = true) {
  Checkpoint checkpoint;
  LevenbergMarquardtState& lm = checkpoint.lm;
  lm.theta = Eigen::VectorXd::LinSpaced(p, 0.1, 0.1 * p) / 3.0;
  lm.jtj.resize(p, p);
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) lm.jtj(i, j) = std::sin(1.0 + i + 0.37 * j) * std::exp(0.01 * i);
  }
  lm.jtr = Eigen::VectorXd::LinSpaced(p, -1.0, 1.0) / 7.0;
  lm.chi2 = 1234.5678901234567;
  lm.num_points = 123456789012;
  lm.damping_mu = 1e-3 / 3.0;
  lm.damping_nu = 8.0;
  lm.trust_region_radius = 0.125;
  lm.consecutive_rejections = 2;
  lm.iterations = 17;
  lm.accepted_steps = 12;
  lm.rejected_steps = 5;
  lm.passes = 20;
  lm.cost_passes = 3;
  lm.initial_chi2 = 99999.125;
  lm.chi2_history = {99999.125, 5000.0 / 3.0, 1234.5678901234567};
  if (with_pass) {
    PassState pass;
    pass.theta = lm.theta * 1.000001;
    pass.full_pass = true;
    pass.next_batch = 37;
    pass.jtj = Eigen::MatrixXd::Zero(p, p);
    for (int i = 0; i < p; ++i) {
      for (int j = 0; j <= i; ++j) pass.jtj(i, j) = 1.0 / (1.0 + i + 2.0 * j);  // lower only
    }
    pass.jtr = lm.jtr * -0.5;
    pass.chi2 = 617.25;
    pass.finite_points = 4242;
    checkpoint.pass = pass;
    // A global phase's trail (empty in the checkpoints without a pass).
    GlobalSearchTrail& trail = checkpoint.global_search;
    trail.evaluations = {3.25, std::numeric_limits<double>::infinity(), 1.0 / 3.0};
    trail.projection_state = Eigen::VectorXd::LinSpaced(6, 0.2, 1.1) / 7.0;
    for (int k = 0; k < 2; ++k) {
      GlobalMinimum minimum;
      minimum.reduced = lm.theta * (1.0 + 0.5 * k);
      minimum.chi2 = 100.0 / (3.0 + k);
      minimum.start = k == 0 ? 0 : -1;
      minimum.iterations = 7 + k;
      minimum.status = k == 0 ? "converged (ftol)" : "max iterations";
      minimum.passes = 123 + k;
      trail.minima.push_back(minimum);
    }
  }
  checkpoint.statistics = {
      .batches = global_batch, .retries = 4, .read_failures = 1, .checkpoint_failures = 2};
  checkpoint.global_batch = global_batch;
  checkpoint.config_sha256 = kConfigSha;
  checkpoint.data_fingerprint = kFingerprint;
  checkpoint.engine_version = "0.1.0";
  checkpoint.timestamp_utc = "2026-06-01T12:34:56Z";
  return checkpoint;
}

// Bitwise equality of doubles (NaN payloads and signed zeros included).
bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void ExpectSameBits(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b, const std::string& what) {
  ASSERT_EQ(a.rows(), b.rows()) << what;
  ASSERT_EQ(a.cols(), b.cols()) << what;
  for (Eigen::Index i = 0; i < a.rows(); ++i) {
    for (Eigen::Index j = 0; j < a.cols(); ++j) {
      EXPECT_TRUE(SameBits(a(i, j), b(i, j))) << what << "(" << i << "," << j << ")";
    }
  }
}

void ExpectSameBits(const std::vector<double>& a, const std::vector<double>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(SameBits(a[k], b[k])) << what << "[" << k << "]";
  }
}

// Every field of two checkpoints, bit for bit.
void ExpectBitwiseEqual(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.lm.solver, b.lm.solver);
  ExpectSameBits(a.lm.theta, b.lm.theta, "lm.theta");
  ExpectSameBits(a.lm.jtj, b.lm.jtj, "lm.jtj");
  ExpectSameBits(a.lm.jtr, b.lm.jtr, "lm.jtr");
  EXPECT_TRUE(SameBits(a.lm.chi2, b.lm.chi2));
  EXPECT_EQ(a.lm.num_points, b.lm.num_points);
  EXPECT_TRUE(SameBits(a.lm.damping_mu, b.lm.damping_mu));
  EXPECT_TRUE(SameBits(a.lm.damping_nu, b.lm.damping_nu));
  EXPECT_TRUE(SameBits(a.lm.trust_region_radius, b.lm.trust_region_radius));
  EXPECT_EQ(a.lm.consecutive_rejections, b.lm.consecutive_rejections);
  EXPECT_EQ(a.lm.iterations, b.lm.iterations);
  EXPECT_EQ(a.lm.accepted_steps, b.lm.accepted_steps);
  EXPECT_EQ(a.lm.rejected_steps, b.lm.rejected_steps);
  EXPECT_EQ(a.lm.passes, b.lm.passes);
  EXPECT_EQ(a.lm.cost_passes, b.lm.cost_passes);
  EXPECT_TRUE(SameBits(a.lm.initial_chi2, b.lm.initial_chi2));
  ExpectSameBits(a.lm.chi2_history, b.lm.chi2_history, "lm.chi2_history");
  ASSERT_EQ(a.pass.has_value(), b.pass.has_value());
  if (a.pass) {
    ExpectSameBits(a.pass->theta, b.pass->theta, "pass.theta");
    EXPECT_EQ(a.pass->full_pass, b.pass->full_pass);
    EXPECT_EQ(a.pass->next_batch, b.pass->next_batch);
    ExpectSameBits(a.pass->jtj, b.pass->jtj, "pass.jtj");
    ExpectSameBits(a.pass->jtr, b.pass->jtr, "pass.jtr");
    EXPECT_TRUE(SameBits(a.pass->chi2, b.pass->chi2));
    EXPECT_EQ(a.pass->finite_points, b.pass->finite_points);
  }
  ExpectSameBits(a.global_search.evaluations, b.global_search.evaluations, "evaluations");
  ExpectSameBits(a.global_search.projection_state, b.global_search.projection_state,
                 "projection_state");
  ASSERT_EQ(a.global_search.minima.size(), b.global_search.minima.size());
  for (size_t k = 0; k < a.global_search.minima.size(); ++k) {
    const GlobalMinimum& x = a.global_search.minima[k];
    const GlobalMinimum& y = b.global_search.minima[k];
    ExpectSameBits(x.reduced, y.reduced, "minimum.reduced");
    EXPECT_TRUE(SameBits(x.chi2, y.chi2));
    EXPECT_EQ(x.start, y.start);
    EXPECT_EQ(x.iterations, y.iterations);
    EXPECT_EQ(x.status, y.status);
    EXPECT_EQ(x.passes, y.passes);
  }
  ASSERT_EQ(a.profile_intervals.points.size(), b.profile_intervals.points.size());
  for (size_t k = 0; k < a.profile_intervals.points.size(); ++k) {
    const ProfilePointRecord& x = a.profile_intervals.points[k];
    const ProfilePointRecord& y = b.profile_intervals.points[k];
    EXPECT_EQ(x.parameter, y.parameter);
    EXPECT_TRUE(SameBits(x.value, y.value));
    EXPECT_TRUE(SameBits(x.chi2, y.chi2));
  }
  EXPECT_EQ(a.statistics.batches, b.statistics.batches);
  EXPECT_EQ(a.statistics.retries, b.statistics.retries);
  EXPECT_EQ(a.statistics.read_failures, b.statistics.read_failures);
  EXPECT_EQ(a.statistics.checkpoint_failures, b.statistics.checkpoint_failures);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.config_sha256, b.config_sha256);
  EXPECT_EQ(a.data_fingerprint, b.data_fingerprint);
  EXPECT_EQ(a.engine_version, b.engine_version);
  EXPECT_EQ(a.timestamp_utc, b.timestamp_utc);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << bytes;
}

// Every entry in a folder, names only, sorted.
std::vector<std::string> FolderEntries(const fs::path& folder) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Number of filters on a dataset of a checkpoint file.
int FilterCount(const std::string& path, const std::string& dataset_path) {
  io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(file.valid());
  io_internal::Hid dataset =
      io_internal::DatasetHid(H5Dopen2(file.get(), dataset_path.c_str(), H5P_DEFAULT));
  EXPECT_TRUE(dataset.valid());
  io_internal::Hid creation = io_internal::PlistHid(H5Dget_create_plist(dataset.get()));
  return H5Pget_nfilters(creation.get());
}

// The /lm/solver attribute of a checkpoint file, as stored (fixed-length, NUL-padded text).
std::string SolverText(const std::string& path) {
  io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  EXPECT_TRUE(file.valid());
  io_internal::Hid attribute = io_internal::AttributeHid(
      H5Aopen_by_name(file.get(), "/lm", "solver", H5P_DEFAULT, H5P_DEFAULT));
  EXPECT_TRUE(attribute.valid());
  io_internal::Hid type = io_internal::TypeHid(H5Aget_type(attribute.get()));
  std::string text(H5Tget_size(type.get()), '\0');
  EXPECT_GE(H5Aread(attribute.get(), type.get(), text.data()), 0);
  return text.substr(0, text.find('\0'));
}

// In a death-test child: limits files to 16 KiB, saves a ~170 KB checkpoint (P = 100) and exits
// 0 if the save threw InputError naming `path` and the OS reason, else 1. A normal exit() runs
// HDF5's exit handler, which crashes if a failed write left an HDF5 file half closed.
void SaveUnderFileSizeLimitAndExit(CheckpointStore& store, const std::string& path) {
  ::signal(SIGXFSZ, SIG_IGN);
  const rlimit limit{16384, 16384};
  ::setrlimit(RLIMIT_FSIZE, &limit);
  bool threw_with_reason = false;
  try {
    store.Save(MakeCheckpoint(20, 100));
  } catch (const InputError& error) {
    const std::string message = error.what();
    threw_with_reason = message.find(path) != std::string::npos &&
                        message.find("File too large") != std::string::npos;
    if (!threw_with_reason) std::fprintf(stderr, "message: %s\n", message.c_str());
  }
  std::exit(threw_with_reason ? 0 : 1);
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    folder_ =
        fs::temp_directory_path() /
        ("homodyne_checkpoint_" + std::string(info->name()) + "_" + std::to_string(::getpid())) /
        "checkpoints";
    fs::remove_all(folder_.parent_path());
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(folder_, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(folder_.parent_path(), ignored);
  }

  CheckpointStore Store(int keep_last = 3, bool compression = true) const {
    return CheckpointStore(CheckpointOptions{folder_.string(), keep_last, compression});
  }
  std::string PathOf(int64_t batch) const {
    char name[64];
    std::snprintf(name, sizeof name, "homodyne_state_batch_%06lld.h5",
                  static_cast<long long>(batch));
    return (folder_ / name).string();
  }
  std::optional<Checkpoint> Load(const CheckpointStore& store, std::vector<std::string>* warnings) {
    return store.LoadNewestValid(kConfigSha, kFingerprint, warnings);
  }

  fs::path folder_;
};

// ---------------------------------------------------------------------------------------------
// Round trips.

TEST_F(CheckpointStoreTest, SaveCreatesFolderAndNamesFileByGlobalBatch) {
  CheckpointStore store = Store();

  const CheckpointSaveReport report = store.Save(MakeCheckpoint(42));

  EXPECT_EQ(report.path, PathOf(42));
  EXPECT_TRUE(fs::is_regular_file(report.path));
  EXPECT_EQ(report.bytes, static_cast<int64_t>(fs::file_size(report.path)));
  EXPECT_GT(report.seconds, 0.0);
  EXPECT_THAT(FolderEntries(folder_), ElementsAre("homodyne_state_batch_000042.h5"));
}

TEST_F(CheckpointStoreTest, RoundTripWithPassIsBitwise) {
  CheckpointStore store = Store();
  const Checkpoint saved = MakeCheckpoint(10, 13, /*with_pass=*/true);
  store.Save(saved);

  std::vector<std::string> warnings;
  const std::optional<Checkpoint> loaded = Load(store, &warnings);

  ASSERT_TRUE(loaded.has_value());
  EXPECT_THAT(warnings, IsEmpty());
  ExpectBitwiseEqual(saved, *loaded);
}

// The format_version attribute of the checkpoint file at `path`.
int64_t FormatVersionInFile(const std::string& path) {
  io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  io_internal::Hid attribute =
      io_internal::AttributeHid(H5Aopen(file.get(), "format_version", H5P_DEFAULT));
  int64_t version = -1;
  EXPECT_GE(H5Aread(attribute.get(), H5T_NATIVE_INT64, &version), 0);
  return version;
}

// Profile points (docs/checkpoints.md): a checkpoint that holds some is a format_version 5 file
// and round-trips bit for bit, NaN chi2 (a failed refit) included; one without stays a version 4
// file, what builds before them wrote and read.
TEST_F(CheckpointStoreTest, ProfilePointsRoundTripInAVersion5File) {
  CheckpointStore store = Store();
  Checkpoint saved = MakeCheckpoint(10, 13, /*with_pass=*/true);
  saved.profile_intervals.points = {{0, 1102.0625, 267412.5},
                                    {0, 1.0 / 3.0, std::numeric_limits<double>::quiet_NaN()},
                                    {6, -0.0, 5e-324}};
  store.Save(saved);
  EXPECT_EQ(FormatVersionInFile(store.PathOf(10)), 5);

  std::vector<std::string> warnings;
  const std::optional<Checkpoint> loaded = Load(store, &warnings);

  ASSERT_TRUE(loaded.has_value());
  EXPECT_THAT(warnings, IsEmpty());
  ExpectBitwiseEqual(saved, *loaded);

  CheckpointStore other = Store();
  const Checkpoint without = MakeCheckpoint(20, 13, /*with_pass=*/true);
  other.Save(without);
  EXPECT_EQ(FormatVersionInFile(other.PathOf(20)), 4);
}

TEST_F(CheckpointStoreTest, RoundTripWithoutPassIsBitwise) {
  CheckpointStore store = Store();
  const Checkpoint saved = MakeCheckpoint(10, 13, /*with_pass=*/false);
  store.Save(saved);

  const std::optional<Checkpoint> loaded = Load(store, nullptr);

  ASSERT_TRUE(loaded.has_value());
  EXPECT_FALSE(loaded->pass.has_value());
  ExpectBitwiseEqual(saved, *loaded);
}

// /lm/solver is the text "lm" or "ceres" (docs/checkpoints.md), whatever the enum's values: files
// written before StateSolver existed load unchanged.
TEST_F(CheckpointStoreTest, SolverIsStoredAsItsNameAndRoundTrips) {
  const std::pair<StateSolver, std::string> cases[] = {{StateSolver::kLmCore, "lm"},
                                                       {StateSolver::kCeres, "ceres"}};
  for (const auto& [solver, text] : cases) {
    SCOPED_TRACE(text);
    CheckpointStore store = Store();
    Checkpoint saved = MakeCheckpoint(10, 13, /*with_pass=*/false);
    saved.lm.solver = solver;
    const CheckpointSaveReport report = store.Save(saved);

    const std::optional<Checkpoint> loaded = Load(store, nullptr);

    EXPECT_EQ(SolverText(report.path), text);
    ASSERT_TRUE(loaded.has_value());
    EXPECT_EQ(loaded->lm.solver, solver);
    fs::remove_all(folder_);
  }
}

TEST_F(CheckpointStoreTest, RoundTripOfSpecialDoublesIsBitwise) {
  CheckpointStore store = Store();
  Checkpoint saved = MakeCheckpoint(10);
  const double quiet_nan = std::numeric_limits<double>::quiet_NaN();
  double payload_nan = 0.0;
  const uint64_t payload_bits = 0x7ff8dead'beef1234ULL;
  std::memcpy(&payload_nan, &payload_bits, sizeof payload_nan);
  saved.lm.chi2_history = {quiet_nan,
                           -quiet_nan,
                           payload_nan,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::denorm_min(),
                           -4.9e-320,
                           -0.0,
                           0.0,
                           std::numeric_limits<double>::max()};
  saved.lm.chi2 = std::numeric_limits<double>::infinity();
  saved.lm.jtj(0, 1) = payload_nan;
  saved.pass->chi2 = -0.0;
  saved.pass->full_pass = false;  // a Cost pass: no partial normal equations
  saved.pass->jtj.resize(0, 0);
  saved.pass->jtr.resize(0);
  store.Save(saved);

  const std::optional<Checkpoint> loaded = Load(store, nullptr);

  ASSERT_TRUE(loaded.has_value());
  ExpectBitwiseEqual(saved, *loaded);
}

TEST_F(CheckpointStoreTest, RoundTripOfEmptyStateBeforeFirstIteration) {
  // In the first pass the LM state is still empty (theta of size 0); only the pass is set.
  CheckpointStore store = Store();
  Checkpoint saved;
  saved.pass = MakeCheckpoint(3).pass;
  saved.global_batch = 3;
  saved.config_sha256 = kConfigSha;
  saved.data_fingerprint = kFingerprint;
  store.Save(saved);

  const std::optional<Checkpoint> loaded = Load(store, nullptr);

  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->lm.theta.size(), 0);
  EXPECT_TRUE(loaded->engine_version.empty());
  ExpectBitwiseEqual(saved, *loaded);
}

TEST_F(CheckpointStoreTest, FileIsPrivateToTheOwner) {
  CheckpointStore store = Store();

  const CheckpointSaveReport report = store.Save(MakeCheckpoint(10));

  struct stat status {};
  ASSERT_EQ(::stat(report.path.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 07777, 0600u);
}

TEST_F(CheckpointStoreTest, CompressionOnAndOffBothRoundTripAndOnIsSmaller) {
  // P = 100 with a repetitive J^T J (period 10), as deflate can exploit.
  Checkpoint saved = MakeCheckpoint(10, 100);
  for (int i = 0; i < 100; ++i) {
    for (int j = 0; j < 100; ++j) saved.lm.jtj(i, j) = 1.0 + (i * 100 + j) % 10;
  }
  CheckpointStore compressed = Store(3, /*compression=*/true);
  const CheckpointSaveReport compressed_report = compressed.Save(saved);
  const std::optional<Checkpoint> compressed_loaded = Load(compressed, nullptr);
  const int compressed_filters = FilterCount(compressed_report.path, "/lm/jtj");
  fs::remove_all(folder_);
  CheckpointStore plain = Store(3, /*compression=*/false);
  const CheckpointSaveReport plain_report = plain.Save(saved);
  const std::optional<Checkpoint> plain_loaded = Load(plain, nullptr);
  const int plain_filters = FilterCount(plain_report.path, "/lm/jtj");

  ASSERT_TRUE(compressed_loaded.has_value());
  ASSERT_TRUE(plain_loaded.has_value());
  ExpectBitwiseEqual(saved, *compressed_loaded);
  ExpectBitwiseEqual(saved, *plain_loaded);
  EXPECT_EQ(compressed_filters, 2);  // shuffle + deflate
  EXPECT_EQ(plain_filters, 0);
  EXPECT_LT(compressed_report.bytes, plain_report.bytes / 2)
      << compressed_report.bytes << " vs " << plain_report.bytes;
}

// ---------------------------------------------------------------------------------------------
// Listing and pruning.

TEST_F(CheckpointStoreTest, KeepsTheNewestKeepLast) {
  CheckpointStore store = Store(/*keep_last=*/3);

  for (int64_t batch : {10, 20, 30, 40, 50, 60}) store.Save(MakeCheckpoint(batch));

  EXPECT_THAT(store.List(), ElementsAre(PathOf(40), PathOf(50), PathOf(60)));
  EXPECT_THAT(FolderEntries(folder_), SizeIs(3));  // no temporary files left
}

TEST_F(CheckpointStoreTest, KeepLastOneKeepsOnlyTheNewest) {
  CheckpointStore store = Store(/*keep_last=*/1);

  for (int64_t batch : {10, 20, 30}) store.Save(MakeCheckpoint(batch));

  EXPECT_THAT(store.List(), ElementsAre(PathOf(30)));
}

TEST_F(CheckpointStoreTest, FileJustSavedIsNeverPruned) {
  // Leftovers of another run with higher batch numbers do not delete the new save.
  CheckpointStore store = Store(/*keep_last=*/2);
  for (int64_t batch : {500, 600, 700}) store.Save(MakeCheckpoint(batch));

  store.Save(MakeCheckpoint(10));

  EXPECT_THAT(store.List(), ElementsAre(PathOf(10), PathOf(700)));
}

TEST_F(CheckpointStoreTest, ListSortsByBatchNumberAndIgnoresOtherFiles) {
  CheckpointStore store = Store(/*keep_last=*/10);
  store.Save(MakeCheckpoint(1000000));  // seven digits: the name widens
  store.Save(MakeCheckpoint(999999));
  store.Save(MakeCheckpoint(5));
  WriteBytes((folder_ / ".homodyne_state_batch_abc123.h5.tmp").string(), "partial");
  WriteBytes((folder_ / "homodyne_state_batch_12x.h5").string(), "x");
  WriteBytes((folder_ / "notes.txt").string(), "x");

  EXPECT_THAT(store.List(), ElementsAre(PathOf(5), PathOf(999999), PathOf(1000000)));
}

TEST_F(CheckpointStoreTest, SaveRemovesOnlyStaleTemporaryFiles) {
  // A save killed long ago left a temporary file; one from a save in progress is recent.
  fs::create_directories(folder_);
  const fs::path stale = folder_ / ".homodyne_state_batch_old123.h5.tmp";
  const fs::path recent = folder_ / ".homodyne_state_batch_new456.h5.tmp";
  WriteBytes(stale.string(), "partial");
  WriteBytes(recent.string(), "partial");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  CheckpointStore store = Store();

  store.Save(MakeCheckpoint(10));

  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(recent));
}

TEST_F(CheckpointStoreTest, AbsentFolderHasNoCheckpoint) {
  CheckpointStore store = Store();
  std::vector<std::string> warnings;

  EXPECT_THAT(store.List(), IsEmpty());
  EXPECT_FALSE(Load(store, &warnings).has_value());
  EXPECT_THAT(warnings, IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// Corrupt files: skipped with a warning, the older one is used.

class CorruptNewestTest : public CheckpointStoreTest {
 protected:
  // Saves batches 10 and 20 (P = 100: array data fill most of the file, so its middle is data,
  // not the slack HDF5 leaves between metadata blocks), damages 20 with `damage`, and loads.
  void SaveTwoAndDamageNewest(const std::function<void(const std::string&)>& damage) {
    CheckpointStore store = Store();
    older_ = MakeCheckpoint(10);
    store.Save(older_);
    store.Save(MakeCheckpoint(20, 100));
    damage(PathOf(20));
    loaded_ = Load(store, &warnings_);
  }

  Checkpoint older_;
  std::optional<Checkpoint> loaded_;
  std::vector<std::string> warnings_;
};

TEST_F(CorruptNewestTest, FlippedBytesInTheMiddleAreSkipped) {
  SaveTwoAndDamageNewest([](const std::string& path) {
    std::string bytes = ReadBytes(path);
    for (size_t k = bytes.size() / 2; k < bytes.size() / 2 + 16; ++k) bytes[k] ^= 0x5a;
    WriteBytes(path, bytes);
  });

  ASSERT_TRUE(loaded_.has_value());
  ExpectBitwiseEqual(older_, *loaded_);
  ASSERT_THAT(warnings_, SizeIs(1));
  EXPECT_THAT(warnings_[0], AllOf(HasSubstr(PathOf(20)), HasSubstr("skipped")));
}

TEST_F(CorruptNewestTest, TruncatedFileIsSkipped) {
  SaveTwoAndDamageNewest(
      [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); });

  ASSERT_TRUE(loaded_.has_value());
  ExpectBitwiseEqual(older_, *loaded_);
  ASSERT_THAT(warnings_, SizeIs(1));
  EXPECT_THAT(warnings_[0], AllOf(HasSubstr(PathOf(20)), HasSubstr("not a readable checkpoint"),
                                  HasSubstr("skipped")));
}

TEST_F(CorruptNewestTest, EmptiedFileIsSkipped) {
  SaveTwoAndDamageNewest([](const std::string& path) { fs::resize_file(path, 0); });

  ASSERT_TRUE(loaded_.has_value());
  ExpectBitwiseEqual(older_, *loaded_);
  ASSERT_THAT(warnings_, SizeIs(1));
  EXPECT_THAT(warnings_[0], AllOf(HasSubstr(PathOf(20)), HasSubstr("not a readable checkpoint")));
}

TEST_F(CorruptNewestTest, EditedValueFailsTheContentChecksum) {
  // A well-formed file whose value changed after the save (here lm/chi2 rewritten through HDF5).
  SaveTwoAndDamageNewest([](const std::string& path) {
    io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    io_internal::Hid group = io_internal::GroupHid(H5Gopen2(file.get(), "/lm", H5P_DEFAULT));
    io_internal::WriteAttribute(group.get(), "chi2", 1.0);
  });

  ASSERT_TRUE(loaded_.has_value());
  ExpectBitwiseEqual(older_, *loaded_);
  ASSERT_THAT(warnings_, SizeIs(1));
  EXPECT_THAT(warnings_[0],
              AllOf(HasSubstr(PathOf(20)), HasSubstr("content checksum mismatch (corrupt)")));
}

TEST_F(CorruptNewestTest, OtherFormatVersionIsSkipped) {
  SaveTwoAndDamageNewest([](const std::string& path) {
    io_internal::Hid file = io_internal::FileHid(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    io_internal::WriteAttribute(file.get(), "format_version", int64_t{2});
  });

  ASSERT_TRUE(loaded_.has_value());
  ASSERT_THAT(warnings_, SizeIs(1));
  EXPECT_THAT(warnings_[0], HasSubstr("format_version 2, this build reads 4 and 5"));
}

TEST_F(CheckpointStoreTest, FileRenamedByHandIsSkipped) {
  CheckpointStore store = Store();
  const Checkpoint saved = MakeCheckpoint(10);
  store.Save(saved);
  fs::copy_file(PathOf(10), PathOf(30));
  std::vector<std::string> warnings;

  const std::optional<Checkpoint> loaded = Load(store, &warnings);

  ASSERT_TRUE(loaded.has_value());
  ExpectBitwiseEqual(saved, *loaded);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], AllOf(HasSubstr(PathOf(30)), HasSubstr("global_batch 10")));
}

TEST_F(CheckpointStoreTest, CorruptFileOnAnotherThreadPrintsNoHdf5Diagnostics) {
  // HDF5 error stacks are per thread in a thread-safe build; the store silences each thread.
  CheckpointStore store = Store();
  store.Save(MakeCheckpoint(10));
  WriteBytes(PathOf(20), "");
  std::vector<std::string> warnings;

  ::testing::internal::CaptureStderr();
  std::thread([&] { Load(store, &warnings); }).join();
  const std::string printed = ::testing::internal::GetCapturedStderr();

  EXPECT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(printed, Not(HasSubstr("HDF5-DIAG")));
}

TEST_F(CheckpointStoreTest, ByteFlipAnywhereNeverCrashesNorReturnsWrongValues) {
  // A sweep over the file: each flip is either harmless (unused bytes; the newest checkpoint
  // still validates, bit for bit) or detected (the older one is returned with a warning).
  CheckpointStore store = Store();
  const Checkpoint older = MakeCheckpoint(10);
  const Checkpoint newest = MakeCheckpoint(20);
  store.Save(older);
  store.Save(newest);
  const std::string pristine = ReadBytes(PathOf(20));
  const size_t step = std::max<size_t>(1, pristine.size() / 151);

  int detected = 0;
  int tried = 0;
  for (size_t offset = 0; offset < pristine.size(); offset += step, ++tried) {
    std::string bytes = pristine;
    bytes[offset] ^= 0x10;
    WriteBytes(PathOf(20), bytes);
    std::vector<std::string> warnings;
    const std::optional<Checkpoint> loaded = Load(store, &warnings);
    ASSERT_TRUE(loaded.has_value()) << "offset " << offset;
    if (warnings.empty()) {
      ExpectBitwiseEqual(newest, *loaded);
    } else {
      ++detected;
      EXPECT_THAT(warnings, SizeIs(1));
      ExpectBitwiseEqual(older, *loaded);
    }
  }
  // The file has no unused bytes (compact attributes, no space aggregation): nearly every flip
  // fails an HDF5 metadata checksum or the content checksum.
  EXPECT_GE(detected, tried * 95 / 100) << detected << " of " << tried;
}

// ---------------------------------------------------------------------------------------------
// Refusals: a valid checkpoint of another config or data set.

TEST_F(CheckpointStoreTest, OtherConfigIsRefusedNamingBothHashes) {
  CheckpointStore store = Store();
  store.Save(MakeCheckpoint(10));
  const std::string other_config(64, 'f');

  try {
    store.LoadNewestValid(other_config, kFingerprint, nullptr);
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(PathOf(10)), HasSubstr("different config"),
                                    HasSubstr("0123456789ab..."), HasSubstr("ffffffffffff..."),
                                    HasSubstr("--no-resume")));
  }
}

TEST_F(CheckpointStoreTest, OtherDataSetIsRefusedNamingWhatDiffers) {
  CheckpointStore store = Store();
  store.Save(MakeCheckpoint(10));
  const std::string other_data = "path=/data/run.h5\nsize=2000\nangles=3 times=100";

  try {
    store.LoadNewestValid(kConfigSha, other_data, nullptr);
    FAIL() << "expected CheckpointMismatchError";
  } catch (const CheckpointMismatchError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(PathOf(10)), HasSubstr("different data set"),
                                    HasSubstr("size=1000"), HasSubstr("size=2000"),
                                    EndsWith("remove it or use --no-resume")));
    // Another shell words the way to start afresh its own way (Python: resume=False).
    EXPECT_THAT(error.Message("resume=False"),
                AllOf(HasSubstr("different data set"), EndsWith("remove it or use resume=False")));
  }
}

// ---------------------------------------------------------------------------------------------
// Failed saves leave nothing behind.

TEST_F(CheckpointStoreTest, UnwritableFolderThrowsAndLeavesNoFile) {
  if (::geteuid() == 0) {
    // Root ignores permission bits; a folder under /proc cannot be created by anyone.
    CheckpointStore store(CheckpointOptions{"/proc/homodyne_no_such_dir/checkpoints", 3, true});
    try {
      store.Save(MakeCheckpoint(10));
      FAIL() << "expected InputError";
    } catch (const InputError& error) {
      EXPECT_THAT(error.what(), AllOf(HasSubstr("/proc/homodyne_no_such_dir/checkpoints"),
                                      HasSubstr("cannot create the checkpoint folder")));
    }
    EXPECT_FALSE(fs::exists("/proc/homodyne_no_such_dir"));
    return;
  }
  fs::create_directories(folder_);
  fs::permissions(folder_, fs::perms::owner_read | fs::perms::owner_exec);
  CheckpointStore store = Store();

  try {
    store.Save(MakeCheckpoint(10));
    FAIL() << "expected InputError";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr(PathOf(10)), HasSubstr("Permission denied")));
  }
  EXPECT_THAT(FolderEntries(folder_), IsEmpty());
}

TEST_F(CheckpointStoreTest, WriteErrorMidFileThrowsAndLeavesPreviousCheckpointOnly) {
  // RLIMIT_FSIZE makes write() fail with EFBIG part way through the file, as a full disk would
  // (in a child process: the limit must not outlive the test).
  CheckpointStore store = Store();
  const Checkpoint older = MakeCheckpoint(10);
  store.Save(older);

  EXPECT_EXIT(SaveUnderFileSizeLimitAndExit(store, PathOf(20)), ::testing::ExitedWithCode(0), "");

  EXPECT_THAT(FolderEntries(folder_), ElementsAre("homodyne_state_batch_000010.h5"));
  const std::optional<Checkpoint> loaded = Load(store, nullptr);
  ASSERT_TRUE(loaded.has_value());
  ExpectBitwiseEqual(older, *loaded);
}

TEST_F(CheckpointStoreTest, CrashDuringWriteLeavesPreviousCheckpointValid) {
  // The injected fault (src/base/fault_injection.h) aborts half way through writing the
  // temporary file (like kill -9); installed in the death test's child only.
  CheckpointStore store = Store();
  const Checkpoint older = MakeCheckpoint(10);
  store.Save(older);

  test::ListedFaults faults;
  faults.crash_in_checkpoint_write = true;
  EXPECT_DEATH(
      {
        const ScopedFaultInjector installed(faults);
        store.Save(MakeCheckpoint(20));
      },
      "");

  EXPECT_FALSE(fs::exists(PathOf(20)));
  EXPECT_THAT(store.List(), ElementsAre(PathOf(10)));
  std::vector<std::string> warnings;
  const std::optional<Checkpoint> loaded = Load(store, &warnings);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_THAT(warnings, IsEmpty());
  ExpectBitwiseEqual(older, *loaded);
  // The crashed save left its temporary file (what kill -9 leaves); it is not a checkpoint.
  bool temporary_left = false;
  for (const std::string& name : FolderEntries(folder_)) {
    temporary_left |= name.starts_with(".homodyne_state_batch_") && name.ends_with(".h5.tmp");
  }
  EXPECT_TRUE(temporary_left);
}

TEST(CheckpointOptionsTest, KeepLastBelowOneIsAConfigError) {
  EXPECT_THROW(CheckpointStore(CheckpointOptions{"/tmp/x", 0, true}), ConfigError);
}

}  // namespace
}  // namespace homodyne
