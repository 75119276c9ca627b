// What a pass over a file in the page cache costs when its bytes reach the pass by a copy (pread
// into a buffer, as the streaming reader's direct reads do: src/io/direct_reads.h) and when they
// are mapped instead (no copy: the pass would read the page cache in place). Each way reads
// every 1 MiB block of the file once and sums one float per cache line of it, as a pass reads its
// data; the file should be in the page cache (read it once before).
//   pread           pread of each block into one 1 MiB buffer, then the sum
//   mmap per block  mmap of each block, the sum, munmap (what a reader with bounded memory does)
//   map, drop       the whole file mapped once, each block summed then MADV_DONTNEED (bounded
//                   resident memory)
//   map, first      the whole file mapped once, the first pass over it (page faults)
//   map, again      the same mapping, a second pass (no faults: the whole file stays resident)
// Usage: mapped_read_benchmark FILE [--repeats 3]. Prints milliseconds per pass, each way.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kBlock = size_t{1} << 20;
constexpr size_t kFloatsPerLine = 16;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One float per cache line of the block, as a pass reads each line of its data.
double SumBlock(const char* block) {
  float value = 0.0f;
  double sum = 0.0;
  for (size_t offset = 0; offset < kBlock; offset += kFloatsPerLine * sizeof(float)) {
    std::memcpy(&value, block + offset, sizeof value);
    sum += value;
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (argc != 2 && argc != 4) || (argc == 4 && std::string(argv[2]) != "--repeats")) {
    std::fprintf(stderr, "usage: mapped_read_benchmark FILE [--repeats N]\n");
    return 2;
  }
  const int repeats = argc == 4 ? std::atoi(argv[3]) : 3;
  const int fd = open(argv[1], O_RDONLY);
  struct stat status {};
  if (fd < 0 || fstat(fd, &status) != 0) {
    std::fprintf(stderr, "mapped_read_benchmark: cannot open %s: %s\n", argv[1],
                 std::strerror(errno));
    return 1;
  }
  const size_t blocks = static_cast<size_t>(status.st_size) / kBlock;
  if (blocks == 0 || repeats < 1) {
    std::fprintf(stderr, "mapped_read_benchmark: %s is smaller than 1 MiB (or repeats < 1)\n",
                 argv[1]);
    return 1;
  }
  std::vector<char> buffer(kBlock);
  double sink = 0.0;
  std::printf("file %s: %zu blocks of 1 MiB, ms per pass:\n", argv[1], blocks);
  for (int repeat = 1; repeat <= repeats; ++repeat) {
    double times[6];
    times[0] = Seconds();
    for (size_t b = 0; b < blocks; ++b) {
      if (pread(fd, buffer.data(), kBlock, static_cast<off_t>(b * kBlock)) !=
          static_cast<ssize_t>(kBlock)) {
        std::fprintf(stderr, "mapped_read_benchmark: short read of %s\n", argv[1]);
        return 1;
      }
      sink += SumBlock(buffer.data());
    }
    times[1] = Seconds();
    for (size_t b = 0; b < blocks; ++b) {
      void* block =
          mmap(nullptr, kBlock, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(b * kBlock));
      if (block == MAP_FAILED) {
        std::fprintf(stderr, "mapped_read_benchmark: mmap: %s\n", std::strerror(errno));
        return 1;
      }
      sink += SumBlock(static_cast<const char*>(block));
      munmap(block, kBlock);
    }
    times[2] = Seconds();
    void* whole = mmap(nullptr, blocks * kBlock, PROT_READ, MAP_SHARED, fd, 0);
    if (whole == MAP_FAILED) {
      std::fprintf(stderr, "mapped_read_benchmark: mmap: %s\n", std::strerror(errno));
      return 1;
    }
    char* bytes = static_cast<char*>(whole);
    for (size_t b = 0; b < blocks; ++b) {
      sink += SumBlock(bytes + b * kBlock);
      madvise(bytes + b * kBlock, kBlock, MADV_DONTNEED);
    }
    times[3] = Seconds();
    for (size_t b = 0; b < blocks; ++b) sink += SumBlock(bytes + b * kBlock);
    times[4] = Seconds();
    for (size_t b = 0; b < blocks; ++b) sink += SumBlock(bytes + b * kBlock);
    times[5] = Seconds();
    munmap(whole, blocks * kBlock);
    std::printf(
        "repeat %d: pread %.2f, mmap per block %.2f, map, drop %.2f, map, first %.2f, "
        "map, again %.2f\n",
        repeat, 1e3 * (times[1] - times[0]), 1e3 * (times[2] - times[1]),
        1e3 * (times[3] - times[2]), 1e3 * (times[4] - times[3]), 1e3 * (times[5] - times[4]));
  }
  std::printf("(checksum %g)\n", sink);
  close(fd);
  return 0;
}
