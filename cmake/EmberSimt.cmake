# Decides whether the SIMT flavour is built (EMBER_SIMT = AUTO | ON | OFF) and sets
# EMBER_WITH_SIMT; ember_add_simt_flavour(<target>) then compiles core/cuda/*.cu and kernels/cuda/*.cu with the C++
# compiler over ember's CUDA emulator (kernels/simt, docs/simt.md) into the library.
#
# AUTO builds it when boost.context and the CUDA headers are found and the real CUDA flavour is
# off. ON without them is a configure error naming what is missing; ON together with the real
# CUDA flavour is an error too (one library cannot hold both).
#
# The emulator's cuDNN shim (kernels/simt/cudnn_shim.cpp) is declared by the real <cudnn.h>: when
# that header is found (EMBER_SIMT_CUDNN), kernels/cuda/cudnn.cu is compiled with EMBER_HAVE_CUDNN=1
# and runs over the shim; without it, cudnn.cu keeps its "no cuDNN" stubs and configure says so.
#
# EMBER_SANITIZE=address|thread builds everything with ASan or TSan (the emulator then adds its
# fiber annotations; see docs/simt.md).

set(EMBER_SIMT "AUTO" CACHE STRING "Build the SIMT flavour (CUDA kernels on the CPU emulator): AUTO, ON, OFF")
set_property(CACHE EMBER_SIMT PROPERTY STRINGS AUTO ON OFF)
set(EMBER_SANITIZE "" CACHE STRING "Build with a sanitizer: address, thread or empty")
set_property(CACHE EMBER_SANITIZE PROPERTY STRINGS "" address thread)

if(EMBER_SANITIZE)
  if(NOT EMBER_SANITIZE MATCHES "^(address|thread)$")
    message(FATAL_ERROR "EMBER_SANITIZE must be address, thread or empty (got '${EMBER_SANITIZE}')")
  endif()
  add_compile_options(-fsanitize=${EMBER_SANITIZE} -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=${EMBER_SANITIZE})
endif()

set(EMBER_WITH_SIMT OFF)
string(TOUPPER "${EMBER_SIMT}" _ember_simt)
if(NOT _ember_simt MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "EMBER_SIMT must be AUTO, ON or OFF (got '${EMBER_SIMT}')")
endif()

if(NOT _ember_simt STREQUAL "OFF")
  if(EMBER_WITH_CUDA)
    if(_ember_simt STREQUAL "ON")
      message(FATAL_ERROR "EMBER_SIMT=ON and the real CUDA flavour (EMBER_CUDA) cannot be built together: "
                          "configure with -DEMBER_CUDA=OFF for the emulator, or -DEMBER_SIMT=OFF")
    endif()
  else()
    set(_missing "")
    find_path(EMBER_BOOST_CONTEXT_INCLUDE_DIR boost/context/detail/fcontext.hpp)
    find_library(EMBER_BOOST_CONTEXT_LIBRARY boost_context)
    if(NOT EMBER_BOOST_CONTEXT_INCLUDE_DIR OR NOT EMBER_BOOST_CONTEXT_LIBRARY OR NOT EXISTS "${EMBER_BOOST_CONTEXT_LIBRARY}")
      list(APPEND _missing "boost.context (libboost-context-dev: boost/context/detail/fcontext.hpp and libboost_context)")
    endif()
    find_package(CUDAToolkit QUIET)
    find_path(EMBER_CUDA_HEADERS_DIR cuda_runtime.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
              ENV CUDA_HOME PATH_SUFFIXES include)
    if(NOT EMBER_CUDA_HEADERS_DIR)
      list(APPEND _missing "the CUDA toolkit headers (cuda_runtime.h)")
    endif()
    if(_missing)
      if(_ember_simt STREQUAL "ON")
        string(REPLACE ";" ", " _m "${_missing}")
        message(FATAL_ERROR "EMBER_SIMT=ON but these were not found: ${_m}")
      endif()
      message(STATUS "ember: SIMT flavour off (missing: ${_missing})")
    else()
      set(EMBER_WITH_SIMT ON)
      find_path(EMBER_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${EMBER_CUDA_HEADERS_DIR}
                ENV CUDNN_ROOT PATH_SUFFIXES include)
      if(EMBER_CUDNN_INCLUDE_DIR)
        set(EMBER_SIMT_CUDNN ON)
        message(STATUS "ember: SIMT flavour with the cuDNN shim (${EMBER_CUDNN_INCLUDE_DIR}/cudnn.h)")
      else()
        set(EMBER_SIMT_CUDNN OFF)
        message(STATUS "ember: SIMT flavour without the cuDNN shim (cudnn.h not found): "
                       "kernels/cuda/cudnn.cu is built with EMBER_HAVE_CUDNN=0, the hand-written kernels serve")
      endif()
    endif()
  endif()
