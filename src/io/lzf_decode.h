// LZF decompression for the chunk decoder (chunk_decoder.cc): the format of liblzf's
// lzf_decompress, which the HDF5 LZF filter (lzf_filter.cc) uses, decoded with wider copies.
// Private to src/io.
#pragma once

#include <cstddef>

namespace homodyne::io_internal {

// Decompresses the LZF stream in[0, in_size) into out[0, out_capacity). Returns the bytes
// produced, or 0 when the stream is damaged (a run or a back-reference past either end, a
// back-reference before the start) or would not fit in out_capacity: the same bytes and the same
// outcome as liblzf's lzf_decompress for every input (tests/io/lzf_decode_test.cc). Bytes of `out`
// past the returned size may have been written.
//
// The format: a control byte c < 32 is followed by c + 1 literal bytes; otherwise the top 3 bits
// are a length L (7: plus the next byte), the low 5 bits and the next byte a distance D - 1, and
// L + 2 bytes are copied from D bytes back in the output (the copy may overlap itself). liblzf
// copies byte by byte; here literals and back-references at least 8 bytes back move 8 or 16 bytes
// at a time (writing up to 31 bytes past the run where out_capacity leaves room: later runs
// overwrite them), and a distance of 1 (a repeated byte: the lower triangle of the beamline's
// matrices, zero) is a memset (the load's and the writing's time: docs/performance.md, Where a
// run's time goes).
size_t LzfDecompress(const unsigned char* in, size_t in_size, unsigned char* out,
                     size_t out_capacity);

}  // namespace homodyne::io_internal
