# Decides whether the real CUDA flavour is built (EMBER_CUDA = AUTO | ON | OFF) and sets
# EMBER_WITH_CUDA; ember_add_cuda_flavour(<target>) then compiles core/cuda/*.cu and kernels/cuda/*.cu with nvcc into
# the library and links the CUDA runtime, cuBLAS and cuDNN.
#
# AUTO builds it when nvcc, cuDNN and cuBLAS are found AND a GPU is present (`nvidia-smi -L` lists
# one): a machine with the toolkit but no GPU gets the SIMT flavour instead (EmberSimt.cmake),
# which can run the kernels. ON needs no GPU (CI compiles the CUDA flavour on a GPU-less machine)
# but is a configure error naming whatever is missing of nvcc, cuBLAS and cuDNN.

option(EMBER_CUDA_PTXAS_VERBOSE "Print registers / shared memory per kernel (nvcc -Xptxas -v)" OFF)

set(EMBER_WITH_CUDA OFF)
string(TOUPPER "${EMBER_CUDA}" _ember_cuda)
if(NOT _ember_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "EMBER_CUDA must be AUTO, ON or OFF (got '${EMBER_CUDA}')")
endif()

set(_ember_gpu_present OFF)
if(_ember_cuda STREQUAL "AUTO")
  find_program(EMBER_NVIDIA_SMI nvidia-smi)
  if(EMBER_NVIDIA_SMI)
    execute_process(COMMAND ${EMBER_NVIDIA_SMI} -L OUTPUT_VARIABLE _smi RESULT_VARIABLE _smi_rc ERROR_QUIET)
    if(_smi_rc EQUAL 0 AND _smi MATCHES "GPU [0-9]+:")
      set(_ember_gpu_present ON)
    endif()
  endif()
  if(NOT _ember_gpu_present)
    message(STATUS "ember: CUDA flavour off (EMBER_CUDA=AUTO and no GPU: nvidia-smi -L lists none)")
  endif()
endif()

if(_ember_cuda STREQUAL "ON" OR _ember_gpu_present)
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
  # sm_90 (H100/H200) unless the user says otherwise (-DCMAKE_CUDA_ARCHITECTURES or $CUDAARCHS).
  # Set before enable_language(CUDA), which would otherwise pick nvcc's own default (sm_75, too
  # old for the bfloat16 tensor-core instructions of the kernel labs).
  if((NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "") AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  # CMake 3.25 does not know that nvcc 12+ speaks C++20: tell it the flag.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
endif()

# The real CUDA flavour of <target>: core/cuda/*.cu and kernels/cuda/*.cu compiled by nvcc into it, the CUDA runtime,
# cuBLAS and cuDNN linked. EMBER_CUDA_BACKEND=1 is private: public headers are the same in every
# flavour.
function(ember_add_cuda_flavour target)
  file(GLOB _cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/cuda/*.cu ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
  target_sources(${target} PRIVATE ${_cu})
  target_compile_definitions(${target} PRIVATE EMBER_CUDA_BACKEND=1)
  target_include_directories(${target} PRIVATE ${EMBER_CUDNN_INCLUDE_DIR})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
  if(EMBER_CUDA_PTXAS_VERBOSE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
  # Optimizer steps must round like the CPU step (Note [Matching torch.optim bit for bit]): no FMA
  # contraction in that file.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cuda/optim.cu PROPERTIES
    COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>")
  if(EMBER_CUDNN_LIBRARY)
    target_compile_definitions(${target} PRIVATE EMBER_HAVE_CUDNN=1)
  endif()
  target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublas ${EMBER_CUDNN_LIBRARY})
  # NCCL (parallel/nccl_communicator.cpp): optional; without it, data-parallel CUDA training goes
  # through MPI with host staging.
  find_path(EMBER_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_ROOT PATH_SUFFIXES include)
  find_library(EMBER_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_ROOT
               PATH_SUFFIXES lib lib64)
  if(EMBER_NCCL_INCLUDE_DIR AND EMBER_NCCL_LIBRARY)
    set(EMBER_WITH_NCCL ON PARENT_SCOPE)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/parallel/nccl_communicator.cpp PROPERTIES
      COMPILE_DEFINITIONS EMBER_NCCL=1 INCLUDE_DIRECTORIES ${EMBER_NCCL_INCLUDE_DIR})
    target_link_libraries(${target} PRIVATE ${EMBER_NCCL_LIBRARY})
  else()
    message(STATUS "ember: NCCL not found (nccl.h and libnccl): no NCCL communicator in this build")
  endif()
endfunction()
