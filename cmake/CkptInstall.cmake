# What `cmake --install BUILD --prefix P` puts under P, for programs outside
# this tree (docs/cpp.md, "From another project"); GNUInstallDirs' folders,
# shown here for a prefix other than /usr:
#
#   include/ckpt/*.h                 the public headers
#   lib/libckpt_cxx.so               the C++ API: every layer
#   lib/libckpt_cxx_mpi.so           its MPI communicator (where MPI is found)
#   lib/libckpt.so, libckpt_mpi.so   the C API (include/ckpt/c.h, c_mpi.h)
#   lib/cmake/ckpt/                  find_package(ckpt): ckpt::ckpt, and
#                                    ckpt::ckpt_mpi (component mpi); C:
#                                    ckpt::c, ckpt::c_mpi
#   lib/pkgconfig/ckpt.pc            pkg-config --cflags --libs ckpt
#   bin/ckpt                         the command-line tool
#
# The libraries find each other through RUNPATH $ORIGIN; a program finds
# them through its own RUNPATH (CMake sets one in its build tree) or
# LD_LIBRARY_PATH. Nothing refers back to the source or build tree, so the
# prefix can be moved.
include(CMakePackageConfigHelpers)
include(${PROJECT_SOURCE_DIR}/cmake/CkptPic.cmake)

# libckpt_cxx.so: the layers' archives (target ckpt), each taken whole,
# since nothing in the library itself calls what a program will. The public
# headers include only the standard library and each other, so a program
# needs nothing else to compile against it, and the library's own
# dependencies (libcurl, OpenSSL, SQLite, libpq, xxHash) are its DT_NEEDED
# entries. Unlike libckpt.so it exports C++ and links libstdc++ shared, as
# its callers do; its soname carries the whole version, as the C++ ABI
# (class layouts, inline functions) may change with any release.
ckpt_static_closure(ckpt ckpt_layers)
string(JOIN "," ckpt_whole_layers WHOLE_ARCHIVE ${ckpt_layers})
# CMake wants a source of the library's own.
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/ckpt_cxx.cc
     CONTENT "// libckpt_cxx.so: the layers' archives (cmake/CkptInstall.cmake)\n")
add_library(ckpt_cxx SHARED ${PROJECT_BINARY_DIR}/ckpt_cxx.cc)
target_link_libraries(ckpt_cxx PRIVATE ckpt)
target_include_directories(ckpt_cxx PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(ckpt_cxx PUBLIC cxx_std_20)
set_target_properties(ckpt_cxx PROPERTIES
  EXPORT_NAME ckpt
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION}
  LINK_LIBRARY_OVERRIDE "${ckpt_whole_layers}")
if(NOT CKPT_SANITIZE AND NOT CKPT_TSAN)
  # A symbol that no library resolves fails here, not in a user's link.
  target_link_options(ckpt_cxx PRIVATE -Wl,--no-undefined)
endif()

install(DIRECTORY include/ckpt TYPE INCLUDE)
install(TARGETS ckpt_cxx ckpt_c EXPORT ckptTargets)
install(TARGETS ckpt_cli)
install(EXPORT ckptTargets NAMESPACE ckpt::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)

# libckpt_cxx_mpi.so: mpi_communicator.cc over libckpt_cxx.so (the archive
# ckpt_mpi would bring a second copy of the layers below it). Its header
# includes <mpi.h>, so its target carries MPI's: a separate export, which
# ckptConfig.cmake loads only where MPI is found again.
set(CKPT_INSTALL_MPI OFF)
if(TARGET ckpt_mpi)
  set(CKPT_INSTALL_MPI ON)
  # MPI::MPI_C, imported in src/dist's scope.
  find_package(MPI REQUIRED COMPONENTS C)
  add_library(ckpt_cxx_mpi SHARED
              ${PROJECT_SOURCE_DIR}/src/dist/mpi_communicator.cc)
  target_link_libraries(ckpt_cxx_mpi PUBLIC ckpt_cxx MPI::MPI_C)
  target_compile_definitions(ckpt_cxx_mpi PUBLIC OMPI_SKIP_MPICXX=1
                                                 MPICH_SKIP_MPICXX=1)
  set_target_properties(ckpt_cxx_mpi PROPERTIES
    EXPORT_NAME ckpt_mpi
    VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION}
    INSTALL_RPATH "$ORIGIN")
  set_target_properties(ckpt_c_mpi PROPERTIES
    EXPORT_NAME c_mpi
    INSTALL_RPATH "$ORIGIN")
  install(TARGETS ckpt_cxx_mpi ckpt_c_mpi EXPORT ckptMpiTargets)
  install(EXPORT ckptMpiTargets NAMESPACE ckpt::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)
endif()
set_target_properties(ckpt_c PROPERTIES EXPORT_NAME c)

configure_package_config_file(cmake/ckptConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ckptConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)
# 0.x: a minor release may change the C++ API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ckptConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ckptConfig.cmake
              ${PROJECT_BINARY_DIR}/ckptConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)

# ckpt.pc names its prefix relative to its own folder (pkg-config's
# pcfiledir), so that it holds wherever the prefix is installed or moved.
file(RELATIVE_PATH CKPT_PC_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" CKPT_PC_PREFIX "${CKPT_PC_PREFIX}")
configure_file(cmake/ckpt.pc.in ${PROJECT_BINARY_DIR}/ckpt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/ckpt.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
