// Small RAII layer over the HDF5 C API shared by the reader, the writer and the simulator.
// Private to src/io (HDF5 stays at the edge, docs/conventions.md habit 7).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace homodyne::io_internal {

// HDF5 filter id of LZF (h5py's registered id; real APS-U files use it).
inline constexpr H5Z_filter_t kLzfFilterId = 32000;

// Registers the LZF filter with HDF5 (lzf_filter.cc). Idempotent; called by InitializeHdf5.
void RegisterLzfFilter();

// Once per process: registers the LZF filter and caps HDF5's free lists. Once per calling
// thread: silences HDF5's automatic error-stack printing (failures become DataError instead).
// Every entry point that opens, creates or reads files calls it, on whatever thread it runs.
void InitializeHdf5();

// The innermost descriptions of the current HDF5 error stack, e.g. "can't open file; ...", or
// "" when the stack is empty. Clears the stack.
std::string Hdf5ErrorText();

// Owns one HDF5 identifier and closes it with the matching H5?close. Move-only.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Hid& operator=(Hid&& other) noexcept;
  ~Hid() { static_cast<void>(Close()); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns the H5?close status (0 when nothing was open).
  herr_t Close();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

inline Hid FileHid(hid_t id) { return Hid(id, H5Fclose); }
inline Hid GroupHid(hid_t id) { return Hid(id, H5Gclose); }
inline Hid DatasetHid(hid_t id) { return Hid(id, H5Dclose); }
inline Hid SpaceHid(hid_t id) { return Hid(id, H5Sclose); }
inline Hid TypeHid(hid_t id) { return Hid(id, H5Tclose); }
inline Hid PlistHid(hid_t id) { return Hid(id, H5Pclose); }
inline Hid AttributeHid(hid_t id) { return Hid(id, H5Aclose); }

// True when every component of the absolute path exists (links checked level by level, so a
// missing parent is not an error).
bool PathExists(hid_t file, const std::string& path);

// Names of the members of a group, sorted alphabetically (the order the reference uses;
// docs/design.md section 8). Throws std::runtime_error on failure.
std::vector<std::string> GroupMemberNames(hid_t group);

// Dimensions of a dataset's dataspace. Throws std::runtime_error on failure.
std::vector<hsize_t> DatasetDims(hid_t dataset);

// Reads `rows` x `cols` values at (row, col) of a 2-D dataset into `out` (row-major), converted
// to T (float or double) by HDF5, then returns HDF5's freed conversion buffers (H5garbage_collect:
// one free list per block size, and every row range has its own size, so memory stays constant
// over a whole pass). Throws std::runtime_error with HDF5's error text.
template <typename T>
void ReadRectangle(hid_t dataset, int64_t row, int64_t rows, int64_t col, int64_t cols, T* out);

// Whole dataset converted to double / int64 (flattened, row-major). Throws std::runtime_error.
std::vector<double> ReadAllDoubles(hid_t file, const std::string& path);
std::vector<int64_t> ReadAllInt64(hid_t file, const std::string& path);

// Creates a contiguous dataset `name` under `location` with the given dims and writes `values`
// (converted to `file_type`). Throws std::runtime_error.
void WriteDoubles(hid_t location, const std::string& name, const std::vector<hsize_t>& dims,
                  std::span<const double> values, hid_t file_type = H5T_IEEE_F64LE);
void WriteInt64s(hid_t location, const std::string& name, const std::vector<hsize_t>& dims,
                 std::span<const int64_t> values);
// Dataset of fixed-length strings.
void WriteStrings(hid_t location, const std::string& name, const std::vector<std::string>& values);

// Scalar attributes on an object. Throw std::runtime_error.
void WriteAttribute(hid_t object, const std::string& name, double value);
void WriteAttribute(hid_t object, const std::string& name, int64_t value);
void WriteAttribute(hid_t object, const std::string& name, uint64_t value);
void WriteAttribute(hid_t object, const std::string& name, const std::string& value);

// Creates every missing group of an absolute path ("/xpcs/twotime"). Throws std::runtime_error.
void CreateGroups(hid_t file, const std::string& path);

}  // namespace homodyne::io_internal