endif()

# The compile settings every SIMT translation unit needs (the library and tests/cuda, tests/simt).
function(ember_simt_compile_settings target)
  target_compile_definitions(${target} PRIVATE EMBER_SIMT=1 EMBER_CUDA_BACKEND=1)
  if(EMBER_SANITIZE STREQUAL "thread")
    target_compile_definitions(${target} PRIVATE EMBER_SIMT_WITH_TSAN=1)
  endif()
  target_include_directories(${target} PRIVATE ${EMBER_CUDA_HEADERS_DIR} ${EMBER_BOOST_CONTEXT_INCLUDE_DIR})
endfunction()

# .cu files compiled as C++ (LANGUAGE CXX, and -x c++ so that g++ does not take them for linker
# input).
function(ember_simt_cu_sources)
  set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
endfunction()

function(ember_add_simt_flavour target)
  file(GLOB _cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/cuda/*.cu ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
  file(GLOB _emulator CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/simt/*.cpp)
  ember_simt_cu_sources(${_cu})
  if(EMBER_SANITIZE STREQUAL "thread")
    # The scheduler's own bookkeeping must be invisible to TSan (it annotates instead). The NCCL
    # shim runs no fibers, and its ranks are real threads: TSan checks it like any other code.
    set(_uninstrumented ${_emulator})
    list(FILTER _uninstrumented EXCLUDE REGEX "/nccl_(shim|reduce)\\.cpp$")
    set_source_files_properties(${_uninstrumented} PROPERTIES COMPILE_OPTIONS "-fno-sanitize=thread")
  endif()
  if(NOT EMBER_SIMT_CUDNN)
    list(FILTER _emulator EXCLUDE REGEX "/cudnn_shim(_conv)?\\.cpp$")
  endif()
  target_sources(${target} PRIVATE ${_cu} ${_emulator})
  if(EMBER_SIMT_CUDNN)
    # Only the files that include <cudnn.h> see it (the rest of the library is unchanged).
    set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cuda/cudnn.cu PROPERTIES
      COMPILE_DEFINITIONS EMBER_HAVE_CUDNN=1 INCLUDE_DIRECTORIES ${EMBER_CUDNN_INCLUDE_DIR})
    set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/simt/cudnn_shim.cpp
      ${PROJECT_SOURCE_DIR}/kernels/simt/cudnn_shim_conv.cpp PROPERTIES INCLUDE_DIRECTORIES ${EMBER_CUDNN_INCLUDE_DIR})
  endif()
  # The NCCL communicator runs over the emulator's NCCL shim (kernels/simt/nccl_shim.cpp).
  set_source_files_properties(${PROJECT_SOURCE_DIR}/parallel/nccl_communicator.cpp PROPERTIES
    COMPILE_DEFINITIONS EMBER_NCCL=1)
  set(EMBER_WITH_NCCL ON PARENT_SCOPE)
  ember_simt_compile_settings(${target})
  target_link_libraries(${target} PRIVATE ${EMBER_BOOST_CONTEXT_LIBRARY})
endfunction()
