# ckpt_test(NAME SOURCES a_test.cc ... [LIBS lib ...] [LABELS l ...]
#           [TIMEOUT seconds] [COST seconds])
#
# COST: about how long the test runs, for the longest few. ctest starts
# tests in descending COST, so a long test starts first and the cores stay
# busy to the end of a parallel run, instead of one core running it alone
# after the short ones are done.
#
# Builds a GoogleTest binary and registers it with CTest. Every *_test.cc in
# the tree must be registered through this helper: the configure step fails
# otherwise (ckpt_check_all_tests_registered), so no test file silently never
# runs.
set_property(GLOBAL PROPERTY CKPT_REGISTERED_TESTS "")

function(ckpt_test name)
  if(NOT CKPT_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT;COST" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # The files of one test binary keep their own file-local helpers, often of
  # one name (kRows, Contains): never compiled as one (CMAKE_UNITY_BUILD).
  set_target_properties(${name} PROPERTIES UNITY_BUILD OFF)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gmock GTest::gtest
                                        GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                                          LABELS "${ARG_LABELS}")
  if(ARG_COST)
    set_tests_properties(${name} PROPERTIES COST ${ARG_COST})
  endif()
  foreach(src ${ARG_SOURCES})
    get_filename_component(abs ${src} ABSOLUTE)
    set_property(GLOBAL APPEND PROPERTY CKPT_REGISTERED_TESTS ${abs})
  endforeach()
endfunction()

function(ckpt_check_all_tests_registered)
  file(GLOB_RECURSE all_tests CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/*_test.cc
       ${PROJECT_SOURCE_DIR}/tools/*_test.cc
       ${PROJECT_SOURCE_DIR}/tests/*_test.cc)
  get_property(registered GLOBAL PROPERTY CKPT_REGISTERED_TESTS)
  foreach(t ${all_tests})
    if(NOT t IN_LIST registered)
      message(FATAL_ERROR "${t} is not registered with ckpt_test(): it would never run")
    endif()
  endforeach()
endfunction()

# The sanitizer runtime that /usr/bin/python3 (not instrumented) must load
# first to load an instrumented libckpt.so, in `var`; "" without
# CKPT_SANITIZE.
function(ckpt_python_preload var)
  set(path "")
  if(CKPT_SANITIZE)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      set(runtime libclang_rt.asan-x86_64.so)
    else()
      set(runtime libasan.so)
    endif()
    execute_process(
      COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${runtime}
      OUTPUT_VARIABLE path OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  set(${var} "${path}" PARENT_SCOPE)
endfunction()
