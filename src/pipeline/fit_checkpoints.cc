#include "fit_checkpoints.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <span>
#include <sstream>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include "fit_identity.h"
#include "homodyne/checkpoint_errors.h"
#include "homodyne/errors.h"
#include "homodyne/process_group.h"
#include "interrupts.h"
#include "io/file_checksum.h"
#include "objective/c2_rows.h"

namespace homodyne {
namespace {

std::string UtcTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The text form of the fields FitIdentityText hashes: one line "path=value" per field whose role
// is not kNotNumbers (those are not even given a text form). Doubles round-trip (17 digits),
// strings are quoted, absent optionals are "null", lists are "[a,b,]", list elements that are
// structs "{name:value;...}".
class IdentityWriter {
 public:
  explicit IdentityWriter(std::ostringstream& out) : out_(out) { out_ << std::setprecision(17); }

  template <FieldRole kRole, typename T>
  void operator()(const char* path, FieldRoleTag<kRole>, const T& value) {
    if constexpr (std::is_same_v<T, LossOptions>) {
      if (value.is_linear()) return;  // fit_identity.h: absent for the linear loss
    }
    if constexpr (std::is_same_v<T, std::vector<double>>) {
      // fit_identity.h: absent without --phi, so the identities of earlier fits stay.
      if (value.empty() && (std::string_view(path) == "data.phi_selected_degrees" ||
                            std::string_view(path) == "data.wavevector_q_list")) {
        return;
      }
    }
    // fit_identity.h: the data_filtering fields are absent at their defaults.
    if constexpr (std::is_same_v<T, std::optional<PhiRange>>) {
      if (!value) return;
    }
    if constexpr (std::is_same_v<T, bool>) {
      if (value && std::string_view(path) == "data.data_filtering_fallback_on_empty") return;
    }
    if constexpr (kRole != FieldRole::kNotNumbers) {
      out_ << path << '=';
      if constexpr (kRole == FieldRole::kInputFile) {
        std::error_code error;
        Write(std::filesystem::absolute(value, error).string());
      } else {
        Write(value);
      }
      out_ << '\n';
    }
  }

 private:
  void Write(double value) { out_ << value; }
  void Write(int value) { out_ << value; }
  void Write(int64_t value) { out_ << value; }
  void Write(uint64_t value) { out_ << value; }
  void Write(bool value) { out_ << (value ? "true" : "false"); }
  void Write(const std::string& value) { out_ << std::quoted(value); }
  void Write(AnalysisMode value) { out_ << ToString(value); }
  // Names that were strings before they became enums: quoted, as they were.
  void Write(PerAngleModeRequest value) { Write(std::string(ToString(value))); }
  void Write(const LossOptions& value) {
    Write(std::string(ToString(value.function)));
    out_ << " f_scale=";
    Write(value.f_scale);
  }
  void Write(SamplingStrategy value) { Write(std::string(ToString(value))); }
  void Write(CmaesPreset value) { Write(std::string(ToString(value))); }
  void Write(CmaesRestartStrategy value) { Write(std::string(ToString(value))); }
  template <typename T>
  void Write(const std::optional<T>& value) {
    if (value) {
      Write(*value);
    } else {
      out_ << "null";
    }
  }
  template <typename T>
  void Write(const std::vector<T>& values) {
    out_ << '[';
    for (const T& value : values) {
      Write(value);
      out_ << ',';
    }
    out_ << ']';
  }
  void Write(const PhiRange& range) {
    WriteStruct([&](auto&& f) { VisitPhiRange(range, f); });
  }
  void Write(const ParameterBound& bound) {
    WriteStruct([&](auto&& f) { VisitBound(bound, f); });
  }
  template <typename VisitElement>
  void WriteStruct(VisitElement visit_element) {
    out_ << '{';
    visit_element([this](const char* name, auto, const auto& value) {
      out_ << name << ':';
      Write(value);
      out_ << ';';
    });
    out_ << '}';
  }

