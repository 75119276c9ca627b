// The HDF5 LZF filter (id 32000) with the conventions of h5py's lzf_filter.c, so files written by
// h5py (and real APS-U files) read without any HDF5 plugin path (docs/design.md section 8):
// - cd_values[0] = filter version, cd_values[1] = LZF API version, cd_values[2] = chunk size in
//   bytes (filled in by set_local when a dataset is created);
// - compression that does not shrink the chunk fails, and the filter being optional the chunk is
//   then stored uncompressed;
// - decompression starts with a buffer of cd_values[2] bytes (or the input buffer size) and grows
//   it until the chunk fits.
#include <liblzf/lzf.h>

#include <cerrno>
#include <cstddef>
#include <mutex>

#include "io/hdf5_util.h"
#include "io/lzf_decode.h"

namespace homodyne::io_internal {
namespace {

constexpr unsigned kLzfFilterVersion = 4;  // h5py's H5PY_FILTER_LZF_VERSION

// Fills cd_values[0..2] for a new dataset: versions and the chunk size in bytes.
herr_t LzfSetLocal(hid_t dcpl, hid_t type, hid_t /*space*/) {
  unsigned flags = 0;
  size_t num_values = 8;
  unsigned values[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (H5Pget_filter_by_id2(dcpl, kLzfFilterId, &flags, &num_values, values, 0, nullptr, nullptr) <
      0) {
    return -1;
  }
  if (num_values < 3) num_values = 3;
  if (values[0] == 0) values[0] = kLzfFilterVersion;
  if (values[1] == 0) values[1] = LZF_VERSION;
  hsize_t chunk_dims[32];
  const int rank = H5Pget_chunk(dcpl, 32, chunk_dims);
  if (rank < 0 || rank > 32) return -1;
  const size_t type_size = H5Tget_size(type);
  if (type_size == 0) return -1;
  size_t chunk_bytes = type_size;
  for (int d = 0; d < rank; ++d) chunk_bytes *= chunk_dims[d];
  values[2] = static_cast<unsigned>(chunk_bytes);
  if (H5Pmodify_filter(dcpl, kLzfFilterId, flags, num_values, values) < 0) return -1;
  return 1;
}

// The filter callback. Returns the size of the valid data in *buffer, or 0 on failure (HDF5's
// contract); *buffer is replaced by an H5allocate_memory buffer on success.
size_t LzfFilter(unsigned flags, size_t num_values, const unsigned values[], size_t num_bytes,
                 size_t* buffer_size, void** buffer) {
  void* output = nullptr;
  size_t output_size = 0;
  unsigned status = 0;
  if ((flags & H5Z_FLAG_REVERSE) == 0) {
    // Compress into a buffer no larger than the input: LZF gives up when the data does not shrink.
    output_size = *buffer_size;
    output = H5allocate_memory(output_size, false);
    if (output == nullptr) return 0;
    status = lzf_compress(*buffer, static_cast<unsigned>(num_bytes), output,
                          static_cast<unsigned>(output_size));
  } else {
    output_size = (num_values >= 3 && values[2] != 0) ? values[2] : *buffer_size;
    if (num_values >= 3 && values[2] != 0) {
      // The chunk's size is known: the faster decoder of the same format (lzf_decode.h); a chunk
      // it cannot decode goes through liblzf's loop below, which reports it.
      output = H5allocate_memory(output_size, false);
      if (output == nullptr) return 0;
      status =
          static_cast<unsigned>(LzfDecompress(static_cast<const unsigned char*>(*buffer), num_bytes,
                                              static_cast<unsigned char*>(output), output_size));
    }
    while (status == 0) {
      if (output != nullptr) H5free_memory(output);
      output = H5allocate_memory(output_size, false);
      if (output == nullptr) return 0;
      status = lzf_decompress(*buffer, static_cast<unsigned>(num_bytes), output,
                              static_cast<unsigned>(output_size));
      if (status == 0) {
        if (errno != E2BIG || output_size > (size_t{1} << 31)) break;  // corrupt data
        output_size += *buffer_size;
      }
    }
  }
  if (status == 0) {
    H5free_memory(output);
    return 0;
  }
  H5free_memory(*buffer);
  *buffer = output;
  *buffer_size = output_size;
  return status;
}

}  // namespace

void RegisterLzfFilter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static const H5Z_class2_t kLzfClass = {
        H5Z_CLASS_T_VERS, kLzfFilterId, 1, 1, "lzf", nullptr, LzfSetLocal, LzfFilter,
    };
    // A failure leaves LZF files unreadable; the reader then reports the filter as unavailable.
    static_cast<void>(H5Zregister(&kLzfClass));
  });
}

}  // namespace homodyne::io_internal
