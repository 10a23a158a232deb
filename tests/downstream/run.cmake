# The package test (ctest: package:downstream). Run in script mode:
#
#   cmake -DEMBER_BUILD_DIR=<ember build> -DDOWNSTREAM_SOURCE_DIR=<this dir> -DWORK_DIR=<scratch>
#         [-DCMAKE_GENERATOR=<generator>] -P run.cmake
#
# It proves that a user can consume ember the documented way (cmake --install, then
# find_package(ember) + ember::ember) with both kinds of library, both linked by the build under
# test from the objects it compiled (the top-level CMakeLists.txt: ember and ember_other_kind), so
# nothing is compiled again here:
#   1. static: installs the build under test (static by default) into WORK_DIR/prefix-static,
#      then configures, builds and runs tests/downstream against it;
#   2. shared: installs the build's other kind (`cmake --install --component other_kind`, its
#      libember.so) into WORK_DIR/prefix-shared, then builds and runs tests/downstream against
#      that, and checks with ldd that the app loads that libember.so.
# (If the build under test is itself a shared build, the roles swap: its own install is the shared
# library and the other kind is the static one.)
# Each step that fails stops the script with a message that names the step and shows its output.

cmake_minimum_required(VERSION 3.22)

foreach(var EMBER_BUILD_DIR DOWNSTREAM_SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "package:downstream: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${EMBER_BUILD_DIR}/CMakeCache.txt")
  message(FATAL_ERROR "package:downstream: ${EMBER_BUILD_DIR} is not a configured ember build (no CMakeCache.txt)")
endif()

# Settings of the build under test that the downstream builds should share.
load_cache("${EMBER_BUILD_DIR}" READ_WITH_PREFIX _ember_
  CMAKE_BUILD_TYPE CMAKE_CXX_COMPILER CMAKE_C_COMPILER CMAKE_MAKE_PROGRAM)
set(_build_type "${_ember_CMAKE_BUILD_TYPE}")
if(NOT _build_type)
  set(_build_type Release)
endif()

set(_generator_args "")
if(CMAKE_GENERATOR)
  list(APPEND _generator_args -G "${CMAKE_GENERATOR}")
  if(_ember_CMAKE_MAKE_PROGRAM)
    list(APPEND _generator_args "-DCMAKE_MAKE_PROGRAM=${_ember_CMAKE_MAKE_PROGRAM}")
  endif()
endif()
set(_compiler_args "-DCMAKE_BUILD_TYPE=${_build_type}")
if(_ember_CMAKE_CXX_COMPILER)
  list(APPEND _compiler_args "-DCMAKE_CXX_COMPILER=${_ember_CMAKE_CXX_COMPILER}")
endif()
if(_ember_CMAKE_C_COMPILER)
  list(APPEND _compiler_args "-DCMAKE_C_COMPILER=${_ember_CMAKE_C_COMPILER}")
endif()
# Never pick up an ember from the user's package registry or the system: only the prefix given.
set(_isolation_args -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)

file(MAKE_DIRECTORY "${WORK_DIR}")

# Runs a command; on failure stops with the step name, the command and its output.
function(run_step name)
  string(REPLACE ";" " " _cmd "${ARGN}")
  message(STATUS "package:downstream: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package:downstream: step '${name}' FAILED (exit ${rc})\n"
                        "  command: ${_cmd}\n"
                        "---- output ----\n${out}\n---- end of output ----")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