  std::ostringstream& out_;
};

}  // namespace

std::string FitIdentityText(const Config& config, int64_t batch_points,
                            GlobalSearchMethod global_search_method) {
  std::ostringstream out;
  out << "homodyne fit identity 2\n";
  IdentityWriter writer(out);
  VisitConfigFields(config, writer);
  // What the fit resolved from fields that enter only this way (fit_identity.h).
  out << "batch_points=" << batch_points << "\n"
      << "global_search_method=" << std::quoted(std::string(ToString(global_search_method)))
      << "\n";
  return out.str();
}

void CheckCheckpointSolver(const Checkpoint& checkpoint, StateSolver solver,
                           const std::string& directory) {
  if (checkpoint.lm.theta.size() == 0 || checkpoint.lm.solver == solver) return;
  const bool ceres_state = checkpoint.lm.solver == StateSolver::kCeres;
  // The solver named in both shells' words (a flag; the config key, which the Python module
  // takes); the way to start afresh is the shell's (CheckpointMismatchError).
  throw CheckpointMismatchError(
      "the checkpoint at batch " + std::to_string(checkpoint.global_batch) + " in " + directory +
      " was written by the " + (ceres_state ? "Ceres solver" : "LM core") +
      " and this run uses the " + (ceres_state ? "LM core" : "Ceres solver") + ": resume it with " +
      (ceres_state ? "--strategy standard --solver ceres (optimization.nlsq.solver: ceres, "
                     "strategy standard)"
                   : "--solver lm (optimization.nlsq.solver: lm)") +
      ", or start afresh with ");
}

void CheckCheckpointFits(const Checkpoint& checkpoint, const CheckpointLayout& layout,
                         const std::string& directory) {
  auto fail = [&](const std::string& what) {
    throw CheckpointMismatchError("the checkpoint at batch " +
                                  std::to_string(checkpoint.global_batch) + " in " + directory +
                                  " " + what +
                                  ": it was written for another config or data set; remove it or "
                                  "start afresh with ");
  };
  auto count = [](Eigen::Index n) { return std::to_string(n); };
  const Eigen::Index p = layout.num_reduced;
  const LevenbergMarquardtState& lm = checkpoint.lm;
  if (lm.theta.size() != 0) {
    const bool core_sums = lm.jtj.rows() == p && lm.jtj.cols() == p && lm.jtr.size() == p;
    const bool no_sums = lm.jtj.size() == 0 && lm.jtr.size() == 0;  // Ceres' state
    if (lm.theta.size() != p || !(core_sums || no_sums)) {
      fail("holds a fit state of " + count(lm.theta.size()) + " parameters (J^T J " +
           count(lm.jtj.rows()) + " x " + count(lm.jtj.cols()) + ") and this fit has " + count(p));
    }
  }
  if (const std::optional<PassState>& pass = checkpoint.pass) {
    const Eigen::Index n = layout.num_full;
    const bool sums_fit =
        pass->full_pass ? pass->jtj.rows() == n && pass->jtj.cols() == n && pass->jtr.size() == n
                        : pass->jtj.size() == 0 && pass->jtr.size() == 0;
    if (pass->theta.size() != n || !sums_fit) {
      fail("holds a pass over " + count(pass->theta.size()) + " parameters and this fit's passes " +
           "have " + count(n));
    }
    if (pass->next_batch < 0 || pass->next_batch > layout.num_batches) {
      fail("holds a pass at batch " + std::to_string(pass->next_batch) + " and this fit's passes " +
           "have " + std::to_string(layout.num_batches) + " batches");
    }
  }
  const GlobalSearchTrail& trail = checkpoint.global_search;
  for (const GlobalMinimum& minimum : trail.minima) {
    if (minimum.reduced.size() != p) {
      fail("holds a global-search minimum of " + count(minimum.reduced.size()) +
           " parameters and this fit has " + count(p));
    }
  }
  if (trail.projection_state.size() > p) {
    fail("holds a projected-problem state of " + count(trail.projection_state.size()) +
         " values and this fit has " + count(p) + " parameters");
  }
}

// What the data fingerprint's checksum reads at most: every byte of a file up to this size, spread
// blocks beyond it (docs/checkpoints.md, How resume picks a file).
constexpr int64_t kFingerprintContentBudgetBytes = int64_t{1} << 30;

std::string DataFingerprint(BatchSource& source) {
  const DatasetInfo& info = source.info();
  std::ostringstream out;
  std::error_code error;
  const std::filesystem::path path = std::filesystem::absolute(info.file_path, error);
  out << "path=" << path.string() << "\n"
      << "size=" << std::filesystem::file_size(info.file_path, error) << "\n";
  const auto mtime = std::filesystem::last_write_time(info.file_path, error);
  out << "mtime_ns="
      << std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count()
      << "\n"
      << "angles=" << info.num_angles() << " times=" << info.num_times() << "\n";
  // Matrices of several q (a joint fit of rings: docs/design.md section 2d): each
  // matrix's q is part of the fit's identity. One q: nothing more, as before.
  bool one_q = true;
  for (const AngleInfo& angle : info.angles) {
    one_q = one_q && angle.q_inv_angstrom == info.angles.front().q_inv_angstrom;
  }
  if (!one_q) {
    out << "q_per_angle=";
    for (const AngleInfo& angle : info.angles) {
      out << std::setprecision(17) << angle.q_inv_angstrom << ' ';
    }
    out << "\n";
  }
  const int n = info.num_times();
  std::vector<float> sample;
  for (int k = 0; k < info.num_angles(); ++k) {
    for (int row : {0, (n - 1) / 2, n - 2}) {
      if (row < 0 || row >= n - 1) continue;
      const size_t start = sample.size();
      sample.resize(start + static_cast<size_t>(n - 1 - row));
      ReadC2Rows(source, k, row, row + 1,
                 std::span<float>(sample.data() + start, sample.size() - start));
    }
  }
  out << "sampled_rows_sha256=" << Sha256Hex(sample.data(), sample.size() * sizeof(float));
  return out.str();
}

std::string DataContentFingerprintLine(const std::string& file_path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(file_path, error)) return "";
  const FileChecksum content = ChecksumFileContent(file_path, kFingerprintContentBudgetBytes);
  return "\ncontent_crc32=" + std::to_string(content.crc32) + " of " +
         (content.whole_file ? std::string("every byte")
                             : std::to_string(content.bytes_read) + " bytes");
}

