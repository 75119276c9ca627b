# Every dependency is a Debian package (scripts/install-dependencies.sh); nothing is downloaded.
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(yaml-cpp REQUIRED)
find_package(liblzf REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 QUIET CONFIG)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(Ceres REQUIRED)
# Global phase (src/optimize): Boost's header-only Sobol generator (start_sampling.cc) and pagmo2's
# CMA-ES (pagmo_bridge.cc, the only file that includes pagmo; its target is Pagmo::pagmo).
find_package(Boost REQUIRED)
find_package(Pagmo REQUIRED)
if(NOT CLI11_FOUND)
  find_path(HOMODYNE_CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${HOMODYNE_CLI11_INCLUDE_DIR})
endif()

# HDF5 as one imported target.
add_library(homodyne_hdf5 INTERFACE)
target_include_directories(homodyne_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(homodyne_hdf5 INTERFACE ${HDF5_C_LIBRARIES} ${HDF5_LIBRARIES})
target_compile_definitions(homodyne_hdf5 INTERFACE ${HDF5_DEFINITIONS})

# MPI (HOMODYNE_MPI): one fit on the ranks of an MPI job (src/distributed/, docs/design.md section
# 5b). Only the C bindings, so Open MPI and MPICH both serve. AUTO: on when found.
set(HOMODYNE_WITH_MPI OFF)
if(NOT HOMODYNE_MPI STREQUAL "OFF")
  if(HOMODYNE_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI QUIET COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(HOMODYNE_WITH_MPI ON)
  endif()
endif()
message(STATUS "homodyne: MPI ${HOMODYNE_WITH_MPI} (HOMODYNE_MPI=${HOMODYNE_MPI})")
