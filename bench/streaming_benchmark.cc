// Streaming against in-memory passes on the same file (docs/performance.md, Streaming
// passes): PASSES full passes (Accumulate, laminar_flow) over every fitted point, once with the
// data packed in memory (the large strategy's data path, InMemoryPassData) and once read from the
// file on every pass (the streaming strategy's, MakeStreamingPassData), with the batch and chunk
// sizes a streaming fit uses (batch_points, 8 x threads batches per chunk). Also times the reads
// alone (every Fetch of PASSES passes, no computing), so the reading cost a pass must hide is
// known. The two objectives' results must be bitwise equal; the program exits 1 if not.
//
// Usage: streaming_benchmark FILE [--passes 16] [--threads 2] [--batch-points 10000]
//                            [--repeats 3] [--no-prefetch]
//                            [--only memory|streaming] [--cold]
// --cold: after every chunk of a streaming pass (and before every fetch of the reads alone) the
// file's pages are dropped from the page cache (posix_fadvise DONTNEED; this file only), so every
// pass reads the disk, as passes over a file larger than the page cache would.
// FILE: an APS-U file as homodyne-simulate writes it (bench/fit_end_to_end.sh's data sets).
// Prints one line per measurement and the minimum over the repeats.
#include <fcntl.h>
#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "io/read_paths.h"
#include "objective/batched_objective.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds of the whole process (every thread, the reader's included).
double ProcessCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

struct Arguments {
  std::string file;
  int passes = 16;
  int threads = 2;
  int64_t batch_points = 10000;
  int repeats = 3;
  bool prefetch = true;
  std::string only;  // "memory" or "streaming": run just that (for profiling); empty: both
  bool cold = false;
};

// Drops the file's pages from the page cache (clean pages only: the file is not being written).
void EvictFromPageCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
    std::cerr << "streaming_benchmark: cannot drop " << path << " from the page cache\n";
    std::exit(1);
  }
  close(fd);
}

Arguments Parse(int argc, char** argv) {
  Arguments arguments;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "streaming_benchmark: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--passes") {
      arguments.passes = std::stoi(value());
    } else if (flag == "--threads") {
      arguments.threads = std::stoi(value());
    } else if (flag == "--batch-points") {
      arguments.batch_points = std::stoll(value());
    } else if (flag == "--repeats") {
      arguments.repeats = std::stoi(value());
    } else if (flag == "--only") {
      arguments.only = value();
    } else if (flag == "--cold") {
      arguments.cold = true;
    } else if (flag == "--no-prefetch") {
      arguments.prefetch = false;
    } else if (!flag.empty() && flag[0] != '-' && arguments.file.empty()) {
      arguments.file = flag;
    } else {
      std::cerr << "streaming_benchmark: unknown argument " << flag << "\n";
      std::exit(2);
    }
  }
  if (arguments.file.empty()) {
    std::cerr << "usage: streaming_benchmark FILE [--passes 16] [--threads 2] "
                 "[--batch-points 10000] [--repeats 3] [--no-prefetch]\n";
    std::exit(2);
  }
  return arguments;
}

// bench/fit_end_to_end.sh's simulated truth, slightly off (a pass away from the optimum).
Eigen::VectorXd Theta(int num_angles) {
  const std::vector<double> physical = {3100.0, -0.45, 11.0, 5.5e-5, -0.28, 1.0e-6, 2.9};
  Eigen::VectorXd theta(static_cast<Eigen::Index>(physical.size()) + 2 * num_angles);
  for (size_t a = 0; a < physical.size(); ++a) theta[static_cast<Eigen::Index>(a)] = physical[a];
  for (int k = 0; k < num_angles; ++k) {
    theta[static_cast<Eigen::Index>(physical.size()) + k] = 0.3;
    theta[static_cast<Eigen::Index>(physical.size()) + num_angles + k] = 1.0;
  }
  return theta;
}

