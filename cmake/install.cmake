# Install rules: `cmake --install <build> --prefix P` makes cloudtune usable like any library.
#
#   P/bin/cloudtune                           the offline CLI (always built)
#   P/lib/libcloudtune_plugin.so              the plugin (LibTorch builds only)
#   P/include/cloudtune/*.h                   its public API (LibTorch builds only)
#   P/lib/cmake/cloudtune/cloudtune*.cmake    find_package(cloudtune CONFIG): cloudtune::plugin,
#                                             cloudtune::cli and the variable cloudtune_CLI
#   P/share/cloudtune/paths.json              where the above are, relative to P, for the Python
#                                             package (python/cloudtune) to find them
#
# Included once, at the end of the top-level CMakeLists.txt, after every target exists. Only the
# plugin and the CLI are installed: the static libraries (core, estimator, search, runtime, hooks)
# are linked into them and reach the plugin only through $<BUILD_INTERFACE:...>, so the exported
# cloudtune::plugin needs LibTorch and nothing else of ours.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CLOUDTUNE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/cloudtune" CACHE STRING
    "Where cloudtuneConfig.cmake is installed, relative to the install prefix")
mark_as_advanced(CLOUDTUNE_INSTALL_CMAKEDIR)

# Installed binaries keep the directories of the libraries they link that are outside the system
# linker paths (e.g. a LibTorch unpacked under /opt) in their RPATH, so they load without
# LD_LIBRARY_PATH; Debian's libtorch is in the system lib dir, which adds nothing.
set_target_properties(cloudtune PROPERTIES EXPORT_NAME cli INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS cloudtune EXPORT cloudtuneTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Paths in paths.json are relative to the prefix, so an installed tree can be moved.
set(_cloudtune_paths "\"version\": \"${PROJECT_VERSION}\"")
string(APPEND _cloudtune_paths
       ",\n  \"cli\": \"${CMAKE_INSTALL_BINDIR}/$<TARGET_FILE_NAME:cloudtune>\"")

if(CLOUDTUNE_HAVE_TORCH)
  set_target_properties(cloudtune_plugin PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS cloudtune_plugin EXPORT cloudtuneTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cloudtune
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
  # plugin/torch/CMakeLists.txt exports the include directory as <prefix>/include; follow a
  # different CMAKE_INSTALL_INCLUDEDIR too.
  if(NOT CMAKE_INSTALL_INCLUDEDIR STREQUAL "include")
    target_include_directories(cloudtune_plugin INTERFACE
                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endif()
  string(APPEND _cloudtune_paths
         ",\n  \"library\": \"${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:cloudtune_plugin>\"")
  string(APPEND _cloudtune_paths ",\n  \"include\": \"${CMAKE_INSTALL_INCLUDEDIR}\"")
endif()

install(EXPORT cloudtuneTargets
        NAMESPACE cloudtune::
        FILE cloudtuneTargets.cmake
        DESTINATION ${CLOUDTUNE_INSTALL_CMAKEDIR})

# cloudtuneConfig.cmake: find_dependency(Torch) when the plugin is installed, then the targets.
# CLOUDTUNE_INSTALL_CLI is a PATH_VAR so the config computes cloudtune_CLI from its own location.
set(CLOUDTUNE_INSTALL_CLI "${CMAKE_INSTALL_BINDIR}/cloudtune${CMAKE_EXECUTABLE_SUFFIX}")
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/cloudtuneConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cloudtuneConfig.cmake
  INSTALL_DESTINATION ${CLOUDTUNE_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CLOUDTUNE_INSTALL_CLI)
# Pre-1.0: a consumer asking for 0.1 accepts 0.1.x only.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cloudtuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
          ${PROJECT_BINARY_DIR}/cloudtuneConfig.cmake
          ${PROJECT_BINARY_DIR}/cloudtuneConfigVersion.cmake
        DESTINATION ${CLOUDTUNE_INSTALL_CMAKEDIR})

file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/cloudtune_paths.json
     CONTENT "{\n  ${_cloudtune_paths}\n}\n")
install(FILES ${PROJECT_BINARY_DIR}/cloudtune_paths.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/cloudtune
        RENAME paths.json)
unset(_cloudtune_paths)

# The report's plotting script (`cloudtune report` looks for it in ../share/cloudtune/report/ next
# to the binary).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scripts/report/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/cloudtune/report
        FILES_MATCHING PATTERN "*.py")
