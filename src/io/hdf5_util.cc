// RAII helpers over the HDF5 C API (see hdf5_util.h).
#include "io/hdf5_util.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <type_traits>

namespace homodyne::io_internal {

void InitializeHdf5() {
  static std::once_flag once;
  std::call_once(once, [] {
    // No cleanup at process exit: after a failed write (full disk, quota, file size limit) HDF5
    // 1.10 keeps the half-closed file in its tables, and its exit handler then crashes
    // (SIGSEGV in H5F__close_cb) after the error was reported, turning exit status 1 into 139.
    // Every file is closed by its owner (Hid) before exit, so the handler has nothing to do
    // otherwise. Only effective before the library starts: a no-op when someone else (h5py in
    // the same Python process) initialised HDF5 first.
    H5dont_atexit();
    H5open();
    // Failures are translated into DataError; HDF5 must not print its stack to stderr.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    RegisterLzfFilter();
    // HDF5 keeps freed type-conversion buffers on free lists, one per block size; row reads of a
    // triangle have a different width every time, so unbounded lists grow with the file (seen:
    // 4 GB RSS scanning a 4 GB file). Cap them (bytes: global and per list, for the regular,
    // array and block lists) so reading stays constant-memory.
    constexpr int kListLimitBytes = 4 << 20;
    constexpr int kGlobalLimitBytes = 16 << 20;
    H5set_free_list_limits(kGlobalLimitBytes, kListLimitBytes, kGlobalLimitBytes, kListLimitBytes,
                           kGlobalLimitBytes, kListLimitBytes);
  });
  // In a thread-safe HDF5 build (Debian's) error stacks and their printing are per thread: the
  // call above silenced only the first thread.
  thread_local const bool silenced = H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
  static_cast<void>(silenced);
}

namespace {
// A failed write's description is a paragraph ("file write failed: time = ..., filename = ...,
// errno = 28, error message = 'No space left on device', buf = ..."): keep the OS reason only.
std::string ShortDescription(const std::string& description) {
  static const std::string kMarker = "error message = '";
  const size_t begin = description.find(kMarker);
  if (begin == std::string::npos) return description;
  const size_t reason = begin + kMarker.size();
  const size_t end = description.find('\'', reason);
  if (end == std::string::npos) return description;
  const size_t colon = description.find(':');
  const std::string what = colon < begin ? description.substr(0, colon) : "write failed";
  return what + ": " + description.substr(reason, end - reason);
}

herr_t CollectErrorDescription(unsigned n, const H5E_error2_t* error, void* client) {
  auto* text = static_cast<std::string*>(client);
  if (error->desc == nullptr || error->desc[0] == '\0') return 0;
  if (n < 3) {  // the innermost few entries say what really failed
    if (!text->empty()) *text += "; ";
    *text += ShortDescription(error->desc);
  }
  return 0;
}
}  // namespace

std::string Hdf5ErrorText() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, CollectErrorDescription, &text);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