std::string ResumeAnnouncement(const Checkpoint& checkpoint, const std::string& path,
                               std::chrono::system_clock::time_point now) {
  std::tm written{};
  std::istringstream timestamp(checkpoint.timestamp_utc);
  timestamp >> std::get_time(&written, "%Y-%m-%dT%H:%M:%SZ");
  std::string age = "at " + checkpoint.timestamp_utc;
  if (!timestamp.fail()) {
    const int64_t seconds = static_cast<int64_t>(std::chrono::system_clock::to_time_t(now)) -
                            static_cast<int64_t>(timegm(&written));
    if (seconds >= 0) {
      const int64_t minutes = seconds / 60;
      const int64_t hours = seconds / 3600;
      const int64_t days = seconds / 86400;
      age = seconds < 120   ? std::to_string(seconds) + " s ago"
            : minutes < 120 ? std::to_string(minutes) + " min ago"
            : hours < 48    ? std::to_string(hours) + " h ago"
                            : std::to_string(days) + " days ago";
    }
  }
  return "resuming from " + path + " (batch " + std::to_string(checkpoint.global_batch) +
         ", written " + age + " by homodyne-cpp " + checkpoint.engine_version +
         "); --no-resume starts afresh";
}

FitCheckpoints::FitCheckpoints(const Config& config, CheckpointPolicy policy,
                               std::string config_sha256,
                               std::function<std::string()> data_fingerprint,
                               int64_t batches_per_pass,
                               std::function<void(const CheckpointSaveReport&)> on_saved)
    : enabled_(config.streaming.enable_checkpoints),
      resume_(config.streaming.resume_from_checkpoint),
      policy_(policy),
      frequency_(config.streaming.checkpoint_frequency),
      min_interval_seconds_(config.streaming.checkpoint_min_interval_seconds),
      last_save_time_(std::chrono::steady_clock::now()),
      config_sha256_(std::move(config_sha256)),
      data_fingerprint_of_source_(std::move(data_fingerprint)),
      store_(CheckpointOptions{config.streaming.checkpoint_dir,
                               config.streaming.keep_last_checkpoints,
                               config.streaming.enable_compression}),
      batches_per_pass_(batches_per_pass),
      on_saved_(std::move(on_saved)),
      writer_(CurrentProcessGroup()->is_root()) {
  if (enabled_ && writer_) {
    std::string note;
    folder_lock_ =
        FolderLock::Acquire(store_.options().directory, LockedFolder::kCheckpoints, note);
    if (!note.empty()) spdlog::warn("{}", note);
  }
  if (const FaultInjector* faults = InstalledFaultInjector(); faults != nullptr) {
    test_signal_ = faults->SignalAfterBatches();
    test_batch_delay_ms_ = faults->BatchDelayMilliseconds();
  }
}