# Configures, builds and runs the downstream app against `prefix`; checks that find_package
# found ember in that prefix and not somewhere else.
function(build_and_run_app flavour prefix)
  set(app_dir "${WORK_DIR}/app-${flavour}")
  file(REMOVE_RECURSE "${app_dir}")
  run_step("${flavour}: configure the downstream project against ${prefix}"
    ${CMAKE_COMMAND} -S "${DOWNSTREAM_SOURCE_DIR}" -B "${app_dir}" ${_generator_args} ${_compiler_args}
      ${_isolation_args} "-DCMAKE_PREFIX_PATH=${prefix}")
  load_cache("${app_dir}" READ_WITH_PREFIX _app_ ember_DIR)
  file(REAL_PATH "${prefix}" real_prefix)
  file(REAL_PATH "${_app_ember_DIR}" real_ember_dir)
  string(FIND "${real_ember_dir}" "${real_prefix}/" pos)
  if(NOT pos EQUAL 0)
    message(FATAL_ERROR "package:downstream: ${flavour}: find_package(ember) found '${_app_ember_DIR}', "
                        "not the package installed in ${prefix}")
  endif()
  run_step("${flavour}: build the downstream project" ${CMAKE_COMMAND} --build "${app_dir}")
  set(app "${app_dir}/app")
  if(NOT EXISTS "${app}")
    message(FATAL_ERROR "package:downstream: ${flavour}: the build produced no executable at ${app}")
  endif()
  run_step("${flavour}: run the downstream app" "${app}")
  string(STRIP "${STEP_OUTPUT}" _out)
  message(STATUS "package:downstream: ${flavour}: app output:\n${_out}")
  if(NOT STEP_OUTPUT MATCHES "downstream: PASS")
    message(FATAL_ERROR "package:downstream: ${flavour}: the app exited 0 but did not print PASS:\n${STEP_OUTPUT}")
  endif()
endfunction()

# Checks that an install prefix holds the library of the given kind.
function(check_installed_library kind prefix)
  if(kind STREQUAL "static")
    file(GLOB_RECURSE libs "${prefix}/lib*/libember.a")
  else()
    file(GLOB_RECURSE libs "${prefix}/lib*/libember.so")
  endif()
  if(NOT libs)
    message(FATAL_ERROR "package:downstream: ${kind}: cmake --install put no ${kind} libember under ${prefix}")
  endif()
endfunction()

# The build under test is normally static (the default); if it was configured with
# BUILD_SHARED_LIBS=ON, it provides the shared install and its other kind is the static one.
load_cache("${EMBER_BUILD_DIR}" READ_WITH_PREFIX _ember_ BUILD_SHARED_LIBS)
if(_ember_BUILD_SHARED_LIBS)
  set(kind_tested shared)
  set(kind_other static)
else()
  set(kind_tested static)
  set(kind_other shared)
endif()

# ---- 1. install the build under test ----------------------------------------------------------
set(prefix_tested "${WORK_DIR}/prefix-${kind_tested}")
file(REMOVE_RECURSE "${prefix_tested}")
run_step("${kind_tested}: cmake --install ${EMBER_BUILD_DIR}"
  ${CMAKE_COMMAND} --install "${EMBER_BUILD_DIR}" --prefix "${prefix_tested}")
check_installed_library(${kind_tested} "${prefix_tested}")
build_and_run_app(${kind_tested} "${prefix_tested}")

# ---- 2. the other kind of library, linked by the same build from the same objects --------------
set(prefix_other "${WORK_DIR}/prefix-${kind_other}")
file(REMOVE_RECURSE "${prefix_other}")
run_step("${kind_other}: cmake --install ${EMBER_BUILD_DIR} --component other_kind"
  ${CMAKE_COMMAND} --install "${EMBER_BUILD_DIR}" --component other_kind --prefix "${prefix_other}")
check_installed_library(${kind_other} "${prefix_other}")
build_and_run_app(${kind_other} "${prefix_other}")

# ---- the shared app must really load the installed libember.so --------------------------------
# (found through the RPATH CMake gives an executable linked against a library outside its build
# tree), not a static copy, nor a libember.so from somewhere else.
set(prefix_shared "${WORK_DIR}/prefix-shared")
find_program(_ldd ldd)
if(_ldd)
  execute_process(COMMAND "${_ldd}" "${WORK_DIR}/app-shared/app" OUTPUT_VARIABLE _ldd_out ERROR_VARIABLE _ldd_out)
  string(REGEX MATCH "libember\\.so[^\n]*" _line "${_ldd_out}")
  file(REAL_PATH "${prefix_shared}" _real_prefix_shared)
  string(FIND "${_line}" "=> ${prefix_shared}/" _p1)
  string(FIND "${_line}" "=> ${_real_prefix_shared}/" _p2)
  if(_p1 EQUAL -1 AND _p2 EQUAL -1)
    message(FATAL_ERROR "package:downstream: shared: the app does not load libember.so from ${prefix_shared}:\n${_ldd_out}")
  endif()
  message(STATUS "package:downstream: shared: ${_line}")
endif()

message(STATUS "package:downstream: PASS (static and shared installs both work with find_package(ember))")
