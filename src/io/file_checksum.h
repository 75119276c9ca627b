// A checksum of a data file's bytes, for the data fingerprint of checkpoints (docs/checkpoints.md,
// How resume picks a file): a resume refuses a checkpoint whose data file was edited in place,
// even with its size and modification time kept. Private to the engine (src/).
#pragma once

#include <cstdint>
#include <string>

namespace homodyne {

struct FileChecksum {
  uint32_t crc32 = 0;       // zlib's CRC-32 of the bytes read, in file order
  int64_t bytes_read = 0;   // how many bytes it covers
  bool whole_file = false;  // every byte of the file (else evenly spaced blocks)
};

// Reads `path` and returns the CRC-32 of its bytes: all of them when the file holds at most
// budget_bytes, else budget_bytes in blocks of 64 KiB spread evenly over the file, the first and
// the last block included (an edit outside the blocks is then not seen). Costs one read of
// min(size, budget_bytes) bytes. Throws std::runtime_error naming the file when it cannot be
// opened or read.
FileChecksum ChecksumFileContent(const std::string& path, int64_t budget_bytes);

}  // namespace homodyne