struct PassesResult {
  double seconds = 0.0;
  double cpu_seconds = 0.0;
  homodyne::NormalEquations last;
};

PassesResult RunPasses(homodyne::BatchedObjective& objective, const Eigen::VectorXd& theta,
                       int passes) {
  PassesResult result;
  const Clock::time_point start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int p = 0; p < passes; ++p) result.last = objective.Accumulate(theta);
  result.seconds = Seconds(start);
  result.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  return result;
}

bool BitwiseEqual(const homodyne::NormalEquations& a, const homodyne::NormalEquations& b) {
  return a.chi2 == b.chi2 && a.num_points == b.num_points &&
         (a.jtj.array() == b.jtj.array()).all() && (a.jtr.array() == b.jtr.array()).all();
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments arguments = Parse(argc, argv);
  omp_set_num_threads(arguments.threads);
  try {
    homodyne::DataSelection selection;
    selection.file_path = arguments.file;
    std::unique_ptr<homodyne::BatchSource> source = homodyne::OpenBatchSource(selection);
    const homodyne::DatasetInfo& info = source->info();
    std::vector<double> phi;
    for (const homodyne::AngleInfo& angle : info.angles) phi.push_back(angle.phi_degrees);
    const homodyne::HomodyneModel model(
        homodyne::AnalysisMode::kLaminarFlow,
        homodyne::ScatteringGeometry{info.angles.at(0).q_inv_angstrom, 2e6, info.dt_seconds},
        info.FittedTimes());
    const Eigen::VectorXd theta = Theta(info.num_angles());
    homodyne::PassOptions options;
    options.batch_points = arguments.batch_points;
    options.chunk_batches = 8 * arguments.threads;  // as the streaming strategy (fit_strategy.cc)
    const int64_t points = info.num_angles() * homodyne::UpperTriangleSize(info.num_times());
    std::printf(
        "file %s: %d angles x N = %d, %s, %s; %lld upper-triangle points; %d passes, "
        "%d threads, batch %lld points, chunk %d batches, prefetch %s%s\n",
        arguments.file.c_str(), info.num_angles(), info.num_times(), info.value_type.c_str(),
        info.compression.c_str(), static_cast<long long>(points), arguments.passes,
        arguments.threads, static_cast<long long>(arguments.batch_points), options.chunk_batches,
        arguments.prefetch ? "on" : "off",
        arguments.cold ? ", cold (file dropped from the page cache before every pass)" : "");

    // How the float32 reads go (docs/design.md section 8, Input): directly, or through HDF5.
    const std::vector<std::string> read_paths = homodyne::io_internal::Float32ReadPaths(*source);
    for (size_t k = 0; k < read_paths.size(); ++k) {
      std::printf(
          "angle %zu: float32 reads %s%s\n", k,
          read_paths[k].empty() ? "direct (preadv)" : "through HDF5: ", read_paths[k].c_str());
    }

    const Clock::time_point load_start = Clock::now();
    homodyne::PackedDataObjective in_memory(
        model, phi, 0.01, homodyne::PackedDataObjective::LoadPackedData(*source), options);
    std::printf("load into memory: %.3f s\n", Seconds(load_start));
    homodyne::StreamingReadOptions read_options;
    read_options.prefetch = arguments.prefetch;
    homodyne::PassOptions streaming_options = options;
    if (arguments.cold) {
      // The time this takes is counted (well under a millisecond per chunk).
      streaming_options.on_chunk = [&arguments](const homodyne::PassProgress&) {
        EvictFromPageCache(arguments.file);
      };
    }
    homodyne::BatchedObjective streaming(model, phi, 0.01,
                                         homodyne::MakeStreamingPassData(*source, read_options),
                                         streaming_options);

    double best_memory = 1e300;
    double best_streaming = 1e300;
    double best_reads = 1e300;
    std::vector<double> ratios;  // per repeat: in-memory wall time / streaming wall time
    homodyne::NormalEquations last;
    double best_memory_cpu = 1e300;
    double best_streaming_cpu = 1e300;
    bool equal = true;
    for (int r = 0; r < arguments.repeats; ++r) {
      const PassesResult memory = arguments.only == "streaming"
                                      ? PassesResult{}
                                      : RunPasses(in_memory, theta, arguments.passes);
      const PassesResult streamed = arguments.only == "memory"
                                        ? PassesResult{}
                                        : RunPasses(streaming, theta, arguments.passes);
      if (arguments.only.empty()) equal = equal && BitwiseEqual(memory.last, streamed.last);
      // The reads alone: every fetch of the passes, on a fresh streaming data path.
      std::unique_ptr<homodyne::PassData> reads =
          homodyne::MakeStreamingPassData(*source, read_options);
      const std::vector<homodyne::RowBatch> batches =
          homodyne::SplitIntoBatches(info.num_times(), arguments.batch_points);
      std::vector<const float*> pointers;
      const int num_batches = static_cast<int>(batches.size());
      const Clock::time_point reads_start = Clock::now();
      for (int p = 0; p < arguments.passes; ++p) {
        for (int first = 0; first < num_batches; first += options.chunk_batches) {
          if (arguments.cold) EvictFromPageCache(arguments.file);
          reads->Fetch(batches, first, std::min(first + options.chunk_batches, num_batches),
                       info.num_angles(), pointers);
        }
      }
      const double reads_seconds = Seconds(reads_start);
      reads.reset();
      std::printf(
          "repeat %d: in memory %.3f s (cpu %.3f s), streaming %.3f s (cpu %.3f s): "
          "%.1f%% of in-memory speed; reads alone %.3f s\n",
          r + 1, memory.seconds, memory.cpu_seconds, streamed.seconds, streamed.cpu_seconds,
          100.0 * memory.seconds / streamed.seconds, reads_seconds);
      if (arguments.only.empty()) ratios.push_back(memory.seconds / streamed.seconds);
      last = arguments.only == "memory" ? memory.last : streamed.last;
      best_memory_cpu = std::min(best_memory_cpu, memory.cpu_seconds);
      best_streaming_cpu = std::min(best_streaming_cpu, streamed.cpu_seconds);
      best_memory = std::min(best_memory, memory.seconds);
      best_streaming = std::min(best_streaming, streamed.seconds);
      best_reads = std::min(best_reads, reads_seconds);
    }
    std::printf(
        "min: in memory %.3f s, streaming %.3f s (%.1f%%); cpu: in memory %.3f s, "
        "streaming %.3f s (%.1f%%); reads alone %.3f s; results bitwise equal: %s\n",
        best_memory, best_streaming, 100.0 * best_memory / best_streaming, best_memory_cpu,
        best_streaming_cpu, 100.0 * best_memory_cpu / best_streaming_cpu, best_reads,
        equal ? "yes" : "NO");
    if (!ratios.empty()) {
      std::sort(ratios.begin(), ratios.end());
      std::printf("median over the repeats of in-memory / streaming wall time: %.1f%%\n",
                  100.0 * ratios[ratios.size() / 2]);
    }
    // Rows the streaming reads' prefetch decoded itself (compressed chunks on several threads;
    // 0 for other files: docs/design.md section 8, Input).
    std::printf("rows decoded by the prefetch (all angles, every pass): %lld\n",
                static_cast<long long>(homodyne::io_internal::RowsDecodedByPrefetch(*source)));
    // The last pass's sums, exactly: to compare builds (the same file and arguments must print the
    // same line).
    std::printf("last pass: chi2 %a, sum of J^T J %a, sum of J^T r %a, points %lld\n", last.chi2,
                last.jtj.sum(), last.jtr.sum(), static_cast<long long>(last.num_points));
    return equal ? 0 : 1;
  } catch (const homodyne::Error& error) {
    std::cerr << "streaming_benchmark: " << error.what() << "\n";
    return 1;
  }
}
