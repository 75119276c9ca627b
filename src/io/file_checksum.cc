// ChecksumFileContent (file_checksum.h): zlib's crc32 over the whole file or spread blocks.
#include "io/file_checksum.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace homodyne {
namespace {

constexpr int64_t kBlockBytes = int64_t{1} << 16;

std::runtime_error ReadFailure(const std::string& path, const std::string& what, int error) {
  return std::runtime_error(path + ": cannot " + what + " to checksum it (" +
                            std::generic_category().message(error) + ")");
}

// Adds `length` bytes at `offset` of fd to crc (short reads continued; EOF ends early).
void AddRange(int fd, const std::string& path, int64_t offset, int64_t length,
              std::vector<unsigned char>& buffer, FileChecksum& sum) {
  while (length > 0) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(length, buffer.size()));
    const ssize_t got = ::pread(fd, buffer.data(), want, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ReadFailure(path, "read", errno);
    }
    if (got == 0) return;
    sum.crc32 = static_cast<uint32_t>(::crc32(sum.crc32, buffer.data(), static_cast<uInt>(got)));
    sum.bytes_read += got;
    offset += got;
    length -= got;
  }
}

}  // namespace

FileChecksum ChecksumFileContent(const std::string& path, int64_t budget_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ReadFailure(path, "open", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw ReadFailure(path, "stat", errno);
  if (!S_ISREG(status.st_mode)) throw ReadFailure(path, "read a file that is not regular", EINVAL);
  const int64_t size = status.st_size;
  FileChecksum sum;
  sum.crc32 = static_cast<uint32_t>(::crc32(0L, Z_NULL, 0));
  std::vector<unsigned char> buffer(static_cast<size_t>(kBlockBytes) * 16);
  if (size <= std::max<int64_t>(budget_bytes, kBlockBytes)) {
    AddRange(fd, path, 0, size, buffer, sum);
    sum.whole_file = sum.bytes_read == size;
    return sum;
  }
  // Blocks at offsets i * (size - block) / (blocks - 1): the first at 0, the last at the end.
  const int64_t blocks = std::max<int64_t>(2, budget_bytes / kBlockBytes);
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t offset = static_cast<int64_t>(static_cast<long double>(size - kBlockBytes) * i /
                                                static_cast<long double>(blocks - 1));
    AddRange(fd, path, offset, kBlockBytes, buffer, sum);
  }
  return sum;
}

}  // namespace homodyne
