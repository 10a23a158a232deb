# Decides whether the CUDA flavour is built (EMBER_CUDA = AUTO | ON | OFF) and sets EMBER_WITH_CUDA.
#
# AUTO builds it when nvcc, cuDNN and cuBLAS are all found; ON without them is a configure error
# that names what is missing. Until the CUDA backend lands, the CUDA flavour compiles
# kernels/cuda/*.cu (the shared __host__ __device__ functors and headers) with nvcc into an
# object library, so CUDA-facing code can never silently stop compiling.

set(EMBER_WITH_CUDA OFF)
string(TOUPPER "${EMBER_CUDA}" _ember_cuda)
if(NOT _ember_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "EMBER_CUDA must be AUTO, ON or OFF (got '${EMBER_CUDA}')")
endif()

if(NOT _ember_cuda STREQUAL "OFF")
  set(_missing "")
  if(CMAKE_CUDA_COMPILER AND NOT EXISTS "${CMAKE_CUDA_COMPILER}")
    # A compiler named on the command line that is not there: say so instead of letting
    # enable_language(CUDA) fail with a compiler-detection error.
    list(APPEND _missing "nvcc (CMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER} does not exist)")
  else()
    include(CheckLanguage)
    check_language(CUDA)
  endif()
  if(_missing)
    # already reported
  elseif(NOT CMAKE_CUDA_COMPILER)
    list(APPEND _missing "nvcc (the CUDA compiler)")
  else()
    find_package(CUDAToolkit QUIET)
    if(NOT TARGET CUDA::cublas)
      list(APPEND _missing "cuBLAS")
    endif()
    find_path(EMBER_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT PATH_SUFFIXES include)
    find_library(EMBER_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT PATH_SUFFIXES lib lib64)
    if(NOT EMBER_CUDNN_INCLUDE_DIR OR NOT EMBER_CUDNN_LIBRARY)
      list(APPEND _missing "cuDNN (cudnn.h and libcudnn)")
      unset(EMBER_CUDNN_LIBRARY CACHE)
    endif()
  endif()
  if(_missing)
    if(_ember_cuda STREQUAL "ON")
      string(REPLACE ";" ", " _m "${_missing}")
      message(FATAL_ERROR "EMBER_CUDA=ON but these were not found: ${_m}")
    endif()
    message(STATUS "ember: CUDA flavour off (missing: ${_missing})")
  else()
    set(EMBER_WITH_CUDA ON)
  endif()
endif()

if(EMBER_WITH_CUDA)
  enable_language(CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  # CMake 3.25 does not know that nvcc 12+ speaks C++20: tell it the flag.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  file(GLOB EMBER_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
  add_library(ember_cuda_compile_check OBJECT ${EMBER_CUDA_SOURCES})
  target_include_directories(ember_cuda_compile_check PRIVATE ${PROJECT_BINARY_DIR}/include ${EMBER_CUDNN_INCLUDE_DIR})
  target_compile_options(ember_cuda_compile_check PRIVATE --expt-relaxed-constexpr)
  # Optimizer steps must round like the CPU step (Note [Matching torch.optim bit for bit]): no FMA
  # contraction in that file. Guarded by language: the SIMT flavour compiles .cu files as C++.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cuda/optim.cu PROPERTIES
    COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>")
  target_link_libraries(ember_cuda_compile_check PRIVATE CUDA::cudart CUDA::cublas)
endif()