Hid& Hid::operator=(Hid&& other) noexcept {
  if (this != &other) {
    static_cast<void>(Close());
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

herr_t Hid::Close() {
  herr_t status = 0;
  if (id_ >= 0 && closer_ != nullptr) status = closer_(id_);
  id_ = -1;
  return status;
}

bool PathExists(hid_t file, const std::string& path) {
  if (path.empty() || path[0] != '/') return false;
  size_t position = 1;
  while (position <= path.size()) {
    size_t next = path.find('/', position);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (H5Oexists_by_name(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;  // dangling
    position = next + 1;
  }
  return true;
}

namespace {
herr_t CollectName(hid_t /*group*/, const char* name, const H5L_info_t* /*info*/, void* client) {
  static_cast<std::vector<std::string>*>(client)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> GroupMemberNames(hid_t group) {
  std::vector<std::string> names;
  hsize_t index = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, CollectName, &names) < 0) {
    throw std::runtime_error("cannot list group members: " + Hdf5ErrorText());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<hsize_t> DatasetDims(hid_t dataset) {
  Hid space = SpaceHid(H5Dget_space(dataset));
  if (!space.valid()) throw std::runtime_error("cannot get dataspace: " + Hdf5ErrorText());
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw std::runtime_error("cannot get rank: " + Hdf5ErrorText());
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    throw std::runtime_error("cannot get dims: " + Hdf5ErrorText());
  }
  return dims;
}

namespace {
template <typename T>
std::vector<T> ReadAll(hid_t file, const std::string& path, hid_t memory_type) {
  Hid dataset = DatasetHid(H5Dopen2(file, path.c_str(), H5P_DEFAULT));
  if (!dataset.valid()) throw std::runtime_error("cannot open " + path + ": " + Hdf5ErrorText());
  hsize_t count = 1;
  for (hsize_t d : DatasetDims(dataset.get())) count *= d;
  if (count > (hsize_t{1} << 28)) throw std::runtime_error(path + " is implausibly large");
  std::vector<T> values(count);
  if (count > 0 &&
      H5Dread(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
    throw std::runtime_error("cannot read " + path + ": " + Hdf5ErrorText());
  }
  return values;
}

void WriteArray(hid_t location, const std::string& name, const std::vector<hsize_t>& dims,
                hid_t file_type, hid_t memory_type, const void* values) {
  Hid space = SpaceHid(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Hid dataset = DatasetHid(H5Dcreate2(location, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT));
  if (!space.valid() || !dataset.valid() ||
      H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0 ||
      dataset.Close() < 0) {
    throw std::runtime_error("cannot write dataset " + name + ": " + Hdf5ErrorText());
  }
}

void WriteScalarAttribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                          const void* value) {
  Hid space = SpaceHid(H5Screate(H5S_SCALAR));
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  Hid attribute = AttributeHid(
      H5Acreate2(object, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attribute.valid() || H5Awrite(attribute.get(), memory_type, value) < 0 ||
      attribute.Close() < 0) {
    throw std::runtime_error("cannot write attribute " + name + ": " + Hdf5ErrorText());
  }
}
}  // namespace

std::vector<double> ReadAllDoubles(hid_t file, const std::string& path) {
  return ReadAll<double>(file, path, H5T_NATIVE_DOUBLE);
}

std::vector<int64_t> ReadAllInt64(hid_t file, const std::string& path) {
  return ReadAll<int64_t>(file, path, H5T_NATIVE_INT64);
}

void WriteDoubles(hid_t location, const std::string& name, const std::vector<hsize_t>& dims,
                  std::span<const double> values, hid_t file_type) {
  WriteArray(location, name, dims, file_type, H5T_NATIVE_DOUBLE, values.data());
}

void WriteInt64s(hid_t location, const std::string& name, const std::vector<hsize_t>& dims,
                 std::span<const int64_t> values) {
  WriteArray(location, name, dims, H5T_STD_I64LE, H5T_NATIVE_INT64, values.data());
}

void WriteStrings(hid_t location, const std::string& name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const std::string& value : values) width = std::max(width, value.size() + 1);
  std::vector<char> packed(width * values.size(), '\0');
  for (size_t k = 0; k < values.size(); ++k) {
    std::copy(values[k].begin(), values[k].end(), packed.begin() + static_cast<long>(k * width));
  }
  Hid type = TypeHid(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), width);
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  WriteArray(location, name, {values.size()}, type.get(), type.get(), packed.data());
}

void WriteAttribute(hid_t object, const std::string& name, double value) {
  WriteScalarAttribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void WriteAttribute(hid_t object, const std::string& name, int64_t value) {
  WriteScalarAttribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void WriteAttribute(hid_t object, const std::string& name, uint64_t value) {
  WriteScalarAttribute(object, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

void WriteAttribute(hid_t object, const std::string& name, const std::string& value) {
  Hid type = TypeHid(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  WriteScalarAttribute(object, name, type.get(), type.get(), padded.data());
}

void CreateGroups(hid_t file, const std::string& path) {
  size_t position = 1;
  while (position <= path.size()) {
    size_t next = path.find('/', position);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      Hid group = GroupHid(H5Gcreate2(file, prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      if (!group.valid()) {
        throw std::runtime_error("cannot create group " + prefix + ": " + Hdf5ErrorText());
      }
    }
    position = next + 1;
  }
}

template <typename T>
void ReadRectangle(hid_t dataset, int64_t row, int64_t rows, int64_t col, int64_t cols, T* out) {
  const hid_t memory_type = std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  Hid file_space = SpaceHid(H5Dget_space(dataset));
  Hid memory_space = SpaceHid(H5Screate_simple(2, count, nullptr));
  if (!file_space.valid() || !memory_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dread(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0) {
    throw std::runtime_error(Hdf5ErrorText());
  }
  // Return HDF5's freed conversion buffers (one free list per block size, and every row range
  // has its own size) so memory stays constant over a whole pass.
  H5garbage_collect();
}

template void ReadRectangle<float>(hid_t, int64_t, int64_t, int64_t, int64_t, float*);
template void ReadRectangle<double>(hid_t, int64_t, int64_t, int64_t, int64_t, double*);

}  // namespace homodyne::io_internal