std::optional<Checkpoint> FitCheckpoints::LoadForResume() {
  if (!enabled_) return std::nullopt;
  if (!resume_) {
    if (!writer_) return std::nullopt;  // rank 0 removes them
    // A fresh start: older checkpoints in the folder would otherwise be picked by a later resume.
    const std::vector<std::string> stale = store_.List();
    if (!stale.empty()) {
      spdlog::info("--no-resume: removing {} earlier checkpoint(s) from {}", stale.size(),
                   store_.options().directory);
    }
    for (const std::string& path : stale) {
      std::error_code error;
      std::filesystem::remove(path, error);
    }
    return std::nullopt;
  }
  std::vector<std::string> skipped;
  // The fingerprint reads the data file: only when there is a checkpoint to compare it with.
  std::optional<Checkpoint> checkpoint =
      store_.List().empty()
          ? std::nullopt
          : store_.LoadNewestValid(config_sha256_, DataFingerprintText(), &skipped);
  for (const std::string& warning : skipped) {
    spdlog::warn("{}", warning);
    warnings_.push_back(warning);
  }
  // Every rank of a job reads the folder: they must resume from the same checkpoint.
  ProcessGroup& group = *CurrentProcessGroup();
  if (group.size() > 1) {
    const int64_t batch = checkpoint ? checkpoint->global_batch : -1;
    if (group.MaxOverRanks(batch) != -group.MaxOverRanks(-batch)) {
      throw InputError("the ranks of this job found different checkpoints in " +
                       store_.options().directory +
                       ": streaming.checkpoint_dir must be a folder every rank sees (a shared "
                       "file system)");
    }
  }
  return checkpoint;
}

void FitCheckpoints::ContinueFrom(const Checkpoint& checkpoint) {
  spdlog::warn("{}", ResumeAnnouncement(checkpoint, store_.PathOf(checkpoint.global_batch),
                                        std::chrono::system_clock::now()));
  global_batch_ = checkpoint.global_batch;
  batches_at_last_save_ = checkpoint.global_batch;
  statistics_ = checkpoint.statistics;
  if (checkpoint.lm.theta.size() > 0) last_state_ = checkpoint.lm;
  last_pass_ = checkpoint.pass;
  global_search_trail_ = checkpoint.global_search;
  profile_trail_ = checkpoint.profile_intervals;
  passes_seen_ = checkpoint.lm.passes + checkpoint.lm.cost_passes;
}

bool FitCheckpoints::OnIteration(const LevenbergMarquardtIteration& iteration) {
  // The state every later save holds (the phases after the fit save too: the profile points, a
  // signal in the uncertainties' pass): not that of the iteration that ended the fit (below).
  if (!iteration.ended_fit) last_state_ = iteration.state;
  if (policy_.passes_from_iterations) {
    // No chunk callback: the passes count as batches, and signals are seen here.
    const int64_t passes = iteration.passes + iteration.cost_passes;
    AdvanceBatches(std::max<int64_t>(passes - passes_seen_, 0) * batches_per_pass_);
    passes_seen_ = passes;
    if (InterruptSignal() != 0) return false;
  }
  // Not the state of the iteration that ended the fit: a resume from it would take one more step
  // (LevenbergMarquardtIteration::ended_fit). The newest checkpoint stays an earlier iteration's,
  // from which a run killed now (its result files included) repeats the last steps bit for bit.
  if (enabled_ && policy_.save_at_iterations && !iteration.ended_fit && PeriodicSaveDue()) {
    Save(nullptr);
  }
  return true;
}

void FitCheckpoints::StopIfInterrupted() {
  if (const int signal_number = InterruptSignal(); signal_number != 0) {
    SaveAndStop(nullptr, signal_number);
  }
}

void FitCheckpoints::OnGlobalSearchProgress(int64_t batches, const GlobalSearchTrail& trail) {
  AdvanceBatches(batches);
  // A resumed final-fit state keeps its pass in progress (last_pass_) in these saves.
  const PassState* pass = last_pass_ ? &*last_pass_ : nullptr;
  live_trail_ = &trail;
  try {
    if (const int signal_number = InterruptSignal(); signal_number != 0) {
      SaveAndStop(pass, signal_number);
    }
    if (enabled_ && batches > 0 && PeriodicSaveDue()) Save(pass);
  } catch (...) {
    live_trail_ = nullptr;  // FitInterrupted from SaveAndStop
    throw;
  }
  live_trail_ = nullptr;
}

void FitCheckpoints::OnGlobalSearchFinished(int64_t batches, const GlobalSearchTrail& trail) {
  global_search_trail_ = trail;
  OnGlobalSearchProgress(batches, global_search_trail_);
}

void FitCheckpoints::OnProfilePoint(int64_t passes, const ProfileTrail& trail) {
  profile_trail_ = trail;
  local_profile_batches_ = 0;  // counted now, by every rank
  AdvanceBatches(passes * batches_per_pass_);
  if (const int signal_number = InterruptSignal(); signal_number != 0) {
    SaveAndStop(nullptr, signal_number);
  }
  if (enabled_ && PeriodicSaveDue()) Save(nullptr);
}

