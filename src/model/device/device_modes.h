// The modes the device passes compute (docs/design.md section 5; docs/adding-a-mode.md): one list,
// DeviceModes, from which the host emulation (src/objective/emulated_pass_backend.cc), the CUDA
// kernels (cuda/pass_kernels.cu) and the device inputs (src/objective/device_pass_inputs.cc) are
// instantiated, so that none of them names a mode.
//
// A device mode is a traits struct in its mode's folder (HomodyneDeviceMode,
// src/model/homodyne/homodyne_device.h; TwoComponentDeviceMode,
// src/model/two_component/two_component_device.h) with:
//   kName                 the mode's name, as ToString(AnalysisMode) (include/homodyne/model.h);
//   Tables, Angle, Shape  its tables at a point (passed by value to a kernel), one angle's terms
//                         (trivially copyable: copied to a device as bytes), and its Gram shape
//                         (kPhysical, kGramSize = kPhysical + 3, kTriangle);
//   TablesAt              the Tables over one array of doubles and the TableScalars (host or
//                         device memory);
//   Row, Cost             a point's row of [J | e] and its cost term (device_schedule.h);
//   MakeInputs            host only: the DeviceInputs at a point (the tables' scalars and array,
//                         the angles' terms), computed by the CPU model's own arithmetic.
// and optionally, for a full pass through per-frame sums (the static mode's, docs/design.md
// section 2; a mode without them builds every Gram point by point):
//   kDataSums             the partial sums a thread keeps of the points' data terms (> 0);
//   DataTerms             adds a point's data terms to them (device_schedule.h ThreadDataPartial);
//   GramFromDataSums      host only: a job's Gram from its data sums and the inputs' row_sums,
//                         where MakeInputs filled them (the point-by-point Gram where it did not).
// Written for nvcc's C++17 as well as the host compiler (contract of device_point.h).
#pragma once

#include <cstring>
#include <string>
#include <type_traits>

#include "model/device/device_point.h"
#include "model/device/device_schedule.h"
#include "model/homodyne/homodyne_device.h"
#include "model/two_component/two_component_device.h"

namespace homodyne::device_pass {

// A mode's kDataSums, 0 when it has none (no full pass through per-frame sums).
template <class Mode, class = void>
struct DataSumsOf {
  static constexpr int value = 0;
};
template <class Mode>
struct DataSumsOf<Mode, std::void_t<decltype(Mode::kDataSums)>> {
  static constexpr int value = Mode::kDataSums;
};

// A list of device modes; a mode's index in it identifies the mode in the device inputs and the
// CUDA runner.
template <class... Modes>
struct DeviceModeList {
  static constexpr int kCount = sizeof...(Modes);

  // The Gram side of mode `index` (0 <= index < kCount).
  static constexpr int GramSize(int index) {
    constexpr int sizes[] = {Modes::Shape::kGramSize...};
    return sizes[index];
  }

  // The data sums per thread of mode `index`'s full pass through per-frame sums (DataSumsOf; 0:
  // none).
  static constexpr int DataSums(int index) {
    constexpr int sums[] = {DataSumsOf<Modes>::value...};
    return sums[index];
  }

  // The largest Gram side of the modes.
  static constexpr int MaxGramSize() {
    int largest = 0;
    for (int size : {Modes::Shape::kGramSize...}) largest = size > largest ? size : largest;
    return largest;
  }

  // The index of the mode whose kName is `name`, or -1.
  static int IndexOf(const char* name) {
    const char* names[] = {Modes::kName...};
    for (int index = 0; index < kCount; ++index) {
      if (std::strcmp(names[index], name) == 0) return index;
    }
    return -1;
  }

  // The modes' names, "a, b, c", for messages.
  static std::string NameList() {
    std::string list;
    for (const char* name : {Modes::kName...})
      list += (list.empty() ? "" : ", ") + std::string(name);
    return list;
  }

  // Calls visitor(Mode()) for the mode at `index`; false (nothing called) when there is none.
  template <class Visitor>
  static bool Visit(int index, Visitor&& visitor) {
    int at = 0;
    return ((at++ == index ? (visitor(Modes()), true) : false) || ...);
  }
};

// The registration: every mode the device passes compute, one entry each.
using DeviceModes =
    DeviceModeList<HomodyneDeviceMode<false>, HomodyneDeviceMode<true>, TwoComponentDeviceMode>;

// The largest Gram side of a device mode (17: two_component's 14 physical parameters, contrast,
// offset and e). Each mode's kernels are their own instantiation, sized by the mode's own Gram
// side, so this bound costs the smaller modes no registers.
inline constexpr int kMaxGramSize = DeviceModes::MaxGramSize();

}  // namespace homodyne::device_pass
