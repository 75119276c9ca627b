# `cmake --install`: besides the programs (src/cli) and the Python module (python/), the
# libraries, the public headers and a package config, so that a C++ program finds the engine
# with find_package(homodyne) and links homodyne::pipeline (the whole fit, homodyne/fit.h) or a
# lower layer (homodyne::model, homodyne::io, ...; their headers are not installed). tests/install/ checks it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# homodyne_internal carries only the build tree's src/ include path: exported empty.
set(homodyne_exported_targets homodyne_build_settings homodyne_internal homodyne_base
    homodyne_hdf5
    homodyne_model homodyne_config homodyne_io homodyne_distributed homodyne_objective
    homodyne_optimize
    homodyne_checkpoint homodyne_pipeline)
if(HOMODYNE_WITH_CUDA)
  list(APPEND homodyne_exported_targets homodyne_cuda)  # homodyne_objective links it
endif()
foreach(target IN LISTS homodyne_exported_targets)
  string(REPLACE "homodyne_" "" exported_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${exported_name})
endforeach()
install(TARGETS ${homodyne_exported_targets} EXPORT homodyneTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/homodyne DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(homodyne_config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/homodyne)
install(EXPORT homodyneTargets NAMESPACE homodyne:: DESTINATION ${homodyne_config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/homodyneConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/homodyneConfig.cmake
                              INSTALL_DESTINATION ${homodyne_config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/homodyneConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/homodyneConfig.cmake
              ${PROJECT_BINARY_DIR}/homodyneConfigVersion.cmake
        DESTINATION ${homodyne_config_dir})