void FitCheckpoints::OnLocalProfilePoint(int64_t passes) {
  local_profile_batches_ += passes * batches_per_pass_;
  if (test_signal_ && global_batch_ + local_profile_batches_ >= test_signal_->after_batches) {
    const int signal_number = test_signal_->signal_number;
    test_signal_.reset();
    std::raise(signal_number);
  }
}

void FitCheckpoints::AdvanceBatches(int64_t batches) {
  global_batch_ += batches;
  statistics_.batches += batches;
  if (test_batch_delay_ms_ > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(test_batch_delay_ms_ * batches));
  }
  if (test_signal_ && global_batch_ >= test_signal_->after_batches) {
    const int signal_number = test_signal_->signal_number;
    test_signal_.reset();
    std::raise(signal_number);
  }
}

void FitCheckpoints::SaveAndStop(const PassState* pass, int signal_number) {
  // Rank 0 saves; every rank of a job reports its outcome (exit 3 only with a checkpoint).
  const int64_t saved_here = enabled_ && Save(pass) ? 1 : 0;
  const bool saved = CurrentProcessGroup()->BroadcastFromRoot(saved_here) != 0;
  throw FitInterrupted("interrupted by " + SignalName(signal_number) +
                           (saved ? "; checkpoint saved, run the same command to resume"
                                  : "; no checkpoint saved (checkpoints disabled or failed)"),
                       saved);
}

void FitCheckpoints::OnChunk(const PassProgress& progress) {
  AdvanceBatches(progress.batches_in_chunk);
  last_pass_ = *progress.state;
  const bool in_pass = progress.batches_done < progress.num_batches;
  if (const int signal_number = InterruptSignal(); signal_number != 0) {
    // Also at the end of a pass: its complete sums are saved, so the resumed run does not repeat
    // it (the core, restarted at its last iteration boundary, asks for the same point again).
    SaveAndStop(progress.state, signal_number);
  }
  if (enabled_ && policy_.save_inside_passes && in_pass && PeriodicSaveDue()) {
    Save(progress.state);
  }
}

const std::string& FitCheckpoints::DataFingerprintText() {
  if (!data_fingerprint_) data_fingerprint_ = data_fingerprint_of_source_();
  return *data_fingerprint_;
}

bool FitCheckpoints::PeriodicSaveDue() const {
  return global_batch_ - batches_at_last_save_ >= frequency_ &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_time_)
                 .count() >= min_interval_seconds_;
}

bool FitCheckpoints::Save(const PassState* pass) {
  if (!writer_) return true;  // rank 0 of a job writes the checkpoints
  Checkpoint checkpoint;
  if (last_state_) checkpoint.lm = *last_state_;  // empty theta: still in the first pass
  if (pass != nullptr) checkpoint.pass = *pass;
  checkpoint.global_search = live_trail_ != nullptr ? *live_trail_ : global_search_trail_;
  checkpoint.profile_intervals = profile_trail_;
  checkpoint.statistics = statistics_;
  checkpoint.global_batch = global_batch_;
  checkpoint.config_sha256 = config_sha256_;
  checkpoint.data_fingerprint = DataFingerprintText();
  checkpoint.engine_version = HOMODYNE_VERSION;
  checkpoint.timestamp_utc = UtcTimestamp();
  batches_at_last_save_ = global_batch_;
  last_save_time_ = std::chrono::steady_clock::now();
  CheckpointSaveReport report;
  try {
    report = store_.Save(checkpoint);
  } catch (const Error& error) {
    ++statistics_.checkpoint_failures;
    const std::string warning =
        std::string("checkpoint not saved, the fit goes on: ") + error.what();
    spdlog::warn("{}", warning);
    if (warnings_.size() < 20) warnings_.push_back(warning);
    return false;
  }
  ++saves_;
  spdlog::debug("checkpoint {} ({} bytes) saved in {:.1f} ms", report.path, report.bytes,
                1e3 * report.seconds);
  if (report.seconds > 2.0) {
    spdlog::warn(
        "checkpoint {} took {:.1f} s to save (> 2 s): lower the checkpoint frequency "
        "or put checkpoint_dir on a faster disk",
        report.path, report.seconds);
  }
  if (on_saved_) on_saved_(report);
  return true;
}

bool FitCheckpoints::SaveAfterFailure() {
  return enabled_ && Save(last_pass_ ? &*last_pass_ : nullptr);
}

}  // namespace homodyne
