// The homodyne modes, static and laminar_flow (docs/model.md): their ModePoint (mode_point.h).
#pragma once

#include <memory>
#include <span>

#include "homodyne/model.h"
#include "model/mode_point.h"

namespace homodyne {

// The model of a static or laminar_flow HomodyneModel at its physical parameters (3 or 7 values,
// PhysicalParameterNames order, phi0 in degrees). The mode catalog's builder for both modes.
std::unique_ptr<const ModePoint> MakeHomodynePoint(const HomodyneModel& model,
                                                   std::span<const double> physical_parameters);

}  // namespace homodyne
